//! Several `cordon serve`s on one PostgreSQL store, behind a real load balancer (haproxy,
//! round-robin), as a team deploys them: a question is answered through whichever host a
//! person reaches, conversations go on whichever host a request lands on, and a host killed
//! mid-turn loses nothing acknowledged while the others take its sessions over.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_scripted_llm::Step;
use cordon_tests::TestHome;
use cordon_tests::balancer::Balancer;
use cordon_tests::serve::{Served, eventually};
use serde_json::{Value, json};

use crate::model::Model;
use crate::serve::{WAIT, create, empty_file, idle, probe_home, roles, write_call};

/// Three hosts (`host-a`, `host-b`, `host-c`) on a fresh PostgreSQL database, each with
/// leases of 2 s, and haproxy in front of them; with the client of the balancer.
fn three_hosts(
    home: &TestHome,
    model: &Model,
    config: &std::path::Path,
) -> (Vec<Served>, Balancer, Served) {
    let url = cordon_tests::postgres::shared().database();
    let port = cordon_tests::balancer::free_port();
    let mut text = std::fs::read_to_string(config).unwrap();
    text.push_str(&format!(
        "\n[serve]\npublic_url = \"http://127.0.0.1:{port}\"\n"
    ));
    let config = home.scratch("team").join("cordon.toml");
    std::fs::write(&config, text).unwrap();
    let hosts: Vec<Served> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|name| {
            Served::start(
                home,
                &[
                    ("CORDON_LLM_URL", &model.url()),
                    ("CORDON_MODEL", "scripted"),
                    ("CORDON_HOST_NAME", name),
                ],
                &["--config", config.to_str().unwrap(), "--store", &url],
            )
        })
        .collect();
    let addrs: Vec<&str> = hosts.iter().map(|h| h.addr.as_str()).collect();
    let balancer = Balancer::start(port, &addrs, &home.scratch("haproxy"));
    let front = Served::at(&balancer.addr, &hosts[0].token);
    (hosts, balancer, front)
}

fn chat(served: &Served, messages: &[(&str, &str)]) -> Value {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let answer = served.post(
        "/v1/chat/completions",
        json!({"model": "scripted", "messages": messages}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    answer.json
}

/// Opens an MCP session on `host` as client `name`: its id.
fn open_mcp(host: &Served, name: &str) -> String {
    let (opened, session) = host.mcp(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "1"}}}),
    );
    assert_eq!(opened.status, 200, "{}", opened.text);
    let session = session.expect("a session id");
    let (initialized, _) = host.mcp(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(initialized.status < 300, "{}", initialized.text);
    session
}

