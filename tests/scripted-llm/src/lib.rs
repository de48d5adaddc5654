//! A scripted OpenAI-compatible chat server for tests and the demo.
//!
//! Real models are slow, non-deterministic and not installed on a build machine, so the
//! conversation engine is tested against this server instead. It serves
//! `POST /v1/chat/completions` from a [`Script`]: each request consumes the next [`Step`], which
//! can stream text in fragments, stream tool calls split across deltas by index, write Hermes-style
//! `<tool_call>` blocks into the text, or misbehave on purpose (HTTP 429 with `Retry-After`, 503,
//! a stream cut before `[DONE]`, a body that is not JSON). Every request is recorded so tests can
//! assert exactly what the client sent.
//!
//! For load (many conversations at once, where no order of requests can be scripted), a script
//! may also answer [`ByRole`]: once its steps are used up, every request gets the same answer
//! for the role of its last message (say, tool calls to a user's message and text after a tool
//! result), so each conversation runs the same turns whatever the others do.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Errors from loading a script or starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The script file could not be read.
    #[error("cannot read script {path}: {source}")]
    Read {
        /// The file that was asked for.
        path: String,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The script is not valid JSON for a [`Script`].
    #[error(
        "script {path} is not a valid script: {source} (expected {{\"steps\": [{{\"kind\": \"text\", \"text\": \"…\"}}, …]}})"
    )]
    Parse {
        /// The file that was parsed.
        path: String,
        /// The JSON error, with line and column.
        source: serde_json::Error,
    },
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address that was asked for.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
}

/// The responses the server gives, one step per request, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Served first to last; a request after the last step gets HTTP 500 "script exhausted",
    /// unless `by_role` answers it.
    pub steps: Vec<Step>,
    /// What every request gets once the steps are used up, chosen by the role of its last
    /// message; the script is then never exhausted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_role: Option<ByRole>,
}

/// Answers chosen by the role of a request's last message, the same for every request: what a
/// server needs to serve many conversations at once deterministically.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByRole {
    /// The answer when the last message is a tool result (`"role": "tool"`).
    pub tool: Step,
    /// The answer to anything else (a user's message, a system prompt alone).
    pub other: Step,
}

impl ByRole {
    /// The answer to a request (its JSON body): `tool` when its last message is a tool result,
    /// else `other`. Tool results written as text (the Hermes format) count as `other`.
    pub fn answer(&self, request: &Value) -> &Step {
        let last = request["messages"].as_array().and_then(|m| m.last());
        match last.and_then(|m| m["role"].as_str()) {
            Some("tool") => &self.tool,
            _ => &self.other,
        }
    }
}

impl Script {
    /// Builds a script from steps.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
            by_role: None,
        }
    }

    /// A script with no steps that answers every request by the role of its last message:
    /// `other` (e.g. tool calls) to a user's message, `tool` (e.g. text) after a tool result.
    pub fn by_role(other: Step, tool: Step) -> Self {
        Self {
            steps: Vec::new(),
            by_role: Some(ByRole { tool, other }),
        }
    }

    /// Reads a script from a JSON file, for the `scripted-llm` binary.
    pub fn from_file(path: &str) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_string(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| ScriptError::Parse {
            path: path.to_string(),
            source,
        })
    }
}

/// Token usage the server reports for a step, as OpenAI's `usage` object.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the request.
    pub prompt_tokens: u64,
    /// Tokens in the answer.
    pub completion_tokens: u64,
}

/// One tool call the scripted model makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The call id; `call_<n>_<i>` when omitted.
    #[serde(default)]
    pub id: Option<String>,
    /// Send the call without any id, as some servers do, so the client has to tell calls
    /// apart itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_id: bool,
    /// The tool name, exactly as the model would write it (may be wrong on purpose).
    pub name: String,
    /// The arguments: a JSON value is serialised; a string is sent verbatim (so tests can send
    /// arguments that are not JSON). In native tool calls, `{call_id}` in them is sent as the
    /// call's id, so the effects of calls the same step makes again and again (a [`ByRole`]
    /// answer under load) can be told apart outside the host.
    pub arguments: Value,
}

impl ScriptedCall {
    /// A call with JSON arguments and a generated id.
    pub fn new(name: &str, arguments: Value) -> Self {
        Self {
            id: None,
            no_id: false,
            name: name.to_string(),
            arguments,
        }
    }

