//! Driver tests against the scripted OpenAI-compatible server with a fake tool host.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cordon_agent::{
    Agent, AgentConfig, AgentError, AgentEvent, ApprovalAnswer, ApprovalRequest, CancellationToken,
    Content, Conversation, Frontend, GivenAnswer, Message, Policy, PruneStrategy, State,
    ToolFailure, ToolFailureKind, ToolFormat, ToolHints, ToolHost, ToolSpec, TurnInput,
    TurnOutcome,
};
use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use serde_json::{Value, json};

struct FakeTools {
    specs: Vec<ToolSpec>,
    calls: Mutex<Vec<(String, Value)>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

fn spec(name: &str, can_change: bool, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        tool: name.into(),
        description: format!("The {name} tool."),
        input_schema: schema,
        output_schema: None,
        hints: ToolHints {
            read_only: true,
            ..ToolHints::default()
        },
        plugin: if name == "write_file" {
            "files".into()
        } else {
            "demo".into()
        },
        grants: vec![format!("grant for {name}")],
        can_change_anything: can_change,
        digest: String::new(),
        proven: Default::default(),
        reach: Default::default(),
        exposure: Default::default(),
    }
}

impl FakeTools {
    fn new() -> Arc<Self> {
        let q = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false});
        Arc::new(Self {
            specs: vec![
                spec("sql_query", false, q.clone()),
                spec("search_text", false, q.clone()),
                spec(
                    "write_file",
                    true,
                    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
                ),
                spec("slow", false, json!({"type": "object"})),
                spec("outside", false, json!({"type": "object"})),
            ],
            calls: Mutex::new(Vec::new()),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl ToolHost for FakeTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure> {
        self.calls
            .lock()
            .unwrap()
            .push((name.to_string(), arguments.clone()));
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let r = match name {
            "sql_query" => {
                // The first query is the slowest, so completion order differs from call order.
                let q = arguments["query"].as_str().unwrap_or_default().to_string();
                let ms = if q.contains("first") { 300 } else { 50 };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(vec![Content::Json(json!({"rows": [[q.len()]]}))])
            }
            "search_text" => Ok(vec![Content::Text(format!(
                "found: {}",
                arguments["query"]
            ))]),
            "write_file" => Ok(vec![Content::Text("written".into())]),
            "slow" => {
                tokio::select! {
                    _ = cancel.cancelled() => Err(ToolFailure::new(ToolFailureKind::Cancelled, "cancelled")),
                    _ = tokio::time::sleep(Duration::from_secs(30)) => Ok(vec![]),
                }
            }
            "outside" => Err(ToolFailure::new(
                ToolFailureKind::Denied,
                "/etc is outside the granted paths",
            )),
            _ => Err(ToolFailure::new(ToolFailureKind::NotFound, "no such tool")),
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

#[derive(Default)]
struct Recorder {
    events: Vec<AgentEvent>,
    answers: BTreeMap<String, ApprovalAnswer>,
    asked: Vec<ApprovalRequest>,
    persisted: usize,
}

#[async_trait]
impl Frontend for Recorder {
    fn event(&mut self, event: &AgentEvent) {
        self.events.push(event.clone());
    }
    async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer {
        self.asked.push(request.clone());
        let answer = self
            .answers
            .get(&request.tool)
            .cloned()
            .unwrap_or(ApprovalAnswer::No);
        GivenAnswer::new(answer, "the test")
    }
    fn persist(&mut self, _c: &Conversation) {
        self.persisted += 1;
    }
}

impl Recorder {
    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
    fn count(&self, pred: impl Fn(&AgentEvent) -> bool) -> usize {
        self.events.iter().filter(|e| pred(e)).count()
    }
}

fn config(server: &ScriptedServer) -> AgentConfig {
    let mut c = AgentConfig::default();
    c.llm.url = server.base_url();
    c.llm.model = "scripted".into();
    c.llm.retry.initial_backoff_ms = 10;
    c.llm.retry.max_backoff_ms = 40;
    c.llm.retry.max_retries = 3;
    c
}

struct Run {
    conv: Conversation,
    outcome: TurnOutcome,
    rec: Recorder,
}

async fn run(
    agent: &Agent,
    conv: Conversation,
    text: &str,
    answers: &[(&str, ApprovalAnswer)],
) -> Run {
    run_input(agent, conv, TurnInput::Message(text.into()), answers).await
}

/// [`run`] with any input.
async fn run_input(
    agent: &Agent,
    conv: Conversation,
    input: TurnInput,
    answers: &[(&str, ApprovalAnswer)],
) -> Run {
    let mut conv = conv;
    let mut rec = Recorder {
        answers: answers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..Recorder::default()
    };
    let outcome = agent
        .run_turn(&mut conv, input, &mut rec, &CancellationToken::new())
        .await
        .unwrap();
    Run { conv, outcome, rec }
}

fn call(name: &str, args: Value) -> ScriptedCall {
    ScriptedCall::new(name, args)
}

fn tool_messages(conv: &Conversation) -> Vec<(String, bool)> {
    conv.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_answer_is_streamed_and_recorded() {
    let server = ScriptedServer::start(Script::new([Step::text("The answer is forty-two.")]))
        .await
        .unwrap();
    let tools = FakeTools::new();
    let agent = Agent::new(config(&server), tools.clone()).unwrap();
    let r = run(&agent, Conversation::new(), "What is the answer?", &[]).await;
    assert_eq!(r.outcome, TurnOutcome::Answered);
    assert_eq!(r.rec.text(), "The answer is forty-two.");
    assert!(
        r.rec.count(|e| matches!(e, AgentEvent::TextDelta { .. })) >= 3,
        "streamed in pieces"
    );
    assert_eq!(
        r.conv.messages.last(),
        Some(&Message::assistant("The answer is forty-two."))
    );
    let req = &server.requests()[0];
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["model"], "scripted");
    // Each tool is described once: in `tools`, not again in the system prompt.
    let system = req.messages()[0]["content"].as_str().unwrap().to_string();
    assert!(
        !system.contains("sql_query") && system.contains("sandbox"),
        "{system}"
    );
    assert_eq!(
        req.tool_names(),
        vec!["outside", "search_text", "slow", "sql_query", "write_file"]
    );
    assert!(r.rec.persisted >= 2);
}

#[tokio::test]
async fn no_tools_means_no_tool_mentions() {
    struct NoTools;
    #[async_trait]
    impl ToolHost for NoTools {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![]
        }
        async fn call(
            &self,
            _: &str,
            _: Value,
            _: CancellationToken,
        ) -> Result<Vec<Content>, ToolFailure> {
            Err(ToolFailure::new(ToolFailureKind::NotFound, "none"))
        }
    }
    let server = ScriptedServer::start(Script::new([Step::text("hi")]))
        .await
        .unwrap();
    let agent = Agent::new(config(&server), Arc::new(NoTools)).unwrap();
    run(&agent, Conversation::new(), "hello", &[]).await;
    let req = &server.requests()[0];
    assert!(req.body.get("tools").is_none());
    let system = req.messages()[0]["content"].as_str().unwrap().to_string();
    assert!(
        system.contains("No tools are available") && !system.contains("sql"),
        "{system}"
    );
}

#[tokio::test]
async fn one_tool_call_round_trips_with_native_tool_messages() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call(
            "sql_query",
            json!({"query": "select count(*) from t"}),
        )]),
        Step::text("There are 22 rows."),
    ]))
    .await
    .unwrap();
    let tools = FakeTools::new();
    let agent = Agent::new(config(&server), tools.clone()).unwrap();
    let r = run(&agent, Conversation::new(), "How many rows?", &[]).await;
    assert_eq!(r.outcome, TurnOutcome::Answered);
    assert_eq!(
        tools.calls(),
        vec![(
            "sql_query".to_string(),
            json!({"query": "select count(*) from t"})
        )]
    );
    let second = server.requests()[1].messages();
    let assistant = &second[2];
    assert_eq!(assistant["role"], "assistant");
    let id = assistant["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "sql_query");
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], id);
    assert_eq!(second[3]["content"], "{\"rows\":[[22]]}");
    assert!(
        r.rec.count(|e| matches!(
            e,
            AgentEvent::ToolResult {
                is_error: false,
                ..
            }
        )) == 1
    );
}

