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

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Json, body::Bytes};
use cordon_agent::{AgentEvent, Conversation, Message, SessionSettings, TurnInput, TurnOutcome};
use cordon_store::NewSession;
use futures::Stream;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::api::AppState;
use crate::error::ApiError;
use crate::host::Host;
use crate::live::{HostEvent, SessionEvent};

/// The header that names a request's session, in requests and responses.
pub const SESSION_HEADER: &str = "x-cordon-session";

/// How many histories the host remembers the session of; past that the oldest are forgotten
/// (their clients' next request starts a new session from the history it sends).
const REMEMBERED_HISTORIES: usize = 10_000;

/// Request fields taken. Any other field is refused with a 400 that names it, rather than
/// silently ignored: a client that sets `temperature` or `tools` expects them to act.
const TAKEN_FIELDS: &[&str] = &["model", "messages", "stream", "stream_options", "n", "user"];

/// An error as OpenAI's API reports it: `{"error": {"message", "type", "param", "code"}}`, so
/// clients' SDKs raise their usual exceptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<String>,
    message: String,
}

impl GatewayError {
    fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        GatewayError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: None,
            param: Some(param.into()),
            message: message.into(),
        }
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
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        (self.status, Json(error_body(&self))).into_response()
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A checked request.
#[derive(Debug)]
struct ChatRequest {
    /// The model as the client named it.
    model: String,
    /// The upstream model it stands for.
    upstream: String,
    /// Everything before the new user message.
    history: Vec<Said>,
    /// The new user message.
    message: String,
    stream: bool,
    include_usage: bool,
}

