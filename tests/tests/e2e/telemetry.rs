//! Traces over OTLP (`[telemetry]`), received by an OTLP/HTTP receiver that decodes them with
//! OpenTelemetry's own protobuf messages (`cordon_tests::otlp`): a client's trace continues
//! through `cordon serve`'s API, its gateway and `cordon mcp`, with the turn, each model
//! request, the approval and the tool call as spans of it; the model server is sent the
//! trace too; nothing of an argument, a message or a model's text leaves in a span; a health
//! check makes none.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::otlp::{Collector, Span};
use cordon_tests::serve::Served;
use cordon_tests::support;
use serde_json::{Value, json};

use crate::model::{Model, call};

/// The trace and span a client sends its request in.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

/// Spans are sent in batches every 100 ms rather than every 5 s.
const QUICK_BATCHES: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    match named(spans, name).as_slice() {
        [span] => span,
        found => panic!(
            "wanted one span `{name}`, found {}: {:#?}",
            found.len(),
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        ),
    }
}

#[test]
fn a_clients_trace_holds_the_turn_its_model_requests_approval_and_tool_call() {
    let collector = Collector::start();
    let (home, data) = support::probe_home(&[]);
    std::fs::write(data.join("note.txt"), "NOTE-SECRET").unwrap();
    // Reads run unasked (for the MCP call below); a write asks.
    std::fs::write(
        home.scratch("serve-cwd").join("cordon.toml"),
        format!(
            "[telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"cordon-under-test\"\n\
             [policy]\nrules = [ {{ id = \"reads\", tool = \"probe.fs\", args = {{ op = \"read\" }}, decision = \"allow\" }} ]\n",
            collector.endpoint
        ),
    )
    .unwrap();
    // A write asks (the probe's grant is read-write); then the model answers.
    let model = Model::new(vec![
        Step::tool_calls(vec![call(
            "w1",
            "fs",
            json!({"op": "write", "path": "/data/out.txt", "content": "ARGUMENT-SECRET"}),
        )]),
        Step::text("ANSWER-SECRET"),
        Step::text("GATEWAY-ANSWER-SECRET"),
    ]);
    let served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
            QUICK_BATCHES,
        ],
        &[],
    );
    assert_eq!(served.get("/api/v1/health").status, 200);
    assert_eq!(
        served.post("/api/v1/sessions", json!({"id": "t"})).status,
        201
    );
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN);
    let events = served.stream_with(
        "/api/v1/sessions/t/messages",
        json!({"text": "MESSAGE-SECRET"}),
        &[("traceparent", &parent)],
    );
    events.until("approval_needed", Duration::from_secs(60));
    let question = served.pending("t");
    served.answer(&question, "yes");
    events.until("turn_finished", Duration::from_secs(60));

    let in_trace = |spans: &[Span], name: &str| {
        spans
            .iter()
            .any(|s| s.trace_id == CLIENT_TRACE && s.name == name)
    };
    let spans = collector.wait_for(Duration::from_secs(30), |spans| {
        in_trace(spans, "turn")
            && in_trace(spans, "execute_tool fs")
            && named(spans, "chat scripted").len() >= 2
    });
    let trace: Vec<Span> = spans
        .iter()
        .filter(|s| s.trace_id == CLIENT_TRACE)
        .cloned()
        .collect();
    let request = one(&trace, "POST /api/v1/sessions/{id}/messages");
    assert_eq!(request.parent_id, CLIENT_SPAN, "{request:#?}");
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(request.attr("http.route"), "/api/v1/sessions/{id}/messages");
    assert_eq!(request.service, "cordon-under-test");
    let turn = one(&trace, "turn");
    assert_eq!(turn.parent_id, request.span_id);
    assert_eq!(turn.attr("cordon.session"), "t");
    assert_eq!(turn.attr("cordon.origin"), "serve");
    assert_eq!(turn.attr("cordon.outcome"), "answered");
    assert_eq!(turn.attr("enduser.id"), "default");
    let chats = named(&trace, "chat scripted");
    assert_eq!(chats.len(), 2, "{trace:#?}");
    for chat in &chats {
        assert_eq!(chat.parent_id, turn.span_id);
        assert_eq!(chat.kind, 3, "a client span");
        assert_eq!(chat.attr("gen_ai.request.model"), "scripted");
        assert_eq!(chat.attr("gen_ai.operation.name"), "chat");
    }
    let approval = one(&trace, "approval fs");
    assert_eq!(approval.parent_id, turn.span_id);
    assert_eq!(approval.attr("cordon.answer"), "yes");
    assert_eq!(approval.attr("cordon.plugin"), "probe");
    let tool = one(&trace, "execute_tool fs");
    assert_eq!(tool.parent_id, turn.span_id);
    assert_eq!(tool.attr("gen_ai.tool.call.id"), "w1");
    assert_eq!(tool.attr("cordon.decision"), "yes");
    assert_eq!(tool.status, 0, "the call succeeded: {tool:#?}");
    assert!(
        tool.attr("cordon.peak_memory_bytes")
            .parse::<u64>()
            .unwrap()
            > 0,
        "{tool:#?}"
    );

    // The model server was sent the trace, each request as a child of its `chat` span.
    let upstream = model.server.requests();
    assert_eq!(upstream.len(), 2);
    let mut parents: Vec<String> = upstream
        .iter()
        .map(|sent| {
            let header = sent.traceparent.as_deref().expect("a traceparent upstream");
            let parts: Vec<&str> = header.split('-').collect();
            assert_eq!(parts[1], CLIENT_TRACE, "{header}");
            parts[2].to_string()
        })
        .collect();
    let mut chat_ids: Vec<String> = chats.iter().map(|c| c.span_id.clone()).collect();
    parents.sort();
    chat_ids.sort();
    assert_eq!(parents, chat_ids);

    // MCP over HTTP: the call's span is a child of the request's, in the client's trace.
    let mcp_trace = "22222222222222222222222222222222";
    let (opened, session) = served.mcp(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "trace-test", "version": "1"}}}),
    );
    assert_eq!(opened.status, 200, "{}", opened.text);
    let session = session.expect("an MCP session");
    served.mcp(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let (called, _) = served.mcp_with(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "fs", "arguments": {"op": "read", "path": "/data/note.txt"}}}),
        &[("traceparent", &traceparent(mcp_trace, CLIENT_SPAN))],
    );
    assert_eq!(called.status, 200, "{}", called.text);
    let spans = collector.wait_for(Duration::from_secs(30), |spans| {
        spans
            .iter()
            .any(|s| s.trace_id == mcp_trace && s.name.starts_with("tools/call"))
    });
    let over_http: Vec<Span> = spans
        .into_iter()
        .filter(|s| s.trace_id == mcp_trace)
        .collect();
    let request = one(&over_http, "POST /mcp");
    assert_eq!(request.parent_id, CLIENT_SPAN);
    assert_eq!(one(&over_http, "tools/call fs").parent_id, request.span_id);

    // A request without a valid token makes no span and chooses no trace.
    let stranger_trace = "11111111111111111111111111111111";
    let stranger = Served::at(&served.addr, "not-a-token");
    let refused = stranger.post_with(
        "/api/v1/sessions",
        json!({"id": "s"}),
        &[("traceparent", &traceparent(stranger_trace, CLIENT_SPAN))],
    );
    assert_eq!(refused.status, 401, "{}", refused.text);

    // The gateway: a Chat Completions request in the client's trace.
    let other_trace = "0af7651916cd43dd8448eb211c80319c";
    let answered = served.post_with(
        "/v1/chat/completions",
        json!({"model": "scripted", "messages": [{"role": "user", "content": "GATEWAY-SECRET"}]}),
        &[("traceparent", &traceparent(other_trace, "b7ad6b7169203331"))],
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    let spans = collector.wait_for(Duration::from_secs(30), |spans| {
        spans
            .iter()
            .filter(|s| s.trace_id == other_trace)
            .any(|s| s.name == "chat scripted")
    });
    let gateway: Vec<Span> = spans
        .into_iter()
        .filter(|s| s.trace_id == other_trace)
        .collect();
    let request = one(&gateway, "POST /v1/chat/completions");
    assert_eq!(request.parent_id, "b7ad6b7169203331");
    let turn = one(&gateway, "turn");
    assert_eq!(turn.parent_id, request.span_id);
    assert_eq!(turn.attr("cordon.origin"), "gateway");
    assert_eq!(one(&gateway, "chat scripted").parent_id, turn.span_id);

    // What was asked, given and answered never left in a span; a health check made none.
    for secret in [
        "ARGUMENT-SECRET",
        "MESSAGE-SECRET",
        "ANSWER-SECRET",
        "GATEWAY-SECRET",
        "NOTE-SECRET",
    ] {
        assert!(
            !collector.saw(secret),
            "`{secret}` was sent to the collector"
        );
    }
    let all = collector.spans();
    assert!(
        all.iter().all(|s| !s.name.contains("health")),
        "a health check made a span"
    );
    assert!(
        all.iter().all(|s| s.trace_id != stranger_trace),
        "a request without a token continued its trace"
    );
    assert_eq!(
        all.iter()
            .filter(|s| s.attr("http.route") == "/api/v1/sessions")
            .count(),
        1,
        "a request without a token made a span (the test's own session is the one)"
    );
    assert!(collector.refused().is_empty(), "{:?}", collector.refused());
}

