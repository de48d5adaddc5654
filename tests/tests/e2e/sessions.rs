//! Durable sessions from the terminal: `cordon chat --session` killed at points inside a turn
//! and started again, `cordon run --session`, and `cordon sessions` (list, show, fork, replay,
//! export, rm), with the audit log of what ran.

use std::path::Path;
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::running::Running;
use cordon_tests::support::probe_home;
use cordon_tests::{TestHome, fixture};
use serde_json::{Value, json};

use crate::model::{Model, call};

const WAIT: Duration = Duration::from_secs(60);

/// Starts `cordon <args>` against the scripted model from a directory with no cordon.toml.
fn start(home: &TestHome, model: &Model, args: &[&str]) -> Running {
    let cwd = home.scratch("cwd");
    Running::start(
        home,
        &cwd,
        args,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
    )
}

/// `cordon sessions show NAME --json`: the session and its conversation.
fn show(home: &TestHome, name: &str) -> Value {
    let run = home.cordon(&["sessions", "show", name, "--json"]).ok();
    serde_json::from_str(&run.stdout).unwrap()
}

fn messages(shown: &Value) -> Vec<(String, String)> {
    shown["conversation"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn append(file: &str) -> cordon_scripted_llm::ScriptedCall {
    call(
        "k1",
        "fs",
        json!({"op": "append", "path": format!("/data/{file}"), "content": "1"}),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn chat_killed_while_streaming_goes_on_with_the_message_kept() {
    let (home, _) = probe_home(&[]);
    let model = Model::new(vec![
        Step::Text {
            text: "A long answer that a crash cuts short".into(),
            chunk: Some(3),
            delay_ms: Some(300),
            usage: None,
        },
        Step::text("The whole answer."),
    ]);
    let mut chat = start(&home, &model, &["chat", "--session", "talk"]);
    chat.line("tell me");
    chat.wait_for("A l", WAIT);
    chat.kill9();
    let again = start(&home, &model, &["chat", "--session", "talk"]);
    let (code, out, err) = again.finish(WAIT);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("resuming that turn"), "{err}");
    assert!(out.contains("The whole answer."), "{out}");
    let shown = show(&home, "talk");
    assert_eq!(
        messages(&shown),
        [
            ("user".to_string(), "tell me".to_string()),
            ("assistant".to_string(), "The whole answer.".to_string())
        ]
    );
    assert_eq!(shown["session"]["origin"], "chat");
}

#[test]
fn chat_killed_while_asking_asks_again_and_runs_the_call_once() {
    let (home, data) = probe_home(&[]);
    std::fs::write(data.join("n.txt"), "").unwrap();
    let model = Model::new(vec![
        Step::tool_calls(vec![append("n.txt")]),
        Step::text("Done."),
    ]);
    let mut chat = start(&home, &model, &["chat", "--session", "ask"]);
    chat.line("append one");
    chat.wait_for("Allow? [y]es", WAIT);
    chat.kill9();
    assert_eq!(read(&data.join("n.txt")), "");
    let mut again = start(&home, &model, &["chat", "--session", "ask"]);
    again.wait_for("Allow? [y]es", WAIT);
    again.line("y");
    again.wait_for("Done.", WAIT);
    let (code, out, err) = again.finish(WAIT);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(read(&data.join("n.txt")), "1");
    let audit = home.cordon(&["audit", "--session", "ask", "--json"]).ok();
    let records: Vec<Value> = audit
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{}", audit.stdout);
    assert_eq!(records[0]["origin"], "chat");
    assert_eq!(records[0]["decision"], "yes");
    assert!(
        records[0]["decided_by"]
            .as_str()
            .unwrap()
            .ends_with("at the terminal"),
        "{}",
        records[0]
    );
}

#[test]
fn chat_killed_while_a_tool_runs_never_runs_it_again() {
    // `spin` cannot change anything (no grants), so it runs without asking; a host that
    // stops while it runs cannot tell whether it finished.
    let home = TestHome::new();
    let runaway = fixture("runaway");
    home.cordon(&[
        "plugin",
        "install",
        runaway.to_str().unwrap(),
        "--limit",
        "time=20s",
    ])
    .ok();
    let model = Model::new(vec![
        Step::tool_calls(vec![call("k1", "spin", json!({}))]),
        Step::text("It was interrupted."),
    ]);
    let mut chat = start(&home, &model, &["chat", "--session", "spin"]);
    chat.line("spin");
    chat.wait_for("⚙ spin", WAIT);
    chat.kill9();
    let again = start(&home, &model, &["chat", "--session", "spin"]);
    let (code, out, err) = again.finish(WAIT);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("It was interrupted."), "{out}");
    let told = model.tool_messages(1);
    assert!(
        told[0]["content"]
            .as_str()
            .unwrap()
            .contains("its effect is unknown"),
        "{told:?}"
    );
    // One record, the interruption: the call was not run a second time.
    let audit = home.cordon(&["audit", "--session", "spin", "--json"]).ok();
    let outcomes: Vec<String> = audit
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["outcome"]["kind"].to_string())
        .collect();
    assert_eq!(outcomes, ["\"interrupted\""], "{}", audit.stdout);
}

#[test]
fn run_sessions_are_listed_forked_replayed_exported_and_removed() {
    let (home, data) = probe_home(&[]);
    std::fs::write(data.join("r.txt"), "").unwrap();
    let model = Model::new(vec![
        Step::text("First answer."),
        Step::tool_calls(vec![append("r.txt")]),
        Step::text("Second answer."),
        // The replay: the same two user messages, answered again.
        Step::text("Replayed first."),
        Step::text("Replayed second, without tools."),
    ]);
    let cwd = home.scratch("cwd");
    let env = [
        ("CORDON_LLM_URL", model.url()),
        ("CORDON_MODEL", "scripted".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = home.cordon_at(
        Some(&cwd),
        &[
            "run",
            "--session",
            "work",
            "one",
            "--then",
            "two",
            "--approve",
            "all",
        ],
        "",
        &env,
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(read(&data.join("r.txt")), "1");
    let list = home.cordon(&["sessions", "list"]).ok();
    assert!(
        list.stdout.contains("work") && list.stdout.contains("2 turn(s)"),
        "{}",
        list.stdout
    );
    // A session of that name continues: the third turn sees the first two.
    let log = home.cordon(&["sessions", "show", "work", "--log"]).ok();
    assert!(
        log.stdout.contains("user_message") && log.stdout.contains("tool_finished"),
        "{}",
        log.stdout
    );
    let fork = home
        .cordon(&["sessions", "fork", "work", "--turns", "1", "--as", "branch"])
        .ok();
    assert!(
        fork.stdout.contains("into `branch` (1 turn(s))"),
        "{}",
        fork.stdout
    );
    assert_eq!(messages(&show(&home, "branch")).len(), 2);
    // A replay sends the user messages again into a new session, here without tools.
    let replay = home.cordon_at(
        Some(&cwd),
        &[
            "sessions",
            "replay",
            "work",
            "--as",
            "again",
            "--tools",
            "none-at-all",
        ],
        "",
        &env,
    );
    assert_eq!(replay.code, 0, "{}\n{}", replay.stdout, replay.stderr);
    let replayed = show(&home, "again");
    assert_eq!(replayed["session"]["parent"], "work");
    assert_eq!(
        replayed["session"]["settings"]["tools"],
        json!(["none-at-all"])
    );
    let users: Vec<String> = messages(&replayed)
        .into_iter()
        .filter(|(role, _)| role == "user")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(users, ["one", "two"]);
    let requests = model.server.requests();
    assert!(
        requests[3].tool_names().is_empty(),
        "the replay offers no tools"
    );
    let export = home.cordon(&["sessions", "export", "work", "--log"]).ok();
    let doc: Value = serde_json::from_str(&export.stdout).unwrap();
    assert_eq!(doc["session"]["id"], "work");
    assert!(doc["transitions"].as_array().unwrap().len() > 5);
    home.cordon(&["sessions", "rm", "branch", "again"]).ok();
    let missing = home.cordon(&["sessions", "show", "branch"]).code(2);
    assert!(
        missing.stderr.contains("there is no session `branch`"),
        "{}",
        missing.stderr
    );
    // Removing a session keeps the audit log of what it did.
    let audit = home.cordon(&["audit", "--session", "work"]).ok();
    assert!(
        audit
            .stdout
            .contains("probe.fs  yes by cordon run --approve all  ok"),
        "{}",
        audit.stdout
    );
}
