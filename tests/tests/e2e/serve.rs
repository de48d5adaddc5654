//! `cordon serve` end to end: the real binary on 127.0.0.1, the scripted model, the probe
//! plugin in the sandbox, and clients over HTTP. Crashes are real (SIGKILL at points inside a
//! turn), and so are shutdowns (SIGTERM), a shared PostgreSQL store and two hosts on it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::serve::{Served, eventually};
use cordon_tests::support::{self, grant_fs};
use cordon_tests::{TestHome, fixture};
use serde_json::{Value, json};

use crate::model::{Model, call};

pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// A home with the probe installed, read-write on a fresh `data` directory seen as /data, and
/// a config whose leases are short so that a killed host's sessions are taken up quickly.
pub(crate) fn probe_home(extra_grants: &[String]) -> (TestHome, PathBuf, PathBuf) {
    let (home, data) = support::probe_home(extra_grants);
    let config = home.scratch("config").join("cordon.toml");
    std::fs::write(&config, "[store]\nlease_secs = 2\n").unwrap();
    (home, data, config)
}

fn serve(home: &TestHome, model: &Model, config: &Path, args: &[&str]) -> Served {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    Served::start(
        home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &all,
    )
}

/// A call appending `content` to `/data/<file>`, which the test creates empty first, so the
/// file says how many times the call ran.
pub(crate) fn write_call(id: &str, file: &str, content: &str) -> cordon_scripted_llm::ScriptedCall {
    call(
        id,
        "fs",
        json!({"op": "append", "path": format!("/data/{file}"), "content": content}),
    )
}

pub(crate) fn empty_file(data: &Path, file: &str) {
    std::fs::write(data.join(file), "").unwrap();
}

/// Waits until the session is idle again (its turn ended) and returns it.
pub(crate) fn idle(served: &Served, session: &str) -> Value {
    eventually(WAIT, "the session to finish its turn", || {
        let answer = served.get(&format!("/api/v1/sessions/{session}"));
        (answer.json["session"]["state"] == "idle" && answer.json["running"] == false)
            .then_some(answer.json)
    })
}

pub(crate) fn create(served: &Served, session: &str) {
    let created = served.post("/api/v1/sessions", json!({"id": session}));
    assert_eq!(created.status, 201, "{}", created.text);
}

