//! `cordon run` end to end: the real binary, real plugins in the sandbox, and the in-process
//! scripted OpenAI-compatible server standing in for the model. Each test asserts on what the
//! user sees (stdout, --json events, exit code) and on what the model received (the recorded
//! requests: tool results with `role: "tool"` and the right `tool_call_id`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_scripted_llm::{ScriptedCall, Step};

use crate::model::{Model, call};
use cordon_tests::support::{grant_fs, home_with, install, sqlite};
use cordon_tests::{Run, TestHome, cordon_bin};
use serde_json::{Value, json};

/// Runs `cordon run <args>` against `model` in `home` (no terminal, empty stdin), from `cwd`
/// so no stray `cordon.toml` is picked up.
fn run(home: &TestHome, model: &Model, args: &[&str]) -> Run {
    let cwd = home.scratch("cwd");
    run_in(home, model, &cwd, "run", "", args)
}

/// Runs `cordon chat <args>` against `model` in `home` from `cwd`, feeding `stdin` (messages
/// and answers to approval questions, one a line; not a terminal).
fn chat_in(home: &TestHome, model: &Model, cwd: &Path, stdin: &str, args: &[&str]) -> Run {
    run_in(home, model, cwd, "chat", stdin, args)
}

/// Runs `cordon <command> <args>` against the scripted `model`.
fn run_in(
    home: &TestHome,
    model: &Model,
    cwd: &Path,
    command: &str,
    stdin: &str,
    args: &[&str],
) -> Run {
    let mut full = vec![command];
    full.extend_from_slice(args);
    home.cordon_at(
        Some(cwd),
        &full,
        stdin,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
    )
}

/// The --json events printed by a run.
fn events(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON event line ({e}): {l}\n{}", run.stdout))
        })
        .collect()
}

const SHOP: &str = "CREATE TABLE products(sku TEXT PRIMARY KEY, name TEXT, price_cents INTEGER);
INSERT INTO products VALUES ('A1','anvil',1250),('B2','bucket',399),('C3','crowbar',2100);";

/// A home with `sql` installed, read-only on a fresh shop database seen as /data.
fn sql_home(mode: &str) -> (TestHome, PathBuf) {
    let home = home_with(&["sql"]);
    let data = home.scratch("data");
    sqlite(&data.join("shop.db"), SHOP);
    install(&home, "sql", &[grant_fs(&data, "/data", mode)], &[]);
    (home, data)
}

fn host_count(db: &Path) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys;print(sqlite3.connect(sys.argv[1]).execute('select count(*) from products').fetchone()[0])",
            db.to_str().unwrap(),
        ])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn text_answer_without_tools() {
    let home = TestHome::new();
    let model = Model::new(vec![Step::text("Hello from the scripted model.")]);
    let r = run(&home, &model, &["Say hello"]).ok();
    assert!(
        r.stdout.contains("Hello from the scripted model."),
        "{}",
        r.stdout
    );
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 1);
    let msgs = reqs[0].messages();
    assert!(
        msgs.iter()
            .any(|m| m["role"] == "user" && m["content"] == "Say hello"),
        "{msgs:?}"
    );
}

#[test]
fn one_sql_query_reaches_the_model() {
    let (home, _) = sql_home("ro");
    let model = Model::one_call(
        "call_q",
        "sql_query",
        json!({"database": "/data/shop.db", "sql": "SELECT name FROM products ORDER BY sku"}),
        "There are three products.",
    );
    let r = run(&home, &model, &["What do we sell?", "--approve", "auto"]).ok();
    assert!(
        r.stdout.contains("There are three products."),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("sql_query"), "{}", r.stderr);
    // The tools offered to the model include the installed plugin's tools.
    assert!(
        model.server.requests()[0]
            .tool_names()
            .contains(&"sql_query".to_string())
    );
    let tools = model.tool_messages(1);
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["tool_call_id"], "call_q");
    let content = tools[0]["content"].to_string();
    for name in ["anvil", "bucket", "crowbar"] {
        assert!(
            content.contains(name),
            "row {name} missing from the tool result: {content}"
        );
    }
}

