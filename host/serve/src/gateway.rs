//! The OpenAI-compatible gateway: `POST /v1/chat/completions` and `GET /v1/models`.
//!
//! A client that speaks only the Chat Completions API points at `cordon serve` instead of its
//! model server and gets answers that used Cordon's sandboxed tools. Each request is one turn
//! of a Cordon session: the host offers the installed tools to the upstream model, runs the
//! calls it makes in the sandbox (asking where policy says so, through the approvals API and
//! the console), and answers with the final text, streamed as `chat.completion.chunk`s when
//! asked. Tool activity stays out of the content; it is in the session, the audit log and the
//! console.
//!
//! Clients usually send the whole history with every request. The session a request belongs
//! to is the one named by its `X-Cordon-Session` header, or else the one whose turns produced
//! exactly that history (kept by a digest of it while this host runs); otherwise a new session
//! starts from the history the client sent. Every response names its session in
//! `X-Cordon-Session`.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Json, body::Bytes};
use cordon_agent::{
    AgentEvent, CancellationToken, Content as ToolContent, Conversation, Message, SessionSettings,
    ToolCall, ToolFailure, ToolFailureKind, ToolHost, ToolSpec, TurnInput, TurnOutcome,
    async_trait,
};
use cordon_core::CallReport;
use cordon_store::NewSession;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, oneshot};

use crate::api::AppState;
use crate::error::ApiError;
use crate::host::{Host, ToolsForTurn};
use crate::live::{HostEvent, SessionEvent};

/// The header that names a request's session, in requests and responses.
pub const SESSION_HEADER: &str = "x-cordon-session";

/// The request header that asks for Cordon's tool activity beside the answer (`1` or `true`):
/// chunks with no choices and a `cordon` field holding the event, or (not streaming) a
/// `cordon.events` list. Clients that do not ask never see them.
pub const TOOL_EVENTS_HEADER: &str = "x-cordon-tool-events";

/// How many histories the host remembers the session of; past that the oldest are forgotten
/// (their clients' next request starts a new session from the history it sends).
const REMEMBERED_HISTORIES: usize = 10_000;

/// Request fields taken. Any other field is refused with a 400 that names it, rather than
/// silently ignored: a client that sets `temperature` expects it to act.
const TAKEN_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "n",
    "user",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
];

/// An error as OpenAI's API reports it: `{"error": {"message", "type", "param", "code"}}`, so
/// clients' SDKs raise their usual exceptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<String>,
    message: String,
    /// Seconds for a `Retry-After` header (the model server's, passed on).
    retry_after_secs: Option<u64>,
}

impl GatewayError {
    fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        GatewayError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: None,
            param: Some(param.into()),
            message: message.into(),
            retry_after_secs: None,
        }
    }
}

impl GatewayError {
    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
}

