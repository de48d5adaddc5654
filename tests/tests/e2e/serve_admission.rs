//! `cordon serve` under more than it takes on: connections that send nothing or too slowly,
//! more connections, turns, MCP sessions and requests than `[serve.limits]` allows. Each is
//! answered (a closed connection, `503` or `429` with `Retry-After`) instead of queued, and
//! what unblocks a full host (approvals, the health check) still gets in.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::TestHome;
use cordon_tests::serve::{Served, eventually};
use cordon_tests::support;
use serde_json::json;

use crate::model::{Model, call};

/// Serves `home` with `[serve.limits]` set to `limits` (TOML lines).
fn serve_with(home: &TestHome, model: &Model, limits: &str) -> Served {
    let config = home.scratch("config").join("cordon.toml");
    std::fs::write(&config, format!("[serve.limits]\n{limits}\n")).unwrap();
    Served::start(
        home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &["--config", config.to_str().unwrap()],
    )
}

/// Sends `request` as is on a new connection and reads until the server closes it (at most
/// `within`); `None` if it did not close by then.
fn exchange(addr: &str, request: &[u8], within: Duration) -> Option<String> {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(within)).unwrap();
    tcp.write_all(request).unwrap();
    let mut answer = Vec::new();
    match tcp.read_to_end(&mut answer) {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        // A reset after the answer still delivered the answer.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !answer.is_empty() => {
            Some(String::from_utf8_lossy(&answer).into_owned())
        }
        Err(_) => None,
    }
}

/// A request with the token, on its own connection, closed after the answer.
fn request(served: &Served, method: &str, path: &str, body: Option<&str>) -> String {
    let body = body.unwrap_or("");
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        served.addr,
        served.token,
        body.len()
    );
    exchange(&served.addr, raw.as_bytes(), Duration::from_secs(30)).expect("an answer")
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let head = answer.split("\r\n\r\n").next()?;
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The whole answer to `GET /api/v1/health` on a new connection (`None`: not within 30 s).
fn health_answer(served: &Served) -> Option<String> {
    let raw = format!(
        "GET /api/v1/health HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        served.addr
    );
    exchange(&served.addr, raw.as_bytes(), Duration::from_secs(30))
}

fn health(served: &Served) -> u16 {
    health_answer(served).map_or(0, |a| status(&a))
}

#[test]
fn a_connection_that_sends_nothing_or_too_slowly_is_let_go() {
    let home = TestHome::new();
    let model = Model::new(vec![]);
    let served = serve_with(
        &home,
        &model,
        "header_timeout_secs = 1\nbody_timeout_secs = 1",
    );
    // Nothing at all: closed after the header timeout, not held for minutes.
    let silent = exchange(&served.addr, b"", Duration::from_secs(20));
    assert!(
        silent.is_some(),
        "a connection that sent nothing was still open after 20 s"
    );
    // Headers, then a body that never finishes: refused, naming the setting.
    let raw = format!(
        "POST /api/v1/sessions HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"id\":",
        served.addr, served.token
    );
    let trickled =
        exchange(&served.addr, raw.as_bytes(), Duration::from_secs(20)).expect("an answer");
    assert_eq!(status(&trickled) / 100, 4, "{trickled}");
    assert!(trickled.contains("body_timeout_secs"), "{trickled}");
    // A request that comes whole is still served.
    assert_eq!(health(&served), 200);
}

#[test]
fn connections_past_the_bound_are_answered_503_and_closed() {
    let home = TestHome::new();
    let model = Model::new(vec![]);
    let served = serve_with(&home, &model, "max_connections = 3");
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(&served.addr).unwrap())
        .collect();
    // Give the server the time to accept all three.
    let refused = eventually(Duration::from_secs(20), "a 503 past 3 connections", || {
        health_answer(&served).filter(|answer| status(answer) == 503)
    });
    assert_eq!(header(&refused, "retry-after"), Some("1"), "{refused}");
    assert!(refused.contains("max_connections"), "{refused}");
    drop(held);
    eventually(
        Duration::from_secs(20),
        "a place after the held connections closed",
        || (health(&served) == 200).then_some(()),
    );
}

fn write_call(id: &str, data: &Path) -> cordon_scripted_llm::ScriptedCall {
    std::fs::write(data.join("note.txt"), "").unwrap();
    call(
        id,
        "fs",
        json!({"op": "append", "path": "/data/note.txt", "content": "x"}),
    )
}