#[tokio::test]
async fn several_calls_run_concurrently_and_return_in_call_order() {
    let server = ScriptedServer::start(Script::new([
        Step::ToolCalls {
            content: Some("Running three queries.".into()),
            calls: vec![
                call("sql_query", json!({"query": "first query"})),
                call("sql_query", json!({"query": "second"})),
                call("search_text", json!({"query": "needle"})),
            ],
            chunk: Some(3),
            interleave: true,
            usage: None,
        },
        Step::text("done"),
    ]))
    .await
    .unwrap();
    let tools = FakeTools::new();
    let mut c = config(&server);
    c.agent.max_parallel_tools = 2;
    let agent = Agent::new(c, tools.clone()).unwrap();
    let r = run(&agent, Conversation::new(), "go", &[]).await;
    assert_eq!(r.outcome, TurnOutcome::Answered);
    assert_eq!(
        tools.max_running.load(Ordering::SeqCst),
        2,
        "bounded concurrency"
    );
    let results = tool_messages(&r.conv);
    assert_eq!(results[0].0, "{\"rows\":[[11]]}");
    assert_eq!(results[1].0, "{\"rows\":[[6]]}");
    assert_eq!(results[2].0, "found: \"needle\"");
    let second = server.requests()[1].messages();
    assert_eq!(second[2]["content"], "Running three queries.");
    let ids: Vec<&str> = second[2]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let result_ids: Vec<&str> = second[3..6]
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, result_ids);
}

#[tokio::test]
async fn approval_ask_yes_no_and_config_deny() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("write_file", json!({"path": "a.txt"}))]),
        Step::text("wrote it"),
        Step::tool_calls(vec![call("write_file", json!({"path": "b.txt"}))]),
        Step::text("you declined"),
    ]))
    .await
    .unwrap();
    let tools = FakeTools::new();
    let agent = Agent::new(config(&server), tools.clone()).unwrap();
    let r = run(
        &agent,
        Conversation::new(),
        "write a",
        &[("write_file", ApprovalAnswer::Yes)],
    )
    .await;
    assert_eq!(r.rec.asked.len(), 1);
    assert_eq!(r.rec.asked[0].arguments, json!({"path": "a.txt"}));
    assert_eq!(
        r.rec.asked[0].grants,
        vec!["grant for write_file".to_string()]
    );
    assert_eq!(tools.calls().len(), 1);
    let r = run(
        &agent,
        r.conv,
        "write b",
        &[("write_file", ApprovalAnswer::No)],
    )
    .await;
    assert_eq!(tools.calls().len(), 1, "declined call did not run");
    let last = tool_messages(&r.conv).pop().unwrap();
    assert!(last.1 && last.0.contains("user declined"), "{last:?}");
    // Auto tools are never asked about (covered above: sql_query). Config deny: not offered, refused.
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("write_file", json!({"path": "c.txt"}))]),
        Step::text("ok"),
    ]))
    .await
    .unwrap();
    let mut c = config(&server);
    c.approval.plugins.insert("files".into(), Policy::Deny);
    let agent = Agent::new(c, tools.clone()).unwrap();
    let r = run(
        &agent,
        Conversation::new(),
        "write c",
        &[("write_file", ApprovalAnswer::Yes)],
    )
    .await;
    assert!(r.rec.asked.is_empty());
    assert!(
        !server.requests()[0]
            .tool_names()
            .contains(&"write_file".to_string())
    );
    assert_eq!(tools.calls().len(), 1);
    assert!(
        tool_messages(&r.conv)[0]
            .0
            .contains("denies the plugin `files`")
    );
}

#[tokio::test]
async fn sandbox_refusal_goes_back_to_the_model() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("outside", json!({}))]),
        Step::text("refused"),
    ]))
    .await
    .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "read /etc/passwd", &[]).await;
    let m = &tool_messages(&r.conv)[0];
    assert!(
        m.1 && m.0.contains("denied by the sandbox") && m.0.contains("outside the granted paths"),
        "{m:?}"
    );
    assert_eq!(r.outcome, TurnOutcome::Answered);
}

