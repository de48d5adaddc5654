//! `cordon doctor` on the setups a newcomer has: everything in order against a model that
//! calls tools; a model that answers in text instead; a model server that is not there; a
//! grant whose directory is gone; no plugins. What it prints for MCP clients names this
//! binary and this home.

use cordon_scripted_llm::Step;
use cordon_tests::{TestHome, support};
use serde_json::json;

use crate::model::{Model, call};

#[test]
fn a_setup_in_order_passes_and_the_mcp_settings_name_this_home() {
    let (home, _data) = support::probe_home(&[]);
    let model = Model::new(vec![Step::tool_calls(vec![call(
        "d1",
        "get_time",
        json!({}),
    )])]);
    let cwd = home.scratch("cwd");
    let run = home
        .cordon_at(
            Some(&cwd),
            &["doctor"],
            "",
            &[
                ("CORDON_LLM_URL", &model.url()),
                ("CORDON_MODEL", "scripted"),
            ],
        )
        .ok();
    run.clone().stdout_has(&[
        "ok    home: ",
        "ok    config: none",
        "ok    store: sqlite:",
        "ok    model server: model `scripted` at ",
        "called the tool it was offered",
        "ok    plugin probe: 14 tool(s); fs:",
        "Everything checked is in order.",
    ]);
    // The request offered one tool and asked for its call.
    let sent = model.server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tool_names(), ["get_time"]);
    // The MCP settings run this binary with this home, in each client's format.
    let home_path = std::path::absolute(home.path()).unwrap();
    let binary = cordon_tests::cordon_bin().canonicalize().unwrap();
    let snippet = format!(
        "{{\"mcpServers\":{{\"cordon\":{{\"command\":\"{}\",\"args\":[\"--home\",\"{}\",\"mcp\"]}}}}}}",
        binary.display(),
        home_path.display()
    );
    assert!(run.stdout.contains(&snippet), "{}", run.stdout);
    assert!(run.stdout.contains("\"type\":\"stdio\""), "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "claude mcp add cordon -- {} --home {} mcp",
            binary.display(),
            home_path.display()
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("[mcp_servers.cordon]"),
        "{}",
        run.stdout
    );
}

#[test]
fn what_is_broken_is_named_with_what_to_do() {
    // A model that answers in text when offered a tool: a warning, not a failure.
    let (home, data) = support::probe_home(&[]);
    let model = Model::new(vec![Step::text("It is noon.")]);
    let cwd = home.scratch("cwd");
    let env = [
        ("CORDON_LLM_URL", model.url()),
        ("CORDON_MODEL", "scripted".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    home.cordon_at(Some(&cwd), &["doctor"], "", &env)
        .ok()
        .stdout_has(&[
            "warn  model server: ",
            "answered in text when asked to call a tool",
            "tool_format = \"hermes\"",
        ]);

    // The granted directory is gone: a warning naming it.
    std::fs::remove_dir_all(&data).unwrap();
    let canonical_gone = data.display().to_string();
    let run = home
        .cordon_at(Some(&cwd), &["doctor", "--offline"], "", &[])
        .ok();
    assert!(
        run.stdout.contains("warn  plugin probe: ") && run.stdout.contains("no such directory"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(data.file_name().unwrap().to_str().unwrap()),
        "{} should name {canonical_gone}",
        run.stdout
    );
    assert!(run.stdout.contains("model server: not checked (--offline)"));

    // No model server where the config says: a failure, exit 1, saying what to do.
    let config = cwd.join("cordon.toml");
    std::fs::write(
        &config,
        "[llm]\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let run = home.cordon_at(Some(&cwd), &["doctor"], "", &[]).code(1);
    assert!(
        run.stdout
            .contains("FAIL  model server: model `m` at http://127.0.0.1:9/v1")
            && run.stdout.contains("start it, or set [llm] url and model"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("ok    config: {}", "cordon.toml"))
    );

    // A config that does not load.
    std::fs::write(&config, "[llm]\nurl = 3\n").unwrap();
    let run = home.cordon_at(Some(&cwd), &["doctor"], "", &[]).code(1);
    assert!(run.stdout.contains("FAIL  config: "), "{}", run.stdout);

    // No plugins.
    let empty = TestHome::new();
    empty
        .cordon_at(
            Some(&cwd),
            &["doctor", "--offline", "--config", "/dev/null"],
            "",
            &[],
        )
        .ok()
        .stdout_has(&[
            "warn  plugins: none installed",
            "cordon plugin install files",
        ]);
}