#[test]
fn an_mcp_clients_trace_continues_from_the_calls_meta_and_is_sent_before_exit() {
    let collector = Collector::start();
    let (home, data) = support::probe_home(&[]);
    std::fs::write(data.join("note.txt"), "NOTE-SECRET").unwrap();
    let config = home.scratch("mcp").join("cordon.toml");
    std::fs::write(
        &config,
        "[policy]\nrules = [\n  { id = \"reads\", tool = \"probe.fs\", args = { op = \"read\" }, decision = \"allow\" },\n  { id = \"no-secrets\", tool = \"probe.fs\", args = { path = { prefix = \"/data/secret\" } }, decision = \"deny\", reason = \"RULE-REASON-SECRET\" },\n]\n",
    )
    .unwrap();
    // Turned on by the environment, as for any OpenTelemetry SDK.
    let mut child = home
        .cordon_command(&["mcp", "--config", config.to_str().unwrap()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
        .env("OTEL_SERVICE_NAME", "mcp-under-test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cordon mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let mut read = || -> Value {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "trace-test", "version": "1"}}}),
    );
    read();
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = read();
    let tool = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.ends_with("fs"))
        .expect("the probe's fs tool")
        .to_string();
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN);
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": tool, "arguments": {"op": "read", "path": "/data/note.txt"},
        "_meta": {"traceparent": parent}}}),
    );
    let answer = read();
    assert_eq!(answer["id"], 3, "{answer}");
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    // Denied by a rule whose reason the audit log records as who decided.
    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": tool, "arguments": {"op": "read", "path": "/data/secret/key"}}}),
    );
    let denied = read();
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    // The client goes away; the span is sent before the process ends (batches are 5 s
    // apart by default, so only the exit sends it in time).
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let spans = collector.wait_for(Duration::from_secs(10), |spans| {
        spans
            .iter()
            .filter(|s| s.name.starts_with("tools/call"))
            .count()
            == 2
    });
    let (call, denied): (Vec<&Span>, Vec<&Span>) = named(&spans, &format!("tools/call {tool}"))
        .into_iter()
        .partition(|s| s.trace_id == CLIENT_TRACE);
    let (call, denied) = (call[0], denied[0]);
    assert_eq!(denied.attr("cordon.decision"), "deny");
    assert_eq!(denied.attr("cordon.policy_rule"), "no-secrets");
    assert!(
        !collector.saw("RULE-REASON-SECRET"),
        "a rule's reason was sent"
    );
    assert_eq!(call.trace_id, CLIENT_TRACE);
    assert_eq!(call.parent_id, CLIENT_SPAN);
    assert_eq!(call.kind, 2, "a server span");
    assert_eq!(call.service, "mcp-under-test");
    assert_eq!(call.attr("mcp.method.name"), "tools/call");
    assert_eq!(call.attr("gen_ai.tool.name"), tool);
    assert_eq!(call.attr("cordon.decision"), "auto");
    assert_eq!(call.attr("cordon.policy_rule"), "reads");
    assert_eq!(call.attr("cordon.origin"), "mcp");
    assert!(!collector.saw("NOTE-SECRET"), "a result was sent");
    assert!(!collector.saw("note.txt"), "an argument was sent");
    assert!(!collector.saw("/data/secret"), "an argument was sent");
}