pub(crate) fn roles(session: &Value) -> Vec<String> {
    session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_turn_waits_for_an_approval_from_the_api_and_is_audited() {
    let (home, data, config) = probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "note.txt", "hello")]),
        Step::text("I wrote the note."),
    ]);
    empty_file(&data, "note.txt");
    let served = serve(&home, &model, &config, &[]);
    create(&served, "notes");
    let events = served.stream(
        "/api/v1/sessions/notes/messages",
        json!({"text": "write a note"}),
    );
    assert_eq!(events.status, 200);
    let asked = events.until("approval_needed", WAIT);
    assert_eq!(asked[0]["type"], "turn_started", "{asked:#?}");
    let question = served.pending("notes");
    assert_eq!(question["tool"], "fs");
    assert_eq!(question["plugin"], "probe");
    assert_eq!(question["arguments"]["content"], "hello");
    assert_eq!(question["reason"], "the tool declares itself destructive");
    assert!(
        question["grants"][0]
            .as_str()
            .unwrap()
            .ends_with(":/data:rw")
    );
    let call_id = question["call_id"].as_str().unwrap().to_string();
    // The file is not written before the answer.
    assert_eq!(std::fs::read_to_string(data.join("note.txt")).unwrap(), "");
    let answered = served.post(
        &format!("/api/v1/approvals/notes/{call_id}"),
        json!({"answer": "yes"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    let rest = events.until("turn_finished", WAIT);
    let last = rest.last().unwrap();
    assert_eq!(last["outcome"]["kind"], "answered");
    assert_eq!(last["answer"], "I wrote the note.");
    assert_eq!(
        std::fs::read_to_string(data.join("note.txt")).unwrap(),
        "hello"
    );
    // A second answer is refused, and says what the first was.
    let again = served.post(
        &format!("/api/v1/approvals/notes/{call_id}"),
        json!({"answer": "no"}),
    );
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(
        again.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already answered (yes by API token `default`)"),
        "{}",
        again.text
    );
    // The session holds the whole turn, and the audit log the call with who approved it.
    let session = served.get("/api/v1/sessions/notes");
    assert_eq!(
        roles(&session.json),
        ["user", "assistant", "tool", "assistant"]
    );
    let audit = served.get("/api/v1/audit?session=notes");
    let records = audit.json["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!(record["kind"], "tool_call");
    assert_eq!(record["origin"], "serve");
    assert_eq!(record["tool"], "fs");
    assert_eq!(record["plugin"], "probe");
    assert!(record["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(record["decision"], "yes");
    assert_eq!(record["decided_by"], "API token `default`");
    assert_eq!(record["outcome"]["status"], "ok");
    assert_eq!(record["arguments_sha256"].as_str().unwrap().len(), 64);
    assert!(
        record.get("arguments").is_none(),
        "arguments are not kept by default"
    );
    assert!(record["report"]["peak_memory"].as_u64().unwrap() > 0);
    // The CLI reads the same log.
    let cli = home.cordon(&["audit", "--session", "notes"]).ok();
    assert!(
        cli.stdout
            .contains("notes/c1  probe.fs  yes by API token `default`  ok"),
        "{}",
        cli.stdout
    );
}

#[test]
fn a_denial_reaches_the_model_and_nothing_runs() {
    let (home, data, config) = probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "never.txt", "x")]),
        Step::text("Understood, I did not write it."),
    ]);
    empty_file(&data, "never.txt");
    let served = serve(&home, &model, &config, &[]);
    create(&served, "deny");
    let events = served.stream(
        "/api/v1/sessions/deny/messages",
        json!({"text": "write it"}),
    );
    let question = served.pending("deny");
    let call_id = question["call_id"].as_str().unwrap();
    let answered = served.post(
        &format!("/api/v1/approvals/deny/{call_id}"),
        json!({"answer": "no"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    events.until("turn_finished", WAIT);
    assert_eq!(std::fs::read_to_string(data.join("never.txt")).unwrap(), "");
    let told = model.tool_messages(1);
    assert!(
        told[0]["content"]
            .as_str()
            .unwrap()
            .contains("the user declined this call"),
        "{told:?}"
    );
    let audit = served.get("/api/v1/audit?tool=probe.fs");
    let record = &audit.json["records"][0];
    assert_eq!(record["decision"], "no");
    assert_eq!(record["outcome"]["status"], "not_run");
}

#[test]
fn an_unanswered_approval_is_denied_after_the_timeout() {
    let (home, data, config) = probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "late.txt", "x")]),
        Step::text("Nobody approved it."),
    ]);
    let served = serve(&home, &model, &config, &["--approval-timeout", "1"]);
    create(&served, "late");
    let answer = served.post(
        "/api/v1/sessions/late/messages",
        json!({"text": "write it", "stream": false}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["outcome"]["kind"], "answered");
    assert!(!data.join("late.txt").exists());
    let told = model.tool_messages(1);
    assert!(
        told[0]["content"]
            .as_str()
            .unwrap()
            .contains("nobody answered within 1s, so it was denied"),
        "{told:?}"
    );
    let audit = served.get("/api/v1/audit?session=late");
    assert_eq!(
        audit.json["records"][0]["decided_by"],
        "nobody (no answer within 1s)"
    );
}

