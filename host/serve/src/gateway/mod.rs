//! The OpenAI-compatible gateway: `POST /v1/chat/completions`, the Responses API
//! (`POST /v1/responses`, `GET /v1/responses/{id}`, see [`responses`]) and `GET /v1/models`.
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
//! to is the one named by its `X-Cordon-Session` header (honoured only for the token that
//! created the session), or else the one of the same requester that ends exactly at that
//! history (see [`histories`]); otherwise a new session starts from the history the client
//! sent. Every response names its session in `X-Cordon-Session`. Each turn records who asked
//! for it (the token, and the client's `user`), and so does the audit record of each of its
//! tool calls.
//!
//! Here: the routes, errors, and finding or creating a request's session. `request` reads and
//! checks a request, `turn` starts it, `client_tools` holds the tools a client runs itself, and
//! `response` turns the turn's events into the answer.

mod client_tools;
mod histories;
mod parameters;
mod passthrough;
mod request;
mod response;
mod responses;
mod turn;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, body::Bytes};
use cordon_agent::llm::LlmClient;
use cordon_agent::{Conversation, Message, SessionSettings, ToolCall, ToolChoice};
use cordon_core::Requester;
use cordon_store::NewSession;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::host::Host;

pub(crate) use client_tools::ClientCalls;
use histories::{Histories, created_by};
use request::{ChatRequest, Role, parse_request};
use response::{Reading, stream_response, whole_response};

/// The largest request body taken, as for the rest of the API.
pub(super) const MAX_BODY: usize = 1 << 20;

/// What the gateway's routes share.
#[derive(Clone)]
pub(crate) struct GatewayState {
    host: Arc<Host>,
    /// The sessions of the histories clients sent.
    histories: Arc<Histories>,
    /// The calls of clients' own tools that turns wait on.
    client_calls: Arc<ClientCalls>,
    /// The model server, for the routes forwarded to it (or why it cannot be asked).
    upstream: Arc<Result<LlmClient, String>>,
}

/// The gateway's routes, `/v1/chat/completions` and `/v1/models`, over `host`'s sessions.
pub(crate) fn router<S: Clone + Send + Sync + 'static>(host: Arc<Host>) -> Router<S> {
    let upstream = LlmClient::new(&host.options.config.llm).map_err(|e| e.to_string());
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::retrieve))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/v1/completions", post(passthrough::completions))
        .route("/v1/embeddings", post(passthrough::embeddings))
        .with_state(GatewayState {
            host,
            histories: Arc::default(),
            client_calls: Arc::default(),
            upstream: Arc::new(upstream),
        })
}

/// The header that names a request's session, in requests and responses.
pub const SESSION_HEADER: &str = "x-cordon-session";