fn said(completion: &Value) -> &str {
    completion["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
}

/// The sessions the store holds, as any host lists them.
fn sessions(served: &Served) -> Vec<Value> {
    let listed = served.get("/api/v1/sessions?limit=1000");
    assert_eq!(listed.status, 200, "{}", listed.text);
    listed.json["sessions"].as_array().unwrap().clone()
}

#[test]
fn three_hosts_behind_a_load_balancer_answer_and_continue_as_one() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "note.txt");
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "note.txt", "1")]),
        Step::text("Written once."),
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
        Step::text("first response"),
        Step::text("second response"),
    ]);
    let (hosts, _balancer, front) = three_hosts(&home, &model, &config);
    let [a, b, c] = &hosts[..] else {
        unreachable!()
    };

    // A turn host A drives asks; every host lists the question, host B's answer reaches it.
    create(a, "notes");
    let events = a.stream(
        "/api/v1/sessions/notes/messages",
        json!({"text": "write it"}),
    );
    events.until("approval_needed", WAIT);
    let asked = c.pending("notes");
    assert_eq!(asked["tool"], "fs", "{asked}");
    let call_id = asked["call_id"].as_str().unwrap();
    assert_eq!(front.pending("notes")["call_id"], call_id);
    let on_b = b.get("/api/v1/sessions/notes");
    assert_eq!(on_b.json["running"], true, "{}", on_b.text);
    assert_eq!(on_b.json["pending"][0]["call_id"], call_id, "{}", on_b.text);
    let started = Instant::now();
    b.answer(&asked, "yes");
    let ended = events.until("turn_finished", WAIT);
    let reached = started.elapsed();
    assert!(
        ended
            .iter()
            .any(|e| e["type"] == "approval_given" && e["answer"] == "yes"),
        "{ended:#?}"
    );
    assert_eq!(std::fs::read_to_string(data.join("note.txt")).unwrap(), "1");
    // The store took one answer: a second, through another host, is told whose it was.
    let again = c.post(
        &format!("/api/v1/approvals/notes/{call_id}"),
        json!({"answer": "no"}),
    );
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(
        again
            .text
            .contains("was already answered (yes by API token"),
        "{}",
        again.text
    );
    let session = idle(&front, "notes");
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    let audit = front.get("/api/v1/audit?session=notes&tool=fs");
    let records = audit.json["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{}", audit.text);
    assert_eq!(
        records[0]["decided_by"], "API token `default`",
        "{}",
        audit.text
    );
    eprintln!("an answer given on host B reached host A's turn in {reached:?}");

    // A Chat Completions conversation goes on whichever host each request reaches.
    assert_eq!(said(&chat(a, &[("user", "u1")])), "one");
    assert_eq!(
        said(&chat(
            b,
            &[("user", "u1"), ("assistant", "one"), ("user", "u2")]
        )),
        "two"
    );
    let third = chat(
        &front,
        &[
            ("user", "u1"),
            ("assistant", "one"),
            ("user", "u2"),
            ("assistant", "two"),
            ("user", "u3"),
        ],
    );
    assert_eq!(said(&third), "three");
    // Upstream, the last request carried the whole conversation, once.
    let upstream: Vec<String> = model
        .messages(4)
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(upstream, ["u1", "one", "u2", "two", "u3"]);
    let gateway: Vec<Value> = sessions(c)
        .into_iter()
        .filter(|s| s["origin"] == "gateway")
        .collect();
    assert_eq!(gateway.len(), 1, "{gateway:#?}");

    // A Responses conversation goes on from a response another host gave.
    let first = a.post("/v1/responses", json!({"model": "scripted", "input": "r1"}));
    assert_eq!(first.status, 200, "{}", first.text);
    let second = c.post(
        "/v1/responses",
        json!({"model": "scripted", "input": "r2", "previous_response_id": first.json["id"]}),
    );
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(second.json["previous_response_id"], first.json["id"]);
    let upstream: Vec<String> = model
        .messages(6)
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(upstream, ["r1", "first response", "r2"]);
    assert_eq!(sessions(&front).len(), 3);
}

