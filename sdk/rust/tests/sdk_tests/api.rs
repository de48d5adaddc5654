//! Native tests of everything in the SDK that does not need a wasm host.

use cordon_sdk::{Content, Hints, Json, Plugin, ToolError, input_schema, parse_arguments};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Arguments of the test query tool.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
struct Query {
    /// The SQL text to run.
    sql: String,
    /// At most this many rows.
    max_rows: Option<u32>,
    /// Bound parameters.
    #[serde(default)]
    params: Vec<Value>,
    /// Output shape.
    #[serde(default)]
    format: Format,
}

/// How rows are returned.
#[derive(Debug, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Format {
    /// One JSON array per row.
    #[default]
    Rows,
    /// One JSON object per row.
    Objects,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Empty {}

/// Arguments with the shapes schemars makes awkward (only the schema is used).
#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
struct Awkward {
    /// A description that the author wrapped
    /// over two lines.
    ///
    /// And a second paragraph.
    #[serde(default)]
    limit: Option<u32>,
    /// Either kind of value.
    mode: Option<Mode>,
}

/// Positional or named.
#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Mode {
    /// A list.
    List(Vec<i64>),
    /// A word.
    Word(String),
}

#[derive(Debug, thiserror::Error)]
enum MyError {
    #[error("no table {0}")]
    NoTable(String),
}

impl From<MyError> for ToolError {
    fn from(e: MyError) -> Self {
        match e {
            MyError::NoTable(_) => ToolError::NotFound(e.to_string()),
        }
    }
}

fn plugin() -> Plugin {
    Plugin::new()
        .tool(
            "query",
            "Runs a query.",
            Hints::READ_ONLY,
            |q: Query| -> Result<Json<Value>, MyError> {
                if q.sql.contains("missing") {
                    return Err(MyError::NoTable("missing".into()));
                }
                Ok(Json(
                    json!({"sql": q.sql, "max_rows": q.max_rows, "n": q.params.len()}),
                ))
            },
        )
        .tool("ping", "Answers pong.", Hints::READ_ONLY, |_: Empty| {
            Ok::<_, ToolError>("pong")
        })
        .tool("two", "Two pieces.", Hints::DESTRUCTIVE, |_: Empty| {
            Ok::<_, ToolError>(vec![Content::text("a"), Content::json(&json!([1]))?])
        })
}

#[test]
fn schema_is_a_flat_object_with_descriptions() {
    let schema = input_schema::<Query>().unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(schema.get("title").is_none(), "{schema}");
    assert!(schema.get("description").is_none(), "{schema}");
    assert_eq!(
        schema["properties"]["sql"]["description"],
        "The SQL text to run."
    );
    assert_eq!(schema["required"], json!(["sql"]));
    assert_eq!(schema["additionalProperties"], false);
    // Sub-schemas are inlined: no $ref for the model to chase.
    assert!(!schema.to_string().contains("$ref"), "{schema}");
    assert!(schema.get("$defs").is_none());
    let format = &schema["properties"]["format"];
    assert!(format.to_string().contains("objects"), "{format}");
}

#[test]
fn the_argument_struct_doc_is_not_the_tool_description() {
    // The tool's description is given to `Plugin::tool`; the struct's doc comment is for
    // Rust readers and must not reach the model as a second description of the tool.
    for schema in [
        input_schema::<Query>().unwrap(),
        serde_json::from_str(&plugin().descriptors()[0].input_schema).unwrap(),
    ] {
        assert!(schema.get("description").is_none(), "{schema}");
        assert!(schema.get("title").is_none(), "{schema}");
        assert!(!schema.to_string().contains("Arguments of"), "{schema}");
    }
    // Field and nested type docs stay.
    let schema = input_schema::<Awkward>().unwrap();
    assert!(
        schema["properties"]["mode"]["description"].is_string(),
        "{schema}"
    );
}