    /// A call with a given id (which may repeat another call's, on purpose).
    pub fn with_id(id: &str, name: &str, arguments: Value) -> Self {
        Self {
            id: Some(id.to_string()),
            ..Self::new(name, arguments)
        }
    }

    /// A call sent without any id.
    pub fn without_id(name: &str, arguments: Value) -> Self {
        Self {
            no_id: true,
            ..Self::new(name, arguments)
        }
    }

    /// The arguments as sent, for the call whose id is `id`.
    fn arguments_text(&self, id: &str) -> String {
        let text = match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        text.replace("{call_id}", id)
    }
}

/// What the server does for one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A text answer, streamed `chunk` characters at a time with `delay_ms` between chunks.
    Text {
        /// The full answer.
        text: String,
        /// Characters per streamed delta (default 7).
        #[serde(default)]
        chunk: Option<usize>,
        /// Pause between deltas, to let tests cancel mid-stream.
        #[serde(default)]
        delay_ms: Option<u64>,
        /// Usage to report at the end of the stream.
        #[serde(default)]
        usage: Option<Usage>,
    },
    /// Native tool calls, each split across several deltas by `index`; with `interleave`, the
    /// fragments of different calls alternate.
    ToolCalls {
        /// Text the model says before calling.
        #[serde(default)]
        content: Option<String>,
        /// The calls, in order.
        calls: Vec<ScriptedCall>,
        /// Characters per argument fragment (default 5).
        #[serde(default)]
        chunk: Option<usize>,
        /// Alternate fragments of different calls.
        #[serde(default)]
        interleave: bool,
        /// Usage to report at the end of the stream.
        #[serde(default)]
        usage: Option<Usage>,
    },
    /// Hermes-style tool calls written into the text as `<tool_call>{…}</tool_call>` blocks.
    Hermes {
        /// Text before the calls.
        #[serde(default)]
        content: Option<String>,
        /// The calls, as `{"name": …, "arguments": …}` blocks.
        calls: Vec<ScriptedCall>,
    },
    /// An HTTP error status with a body, optionally with a `Retry-After` header (seconds).
    Status {
        /// The status code, e.g. 429, 503, 400.
        status: u16,
        /// The body, sent as an OpenAI error object `{"error": {"message": body}}`.
        message: String,
        /// Seconds for `Retry-After`.
        #[serde(default)]
        retry_after: Option<u64>,
    },
    /// Streams the start of `text`, then ends the response without `[DONE]`.
    Cut {
        /// The text that is partly streamed.
        text: String,
    },
    /// Answers 200 with a body that is not a chat completion.
    Garbage {
        /// The body.
        body: String,
    },
}

impl Step {
    /// A text answer streamed in 7-character deltas.
    pub fn text(text: &str) -> Self {
        Step::Text {
            text: text.to_string(),
            chunk: None,
            delay_ms: None,
            usage: None,
        }
    }

    /// A text answer streamed slowly, one delta every `delay_ms`.
    pub fn slow_text(text: &str, chunk: usize, delay_ms: u64) -> Self {
        Step::Text {
            text: text.to_string(),
            chunk: Some(chunk),
            delay_ms: Some(delay_ms),
            usage: None,
        }
    }

    /// Native tool calls, fragmented and not interleaved.
    pub fn tool_calls(calls: Vec<ScriptedCall>) -> Self {
        Step::ToolCalls {
            content: None,
            calls,
            chunk: None,
            interleave: false,
            usage: None,
        }
    }

