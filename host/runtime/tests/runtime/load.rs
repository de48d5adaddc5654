//! Loading components: cache, malformed input, unsupported imports, tool lists, ceilings.

use std::cell::RefCell;

use crate::common::*;
use cordon_core::{Ceiling, Limits};
use cordon_runtime::{CompileEvent, Runtime, RuntimeConfig, RuntimeError};

fn cache_runtime(dir: &std::path::Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.into()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn cached_code_is_loaded_only_as_pinned() {
    let _process = shared();
    let dir = tempfile::tempdir().unwrap();
    let bytes = fixture_bytes("probe");
    let events = RefCell::new(Vec::new());
    let record = |e: CompileEvent| events.borrow_mut().push(e);
    let compiled = |events: &RefCell<Vec<CompileEvent>>| {
        let first = events.borrow().first().copied();
        events.borrow_mut().clear();
        match first {
            Some(CompileEvent::Started { .. }) => true,
            Some(CompileEvent::CacheHit) => false,
            other => panic!("unexpected {other:?}"),
        }
    };

    let rt = cache_runtime(dir.path());
    let first = rt.load(&bytes, None, &record).unwrap();
    assert!(matches!(events.borrow()[0], CompileEvent::Started { bytes: n } if n == bytes.len()));
    assert!(matches!(events.borrow()[1], CompileEvent::Finished { .. }));
    events.borrow_mut().clear();
    let pin = first
        .compiled_pin()
        .cloned()
        .expect("a runtime with a cache pins what it wrote");
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one cache entry, no temp files left: {entries:?}"
    );
    let entry = entries[0].clone();
    assert_eq!(
        entry.file_name().unwrap().to_str().unwrap(),
        cordon_runtime::compiled_file_name(&first.digest()["sha256:".len()..], &pin)
    );

    // Another runtime on the same cache, given the pin, loads instead of compiling.
    let rt2 = cache_runtime(dir.path());
    let second = rt2.load(&bytes, Some(&pin), &record).unwrap();
    assert!(!compiled(&events));
    assert_eq!(second.compiled_pin(), Some(&pin));
    assert_eq!(first.digest(), second.digest());
    assert!(first.digest().starts_with("sha256:") && first.digest().len() == 71);
    // Without a pin the cache vouches for nothing.
    rt2.load(&bytes, None, &record).unwrap();
    assert!(compiled(&events));
    let pin = rt2
        .load(&bytes, None, &record)
        .unwrap()
        .compiled_pin()
        .cloned()
        .unwrap();
    events.borrow_mut().clear();

    // The same bytes under a new stamp (copied, touched) are hashed once and pinned anew.
    let data = std::fs::read(&entry).unwrap();
    std::fs::remove_file(&entry).unwrap();
    std::fs::write(&entry, &data).unwrap();
    let restamped = rt2.load(&bytes, Some(&pin), &record).unwrap();
    assert!(!compiled(&events));
    let new_pin = restamped.compiled_pin().cloned().unwrap();
    assert_eq!(new_pin.sha256, pin.sha256);
    assert_ne!(new_pin.stamp, pin.stamp);
    let pin = new_pin;

    // A corrupt entry is compiled again, not loaded and not fatal; the new pin loads.
    let mut corrupt = data.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0xff;
    std::fs::write(&entry, &corrupt).unwrap();
    let again = rt2.load(&bytes, Some(&pin), &record).unwrap();
    assert!(compiled(&events));
    let pin = again.compiled_pin().cloned().unwrap();
    rt2.load(&bytes, Some(&pin), &record).unwrap();
    assert!(!compiled(&events));

    // Truncated: same.
    std::fs::write(&entry, &data[..100]).unwrap();
    let again = rt2.load(&bytes, Some(&pin), &record).unwrap();
    assert!(compiled(&events));
    let pin = again.compiled_pin().cloned().unwrap();

    // Code compiled for another engine is not used.
    let mut other_engine = pin.clone();
    other_engine.engine = "0".repeat(16);
    rt2.load(&bytes, Some(&other_engine), &record).unwrap();
    assert!(compiled(&events));
}

