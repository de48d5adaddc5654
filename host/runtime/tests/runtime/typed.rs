//! Components without Cordon's contract: tools derived from typed exports (the `typed`
//! fixture exports one function per kind of WIT type), called through the dynamic API.

use cordon_core::{CompiledSchema, Content, Limits, ToolErrorKind};
use cordon_runtime::{CallError, Plugin, Sandbox};
use serde_json::{Value, json};
use std::sync::OnceLock;

use crate::common::{call, load, shared};

fn typed() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| load("typed"))
}

fn typed_c() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| load("typed-c"))
}

/// The one JSON value a call returned.
async fn value(tool: &str, args: Value) -> Value {
    value_of(typed(), tool, args).await
}

async fn value_of(plugin: &Plugin, tool: &str, args: Value) -> Value {
    let out = call(plugin, &Sandbox::default(), tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool}({args}): {e}"));
    match out.content.as_slice() {
        [Content::Json(v)] => v.clone(),
        other => panic!("{tool}: {other:?}"),
    }
}

/// What a refused or failed call said.
async fn refusal(tool: &str, args: Value) -> (ToolErrorKind, String) {
    refusal_of(typed(), tool, args).await
}

async fn refusal_of(plugin: &Plugin, tool: &str, args: Value) -> (ToolErrorKind, String) {
    match call(plugin, &Sandbox::default(), tool, args.clone()).await {
        Err(CallError::Tool(e)) => (e.kind, e.message),
        other => panic!("{tool}({args}): {other:?}"),
    }
}

async fn schema_of(tool: &str) -> Value {
    let tools = typed().list_tools(&Limits::default()).await.unwrap();
    tools
        .into_iter()
        .find(|t| t.name == tool)
        .unwrap_or_else(|| panic!("no tool {tool}"))
        .input_schema
}

#[tokio::test]
async fn every_function_with_a_json_form_is_a_tool_and_the_rest_say_why_not() {
    let _s = shared();
    let tools = typed().list_tools(&Limits::default()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in [
        "greet",
        "calc_add",
        "calc_divide",
        "calc_noop",
        "kinds_echo_point",
        "kinds_echo_shape",
        "kinds_echo_color",
        "kinds_echo_perms",
        "kinds_echo_tuple",
        "kinds_echo_nested",
        "kinds_echo_lists",
        "kinds_echo_result",
        "kinds_echo_bools",
        "kinds_echo_floats",
        "kinds_echo_ints",
        "kinds_get_extremes",
        "kinds_not_a_number",
        "kinds_checked",
        "kinds_bytes",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    assert!(typed().has_typed_exports());
    let unavailable: Vec<(String, String)> = typed()
        .unavailable()
        .iter()
        .map(|u| (u.function.clone(), u.reason.clone()))
        .collect();
    let reason = |f: &str| {
        unavailable
            .iter()
            .find(|(name, _)| name.ends_with(f))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{f} not among {unavailable:?}"))
    };
    assert!(reason("#count").contains("parameter `c`: it passes a resource"));
    assert!(reason("#make-counter").contains("its result: it passes a resource"));
    assert!(reason("#[constructor]counter").contains("resource's constructor"));
    assert!(reason("#[method]counter.get").contains("resource's constructor, method"));
    assert!(!names.contains(&"kinds_count"));
    // Every schema is a valid JSON Schema; a record result is a structured result.
    for t in &tools {
        CompiledSchema::compile(&t.input_schema).unwrap_or_else(|e| panic!("{}: {e:?}", t.name));
    }
    let extremes = tools
        .iter()
        .find(|t| t.name == "kinds_get_extremes")
        .unwrap();
    let out = extremes
        .output_schema
        .as_ref()
        .expect("a record result has a schema");
    assert_eq!(out["properties"]["u64-max"]["maximum"], json!(u64::MAX));
    let add = tools.iter().find(|t| t.name == "calc_add").unwrap();
    assert_eq!(add.output_schema, None);
    assert_eq!(
        add.input_schema["properties"]["a"],
        json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX})
    );
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    let point = schema_of("kinds_echo_point").await;
    assert_eq!(point["properties"]["p"]["required"], json!(["x", "y"]));
}

