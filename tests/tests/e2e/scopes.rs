//! Who may do what in `cordon serve` with a token file of several people: a session is its
//! creator's (another token is told it does not exist), a question is answered by someone
//! other than the one whose turn caused it unless that one is given `approve:own`, the audit
//! log shows a token its own turns, and a scope a request lacks is named in a `403`.

use std::path::Path;
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::serve::{Answer, Served};
use cordon_tests::support;
use serde_json::{Value, json};

use crate::model::{Model, call};

const WAIT: Duration = Duration::from_secs(60);

const ALICE: &str = "alice-0123456789abcdef";
const BOB: &str = "bob-0123456789abcdef00";
const CAROL: &str = "carol-0123456789abcdef";
const DAVE: &str = "dave-0123456789abcdef0";
const OPS: &str = "ops-0123456789abcdef00";
const EVE: &str = "eve-0123456789abcdef00";

/// Alice and Bob with a named token's scopes, Carol who approves for everyone, Dave who may
/// only run his own sessions, and an admin.
fn token_file(dir: &Path) -> String {
    let path = dir.join("tokens");
    std::fs::write(
        &path,
        format!(
            "alice {ALICE}\nbob {BOB}\ncarol {CAROL} sessions:all,approve\n\
             dave {DAVE} sessions\nops {OPS} admin\neve {EVE} audit\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn as_(served: &Served, token: &str, method: &str, path: &str, body: Option<Value>) -> Answer {
    served.raw(
        method,
        path,
        Some(token),
        body.map(|b| b.to_string()).as_deref(),
    )
}

#[test]
fn sessions_questions_and_records_belong_to_who_made_them() {
    let (home, data) = support::probe_home(&[]);
    std::fs::write(data.join("note.txt"), "").unwrap();
    let model = Model::new(vec![
        Step::tool_calls(vec![call(
            "k1",
            "fs",
            json!({"op": "append", "path": "/data/note.txt", "content": "hi"}),
        )]),
        Step::text("Written."),
    ]);
    let tokens = token_file(&home.scratch("tokens"));
    let mut served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &["--token-file", &tokens],
    );
    let me = as_(&served, ALICE, "GET", "/api/v1/me", None);
    assert_eq!(
        me.json,
        json!({"name": "alice", "scopes": ["sessions", "approve", "audit"]})
    );

    // Alice's session does not exist for Bob, whatever he does with it, and reads exactly as
    // one that does not exist at all.
    let created = as_(
        &served,
        ALICE,
        "POST",
        "/api/v1/sessions",
        Some(json!({"id": "a1"})),
    );
    assert_eq!(created.status, 201, "{}", created.text);
    let missing = as_(&served, BOB, "GET", "/api/v1/sessions/nothing", None);
    let theirs = as_(&served, BOB, "GET", "/api/v1/sessions/a1", None);
    assert_eq!(theirs.status, 404);
    assert_eq!(
        theirs.text,
        missing.text.replace("nothing", "a1"),
        "a session of another token reads as one that does not exist"
    );
    for (method, path, body) in [
        ("DELETE", "/api/v1/sessions/a1", None),
        (
            "POST",
            "/api/v1/sessions/a1/messages",
            Some(json!({"text": "hi", "stream": false})),
        ),
        ("POST", "/api/v1/sessions/a1/retry", Some(json!({}))),
        ("POST", "/api/v1/sessions/a1/cancel", None),
        (
            "POST",
            "/api/v1/sessions/a1/fork",
            Some(json!({"id": "stolen"})),
        ),
        ("GET", "/api/v1/sessions/a1/events", None),
    ] {
        let answer = as_(&served, BOB, method, path, body);
        assert_eq!(answer.status, 404, "{method} {path}: {}", answer.text);
    }
    let listed = |token: &str| -> Vec<String> {
        as_(&served, token, "GET", "/api/v1/sessions", None).json["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(ALICE), ["a1"]);
    assert!(listed(BOB).is_empty());
    assert_eq!(listed(CAROL), ["a1"]);

    // Alice's turn asks about its call. She sees the question but may not answer it herself;
    // Bob does not see it; Carol may.
    served.token = ALICE.to_string();
    let events = served.stream("/api/v1/sessions/a1/messages", json!({"text": "write"}));
    events.until("approval_needed", WAIT);
    let question = served.pending("a1");
    assert_eq!(question["may_answer"], false, "{question}");
    assert_eq!(question["owner"], "alice");
    assert_eq!(question["asked_by"], "alice");
    let answer_path = format!(
        "/api/v1/approvals/a1/{}",
        question["call_id"].as_str().unwrap()
    );
    let own = as_(
        &served,
        ALICE,
        "POST",
        &answer_path,
        Some(json!({"answer": "yes"})),
    );
    assert_eq!(own.status, 403, "{}", own.text);
    assert!(
        own.text
            .contains("token `alice` may not answer a question about a call its own turn caused")
            && own.text.contains("the scope `approve:own`"),
        "{}",
        own.text
    );
    let pending =
        |token: &str| as_(&served, token, "GET", "/api/v1/approvals", None).json["pending"].clone();
    assert_eq!(pending(BOB), json!([]));
    let bobs = as_(
        &served,
        BOB,
        "POST",
        &answer_path,
        Some(json!({"answer": "yes"})),
    );
    assert_eq!(bobs.status, 404, "{}", bobs.text);
    assert_eq!(pending(CAROL)[0]["may_answer"], true);
    // Carol answers from a terminal, with a token file whose first line is hers, scopes and
    // all.
    let carols = home.scratch("carol").join("tokens");
    std::fs::write(&carols, format!("carol {CAROL} sessions:all,approve\n")).unwrap();
    let url = format!("http://{}", served.addr);
    let call_id = question["call_id"].as_str().unwrap();
    let carol = |args: &[&str]| {
        let mut all = vec!["approve"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--url", &url, "--token-file", carols.to_str().unwrap()]);
        home.cordon(&all).ok()
    };
    assert!(carol(&["--list"]).stdout.contains(call_id));
    let answered = carol(&["a1", call_id, "yes"]);
    assert!(
        answered.stdout.contains("Answered yes"),
        "{}",
        answered.stdout
    );
    events.until("turn_finished", WAIT);
    assert_eq!(
        std::fs::read_to_string(data.join("note.txt")).unwrap(),
        "hi"
    );

    // The record says who asked and who decided; each sees what the scopes give.
    let records = |token: &str| as_(&served, token, "GET", "/api/v1/audit?kind=tool_call", None);
    let alices = records(ALICE).json["records"].clone();
    assert_eq!(alices.as_array().unwrap().len(), 1, "{alices}");
    assert_eq!(alices[0]["requested_by"]["token"], "alice");
    assert_eq!(alices[0]["decided_by"], "API token `carol`");
    assert_eq!(records(BOB).json["records"], json!([]));
    assert_eq!(records(OPS).json["records"].as_array().unwrap().len(), 1);
    let daves = records(DAVE);
    assert_eq!(daves.status, 403);
    assert!(daves.text.contains("the scope `audit`"), "{}", daves.text);
    // Dave may run sessions of his own, and may not answer questions at all.
    let created = as_(
        &served,
        DAVE,
        "POST",
        "/api/v1/sessions",
        Some(json!({"id": "d1"})),
    );
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(
        as_(&served, DAVE, "GET", "/api/v1/sessions/d1", None).status,
        200
    );
    // Eve, who only reads her records, may not run anything: not a session, nor through the
    // gateway, nor MCP.
    for (path, body) in [
        ("/api/v1/sessions", json!({})),
        (
            "/v1/chat/completions",
            json!({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/mcp",
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "eve", "version": "1"}}}),
        ),
    ] {
        let refused = as_(&served, EVE, "POST", path, Some(body));
        assert_eq!(refused.status, 403, "{path}: {}", refused.text);
        assert!(
            refused.text.contains("token `eve` may not")
                && refused.text.contains("the scope `sessions`"),
            "{path}: {}",
            refused.text
        );
    }
    // The admin sees everything.
    let all = as_(&served, OPS, "GET", "/api/v1/sessions", None);
    assert_eq!(
        all.json["sessions"].as_array().unwrap().len(),
        2,
        "{}",
        all.text
    );
    // `cordon audit` filters by who asked and who decided.
    let by_carol = home
        .cordon(&["audit", "--decided-by", "carol", "--json"])
        .ok();
    assert_eq!(by_carol.stdout.lines().count(), 1, "{}", by_carol.stdout);
    let by_bob = home.cordon(&["audit", "--asked-by", "bob", "--json"]).ok();
    assert_eq!(by_bob.stdout.trim(), "");
}

/// The attack: a question asked again after the host died (or another host took the session
/// up) was asked with nobody as the asker, so the one whose turn caused the call could answer
/// it with `approve` alone. The turn's recorded requester still asks it.
#[test]
fn a_question_asked_again_after_a_crash_is_still_the_askers_own() {
    let (home, data) = support::probe_home(&[]);
    std::fs::write(data.join("once.txt"), "").unwrap();
    let model = Model::new(vec![
        Step::tool_calls(vec![call(
            "k1",
            "fs",
            json!({"op": "append", "path": "/data/once.txt", "content": "1"}),
        )]),
        Step::text("Done."),
    ]);
    let tokens = token_file(&home.scratch("tokens"));
    let config = home.scratch("config").join("cordon.toml");
    std::fs::write(&config, "[store]\nlease_secs = 2\n").unwrap();
    let start = || {
        let mut served = Served::start(
            &home,
            &[
                ("CORDON_LLM_URL", &model.url()),
                ("CORDON_MODEL", "scripted"),
            ],
            &[
                "--token-file",
                &tokens,
                "--config",
                config.to_str().unwrap(),
            ],
        );
        served.token = CAROL.to_string();
        served
    };
    let mut served = start();
    let created = as_(
        &served,
        ALICE,
        "POST",
        "/api/v1/sessions",
        Some(json!({"id": "a2"})),
    );
    assert_eq!(created.status, 201, "{}", created.text);
    served.token = ALICE.to_string();
    let _events = served.stream("/api/v1/sessions/a2/messages", json!({"text": "append"}));
    served.token = CAROL.to_string();
    served.pending("a2");
    served.kill9();
    let served = start();
    let again = served.pending("a2");
    assert_eq!(again["asked_by"], "alice", "{again}");
    let path = format!(
        "/api/v1/approvals/a2/{}",
        again["call_id"].as_str().unwrap()
    );
    let own = as_(
        &served,
        ALICE,
        "POST",
        &path,
        Some(json!({"answer": "yes"})),
    );
    assert_eq!(own.status, 403, "{}", own.text);
    let carols = as_(
        &served,
        CAROL,
        "POST",
        &path,
        Some(json!({"answer": "yes"})),
    );
    assert_eq!(carols.status, 200, "{}", carols.text);
}