#[tokio::test]
async fn unknown_tool_and_invalid_arguments_let_the_model_correct_itself() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("sql", json!({"query": "x"}))]),
        Step::tool_calls(vec![call("sql_query", json!({"sql": "x"}))]),
        Step::tool_calls(vec![call("sql_query", json!("{\"query\": "))]),
        Step::tool_calls(vec![call("sql_query", json!({"query": "x"}))]),
        Step::text("fixed"),
    ]))
    .await
    .unwrap();
    let tools = FakeTools::new();
    let agent = Agent::new(config(&server), tools.clone()).unwrap();
    let r = run(&agent, Conversation::new(), "q", &[]).await;
    assert_eq!(r.outcome, TurnOutcome::Answered);
    let msgs = tool_messages(&r.conv);
    assert!(
        msgs[0].0.contains("no tool named `sql`") && msgs[0].0.contains("sql_query, write_file"),
        "{}",
        msgs[0].0
    );
    assert!(
        msgs[1].0.contains("do not match its schema") && msgs[1].0.contains("query"),
        "{}",
        msgs[1].0
    );
    assert!(msgs[2].0.contains("not valid JSON"), "{}", msgs[2].0);
    assert!(!msgs[3].1);
    assert_eq!(tools.calls().len(), 1, "only the valid call ran");
}

#[tokio::test]
async fn iteration_limit_asks_for_a_final_answer_without_tools() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("search_text", json!({"query": "a"}))]),
        Step::tool_calls(vec![call("search_text", json!({"query": "b"}))]),
        Step::text("Here is what I found so far."),
    ]))
    .await
    .unwrap();
    let mut c = config(&server);
    c.agent.max_iterations = 2;
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "search", &[]).await;
    assert_eq!(r.outcome, TurnOutcome::FinalAnswerAfterLimit);
    let last = server.requests().pop().unwrap();
    assert!(last.body.get("tools").is_none());
    let msgs = last.messages();
    assert!(
        msgs.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("maximum number of tool steps (2)")
    );
    assert!(
        r.rec
            .count(|e| matches!(e, AgentEvent::IterationLimitReached { limit: 2 }))
            == 1
    );
    assert_eq!(r.conv.last_answer(), Some("Here is what I found so far."));
}

#[tokio::test]
async fn repeating_the_same_call_stops_with_an_explanation() {
    let same = || Step::tool_calls(vec![call("search_text", json!({"query": "same"}))]);
    let server = ScriptedServer::start(Script::new([same(), same(), same(), Step::text("never")]))
        .await
        .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "loop", &[]).await;
    let TurnOutcome::NoProgress { explanation } = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(explanation.contains("search_text"), "{explanation}");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn transient_failures_are_retried_without_duplicating_history() {
    let server = ScriptedServer::start(Script::new([
        Step::Status {
            status: 429,
            message: "slow down".into(),
            retry_after: Some(1),
        },
        Step::status(503, "overloaded"),
        Step::Cut {
            text: "This answer will be cut off".into(),
        },
        Step::text("finally"),
    ]))
    .await
    .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let started = std::time::Instant::now();
    let r = run(&agent, Conversation::new(), "hi", &[]).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "Retry-After honoured"
    );
    assert_eq!(r.outcome, TurnOutcome::Answered);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs[1..] {
        assert_eq!(r.body, reqs[0].body, "a retried request is identical");
    }
    assert_eq!(
        r.conv.messages,
        vec![Message::user("hi"), Message::assistant("finally")]
    );
    let retries: Vec<String> = r
        .rec
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retrying { cause, .. } => Some(cause.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 3);
    assert!(
        retries[0].contains("429") && retries[0].contains("slow down"),
        "{retries:?}"
    );
    assert!(retries[2].contains("before [DONE]"), "{retries:?}");
}

#[tokio::test]
async fn retries_exhausted_fail_with_a_clear_error_and_history_intact() {
    let server =
        ScriptedServer::start(Script::new((0..5).map(|_| Step::status(503, "overloaded"))))
            .await
            .unwrap();
    let mut c = config(&server);
    c.llm.retry.max_retries = 2;
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "hi", &[]).await;
    let TurnOutcome::Failed { error, .. } = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(
        error.contains("HTTP 503")
            && error.contains("overloaded")
            && error.contains("gave up after 2 retries"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 3);
    assert_eq!(r.conv.messages, vec![Message::user("hi")]);
    assert!(matches!(r.conv.state, State::Failed { .. }));
    // The failed turn can be retried once the server recovers.
    server.push([Step::text("recovered")]);
    let server_left = server.remaining();
    let mut conv = r.conv;
    let mut rec = Recorder::default();
    // Drain the two remaining 503s first by exhausting them in a retry.
    let outcome = agent
        .run_turn(
            &mut conv,
            TurnInput::Retry,
            &mut rec,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, TurnOutcome::Answered, "{server_left}");
    assert_eq!(conv.last_answer(), Some("recovered"));
}

#[tokio::test]
async fn client_errors_fail_at_once_with_the_server_message() {
    let server = ScriptedServer::start(Script::new([
        Step::status(400, "model `scripted` does not support tools"),
        Step::text("x"),
    ]))
    .await
    .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "hi", &[]).await;
    let TurnOutcome::Failed { error, .. } = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(
        error.contains("HTTP 400") && error.contains("does not support tools"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn garbage_from_the_model_is_a_clear_error() {
    for stream in [true, false] {
        let server = ScriptedServer::start(Script::new([Step::Garbage {
            body: "<html>not an api</html>".into(),
        }]))
        .await
        .unwrap();
        let mut c = config(&server);
        c.llm.stream = stream;
        let agent = Agent::new(c, FakeTools::new()).unwrap();
        let r = run(&agent, Conversation::new(), "hi", &[]).await;
        let TurnOutcome::Failed { error, .. } = &r.outcome else {
            panic!("{:?}", r.outcome)
        };
        assert!(
            error.contains("not a chat completion") && error.contains("<html>"),
            "{error}"
        );
        assert_eq!(server.requests().len(), 1, "garbage is not retried");
        assert_eq!(r.conv.messages, vec![Message::user("hi")]);
    }
}

#[tokio::test]
async fn unreachable_endpoint_fails_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut c = AgentConfig::default();
    c.llm.url = format!("http://127.0.0.1:{port}/v1");
    c.llm.retry.max_retries = 1;
    c.llm.retry.initial_backoff_ms = 5;
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "hi", &[]).await;
    let TurnOutcome::Failed { error, .. } = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(
        error.contains("cannot reach the model server") && error.contains(&port.to_string()),
        "{error}"
    );
    assert_eq!(r.conv.messages, vec![Message::user("hi")]);
}