#[test]
fn bad_requests_get_clear_errors_and_a_wrong_token_nothing() {
    let (home, _, config) = probe_home(&[]);
    let model = Model::new(vec![]);
    let served = serve(&home, &model, &config, &[]);
    // A wrong or missing token: 401, and nothing about why or what exists.
    for token in [Some("wrong-token-of-some-length"), None] {
        let answer = served.raw("GET", "/api/v1/sessions", token, None);
        assert_eq!(answer.status, 401);
        assert_eq!(answer.text, "unauthorized\n");
    }
    // The health check needs no token and says nothing else.
    let health = served.raw("GET", "/api/v1/health", None, None);
    assert_eq!(
        (health.status, health.json.clone()),
        (200, json!({"status": "ok"}))
    );
    // Malformed bodies name what was wrong.
    let token = served.token.clone();
    let bad = served.raw("POST", "/api/v1/sessions", Some(&token), Some("{\"id\": "));
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(
        bad.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not the JSON expected")
    );
    let unknown_field = served.post("/api/v1/sessions", json!({"name": "x"}));
    assert_eq!(unknown_field.status, 400, "{}", unknown_field.text);
    assert!(
        unknown_field.text.contains("unknown field `name`"),
        "{}",
        unknown_field.text
    );
    let bad_name = served.post("/api/v1/sessions", json!({"id": "a b"}));
    assert_eq!(bad_name.status, 400, "{}", bad_name.text);
    create(&served, "here");
    let dup = served.post("/api/v1/sessions", json!({"id": "here"}));
    assert_eq!(dup.status, 409, "{}", dup.text);
    // Unknown sessions and calls.
    for path in ["/api/v1/sessions/nope", "/api/v1/sessions/nope/events"] {
        let answer = served.get(path);
        assert_eq!(answer.status, 404, "{path}: {}", answer.text);
        assert!(
            answer.text.contains("there is no session `nope`"),
            "{}",
            answer.text
        );
    }
    let message = served.post("/api/v1/sessions/nope/messages", json!({"text": "hi"}));
    assert_eq!(message.status, 404, "{}", message.text);
    let empty = served.post("/api/v1/sessions/here/messages", json!({"text": "  "}));
    assert_eq!(empty.status, 400, "{}", empty.text);
    let not_pending = served.post("/api/v1/approvals/here/c9", json!({"answer": "yes"}));
    assert_eq!(not_pending.status, 404, "{}", not_pending.text);
    let bad_answer = served.post("/api/v1/approvals/here/c9", json!({"answer": "maybe"}));
    assert_eq!(bad_answer.status, 400, "{}", bad_answer.text);
    assert!(
        bad_answer.text.contains("`maybe` is not an answer"),
        "{}",
        bad_answer.text
    );
    let retry = served.post("/api/v1/sessions/here/retry", json!({}));
    assert_eq!(retry.status, 409, "{}", retry.text);
    assert!(retry.text.contains("nothing to retry"), "{}", retry.text);
    let cancel = served.post("/api/v1/sessions/here/cancel", json!({}));
    assert_eq!(cancel.status, 409, "{}", cancel.text);
    let since = served.get("/api/v1/audit?since=yesterday");
    assert_eq!(since.status, 400, "{}", since.text);
    let route = served.get("/api/v2/whatever");
    assert_eq!(route.status, 404, "{}", route.text);
    // A Host header naming another site (DNS rebinding) is refused.
    let rebound = served.raw_with_host("/api/v1/health", "evil.example:80");
    assert_eq!(rebound, 421);
    // Sessions can be removed; the audit log keeps what they did.
    assert_eq!(served.delete("/api/v1/sessions/here").status, 204);
    assert_eq!(served.get("/api/v1/sessions/here").status, 404);
}

/// A TCP server standing in for a slow service: it counts the connections it accepted and
/// answers each only when told to.
struct SlowService {
    addr: String,
    accepted: Arc<AtomicUsize>,
    release: std::sync::mpsc::Sender<()>,
}