impl From<ApiError> for GatewayError {
    fn from(e: ApiError) -> Self {
        let kind = match e.status {
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::CONFLICT => "conflict_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
            _ => "server_error",
        };
        GatewayError {
            status: e.status,
            kind,
            code: Some(e.kind),
            param: None,
            message: e.message,
            retry_after_secs: None,
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(error_body(&self))).into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

fn error_body(e: &GatewayError) -> Value {
    json!({"error": {
        "message": e.message,
        "type": e.kind,
        "param": e.param,
        "code": e.code,
    }})
}

/// The sessions of histories clients sent, by digest, while this host runs.
#[derive(Default)]
pub(crate) struct Histories {
    inner: Mutex<(HashMap<String, String>, VecDeque<String>)>,
}

impl Histories {
    fn get(&self, digest: &str) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.0.get(digest).cloned()
    }

    fn remember(&self, digest: String, session: String) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *inner;
        if map.insert(digest.clone(), session).is_none() {
            order.push_back(digest);
        }
        while order.len() > REMEMBERED_HISTORIES {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

/// One message of a request, reduced to what a turn uses.
#[derive(Debug, Clone, PartialEq)]
struct Said {
    role: Role,
    text: String,
    /// An assistant message's tool calls.
    tool_calls: Vec<WireCall>,
    /// The call a tool message answers.
    tool_call_id: Option<String>,
}

impl Said {
    fn new(role: Role, text: impl Into<String>) -> Self {
        Said {
            role,
            text: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call as the Chat Completions API carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WireCall {
    id: String,
    name: String,
    arguments: String,
}

impl WireCall {
    fn to_json(&self, index: usize) -> Value {
        json!({
            "index": index,
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool the client defined and runs itself.
#[derive(Debug, Clone, PartialEq)]
struct ClientTool {
    name: String,
    description: String,
    parameters: Value,
}

/// What a request adds to its conversation.
#[derive(Debug, Clone, PartialEq)]
enum Input {
    /// A new user message: a new turn.
    Message(String),
    /// The results of the client's own tools that the last response asked for: the turn
    /// that asked goes on.
    ToolResults(Vec<(String, String)>),
}

/// A checked request.
#[derive(Debug)]
struct ChatRequest {
    /// The model as the client named it.
    model: String,
    /// The upstream model it stands for.
    upstream: String,
    /// Every message before `input`.
    history: Vec<Said>,
    /// Every message the client sent.
    sent: Vec<Said>,
    input: Input,
    client_tools: Vec<ClientTool>,
    stream: bool,
    include_usage: bool,
}

/// The digest of a conversation as a client sends it: the model and each message's role,
/// text, tool calls and the call it answers, in order.
fn history_digest(model: &str, history: &[Said]) -> String {
    let list: Vec<Value> = history
        .iter()
        .map(|s| {
            let calls: Vec<Value> = s
                .tool_calls
                .iter()
                .map(|c| json!([c.id, c.name, c.arguments]))
                .collect();
            json!([s.role.name(), s.text, calls, s.tool_call_id])
        })
        .collect();
    let text = json!([model, list]).to_string();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The text of a message's `content`: a string, or text parts.
fn content_text(content: &Value, at: &str) -> Result<String, GatewayError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(GatewayError::invalid(
                            format!("{at}.content[{i}]"),
                            format!(
                                "content parts of type {} are not supported; send text parts \
                                 (`{{\"type\": \"text\", \"text\": …}}`) or a string",
                                kind.map_or("(none)".to_string(), |k| format!("`{k}`"))
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(GatewayError::invalid(
            format!("{at}.content"),
            "`content` must be a string or a list of text parts",
        )),
    }
}

/// The tools a request defines (`tools`), checked as an upstream would check them.
fn client_tools(value: Option<&Value>) -> Result<Vec<ClientTool>, GatewayError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(GatewayError::invalid("tools", "`tools` must be a list")),
    };
    let mut tools: Vec<ClientTool> = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        if tool["type"] != "function" {
            return Err(GatewayError::invalid(
                format!("{at}.type"),
                "only tools of type `function` are supported",
            ));
        }
        let function = &tool["function"];
        let name = function["name"].as_str().unwrap_or_default();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(GatewayError::invalid(
                format!("{at}.function.name"),
                format!("the tool name `{name}` is invalid: 1 to 64 letters, digits, `_` or `-`"),
            ));
        }
        if tools.iter().any(|t| t.name == name) {
            return Err(GatewayError::invalid(
                format!("{at}.function.name"),
                format!("the tool `{name}` is defined twice"),
            ));
        }
        let parameters = match &function["parameters"] {
            Value::Null => json!({"type": "object", "properties": {}}),
            p @ Value::Object(_) => p.clone(),
            _ => {
                return Err(GatewayError::invalid(
                    format!("{at}.function.parameters"),
                    "`parameters` must be a JSON Schema object",
                ));
            }
        };
        if let Err(e) = cordon_core::CompiledSchema::compile(&parameters) {
            return Err(GatewayError::invalid(
                format!("{at}.function.parameters"),
                format!("`parameters` of `{name}` is not a valid JSON Schema: {e}"),
            ));
        }
        tools.push(ClientTool {
            name: name.to_string(),
            description: function["description"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            parameters,
        });
    }
    Ok(tools)
}

/// An assistant message's `tool_calls`.
fn wire_calls(value: Option<&Value>, at: &str) -> Result<Vec<WireCall>, GatewayError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(GatewayError::invalid(
                format!("{at}.tool_calls"),
                "`tool_calls` must be a list",
            ));
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, call)| {
            let (Some(id), Some(name)) = (call["id"].as_str(), call["function"]["name"].as_str())
            else {
                return Err(GatewayError::invalid(
                    format!("{at}.tool_calls[{i}]"),
                    "a tool call needs an `id` and a `function.name`",
                ));
            };
            Ok(WireCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: call["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            })
        })
        .collect()
}

fn parse_request(body: &[u8], offered: &[(String, String)]) -> Result<ChatRequest, GatewayError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        GatewayError::invalid(
            "",
            format!("the body is not JSON ({e}); send a JSON object"),
        )
    })?;
    let Value::Object(fields) = value else {
        return Err(GatewayError::invalid("", "the body must be a JSON object"));
    };
    let mut refused: Vec<&str> = fields
        .iter()
        .filter(|(k, v)| !TAKEN_FIELDS.contains(&k.as_str()) && !v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    refused.sort_unstable();
    if let Some(first) = refused.first() {
        let functions = refused
            .iter()
            .any(|k| matches!(*k, "functions" | "function_call"));
        return Err(GatewayError::invalid(
            *first,
            if functions {
                format!(
                    "{} not supported by Cordon's gateway: define your tools with `tools`",
                    names(&refused)
                )
            } else {
                format!(
                    "{} not supported by Cordon's gateway: sampling and output settings come \
                     from cordon.toml's [llm] section; leave them out",
                    names(&refused)
                )
            },
        ));
    }
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(GatewayError::invalid(
                "model",
                "`model` must be a model name",
            ));
        }
    };
    let Some((_, upstream)) = offered.iter().find(|(name, _)| *name == model) else {
        return Err(GatewayError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: Some("model_not_found"),
            param: Some("model".into()),
            message: format!(
                "the model `{model}` does not exist here; the models are: {}",
                offered
                    .iter()
                    .map(|(n, _)| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            retry_after_secs: None,
        });
    };
    match fields.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(GatewayError::invalid(
                "n",
                format!("`n` is {n}: Cordon's gateway gives one answer per request (n = 1)"),
            ));
        }
    }
    match fields.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(c)) if c == "auto" => {}
        Some(other) => {
            return Err(GatewayError::invalid(
                "tool_choice",
                format!(
                    "`tool_choice` {other} is not supported: the model chooses (`\"auto\"`), \
                     since it also has Cordon's tools"
                ),
            ));
        }
    }
    if fields.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        return Err(GatewayError::invalid(
            "parallel_tool_calls",
            "`parallel_tool_calls: false` is not supported: the model may call several tools \
             in one answer",
        ));
    }
    let client_tools = client_tools(fields.get("tools"))?;
    let stream = match fields.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(GatewayError::invalid(
                "stream",
                "`stream` must be a boolean",
            ));
        }
    };
    let include_usage = match fields.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => {
            if let Some(k) = o.keys().find(|k| *k != "include_usage") {
                return Err(GatewayError::invalid(
                    format!("stream_options.{k}"),
                    format!("`stream_options.{k}` is not supported; only `include_usage` is"),
                ));
            }
            o.get("include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        }
        Some(_) => {
            return Err(GatewayError::invalid(
                "stream_options",
                "`stream_options` must be an object",
            ));
        }
    };
    let Some(Value::Array(messages)) = fields.get("messages") else {
        return Err(GatewayError::invalid(
            "messages",
            "`messages` must be a list of messages",
        ));
    };
    let mut sent = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(GatewayError::invalid(at, "a message must be a JSON object"));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            other => {
                return Err(GatewayError::invalid(
                    format!("{at}.role"),
                    format!(
                        "the role {} is not one of system, developer, user, assistant, tool",
                        other.map_or("(none)".to_string(), |r| format!("`{r}`"))
                    ),
                ));
            }
        };
        let mut said = Said::new(
            role,
            content_text(m.get("content").unwrap_or(&Value::Null), &at)?,
        );
        match role {
            Role::Assistant => said.tool_calls = wire_calls(m.get("tool_calls"), &at)?,
            Role::Tool => match m.get("tool_call_id").and_then(Value::as_str) {
                Some(id) => said.tool_call_id = Some(id.to_string()),
                None => {
                    return Err(GatewayError::invalid(
                        format!("{at}.tool_call_id"),
                        "a tool message needs the `tool_call_id` of the call it answers",
                    ));
                }
            },
            _ => {}
        }
        sent.push(said);
    }
    let results = sent
        .iter()
        .rev()
        .take_while(|s| s.role == Role::Tool)
        .count();
    let (history, input) = if results > 0 {
        let history = sent[..sent.len() - results].to_vec();
        let asked = history
            .last()
            .map(|s| s.tool_calls.as_slice())
            .unwrap_or_default();
        let mut answers = Vec::with_capacity(results);
        for (i, said) in sent[sent.len() - results..].iter().enumerate() {
            let id = said.tool_call_id.clone().unwrap_or_default();
            if !asked.iter().any(|c| c.id == id) {
                return Err(GatewayError::invalid(
                    format!("messages[{}].tool_call_id", sent.len() - results + i),
                    format!(
                        "`{id}` is not a call of the assistant message before the tool results"
                    ),
                ));
            }
            answers.push((id, said.text.clone()));
        }
        (history, Input::ToolResults(answers))
    } else {
        match sent.last() {
            Some(Said {
                role: Role::User,
                text,
                ..
            }) if !text.trim().is_empty() => (
                sent[..sent.len() - 1].to_vec(),
                Input::Message(text.clone()),
            ),
            Some(Said {
                role: Role::User, ..
            }) => {
                return Err(GatewayError::invalid(
                    format!("messages[{}].content", sent.len() - 1),
                    "the user's message is empty",
                ));
            }
            _ => {
                return Err(GatewayError::invalid(
                    "messages",
                    "the last message must be the user's (`\"role\": \"user\"`), or the \
                     results of the tool calls the last answer asked for (`\"role\": \
                     \"tool\"`): each request is one turn, or the rest of one",
                ));
            }
        }
    };
    Ok(ChatRequest {
        model,
        upstream: upstream.clone(),
        history,
        sent,
        input,
        client_tools,
        stream,
        include_usage,
    })
}