#[tokio::test]
async fn non_streaming_mode_and_api_key() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("search_text", json!({"query": "q"}))]),
        Step::Text {
            text: "plain".into(),
            chunk: None,
            delay_ms: None,
            usage: Some(cordon_scripted_llm::Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
            }),
        },
    ]))
    .await
    .unwrap();
    let mut c = config(&server);
    c.llm.stream = false;
    // SAFETY-free: the variable name is unique to this test.
    let var = "CORDON_TEST_KEY_NONSTREAM";
    unsafe { std::env::set_var(var, "sekret") };
    c.llm.api_key_env = Some(var.into());
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "hi", &[]).await;
    assert_eq!(r.conv.last_answer(), Some("plain"));
    assert_eq!(r.conv.usage.prompt_tokens, 7);
    let reqs = server.requests();
    assert_eq!(reqs[0].body["stream"], false);
    assert_eq!(reqs[0].authorization.as_deref(), Some("Bearer sekret"));
    assert!(
        !r.conv.to_json().contains("sekret"),
        "the key is never stored"
    );
    let mut c = config(&server);
    c.llm.api_key_env = Some("CORDON_TEST_KEY_UNSET_XYZ".into());
    let e = Agent::new(c, FakeTools::new()).unwrap_err().to_string();
    assert!(e.contains("CORDON_TEST_KEY_UNSET_XYZ"), "{e}");
}

#[tokio::test]
async fn hermes_format_parses_and_produces_text_tool_calls() {
    let server = ScriptedServer::start(Script::new([
        Step::Hermes {
            content: Some("Let me search.".into()),
            calls: vec![call("search_text", json!({"query": "cordon"}))],
        },
        Step::text("Found it."),
    ]))
    .await
    .unwrap();
    let mut c = config(&server);
    c.llm.tool_format = ToolFormat::Hermes;
    let tools = FakeTools::new();
    let agent = Agent::new(c, tools.clone()).unwrap();
    let r = run(&agent, Conversation::new(), "find cordon", &[]).await;
    assert_eq!(r.outcome, TurnOutcome::Answered);
    let shown = r.rec.text();
    assert!(
        shown.starts_with("Let me search.") && !shown.contains("<tool_call>"),
        "{shown}"
    );
    assert_eq!(
        tools.calls(),
        vec![("search_text".to_string(), json!({"query": "cordon"}))]
    );
    let reqs = server.requests();
    assert!(reqs[0].body.get("tools").is_none());
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("<tools>") && system.contains("search_text"),
        "{system}"
    );
    let msgs = reqs[1].messages();
    assert!(msgs[2]["content"].as_str().unwrap().contains("<tool_call>"));
    assert_eq!(msgs[3]["role"], "user");
    assert!(
        msgs[3]["content"]
            .as_str()
            .unwrap()
            .contains("<tool_response>")
    );
    assert!(msgs.iter().all(|m| m["role"] != "tool"));
    // History stays canonical.
    assert!(
        matches!(&r.conv.messages[1], Message::Assistant { tool_calls, content, .. } if tool_calls.len() == 1 && content == "Let me search.")
    );
}

#[tokio::test]
async fn pruning_keeps_newest_turns_and_is_visible() {
    let long = "word ".repeat(300);
    let steps: Vec<Step> = (0..4)
        .map(|i| Step::text(&format!("answer {i}: {long}")))
        .collect();
    let server = ScriptedServer::start(Script::new(steps)).await.unwrap();
    let mut c = config(&server);
    c.context.window_tokens = 1400;
    c.context.reserve_tokens = 100;
    c.context.keep_last_turns = 1;
    c.context.strategy = PruneStrategy::OldestFirst;
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let mut conv = Conversation::new();
    let mut pruned = 0;
    for i in 0..4 {
        let r = run(&agent, conv, &format!("question {i}"), &[]).await;
        pruned += r
            .rec
            .count(|e| matches!(e, AgentEvent::ContextPruned { .. }));
        conv = r.conv;
    }
    assert!(pruned >= 1);
    assert_eq!(conv.messages.len(), 8, "the stored history is never pruned");
    assert!(
        conv.notes
            .iter()
            .any(|n| n.text.contains("Context pruned (oldest-first")),
        "{:?}",
        conv.notes
    );
    let last = server.requests().pop().unwrap().messages();
    assert_eq!(last[0]["role"], "system");
    assert_eq!(last.last().unwrap()["content"], "question 3");
    assert!(last.len() < 8, "older turns left out: {}", last.len());
    assert!(!last.iter().any(|m| m["content"] == "question 0"));
}

#[tokio::test]
async fn pruning_with_summary_sends_one_summary_call() {
    let long = "word ".repeat(300);
    let server = ScriptedServer::start(Script::new([
        Step::text(&format!("first {long}")),
        Step::text(&format!("second {long}")),
        Step::text("SUMMARY: the user asked two questions."),
        Step::text("third"),
    ]))
    .await
    .unwrap();
    let mut c = config(&server);
    c.context.window_tokens = 900;
    c.context.reserve_tokens = 100;
    c.context.keep_last_turns = 1;
    c.context.summarize = true;
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let mut conv = Conversation::new();
    for q in ["q1", "q2", "q3"] {
        conv = run(&agent, conv, q, &[]).await.conv;
    }
    let reqs = server.requests();
    let summary_req = reqs
        .iter()
        .find(|r| r.body["stream"] == false)
        .expect("a summary request");
    assert!(
        summary_req.messages()[0]["content"]
            .as_str()
            .unwrap()
            .contains("Summarize")
    );
    let last = reqs.last().unwrap().messages();
    assert!(
        last[1]["content"]
            .as_str()
            .unwrap()
            .contains("SUMMARY: the user asked two questions."),
        "{:?}",
        last[1]
    );
    assert_eq!(conv.last_answer(), Some("third"));
}

#[tokio::test]
async fn cancellation_keeps_the_partial_answer_and_the_conversation_usable() {
    let server = ScriptedServer::start(Script::new([
        Step::slow_text("one two three four five six seven eight nine ten", 4, 150),
        Step::text("still here"),
    ]))
    .await
    .unwrap();
    let agent = Arc::new(Agent::new(config(&server), FakeTools::new()).unwrap());
    let mut turn = agent.start_turn(Conversation::new(), TurnInput::Message("count".into()));
    let mut deltas = 0;
    while let Some(e) = turn.next_event().await {
        if matches!(e, AgentEvent::TextDelta { .. }) {
            deltas += 1;
            if deltas == 2 {
                turn.cancel();
            }
        }
    }
    let (conv, outcome) = turn.finish().await.unwrap();
    assert_eq!(outcome.unwrap(), TurnOutcome::Cancelled);
    let Some(Message::Assistant {
        content,
        partial: true,
        ..
    }) = conv.messages.last()
    else {
        panic!("{:?}", conv.messages)
    };
    assert!(
        content.starts_with("one ") && content.len() < 20,
        "{content}"
    );
    let turn = agent.start_turn(conv, TurnInput::Message("again".into()));
    let (conv, outcome) = turn.finish().await.unwrap();
    assert_eq!(outcome.unwrap(), TurnOutcome::Answered);
    assert_eq!(conv.last_answer(), Some("still here"));
    // The partial answer is sent back to the model in the next request.
    let msgs = server.requests()[1].messages();
    assert!(msgs[2]["content"].as_str().unwrap().starts_with("one "));
}