impl SlowService {
    fn start() -> SlowService {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let mut line = [0u8; 5];
                let _ = stream.read_exact(&mut line);
                // Bounded: a test that never releases its service ends after a minute.
                if released.recv_timeout(Duration::from_secs(60)).is_ok() {
                    let _ = stream.write_all(b"pong\n");
                }
            }
        });
        SlowService {
            addr,
            accepted,
            release,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

#[test]
fn killed_while_streaming_the_turn_goes_on_with_the_message_kept() {
    let (home, _, config) = probe_home(&[]);
    let model = Model::new(vec![
        Step::Text {
            text: "This answer is cut short by a crash and never finishes".into(),
            chunk: Some(3),
            delay_ms: Some(300),
            usage: None,
        },
        Step::text("The answer, after the restart."),
    ]);
    let served = serve(&home, &model, &config, &[]);
    create(&served, "stream");
    let events = served.stream(
        "/api/v1/sessions/stream/messages",
        json!({"text": "tell me something"}),
    );
    events.until("text_delta", WAIT);
    served.kill9();
    // The message was acknowledged (the turn started): a new host takes the turn up.
    let served = serve(&home, &model, &config, &[]);
    let session = idle(&served, "stream");
    assert_eq!(roles(&session), ["user", "assistant"]);
    assert_eq!(session["messages"][0]["content"], "tell me something");
    assert_eq!(
        session["messages"][1]["content"],
        "The answer, after the restart."
    );
    let requests = model.server.requests();
    assert_eq!(requests.len(), 2, "the model was asked again once");
    let users = |r: &cordon_scripted_llm::RecordedRequest| {
        r.messages().iter().filter(|m| m["role"] == "user").count()
    };
    assert_eq!(users(&requests[1]), 1, "the message is in the history once");
}

/// A streamed message's `200` means the message is kept: a host killed the moment the status
/// line arrives has recorded it, and the next host takes its turn up. Before, the headers went
/// out as soon as the turn was handed to its task, and a kill right then lost the message
/// (20 times in 20).
#[test]
fn a_streamed_message_is_kept_once_its_200_has_arrived() {
    let (home, _, config) = probe_home(&[]);
    // Spare answers: a model request cut short by the kill may be made again.
    let model = Model::new((0..12).map(|_| Step::text("Answered.")).collect());
    let mut served = serve(&home, &model, &config, &[]);
    for round in 0..3 {
        let session = format!("ack{round}");
        create(&served, &session);
        let body = json!({"text": format!("message {round}")}).to_string();
        let mut socket = std::net::TcpStream::connect(&served.addr).unwrap();
        write!(
            socket,
            "POST /api/v1/sessions/{session}/messages HTTP/1.1\r\nhost: {}\r\n\
             authorization: Bearer {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            served.addr,
            served.token,
            body.len()
        )
        .unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n") {
            assert_eq!(socket.read(&mut byte).unwrap(), 1, "the connection closed");
            head.push(byte[0]);
        }
        served.kill9();
        let status = String::from_utf8_lossy(&head);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        served = serve(&home, &model, &config, &[]);
        let kept = idle(&served, &session);
        assert_eq!(
            kept["messages"][0]["content"],
            format!("message {round}"),
            "round {round}: the acknowledged message was lost: {kept}"
        );
    }
}