#[tokio::test]
async fn values_of_every_kind_round_trip() {
    let _s = shared();
    assert_eq!(value("calc_add", json!({"a": 2, "b": 3})).await, json!(5));
    assert_eq!(
        value("calc_divide", json!({"a": 1, "b": 4})).await,
        json!(0.25)
    );
    assert_eq!(
        value("greet", json!({"name": "wörld 𝄞"})).await,
        json!("Hello, wörld 𝄞!")
    );
    let noop = call(typed(), &Sandbox::default(), "calc_noop", json!({}))
        .await
        .unwrap();
    assert!(noop.content.is_empty());
    for (tool, args) in echo_cases() {
        let given = args.as_object().unwrap().values().next().unwrap().clone();
        assert_eq!(value(tool, args.clone()).await, given, "{tool}({args})");
        // What the converter accepts, the derived schema accepts too.
        let schema = CompiledSchema::compile(&schema_of(tool).await).unwrap();
        schema
            .check(&args)
            .unwrap_or_else(|e| panic!("{tool}({args}): {e:?}"));
    }
    // An absent option field is `none`, which comes back as null.
    assert_eq!(
        value("kinds_echo_point", json!({"p": {"x": 1, "y": 2}})).await,
        json!({"x": 1, "y": 2, "label": null})
    );
    assert_eq!(
        value("kinds_echo_bools", json!({"a": true})).await,
        json!([true])
    );
    assert_eq!(
        value("kinds_echo_floats", json!({"a": 0.5, "b": -1e300})).await,
        json!([0.5, -1e300])
    );
    assert_eq!(
        value(
            "kinds_echo_ints",
            json!({"a": -128, "b": 255, "c": -32768, "d": 65535, "e": -2147483648i64,
                   "f": 4294967295u64, "g": i64::MIN, "h": 7})
        )
        .await,
        json!([
            -128,
            255,
            -32768,
            65535,
            -2147483648i64,
            4294967295u64,
            i64::MIN,
            7
        ])
    );
    assert_eq!(
        value("kinds_get_extremes", json!({})).await,
        json!({
            "u64-max": u64::MAX, "s64-min": i64::MIN, "s8-min": -128, "u8-max": 255,
            "f32-max": f64::from(f32::MAX), "f64-min": f64::MIN,
            "text": "ünïcødé ✓ 𝄞", "letter": "𝄞",
        })
    );
    // A top-level `result`: ok is the value, err the tool's error.
    assert_eq!(
        value("kinds_echo_result", json!({"r": {"ok": 7}})).await,
        json!(7)
    );
    assert_eq!(
        refusal("kinds_echo_result", json!({"r": {"err": "it broke"}})).await,
        (ToolErrorKind::Failed, "it broke".to_string())
    );
    assert_eq!(
        refusal("calc_divide", json!({"a": 1, "b": 0})).await,
        (ToolErrorKind::Failed, "cannot divide by zero".to_string())
    );
    assert_eq!(
        refusal("kinds_checked", json!({"n": 11})).await,
        (ToolErrorKind::Failed, "red".to_string())
    );
}