#[tokio::test]
async fn cancellation_during_a_tool_call_and_approval_through_the_handle() {
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(vec![call("write_file", json!({"path": "x"}))]),
        Step::tool_calls(vec![call("slow", json!({}))]),
    ]))
    .await
    .unwrap();
    let agent = Arc::new(Agent::new(config(&server), FakeTools::new()).unwrap());
    let mut turn = agent.start_turn(Conversation::new(), TurnInput::Message("go".into()));
    while let Some(e) = turn.next_event().await {
        match e {
            AgentEvent::ApprovalNeeded { request } => {
                turn.answer(&request.call_id, ApprovalAnswer::Yes)
            }
            AgentEvent::ToolStarted { tool, .. } if tool == "slow" => turn.cancel(),
            _ => {}
        }
    }
    let (conv, outcome) = turn.finish().await.unwrap();
    assert_eq!(outcome.unwrap(), TurnOutcome::Cancelled);
    let results = tool_messages(&conv);
    assert_eq!(results[0].0, "written");
    assert!(
        results[1].1 && results[1].0.contains("cancelled"),
        "{results:?}"
    );
}

#[tokio::test]
async fn continue_fork_save_and_load() {
    let server = ScriptedServer::start(Script::new([
        Step::text("Paris."),
        Step::text("About 2 million."),
        Step::text("Berlin."),
        Step::text("Rome."),
    ]))
    .await
    .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let r = run(&agent, Conversation::new(), "Capital of France?", &[]).await;
    let r = run(&agent, r.conv, "Population?", &[]).await;
    assert_eq!(r.conv.turns.len(), 2);
    assert_eq!(
        server.requests()[1].messages().len(),
        4,
        "the second turn sees the first"
    );
    // Save/load round trip, then continue the loaded copy.
    let saved = r.conv.to_json();
    let loaded = Conversation::from_json(&saved).unwrap();
    assert_eq!(loaded, r.conv);
    // Fork after the first turn: an independent copy.
    let fork = loaded.fork(1).unwrap();
    assert_eq!(fork.messages.len(), 2);
    let f = run(&agent, fork, "And Germany?", &[]).await;
    assert_eq!(f.conv.last_answer(), Some("Berlin."));
    let fork_req = server.requests()[2].messages();
    assert!(!fork_req.iter().any(|m| m["content"] == "Population?"));
    assert_eq!(loaded.messages.len(), 4, "the original is untouched");
    let o = run(&agent, loaded, "And Italy?", &[]).await;
    assert_eq!(o.conv.messages.len(), 6);
    assert!(
        r.conv
            .fork(3)
            .unwrap_err()
            .to_string()
            .contains("2 finished turn")
    );
    assert!(
        Conversation::from_json("{\"format\": 99}")
            .unwrap_err()
            .to_string()
            .contains("format 99")
    );
    assert!(Conversation::from_json("nope").is_err());
}

#[tokio::test]
async fn a_message_while_a_turn_runs_is_refused_and_changes_nothing() {
    let server = ScriptedServer::start(Script::new([Step::text("x")]))
        .await
        .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let mut conv = Conversation::new();
    conv.state = State::AwaitingModel { final_pass: false };
    let before = conv.clone();
    let mut rec = Recorder::default();
    let e = agent
        .run_turn(
            &mut conv,
            TurnInput::Message("hi".into()),
            &mut rec,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::Step(_)));
    assert!(e.to_string().contains("still waiting for the model"), "{e}");
    assert_eq!(conv, before);
    // Resume continues it instead.
    conv.messages.push(Message::user("hi"));
    conv.turns.push(cordon_agent::conversation::Turn {
        first_message: 0,
        outcome: None,
        requested_by: None,
        parameters: Default::default(),
    });
    let outcome = agent
        .run_turn(
            &mut conv,
            TurnInput::Resume,
            &mut rec,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, TurnOutcome::Answered);
}

/// What the driver hands its journal, and when: every transition before its effects, every
/// call for the audit log, and nothing after the journal fails or driving is suspended.
mod journaled {
    use super::*;
    use cordon_agent::{AuditContext, Cause, Driven, Journal, JournalError, TurnIo};
    use cordon_core::{AuditEntry, AuditRecord, ToolCallAudit};

    /// Records, for each transition, the state it left and how many tool calls and model
    /// requests had been made by then; fails at transition `fail_at` (1-based) if set.
    struct Witness {
        tools: Arc<FakeTools>,
        server: Arc<ScriptedServer>,
        transitions: Vec<(String, usize, usize)>,
        audits: Vec<ToolCallAudit>,
        fail_at: Option<usize>,
        /// Fails the first transition that brings a call's result, as a store would that
        /// went away (or a host that died) between the call's end and its record.
        fail_on_result: bool,
        /// The conversation as last recorded: where a host taking the session up begins.
        recorded: Option<Conversation>,
        /// For each record that came with a transition: its call and the transition's cause.
        audited_with: Vec<(Option<String>, String)>,
    }

    #[async_trait]
    impl Journal for Witness {
        async fn transition(&mut self, conv: &Conversation, _: &Cause) -> Result<(), JournalError> {
            if self.fail_at == Some(self.transitions.len() + 1) {
                return Err(JournalError::Store("the disk is full".into()));
            }
            self.transitions.push((
                conv.state.key().to_string(),
                self.tools.calls().len(),
                self.server.requests().len(),
            ));
            self.recorded = Some(conv.clone());
            Ok(())
        }

        /// As a store does: the transition and its records together, or neither.
        async fn transition_audited(
            &mut self,
            conv: &Conversation,
            cause: &Cause,
            audits: Vec<AuditRecord>,
        ) -> Result<(), JournalError> {
            let result = matches!(
                cause,
                Cause::Event {
                    event: cordon_agent::Event::ToolFinished { .. }
                }
            );
            if result && std::mem::take(&mut self.fail_on_result) {
                return Err(JournalError::Store("the store went away".into()));
            }
            self.transition(conv, cause).await?;
            let cause = serde_json::to_value(cause).unwrap();
            let kind = cause["event"]["event"]
                .as_str()
                .or(cause["cause"].as_str())
                .unwrap_or_default()
                .to_string();
            for record in audits {
                if let AuditEntry::ToolCall(call) = &record.entry {
                    self.audited_with.push((call.call_id.clone(), kind.clone()));
                }
                self.audit(record).await?;
            }
            Ok(())
        }