#[test]
fn killed_while_awaiting_approval_the_question_is_asked_again() {
    let (home, data, config) = probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "once.txt", "1")]),
        Step::text("Done."),
    ]);
    empty_file(&data, "once.txt");
    let served = serve(&home, &model, &config, &[]);
    create(&served, "ask");
    let _events = served.stream("/api/v1/sessions/ask/messages", json!({"text": "append"}));
    let first = served.pending("ask");
    served.kill9();
    let served = serve(&home, &model, &config, &[]);
    let again = served.pending("ask");
    assert_eq!(again["call_id"], first["call_id"]);
    assert_eq!(again["arguments"], first["arguments"]);
    let call_id = again["call_id"].as_str().unwrap();
    let answered = served.post(
        &format!("/api/v1/approvals/ask/{call_id}"),
        json!({"answer": "yes"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    let session = idle(&served, "ask");
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(std::fs::read_to_string(data.join("once.txt")).unwrap(), "1");
    assert_eq!(model.server.requests().len(), 2);
}

#[test]
fn killed_while_a_tool_runs_the_call_is_never_run_again() {
    let service = SlowService::start();
    let (home, _, config) = probe_home(&[format!("net:tcp://{}", service.addr)]);
    let model = Model::new(vec![
        Step::tool_calls(vec![call("k1", "tcp", json!({"addr": service.addr}))]),
        Step::text("The service call was interrupted; I will check before retrying."),
    ]);
    let served = serve(&home, &model, &config, &[]);
    create(&served, "tool");
    let events = served.stream("/api/v1/sessions/tool/messages", json!({"text": "ping it"}));
    let question = served.pending("tool");
    let call_id = question["call_id"].as_str().unwrap();
    served.post(
        &format!("/api/v1/approvals/tool/{call_id}"),
        json!({"answer": "yes"}),
    );
    events.until("tool_started", WAIT);
    eventually(WAIT, "the tool to connect", || {
        (service.accepted() == 1).then_some(())
    });
    served.kill9();
    let served = serve(&home, &model, &config, &[]);
    let session = idle(&served, "tool");
    assert_eq!(service.accepted(), 1, "the interrupted call was run again");
    let told = model.tool_messages(1);
    let content = told[0]["content"].as_str().unwrap();
    assert!(
        content.contains("its effect is unknown") && content.contains("not run again"),
        "{content}"
    );
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    let audit = served.get("/api/v1/audit?session=tool");
    let outcomes: Vec<&str> = audit.json["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"]["kind"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(outcomes, ["interrupted"], "{}", audit.text);
    let _ = service.release.send(());
}

/// A host running one call of two (`max_parallel_tools = 1`), both approved, in session
/// `session`: the first connected to the service, the second waiting for its place.
struct Queued {
    service: SlowService,
    home: TestHome,
    config: PathBuf,
    model: Model,
    served: Served,
}

fn two_queued_calls(session: &str, args: &[&str]) -> Queued {
    let service = SlowService::start();
    let (home, _, config) = probe_home(&[format!("net:tcp://{}", service.addr)]);
    std::fs::write(
        &config,
        "[store]\nlease_secs = 2\n\n[agent]\nmax_parallel_tools = 1\n",
    )
    .unwrap();
    let model = Model::new(vec![
        Step::tool_calls(vec![
            call("k1", "tcp", json!({"addr": service.addr})),
            call("k2", "tcp", json!({"addr": service.addr})),
        ]),
        Step::text("Both calls are settled."),
    ]);
    let served = serve(&home, &model, &config, args);
    create(&served, session);
    let events = served.stream(
        &format!("/api/v1/sessions/{session}/messages"),
        json!({"text": "ping twice"}),
    );
    for _ in 0..2 {
        let question = served.pending(session);
        let call_id = question["call_id"].as_str().unwrap();
        served.post(
            &format!("/api/v1/approvals/{session}/{call_id}"),
            json!({"answer": "yes"}),
        );
    }
    events.until("tool_started", WAIT);
    eventually(WAIT, "the first call to connect", || {
        (service.accepted() == 1).then_some(())
    });
    Queued {
        service,
        home,
        config,
        model,
        served,
    }
}

#[test]
fn killed_while_calls_wait_for_a_place_those_that_never_started_run_after_restart() {
    let Queued {
        service,
        home,
        config,
        model,
        served,
    } = two_queued_calls("queue", &[]);
    served.kill9();
    // The second call waited for the first's place and never started: it runs now; the first
    // may have had its effect and is not run again.
    let served = serve(&home, &model, &config, &[]);
    // The service takes its connections in turn: it lets the dead host's go first.
    let _ = service.release.send(());
    eventually(WAIT, "the second call to connect", || {
        (service.accepted() == 2).then_some(())
    });
    let _ = service.release.send(());
    let session = idle(&served, "queue");
    assert_eq!(service.accepted(), 2, "a call ran twice");
    assert_eq!(
        roles(&session),
        ["user", "assistant", "tool", "tool", "assistant"]
    );
    let told = model.tool_messages(1);
    assert!(
        told[0]["content"]
            .as_str()
            .unwrap()
            .contains("its effect is unknown"),
        "{told:?}"
    );
    assert!(
        told[1]["content"].as_str().unwrap().contains("pong"),
        "{told:?}"
    );
    let audit = served.get("/api/v1/audit?session=queue");
    let outcomes: Vec<&str> = audit.json["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"]["kind"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(outcomes, ["interrupted", "ok"], "{}", audit.text);
}

#[test]
fn sigterm_lets_the_running_call_finish_and_starts_the_waiting_one_only_after_restart() {
    let Queued {
        service,
        home,
        config,
        model,
        served,
    } = two_queued_calls("wait", &["--shutdown-grace", "20"]);
    let release = service.release.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let _ = release.send(());
    });
    let (status, stderr) = served.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{stderr}");
    // The running call finished and was recorded; the waiting one was not started.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        service.accepted(),
        1,
        "a call started while the host stopped"
    );
    let served = serve(&home, &model, &config, &[]);
    eventually(WAIT, "the second call to connect", || {
        (service.accepted() == 2).then_some(())
    });
    let _ = service.release.send(());
    let session = idle(&served, "wait");
    let contents: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents.len(), 2);
    assert!(contents.iter().all(|c| c.contains("pong")), "{contents:?}");
}