/// The request header that asks for Cordon's tool activity beside the answer (`1` or `true`):
/// chunks with no choices and a `cordon` field holding the event, or (not streaming) a
/// `cordon.events` list. Clients that do not ask never see them.
pub const TOOL_EVENTS_HEADER: &str = "x-cordon-tool-events";

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
    /// The model server could not be asked: a 502.
    fn upstream(message: impl Into<String>) -> Self {
        GatewayError {
            status: StatusCode::BAD_GATEWAY,
            kind: "server_error",
            code: Some("upstream_unreachable"),
            param: None,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
}

impl From<ApiError> for GatewayError {
    fn from(e: ApiError) -> Self {
        let kind = match e.status {
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::FORBIDDEN => "permission_error",
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
            retry_after_secs: e.retry_after_secs,
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let response = (self.status, Json(error_body(&self))).into_response();
        crate::error::with_retry_after(response, self.retry_after_secs)
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

/// `GET /v1/models`.
pub(crate) async fn list_models(State(state): State<GatewayState>) -> Json<Value> {
    let config = &state.host.options.config;
    let data: Vec<Value> = config
        .gateway
        .offered(&config.llm.model)
        .into_iter()
        .map(|(name, _)| model_object(&name))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{id}`.
pub(crate) async fn get_model(
    State(state): State<GatewayState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, GatewayError> {
    let config = &state.host.options.config;
    let offered = config.gateway.offered(&config.llm.model);
    match offered.iter().find(|(name, _)| *name == id) {
        Some((name, _)) => Ok(Json(model_object(name))),
        None => Err(unknown_model(&id, &offered, None)),
    }
}

fn model_object(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "cordon"})
}

/// The 404 for a model this gateway does not offer, naming the ones it does.
pub(super) fn unknown_model(
    model: &str,
    offered: &[(String, String)],
    param: Option<&str>,
) -> GatewayError {
    GatewayError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        code: Some("model_not_found"),
        param: param.map(str::to_string),
        message: format!(
            "the model `{model}` does not exist here; the models are: {}",
            offered
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        retry_after_secs: None,
    }
}

/// The fuzz targets' way in: `data` as a Chat Completions and as a Responses request body,
/// with the operator's default bounds and one model offered.
#[cfg(feature = "fuzzing")]
pub(crate) fn read_requests(data: &[u8]) {
    let offered = vec![("scripted".to_string(), "scripted".to_string())];
    let bounds = cordon_agent::GatewayParameters::default();
    let _ = parse_request(data, &offered, &bounds);
    responses::read_request(data, &offered, &bounds);
}

/// The answer to a `/v1` request without a valid token: OpenAI's 401, saying where the key
/// comes from (the README says so too) and nothing about the tokens themselves.
pub(crate) fn unauthorized() -> Response {
    let mut response = GatewayError {
        status: StatusCode::UNAUTHORIZED,
        kind: "invalid_request_error",
        code: Some("invalid_api_key"),
        param: None,
        message: "missing or wrong API key: use a token of this `cordon serve` as the API key \
                  (`Authorization: Bearer …`); by default it is in `$CORDON_HOME/serve-token`"
            .into(),
        retry_after_secs: None,
    }
    .into_response();
    response.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer"),
    );
    response
}

/// The answer to a `/v1` route this gateway does not serve.
pub(crate) fn no_route(method: &axum::http::Method, path: &str) -> Response {
    GatewayError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        code: Some("unknown_url"),
        param: None,
        message: format!(
            "Cordon's gateway does not serve {method} {path}; it serves POST /v1/chat/completions, \
             POST /v1/responses, GET /v1/responses/{{id}}, GET /v1/models, GET /v1/models/{{id}}, \
             and forwards POST /v1/completions and POST /v1/embeddings to the model server"
        ),
        retry_after_secs: None,
    }
    .into_response()
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(state): State<GatewayState>,
    request: Request,
) -> Response {
    match complete(state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn complete(state: GatewayState, request: Request) -> Result<Response, GatewayError> {
    let named = named_session(request.headers())?;
    let token = caller(&request)?;
    let tool_events = wants_tool_events(request.headers());
    let headers = request.headers().clone();
    let body = read_body(request).await?;
    let config = &state.host.options.config;
    let offered = config.gateway.offered(&config.llm.model);
    let chat = parse_request(&body, &offered, &config.gateway.parameters)?;
    let requester = Requester {
        token,
        user: chat.user.clone(),
    };
    let host = state.host.clone();
    let known = match named {
        Some(id) => Some(own_session(&host, &id, &requester).await?),
        None => state.histories.find(&host, &requester, &chat).await,
    };
    // The results of the client's tools go to the turn waiting for them, on whichever host.
    if let (request::Input::ToolResults(_), Some(session)) = (&chat.input, &known)
        && !state.client_calls.waits(session)
        && let Some(url) = crate::forward::driving_host(&host, session, &headers).await
    {
        return pass_on(&host, &url, "/v1/chat/completions", &headers, body).await;
    }
    let (session, events) = turn::begin_turn(&state, &chat, &requester, known).await?;
    let guard = CancelOnDrop {
        host: host.clone(),
        session: session.clone(),
        armed: true,
    };
    let id = format!("chatcmpl-{session}-{}", cordon_core::now_ms());
    let reading = Reading::new(&state, chat, events, guard, id, tool_events, requester);
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

/// The headers a request passed on to another host keeps: who sends it, what it is, what it
/// asks for.
const PASSED_HEADERS: [&str; 5] = [
    "authorization",
    "content-type",
    "accept",
    SESSION_HEADER,
    TOOL_EVENTS_HEADER,
];

/// Passes the request (`path`, `headers`, `body`) on to the host at `url`, which drives its
/// session's turn (see [`crate::forward`]).
async fn pass_on(
    host: &Host,
    url: &str,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, GatewayError> {
    let passed = crate::forward::Passed {
        method: axum::http::Method::POST,
        path,
        headers,
        keep: &PASSED_HEADERS,
        body,
    };
    crate::forward::forward(host, url, passed)
        .await
        .map_err(|message| GatewayError {
            status: StatusCode::BAD_GATEWAY,
            kind: "service_unavailable",
            code: Some("host_unreachable"),
            param: None,
            message,
            retry_after_secs: Some(1),
        })
}

/// The name of the token a request came with: the token layer in front of the gateway puts
/// it there; without it, nobody. Every gateway request runs or reads a turn of the token's
/// own sessions, so it needs the scope `sessions`.
fn caller(request: &Request) -> Result<String, GatewayError> {
    match request.extensions().get::<Caller>() {
        Some(caller) => {
            caller.require(crate::auth::Scopes::SESSIONS, "use the gateway")?;
            Ok(caller.name.clone())
        }
        None => Err(GatewayError::from(ApiError::internal(
            "the request reached the gateway without its token's name",
        ))),
    }
}

/// Whether a request asks for Cordon's tool activity ([`TOOL_EVENTS_HEADER`]).
fn wants_tool_events(headers: &HeaderMap) -> bool {
    headers
        .get(TOOL_EVENTS_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches!(v.trim(), "1" | "true"))
}

async fn read_body(request: Request) -> Result<Bytes, GatewayError> {
    axum::body::to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|e| {
            GatewayError::invalid(
                "",
                format!("the body could not be read ({e}); at most 1 MiB"),
            )
        })
}

/// Refuses client tools named like a tool Cordon offers in the session (the model could not
/// tell them apart, and a call could reach the wrong one), and a `tool_choice` no tool of the
/// turn can satisfy.
async fn check_tools(
    host: &Arc<Host>,
    session: &str,
    chat: &ChatRequest,
) -> Result<(), GatewayError> {
    if !checks_tools(chat) {
        return Ok(());
    }
    let info = host
        .store()
        .session(session)
        .await
        .map_err(ApiError::from)?;
    check_tools_for(host, &info.settings, chat).await
}

fn checks_tools(chat: &ChatRequest) -> bool {
    !chat.client_tools.is_empty()
        || matches!(
            chat.parameters.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Function(_))
        )
}

/// [`check_tools`] for a session with `settings`.
async fn check_tools_for(
    host: &Arc<Host>,
    settings: &SessionSettings,
    chat: &ChatRequest,
) -> Result<(), GatewayError> {
    if !checks_tools(chat) {
        return Ok(());
    }
    let tools = &chat.client_tools;
    let agent = host.agent(settings).await?;
    let ours: Vec<String> = agent
        .offered_tools(&Conversation::new())
        .into_iter()
        .map(|s| s.name)
        .collect();
    if let Some(i) = tools.iter().position(|t| ours.contains(&t.name)) {
        return Err(GatewayError::invalid(
            format!("tools[{i}].function.name"),
            format!(
                "the tool `{}` clashes with a tool Cordon offers under that name; rename yours",
                tools[i].name
            ),
        )
        .with_code("tool_name_clash"));
    }
    let mut every: Vec<&str> = ours.iter().map(String::as_str).collect();
    every.extend(tools.iter().map(|t| t.name.as_str()));
    match &chat.parameters.tool_choice {
        Some(ToolChoice::Required) if every.is_empty() => Err(GatewayError::invalid(
            "tool_choice",
            "`tool_choice` is \"required\" but there is no tool to call: Cordon offers none \
             here and the request defines none",
        )),
        Some(ToolChoice::Function(name)) if !every.contains(&name.as_str()) => {
            Err(GatewayError::invalid(
                "tool_choice",
                format!(
                    "`tool_choice` names `{name}`, which is not a tool of this request; the tools \
                     are: {}",
                    if every.is_empty() {
                        "(none)".to_string()
                    } else {
                        every
                            .iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The session `id` if `requester`'s token created it. Any other session is unknown to this
/// token, whether it exists or not, so a token cannot continue, or learn of, another's.
async fn own_session(host: &Host, id: &str, requester: &Requester) -> Result<String, GatewayError> {
    match host.store().session(id).await {
        Ok(info) if created_by(&info, requester) => Ok(info.id),
        Ok(_) | Err(cordon_store::StoreError::UnknownSession { .. }) => Err(GatewayError {
            status: StatusCode::NOT_FOUND,
            kind: "not_found_error",
            code: Some("unknown_session"),
            param: Some(SESSION_HEADER.into()),
            message: format!(
                "no session `{id}` of this token: X-Cordon-Session names a session this token \
                 started through the gateway; leave the header out to start a new one"
            ),
            retry_after_secs: None,
        }),
        Err(e) => Err(ApiError::from(e).into()),
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
/// them, the client's system message as its system prompt; created by `requester`'s token.
fn new_session(chat: &ChatRequest, requester: &Requester) -> NewSession {
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
                parts: said.parts.clone(),
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
                    kept: None,
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
        created_by: Some(requester.token.clone()),
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