        async fn audit(&mut self, record: AuditRecord) -> Result<(), JournalError> {
            match record.entry {
                AuditEntry::ToolCall(call) => self.audits.push(*call),
                AuditEntry::HomeChange(_) => {}
            }
            Ok(())
        }
    }

    fn witness(
        tools: &Arc<FakeTools>,
        server: &Arc<ScriptedServer>,
        fail_at: Option<usize>,
    ) -> Witness {
        Witness {
            tools: tools.clone(),
            server: server.clone(),
            transitions: Vec::new(),
            audits: Vec::new(),
            fail_at,
            fail_on_result: false,
            recorded: None,
            audited_with: Vec::new(),
        }
    }

    /// Drives a turn asking "go" in a new conversation, `write_file` approved; what it gave and
    /// what the frontend saw.
    async fn go(agent: &Agent, journal: &mut Witness) -> (Result<Driven, AgentError>, Recorder) {
        let mut rec = Recorder::default();
        rec.answers.insert("write_file".into(), ApprovalAnswer::Yes);
        let mut conv = Conversation::new();
        let input = TurnInput::Message("go".into());
        let driven = drive(agent, &mut conv, input, &mut rec, journal, None).await;
        (driven, rec)
    }

    async fn drive(
        agent: &Agent,
        conv: &mut Conversation,
        input: TurnInput,
        rec: &mut Recorder,
        journal: &mut Witness,
        suspend: Option<&CancellationToken>,
    ) -> Result<Driven, AgentError> {
        let cancel = CancellationToken::new();
        let mut io = TurnIo {
            frontend: rec,
            journal,
            cancel: &cancel,
            suspend,
            audit: AuditContext {
                session: Some("s1".into()),
                origin: "test".into(),
                keep_arguments: false,
                requested_by: None,
            },
        };
        agent.drive(conv, input, &mut io).await
    }

    fn script() -> Script {
        Script::new([
            Step::tool_calls(vec![
                call("sql_query", json!({"query": "q"})),
                call("write_file", json!({"path": "/x"})),
                call("nope", json!({})),
            ]),
            Step::text("done"),
        ])
    }

    #[tokio::test]
    async fn every_transition_is_recorded_before_what_it_asks_for_is_done() {
        let server = Arc::new(ScriptedServer::start(script()).await.unwrap());
        let tools = FakeTools::new();
        let agent = Agent::new(config(&server), tools.clone()).unwrap();
        let mut journal = witness(&tools, &server, None);
        let driven = go(&agent, &mut journal).await.0.unwrap();
        assert_eq!(driven, Driven::Finished(TurnOutcome::Answered));
        let t = &journal.transitions;
        // A journal that records at once has recorded the state that asks for the model
        // before the request goes out (a slow one lets it go out meanwhile; see below).
        let waits: Vec<usize> = t
            .iter()
            .filter(|(s, _, _)| s == "awaiting_model")
            .map(|(_, _, requests)| *requests)
            .collect();
        assert_eq!(waits, [0, 1], "{t:?}");
        // No tool runs before the batch is recorded as running; each result is its own
        // transition, recorded once its call returned.
        let running: Vec<usize> = t
            .iter()
            .filter(|(s, _, _)| s == "executing_tools")
            .map(|(_, calls, _)| *calls)
            .collect();
        assert_eq!(running[0], 0, "{t:?}");
        assert_eq!(t.last().unwrap().0, "idle");
        // The audit log has every call the model asked for, with who decided.
        let audited: Vec<(String, String, String, &str)> = journal
            .audits
            .iter()
            .map(|a| {
                (
                    a.tool.clone(),
                    a.decision.clone(),
                    a.decided_by.clone(),
                    a.outcome.label(),
                )
            })
            .collect();
        assert_eq!(audited.len(), 3, "{audited:?}");
        assert!(audited.contains(&(
            "sql_query".into(),
            "auto".into(),
            "policy: its grants cannot change anything".into(),
            "ok"
        )));
        assert!(audited.contains(&("write_file".into(), "yes".into(), "the test".into(), "ok")));
        assert!(audited.contains(&(
            "nope".into(),
            "invalid".into(),
            "Cordon's check of the call".into(),
            "not_run"
        )));
        for a in &journal.audits {
            assert_eq!(a.session.as_deref(), Some("s1"));
            assert_eq!(a.turn, Some(0));
            assert!(a.arguments.is_none(), "arguments are kept only when asked");
            assert_eq!(a.arguments_sha256.len(), 64);
        }
    }

    #[tokio::test]
    async fn each_calls_record_comes_with_the_transition_that_settles_it() {
        let server = Arc::new(ScriptedServer::start(script()).await.unwrap());
        let tools = FakeTools::new();
        let agent = Agent::new(config(&server), tools.clone()).unwrap();
        let mut journal = witness(&tools, &server, None);
        go(&agent, &mut journal).await.0.unwrap();
        let mut with: Vec<(String, String)> = journal
            .audited_with
            .iter()
            .map(|(call, cause)| (call.clone().unwrap_or_default(), cause.clone()))
            .collect();
        with.sort();
        // Every record came with a transition; the two calls that ran, with their results.
        assert_eq!(with.len(), 3, "{with:?}");
        assert_eq!(journal.audits.len(), 3);
        for ran in ["sql_query", "write_file"] {
            let audit = journal.audits.iter().find(|a| a.tool == ran).unwrap();
            let id = audit.call_id.clone().unwrap();
            assert!(with.contains(&(id, "tool_finished".into())), "{with:?}");
        }
    }