#[test]
fn sigterm_lets_a_running_tool_finish_and_the_turn_goes_on_later() {
    let service = SlowService::start();
    let (home, _, config) = probe_home(&[format!("net:tcp://{}", service.addr)]);
    let model = Model::new(vec![
        Step::tool_calls(vec![call("k1", "tcp", json!({"addr": service.addr}))]),
        Step::text("The service answered pong."),
    ]);
    let served = serve(&home, &model, &config, &["--shutdown-grace", "20"]);
    create(&served, "term");
    let events = served.stream("/api/v1/sessions/term/messages", json!({"text": "ping it"}));
    let question = served.pending("term");
    let call_id = question["call_id"].as_str().unwrap();
    served.post(
        &format!("/api/v1/approvals/term/{call_id}"),
        json!({"answer": "yes"}),
    );
    events.until("tool_started", WAIT);
    eventually(WAIT, "the tool to connect", || {
        (service.accepted() == 1).then_some(())
    });
    // The service answers a moment after the host was asked to stop.
    let release = service.release.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let _ = release.send(());
    });
    let (status, stderr) = served.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}\n{stderr}");
    assert!(stderr.contains("cordon serve: stopped."), "{stderr}");
    // The call's result was recorded; the model was not asked again before stopping.
    assert_eq!(model.server.requests().len(), 1);
    let served = serve(&home, &model, &config, &[]);
    let session = idle(&served, "term");
    let tool = &session["messages"][2];
    assert!(tool["content"].as_str().unwrap().contains("pong"), "{tool}");
    assert_eq!(service.accepted(), 1);
    assert_eq!(
        session["messages"][3]["content"],
        "The service answered pong."
    );
}