fn names(fields: &[&str]) -> String {
    let quoted: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
    if quoted.len() == 1 {
        format!("{} is", quoted[0])
    } else {
        format!("{} are", quoted.join(", "))
    }
}

/// The calls of clients' own tools that turns wait on, by session: each waits for the result
/// the client sends with its next request.
#[derive(Default)]
pub(crate) struct ClientCalls {
    sessions: Mutex<HashMap<String, Vec<Expected>>>,
}

/// One call of a client's tool that the client was asked to run.
struct Expected {
    call: WireCall,
    arguments: Value,
    /// Whether the engine's call of the tool was matched to it.
    claimed: bool,
    /// Whether the client sent its result.
    answered: bool,
    result: Option<String>,
    waiter: Option<oneshot::Sender<String>>,
}

impl ClientCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Expected>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client is asked to run `calls` of session `session`. The engine may already be
    /// waiting for some of them (it runs a call as soon as the model made it, while the
    /// response telling the client is still on its way): those are matched by tool and
    /// arguments.
    fn expect(&self, session: &str, calls: &[WireCall]) {
        let mut sessions = self.lock();
        let expected = sessions.entry(session.to_string()).or_default();
        for call in calls {
            let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
            match expected.iter_mut().find(|e| {
                e.call.id.is_empty() && e.call.name == call.name && e.arguments == arguments
            }) {
                Some(waiting) => waiting.call.id = call.id.clone(),
                None => expected.push(Expected {
                    call: call.clone(),
                    arguments,
                    claimed: false,
                    answered: false,
                    result: None,
                    waiter: None,
                }),
            }
        }
    }

    /// The result of the engine's call of client tool `name` with `arguments`, once the client
    /// sends it: matched to the first call of that tool with those arguments not yet matched,
    /// or waiting for the client to be asked for it (see [`ClientCalls::expect`]).
    fn result_of(&self, session: &str, name: &str, arguments: &Value) -> oneshot::Receiver<String> {
        let mut sessions = self.lock();
        let expected = sessions.entry(session.to_string()).or_default();
        let (tx, rx) = oneshot::channel();
        match expected
            .iter_mut()
            .find(|e| !e.claimed && e.call.name == name && e.arguments == *arguments)
        {
            Some(e) => {
                e.claimed = true;
                match e.result.take() {
                    Some(result) => {
                        let _ = tx.send(result);
                    }
                    None => e.waiter = Some(tx),
                }
            }
            None => expected.push(Expected {
                call: WireCall {
                    id: String::new(),
                    name: name.to_string(),
                    arguments: String::new(),
                },
                arguments: arguments.clone(),
                claimed: true,
                answered: false,
                result: None,
                waiter: Some(tx),
            }),
        }
        rx
    }

    /// The client's results; every id must be a call it was asked to run and has not answered.
    fn supply(&self, session: &str, results: &[(String, String)]) -> Result<(), String> {
        let mut sessions = self.lock();
        let Some(expected) = sessions.get_mut(session) else {
            return Err(format!(
                "session `{session}` waits for no results of your tools (its turn ended, or \
                 the host restarted since it asked); send the next user message instead"
            ));
        };
        for (id, _) in results {
            if id.is_empty() || !expected.iter().any(|e| e.call.id == *id && !e.answered) {
                return Err(format!(
                    "session `{session}` does not wait for a result of the call `{id}`"
                ));
            }
        }
        for (id, result) in results {
            if let Some(e) = expected
                .iter_mut()
                .find(|e| e.call.id == *id && !e.answered)
            {
                e.answered = true;
                match e.waiter.take() {
                    Some(waiter) => {
                        let _ = waiter.send(result.clone());
                    }
                    None => e.result = Some(result.clone()),
                }
            }
        }
        Ok(())
    }

    /// The engine is done with its call of `name` with `arguments` (it has the result, gave up
    /// waiting, or was cancelled): its entry goes, so a turn the client never came back to
    /// leaves nothing behind.
    fn done(&self, session: &str, name: &str, arguments: &Value) {
        let mut sessions = self.lock();
        if let Some(expected) = sessions.get_mut(session) {
            if let Some(i) = expected
                .iter()
                .position(|e| e.claimed && e.call.name == name && e.arguments == *arguments)
            {
                expected.remove(i);
            }
            if expected.is_empty() {
                sessions.remove(session);
            }
        }
    }

    /// Forgets a session's calls (its turn ended).
    fn forget(&self, session: &str) {
        self.lock().remove(session);
    }
}