#[test]
fn schema_is_tidied_for_models() {
    let schema = input_schema::<Awkward>().unwrap();
    let limit = &schema["properties"]["limit"];
    assert_eq!(
        limit["description"],
        "A description that the author wrapped over two lines.\n\nAnd a second paragraph."
    );
    assert!(limit.get("default").is_none(), "{limit}");
    assert!(limit.get("format").is_none(), "{limit}");
    assert_eq!(limit["minimum"], 0);
    let mode = schema["properties"]["mode"]["anyOf"].as_array().unwrap();
    let kinds: Vec<&Value> = mode.iter().map(|m| &m["type"]).collect();
    assert_eq!(
        kinds,
        [&json!("array"), &json!("string"), &json!("null")],
        "{mode:?}"
    );
}

#[test]
fn empty_struct_schema_still_has_properties() {
    let schema = input_schema::<Empty>().unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"], json!({}));
}

#[test]
fn non_object_argument_type_is_reported_by_check() {
    let p = Plugin::new().tool("bad", "Takes a number.", Hints::READ_ONLY, |n: u32| {
        Ok::<_, ToolError>(n.to_string())
    });
    let err = p.check().unwrap_err();
    assert!(err.contains("must be a struct"), "{err}");
}

#[test]
fn check_reports_every_problem() {
    let p = Plugin::new()
        .tool("Bad-Name", "x", Hints::READ_ONLY, |_: Empty| {
            Ok::<_, ToolError>("")
        })
        .tool("dup", "x", Hints::READ_ONLY, |_: Empty| {
            Ok::<_, ToolError>("")
        })
        .tool("dup", " ", Hints::READ_ONLY, |_: Empty| {
            Ok::<_, ToolError>("")
        })
        .tool(
            "both",
            "x",
            Hints {
                read_only: true,
                destructive: true,
                ..Hints::default()
            },
            |_: Empty| Ok::<_, ToolError>(""),
        );
    let err = p.check().unwrap_err();
    assert!(err.contains("`Bad-Name` is invalid"), "{err}");
    assert!(err.contains("`dup` is used twice"), "{err}");
    assert!(err.contains("`dup` has no description"), "{err}");
    assert!(err.contains("both read-only and destructive"), "{err}");
    assert!(Plugin::new().check().is_err());
    plugin().check().unwrap();
}

#[test]
fn descriptors_carry_names_hints_and_schema_text() {
    let d = plugin().descriptors();
    let names: Vec<_> = d.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["query", "ping", "two"]);
    assert_eq!(d[0].hints, Hints::READ_ONLY);
    assert!(d[2].hints.destructive && !d[2].hints.read_only);
    let schema: Value = serde_json::from_str(&d[0].input_schema).unwrap();
    assert_eq!(
        schema["properties"]["max_rows"]["description"],
        "At most this many rows."
    );
}

#[test]
fn dispatch_runs_the_named_tool() {
    let p = plugin();
    assert_eq!(p.call("ping", "{}").unwrap(), vec![Content::text("pong")]);
    // An absent argument object counts as empty.
    assert_eq!(p.call("ping", "").unwrap(), vec![Content::text("pong")]);
    let out = p
        .call(
            "query",
            r#"{"sql": "select 1", "max_rows": 5, "params": [1, "a"]}"#,
        )
        .unwrap();
    let [Content::Json(j)] = out.as_slice() else {
        panic!("{out:?}")
    };
    let v: Value = serde_json::from_str(j).unwrap();
    assert_eq!(v, json!({"sql": "select 1", "max_rows": 5, "n": 2}));
    assert_eq!(p.call("two", "{}").unwrap().len(), 2);
}

#[test]
fn unknown_tool_is_not_found_and_lists_the_tools() {
    let err = plugin().call("nope", "{}").unwrap_err();
    let ToolError::NotFound(m) = &err else {
        panic!("{err:?}")
    };
    assert!(
        m.contains("`nope`") && m.contains("query, ping, two"),
        "{m}"
    );
}