#[test]
fn several_calls_in_one_response_each_get_their_result() {
    let (home, _) = sql_home("ro");
    let model = Model::new(vec![
        Step::tool_calls(vec![
            call(
                "c1",
                "sql_query",
                json!({"database": "/data/shop.db", "sql": "SELECT name FROM products WHERE sku='A1'"}),
            ),
            call(
                "c2",
                "sql_query",
                json!({"database": "/data/shop.db", "sql": "SELECT name FROM products WHERE sku='C3'"}),
            ),
            call("c3", "sql_schema", json!({"database": "/data/shop.db"})),
        ]),
        Step::text("done"),
    ]);
    let r = run(&home, &model, &["Look up", "--json", "--approve", "auto"]).ok();
    let ev = events(&r);
    assert!(!ev.is_empty());
    let tools = model.tool_messages(1);
    assert_eq!(tools.len(), 3, "{tools:?}");
    let by_id = |id: &str| {
        tools
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {tools:?}"))["content"]
            .to_string()
    };
    assert!(by_id("c1").contains("anvil") && !by_id("c1").contains("crowbar"));
    assert!(by_id("c2").contains("crowbar") && !by_id("c2").contains("anvil"));
    assert!(by_id("c3").contains("price_cents"));
}

#[test]
fn ask_without_a_terminal_declines_and_the_model_is_told() {
    let (home, data) = sql_home("rw");
    let model = Model::one_call(
        "w1",
        "sql_execute",
        json!({"database": "/data/shop.db", "sql": "DELETE FROM products"}),
        "I could not delete them.",
    );
    let r = run(&home, &model, &["Delete everything", "--approve", "ask"]).ok();
    assert!(r.stderr.contains("no terminal"), "{}", r.stderr);
    assert_eq!(
        r.stderr.matches("✗ sql_execute").count(),
        1,
        "the refusal is printed once: {}",
        r.stderr
    );
    let tools = model.tool_messages(1);
    assert_eq!(tools[0]["tool_call_id"], "w1");
    assert!(
        tools[0]["content"].to_string().contains("declined"),
        "{tools:?}"
    );
    assert_eq!(
        host_count(&data.join("shop.db")),
        "3",
        "a declined call changed the db"
    );
}

#[test]
fn approve_all_runs_a_read_write_tool() {
    let (home, data) = sql_home("rw");
    let model = Model::one_call(
        "w1",
        "sql_execute",
        json!({"database": "/data/shop.db", "sql": "INSERT INTO products VALUES ('D4','drill',5000)"}),
        "Added the drill.",
    );
    run(&home, &model, &["Add a drill", "--approve", "all"]).ok();
    assert_eq!(
        host_count(&data.join("shop.db")),
        "4",
        "sql_execute did not write"
    );
    let tools = model.tool_messages(1);
    assert_eq!(tools[0]["tool_call_id"], "w1");
    assert!(
        !tools[0]["content"].to_string().contains("declined"),
        "{tools:?}"
    );
}

#[test]
fn config_deny_rule_wins_over_approve_all() {
    let (home, data) = sql_home("rw");
    let cfg = home.scratch("cfg").join("cordon.toml");
    std::fs::write(&cfg, "[approval.tools]\nsql_execute = \"deny\"\n").unwrap();
    let model = Model::one_call(
        "w1",
        "sql_execute",
        json!({"database": "/data/shop.db", "sql": "DELETE FROM products"}),
        "Not allowed.",
    );
    let r = run(
        &home,
        &model,
        &[
            "Delete",
            "--approve",
            "all",
            "--config",
            cfg.to_str().unwrap(),
        ],
    )
    .ok();
    assert_eq!(host_count(&data.join("shop.db")), "3");
    let reqs = model.server.requests();
    // A denied tool is not offered, and a call to it anyway is refused back to the model.
    assert!(
        !reqs[0].tool_names().contains(&"sql_execute".to_string()),
        "a denied tool was offered: {:?}",
        reqs[0].tool_names()
    );
    assert!(reqs[0].tool_names().contains(&"sql_query".to_string()));
    let tools = model.tool_messages(1);
    assert_eq!(tools[0]["tool_call_id"], "w1");
    let result = tools[0]["content"].as_str().unwrap();
    assert!(
        result.contains("cordon.toml denies the tool `sql_execute`")
            && !result.contains("declined"),
        "{result}"
    );
    assert_eq!(
        r.stderr.matches("✗ sql_execute").count(),
        1,
        "the refusal is printed once: {}",
        r.stderr
    );
}