/// The attack: whoever can write the cache puts valid compiled code of another component (here
/// the `runaway` fixture, i.e. machine code of their choosing) in the entry of a pinned one.
/// It is not loaded: the pinned component is compiled again and runs as itself.
#[tokio::test]
async fn planted_compiled_code_is_never_loaded() {
    let _process = shared();
    let dir = tempfile::tempdir().unwrap();
    let rt = cache_runtime(dir.path());
    let probe = rt.load(&fixture_bytes("probe"), None, &|_| {}).unwrap();
    let pin = probe.compiled_pin().cloned().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    cache_runtime(other_dir.path())
        .load(&fixture_bytes("runaway"), None, &|_| {})
        .unwrap();
    let planted = std::fs::read_dir(other_dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let entry = dir.path().join(cordon_runtime::compiled_file_name(
        &probe.digest()["sha256:".len()..],
        &pin,
    ));
    std::fs::copy(&planted, &entry).unwrap();

    let compiled = std::cell::Cell::new(false);
    let loaded = cache_runtime(dir.path())
        .load(&fixture_bytes("probe"), Some(&pin), &|e| {
            compiled.set(compiled.get() || matches!(e, CompileEvent::Started { .. }))
        })
        .unwrap();
    assert!(
        compiled.get(),
        "the planted entry must be compiled over, not loaded"
    );
    let tools: Vec<String> = loaded
        .list_tools(&Limits::default())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        tools.contains(&"fs".to_string()),
        "the probe's own tools: {tools:?}"
    );
    assert_ne!(
        std::fs::read(&entry).unwrap(),
        std::fs::read(&planted).unwrap()
    );
}

#[test]
fn loading_by_digest_reads_the_component_only_to_compile_it() {
    let _process = shared();
    let dir = tempfile::tempdir().unwrap();
    let bytes = fixture_bytes("probe");
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let reads = std::cell::Cell::new(0);
    let read = || {
        reads.set(reads.get() + 1);
        Ok(bytes.clone())
    };
    let first = rt.load_digest(&sha, None, &read, &|_| {}).unwrap();
    let pin = first.compiled_pin().cloned();
    assert_eq!(
        reads.get(),
        1,
        "a cache miss reads the bytes to compile them"
    );
    assert_eq!(first.digest(), format!("sha256:{sha}"));
    rt.load_digest(&sha.to_uppercase(), pin.as_ref(), &read, &|_| {})
        .unwrap();
    assert_eq!(reads.get(), 1, "a cache hit does not read the component");

    // Bytes that are not the promised ones are refused, not compiled into the cache.
    let other = fixture_bytes("runaway");
    let wrong = "0".repeat(64);
    let e = rt
        .load_digest(&wrong, None, &|| Ok(other.clone()), &|_| {})
        .err()
        .expect("wrong digest must fail")
        .to_string();
    assert!(e.contains("not the expected sha256:0000"), "{e}");
    let e = rt
        .load_digest(
            &wrong,
            None,
            &|| Err(std::io::ErrorKind::NotFound.into()),
            &|_| {},
        )
        .err()
        .expect("unreadable must fail")
        .to_string();
    assert!(e.contains("cannot read the component"), "{e}");
    let cached: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("0000"))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
}

#[test]
fn malformed_components_are_refused_clearly() {
    let _process = shared();
    let rt = runtime();
    let err = |bytes: &[u8]| {
        rt.load(bytes, None, &|_| {})
            .err()
            .expect("must fail")
            .to_string()
    };
    assert!(err(b"").contains("magic bytes"));
    assert!(err(b"#!/bin/sh\necho hi\n").contains("magic bytes"));
    assert!(err(b"\0asm\x01\0\0\0").contains("core WebAssembly module"));
    let e = err(b"\0asm\x0d\0\x01\0\xff\xff\xff");
    assert!(e.starts_with("the component is invalid"), "{e}");
    // A real component cut in half.
    let probe = fixture_bytes("probe");
    let e = err(&probe[..probe.len() / 2]);
    assert!(e.starts_with("the component is invalid"), "{e}");
}

#[test]
fn unsupported_import_is_named() {
    let _process = shared();
    let e = runtime()
        .load(&fixture_bytes("badimport"), None, &|_| {})
        .err()
        .expect("must fail");
    match &e {
        RuntimeError::UnsupportedImports { imports } => {
            assert_eq!(imports.len(), 1, "{imports:?}");
            assert!(imports[0].starts_with("evil:thing/backdoor"), "{imports:?}");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("evil:thing/backdoor"));
}

#[tokio::test]
async fn plugins_built_against_0_1_0_still_run() {
    let _process = shared();
    // The fixture keeps the 0.1.0 contract as it was published: the host serves it through
    // the semver-compatible 0.1.3 interfaces.
    let plugin = load("abi010");
    assert!(
        plugin
            .imports()
            .iter()
            .any(|i| i == "cordon:tool/log@0.1.0"),
        "{:?}",
        plugin.imports()
    );
    let tools = plugin.list_tools(&Limits::default()).await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "echo");
    // No `tool-outputs` export before 0.1.3: no output schemas, and no error either.
    assert_eq!(tools[0].output_schema, None);
    let out = call(
        &plugin,
        &cordon_runtime::Sandbox::default(),
        "echo",
        serde_json::json!({"a": 1}),
    )
    .await
    .unwrap();
    assert_eq!(
        out.content,
        [cordon_core::Content::Json(serde_json::json!({"a": 1}))]
    );
}