#[test]
fn a_host_killed_mid_turn_behind_the_balancer_loses_nothing_acknowledged() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "once.txt");
    let mut steps = vec![Step::tool_calls(vec![write_call("k1", "once.txt", "1")])];
    steps.extend((0..500).map(|i| Step::text(&format!("reply {i}"))));
    let model = Model::new(steps);
    let (mut hosts, _balancer, front) = three_hosts(&home, &model, &config);
    create(&front, "crash");
    let _events = front.stream(
        "/api/v1/sessions/crash/messages",
        json!({"text": "write it once"}),
    );
    let asked = front.pending("crash");
    let holder = front.get("/api/v1/sessions/crash").json["session"]["lease"]["holder"]
        .as_str()
        .unwrap()
        .to_string();
    let driver = ["a", "b", "c"]
        .iter()
        .position(|n| holder.starts_with(&format!("serve@host-{n}:")))
        .unwrap_or_else(|| panic!("no host of the three drives the turn: {holder}"));

    // Clients keep sending through the balancer while the host dies: every request answered
    // 200 must be in the store afterwards.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let refused = Arc::new(Mutex::new(0usize));
    let clients: Vec<_> = (0..3)
        .map(|client| {
            let (stop, acknowledged, refused) =
                (stop.clone(), acknowledged.clone(), refused.clone());
            let (addr, token) = (front.addr.clone(), front.token.clone());
            std::thread::spawn(move || {
                let served = Served::at(&addr, &token);
                let deadline = Instant::now() + Duration::from_secs(30);
                for i in 0..100 {
                    if stop.load(Ordering::SeqCst) || Instant::now() > deadline {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    let text = format!("client {client} message {i}");
                    let answer = served.try_post(
                        "/v1/chat/completions",
                        json!({"model": "scripted", "messages": [{"role": "user", "content": text}]}),
                    );
                    // A request the dying host had gets no answer (or haproxy's 502).
                    match answer {
                        Ok(answer) if answer.status == 200 => {
                            acknowledged.lock().unwrap().push(text)
                        }
                        _ => *refused.lock().unwrap() += 1,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    hosts.remove(driver).kill9();
    // Another host takes the turn up once the lease (2 s) ran out and asks again: one
    // question, the same call.
    let again = eventually(WAIT, "the question asked again by another host", || {
        let pending = front.get("/api/v1/approvals").json["pending"]
            .as_array()?
            .iter()
            .filter(|p| p["session"] == "crash")
            .cloned()
            .collect::<Vec<_>>();
        let now = front.get("/api/v1/sessions/crash").json["session"]["lease"]["holder"]
            .as_str()
            .map(str::to_string)?;
        (now != holder && pending.len() == 1).then(|| pending[0].clone())
    });
    assert_eq!(again["call_id"], asked["call_id"]);
    front.answer(&again, "yes");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    let session = idle(&front, "crash");
    assert_eq!(roles(&session), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(
        std::fs::read_to_string(data.join("once.txt")).unwrap(),
        "1",
        "the call ran exactly once"
    );
    let audit = front.get("/api/v1/audit?session=crash&tool=fs");
    assert_eq!(
        audit.json["records"].as_array().unwrap().len(),
        1,
        "{}",
        audit.text
    );
    // Every acknowledged message is in a session of the store.
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 6, "{acknowledged:?}");
    let mut stored = BTreeSet::new();
    let listed = sessions(&front);
    for s in &listed {
        let id = s["id"].as_str().unwrap();
        let session = front.get(&format!("/api/v1/sessions/{id}"));
        for m in session.json["messages"].as_array().unwrap() {
            if let Some(text) = m["content"].as_str() {
                stored.insert(text.to_string());
            }
        }
    }
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|t| !stored.contains(*t))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not stored: {lost:?}; {} sessions listed: {listed:#?}",
        listed.len()
    );
    eprintln!(
        "{} messages acknowledged while a host died, {} refused",
        acknowledged.len(),
        refused.lock().unwrap()
    );
}

#[test]
fn an_mcp_session_goes_on_whichever_host_a_request_reaches() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "mcp.txt");
    let model = Model::new(vec![]);
    let (hosts, _balancer, front) = three_hosts(&home, &model, &config);
    let [a, b, c] = &hosts[..] else {
        unreachable!()
    };
    let session = open_mcp(a, "team-client");
    // Host B, which did not open the session, takes it up.
    let (listed, _) = b.mcp(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert_eq!(listed.status, 200, "{}", listed.text);
    let names: Vec<&str> = listed.json["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", listed.text))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"fs"), "{names:?}");
    // A call on host C waits for a person (the client cannot ask its user); the answer is
    // given through the balancer, whichever host that reaches.
    std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            c.mcp(
                Some(&session),
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                       "params": {"name": "fs", "arguments":
                           {"op": "append", "path": "/data/mcp.txt", "content": "1"}}}),
            )
            .0
        });
        let asked = front.pending("mcp:");
        front.answer(&asked, "yes");
        let called = call.join().unwrap();
        assert_eq!(called.status, 200, "{}", called.text);
        assert_eq!(called.json["result"]["isError"], false, "{}", called.text);
    });
    assert_eq!(std::fs::read_to_string(data.join("mcp.txt")).unwrap(), "1");
    // Through the balancer, request after request lands on another host: all answered.
    for id in 4..10 {
        let (listed, _) = front.mcp(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        );
        assert_eq!(listed.status, 200, "{}", listed.text);
    }
    // A session id nobody opened is unknown everywhere.
    let (unknown, _) = b.mcp(
        Some("0123456789abcdef"),
        json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list"}),
    );
    assert_eq!(unknown.status, 404, "{}", unknown.text);
}