#[test]
fn unknown_tool_and_invalid_arguments_go_back_as_errors() {
    let (home, _) = sql_home("ro");
    let model = Model::new(vec![
        Step::tool_calls(vec![
            call("u1", "sql_querry", json!({"sql": "SELECT 1"})),
            call("b1", "sql_query", json!({"database": 7})),
        ]),
        Step::text("Sorry."),
    ]);
    run(&home, &model, &["q", "--approve", "auto"]).ok();
    let tools = model.tool_messages(1);
    let u = tools
        .iter()
        .find(|m| m["tool_call_id"] == "u1")
        .expect("u1")
        .to_string();
    let b = tools
        .iter()
        .find(|m| m["tool_call_id"] == "b1")
        .expect("b1")
        .to_string();
    assert!(u.contains("sql_querry") && u.contains("sql_query"), "{u}");
    assert!(b.contains("database") || b.contains("sql"), "{b}");
}

#[test]
fn sandbox_refusal_goes_back_as_a_tool_error() {
    let (home, _) = sql_home("ro");
    let model = Model::one_call(
        "x1",
        "sql_query",
        json!({"database": "/etc/passwd.db", "sql": "SELECT 1"}),
        "That is outside what I may read.",
    );
    let r = run(&home, &model, &["q", "--approve", "auto", "--json"]).ok();
    let ev = events(&r);
    assert!(
        ev.iter().any(|e| e["is_error"] == true),
        "no error tool result event: {}",
        r.stdout
    );
    let tools = model.tool_messages(1);
    assert_eq!(tools[0]["tool_call_id"], "x1");
    assert!(
        tools[0]["content"].to_string().contains("/etc/passwd.db"),
        "{tools:?}"
    );
}

#[test]
fn iteration_limit_ends_with_a_tools_free_answer() {
    let (home, _) = sql_home("ro");
    let q = |i: i64| {
        Step::tool_calls(vec![call(
            &format!("i{i}"),
            "sql_query",
            json!({"database": "/data/shop.db", "sql": format!("SELECT {i}")}),
        )])
    };
    let model = Model::new(vec![
        q(1),
        q(2),
        Step::text("Final answer after the limit."),
    ]);
    let r = run(
        &home,
        &model,
        &["loop", "--approve", "auto", "--max-iterations", "2"],
    )
    .ok();
    assert!(
        r.stdout.contains("Final answer after the limit."),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("reached 2 tool steps"), "{}", r.stderr);
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        reqs[2].tool_names().is_empty(),
        "the final request still offered tools"
    );
}

#[test]
fn repeating_the_same_call_stops_with_exit_3() {
    let (home, _) = sql_home("ro");
    let same = || {
        Step::tool_calls(vec![call(
            "r",
            "sql_query",
            json!({"database": "/data/shop.db", "sql": "SELECT 1"}),
        )])
    };
    let model = Model::new(vec![same(), same(), same(), same(), Step::text("never")]);
    let r = run(&home, &model, &["spin", "--approve", "auto"]).code(3);
    assert!(!r.stdout.contains("never"));
}

#[test]
fn a_503_is_retried_then_succeeds() {
    let home = TestHome::new();
    let model = Model::new(vec![
        Step::status(503, "overloaded"),
        Step::text("after retry"),
    ]);
    let r = run(&home, &model, &["hi"]).ok();
    assert!(r.stdout.contains("after retry"), "{}", r.stdout);
    assert!(r.stderr.contains("retry 1/"), "{}", r.stderr);
    assert_eq!(model.server.requests().len(), 2);
}