#[test]
fn a_turn_past_max_turns_gets_503_and_the_waiting_turn_can_still_be_approved() {
    // The probe, installed read-write on `/data`: its writes ask first.
    let (home, data) = support::probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("w1", &data)]),
        Step::text("written"),
        Step::text("second"),
    ]);
    let served = serve_with(&home, &model, "max_turns = 1");
    for id in ["one", "two"] {
        let created = served.post("/api/v1/sessions", json!({"id": id}));
        assert_eq!(created.status, 201, "{}", created.text);
    }
    // The first turn is answered at once (stream: false would wait) and waits for approval.
    let _first = served.stream("/api/v1/sessions/one/messages", json!({"text": "write"}));
    let question = served.pending("one");
    let busy = request(
        &served,
        "POST",
        "/api/v1/sessions/two/messages",
        Some(r#"{"text":"hi","stream":false}"#),
    );
    assert_eq!(status(&busy), 503, "{busy}");
    assert_eq!(header(&busy, "retry-after"), Some("1"), "{busy}");
    assert!(busy.contains("max_turns"), "{busy}");
    // The gateway answers the same, as OpenAI's clients read it (they retry on it).
    let gateway = request(
        &served,
        "POST",
        "/v1/chat/completions",
        Some(r#"{"model":"scripted","messages":[{"role":"user","content":"hi"}]}"#),
    );
    assert_eq!(status(&gateway), 503, "{gateway}");
    assert_eq!(header(&gateway, "retry-after"), Some("1"), "{gateway}");
    // Approvals take no place: the full host is unblocked by answering.
    served.answer(&question, "yes");
    let second = eventually(Duration::from_secs(30), "the place to come back", || {
        let second = request(
            &served,
            "POST",
            "/api/v1/sessions/two/messages",
            Some(r#"{"text":"hi","stream":false}"#),
        );
        if status(&second) != 200 {
            assert_eq!(status(&second), 503, "{second}");
            return None;
        }
        Some(second)
    });
    assert!(second.contains("second"), "{second}");
}

#[test]
fn a_token_past_its_rate_gets_429_with_retry_after() {
    let home = TestHome::new();
    let model = Model::new(vec![]);
    let served = serve_with(&home, &model, "requests_per_second = 1\nrequest_burst = 2");
    let answers: Vec<String> = (0..3)
        .map(|_| request(&served, "GET", "/api/v1/sessions", None))
        .collect();
    assert_eq!(status(&answers[0]), 200, "{}", answers[0]);
    let limited = answers.iter().find(|a| status(a) == 429).expect("a 429");
    assert!(header(limited, "retry-after").is_some(), "{limited}");
    assert!(limited.contains("requests_per_second"), "{limited}");
    // The gateway's clients get OpenAI's shape; the health check is not counted.
    let gateway = request(&served, "GET", "/v1/models", None);
    assert_eq!(status(&gateway), 429, "{gateway}");
    assert!(gateway.contains("rate_limit_error"), "{gateway}");
    assert_eq!(health(&served), 200);
}

#[test]
fn initializes_sent_at_once_open_no_more_sessions_than_the_bound() {
    let home = TestHome::new();
    let model = Model::new(vec![]);
    let served = serve_with(&home, &model, "max_mcp_sessions = 5");
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}
    })
    .to_string();
    // All at once: each connects first, then all send together.
    let clients = 100;
    let ready = std::sync::Barrier::new(clients);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let sent: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let mut stream = TcpStream::connect(&served.addr).unwrap();
                    let raw = format!(
                        "POST /mcp HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\n\
                         content-type: application/json\r\naccept: application/json, \
                         text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                        served.addr,
                        served.token,
                        initialize.len(),
                        initialize
                    );
                    ready.wait();
                    stream.write_all(raw.as_bytes()).unwrap();
                    let mut answer = String::new();
                    let _ = stream.read_to_string(&mut answer);
                    status(&answer)
                })
            })
            .collect();
        sent.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let opened = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 503).count();
    // Never past the bound. Fewer may open: all at once, the host's other bounds (requests
    // under way) may refuse one of the first five too, with the same 503.
    assert!(
        (1..=5).contains(&opened) && opened + refused == clients,
        "{statuses:?}"
    );
}

#[test]
fn mcp_sessions_past_the_bound_are_refused_with_a_json_rpc_error() {
    let home = TestHome::new();
    let model = Model::new(vec![]);
    let served = serve_with(&home, &model, "max_mcp_sessions = 1");
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}
    })
    .to_string();
    let first = request(&served, "POST", "/mcp", Some(&initialize));
    assert_eq!(status(&first), 200, "{first}");
    let session = header(&first, "mcp-session-id")
        .expect("a session")
        .to_string();
    let second = request(&served, "POST", "/mcp", Some(&initialize));
    assert_eq!(status(&second), 503, "{second}");
    assert_eq!(header(&second, "retry-after"), Some("1"), "{second}");
    assert!(
        second.contains("\"jsonrpc\"") && second.contains("max_mcp_sessions"),
        "{second}"
    );
    // Ending the first session makes room.
    let raw = format!(
        "DELETE /mcp HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\nmcp-session-id: \
         {session}\r\nmcp-protocol-version: 2025-06-18\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        served.addr, served.token
    );
    let ended = exchange(&served.addr, raw.as_bytes(), Duration::from_secs(30)).unwrap();
    assert_eq!(status(&ended), 204, "{ended}");
    eventually(
        Duration::from_secs(20),
        "room after the session ended",
        || (status(&request(&served, "POST", "/mcp", Some(&initialize))) == 200).then_some(()),
    );
}