#[test]
fn tool_errors_map_through_from() {
    let err = plugin()
        .call("query", r#"{"sql": "select * from missing"}"#)
        .unwrap_err();
    assert_eq!(err, ToolError::NotFound("no table missing".into()));
}

fn invalid(args: &str) -> String {
    match plugin().call("query", args).unwrap_err() {
        ToolError::InvalidArguments(m) => m,
        other => panic!("expected invalid-arguments, got {other:?}"),
    }
}

#[test]
fn argument_errors_name_the_field() {
    let m = invalid(r#"{"max_rows": 3}"#);
    assert!(m.contains("missing field `sql`"), "{m}");
    let m = invalid(r#"{"sql": "x", "max_rows": "ten"}"#);
    assert!(
        m.contains("field `max_rows`") && m.contains("invalid type"),
        "{m}"
    );
    assert!(!m.contains("line 1"), "{m}");
    let m = invalid(r#"{"sql": "x", "max_rows": -1}"#);
    assert!(m.contains("field `max_rows`"), "{m}");
    let m = invalid(r#"{"sql": "x", "format": "csv"}"#);
    assert!(
        m.contains("field `format`") && m.contains("unknown variant `csv`"),
        "{m}"
    );
    let m = invalid(r#"{"sql": "x", "sq1": 1}"#);
    assert!(m.contains("unknown field `sq1`"), "{m}");
    let m = invalid(r#"{"sql": "x", "params": 7}"#);
    assert!(
        m.contains("field `params`") && m.contains("expected a sequence"),
        "{m}"
    );
}

#[test]
fn malformed_json_is_invalid_arguments() {
    let m = invalid(r#"{"sql": "#);
    assert!(m.contains("not valid JSON"), "{m}");
    let m = invalid(r#"{"sql": "x"} trailing"#);
    assert!(m.contains("not valid JSON"), "{m}");
    let m = invalid("[1, 2]");
    assert!(m.contains("invalid type"), "{m}");
}

#[test]
fn parse_arguments_is_usable_directly() {
    let q: Query = parse_arguments("t", r#"{"sql": "s", "format": "objects"}"#).unwrap();
    assert_eq!(q.format, Format::Objects);
    assert_eq!(q.max_rows, None);
}

#[test]
fn io_errors_map_to_actionable_variants() {
    use std::io::{Error, ErrorKind};
    let e = ToolError::from_io("/data/x", &Error::from(ErrorKind::NotFound));
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("/data/x")),
        "{e:?}"
    );
    let e = ToolError::from_io("/data/x", &Error::from(ErrorKind::PermissionDenied));
    assert!(matches!(e, ToolError::Denied(_)));
    let e = ToolError::from_io("/data/x", &Error::from(ErrorKind::ReadOnlyFilesystem));
    assert!(matches!(e, ToolError::Denied(_)));
    let e: ToolError = Error::other("boom").into();
    assert!(matches!(&e, ToolError::Failed(m) if m.contains("boom")));
    assert_eq!(ToolError::denied("no").message(), "no");
}

#[test]
fn a_write_under_a_read_only_grant_says_the_grant_is_read_only() {
    use cordon_sdk::paths::GrantedDirs;
    use std::io::{Error, ErrorKind};
    // What wasmtime answers to a write under a read-only preopen: "not permitted".
    let refused = Error::from(ErrorKind::PermissionDenied);
    let dirs = GrantedDirs::with_roots(&["/data", "/out"]).with_read_only("/data");
    let e = dirs.io_error("/data/new.txt", &refused);
    assert!(
        matches!(&e, ToolError::Denied(m) if m.contains("/data is granted read-only")),
        "{e:?}"
    );
    assert!(
        !e.message().contains("link"),
        "nothing there, so a write: {e:?}"
    );
    // A link under a read-only grant: the refusal may have been a read through it.
    #[cfg(unix)]
    {
        let grant = std::env::temp_dir().join(format!("cordon-sdk-ro-{}", std::process::id()));
        std::fs::create_dir_all(&grant).unwrap();
        let link = grant.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/elsewhere", &link).unwrap();
        let root = grant.to_str().unwrap();
        let e = GrantedDirs::with_roots(&[root])
            .with_read_only(root)
            .io_error(link.to_str().unwrap(), &refused);
        std::fs::remove_dir_all(&grant).unwrap();
        assert!(
            e.message().contains("may be a link leading outside")
                && e.message().contains("granted read-only")
                && !e.message().contains("ask the user for a read-write grant"),
            "{e:?}"
        );
    }
    // Under a writable grant the same refusal can only be a link leading outside.
    let e = dirs.io_error("/out/new.txt", &refused);
    assert!(
        matches!(&e, ToolError::Denied(m) if m.contains("link") && !m.contains("read-only")),
        "{e:?}"
    );
    assert!(dirs.is_read_only("/data/a/b") && !dirs.is_read_only("/out/a"));
    // Nested grants: the innermost decides.
    let nested = GrantedDirs::with_roots(&["/data", "/data/drop"]).with_read_only("/data");
    assert_eq!(nested.grant_of("/data/drop/x"), Some("/data/drop"));
    assert!(!nested.is_read_only("/data/drop/x") && nested.is_read_only("/data/x"));
}

#[test]
fn hints_builders() {
    let none = Hints::default();
    assert_eq!(
        Hints::READ_ONLY,
        Hints {
            read_only: true,
            idempotent: true,
            ..none
        }
    );
    assert_eq!(
        Hints::DESTRUCTIVE,
        Hints {
            destructive: true,
            ..none
        }
    );
    let h = Hints::WRITES.idempotent().open_world();
    assert!(h.idempotent && h.open_world && !h.read_only);
}

/// What `count` returns.
#[derive(Debug, serde::Serialize, JsonSchema)]
struct Counted {
    /// How many words the text has.
    words: usize,
    /// The longest word, if there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    longest: Option<String>,
}

/// Arguments of `count`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Text {
    /// The text to count the words of.
    text: String,
}

fn structured() -> Plugin {
    plugin().structured_tool(
        "count",
        "Counts words.",
        Hints::READ_ONLY,
        |t: Text| -> Result<Counted, ToolError> {
            Ok(Counted {
                words: t.text.split_whitespace().count(),
                longest: t
                    .text
                    .split_whitespace()
                    .max_by_key(|w| w.len())
                    .map(str::to_owned),
            })
        },
    )
}

#[test]
fn a_structured_tool_states_its_output_schema_and_returns_one_json_object() {
    let p = structured();
    p.check().unwrap();
    let d = p.descriptors();
    assert!(d[..3].iter().all(|d| d.output_schema.is_none()));
    let schema: Value = serde_json::from_str(d[3].output_schema.as_deref().unwrap()).unwrap();
    assert_eq!(schema["type"], "object");
    assert!(schema.get("title").is_none(), "{schema}");
    assert_eq!(schema["description"], "What `count` returns.");
    assert_eq!(
        schema["properties"]["words"]["description"],
        "How many words the text has."
    );
    assert_eq!(schema["required"], json!(["words"]));
    let out = p.call("count", r#"{"text": "a bb ccc"}"#).unwrap();
    assert_eq!(
        out,
        vec![Content::Json(r#"{"words":3,"longest":"ccc"}"#.into())]
    );
    let out = p.call("count", r#"{"text": ""}"#).unwrap();
    assert_eq!(out, vec![Content::Json(r#"{"words":0}"#.into())]);
    // Arguments are parsed as for any tool.
    let e = p.call("count", r#"{"txt": ""}"#).unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e:?}");
}

#[test]
fn a_structured_tool_whose_result_is_not_an_object_is_reported_by_check() {
    let p = Plugin::new().structured_tool("n", "A number.", Hints::READ_ONLY, |_: Empty| {
        Ok::<u32, ToolError>(1)
    });
    let err = p.check().unwrap_err();
    assert!(
        err.contains("tool `n`: the result type `u32` must be a struct")
            && err.contains("not \"integer\""),
        "{err}"
    );
    // A map is an object.
    let p = Plugin::new().structured_tool("m", "A map.", Hints::READ_ONLY, |_: Empty| {
        Ok::<std::collections::BTreeMap<String, u32>, ToolError>(Default::default())
    });
    p.check().unwrap();
    assert_eq!(
        cordon_sdk::output_schema::<std::collections::BTreeMap<String, u32>>().unwrap()["type"],
        "object"
    );
}