#[test]
fn retries_exhausted_fail_clearly() {
    let home = TestHome::new();
    let cfg = home.scratch("cfg").join("cordon.toml");
    std::fs::write(
        &cfg,
        "[llm.retry]\nmax_retries = 2\ninitial_backoff_ms = 10\nmax_backoff_ms = 20\n",
    )
    .unwrap();
    let model = Model::new(vec![
        Step::status(503, "overloaded"),
        Step::status(503, "overloaded"),
        Step::status(503, "overloaded"),
    ]);
    let r = run(&home, &model, &["hi", "--config", cfg.to_str().unwrap()]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("503") || r.stderr.contains("overloaded"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert_eq!(model.server.requests().len(), 3);
}

#[test]
fn hermes_format_calls_a_real_tool() {
    let (home, _) = sql_home("ro");
    let model = Model::new(vec![
        Step::Hermes {
            content: Some("Checking.".into()),
            calls: vec![ScriptedCall::new(
                "sql_query",
                json!({"database": "/data/shop.db", "sql": "SELECT name FROM products WHERE sku='B2'"}),
            )],
        },
        Step::text("A bucket."),
    ]);
    let r = run(
        &home,
        &model,
        &["q", "--approve", "auto", "--tool-format", "hermes"],
    )
    .ok();
    assert!(r.stdout.contains("A bucket."), "{}", r.stdout);
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 2);
    let later = serde_json::to_string(&reqs[1].messages()).unwrap();
    assert!(
        later.contains("bucket"),
        "the tool result did not reach the model: {later}"
    );
}

#[test]
fn then_sends_a_second_turn() {
    let home = TestHome::new();
    let model = Model::new(vec![Step::text("first"), Step::text("second")]);
    let r = run(&home, &model, &["one", "--then", "two"]).ok();
    assert!(
        r.stdout.contains("first") && r.stdout.contains("second"),
        "{}",
        r.stdout
    );
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = serde_json::to_string(&reqs[1].messages()).unwrap();
    assert!(
        msgs.contains("one") && msgs.contains("first") && msgs.contains("two"),
        "{msgs}"
    );
}

#[test]
fn save_then_load_continues_the_conversation() {
    let home = TestHome::new();
    let saved = home.scratch("conv").join("c.json");
    let model = Model::new(vec![
        Step::text("remembered: blue"),
        Step::text("you said blue"),
    ]);
    run(
        &home,
        &model,
        &["my colour is blue", "--save", saved.to_str().unwrap()],
    )
    .ok();
    assert!(saved.is_file());
    run(
        &home,
        &model,
        &[
            "what colour?",
            "--load",
            saved.to_str().unwrap(),
            "--save",
            saved.to_str().unwrap(),
        ],
    )
    .ok();
    let msgs = serde_json::to_string(&model.server.requests()[1].messages()).unwrap();
    assert!(
        msgs.contains("my colour is blue") && msgs.contains("remembered: blue"),
        "{msgs}"
    );
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("you said blue"), "{text}");
}

#[test]
fn sigint_during_a_runaway_tool_exits_130_and_keeps_the_saved_conversation() {
    let home = TestHome::new();
    install_fixture(&home, "runaway", &["time=30s"]);
    let saved = home.scratch("conv").join("c.json");
    let model = Model::new(vec![
        Step::tool_calls(vec![call("s1", "spin", json!({}))]),
        Step::text("never reached"),
    ]);
    let cwd = home.scratch("cwd");
    let child = Command::new(cordon_bin())
        .args([
            "run",
            "spin please",
            "--approve",
            "all",
            "--save",
            saved.to_str().unwrap(),
        ])
        .current_dir(&cwd)
        .env("CORDON_HOME", home.path())
        .env("CORDON_LLM_URL", model.url())
        .env("CORDON_MODEL", "scripted")
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the tool is running (the model has been asked once and the call started).
    let start = Instant::now();
    while model.server.requests().is_empty() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "stderr: {stderr}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        t0.elapsed()
    );
    assert_eq!(
        model.server.requests().len(),
        1,
        "the model was asked again after cancel"
    );
    let text = std::fs::read_to_string(&saved).expect("the conversation was saved");
    let conv: Value = serde_json::from_str(&text).expect("the saved conversation is JSON");
    assert!(text.contains("spin please"), "{conv}");
}

