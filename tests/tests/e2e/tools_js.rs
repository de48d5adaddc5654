//! A JavaScript plugin end to end: the JS SDK's template (`sdk/js/template`), built by
//! componentize-js as a project outside the tree gets it (`make js-plugins`), installed and
//! called through the `cordon` binary: a structured result checked against its output schema,
//! an error the tool throws on purpose coming back as that tool error (not a trap), the
//! ceiling the toolchain's defaults give, and files read through the host's bulk reader.

use cordon_tests::{TestHome, fixture};

#[test]
fn the_js_template_installs_and_its_tool_answers_and_fails_as_a_tool() {
    let home = TestHome::new();
    let wasm = fixture("js-template").display().to_string();
    home.cordon(&["plugin", "install", &wasm, "--name", "stats"])
        .ok()
        .stdout_has(&[
            "tools:   text_stats, count_text",
            // componentize-js's engine imports these; built without `wasi:http`.
            "wasi:filesystem",
            "ceiling: may be granted paths (fs:)",
            "Installed plugin `stats`",
        ]);
    let inspect = home.cordon(&["plugin", "inspect", "stats"]).ok();
    assert!(!inspect.stdout.contains("wasi:http"), "{}", inspect.stdout);
    home.cordon(&[
        "call",
        "text_stats",
        r#"{"text": "to be or not to be\nthat is"}"#,
    ])
    .ok()
    .stdout_has(&[
        "\"characters\": 26",
        "\"lines\": 2",
        "\"most_frequent\": \"to\"",
        "\"words\": 8",
    ]);
    // Thrown on purpose: the SDK returns it as the WIT tool error it names.
    let long = format!(r#"{{"text": "{}"}}"#, "x".repeat(100_001));
    home.cordon(&["call", "text_stats", &long])
        .code(1)
        .stderr_has(&["invalid arguments: the text is longer than 100,000 characters"]);
}

#[test]
fn the_js_template_reads_granted_files_through_the_hosts_bulk_reader() {
    let home = TestHome::new();
    let data = home.scratch("data");
    std::fs::write(data.join("a.txt"), "needle\nhay\nneedle again\n").unwrap();
    std::fs::write(data.join("b.txt"), "only hay\n").unwrap();
    let wasm = fixture("js-template").display().to_string();
    let grant = format!("fs:{}:/data:ro", data.display());
    home.cordon(&[
        "plugin", "install", &wasm, "--name", "stats", "--grant", &grant,
    ])
    .ok();
    home.cordon(&[
        "call",
        "count_text",
        r#"{"text": "needle", "paths": ["/data/a.txt", "/data/b.txt"]}"#,
    ])
    .ok()
    .stdout_has(&["\"/data/a.txt\": 2", "\"/data/b.txt\": 0"]);
    home.cordon(&[
        "call",
        "count_text",
        r#"{"text": "x", "paths": ["/data/none.txt"]}"#,
    ])
    .code(1)
    .stderr_has(&["not found: /data/none.txt does not exist"]);
    home.cordon(&[
        "call",
        "count_text",
        r#"{"text": "x", "paths": ["/etc/passwd"]}"#,
    ])
    .code(1)
    .stderr_has(&["denied: /etc/passwd is outside the granted directories"]);
}