    /// An HTTP error status.
    pub fn status(status: u16, message: &str) -> Self {
        Step::Status {
            status,
            message: message.to_string(),
            retry_after: None,
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The JSON body (or `{"unparsed": text}` when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The route, for requests other than chat completions (`/v1/completions`,
    /// `/v1/embeddings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The W3C `traceparent` header, if any: the trace a client carried on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl RecordedRequest {
    /// The `messages` array of the request.
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The names of the tools offered in the request.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Shared {
    steps: VecDeque<Step>,
    by_role: Option<ByRole>,
    requests: Vec<RecordedRequest>,
    served: usize,
}

type SharedState = Arc<Mutex<Shared>>;

/// A running scripted server; it stops when dropped.
pub struct ScriptedServer {
    addr: SocketAddr,
    state: SharedState,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ScriptedServer {
    /// Starts a server on an ephemeral port of 127.0.0.1.
    pub async fn start(script: Script) -> Result<Self, ScriptError> {
        Self::bind("127.0.0.1:0", script).await
    }

    /// Starts a server on `addr` (e.g. `127.0.0.1:8088`).
    pub async fn bind(addr: &str, script: Script) -> Result<Self, ScriptError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ScriptError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| ScriptError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let state: SharedState = Arc::new(Mutex::new(Shared {
            steps: script.steps.into(),
            by_role: script.by_role,
            ..Shared::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/models", get(models))
            .route("/v1/completions", post(text_completions))
            .route("/v1/embeddings", post(embeddings))
            .with_state(state.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self {
            addr: local,
            state,
            shutdown: Some(tx),
        })
    }

    /// The base URL clients use, ending in `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// Forgets the requests recorded so far ([`ScriptedServer::served`] still counts them): a
    /// long run that never reads them keeps its memory bounded.
    pub fn forget_requests(&self) {
        lock(&self.state).requests = Vec::new();
    }

    /// Steps not yet served (a script answering [`ByRole`] is never used up, whatever this
    /// says).
    pub fn remaining(&self) -> usize {
        lock(&self.state).steps.len()
    }

    /// Requests answered so far.
    pub fn served(&self) -> usize {
        lock(&self.state).served
    }

    /// Appends steps to the script while the server runs.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        lock(&self.state).steps.extend(steps);
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn lock(state: &SharedState) -> std::sync::MutexGuard<'_, Shared> {
    // A panic while holding the lock can only come from a bug in this file; the data is still
    // usable for assertions, so recover it rather than cascading the panic.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn traceparent(headers: &HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Records a request to a route other than chat completions; its parsed body.
fn record_other(state: &SharedState, path: &str, headers: &HeaderMap, body: &Bytes) -> Value {
    let text = String::from_utf8_lossy(body).to_string();
    let parsed: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({"unparsed": text}));
    lock(state).requests.push(RecordedRequest {
        body: parsed.clone(),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        path: Some(path.to_string()),
        traceparent: traceparent(headers),
    });
    parsed
}

/// `POST /v1/completions`: the prompt reversed, so a test sees its own prompt came through.
async fn text_completions(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = record_other(&state, "/v1/completions", &headers, &body);
    let prompt = parsed["prompt"].as_str().unwrap_or_default();
    let text: String = prompt.chars().rev().collect();
    axum::Json(json!({
        "id": "cmpl-scripted", "object": "text_completion", "created": 0,
        "model": parsed["model"],
        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
    .into_response()
}

/// `POST /v1/embeddings`: for each input, its length in characters and bytes.
async fn embeddings(State(state): State<SharedState>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = record_other(&state, "/v1/embeddings", &headers, &body);
    let inputs: Vec<String> = match &parsed["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(list) => list
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => Vec::new(),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"object": "embedding", "index": i, "embedding": [s.chars().count() as f64, s.len() as f64]}))
        .collect();
    axum::Json(json!({
        "object": "list", "data": data, "model": parsed["model"],
        "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()},
    }))
    .into_response()
}

async fn models() -> impl IntoResponse {
    axum::Json(json!({"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
}

async fn completions(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = String::from_utf8_lossy(&body).to_string();
    let parsed: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({"unparsed": text}));
    let stream = parsed["stream"].as_bool().unwrap_or(false);
    let model = parsed["model"].as_str().unwrap_or("scripted").to_string();
    let (step, n) = {
        let mut shared = lock(&state);
        shared.requests.push(RecordedRequest {
            body: parsed.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            path: None,
            traceparent: traceparent(&headers),
        });
        shared.served += 1;
        let step = shared.steps.pop_front().or_else(|| {
            let by_role = shared.by_role.as_ref()?;
            Some(by_role.answer(&parsed).clone())
        });
        (step, shared.served)
    };
    let Some(step) = step else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "script exhausted: the scripted model has no more responses",
            None,
        );
    };
    respond(step, stream, &model, n)
}

fn error_response(status: StatusCode, message: &str, retry_after: Option<u64>) -> Response {
    let mut response = (
        status,
        axum::Json(json!({"error": {"message": message, "type": "scripted_error"}})),
    )
        .into_response();
    if let Some(secs) = retry_after {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&secs.to_string()).unwrap_or(HeaderValue::from_static("1")),
        );
    }
    response
}

fn split(text: &str, chunk: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(chunk.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

fn chunk_json(id: &str, model: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

fn hermes_text(content: &Option<String>, calls: &[ScriptedCall]) -> String {
    let mut text = content.clone().unwrap_or_default();
    for call in calls {
        let arguments = match &call.arguments {
            Value::String(s) => Value::String(s.clone()),
            other => other.clone(),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "<tool_call>\n{}\n</tool_call>",
            json!({"name": call.name, "arguments": arguments})
        ));
    }
    text
}

struct Event {
    data: String,
    delay: Option<Duration>,
}

fn sse(events: Vec<Event>, done: bool) -> Response {
    let stream = futures::stream::unfold((events.into_iter(), done), |(mut it, done)| async move {
        match it.next() {
            Some(ev) => {
                if let Some(d) = ev.delay {
                    tokio::time::sleep(d).await;
                }
                let bytes = Bytes::from(format!("data: {}\n\n", ev.data));
                Some((Ok::<_, std::io::Error>(bytes), (it, done)))
            }
            None if done => Some((
                Ok(Bytes::from_static(b"data: [DONE]\n\n")),
                (Vec::new().into_iter(), false),
            )),
            None => None,
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn respond(step: Step, stream: bool, model: &str, n: usize) -> Response {
    let id = format!("chatcmpl-{n}");
    match step {
        Step::Status {
            status,
            message,
            retry_after,
        } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error_response(code, &message, retry_after)
        }
        Step::Garbage { body } => {
            let mut response = Response::new(Body::from(body));
            let kind = if stream {
                "text/event-stream"
            } else {
                "application/json"
            };
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
            response
        }
        Step::Cut { text } => {
            let half: String = text.chars().take(text.chars().count() / 2).collect();
            if !stream {
                // A non-streaming cut: a truncated JSON body.
                let full = json!({"id": id, "choices": [{"message": {"role": "assistant", "content": text}}]})
                    .to_string();
                let cut: String = full.chars().take(full.len() / 2).collect();
                return Response::new(Body::from(cut));
            }
            let mut events = vec![Event {
                data: chunk_json(&id, model, json!({"role": "assistant"}), None).to_string(),
                delay: None,
            }];
            for piece in split(&half, 4) {
                events.push(Event {
                    data: chunk_json(&id, model, json!({"content": piece}), None).to_string(),
                    delay: None,
                });
            }
            sse(events, false)
        }
        Step::Text {
            text,
            chunk,
            delay_ms,
            usage,
        } => {
            if !stream {
                return full_response(&id, model, Some(text), &[], &[], &[], usage);
            }
            let delay = delay_ms.map(Duration::from_millis);
            let mut events = vec![Event {
                data: chunk_json(
                    &id,
                    model,
                    json!({"role": "assistant", "content": ""}),
                    None,
                )
                .to_string(),
                delay: None,
            }];
            for piece in split(&text, chunk.unwrap_or(7)) {
                events.push(Event {
                    data: chunk_json(&id, model, json!({"content": piece}), None).to_string(),
                    delay,
                });
            }
            finish_stream(events, &id, model, "stop", usage)
        }
        Step::Hermes { content, calls } => {
            let text = hermes_text(&content, &calls);
            respond(
                Step::Text {
                    text,
                    chunk: Some(6),
                    delay_ms: None,
                    usage: None,
                },
                stream,
                model,
                n,
            )
        }
        Step::ToolCalls {
            content,
            calls,
            chunk,
            interleave,
            usage,
        } => {
            // A call sent without an id still has one for `{call_id}` in its arguments.
            let named: Vec<String> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| c.id.clone().unwrap_or_else(|| format!("call_{n}_{i}")))
                .collect();
            let ids: Vec<Option<String>> = calls
                .iter()
                .zip(&named)
                .map(|(c, id)| (!c.no_id).then(|| id.clone()))
                .collect();
            if !stream {
                return full_response(&id, model, content, &calls, &named, &ids, usage);
            }
            let mut events = vec![Event {
                data: chunk_json(&id, model, json!({"role": "assistant"}), None).to_string(),
                delay: None,
            }];
            if let Some(text) = &content {
                for piece in split(text, 7) {
                    events.push(Event {
                        data: chunk_json(&id, model, json!({"content": piece}), None).to_string(),
                        delay: None,
                    });
                }
            }
            // Per call: the id with the first half of the name, the rest of the name, then the
            // argument text in fragments.
            let mut per_call: Vec<Vec<Value>> = Vec::new();
            for (i, call) in calls.iter().enumerate() {
                let name: Vec<char> = call.name.chars().collect();
                let (a, b) = name.split_at(name.len() / 2);
                let mut first = json!({"index": i, "type": "function",
                    "function": {"name": a.iter().collect::<String>(), "arguments": ""}});
                if let Some(id) = &ids[i] {
                    first["id"] = json!(id);
                }
                let mut deltas = vec![first];
                if !b.is_empty() {
                    deltas.push(
                        json!({"index": i, "function": {"name": b.iter().collect::<String>()}}),
                    );
                }
                for piece in split(&call.arguments_text(&named[i]), chunk.unwrap_or(5)) {
                    deltas.push(json!({"index": i, "function": {"arguments": piece}}));
                }
                per_call.push(deltas);
            }
            let mut ordered = Vec::new();
            if interleave {
                let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
                for k in 0..longest {
                    for deltas in &per_call {
                        if let Some(d) = deltas.get(k) {
                            ordered.push(d.clone());
                        }
                    }
                }
            } else {
                ordered = per_call.into_iter().flatten().collect();
            }
            for d in ordered {
                events.push(Event {
                    data: chunk_json(&id, model, json!({"tool_calls": [d]}), None).to_string(),
                    delay: None,
                });
            }
            finish_stream(events, &id, model, "tool_calls", usage)
        }
    }
}

fn full_response(
    id: &str,
    model: &str,
    content: Option<String>,
    calls: &[ScriptedCall],
    named: &[String],
    ids: &[Option<String>],
    usage: Option<Usage>,
) -> Response {
    let tool_calls: Vec<Value> = calls
        .iter()
        .zip(named.iter().zip(ids))
        .map(|(c, (name, call_id))| {
            let mut call = json!({"type": "function",
                "function": {"name": c.name, "arguments": c.arguments_text(name)}});
            if let Some(id) = call_id {
                call["id"] = json!(id);
            }
            call
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": content});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut body = json!({
        "id": id, "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    });
    if let Some(u) = usage {
        body["usage"] = usage_json(u);
    }
    axum::Json(body).into_response()
}

/// Ends a streamed completion the way OpenAI-compatible servers do: a chunk with the finish
/// reason, then (when usage is scripted) a usage-only chunk, then `[DONE]`.
fn finish_stream(
    mut events: Vec<Event>,
    id: &str,
    model: &str,
    reason: &str,
    usage: Option<Usage>,
) -> Response {
    events.push(Event {
        data: chunk_json(id, model, json!({}), Some(reason)).to_string(),
        delay: None,
    });
    if let Some(u) = usage {
        events.push(Event {
            data: json!({"id": id, "object": "chat.completion.chunk", "model": model,
                "choices": [], "usage": usage_json(u)})
            .to_string(),
            delay: None,
        });
    }
    sse(events, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(step: &Step) -> &str {
        match step {
            Step::Text { text, .. } => text,
            Step::ToolCalls { calls, .. } => &calls[0].name,
            other => panic!("unexpected step {other:?}"),
        }
    }

    #[test]
    fn by_role_answers_tool_results_with_one_step_and_anything_else_with_the_other() {
        let by_role = ByRole {
            tool: Step::text("done"),
            other: Step::tool_calls(vec![ScriptedCall::new("look", json!({}))]),
        };
        let request = |messages: Value| json!({"model": "m", "messages": messages});
        let user =
            request(json!([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]));
        let tool = request(json!([
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ]));
        assert_eq!(text_of(by_role.answer(&user)), "look");
        assert_eq!(text_of(by_role.answer(&tool)), "done");
        // Whatever is not a tool result gets `other`, even a request without messages.
        assert_eq!(text_of(by_role.answer(&json!({}))), "look");
        assert_eq!(text_of(by_role.answer(&json!({"unparsed": "x"}))), "look");
    }

    #[test]
    fn a_script_without_by_role_reads_and_writes_as_before() {
        let script: Script =
            serde_json::from_str(r#"{"steps": [{"kind": "text", "text": "hi"}]}"#).unwrap();
        assert!(script.by_role.is_none());
        assert_eq!(
            serde_json::to_value(&script).unwrap(),
            json!({"steps": [{"kind": "text", "text": "hi", "chunk": null, "delay_ms": null, "usage": null}]})
        );
        let script: Script = serde_json::from_str(
            r#"{"steps": [], "by_role": {"tool": {"kind": "text", "text": "done"},
                "other": {"kind": "tool_calls", "calls": [{"name": "look", "arguments": {}}]}}}"#,
        )
        .unwrap();
        let by_role = script.by_role.unwrap();
        assert_eq!(text_of(&by_role.tool), "done");
        assert_eq!(text_of(&by_role.other), "look");
    }
}