#[test]
fn installs_and_grants_made_while_serving_are_picked_up() {
    let (home, data, config) = probe_home(&[]);
    let model = Model::new(vec![]);
    let served = serve(&home, &model, &config, &[]);
    let tools = served.get("/api/v1/tools");
    assert!(
        tools.json["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "fs")
    );
    home.cordon(&["plugin", "remove", "probe"]).ok();
    eventually(WAIT, "the removed tools to go", || {
        let tools = served.get("/api/v1/tools");
        tools.json["tools"].as_array()?.is_empty().then_some(())
    });
    let probe = fixture("probe");
    home.cordon(&[
        "plugin",
        "install",
        probe.to_str().unwrap(),
        "--name",
        "again",
    ])
    .ok();
    home.cordon(&["grant", "again", &grant_fs(&data, "/data", "ro")])
        .ok();
    let granted = eventually(WAIT, "the new plugin and grant", || {
        let tools = served.get("/api/v1/tools");
        tools.json["tools"]
            .as_array()?
            .iter()
            .find(|t| {
                t["plugin"] == "again"
                    && t["name"] == "fs"
                    && t["grants"].as_array().is_some_and(|g| !g.is_empty())
            })
            .cloned()
    });
    assert!(
        granted["grants"][0]
            .as_str()
            .unwrap()
            .ends_with(":/data:ro"),
        "{granted}"
    );
    // The changes are in the audit log, made by a person at the terminal.
    let changes = served.get("/api/v1/audit?kind=home_change");
    let actions: Vec<&str> = changes.json["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["install", "remove", "install", "grant"]);
}

/// Two hosts on one PostgreSQL store, each on "its own machine": a session driven by the first
/// is refused to the second while the first lives (though its question is listed there), and
/// taken up by the second once the first is killed and its lease ran out.
#[test]
fn a_second_host_takes_over_a_session_when_the_first_dies() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "shared.txt");
    let url = cordon_tests::postgres::shared().database();
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "shared.txt", "1")]),
        Step::text("Written by whichever host was alive."),
    ]);
    let env = |host: &'static str| {
        [
            ("CORDON_LLM_URL", model.url()),
            ("CORDON_MODEL", "scripted".to_string()),
            ("CORDON_HOST_NAME", host.to_string()),
        ]
    };
    let start = |host: &'static str| {
        let env = env(host);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Served::start(
            &home,
            &env,
            &["--config", config.to_str().unwrap(), "--store", &url],
        )
    };
    let first = start("host-a");
    let second = start("host-b");
    let created = first.post("/api/v1/sessions", json!({"id": "shared"}));
    assert_eq!(created.status, 201, "{}", created.text);
    let _events = first.stream("/api/v1/sessions/shared/messages", json!({"text": "write"}));
    let asked = first.pending("shared");
    // While the first host lives, the second cannot drive the session; it lists the
    // question the first asks.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(second.pending("shared")["call_id"], asked["call_id"]);
    let busy = second.post("/api/v1/sessions/shared/retry", json!({}));
    assert_eq!(busy.status, 409, "{}", busy.text);
    assert!(
        busy.text.contains("is being driven by serve@host-a:"),
        "{}",
        busy.text
    );
    first.kill9();
    // After the lease (2 s) the second host resumes the turn: the question is asked again.
    let again = second.pending("shared");
    assert_eq!(again["call_id"], asked["call_id"]);
    let call_id = again["call_id"].as_str().unwrap();
    let answered = second.post(
        &format!("/api/v1/approvals/shared/{call_id}"),
        json!({"answer": "yes"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    let session = idle(&second, "shared");
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(
        std::fs::read_to_string(data.join("shared.txt")).unwrap(),
        "1"
    );
    let listed = second.get("/api/v1/sessions");
    assert_eq!(listed.json["sessions"][0]["id"], "shared");
}

#[test]
fn an_unreachable_store_at_start_is_a_clear_error() {
    let (home, _, config) = probe_home(&[]);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = format!("postgres://cordon:secret@127.0.0.1:{port}/cordon");
    let run = home.cordon(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--store",
        &store,
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "cannot open the session store postgres://cordon:***@127.0.0.1:{port}/cordon"
        )) && run
            .stderr
            .contains("check the URL and that the server is running"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("secret"), "{}", run.stderr);
}

/// The store goes away in the middle of a turn: the turn stops cleanly at its last recorded
/// state (nothing is performed that was not recorded), and goes on once the store is back.
#[test]
fn a_store_that_goes_away_mid_turn_stops_the_turn_and_it_resumes_when_back() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "away.txt");
    let cluster = cordon_tests::postgres::PgCluster::start();
    let url = cluster.database();
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "away.txt", "1")]),
        Step::text("Written once the store was back."),
    ]);
    let served = serve(&home, &model, &config, &["--store", &url]);
    create(&served, "away");
    let events = served.stream("/api/v1/sessions/away/messages", json!({"text": "write"}));
    let asked = served.pending("away");
    let call_id = asked["call_id"].as_str().unwrap().to_string();
    cluster.stop();
    let answered = served.post(
        &format!("/api/v1/approvals/away/{call_id}"),
        json!({"answer": "yes"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    let stopped = events.until("turn_stopped", WAIT);
    let reason = stopped.last().unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("the session store did not record the change")
            && reason.contains("goes on when the store is back"),
        "{reason}"
    );
    // The answer was not recorded, so the call did not run.
    assert_eq!(std::fs::read_to_string(data.join("away.txt")).unwrap(), "");
    cluster.start_server();
    let again = served.pending("away");
    assert_eq!(again["call_id"], call_id.as_str());
    served.post(
        &format!("/api/v1/approvals/away/{call_id}"),
        json!({"answer": "yes"}),
    );
    let session = idle(&served, "away");
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(std::fs::read_to_string(data.join("away.txt")).unwrap(), "1");
}

/// A turn stopped by the store is not a success: its non-streaming reply is `503` with
/// `Retry-After`, and the host takes the session up again as soon as the store is back,
/// without waiting out the lease it could not give up while the store was away (300 s here,
/// far longer than the test waits).
#[test]
fn a_turn_stopped_by_the_store_is_answered_503_and_goes_on_before_its_lease_lapses() {
    let (home, data, _) = probe_home(&[]);
    let config = home.scratch("long-lease").join("cordon.toml");
    std::fs::write(&config, "[store]\nlease_secs = 300\n").unwrap();
    empty_file(&data, "away.txt");
    let cluster = cordon_tests::postgres::PgCluster::start();
    let url = cluster.database();
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "away.txt", "1")]),
        Step::text("Written once the store was back."),
    ]);
    let served = serve(&home, &model, &config, &["--store", &url]);
    create(&served, "away");
    std::thread::scope(|scope| {
        let reply = scope.spawn(|| {
            served.post(
                "/api/v1/sessions/away/messages",
                json!({"text": "write", "stream": false}),
            )
        });
        let asked = served.pending("away");
        let call_id = asked["call_id"].as_str().unwrap().to_string();
        cluster.stop();
        served.answer(&asked, "yes");
        let reply = reply.join().unwrap();
        assert_eq!(reply.status, 503, "{}", reply.text);
        let message = reply.json["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("goes on when the store is back"),
            "{message}"
        );
        assert_eq!(
            reply.json["outcome"]["type"], "turn_stopped",
            "{}",
            reply.text
        );
        cluster.start_server();
        let again = served.pending("away");
        assert_eq!(again["call_id"], call_id.as_str());
        served.answer(&again, "yes");
    });
    let session = idle(&served, "away");
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(std::fs::read_to_string(data.join("away.txt")).unwrap(), "1");
}