/// The Rule of Two across hosts: what an MCP client's model was given through one host
/// counts on every other. Without the labels in the store, the second call (on another host)
/// would run: that host never saw the first result.
#[test]
fn what_an_mcp_client_was_given_on_one_host_holds_back_its_calls_on_another() {
    let (home, _data, config) = probe_home(&["net:http://127.0.0.1:9".to_string()]);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "[approval]\nrule_of_two = \"deny\"\n[approval.tools]\n\"probe.noop\" = \"auto\"\n",
    );
    std::fs::write(&config, text).unwrap();
    let model = Model::new(vec![]);
    let (hosts, _balancer, _front) = three_hosts(&home, &model, &config);
    let [a, b, _] = &hosts[..] else {
        unreachable!()
    };
    let session = open_mcp(a, "labels-client");
    let noop = |host: &Served, id: u64| {
        host.mcp(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "noop", "arguments": {}}}),
        )
        .0
    };
    // The first result carries both labels (probe reads /data and the network).
    let first = noop(a, 2);
    assert_eq!(first.json["result"]["isError"], false, "{}", first.text);
    // On another host, the next call that can send data out is refused.
    let second = noop(b, 3);
    assert_eq!(second.json["result"]["isError"], true, "{}", second.text);
    assert!(second.text.contains("untrusted content"), "{}", second.text);
}

/// A turn another host drives is followed and cancelled through any host: the follow is
/// passed on to the host driving the turn, which is asked to cancel it through the store
/// (PostgreSQL's NOTIFY), and the turn ends.
#[test]
fn a_turn_is_cancelled_through_a_host_that_does_not_drive_it() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "never.txt");
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "never.txt", "1")]),
        Step::text("unused"),
    ]);
    let (hosts, _balancer, _front) = three_hosts(&home, &model, &config);
    let [a, b, _] = &hosts[..] else {
        unreachable!()
    };
    create(a, "stop");
    let events = a.stream("/api/v1/sessions/stop/messages", json!({"text": "write"}));
    events.until("approval_needed", WAIT);
    // Followed through host B, which passes the follow on to host A.
    let followed = b.follow_get("/api/v1/sessions/stop/events");
    assert_eq!(followed.status, 200);
    std::thread::sleep(Duration::from_millis(300));
    let cancelled = b.post("/api/v1/sessions/stop/cancel", json!({}));
    assert_eq!(cancelled.status, 202, "{}", cancelled.text);
    let ended = events.until("turn_finished", WAIT);
    let seen_on_b = followed.until("turn_finished", WAIT);
    assert_eq!(
        seen_on_b.last().unwrap()["outcome"]["kind"],
        "cancelled",
        "{seen_on_b:#?}"
    );
    assert_eq!(
        ended.last().unwrap()["outcome"]["kind"],
        "cancelled",
        "{ended:#?}"
    );
    assert_eq!(std::fs::read_to_string(data.join("never.txt")).unwrap(), "");
    // Nothing runs now: a cancel is told so.
    idle(b, "stop");
    let again = b.post("/api/v1/sessions/stop/cancel", json!({}));
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(again.text.contains("no turn is running"), "{}", again.text);
}