/// The tools plugin `client` stands for in approval rules and the audit log: the ones the
/// gateway's client defines and runs itself.
pub const CLIENT_PLUGIN: &str = "client";

/// A session's tools with the client's own added: a call of one of those waits for the
/// result the client sends (up to the approval timeout).
struct WithClientTools {
    inner: Arc<dyn ToolHost>,
    client: Vec<ToolSpec>,
    calls: Arc<ClientCalls>,
    session: String,
    timeout: Duration,
}

#[async_trait]
impl ToolHost for WithClientTools {
    fn tools(&self) -> Vec<ToolSpec> {
        let mut tools = self.inner.tools();
        tools.extend(self.client.iter().cloned());
        tools
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<ToolContent>, ToolFailure> {
        self.call_reported(name, arguments, cancel).await.0
    }

    async fn call_reported(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> (Result<Vec<ToolContent>, ToolFailure>, Option<CallReport>) {
        if !self.client.iter().any(|s| s.name == name) {
            return self.inner.call_reported(name, arguments, cancel).await;
        }
        let result = self.calls.result_of(&self.session, name, &arguments);
        let outcome = tokio::select! {
            result = result => result.map(|r| vec![ToolContent::Text(r)]).map_err(|_| {
                ToolFailure::new(ToolFailureKind::Failed, "the client's result was lost")
            }),
            () = cancel.cancelled() => Err(ToolFailure::new(
                ToolFailureKind::Cancelled,
                "cancelled while waiting for the client's result",
            )),
            () = tokio::time::sleep(self.timeout) => Err(ToolFailure::new(
                ToolFailureKind::Failed,
                format!(
                    "the client did not send the result of `{name}` within {} s",
                    self.timeout.as_secs()
                ),
            )),
        };
        self.calls.done(&self.session, name, &arguments);
        (outcome, None)
    }
}

/// How a session's tools change for a request that defines its own.
fn with_client_tools(
    state: &AppState,
    session: &str,
    tools: &[ClientTool],
) -> Option<ToolsForTurn> {
    if tools.is_empty() {
        return None;
    }
    let specs: Vec<ToolSpec> = tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.clone(),
            tool: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.parameters.clone(),
            output_schema: None,
            hints: Default::default(),
            plugin: CLIENT_PLUGIN.to_string(),
            grants: vec!["none: the client runs it".to_string()],
            can_change_anything: false,
            digest: String::new(),
            proven: Default::default(),
        })
        .collect();
    let calls = state.client_calls.clone();
    let session = session.to_string();
    let timeout = state.host.options.approval_timeout;
    Some(Arc::new(move |inner: Arc<dyn ToolHost>| {
        Arc::new(WithClientTools {
            inner,
            client: specs.clone(),
            calls: calls.clone(),
            session: session.clone(),
            timeout,
        }) as Arc<dyn ToolHost>
    }))
}