#[test]
fn unreachable_endpoint_fails_clearly() {
    let home = TestHome::new();
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = home.scratch("cfg").join("cordon.toml");
    std::fs::write(&cfg, "[llm.retry]\nmax_retries = 0\n").unwrap();
    let r = home.cordon_env(
        &["run", "hi", "--config", cfg.to_str().unwrap()],
        &[("CORDON_LLM_URL", &format!("http://127.0.0.1:{port}/v1"))],
    );
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(&port.to_string()),
        "the error does not name the endpoint: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn bad_config_file_fails_clearly() {
    let home = TestHome::new();
    let cfg = home.scratch("cfg").join("cordon.toml");
    std::fs::write(&cfg, "[llm]\nmodle = \"x\"\n").unwrap();
    let r = home.cordon_env(
        &["run", "hi", "--config", cfg.to_str().unwrap()],
        &[("CORDON_LLM_URL", "http://127.0.0.1:9/v1")],
    );
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("modle"),
        "the error does not name the bad key: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("cordon.toml"),
        "the error does not name the file: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

fn install_fixture(home: &TestHome, name: &str, limits: &[&str]) {
    let wasm = cordon_tests::fixture(name);
    let mut args = vec!["plugin", "install", wasm.to_str().unwrap(), "--yes"];
    for l in limits {
        args.extend(["--limit", l]);
    }
    home.cordon(&args).ok();
}

#[test]
fn chat_fork_continues_on_a_branch_without_the_later_turns() {
    let home = TestHome::new();
    let model = Model::new(vec![Step::text("answer one"), Step::text("answer two")]);
    let cwd = home.scratch("cwd");
    let mut child = Command::new(cordon_bin())
        .args(["chat"])
        .current_dir(&cwd)
        .env("CORDON_HOME", home.path())
        .env("CORDON_LLM_URL", model.url())
        .env("CORDON_MODEL", "scripted")
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"first question\n/fork 0\nsecond question\n/branch\n")
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("answer one") && stdout.contains("answer two"),
        "{stdout}"
    );
    assert!(
        stdout.contains("* 1:"),
        "the fork is not the active branch: {stdout}"
    );
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 2);
    let second = serde_json::to_string(&reqs[1].messages()).unwrap();
    assert!(second.contains("second question"), "{second}");
    assert!(
        !second.contains("first question") && !second.contains("answer one"),
        "the fork kept the dropped turn: {second}"
    );
}

const NOTE: &str = "the original note";

/// A home where `files` can read and `probe` can write one directory, seen as /data, which
/// holds note.txt. With a read-write grant every call asks for approval.
fn read_and_write_home() -> (TestHome, PathBuf) {
    let home = home_with(&["files"]);
    let data = home.scratch("data");
    std::fs::write(data.join("note.txt"), NOTE).unwrap();
    let grant = grant_fs(&data, "/data", "rw");
    install(&home, "files", std::slice::from_ref(&grant), &[]);
    let probe = cordon_tests::fixture("probe");
    home.cordon(&[
        "plugin",
        "install",
        probe.to_str().unwrap(),
        "--yes",
        "--grant",
        &grant,
    ])
    .ok();
    (home, data)
}