/// `cordon approve` on a machine where no host runs answers, through the shared store, a
/// question a host elsewhere waits on; that host's turn hears it and goes on.
#[test]
fn cordon_approve_answers_through_the_store_a_turn_another_machine_drives() {
    let (home, data, config) = probe_home(&[]);
    empty_file(&data, "far.txt");
    let url = cordon_tests::postgres::shared().database();
    let model = Model::new(vec![
        Step::tool_calls(vec![write_call("k1", "far.txt", "1")]),
        Step::text("Done."),
    ]);
    let host = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
            ("CORDON_HOST_NAME", "host-a"),
        ],
        &["--config", config.to_str().unwrap(), "--store", &url],
    );
    create(&host, "far");
    let events = host.stream("/api/v1/sessions/far/messages", json!({"text": "write"}));
    events.until("approval_needed", WAIT);
    let call_id = host.pending("far")["call_id"].as_str().unwrap().to_string();
    let elsewhere = TestHome::new();
    let listed = elsewhere
        .cordon(&["--store", &url, "approve", "--list"])
        .ok();
    assert!(
        listed.stdout.contains("far") && listed.stdout.contains(&call_id),
        "{}",
        listed.stdout
    );
    elsewhere
        .cordon(&["--store", &url, "approve", "far", &call_id, "yes"])
        .ok();
    let ended = events.until("turn_finished", WAIT);
    assert!(
        ended
            .iter()
            .any(|e| e["type"] == "approval_given" && e["answer"] == "yes"),
        "{ended:#?}"
    );
    assert_eq!(std::fs::read_to_string(data.join("far.txt")).unwrap(), "1");
    // A call that does not wait is named as such.
    let again = elsewhere.cordon(&["--store", &url, "approve", "far", "c9", "yes"]);
    assert_ne!(again.code, 0);
    assert!(
        again.stderr.contains("has no call `c9` waiting"),
        "{}",
        again.stderr
    );
}

/// A gateway client's own tool: the turn that asked for its result waits on the host that
/// drives it; the client's next request, carrying the result, reaches another host, which
/// passes it on to that one, and the rest of the turn comes back through it.
#[test]
fn a_client_tools_result_reaches_the_turn_waiting_for_it_on_another_host() {
    let (home, _data, config) = probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![crate::model::call(
            "w1",
            "get_weather",
            json!({"city": "Oslo"}),
        )]),
        Step::text("Sunny in Oslo."),
        Step::tool_calls(vec![crate::model::call(
            "w2",
            "get_weather",
            json!({"city": "Bergen"}),
        )]),
        Step::text("Rain in Bergen."),
    ]);
    let (hosts, _balancer, _front) = three_hosts(&home, &model, &config);
    let [a, b, c] = &hosts[..] else {
        unreachable!()
    };
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]);
    let ask = json!({"role": "user", "content": "Weather in Oslo?"});
    let first = a.post(
        "/v1/chat/completions",
        json!({"model": "scripted", "messages": [ask], "tools": tools}),
    );
    assert_eq!(first.status, 200, "{}", first.text);
    let call = first.json["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather", "{}", first.text);
    let second = b.post(
        "/v1/chat/completions",
        json!({"model": "scripted", "tools": tools, "messages": [
            ask,
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 °C"},
        ]}),
    );
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(said(&second.json), "Sunny in Oslo.");
    // Upstream, the model was given the client's result, once.
    let results: Vec<Value> = model
        .messages(1)
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["content"], "sunny, 21 °C");
    // The same through the Responses API: the outputs alone, naming the response that
    // asked for them, sent to another host.
    let weather = json!({"type": "function", "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}});
    let first = c.post(
        "/v1/responses",
        json!({"model": "scripted", "input": "Weather in Bergen?", "tools": [weather]}),
    );
    assert_eq!(first.status, 200, "{}", first.text);
    let call = first.json["output"][0].clone();
    assert_eq!(call["type"], "function_call", "{}", first.text);
    let second = a.post(
        "/v1/responses",
        json!({"model": "scripted", "tools": [weather], "previous_response_id": first.json["id"],
               "input": [{"type": "function_call_output", "call_id": call["call_id"],
                          "output": "rain, 9 °C"}]}),
    );
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(
        second.json["output"][0]["content"][0]["text"], "Rain in Bergen.",
        "{}",
        second.text
    );
    assert_eq!(
        sessions(b)
            .iter()
            .filter(|s| s["origin"] == "gateway")
            .count(),
        2
    );
}