#[tokio::test]
async fn tool_lists_and_ceilings() {
    let _process = shared();
    let p = probe();
    let tools = p.list_tools(&Limits::default()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "fs",
            "env",
            "http",
            "http_many",
            "tcp",
            "tcp_many",
            "pollables",
            "http_objects",
            "tcp_listen",
            "log",
            "bulk_read",
            "noop",
            "counter",
            "echo"
        ]
    );
    assert_eq!(
        tools[0].input_schema["required"],
        serde_json::json!(["op", "path"])
    );
    assert_eq!(
        p.ceiling(),
        Ceiling {
            filesystem: true,
            environment: true,
            http: true,
            sockets: true,
            config: false,
        },
        "{:?}",
        p.imports()
    );
    // Measured: a Rust wasip2 component that never uses the environment still imports
    // wasi:cli/environment through std's start-up code; unused filesystem, HTTP and socket
    // imports are dropped by the linker.
    let r = runaway();
    assert_eq!(
        r.ceiling(),
        Ceiling {
            filesystem: false,
            environment: true,
            http: false,
            sockets: false,
            config: false,
        },
        "{:?}",
        r.imports()
    );
    let tools_again = p.list_tools(&Limits::default()).await.unwrap();
    assert_eq!(
        cordon_core::tools_hash(&tools),
        cordon_core::tools_hash(&tools_again)
    );
}

/// The bundled plugins (another part of the build) load, list their tools and instantiate under
/// default limits; the ~20 MB Python component checks the pool is sized for several core
/// modules and memories.
#[tokio::test]
async fn bundled_plugins_load_if_built() {
    let _process = shared();
    for name in ["python", "sql", "files"] {
        let path = workspace_root().join(format!("target/plugins/{name}.wasm"));
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("skipping: {} not built", path.display());
            continue;
        };
        let plugin = runtime()
            .load(&bytes, None, &|e| eprintln!("{name}: {e:?}"))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .named(name);
        let tools = plugin
            .list_tools(&Limits::default())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!tools.is_empty(), "{name} has no tools");
        eprintln!(
            "{name}: tools {:?}, ceiling {:?}",
            tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            plugin.ceiling()
        );
    }
}

#[tokio::test]
async fn plugins_built_against_0_1_1_still_read_in_bulk() {
    let _process = shared();
    // The fixture keeps the 0.1.1 contract, whose bulk-read reader has no sifting: the host
    // serves it through the semver-compatible 0.1.3 interface.
    let plugin = load("abi011");
    assert!(
        plugin
            .imports()
            .iter()
            .any(|i| i == "cordon:tool/bulk-read@0.1.1"),
        "{:?}",
        plugin.imports()
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "alpha").unwrap();
    let sandbox = sandbox(&[format!("fs:{}:/d:ro", tmp.path().display())]);
    let out = call(
        &plugin,
        &sandbox,
        "read",
        serde_json::json!({"paths": ["/d/a.txt", "/d/missing"]}),
    )
    .await
    .unwrap();
    assert_eq!(
        out.content,
        [cordon_core::Content::Text(
            "/d/a.txt: alpha\n/d/missing: ReadError::NotFound".into()
        )]
    );
}

#[tokio::test]
async fn output_schemas_come_from_the_optional_tool_outputs_export() {
    let _process = shared();
    let plugin = load("outputs");
    let tools = plugin.list_tools(&Limits::default()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["shaped", "plain"]);
    assert_eq!(
        tools[0].output_schema.as_ref().unwrap()["required"],
        serde_json::json!(["n"])
    );
    assert_eq!(tools[1].output_schema, None);
    // The runtime hands results over as the plugin made them; the home checks them against
    // the schema (see the home's tests).
    let out = call(
        &plugin,
        &cordon_runtime::Sandbox::default(),
        "shaped",
        serde_json::json!({"mode": "wrong_type"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out.content,
        [cordon_core::Content::Json(serde_json::json!({"n": "one"}))]
    );
}
