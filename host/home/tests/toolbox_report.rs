//! The toolbox's reported calls: the sandbox's report of every call that reached it, none for
//! a call refused before, and the component digest each tool names.

use std::path::PathBuf;

use cordon_home::{Home, HomeError, InstallRequest, InstallSource, Toolbox, sha256_digest};
use cordon_runtime::CallError;
use serde_json::json;

/// The probe test fixture, built by `make plugins`.
fn probe_path() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/fixtures/probe.wasm");
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