/// The model reads note.txt, then overwrites it, in one response with the ids the test gives;
/// the user answers `y` to the first question and `n` to the second. The write must not
/// happen, and each call must get its own result on the wire.
fn one_answer_per_call(read: ScriptedCall, write: ScriptedCall) {
    let (home, data) = read_and_write_home();
    let model = Model::new(vec![
        Step::tool_calls(vec![read, write]),
        Step::text("done"),
    ]);
    let cwd = home.scratch("cwd");
    let r = chat_in(&home, &model, &cwd, "read then write the note\ny\nn\n", &[]).ok();
    assert_eq!(
        std::fs::read_to_string(data.join("note.txt")).unwrap(),
        NOTE,
        "a call the user declined overwrote the note\n{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("wants to run with").count(),
        2,
        "one question per call: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("Tool `read_file`") && r.stderr.contains("Tool `fs`"),
        "{}",
        r.stderr
    );
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 2, "the `n` answer was taken as a new message");
    let msgs = reqs[1].messages();
    let assistant = msgs
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the assistant message with the calls");
    let ids: Vec<&str> = assistant["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(
        ids[0] != ids[1] && !ids[0].is_empty() && !ids[1].is_empty(),
        "{ids:?}"
    );
    let tools = model.tool_messages(1);
    let answered: Vec<&str> = tools
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ids, "each result answers its own call");
    let read_result = tools[0]["content"].as_str().unwrap();
    let write_result = tools[1]["content"].as_str().unwrap();
    assert!(read_result.contains(NOTE), "{read_result}");
    assert!(
        write_result.contains("declined") && !write_result.contains(NOTE),
        "{write_result}"
    );
}

#[test]
fn calls_sharing_an_id_are_approved_one_by_one() {
    one_answer_per_call(
        call("dup", "read_file", json!({"path": "/data/note.txt"})),
        call(
            "dup",
            "fs",
            json!({"op": "write", "path": "/data/note.txt", "content": "overwritten"}),
        ),
    );
}

#[test]
fn a_missing_id_does_not_merge_with_a_model_id_like_the_parsers_fallback() {
    // Without an id the stream parser used to name the first call `call_0`, the id the model
    // gave the second.
    one_answer_per_call(
        ScriptedCall::without_id("read_file", json!({"path": "/data/note.txt"})),
        call(
            "call_0",
            "fs",
            json!({"op": "write", "path": "/data/note.txt", "content": "overwritten"}),
        ),
    );
}

#[test]
fn a_deny_rule_still_applies_when_two_plugins_offer_the_tool() {
    let home = home_with(&["files"]);
    let data = home.scratch("data");
    std::fs::write(data.join("secret.txt"), "TOP-SECRET-CONTENT").unwrap();
    let grant = grant_fs(&data, "/data", "ro");
    install(&home, "files", std::slice::from_ref(&grant), &[]);
    let files = cordon_tests::support::plugin_wasm("files");
    let second = home
        .cordon(&[
            "plugin",
            "install",
            files.to_str().unwrap(),
            "--name",
            "files2",
            "--yes",
            "--grant",
            &grant,
        ])
        .ok();
    let cwd = home.scratch("cwd");
    std::fs::write(
        cwd.join("cordon.toml"),
        "[approval.tools]\nread_file = \"deny\"\n",
    )
    .unwrap();
    let model = Model::one_call(
        "r1",
        "files__read_file",
        json!({"path": "/data/secret.txt"}),
        "I may not read it.",
    );
    let r = run(&home, &model, &["read the secret", "--approve", "auto"]).ok();
    let reqs = model.server.requests();
    for (i, req) in reqs.iter().enumerate() {
        let body = req.body.to_string();
        assert!(
            !body.contains("TOP-SECRET"),
            "request {i} carries the denied file: {body}"
        );
    }
    for req in &reqs {
        let offered = req.tool_names();
        assert!(
            !offered.iter().any(|n| n.ends_with("read_file")),
            "a denied tool was offered: {offered:?}"
        );
    }
    let tools = model.tool_messages(1);
    assert_eq!(tools[0]["tool_call_id"], "r1");
    let result = tools[0]["content"].as_str().unwrap();
    assert!(
        result.contains("cordon.toml denies the tool `read_file`") && !result.contains("declined"),
        "{result}"
    );
    // The collision is reported at the start with the names the model sees; the refusal is
    // printed once.
    assert!(
        r.stderr.contains("`files__read_file`") && r.stderr.contains("`files2__read_file`"),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("denies the tool `read_file`").count(),
        1,
        "{}",
        r.stderr
    );
    assert!(
        second.stdout.contains("`files__read_file`")
            && second.stdout.contains("`files2__read_file`"),
        "the install does not say what the model now sees: {}",
        second.stdout
    );
}

/// What Cordon's real approval question starts with.
const REAL_QUESTION: &str = "Allow? [y]es / [n]o / [a]lways for this tool / ne[v]er: ";