/// `cordon approve` answers from a terminal what a running host waits on: it lists the
/// question with its tool, arguments, grants and reason, and answers it with the host's token.
#[test]
fn cordon_approve_lists_and_answers_a_waiting_call() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "t.txt");
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "t.txt", "1")]),
        Step::text("Written."),
    ]);
    let served = serve(&home, &model, &config, &[]);
    create(&served, "term");
    let events = served.stream("/api/v1/sessions/term/messages", json!({"text": "write"}));
    let question = served.pending("term");
    let call_id = question["call_id"].as_str().unwrap().to_string();
    let url = format!("http://{}", served.addr);
    let listed = home.cordon(&["approve", "--list", "--url", &url]).ok();
    assert!(
        listed.stdout.contains(&format!(
            "session term call {call_id}: tool `fs` (plugin probe)"
        )) && listed.stdout.contains("\"content\": \"1\"")
            && listed.stdout.contains(":/data:rw")
            && listed
                .stdout
                .contains("asked because the tool declares itself destructive"),
        "{}",
        listed.stdout
    );
    let answered = home
        .cordon(&["approve", "term", &call_id, "yes", "--url", &url])
        .ok();
    assert!(
        answered.stdout.contains("Answered yes"),
        "{}",
        answered.stdout
    );
    events.until("turn_finished", WAIT);
    assert_eq!(std::fs::read_to_string(data.join("t.txt")).unwrap(), "1");
    // A second answer is refused, with the server's reason; a wrong token is named as such.
    let again = home.cordon(&["approve", "term", &call_id, "no", "--url", &url]);
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains("already answered"),
        "{}",
        again.stderr
    );
    let wrong = home.scratch("tokens").join("wrong");
    std::fs::write(&wrong, "0123456789abcdef0123456789\n").unwrap();
    let refused = home.cordon(&[
        "approve",
        "--list",
        "--url",
        &url,
        "--token-file",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("did not accept the token"),
        "{}",
        refused.stderr
    );
}