#[tokio::test]
async fn arguments_that_do_not_fit_are_refused_naming_where() {
    let _s = shared();
    let refused = [
        (
            "calc_add",
            json!({"a": 2147483648u64, "b": 0}),
            "at /a: 2147483648 is out of range for s32",
        ),
        (
            "calc_add",
            json!({"a": 1.5, "b": 0}),
            "at /a: expected an integer (s32), found the number 1.5",
        ),
        ("calc_add", json!({"a": 1}), "the field `b` is missing"),
        (
            "calc_add",
            json!({"a": 1, "b": 2, "c": 3}),
            "unknown field `c`; the fields are `a`, `b`",
        ),
        (
            "kinds_echo_point",
            json!({"p": {"x": 1}}),
            "at /p: the field `y` is missing",
        ),
        (
            "kinds_echo_point",
            json!({"p": {"x": 1, "y": -1}}),
            "at /p/y: -1 is out of range for u64",
        ),
        (
            "kinds_echo_shape",
            json!({"s": "circle"}),
            "case `circle` needs a value",
        ),
        (
            "kinds_echo_shape",
            json!({"s": {"oval": 1}}),
            "unknown case `oval`",
        ),
        (
            "kinds_echo_color",
            json!({"c": "pink"}),
            "expected one of `red`, `green`, `blue`",
        ),
        (
            "kinds_echo_perms",
            json!({"p": ["read", "read"]}),
            "at /p/1: the flag `read` is given twice",
        ),
        (
            "kinds_echo_tuple",
            json!({"t": [1, "x"]}),
            "at /t: expected an array of exactly 3",
        ),
        (
            "kinds_echo_tuple",
            json!({"t": [1, "x", "ab"]}),
            "at /t/2: expected a string of one character",
        ),
        (
            "kinds_echo_nested",
            json!({"o": 5}),
            "expected null or {\"some\": value}",
        ),
        (
            "kinds_echo_lists",
            json!({"l": [["a"], [1]]}),
            "at /l/1/0: expected a string",
        ),
        (
            "kinds_echo_floats",
            json!({"a": 1e39, "b": 0}),
            "at /a: 1e+39 is out of range for f32",
        ),
        (
            "kinds_echo_result",
            json!({"r": {"maybe": 1}}),
            "expected {\"ok\": value} or {\"err\": value}",
        ),
    ];
    for (tool, args, expected) in refused {
        let (kind, message) = refusal(tool, args.clone()).await;
        assert_eq!(
            kind,
            ToolErrorKind::InvalidArguments,
            "{tool}({args}): {message}"
        );
        assert!(message.contains(expected), "{tool}({args}): {message}");
        // The derived schema refuses it too (what a host checks before calling).
        let schema = CompiledSchema::compile(&schema_of(tool).await).unwrap();
        assert!(
            schema.check(&args).is_err(),
            "the schema of {tool} accepts {args}"
        );
    }
    // NaN is not JSON: neither an argument nor a result can be one.
    let (kind, message) = refusal("calc_divide", json!({"a": "NaN", "b": 1})).await;
    assert_eq!(kind, ToolErrorKind::InvalidArguments, "{message}");
    match call(
        typed(),
        &Sandbox::default(),
        "kinds_not_a_number",
        json!({}),
    )
    .await
    {
        Err(CallError::Malformed(why)) => {
            assert!(why.contains("NaN, which JSON cannot represent"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let (kind, _) = refusal("kinds_nothing_here", json!({})).await;
    assert_eq!(kind, ToolErrorKind::NotFound);
}

/// `wasm` with a custom section appended (id 0: the name, then the bytes).
fn with_custom_section(mut wasm: Vec<u8>, name: &str, data: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(data);
    wasm.push(0);
    leb(body.len(), &mut wasm);
    wasm.extend(body);
    wasm
}

#[tokio::test]
async fn doc_comments_the_component_carries_become_descriptions() {
    let _s = shared();
    // The docs WIT tooling keeps in a `package-docs` section, for the world a decoded
    // component is given (`root:component`, world `root`).
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve
        .push_str(
            "docs.wit",
            "package root:component;\nworld root {\n  /// Greets someone by name.\n  \
             export greet: func(name: string) -> string;\n}\n",
        )
        .unwrap();
    let docs = wit_parser::PackageMetadata::extract(&resolve, package)
        .encode()
        .unwrap();
    let wasm = with_custom_section(crate::common::fixture_bytes("typed"), "package-docs", &docs);
    let plugin = crate::common::runtime().load(&wasm, None, &|_| {}).unwrap();
    let tools = plugin.list_tools(&Limits::default()).await.unwrap();
    let described = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.description.clone())
            .unwrap()
    };
    assert_eq!(described("greet"), "Greets someone by name.");
    // Without docs, a description says where the tool comes from.
    assert_eq!(
        described("calc_add"),
        "Calls `fixture:typed/calc@0.1.0#add` of the component (its WIT has no doc comment for it)."
    );
    let plain = typed().list_tools(&Limits::default()).await.unwrap();
    let greet = plain.iter().find(|t| t.name == "greet").unwrap();
    assert!(
        greet.description.starts_with("Calls `greet`"),
        "{}",
        greet.description
    );
}

/// Arguments each echo function must give back unchanged, in the Rust and the C fixture.
fn echo_cases() -> Vec<(&'static str, Value)> {
    vec![
        (
            "kinds_echo_point",
            json!({"p": {"x": -5, "y": 18446744073709551615u64, "label": "ü"}}),
        ),
        ("kinds_echo_shape", json!({"s": {"circle": 1.5}})),
        ("kinds_echo_shape", json!({"s": "nothing"})),
        ("kinds_echo_color", json!({"c": "green"})),
        ("kinds_echo_perms", json!({"p": ["read", "exec"]})),
        ("kinds_echo_perms", json!({"p": []})),
        ("kinds_echo_tuple", json!({"t": [255, "", "𝄞"]})),
        ("kinds_echo_nested", json!({"o": null})),
        ("kinds_echo_nested", json!({"o": {"some": null}})),
        ("kinds_echo_nested", json!({"o": {"some": 65535}})),
        ("kinds_echo_lists", json!({"l": [[], ["a", "ß"], []]})),
        ("kinds_echo_lists", json!({"l": []})),
    ]
}

#[tokio::test]
async fn a_c_component_round_trips_the_same_values() {
    let _s = shared();
    let c = typed_c();
    assert!(c.unavailable().is_empty(), "{:?}", c.unavailable());
    for (tool, args) in echo_cases() {
        let given = args.as_object().unwrap().values().next().unwrap().clone();
        assert_eq!(
            value_of(c, tool, args.clone()).await,
            given,
            "C {tool}({args})"
        );
    }
    assert_eq!(
        value_of(c, "calc_add", json!({"a": 2147483647, "b": 1})).await,
        json!(-2147483648)
    );
    assert_eq!(
        value_of(c, "greet", json!({"name": "wörld 𝄞"})).await,
        json!("Hello, wörld 𝄞!")
    );
    assert_eq!(
        value_of(c, "kinds_u64_max", json!({})).await,
        json!(u64::MAX)
    );
    assert_eq!(
        refusal_of(c, "calc_divide", json!({"a": 1, "b": 0})).await,
        (ToolErrorKind::Failed, "cannot divide by zero".to_string())
    );
    assert_eq!(
        refusal_of(c, "kinds_echo_result", json!({"r": {"err": "from C"}})).await,
        (ToolErrorKind::Failed, "from C".to_string())
    );
    let (kind, message) = refusal_of(c, "kinds_echo_point", json!({"p": {"x": "1", "y": 2}})).await;
    assert_eq!(kind, ToolErrorKind::InvalidArguments);
    assert!(
        message.contains("at /p/x: expected an integer (s64)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_result_that_would_swell_on_the_host_is_bounded_through_the_guest_memory() {
    let _s = shared();
    // Small: within every limit.
    let few = value("kinds_bytes", json!({"n": 1000})).await;
    assert_eq!(few.as_array().map(Vec::len), Some(1000));
    // 64 MiB of bytes fit the default 512 MiB memory limit in the component, but would take
    // gigabytes as lifted values in the host: the call is held to a smaller guest memory.
    match call(
        typed(),
        &Sandbox::default(),
        "kinds_bytes",
        json!({"n": 64 << 20}),
    )
    .await
    {
        Err(CallError::LimitExceeded {
            limit: cordon_core::LimitKind::Memory,
            detail,
        }) => assert!(
            detail.contains("`kinds_bytes` is held to 25MiB")
                && detail.contains("far more memory in the host"),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }
    // Functions whose results do not swell keep the plugin's limit.
    assert_eq!(value("calc_add", json!({"a": 1, "b": 1})).await, json!(2));
}

/// `wasi:config/store`: only granted keys are read, and a key the guest makes up never turns
/// into a grant with marks in what the call's report says it wanted (`KEY:public` would ask a
/// person for a grant whose contents count as not private).
#[tokio::test]
async fn config_keys_reach_only_what_is_granted_and_wanted_grants_carry_no_marks() {
    let _shared = shared();
    static P: OnceLock<Plugin> = OnceLock::new();
    let reader = P.get_or_init(|| load("config-reader"));
    let sandbox = Sandbox {
        grants: ["config:api_key".parse::<cordon_core::Grant>().unwrap()]
            .into_iter()
            .collect(),
        config: [("api_key", "s3cret"), ("other", "not-granted")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Sandbox::default()
    };
    let get = |key: &'static str| {
        let sandbox = sandbox.clone();
        async move {
            let (out, report) = reader
                .call_tool_reported(&sandbox, "get_rc", &json!({ "key": key }).to_string())
                .await;
            let value = match out.unwrap().content.as_slice() {
                [Content::Json(v)] => v.clone(),
                other => panic!("{other:?}"),
            };
            (value, report)
        }
    };
    assert_eq!(get("api_key").await.0, json!("s3cret"));
    let (other, report) = get("other").await;
    assert_eq!(other, Value::Null);
    assert_eq!(report.wanted, ["config:other"]);
    assert!(
        report.refused[0].contains("`other` (not granted)"),
        "{report:?}"
    );
    let (marked, report) = get("other:public").await;
    assert_eq!(marked, Value::Null);
    assert!(report.wanted.is_empty(), "{:?}", report.wanted);
    assert!(!report.refused.is_empty());
}