/// A model that streams terminal controls (window title, clipboard, hidden text) and a fake
/// approval question, then calls a tool that needs approval, a plugin whose result and log
/// carry controls, and a tool whose name does. On a terminal none of it acts, everything is
/// shown visibly, the real question is asked on a clean line and the model gets exact data.
#[test]
fn chat_on_a_terminal_shows_model_and_tool_text_inert_and_asks_on_a_clean_line() {
    use cordon_tests::terminal::{HOSTILE, HOSTILE_SHOWN, run as on_terminal};

    let home = TestHome::new();
    let data = home.scratch("data");
    let rw = format!("fs:{}:/data:rw", data.display());
    let probe = cordon_tests::fixture("probe");
    home.cordon(&["plugin", "install", probe.to_str().unwrap(), "--grant", &rw])
        .ok();
    install_fixture(&home, "escapes", &[]);
    let bogus = format!("nope{HOSTILE}");
    let model = Model::new(vec![
        Step::ToolCalls {
            // The fake question is "hidden" from here on by ESC[8m and never ends its line.
            content: Some(format!("{HOSTILE}\n\u{1b}[8m{REAL_QUESTION}")),
            calls: vec![
                call("c1", "echo", json!({"text": HOSTILE})),
                call("c2", "shout", json!({})),
                call("c3", &bogus, json!({})),
            ],
            chunk: None,
            interleave: false,
            usage: None,
        },
        Step::text(&format!("done {HOSTILE}")),
    ]);
    let mut chat = home.command(&["chat"]);
    chat.current_dir(home.scratch("cwd"))
        .env("CORDON_LLM_URL", model.url())
        .env("CORDON_MODEL", "scripted")
        // The line editor moves the cursor with escape sequences of its own, except on a
        // terminal that has none: here every escape sequence would be the model's or a
        // plugin's. (chat_terminal.rs types into the editor.)
        .env("TERM", "dumb");
    let shown = on_terminal(chat, b"go\ny\n/quit\n")
        .ok()
        .shows_only_text()
        .shows(&[
            // Streamed text, the fake question included, visible and inert.
            &format!("{HOSTILE_SHOWN}\n\\x1b[8m{REAL_QUESTION}"),
            // The plugin's log record and the rejected tool name.
            &format!("log {HOSTILE_SHOWN}"),
            "nope\\x1b]0;pwned-title\\x07",
            &format!("done {HOSTILE_SHOWN}"),
            "Tool `echo`",
            "wants to run",
        ])
        .output;

    // The real question comes after the tool's description, at the start of a line.
    let described = shown.find("Tool `echo`").unwrap();
    let asked = described
        + shown[described..]
            .find(REAL_QUESTION)
            .unwrap_or_else(|| panic!("the real question is missing:\n{shown}"));
    let before = &shown[..asked];
    assert!(
        before.ends_with('\n') || before.ends_with("\n\u{1b}[0m"),
        "the real question does not start a line: {:?}",
        &before[before.len().saturating_sub(80)..]
    );

    // The tools ran (echo after "y") and the model got their exact results.
    let tools = model.tool_messages(1);
    let content = |id: &str| {
        tools
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {tools:?}"))["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        content("c2").contains(&format!("result {HOSTILE}")),
        "{tools:?}"
    );
    let echoed = content("c1");
    assert!(!echoed.contains("declined"), "{echoed}");
    assert!(echoed.contains("\\u001b]0;pwned-title"), "{echoed}");
}

