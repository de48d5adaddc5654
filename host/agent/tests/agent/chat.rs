//! `cordon run` / `cordon chat` (the CLI's `chat` module), run through the `chat`
//! example (same code, in-memory tools) against the scripted server.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use cordon_agent::Conversation;
use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use serde_json::{Value, json};

fn example() -> PathBuf {
    // target/debug/deps/agent-… → target/debug/examples/chat
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("chat");
    assert!(
        path.exists(),
        "build the example first: cargo build -p cordon-agent --example chat ({})",
        path.display()
    );
    path
}

fn demo_steps() -> Vec<Step> {
    vec![
        Step::tool_calls(vec![ScriptedCall::new("add", json!({"a": 2, "b": 40}))]),
        Step::tool_calls(vec![
            ScriptedCall::new("write_note", json!({"text": "42"})),
            ScriptedCall::new("read_file", json!({"path": "/etc/passwd"})),
        ]),
        Step::text("It is 42."),
        Step::text("Second answer."),
    ]
}

#[tokio::test]
async fn run_json_prints_events_saves_and_exits_zero() {
    let server = ScriptedServer::start(Script::new(demo_steps()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("conv.json");
    let url = server.base_url();
    let save_arg = save.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(example())
            .args([
                "run",
                "What is 2+40?",
                "--then",
                "And again?",
                "--approve",
                "auto",
                "--json",
                "--save",
            ])
            .arg(&save_arg)
            .env("CORDON_LLM_URL", &url)
            .env("CORDON_MODEL", "scripted")
            .env_remove("CORDON_CONFIG")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is a JSON event"))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "turn_finished").count(), 2);
    // --approve auto: write_note (can change things) is denied, add runs, read_file is refused by the "sandbox".
    let results: Vec<(&str, bool)> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| {
            (
                e["tool"].as_str().unwrap(),
                e["is_error"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        vec![("add", false), ("write_note", true), ("read_file", true)]
    );
    let saved = Conversation::from_json(&std::fs::read_to_string(&save).unwrap()).unwrap();
    assert_eq!(saved.turns.len(), 2);
    assert_eq!(saved.last_answer(), Some("Second answer."));
}

#[tokio::test]
async fn chat_reads_messages_approvals_and_commands_from_stdin() {
    let server = ScriptedServer::start(Script::new(demo_steps()))
        .await
        .unwrap();
    let url = server.base_url();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(example())
            .args(["chat", "--llm-url", &url, "--model", "scripted"])
            .env_remove("CORDON_CONFIG")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"What is 2+40?\ny\n/history\n/tools\n/fork 0\n/branch\n/bogus\n/quit\n")
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("It is 42."), "{stdout}");
    assert!(
        stderr.contains("Tool `write_note` (plugin demo) wants to run"),
        "{stderr}"
    );
    assert!(
        stderr.contains("→ write_note: note written"),
        "approved with y: {stderr}"
    );
    assert!(
        stdout.contains("[1] you: What is 2+40?"),
        "/history: {stdout}"
    );
    assert!(
        stdout.contains("write_note           ask"),
        "/tools: {stdout}"
    );
    assert!(stdout.contains("Now on branch 1"), "/fork: {stdout}");
    assert!(stdout.contains("unknown command /bogus"), "{stdout}");
}
