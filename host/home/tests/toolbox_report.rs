//! The toolbox's calls: the sandbox's report of every call that reached it, none for a call
//! refused before, the component digest each tool names, and results checked against the
//! output schemas plugins declared.

use std::path::PathBuf;

use cordon_home::{Home, HomeError, InstallRequest, InstallSource, Toolbox, sha256_digest};
use cordon_runtime::CallError;
use serde_json::json;

/// The probe test fixture, built by `make plugins`.
fn probe_path() -> PathBuf {
    fixture_path("probe")
}

/// A test fixture built by `make plugins`.
fn fixture_path(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../target/fixtures/{name}.wasm"));
    assert!(
        path.exists(),
        "fixture {} is missing; run `make plugins` first",
        path.display()
    );
    path
}

#[tokio::test]
async fn reported_calls_carry_the_sandbox_report_and_tools_their_digest() {
    let home_dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let data_path = std::fs::canonicalize(data.path()).unwrap();
    std::fs::write(data_path.join("file.txt"), "data").unwrap();
    let home = Home::at(home_dir.path().join("home"));
    let installed = home
        .prepare_install(
            InstallRequest {
                source: InstallSource::File {
                    path: probe_path(),
                    sha256: None,
                },
                name: Some("probe".into()),
                grants: vec![format!("fs:{}:/ro:ro", data_path.display())],
                limits: Vec::new(),
                allow_unsigned: false,
                signature: None,
                allow_rollback: false,
                allow_new_signer: false,
                describe: None,
                hide: Vec::new(),
                wassette_policy: None,
            },
            &|_| {},
        )
        .await
        .unwrap()
        .commit()
        .unwrap();
    let toolbox = Toolbox::load(&home).await.unwrap();

    // Every tool names the component that runs it, as the lock file pins it.
    let digest = sha256_digest(&std::fs::read(probe_path()).unwrap());
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert_eq!(installed.record.digest, digest);
    assert!(toolbox.tools().iter().all(|t| t.digest == digest));

    // A call the sandbox refused something: the error, and the report saying what.
    let (result, report) = toolbox
        .call_value_reported(
            "fs",
            &json!({"op": "write", "path": "/ro/new.txt"}),
            &Default::default(),
        )
        .await;
    assert!(
        matches!(
            result,
            Err(HomeError::Call {
                source: CallError::Tool(_),
                ..
            })
        ),
        "{result:?}"
    );
    let report = report.expect("the call reached the sandbox");
    assert_eq!(
        report.refused,
        ["write: /ro/new.txt under a read-only grant at /ro"]
    );
    assert!(report.peak_memory > 0, "{report:?}");
    assert!(!data_path.join("new.txt").exists());

    // A call that succeeds: a report with nothing refused.
    let (result, report) = toolbox
        .call_reported("fs", r#"{"op": "read", "path": "/ro/file.txt"}"#)
        .await;
    result.unwrap();
    let report = report.expect("the call reached the sandbox");
    assert!(report.refused.is_empty(), "{report:?}");
    assert!(report.duration_ms > 0.0, "{report:?}");

    // Calls refused before the sandbox have no report.
    let (result, report) = toolbox
        .call_value_reported(
            "fs",
            &json!({"op": 5, "path": "/ro/file.txt"}),
            &Default::default(),
        )
        .await;
    assert!(
        matches!(result, Err(HomeError::SchemaViolation { .. })),
        "{result:?}"
    );
    assert_eq!(report, None);
    let (result, report) = toolbox
        .call_value_reported("no_such_tool", &json!({}), &Default::default())
        .await;
    assert!(
        matches!(result, Err(HomeError::UnknownTool { .. })),
        "{result:?}"
    );
    assert_eq!(report, None);
    let (result, report) = toolbox.call_reported("fs", "not json").await;
    assert!(
        matches!(result, Err(HomeError::InvalidArguments { .. })),
        "{result:?}"
    );
    assert_eq!(report, None);

    // The calls without a report answer as before.
    let out = toolbox
        .call_value("fs", &json!({"op": "read", "path": "/ro/file.txt"}))
        .await
        .unwrap();
    assert!(!out.content.is_empty());
    assert!(matches!(
        toolbox
            .call("fs", r#"{"op": "write", "path": "/ro/new.txt"}"#)
            .await,
        Err(HomeError::Call { .. })
    ));
}

#[tokio::test]
async fn results_must_keep_the_output_schema_their_plugin_declared() {
    let home_dir = tempfile::tempdir().unwrap();
    let home = Home::at(home_dir.path().join("home"));
    let prepared = home
        .prepare_install(
            InstallRequest {
                source: InstallSource::File {
                    path: fixture_path("outputs"),
                    sha256: None,
                },
                name: Some("outputs".into()),
                grants: Vec::new(),
                limits: Vec::new(),
                allow_unsigned: false,
                signature: None,
                allow_rollback: false,
                allow_new_signer: false,
                describe: None,
                hide: Vec::new(),
                wassette_policy: None,
            },
            &|_| {},
        )
        .await
        .unwrap();
    let schemas: Vec<bool> = prepared
        .tools()
        .iter()
        .map(|t| t.output_schema.is_some())
        .collect();
    assert_eq!(schemas, [true, false]);
    // The output schema is part of what the lock file's hash pins.
    assert_eq!(
        prepared.record().tools_hash,
        cordon_core::tools_hash(prepared.tools())
    );
    prepared.commit().unwrap();
    let toolbox = Toolbox::load(&home).await.unwrap();
    let shaped = toolbox.resolve("shaped").unwrap();
    assert_eq!(
        shaped.descriptor.output_schema.as_ref().unwrap()["required"],
        json!(["n"])
    );

    for mode in ["good", "with_text"] {
        let out = toolbox
            .call_value("shaped", &json!({"mode": mode}))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(
            out.content
                .contains(&cordon_core::Content::Json(json!({"n": 1}))),
            "{mode}: {out:?}"
        );
    }
    for (mode, why) in [
        ("wrong_type", "at /n: \"one\" is not of type \"integer\""),
        (
            "two",
            "it holds 2 JSON pieces, where exactly one is promised",
        ),
        ("text", "it holds 0 JSON pieces"),
        ("array", "[1] is not of type \"object\""),
    ] {
        let (result, report) = toolbox
            .call_value_reported("shaped", &json!({"mode": mode}), &Default::default())
            .await;
        let e = result.unwrap_err();
        assert!(
            matches!(
                &e,
                HomeError::Call {
                    source: CallError::Malformed(m),
                    ..
                } if m.contains("the result of tool `shaped` does not match the output schema it declared")
                    && m.contains(why)
            ),
            "{mode}: {e}"
        );
        assert!(report.is_some(), "{mode}: the call ran");
    }
    // A tool without an output schema may return any content.
    let out = toolbox.call_value("plain", &json!({})).await.unwrap();
    assert_eq!(out.content, [cordon_core::Content::Json(json!([1, 2]))]);
}
