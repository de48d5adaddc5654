//! A JavaScript plugin end to end: the JS SDK's template (`sdk/js/template`), built by
//! componentize-js as a project outside the tree gets it (`make js-plugins`), installed and
//! called through the `cordon` binary: a structured result checked against its output schema,
//! an error the tool throws on purpose coming back as that tool error (not a trap), and the
//! ceiling the toolchain's defaults give.

use cordon_tests::{TestHome, fixture};

#[test]
fn the_js_template_installs_and_its_tool_answers_and_fails_as_a_tool() {
    let home = TestHome::new();
    let wasm = fixture("js-template").display().to_string();
    home.cordon(&["plugin", "install", &wasm, "--name", "stats"])
        .ok()
        .stdout_has(&[
            "tools:   text_stats",
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