    #[tokio::test]
    async fn a_call_whose_result_was_not_recorded_has_one_record_after_resume() {
        let server = Arc::new(ScriptedServer::start(script()).await.unwrap());
        let tools = FakeTools::new();
        let agent = Agent::new(config(&server), tools.clone()).unwrap();
        let mut journal = witness(&tools, &server, None);
        journal.fail_on_result = true;
        let e = go(&agent, &mut journal).await.0.unwrap_err();
        assert!(e.to_string().contains("the store went away"), "{e}");
        assert!(
            !tools.calls().is_empty(),
            "a call ran before the record failed"
        );
        // Another host takes the session up where it was recorded: the calls whose results
        // were not recorded are closed as interrupted, each with one record in all.
        let mut conv = journal.recorded.clone().unwrap();
        assert_eq!(conv.state.key(), "executing_tools");
        let mut again = witness(&tools, &server, None);
        let mut rec = Recorder::default();
        drive(
            &agent,
            &mut conv,
            TurnInput::Resume,
            &mut rec,
            &mut again,
            None,
        )
        .await
        .unwrap();
        let mut records: Vec<(String, &str)> = journal
            .audits
            .iter()
            .chain(&again.audits)
            .map(|a| (a.call_id.clone().unwrap_or_default(), a.outcome.label()))
            .collect();
        records.sort();
        let mut calls: Vec<&String> = records.iter().map(|(c, _)| c).collect();
        calls.dedup();
        assert_eq!(
            calls.len(),
            records.len(),
            "one record per call: {records:?}"
        );
        assert_eq!(records.len(), 3, "{records:?}");
        assert_eq!(
            records.iter().filter(|(_, o)| *o == "interrupted").count(),
            2,
            "{records:?}"
        );
    }

    #[tokio::test]
    async fn a_journal_that_fails_stops_the_turn_before_anything_else_is_done() {
        let server = Arc::new(ScriptedServer::start(script()).await.unwrap());
        let tools = FakeTools::new();
        let agent = Agent::new(config(&server), tools.clone()).unwrap();
        // 1: user message, 2: the model's answer, 3: the batch processed (awaiting approval).
        let mut journal = witness(&tools, &server, Some(3));
        let (e, rec) = go(&agent, &mut journal).await;
        let e = e.unwrap_err();
        assert!(matches!(e, AgentError::Journal(_)), "{e}");
        assert!(e.to_string().contains("the disk is full"), "{e}");
        assert!(
            tools.calls().is_empty(),
            "nothing ran after the failed record"
        );
        assert!(
            rec.asked.is_empty(),
            "nobody was asked after the failed record"
        );
        assert_eq!(server.requests().len(), 1);
    }

    /// A frontend whose questions are never answered.
    struct NobodyAnswers(Vec<ApprovalRequest>);

    #[async_trait]
    impl Frontend for NobodyAnswers {
        fn event(&mut self, _: &AgentEvent) {}
        async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer {
            self.0.push(request.clone());
            futures::future::pending().await
        }
    }

    #[tokio::test]
    async fn suspending_stops_where_nothing_is_lost_and_resuming_asks_again() {
        let server = Arc::new(ScriptedServer::start(script()).await.unwrap());
        let tools = FakeTools::new();
        let agent = Agent::new(config(&server), tools.clone()).unwrap();
        let mut journal = witness(&tools, &server, None);
        let mut nobody = NobodyAnswers(Vec::new());
        let suspend = CancellationToken::new();
        let mut conv = Conversation::new();
        let driving = {
            let suspend = suspend.clone();
            async move {
                let cancel = CancellationToken::new();
                let mut io = TurnIo {
                    frontend: &mut nobody,
                    journal: &mut journal,
                    cancel: &cancel,
                    suspend: Some(&suspend),
                    audit: AuditContext::default(),
                };
                let driven = agent
                    .drive(&mut conv, TurnInput::Message("go".into()), &mut io)
                    .await;
                (driven, conv, nobody, journal, agent)
            }
        };
        let stop = async {
            // Suspended while it waits for an answer.
            tokio::time::sleep(Duration::from_millis(300)).await;
            suspend.cancel();
        };
        let ((driven, mut conv, nobody, journal, agent), ()) = tokio::join!(driving, stop);
        assert_eq!(driven.unwrap(), Driven::Suspended);
        assert_eq!(nobody.0.len(), 1);
        assert!(matches!(conv.state, State::AwaitingApproval { .. }));
        assert_eq!(journal.transitions.last().unwrap().0, "awaiting_approval");
        // A batch runs once every call in it is settled, so nothing ran.
        assert!(tools.calls().is_empty());
        // Taken up again, the question is asked again and the turn ends.
        let mut rec = Recorder::default();
        rec.answers.insert("write_file".into(), ApprovalAnswer::Yes);
        let mut journal = witness(&tools, &server, None);
        let driven = drive(
            &agent,
            &mut conv,
            TurnInput::Resume,
            &mut rec,
            &mut journal,
            None,
        )
        .await
        .unwrap();
        assert_eq!(driven, Driven::Finished(TurnOutcome::Answered));
        assert_eq!(rec.asked.len(), 1);
        assert_eq!(tools.calls().len(), 2);
    }

    /// A journal that takes `delay` over each record (and fails the first, with `fail`),
    /// writing what happened into a timeline shared with the frontend.
    struct SlowJournal {
        delay: Duration,
        fail: bool,
        server: Arc<ScriptedServer>,
        timeline: Arc<Mutex<Vec<String>>>,
    }

    #[async_trait]
    impl Journal for SlowJournal {
        async fn transition(&mut self, conv: &Conversation, _: &Cause) -> Result<(), JournalError> {
            tokio::time::sleep(self.delay).await;
            let requests = self.server.requests().len();
            let mut timeline = self.timeline.lock().unwrap();
            if std::mem::take(&mut self.fail) {
                timeline.push(format!("record failed, {requests} requests"));
                return Err(JournalError::Store("the disk is full".into()));
            }
            timeline.push(format!(
                "recorded {}, {requests} requests",
                conv.state.key()
            ));
            Ok(())
        }

        async fn audit(&mut self, _: AuditRecord) -> Result<(), JournalError> {
            Ok(())
        }
    }

    /// A frontend writing what it is shown into the timeline.
    struct Shown(Arc<Mutex<Vec<String>>>);

    #[async_trait]
    impl Frontend for Shown {
        fn event(&mut self, event: &AgentEvent) {
            let name = match event {
                AgentEvent::TurnStarted { .. } => "turn started".to_string(),
                AgentEvent::ModelRequest { .. } => "model asked".to_string(),
                AgentEvent::TextDelta { text } => format!("delta {text:?}"),
                other => format!("{other:?}").chars().take(20).collect(),
            };
            self.0.lock().unwrap().push(format!("shown {name}"));
        }
        async fn approve(&mut self, _: &ApprovalRequest) -> GivenAnswer {
            GivenAnswer::new(ApprovalAnswer::No, "the test")
        }
        fn persist(&mut self, _: &Conversation) {
            self.0.lock().unwrap().push("persisted".into());
        }
    }