/// `cordon run --json` on a terminal prints JSON that decodes to the exact streamed text yet
/// holds nothing a terminal acts on; without --json a pipe gets the text as is.
#[test]
fn run_on_a_terminal_keeps_json_exact_and_a_pipe_gets_raw_text() {
    use cordon_tests::terminal::{HOSTILE, run as on_terminal};

    let home = TestHome::new();
    let model = Model::new(vec![Step::text(HOSTILE), Step::text(HOSTILE)]);
    let mut json_run = home.command(&["run", "go", "--json"]);
    json_run
        .current_dir(home.scratch("cwd"))
        .env("CORDON_LLM_URL", model.url())
        .env("CORDON_MODEL", "scripted");
    let shown = on_terminal(json_run, b"").ok().shows_only_text().output;
    let streamed: String = shown
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("not a JSON event line ({e}): {l:?}"))
        })
        .filter(|e| e["type"] == "text_delta")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streamed, HOSTILE);

    let piped = run(&home, &model, &["go"]).ok();
    assert!(
        piped.stdout.starts_with(HOSTILE),
        "a pipe did not get the exact text: {:?}",
        piped.stdout
    );
}

/// `cordon run --explain-tools --approve all QUESTION` against `model`.
fn explained(home: &TestHome, model: &Model, question: &str) -> Run {
    run(
        home,
        model,
        &["--explain-tools", "--approve", "all", question],
    )
    .ok()
}

/// A home with the `typed` fixture: more tools than a request offers.
fn typed_home() -> TestHome {
    let home = TestHome::new();
    let typed = cordon_tests::fixture("typed").display().to_string();
    home.cordon(&["plugin", "install", &typed, "--yes"]).ok();
    home
}

/// `[agent] router_model`: a small model is asked once a turn which tools the question needs
/// (its own request, with its own model name and no tools), and its pick is offered though no
/// word of the question matches it.
#[test]
fn a_router_model_picks_the_tools_once_a_turn() {
    let home = typed_home();
    std::fs::write(
        home.scratch("cwd").join("cordon.toml"),
        "[agent]\nrouter_model = \"tiny-router\"\n",
    )
    .unwrap();
    let model = Model::new(vec![
        // The router's answer: one tool, one that is not installed, and words around them.
        Step::text("kinds_get_extremes, rm_rf"),
        Step::tool_calls(vec![call("k1", "kinds_get_extremes", json!({}))]),
        Step::text("Done."),
    ]);
    let r = explained(&home, &model, "What are the limits?");
    let reqs = model.server.requests();
    assert_eq!(reqs.len(), 3, "the router is asked once a turn");
    assert_eq!(reqs[0].body["model"], "tiny-router");
    assert!(reqs[0].tool_names().is_empty());
    let listed = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(listed.contains("- kinds_get_extremes: "), "{listed}");
    assert_eq!(reqs[1].body["model"], "scripted");
    let offered = reqs[1].tool_names();
    assert_eq!(offered.len(), 12, "{offered:?}");
    assert!(
        offered.contains(&"kinds_get_extremes".to_string()),
        "{offered:?}"
    );
    assert!(
        r.stderr
            .contains("kinds_get_extremes (picked by the router model)"),
        "{}",
        r.stderr
    );
}

#[test]
fn with_many_tools_a_request_offers_those_the_question_needs_and_an_unoffered_one_still_runs() {
    let home = typed_home();
    let model = Model::new(vec![
        // A tool the question does not name: installed and allowed, so it runs.
        Step::tool_calls(vec![call("k1", "kinds_get_extremes", json!({}))]),
        Step::text("Done."),
    ]);
    let r = explained(&home, &model, "Add 40 and 2, then echo a point back");
    let reqs = model.server.requests();
    let first = reqs[0].tool_names();
    assert_eq!(first.len(), 12, "{first:?}");
    assert!(
        first.contains(&"calc_add".to_string()) && first.contains(&"kinds_echo_point".to_string()),
        "{first:?}"
    );
    assert!(
        !first.contains(&"kinds_get_extremes".to_string()),
        "{first:?}"
    );
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(first, sorted, "offered in name order");
    // It ran, and the next request offers it.
    let told = model.tool_messages(1);
    assert!(
        told[0]["content"]
            .as_str()
            .unwrap()
            .contains("18446744073709551615"),
        "{told:?}"
    );
    assert!(
        reqs[1]
            .tool_names()
            .contains(&"kinds_get_extremes".to_string())
    );
    assert!(
        r.stderr.contains("[tools: 12 of ") && r.stderr.contains("calc_add (matched"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("kinds_get_extremes (called earlier)"),
        "{}",
        r.stderr
    );
}