/// `GET /v1/models`.
pub(crate) async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let config = &state.host.options.config;
    let data: Vec<Value> = config
        .gateway
        .offered(&config.llm.model)
        .into_iter()
        .map(|(name, _)| json!({"id": name, "object": "model", "created": 0, "owned_by": "cordon"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(State(state): State<AppState>, request: Request) -> Response {
    match complete(state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn complete(state: AppState, request: Request) -> Result<Response, GatewayError> {
    let named = named_session(request.headers())?;
    let tool_events = request
        .headers()
        .get(TOOL_EVENTS_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches!(v.trim(), "1" | "true"));
    let body: Bytes = axum::body::to_bytes(request.into_body(), crate::api::MAX_BODY)
        .await
        .map_err(|e| {
            GatewayError::invalid(
                "",
                format!("the body could not be read ({e}); at most 1 MiB"),
            )
        })?;
    let config = &state.host.options.config;
    let offered = config.gateway.offered(&config.llm.model);
    let chat = parse_request(&body, &offered)?;
    let host = state.host.clone();
    let known = match named {
        Some(id) => Some(host.store().session(&id).await.map_err(ApiError::from)?.id),
        None => match state
            .histories
            .get(&history_digest(&chat.model, &chat.history))
        {
            Some(id) if host.store().session(&id).await.is_ok() => Some(id),
            _ => None,
        },
    };
    let (session, events) = match &chat.input {
        Input::Message(message) => {
            let input = TurnInput::Message(message.clone());
            match known {
                Some(session) => {
                    check_names(&host, &session, &chat.client_tools).await?;
                    let tools = with_client_tools(&state, &session, &chat.client_tools);
                    let events = host.start_turn_with(&session, input, tools).await?;
                    (session, events)
                }
                None => {
                    let new = new_session(&chat);
                    let id = new.id.clone().unwrap_or_default();
                    check_names_for(&host, &new.settings, &chat.client_tools).await?;
                    let tools = with_client_tools(&state, &id, &chat.client_tools);
                    host.start_new_turn(new, input, tools).await?
                }
            }
        }
        Input::ToolResults(results) => {
            let Some(session) = known else {
                return Err(GatewayError {
                    status: StatusCode::CONFLICT,
                    kind: "invalid_request_error",
                    code: Some("no_waiting_turn"),
                    param: Some("messages".into()),
                    message: "no turn waits for these tool results: the history does not \
                              continue a response of this host that asked for them; send the \
                              X-Cordon-Session header of that response, or the next user \
                              message"
                        .into(),
                    retry_after_secs: None,
                });
            };
            // Follow before the results go in, so no event of the rest of the turn is missed.
            let events = host.follow(&session);
            state
                .client_calls
                .supply(&session, results)
                .map_err(|message| GatewayError {
                    status: StatusCode::CONFLICT,
                    kind: "invalid_request_error",
                    code: Some("no_waiting_turn"),
                    param: Some("messages".into()),
                    message,
                    retry_after_secs: None,
                })?;
            (session, events)
        }
    };
    let guard = CancelOnDrop {
        host: host.clone(),
        session: session.clone(),
        armed: true,
    };
    let reading = Reading {
        state: state.clone(),
        id: format!("chatcmpl-{session}-{}", cordon_core::now_ms()),
        client_names: chat.client_tools.iter().map(|t| t.name.clone()).collect(),
        chat,
        events,
        guard,
        usage: cordon_agent::Usage::default(),
        said: String::new(),
        tool_events,
    };
    let header = HeaderValue::from_str(&session).ok();
    let mut response = if reading.chat.stream {
        stream_response(reading).await?
    } else {
        whole_response(reading).await?
    };
    if let Some(value) = header {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// Refuses client tools named like a tool Cordon offers in the session: the model could not
/// tell them apart, and a call could reach the wrong one.
async fn check_names(
    host: &Arc<Host>,
    session: &str,
    tools: &[ClientTool],
) -> Result<(), GatewayError> {
    if tools.is_empty() {
        return Ok(());
    }
    let info = host
        .store()
        .session(session)
        .await
        .map_err(ApiError::from)?;
    check_names_for(host, &info.settings, tools).await
}

/// [`check_names`] for a session with `settings`.
async fn check_names_for(
    host: &Arc<Host>,
    settings: &SessionSettings,
    tools: &[ClientTool],
) -> Result<(), GatewayError> {
    if tools.is_empty() {
        return Ok(());
    }
    let agent = host.agent(settings).await?;
    let ours: Vec<String> = agent
        .offered_tools(&Conversation::new())
        .into_iter()
        .map(|s| s.name)
        .collect();
    match tools.iter().position(|t| ours.contains(&t.name)) {
        Some(i) => Err(GatewayError::invalid(
            format!("tools[{i}].function.name"),
            format!(
                "the tool `{}` clashes with a tool Cordon offers under that name; rename yours",
                tools[i].name
            ),
        )
        .with_code("tool_name_clash")),
        None => Ok(()),
    }
}

fn named_session(headers: &HeaderMap) -> Result<Option<String>, GatewayError> {
    match headers.get(SESSION_HEADER) {
        None => Ok(None),
        Some(v) => match v.to_str() {
            Ok(id) if !id.trim().is_empty() => Ok(Some(id.trim().to_string())),
            _ => Err(GatewayError::invalid(
                SESSION_HEADER,
                "the X-Cordon-Session header must name a session",
            )),
        },
    }
}

/// A session for a history nobody has a session of: its earlier messages as the client sent
/// them, the client's system message as its system prompt.
fn new_session(chat: &ChatRequest) -> NewSession {
    let system: Vec<&str> = chat
        .history
        .iter()
        .filter(|s| s.role == Role::System)
        .map(|s| s.text.as_str())
        .collect();
    let settings = SessionSettings {
        model: Some(chat.upstream.clone()),
        system_prompt: (!system.is_empty()).then(|| system.join("\n\n")),
        tools: None,
    };
    let mut conversation = Conversation::new();
    let mut names: HashMap<&str, &str> = HashMap::new();
    for said in &chat.history {
        match said.role {
            Role::System => {}
            Role::User => conversation.messages.push(Message::User {
                content: said.text.clone(),
            }),
            Role::Assistant => {
                for call in &said.tool_calls {
                    names.insert(&call.id, &call.name);
                }
                conversation.messages.push(Message::Assistant {
                    content: said.text.clone(),
                    tool_calls: said
                        .tool_calls
                        .iter()
                        .map(|c| ToolCall {
                            id: c.id.clone(),
                            name: c.name.clone(),
                            arguments: c.arguments.clone(),
                        })
                        .collect(),
                    partial: false,
                });
            }
            Role::Tool => {
                let id = said.tool_call_id.clone().unwrap_or_default();
                conversation.messages.push(Message::Tool {
                    name: names.get(id.as_str()).unwrap_or(&"").to_string(),
                    tool_call_id: id,
                    content: said.text.clone(),
                    is_error: false,
                });
            }
        }
    }
    NewSession {
        // Named here, so the client's tools can be bound to the session before it exists.
        id: Some(format!(
            "s-{:012x}",
            rand::random::<u64>() & 0xffff_ffff_ffff
        )),
        origin: "gateway".to_string(),
        parent: None,
        settings,
        conversation,
    }
}

/// Cancels the session's turn when the client goes away before its response ended (the
/// response, or the stream, is dropped): the running tool call is stopped too.
struct CancelOnDrop {
    host: Arc<Host>,
    session: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed
            && let Some(live) = self.host.live_if_any(&self.session)
        {
            tracing::info!(session = %self.session, "the gateway's client went away; cancelling the turn");
            let _ = live.cancel();
        }
    }
}

/// How a response ends.
enum Ending {
    /// An answer (`finish_reason: "stop"`).
    Answer(String),
    /// The model called the client's tools (`finish_reason: "tool_calls"`); the turn waits
    /// for their results. With what the model said before calling.
    ClientCalls(String, Vec<WireCall>),
    /// No answer: the error to report.
    Error(GatewayError),
}

/// What a response reads from its turn's events.
enum Read {
    /// Text the model streamed.
    Text(String),
    /// The model called Cordon's tools: the turn goes on (runs them, may ask about them).
    CordonCalls,
    /// Tool activity the client asked to see: an engine event as JSON.
    Activity(Value),
    /// The end of the response.
    End(Ending),
}

/// A response reading its turn.
struct Reading {
    state: AppState,
    chat: ChatRequest,
    events: broadcast::Receiver<Arc<SessionEvent>>,
    guard: CancelOnDrop,
    id: String,
    client_names: Vec<String>,
    usage: cordon_agent::Usage,
    /// What the model said in its current answer.
    said: String,
    /// Whether the client asked for Cordon's tool activity ([`TOOL_EVENTS_HEADER`]).
    tool_events: bool,
}

impl Reading {
    /// The next thing the response shows, or `None` for an event it does not show.
    async fn next(&mut self) -> Read {
        loop {
            let event = match self.events.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => {
                    return self.end(Ending::Error(GatewayError::from(ApiError::internal(
                        "the turn's events ended before the turn did",
                    ))));
                }
            };
            match &*event {
                SessionEvent::Agent(AgentEvent::ModelRequest { .. }) => self.said.clear(),
                SessionEvent::Agent(AgentEvent::TextDelta { text }) if !text.is_empty() => {
                    self.said.push_str(text);
                    return Read::Text(text.clone());
                }
                SessionEvent::Agent(AgentEvent::Usage { usage }) => self.usage.add(*usage),
                SessionEvent::Agent(
                    e @ (AgentEvent::ToolStarted { .. }
                    | AgentEvent::ToolResult { .. }
                    | AgentEvent::ToolCallRejected { .. }
                    | AgentEvent::ApprovalNeeded { .. }
                    | AgentEvent::ApprovalGiven { .. }),
                ) if self.tool_events => return Read::Activity(json!(e)),
                SessionEvent::Agent(AgentEvent::ToolCallsRequested { calls }) => {
                    let theirs: Vec<WireCall> = calls
                        .iter()
                        .filter(|c| self.client_names.contains(&c.call.name))
                        // A call whose arguments are not a JSON object is refused by the
                        // engine; the model hears why and tries again.
                        .filter(|c| {
                            serde_json::from_str::<Value>(&c.call.arguments)
                                .is_ok_and(|v| v.is_object())
                        })
                        .map(|c| WireCall {
                            id: c.call.id.clone(),
                            name: c.call.name.clone(),
                            arguments: c.call.arguments.clone(),
                        })
                        .collect();
                    if !theirs.is_empty() {
                        self.state.client_calls.expect(&self.guard.session, &theirs);
                        let said = std::mem::take(&mut self.said);
                        return self.end(Ending::ClientCalls(said, theirs));
                    }
                    return Read::CordonCalls;
                }
                _ => {}
            }
            if let Some(end) = ending(&event) {
                self.state.client_calls.forget(&self.guard.session);
                return self.end(end);
            }
        }
    }

    /// The response ends: the turn goes on without it (a client's tool calls) or has ended,
    /// so the client leaving no longer cancels it; the history the client will send next is
    /// the session's.
    fn end(&mut self, ending: Ending) -> Read {
        self.guard.armed = false;
        let mut history = self.chat.sent.clone();
        match &ending {
            Ending::Answer(answer) => history.push(Said::new(Role::Assistant, answer.clone())),
            Ending::ClientCalls(said, calls) => history.push(Said {
                tool_calls: calls.clone(),
                ..Said::new(Role::Assistant, said.clone())
            }),
            Ending::Error(_) => return Read::End(ending),
        }
        self.state.histories.remember(
            history_digest(&self.chat.model, &history),
            self.guard.session.clone(),
        );
        Read::End(ending)
    }
}

fn ending(event: &SessionEvent) -> Option<Ending> {
    match event {
        SessionEvent::Agent(AgentEvent::TurnFinished {
            outcome, answer, ..
        }) => Some(match outcome {
            TurnOutcome::Answered | TurnOutcome::FinalAnswerAfterLimit => {
                Ending::Answer(answer.clone())
            }
            TurnOutcome::NoProgress { explanation } => Ending::Answer(if answer.is_empty() {
                explanation.clone()
            } else {
                answer.clone()
            }),
            TurnOutcome::Cancelled => Ending::Error(GatewayError {
                status: StatusCode::CONFLICT,
                kind: "cancelled",
                code: Some("turn_cancelled"),
                param: None,
                message: "the turn was cancelled (through the API or the console) before it \
                          answered"
                    .into(),
                retry_after_secs: None,
            }),
            TurnOutcome::Failed {
                error,
                upstream_status,
                retry_after_ms,
            } => {
                // As the model server would report it: a 429 as a 429 (with its Retry-After)
                // and a 5xx as that 5xx, after Cordon's own retries; anything else (a refused
                // request, no answer at all) is the gateway's upstream failing.
                let (status, kind) =
                    match upstream_status.and_then(|s| StatusCode::from_u16(s).ok()) {
                        Some(StatusCode::TOO_MANY_REQUESTS) => {
                            (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
                        }
                        Some(s) if s.is_server_error() => (s, "server_error"),
                        _ => (StatusCode::BAD_GATEWAY, "upstream_error"),
                    };
                Ending::Error(GatewayError {
                    status,
                    kind,
                    code: Some("upstream_failed"),
                    param: None,
                    message: format!("the turn failed: {error}"),
                    retry_after_secs: retry_after_ms.map(|ms| ms.div_ceil(1000)),
                })
            }
        }),
        SessionEvent::Host(HostEvent::TurnStopped { reason }) => {
            Some(Ending::Error(GatewayError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "service_unavailable",
                code: Some("turn_stopped"),
                param: None,
                message: format!("the turn stopped before it answered: {reason}"),
                retry_after_secs: None,
            }))
        }
        _ => None,
    }
}

fn usage_json(usage: &cordon_agent::Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

fn created() -> i64 {
    cordon_core::now_ms() / 1000
}

async fn whole_response(mut reading: Reading) -> Result<Response, GatewayError> {
    let mut activity = Vec::new();
    let (message, finish) = loop {
        match reading.next().await {
            Read::Text(_) | Read::CordonCalls => {}
            Read::Activity(event) => activity.push(event),
            Read::End(Ending::Answer(answer)) => {
                break (json!({"role": "assistant", "content": answer}), "stop");
            }
            Read::End(Ending::ClientCalls(said, calls)) => {
                let calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut call = c.to_json(i);
                        call.as_object_mut().map(|o| o.remove("index"));
                        call
                    })
                    .collect();
                let content = if said.is_empty() {
                    Value::Null
                } else {
                    json!(said)
                };
                break (
                    json!({"role": "assistant", "content": content, "tool_calls": calls}),
                    "tool_calls",
                );
            }
            Read::End(Ending::Error(e)) => return Err(e),
        }
    };
    let mut completion = json!({
        "id": reading.id,
        "object": "chat.completion",
        "created": created(),
        "model": reading.chat.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage_json(&reading.usage),
    });
    if reading.tool_events {
        completion["cordon"] = json!({"events": activity});
    }
    Ok(Json(completion).into_response())
}

/// One `chat.completion.chunk`.
fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> SseEvent {
    let mut choice = Map::new();
    choice.insert("index".into(), json!(0));
    choice.insert("delta".into(), delta);
    choice.insert("finish_reason".into(), json!(finish));
    SseEvent::default().data(
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created(),
            "model": model,
            "choices": [Value::Object(choice)],
        })
        .to_string(),
    )
}

/// The chunks that show `read`; true when the stream ends with them.
fn chunks_of(read: Read, reading: &Reading, queued: &mut VecDeque<SseEvent>) -> bool {
    let (id, model) = (&reading.id, &reading.chat.model);
    let end = match read {
        Read::Text(text) => {
            queued.push_back(chunk(id, model, json!({"content": text}), None));
            return false;
        }
        Read::CordonCalls => return false,
        Read::Activity(event) => {
            queued.push_back(
                SseEvent::default().data(
                    json!({
                        "id": id,
                        "object": "chat.completion.chunk",
                        "created": created(),
                        "model": model,
                        "choices": [],
                        "cordon": event,
                    })
                    .to_string(),
                ),
            );
            return false;
        }
        Read::End(end) => end,
    };
    match end {
        Ending::Answer(_) => queued.push_back(chunk(id, model, json!({}), Some("stop"))),
        Ending::ClientCalls(_, calls) => {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| c.to_json(i))
                .collect();
            queued.push_back(chunk(id, model, json!({"tool_calls": calls}), None));
            queued.push_back(chunk(id, model, json!({}), Some("tool_calls")));
        }
        Ending::Error(e) => {
            queued.push_back(SseEvent::default().data(error_body(&e).to_string()));
            queued.push_back(SseEvent::default().data("[DONE]"));
            return true;
        }
    }
    if reading.chat.include_usage {
        queued.push_back(
            SseEvent::default().data(
                json!({
                    "id": id,
                    "object": "chat.completion.chunk",
                    "created": created(),
                    "model": model,
                    "choices": [],
                    "usage": usage_json(&reading.usage),
                })
                .to_string(),
            ),
        );
    }
    queued.push_back(SseEvent::default().data("[DONE]"));
    true
}

/// The turn as `chat.completion.chunk`s: a first chunk with the role, the model's text as it
/// streams, a last chunk with the finish reason (and the tool calls, when the model called
/// the client's tools), the usage when asked for, then `[DONE]`.
///
/// The response starts once the model first answered (text, tool calls, or the turn's end),
/// so a turn that fails before that (a 429 the retries did not get past) is answered with the
/// status an upstream would give; while Cordon's tools run or wait for approval, the started
/// stream keeps the connection alive. An error after that comes as an `{"error": …}` event,
/// as OpenAI's API sends one.
async fn stream_response(mut reading: Reading) -> Result<Response, GatewayError> {
    let first = match reading.next().await {
        Read::End(Ending::Error(e)) => return Err(e),
        read => read,
    };
    let mut queued = VecDeque::from([chunk(
        &reading.id,
        &reading.chat.model,
        json!({"role": "assistant", "content": ""}),
        None,
    )]);
    let done = chunks_of(first, &reading, &mut queued);
    let stream = futures::stream::unfold(
        (reading, queued, done),
        |(mut reading, mut queued, mut done)| async move {
            loop {
                if let Some(event) = queued.pop_front() {
                    return Some((Ok::<_, Infallible>(event), (reading, queued, done)));
                }
                if done {
                    return None;
                }
                let read = reading.next().await;
                done = chunks_of(read, &reading, &mut queued);
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered() -> Vec<(String, String)> {
        vec![("gpt-x".to_string(), "upstream".to_string())]
    }

    fn refused(body: Value) -> GatewayError {
        parse_request(body.to_string().as_bytes(), &offered()).unwrap_err()
    }

    #[test]
    fn a_request_is_history_and_one_new_user_message() {
        let chat = parse_request(
            json!({
                "model": "gpt-x",
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": null,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                    {"role": "assistant", "content": "Hello."},
                    {"role": "user", "content": "Sum 1 and 2"},
                ],
            })
            .to_string()
            .as_bytes(),
            &offered(),
        )
        .unwrap();
        assert_eq!(chat.upstream, "upstream");
        assert_eq!(chat.input, Input::Message("Sum 1 and 2".into()));
        assert!(chat.stream && chat.include_usage);
        let roles: Vec<Role> = chat.history.iter().map(|s| s.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant]);
        assert_eq!(chat.history[1].text, "Hi");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let base = |extra: Value| {
            let mut body =
                json!({"model": "gpt-x", "messages": [{"role": "user", "content": "x"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let e = refused(base(json!({"temperature": 0.2, "seed": 1})));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("seed"));
        assert!(
            e.message
                .contains("`seed`, `temperature` are not supported"),
            "{e:?}"
        );
        let e = refused(base(json!({"functions": []})));
        assert!(
            e.message.contains("define your tools with `tools`"),
            "{e:?}"
        );
        let e = refused(base(json!({"tool_choice": "required"})));
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        let e = refused(base(
            json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
        ));
        assert!(e.message.contains("`a b` is invalid"), "{e:?}");
        let e = refused(base(json!({"n": 2})));
        assert!(e.message.contains("one answer per request"), "{e:?}");
        let e = refused(json!({"model": "nope", "messages": []}));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::NOT_FOUND, Some("model_not_found"))
        );
        assert!(e.message.contains("`gpt-x`"), "{e:?}");
        let e = refused(base(
            json!({"messages": [{"role": "assistant", "content": "x"}]}),
        ));
        assert!(
            e.message.contains("the last message must be the user's"),
            "{e:?}"
        );
        let e = refused(base(
            json!({"messages": [{"role": "tool", "content": "x"}]}),
        ));
        assert_eq!(e.param.as_deref(), Some("messages[0].tool_call_id"));
        let e = refused(base(json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "b", "content": "x"},
        ]})));
        assert!(
            e.message
                .contains("`b` is not a call of the assistant message"),
            "{e:?}"
        );
        let e = refused(base(json!({"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
        ]})));
        assert!(e.message.contains("`image_url` are not supported"), "{e:?}");
        let e = parse_request(b"{", &offered()).unwrap_err();
        assert!(e.message.contains("not JSON"), "{e:?}");
    }

    #[test]
    fn tool_results_continue_the_turn_that_asked_for_them() {
        let chat = parse_request(
            json!({
                "model": "gpt-x",
                "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
                "messages": [
                    {"role": "user", "content": "Look it up"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "found"},
                ],
            })
            .to_string()
            .as_bytes(),
            &offered(),
        )
        .unwrap();
        assert_eq!(
            chat.input,
            Input::ToolResults(vec![("call_1".into(), "found".into())])
        );
        assert_eq!(chat.history.len(), 2);
        assert_eq!(chat.client_tools[0].name, "lookup");
    }

    #[test]
    fn client_results_reach_the_call_they_answer_whichever_comes_first() {
        let calls = ClientCalls::default();
        let call = |id: &str, args: &str| WireCall {
            id: id.into(),
            name: "f".into(),
            arguments: args.into(),
        };
        calls.expect("s", &[call("1", r#"{"a":1}"#), call("2", r#"{"a":2}"#)]);
        // The result of call 2 comes before the engine runs it.
        calls.supply("s", &[("2".into(), "two".into())]).unwrap();
        let mut two = calls.result_of("s", "f", &json!({"a": 2}));
        assert_eq!(two.try_recv().unwrap(), "two");
        let mut one = calls.result_of("s", "f", &json!({"a": 1}));
        assert!(one.try_recv().is_err());
        calls.supply("s", &[("1".into(), "one".into())]).unwrap();
        assert_eq!(one.try_recv().unwrap(), "one");
        // Each call is answered once, and only calls that were asked for.
        assert!(calls.supply("s", &[("1".into(), "again".into())]).is_err());
        assert!(calls.supply("s", &[("9".into(), "x".into())]).is_err());
        // The engine may run a call before the client is asked for it.
        let mut three = calls.result_of("s", "f", &json!({"a": 3}));
        assert!(calls.supply("s", &[("3".into(), "x".into())]).is_err());
        calls.expect("s", &[call("3", r#"{"a": 3}"#)]);
        calls.supply("s", &[("3".into(), "three".into())]).unwrap();
        assert_eq!(three.try_recv().unwrap(), "three");
        calls.forget("s");
        assert!(calls.supply("s", &[("1".into(), "x".into())]).is_err());
        // The engine's finished calls leave nothing behind.
        calls.expect("t", &[call("1", "{}")]);
        let _one = calls.result_of("t", "f", &json!({}));
        calls.done("t", "f", &json!({}));
        assert!(calls.lock().is_empty());
    }

    #[test]
    fn histories_are_told_apart_by_model_roles_and_text() {
        let said = |role, text: &str| Said::new(role, text);
        let a = history_digest("m", &[said(Role::User, "hi")]);
        assert_eq!(a, history_digest("m", &[said(Role::User, "hi")]));
        assert_ne!(a, history_digest("n", &[said(Role::User, "hi")]));
        assert_ne!(a, history_digest("m", &[said(Role::Assistant, "hi")]));
        assert_ne!(a, history_digest("m", &[said(Role::User, "hi ")]));
        let histories = Histories::default();
        histories.remember(a.clone(), "s-1".into());
        assert_eq!(histories.get(&a).as_deref(), Some("s-1"));
    }
}