    async fn drive_slowly(fail: bool) -> (Result<Driven, AgentError>, Vec<String>) {
        drive_slowly_with(fail, false).await
    }

    async fn drive_slowly_with(
        fail: bool,
        summarize: bool,
    ) -> (Result<Driven, AgentError>, Vec<String>) {
        let server = Arc::new(
            ScriptedServer::start(Script::new([Step::text("quick answer")]))
                .await
                .unwrap(),
        );
        let mut cfg = config(&server);
        cfg.context.summarize = summarize;
        let agent = Agent::new(cfg, FakeTools::new()).unwrap();
        let timeline = Arc::new(Mutex::new(Vec::new()));
        let mut journal = SlowJournal {
            delay: Duration::from_millis(300),
            fail,
            server: server.clone(),
            timeline: timeline.clone(),
        };
        let mut shown = Shown(timeline.clone());
        let cancel = CancellationToken::new();
        let mut io = TurnIo {
            frontend: &mut shown,
            journal: &mut journal,
            cancel: &cancel,
            suspend: None,
            audit: AuditContext::default(),
        };
        let mut conv = Conversation::new();
        let driven = agent
            .drive(&mut conv, TurnInput::Message("go".into()), &mut io)
            .await;
        let timeline = timeline.lock().unwrap().clone();
        (driven, timeline)
    }

    #[tokio::test]
    async fn the_model_is_asked_while_the_turn_start_is_recorded_and_nothing_shows_before() {
        let (driven, timeline) = drive_slowly(false).await;
        assert_eq!(driven.unwrap(), Driven::Finished(TurnOutcome::Answered));
        // The request went out during the slow record, yet the first thing shown (the turn
        // start, the persist, the request, the deltas) comes after the record.
        assert_eq!(
            timeline[0], "recorded awaiting_model, 1 requests",
            "{timeline:?}"
        );
        let shown: Vec<&str> = timeline[1..4].iter().map(String::as_str).collect();
        assert_eq!(
            shown,
            ["shown turn started", "persisted", "shown model asked"],
            "{timeline:?}"
        );
        assert!(
            timeline.iter().any(|t| t.starts_with("shown delta")),
            "{timeline:?}"
        );
    }

    #[tokio::test]
    async fn a_failed_record_of_the_turn_start_drops_the_answer_unseen() {
        let (driven, timeline) = drive_slowly(true).await;
        let e = driven.unwrap_err();
        assert!(matches!(e, AgentError::Journal(_)), "{e}");
        // The model may have answered meanwhile: nothing of it, nor of the turn, was shown.
        assert_eq!(timeline, ["record failed, 1 requests"], "{timeline:?}");
    }

    #[tokio::test]
    async fn with_context_summaries_on_the_turn_start_is_recorded_before_the_model_is_asked() {
        // A summary is a model call made while the request is built; the user's message must
        // not wait for it to be recorded.
        let (driven, timeline) = drive_slowly_with(false, true).await;
        assert_eq!(driven.unwrap(), Driven::Finished(TurnOutcome::Answered));
        assert_eq!(
            timeline[0], "recorded awaiting_model, 0 requests",
            "{timeline:?}"
        );
    }
}

/// A client's parameters go with every request of its turn, over `[llm]`'s, in the upstream's
/// spelling of the length limit; its tool choice only with the first request (and that
/// request's retry), so a forced call does not repeat forever.
#[tokio::test]
async fn a_clients_parameters_go_with_every_request_and_its_tool_choice_with_the_first() {
    let server = ScriptedServer::start(Script::new([
        Step::status(503, "overloaded"),
        Step::tool_calls(vec![call("sql_query", json!({"query": "select 1"}))]),
        Step::text("one"),
    ]))
    .await
    .unwrap();
    let mut c = config(&server);
    c.llm.temperature = Some(0.9);
    c.llm.max_tokens = Some(100);
    c.llm.max_tokens_field = cordon_agent::MaxTokensField::MaxCompletionTokens;
    let agent = Agent::new(c, FakeTools::new()).unwrap();
    let mut parameters = cordon_agent::TurnParameters::default();
    for (k, v) in [
        ("temperature", json!(0.1)),
        ("max_tokens", json!(4096)),
        ("seed", json!(7)),
        ("top_k", json!(40)),
        ("model", json!("sneaky")),
        ("messages", json!([])),
    ] {
        parameters.sent.insert(k.into(), v);
    }
    parameters.tool_choice = Some(cordon_agent::ToolChoice::Function("sql_query".into()));
    let image = json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}});
    let input = TurnInput::Request(Box::new(cordon_agent::TurnRequest {
        text: "count".into(),
        parts: Some(vec![
            json!({"type": "text", "text": "count"}),
            image.clone(),
        ]),
        parameters: parameters.clone(),
    }));
    let Run { conv, outcome, .. } = run_input(&agent, Conversation::new(), input, &[]).await;
    assert_eq!(outcome, TurnOutcome::Answered);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    let forced = json!({"type": "function", "function": {"name": "sql_query"}});
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.body["temperature"], json!(0.1), "request {i}");
        assert_eq!(r.body["max_completion_tokens"], json!(4096), "request {i}");
        assert!(r.body.get("max_tokens").is_none(), "request {i}");
        assert_eq!((&r.body["seed"], &r.body["top_k"]), (&json!(7), &json!(40)));
        assert_eq!(r.body["model"], "scripted", "never the client's");
        assert_eq!(r.messages()[1]["content"][1], image, "request {i}");
        let choice = r.body.get("tool_choice");
        assert_eq!(choice, (i < 2).then_some(&forced), "request {i}");
    }
    // The turn records what its client set, so a resumed turn sends the same.
    assert_eq!(conv.turns[0].parameters, parameters);
}

/// `none` offers no tools on the first request.
#[tokio::test]
async fn tool_choice_none_offers_no_tools() {
    let server = ScriptedServer::start(Script::new([Step::text("plain")]))
        .await
        .unwrap();
    let agent = Agent::new(config(&server), FakeTools::new()).unwrap();
    let input = TurnInput::Request(Box::new(cordon_agent::TurnRequest {
        text: "hi".into(),
        parts: None,
        parameters: cordon_agent::TurnParameters {
            tool_choice: Some(cordon_agent::ToolChoice::None),
            ..Default::default()
        },
    }));
    run_input(&agent, Conversation::new(), input, &[]).await;
    let req = &server.requests()[0];
    assert!(req.body.get("tools").is_none() && req.body.get("tool_choice").is_none());
}
