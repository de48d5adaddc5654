//! Loading components: cache, malformed input, unsupported imports, tool lists, ceilings.

mod common;

use std::cell::RefCell;

use common::*;
use cordon_core::{Ceiling, Limits};
use cordon_runtime::{CompileEvent, Runtime, RuntimeConfig, RuntimeError};

#[test]
fn second_runtime_on_same_cache_does_not_recompile() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = fixture_bytes("probe");
    let events = RefCell::new(Vec::new());
    let record = |e: CompileEvent| events.borrow_mut().push(e);

    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let first = rt.load(&bytes, &record).unwrap();
    assert!(matches!(events.borrow()[0], CompileEvent::Started { bytes: n } if n == bytes.len()));
    assert!(matches!(events.borrow()[1], CompileEvent::Finished { .. }));
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries.len(),
        2,
        "one cache entry and its digest record, no temp files left: {entries:?}"
    );
    let entry = entries
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .unwrap()
        .clone();
    let sum = entry.with_extension("sum");
    assert!(sum.exists(), "{entries:?}");

    events.borrow_mut().clear();
    let rt2 = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let second = rt2.load(&bytes, &record).unwrap();
    assert_eq!(*events.borrow(), vec![CompileEvent::CacheHit]);
    assert_eq!(first.digest(), second.digest());
    assert!(first.digest().starts_with("sha256:") && first.digest().len() == 71);

    // A corrupt entry is recompiled, not fatal.
    let entry = &entry;
    let mut data = std::fs::read(entry).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(entry, &data).unwrap();
    events.borrow_mut().clear();
    rt2.load(&bytes, &record).unwrap();
    assert!(
        matches!(events.borrow()[0], CompileEvent::Started { .. }),
        "{:?}",
        events.borrow()
    );
    // ... and rewritten, so the next load hits again.
    events.borrow_mut().clear();
    rt2.load(&bytes, &record).unwrap();
    assert_eq!(*events.borrow(), vec![CompileEvent::CacheHit]);

    // Truncated entry: same.
    std::fs::write(entry, &data[..100]).unwrap();
    events.borrow_mut().clear();
    rt2.load(&bytes, &record).unwrap();
    assert!(matches!(events.borrow()[0], CompileEvent::Started { .. }));

    // An entry without its digest record (an older Cordon, a half-finished write) is not
    // trusted: it is compiled again and the pair rewritten.
    std::fs::remove_file(&sum).unwrap();
    events.borrow_mut().clear();
    rt2.load(&bytes, &record).unwrap();
    assert!(matches!(events.borrow()[0], CompileEvent::Started { .. }));
    assert!(sum.exists());

    // A forged record that vouches for the corrupted bytes under an old stamp is ignored.
    let good = std::fs::read_to_string(&sum).unwrap();
    std::fs::write(entry, &data).unwrap();
    std::fs::write(&sum, &good).unwrap();
    events.borrow_mut().clear();
    rt2.load(&bytes, &record).unwrap();
    assert!(matches!(events.borrow()[0], CompileEvent::Started { .. }));
}

#[test]
fn loading_by_digest_reads_the_component_only_to_compile_it() {
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
    let first = rt.load_digest(&sha, &read, &|_| {}).unwrap();
    assert_eq!(
        reads.get(),
        1,
        "a cache miss reads the bytes to compile them"
    );
    assert_eq!(first.digest(), format!("sha256:{sha}"));
    rt.load_digest(&sha.to_uppercase(), &read, &|_| {}).unwrap();
    assert_eq!(reads.get(), 1, "a cache hit does not read the component");

    // Bytes that are not the promised ones are refused, not compiled into the cache.
    let other = fixture_bytes("runaway");
    let wrong = "0".repeat(64);
    let e = rt
        .load_digest(&wrong, &|| Ok(other.clone()), &|_| {})
        .err()
        .expect("wrong digest must fail")
        .to_string();
    assert!(e.contains("not the expected sha256:0000"), "{e}");
    let e = rt
        .load_digest(
            &wrong,
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
    let rt = runtime();
    let err = |bytes: &[u8]| {
        rt.load(bytes, &|_| {})
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
    let e = runtime()
        .load(&fixture_bytes("badimport"), &|_| {})
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
    // The fixture keeps the 0.1.0 contract as it was published: the host serves it through
    // the semver-compatible 0.1.2 interfaces.
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
            sockets: true
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
            sockets: false
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
    for name in ["python", "sql", "files"] {
        let path = workspace_root().join(format!("target/plugins/{name}.wasm"));
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("skipping: {} not built", path.display());
            continue;
        };
        let plugin = runtime()
            .load(&bytes, &|e| eprintln!("{name}: {e:?}"))
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
    // The fixture keeps the 0.1.1 contract, whose bulk-read reader has no sifting: the host
    // serves it through the semver-compatible 0.1.2 interface.
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