/// The digest of a conversation as a client sends it: the model and each message's role and
/// text, in order.
fn history_digest(model: &str, history: &[Said]) -> String {
    let list: Vec<Value> = history
        .iter()
        .map(|s| json!([s.role.name(), s.text]))
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
        let tools = refused
            .iter()
            .any(|k| matches!(*k, "tools" | "tool_choice" | "functions" | "function_call"));
        return Err(GatewayError::invalid(
            *first,
            if tools {
                format!(
                    "{} not supported by Cordon's gateway yet: it offers the installed tools to \
                     the model itself and runs them in its sandbox; leave them out",
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
    let mut said = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(GatewayError::invalid(at, "a message must be a JSON object"));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool" | "function") => {
                return Err(GatewayError::invalid(
                    format!("{at}.role"),
                    "tool results are not supported by Cordon's gateway yet: it runs the \
                     installed tools itself and keeps their results in the session",
                ));
            }
            other => {
                return Err(GatewayError::invalid(
                    format!("{at}.role"),
                    format!(
                        "the role {} is not one of system, developer, user, assistant",
                        other.map_or("(none)".to_string(), |r| format!("`{r}`"))
                    ),
                ));
            }
        };
        if m.get("tool_calls").is_some_and(|c| !c.is_null()) {
            return Err(GatewayError::invalid(
                format!("{at}.tool_calls"),
                "assistant messages with `tool_calls` are not supported by Cordon's gateway \
                 yet; send the assistant's text only",
            ));
        }
        let text = content_text(m.get("content").unwrap_or(&Value::Null), &at)?;
        said.push(Said { role, text });
    }
    let Some(Said {
        role: Role::User,
        text: message,
    }) = said.pop()
    else {
        return Err(GatewayError::invalid(
            "messages",
            "the last message must be the user's (`\"role\": \"user\"`): each request is one \
             turn that answers it",
        ));
    };
    if message.trim().is_empty() {
        return Err(GatewayError::invalid(
            format!("messages[{}].content", said.len()),
            "the user's message is empty",
        ));
    }
    Ok(ChatRequest {
        model,
        upstream: upstream.clone(),
        history: said,
        message,
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
    let host = &state.host;
    let session = match named {
        Some(id) => host.store().session(&id).await.map_err(ApiError::from)?.id,
        None => match state
            .histories
            .get(&history_digest(&chat.model, &chat.history))
        {
            Some(id) if host.store().session(&id).await.is_ok() => id,
            _ => new_session(host, &chat).await?,
        },
    };
    let events = host
        .start_turn(&session, TurnInput::Message(chat.message.clone()))
        .await?;
    let guard = CancelOnDrop {
        host: host.clone(),
        session: session.clone(),
        armed: true,
    };
    let id = format!("chatcmpl-{session}-{}", cordon_core::now_ms());
    let header = HeaderValue::from_str(&session).ok();
    let mut response = if chat.stream {
        stream_response(state.clone(), chat, events, guard, id).into_response()
    } else {
        whole_response(&state, chat, events, guard, id).await?
    };
    if let Some(value) = header {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
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
async fn new_session(host: &Arc<Host>, chat: &ChatRequest) -> Result<String, GatewayError> {
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
    host.agent(&settings).await?;
    let mut conversation = Conversation::new();
    for said in &chat.history {
        match said.role {
            Role::System => {}
            Role::User => conversation.messages.push(Message::User {
                content: said.text.clone(),
            }),
            Role::Assistant => conversation.messages.push(Message::Assistant {
                content: said.text.clone(),
                tool_calls: Vec::new(),
                partial: false,
            }),
        }
    }
    let info = host
        .store()
        .create_session(NewSession {
            id: None,
            origin: "gateway".to_string(),
            parent: None,
            settings,
            conversation,
        })
        .await
        .map_err(ApiError::from)?;
    Ok(info.id)
}

/// Cancels the session's turn when the client goes away before it ended (the response, or
/// the stream, is dropped): the running tool call is stopped too.
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

/// How a turn ended, for the client.
enum Ending {
    /// An answer (`finish_reason: "stop"`).
    Answer(String),
    /// No answer: the error to report.
    Error(GatewayError),
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
            }),
            TurnOutcome::Failed { error } => Ending::Error(GatewayError {
                status: StatusCode::BAD_GATEWAY,
                kind: "upstream_error",
                code: Some("upstream_failed"),
                param: None,
                message: format!("the turn failed: {error}"),
            }),
        }),
        SessionEvent::Host(HostEvent::TurnStopped { reason }) => {
            Some(Ending::Error(GatewayError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "service_unavailable",
                code: Some("turn_stopped"),
                param: None,
                message: format!("the turn stopped before it answered: {reason}"),
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

/// After an answer: the history the client will send next (with this exchange) belongs to
/// the same session.
fn remember_exchange(state: &AppState, chat: &ChatRequest, session: &str, answer: &str) {
    let mut history = chat.history.clone();
    history.push(Said {
        role: Role::User,
        text: chat.message.clone(),
    });
    history.push(Said {
        role: Role::Assistant,
        text: answer.to_string(),
    });
    state
        .histories
        .remember(history_digest(&chat.model, &history), session.to_string());
}

async fn whole_response(
    state: &AppState,
    chat: ChatRequest,
    mut events: broadcast::Receiver<Arc<SessionEvent>>,
    mut guard: CancelOnDrop,
    id: String,
) -> Result<Response, GatewayError> {
    let mut usage = cordon_agent::Usage::default();
    let end = loop {
        match events.recv().await {
            Ok(event) => {
                if let SessionEvent::Agent(AgentEvent::Usage { usage: u }) = &*event {
                    usage.add(*u);
                }
                if let Some(end) = ending(&event) {
                    break end;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => {
                break Ending::Error(GatewayError::from(ApiError::internal(
                    "the turn's events ended before the turn did",
                )));
            }
        }
    };
    guard.armed = false;
    let answer = match end {
        Ending::Answer(answer) => answer,
        Ending::Error(e) => return Err(e),
    };
    remember_exchange(state, &chat, &guard.session, &answer);
    Ok(Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created(),
        "model": chat.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer},
            "finish_reason": "stop",
        }],
        "usage": usage_json(&usage),
    }))
    .into_response())
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

/// Where a stream is.
struct Streaming {
    state: AppState,
    chat: ChatRequest,
    events: broadcast::Receiver<Arc<SessionEvent>>,
    guard: CancelOnDrop,
    id: String,
    usage: cordon_agent::Usage,
    /// Events still to send before reading more.
    queued: VecDeque<SseEvent>,
    started: bool,
    done: bool,
}

fn stream_response(
    state: AppState,
    chat: ChatRequest,
    events: broadcast::Receiver<Arc<SessionEvent>>,
    guard: CancelOnDrop,
    id: String,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let streaming = Streaming {
        state,
        chat,
        events,
        guard,
        id,
        usage: cordon_agent::Usage::default(),
        queued: VecDeque::new(),
        started: false,
        done: false,
    };
    let stream = futures::stream::unfold(streaming, |mut s| async move {
        loop {
            if let Some(event) = s.queued.pop_front() {
                return Some((Ok(event), s));
            }
            if s.done {
                return None;
            }
            if !s.started {
                s.started = true;
                s.queued.push_back(chunk(
                    &s.id,
                    &s.chat.model,
                    json!({"role": "assistant", "content": ""}),
                    None,
                ));
                continue;
            }
            let event = match s.events.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => {
                    s.done = true;
                    s.guard.armed = false;
                    let e = GatewayError::from(ApiError::internal(
                        "the turn's events ended before the turn did",
                    ));
                    s.queued
                        .push_back(SseEvent::default().data(error_body(&e).to_string()));
                    s.queued.push_back(SseEvent::default().data("[DONE]"));
                    continue;
                }
            };
            match &*event {
                SessionEvent::Agent(AgentEvent::TextDelta { text }) if !text.is_empty() => {
                    s.queued
                        .push_back(chunk(&s.id, &s.chat.model, json!({"content": text}), None));
                }
                SessionEvent::Agent(AgentEvent::Usage { usage }) => s.usage.add(*usage),
                _ => {}
            }
            if let Some(end) = ending(&event) {
                s.done = true;
                s.guard.armed = false;
                match end {
                    Ending::Answer(answer) => {
                        remember_exchange(&s.state, &s.chat, &s.guard.session, &answer);
                        s.queued
                            .push_back(chunk(&s.id, &s.chat.model, json!({}), Some("stop")));
                        if s.chat.include_usage {
                            s.queued.push_back(
                                SseEvent::default().data(
                                    json!({
                                        "id": s.id,
                                        "object": "chat.completion.chunk",
                                        "created": created(),
                                        "model": s.chat.model,
                                        "choices": [],
                                        "usage": usage_json(&s.usage),
                                    })
                                    .to_string(),
                                ),
                            );
                        }
                    }
                    Ending::Error(e) => {
                        s.queued
                            .push_back(SseEvent::default().data(error_body(&e).to_string()));
                    }
                }
                s.queued.push_back(SseEvent::default().data("[DONE]"));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
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
        assert_eq!(chat.message, "Sum 1 and 2");
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
        let e = refused(base(json!({"tools": []})));
        assert!(e.message.contains("offers the installed tools"), "{e:?}");
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
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = refused(base(json!({"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
        ]})));
        assert!(e.message.contains("`image_url` are not supported"), "{e:?}");
        let e = parse_request(b"{", &offered()).unwrap_err();
        assert!(e.message.contains("not JSON"), "{e:?}");
    }

    #[test]
    fn histories_are_told_apart_by_model_roles_and_text() {
        let said = |role, text: &str| Said {
            role,
            text: text.to_string(),
        };
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
