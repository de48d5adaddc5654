//! The HTTP API under `/api/v1` (JSON; turns stream as Server-Sent Events) and the console's
//! files at `/`. Every API route but `/api/v1/health` takes the bearer token.

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use cordon_agent::{AgentEvent, Conversation, TurnInput};
use cordon_store::{AuditQuery, NewSession, SessionSettings};
use serde::Deserialize;
#[cfg(feature = "fuzzing")]
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::auth::{Caller, Scopes};
pub(crate) use crate::body::Body;
use crate::console;
use crate::error::{ApiError, with_retry_after};
use crate::follow::{Pace, event_stream, sse_response};
use crate::live::{HostEvent, Published, SessionEvent};
pub(crate) use crate::state::{AppState, base_url, visible};

/// The largest request body taken (a message, settings, an answer).
const MAX_BODY: usize = 1 << 20;

pub(crate) fn router(state: AppState, mcp: crate::mcp::Endpoint) -> Router {
    let api = Router::new()
        .route("/sessions", get(list_sessions).post(create_session))
        .route("/sessions/{id}", get(get_session).delete(delete_session))
        .route("/sessions/{id}/messages", post(send_message))
        .route("/sessions/{id}/retry", post(retry_turn))
        .route("/sessions/{id}/cancel", post(cancel_turn))
        .route("/sessions/{id}/fork", post(fork_session))
        .route("/sessions/{id}/events", get(follow_session))
        .route("/approvals", get(crate::approvals::list))
        .route(
            "/approvals/{session}/{call_id}",
            post(crate::approvals::answer),
        )
        .route("/audit", get(query_audit))
        .route("/tools", get(list_tools))
        .route("/me", get(me))
        .route_layer(middleware::from_fn(crate::spans::traced))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let gateway = crate::gateway::router(state.host.clone())
        .route_layer(middleware::from_fn(crate::spans::traced))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let mcp = crate::mcp::routes(mcp)
        .route_layer(middleware::from_fn(crate::spans::traced))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let metrics = Router::new()
        .route("/metrics", get(crate::metrics::scrape))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/", get(console::page))
        .route("/console.js", get(console::script))
        .route("/console.css", get(console::style))
        .route("/api/v1/health", get(health))
        .route("/api/v1/sign-in", get(crate::sign_in::console_settings))
        .route("/api/v1/sign-in/token", post(crate::sign_in::console_token))
        .route(
            crate::sign_in::MCP_METADATA_PATH,
            get(crate::sign_in::mcp_metadata),
        )
        .nest("/api/v1", api)
        .merge(mcp)
        .merge(metrics)
        .merge(gateway)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/v1/") {
        return crate::gateway::no_route(&method, uri.path());
    }
    ApiError::not_found(
        "no such route; the API is under /api/v1, the OpenAI-compatible gateway under /v1 (see the README)",
    )
    .into_response()
}

/// Refuses requests whose `Host` is not one this server answers to when it listens on a
/// loopback address, so a web page cannot reach it through a name that resolves to 127.0.0.1
/// (DNS rebinding).
async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !state.allowed_hosts.is_empty() {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !state.allowed_hosts.iter().any(|a| a == host) {
            return ApiError {
                status: StatusCode::MISDIRECTED_REQUEST,
                kind: "bad_host",
                message: format!(
                    "this server answers to {} only",
                    state.allowed_hosts.join(", ")
                ),
                retry_after_secs: None,
            }
            .into_response();
        }
    }
    next.run(request).await
}

/// `e` as the client of `path` reads errors: the gateway's clients as OpenAI's, MCP's as
/// JSON-RPC, the API's as its own.
pub(crate) fn refusal(path: &str, e: ApiError) -> Response {
    if path.starts_with("/v1/") {
        crate::gateway::GatewayError::from(e).into_response()
    } else if path == "/mcp" {
        crate::mcp::refusal(e)
    } else {
        e.into_response()
    }
}

/// Who `presented` is: a token of the token file, or an access token of the identity provider
/// ([`crate::oidc`]); `Err(Some(why))` for an identity provider's token refused.
async fn caller_of(
    state: &AppState,
    presented: Option<&str>,
) -> Result<Caller, Option<crate::oidc::Refused>> {
    let presented = presented.ok_or(None)?;
    if let Some(caller) = state.tokens.caller(presented) {
        return Ok(caller);
    }
    match &state.oidc {
        Some(oidc) if crate::oidc::Oidc::looks_like_jwt(presented) => {
            oidc.caller(presented).await.map_err(|why| {
                tracing::info!("an identity provider's token was refused: {why}");
                Some(why)
            })
        }
        _ => Err(None),
    }
}

/// 401 for a missing or wrong token, saying nothing else; for an identity provider's token,
/// why it was refused; for `/mcp`, where its resource metadata is (RFC 9728), so MCP clients
/// that sign in by themselves find the identity provider.
async fn require_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        // The scheme's name is case-insensitive (RFC 9110).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match caller_of(&state, presented).await {
        Ok(caller) => {
            if let Err(refused) = state.host.admission.rate(&caller.name) {
                return refusal(request.uri().path(), ApiError::rate_limited(refused));
            }
            request
                .extensions_mut()
                .insert(cordon_mcp::Authenticated(caller.name.clone()));
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(_) if request.uri().path().starts_with("/v1/") => crate::gateway::unauthorized(),
        Err(refused) => {
            let mut challenge = "Bearer".to_string();
            if request.uri().path() == "/mcp" && state.oidc.is_some() {
                let metadata = format!(
                    "{}{}",
                    base_url(&state, request.headers()),
                    crate::sign_in::MCP_METADATA_PATH
                );
                challenge.push_str(&format!(" resource_metadata=\"{metadata}\""));
            }
            let body = match &refused {
                Some(why) => {
                    let quoted: String = why
                        .0
                        .chars()
                        .map(|c| {
                            if c == '"' || c == '\\' || !(' '..='~').contains(&c) {
                                '\''
                            } else {
                                c
                            }
                        })
                        .collect();
                    challenge.push_str(&format!(
                        "{} error=\"invalid_token\", error_description=\"{quoted}\"",
                        if challenge.contains('=') { "," } else { "" }
                    ));
                    format!("unauthorized: {why}\n")
                }
                None => "unauthorized\n".to_string(),
            };
            let mut response = (StatusCode::UNAUTHORIZED, body).into_response();
            if let Ok(value) = HeaderValue::from_str(&challenge) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            response
        }
    }
}

async fn health(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"status": if state.host.is_stopping() { "stopping" } else { "ok" }}))
}

/// Who the token is and what it may do: what the console shows and which buttons it offers.
async fn me(Extension(caller): Extension<Caller>) -> Json<Value> {
    Json(json!({"name": caller.name, "scopes": caller.scopes.names()}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    #[serde(default)]
    limit: Option<i64>,
}

async fn list_sessions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scopes::SESSIONS, "list sessions")?;
    let only = (!caller.scopes.has(Scopes::SESSIONS_ALL)).then_some(caller.name.as_str());
    let sessions = state
        .host
        .store()
        .sessions_created_by(params.limit.unwrap_or(200), only)
        .await?;
    let listed: Vec<Value> = sessions
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            v["running"] = json!(
                state
                    .host
                    .live_if_any(&s.id)
                    .is_some_and(|l| l.is_running())
            );
            v
        })
        .collect();
    Ok(Json(json!({"sessions": listed})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    #[serde(default)]
    id: Option<String>,
    #[serde(flatten)]
    settings: SessionSettings,
}

async fn create_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Body(body): Body<CreateSession>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require(Scopes::SESSIONS, "create sessions")?;
    // Settings that cannot make an engine are refused now, not at the first message.
    state.host.agent(&body.settings).await?;
    let info = state
        .host
        .store()
        .create_session(NewSession {
            id: body.id,
            origin: "serve".to_string(),
            parent: None,
            settings: body.settings,
            conversation: Conversation::new(),
            created_by: Some(caller.name),
        })
        .await?;
    Ok((StatusCode::CREATED, Json(json!(info))))
}

async fn get_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scopes::SESSIONS, "use sessions")?;
    let (info, conversation) = state.host.store().load(&id).await?;
    // Read whole, then checked: one read rather than two for what the console polls.
    if !caller.sees(info.created_by.as_deref()) {
        return Err(cordon_store::StoreError::UnknownSession { id }.into());
    }
    // A turn runs here, or on another host on the store, which holds its lease while it
    // drives it; its questions are in the store for every host to list.
    let running = state.host.live_if_any(&id).is_some_and(|l| l.is_running())
        || info
            .lease
            .as_ref()
            .is_some_and(|l| l.until_ms > cordon_core::now_ms());
    let pending: Vec<_> = if running {
        state
            .host
            .pending()
            .await
            .into_iter()
            .filter(|p| p.session == id)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Json(json!({
        "session": info,
        "running": running,
        "pending": pending,
        "messages": conversation.messages,
        "turns": conversation.turns,
        "notes": conversation.notes,
        "state": conversation.state,
        "usage": conversation.usage,
        "labels": {
            "held": conversation.labels.names(),
            "sources": conversation.labels.sources,
            "description": conversation.labels.describe(),
        },
    })))
}

async fn delete_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    visible(&state, &caller, &id).await?;
    if state.host.live_if_any(&id).is_some_and(|l| l.is_running()) {
        return Err(ApiError::conflict(format!(
            "a turn is running in session `{id}`; cancel it first"
        )));
    }
    state.host.store().delete_session(&id).await?;
    state.host.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fork {
    #[serde(default)]
    turns: Option<usize>,
    #[serde(default)]
    id: Option<String>,
}

async fn fork_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<Fork>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    visible(&state, &caller, &id).await?;
    let info = state
        .host
        .store()
        .fork(&id, body.turns, body.id, Some(caller.name))
        .await?;
    Ok((StatusCode::CREATED, Json(json!(info))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    text: String,
    /// Answer with the turn's result as one JSON document instead of a stream.
    #[serde(default = "yes")]
    stream: bool,
}

fn yes() -> bool {
    true
}

async fn send_message(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<Message>,
) -> Result<Response, ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the message is empty; send {\"text\": \"…\"}",
        ));
    }
    visible(&state, &caller, &id).await?;
    let events = state
        .host
        .start_turn(&id, TurnInput::Message(body.text), Some(caller.requester()))
        .await?;
    Ok(turn_response(events, body.stream, true, &id).await)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Retry {
    #[serde(default = "yes")]
    stream: bool,
}

async fn retry_turn(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<Retry>,
) -> Result<Response, ApiError> {
    visible(&state, &caller, &id).await?;
    let events = state
        .host
        .start_turn(&id, TurnInput::Retry, Some(caller.requester()))
        .await?;
    Ok(turn_response(events, body.stream, false, &id).await)
}

/// The turn as a stream of events ending with its end, or (`stream: false`) the events and the
/// outcome as one document once it ended.
///
/// For a new `message`, a stream's `200` is the acknowledgement that the message is kept, so
/// it is sent with the turn's `turn_started`, which comes once the turn's first transition
/// (the message) is in the store. Sent as soon as the turn was handed to its task, a host
/// killed before that transition had acknowledged a message no host would ever see
/// (`serve_crash`: 6 in 8,115 on SQLite, 15 in 7,204 on PostgreSQL). Events missed because
/// the client fell behind count as the start: every event of a turn comes after its first
/// transition is recorded, or ends the turn. A turn that ends before it started is answered
/// as without `stream`, and a message whose turn stopped before it started is answered as
/// perhaps not kept, so that the client checks and sends it again rather than waiting for a
/// turn that will not come. A retry keeps no message: its stream starts at once.
async fn turn_response(
    mut events: broadcast::Receiver<Arc<Published>>,
    stream: bool,
    message: bool,
    id: &str,
) -> Response {
    if stream && !message {
        return sse_response(event_stream(events, true, Pace::EachEvent));
    }
    let mut all = Vec::new();
    let mut started = false;
    loop {
        let missed = match events.recv().await {
            Ok(event) => {
                started |= matches!(
                    event.event,
                    SessionEvent::Agent(AgentEvent::TurnStarted { .. })
                );
                let end = event.event.ends_turn();
                all.push(event);
                if end {
                    break;
                }
                None
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                started = true;
                Some(n)
            }
            Err(broadcast::error::RecvError::Closed) => break,
        };
        if stream && started {
            let mut before: Vec<Result<axum::body::Bytes, std::convert::Infallible>> =
                all.iter().map(|e| Ok(e.frame().clone())).collect();
            before.extend(missed.map(|n| Ok(crate::follow::lagged(n))));
            let rest = event_stream(events, true, Pace::EachEvent);
            return sse_response(futures::StreamExt::chain(
                futures::stream::iter(before),
                rest,
            ));
        }
    }
    let events: Vec<&SessionEvent> = all.iter().map(|e| &e.event).collect();
    let (outcome, answer) = match events.last() {
        Some(SessionEvent::Agent(AgentEvent::TurnFinished {
            outcome, answer, ..
        })) => (json!(outcome), json!(answer)),
        // Stopped before its message was recorded (the store failed at the first write):
        // nothing will take the turn up.
        Some(SessionEvent::Host(HostEvent::TurnStopped { reason })) if message && !started => {
            return not_recorded(id, reason, &events);
        }
        // The turn stopped without an answer (the store failed, the host is stopping, another
        // host took the session): not a success. It goes on by itself; the client follows
        // the session for its end rather than sending the message again.
        Some(SessionEvent::Host(HostEvent::TurnStopped { reason })) => {
            return stopped(
                id,
                reason,
                json!({"type": "turn_stopped", "reason": reason}),
                &events,
            );
        }
        _ if message && !started => {
            return not_recorded(id, "the turn's events ended before it started", &events);
        }
        _ => {
            return stopped(
                id,
                "the turn's events ended before the turn did",
                Value::Null,
                &events,
            );
        }
    };
    Json(json!({"outcome": outcome, "answer": answer, "events": events})).into_response()
}

/// `503` with `Retry-After` for a message whose turn stopped before it started: the message
/// may not have been recorded (a write whose answer was lost may have been).
fn not_recorded(id: &str, reason: &str, events: &[&SessionEvent]) -> Response {
    let body = json!({
        "error": {
            "kind": "not_recorded",
            "message": format!(
                "the message may not have been recorded: {reason}; read the session (GET \
                 /api/v1/sessions/{id}) and send the message again if it is not there"
            ),
        },
        "events": events,
    });
    unavailable(body)
}

/// `503` with `Retry-After` for a turn that stopped without its end: the error, and what
/// the turn did before it stopped.
fn stopped(id: &str, reason: &str, outcome: Value, events: &[&SessionEvent]) -> Response {
    let body = json!({
        "error": {
            "kind": "turn_stopped",
            "message": format!(
                "the turn stopped before its end: {reason}; follow it at GET \
                 /api/v1/sessions/{id}/events, or read the session once it is idle"
            ),
        },
        "outcome": outcome,
        "events": events,
    });
    unavailable(body)
}

/// `503` with `body`, to be tried again in a few seconds.
fn unavailable(body: Value) -> Response {
    with_retry_after(
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response(),
        Some(5),
    )
}

async fn follow_session(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    visible(&state, &caller, &id).await?;
    // A turn another host drives streams its events there: the request is passed on to it
    // (on a shared store, once), and its events come back through this host.
    let here = state.host.live_if_any(&id).is_some_and(|l| l.is_running());
    if !here && let Some(url) = crate::forward::driving_host(&state.host, &id, &headers).await {
        let path = format!("/api/v1/sessions/{id}/events");
        let passed = crate::forward::Passed {
            method: axum::http::Method::GET,
            path: &path,
            headers: &headers,
            keep: &["authorization", "accept", "last-event-id"],
            body: axum::body::Bytes::new(),
        };
        return crate::forward::forward(&state.host, &url, passed)
            .await
            .map_err(ApiError::unavailable);
    }
    let events = state.host.follow(&id);
    // The stream ends when the host stops, so shutting down never waits for followers.
    let stopping = state.host.stopping.clone();
    let stream = event_stream(events, false, Pace::Follower);
    let stream = futures::StreamExt::take_until(stream, async move { stopping.cancelled().await });
    Ok(sse_response(stream))
}

async fn cancel_turn(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let info = visible(&state, &caller, &id).await?;
    if let Some(live) = state.host.live_if_any(&id).filter(|l| l.is_running()) {
        return live.cancel().map(|()| StatusCode::ACCEPTED);
    }
    // Another host drives the turn (it holds the lease): it is asked to cancel it.
    let store = state.host.store();
    match info.lease {
        Some(lease) if lease.until_ms > cordon_core::now_ms() && lease.holder != store.holder() => {
            if store.announce_cancel(&id).await? {
                return Ok(StatusCode::ACCEPTED);
            }
            Err(ApiError::conflict(format!(
                "the turn of session `{id}` runs in {}, which this host cannot reach; cancel \
                 it there",
                lease.holder
            )))
        }
        _ => Err(ApiError::conflict(format!(
            "no turn is running in session `{id}`"
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditParams {
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

/// A time as the API and the CLI take it: milliseconds since the epoch, an RFC 3339 time
/// (`2026-11-26T10:00:00Z`), or a duration ago (`90s`, `10m`, `2h`, `3d`). Nothing the client
/// writes is added or subtracted unchecked: a duration too long to count back from now is an
/// error, not an overflow.
pub fn parse_since(text: &str, now_ms: i64) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        // humantime reads years up to 9999, whose milliseconds fit an i64.
        return t
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .ok_or_else(|| format!("`{text}` is before 1970"));
    }
    let too_long = || {
        format!(
            "`{text}` is too long ago to count back from now; give a shorter duration (such as \
             2h or 30days) or a time such as 2026-11-26T10:00:00Z"
        )
    };
    match humantime::parse_duration(text) {
        Ok(d) => i64::try_from(d.as_millis())
            .ok()
            .and_then(|ago| now_ms.checked_sub(ago))
            .ok_or_else(too_long),
        Err(humantime::DurationError::NumberOverflow) => Err(too_long()),
        Err(_) => Err(format!(
            "`{text}` is not a time: give milliseconds since 1970, a time such as \
             2026-11-26T10:00:00Z, or how long ago, such as 10m or 2h"
        )),
    }
}

async fn query_audit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<AuditParams>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scopes::AUDIT, "read the audit log")?;
    // Without `audit:all`, only the records of the caller's own turns (rule 5).
    let requested_by = (!caller.scopes.has(Scopes::AUDIT_ALL)).then(|| caller.name.clone());
    let since_ms = params
        .since
        .as_deref()
        .map(|s| parse_since(s, cordon_core::now_ms()))
        .transpose()
        .map_err(ApiError::bad_request)?;
    if let Some(kind) = &params.kind
        && kind != "tool_call"
        && kind != "home_change"
    {
        return Err(ApiError::bad_request(format!(
            "`{kind}` is not a kind of record; use tool_call or home_change"
        )));
    }
    let records = state
        .host
        .store()
        .audit(&AuditQuery {
            session: params.session,
            tool: params.tool,
            since_ms,
            kind: params.kind,
            after_id: params.after,
            limit: params.limit,
            requested_by,
            decided_by: None,
        })
        .await?;
    Ok(Json(json!({"records": records})))
}

async fn list_tools(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let agent = state.host.agent(&SessionSettings::default()).await?;
    let rules = agent.tool_rules();
    let tools: Vec<Value> = agent
        .tool_policies(&Conversation::new())
        .into_iter()
        .map(|(spec, decision)| {
            json!({
                "name": spec.name,
                "plugin": spec.plugin,
                "tool": spec.tool,
                "description": spec.description,
                "grants": spec.grants,
                "policy": decision.policy,
                "reason": decision.reason,
                // The per-call rules that may apply to its calls, in the order written.
                "rules": rules.get(&spec.identity()).cloned().unwrap_or_default(),
            })
        })
        .collect();
    Ok(Json(json!({"tools": tools})))
}

/// The fuzz targets' way in: `data` as each request body and query string the API takes.
#[cfg(feature = "fuzzing")]
pub(crate) fn read_requests(data: &[u8]) {
    fn body<T: DeserializeOwned>(data: &[u8]) {
        let _ = serde_json::from_slice::<T>(data);
    }
    body::<CreateSession>(data);
    body::<Fork>(data);
    body::<Message>(data);
    body::<Retry>(data);
    body::<crate::approvals::Answer>(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_since(text, 1_764_000_000_000);
    if let Ok(uri) = format!("/?{text}").parse::<axum::http::Uri>() {
        let _ = Query::<ListParams>::try_from_uri(&uri);
        if let Ok(Query(audit)) = Query::<AuditParams>::try_from_uri(&uri)
            && let Some(since) = audit.since
        {
            let _ = parse_since(&since, 1_764_000_000_000);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(event: SessionEvent) -> Arc<Published> {
        Arc::new(Published::new(event))
    }

    fn started() -> Arc<Published> {
        published(SessionEvent::Agent(AgentEvent::TurnStarted {
            turn: 0,
            input: "hi".into(),
        }))
    }

    fn stopped_event() -> Arc<Published> {
        published(SessionEvent::Host(HostEvent::TurnStopped {
            reason: "the store failed".into(),
        }))
    }

    async fn answer(events: &[Arc<Published>], capacity: usize, stream: bool) -> Response {
        let (tx, rx) = broadcast::channel(capacity);
        for e in events {
            tx.send(e.clone()).unwrap();
        }
        drop(tx);
        turn_response(rx, stream, true, "s").await
    }

    async fn error_kind(response: Response) -> (StatusCode, Value) {
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        (status, body["error"]["kind"].clone())
    }

    /// A message's stream is answered `200` with its `turn_started` (or once events were
    /// missed, which all come after it); a turn stopped before it is answered `503`, saying
    /// the message may not be kept, with or without `stream`.
    #[tokio::test]
    async fn a_message_is_acknowledged_only_once_its_turn_started() {
        let is_stream = |r: &Response| {
            r.status() == StatusCode::OK && r.headers()[header::CONTENT_TYPE] == "text/event-stream"
        };
        assert!(is_stream(
            &answer(&[started(), stopped_event()], 8, true).await
        ));
        // Capacity 1: the receiver missed `turn_started` and sees only the stop.
        assert!(is_stream(
            &answer(&[started(), stopped_event()], 1, true).await
        ));
        for stream in [true, false] {
            let (status, kind) = error_kind(answer(&[stopped_event()], 8, stream).await).await;
            assert_eq!(
                (status, kind),
                (StatusCode::SERVICE_UNAVAILABLE, json!("not_recorded"))
            );
            let (status, kind) = error_kind(answer(&[], 8, stream).await).await;
            assert_eq!(
                (status, kind),
                (StatusCode::SERVICE_UNAVAILABLE, json!("not_recorded"))
            );
        }
        // Stopped after it started: the turn goes on, the client follows it.
        let (status, kind) =
            error_kind(answer(&[started(), stopped_event()], 8, false).await).await;
        assert_eq!(
            (status, kind),
            (StatusCode::SERVICE_UNAVAILABLE, json!("turn_stopped"))
        );
    }

    #[test]
    fn since_takes_times_and_durations() {
        assert_eq!(parse_since("1000", 5000), Ok(1000));
        assert_eq!(parse_since("2s", 5000), Ok(3000));
        assert_eq!(parse_since("1970-01-01T00:00:01Z", 0), Ok(1000));
        let e = parse_since("yesterday", 0).unwrap_err();
        assert!(e.contains("10m or 2h"), "{e}");
    }

    /// The review's panic: hours whose milliseconds do not fit an i64.
    #[test]
    fn since_never_overflows() {
        let now = 1_800_000_000_000;
        for huge in [
            "2562047788016h",
            "18446744073709551615s",
            "99999999999999999999999999h",
            "584942417355years",
        ] {
            let e = parse_since(huge, now).unwrap_err();
            assert!(e.contains("too long ago"), "{huge}: {e}");
        }
        // The longest duration that fits is counted back without wrapping, whatever now is.
        assert_eq!(
            parse_since("9223372036854775s", 0),
            Ok(-9_223_372_036_854_775_000)
        );
        assert!(parse_since("9223372036854775s", -808).is_ok());
        assert!(parse_since("9223372036854775s", -809).is_err());
        for edge in [i64::MAX, i64::MIN, 0, -1] {
            assert_eq!(parse_since(&edge.to_string(), now), Ok(edge));
        }
        assert!(parse_since("", now).unwrap_err().contains("not a time"));
        assert!(parse_since("-5m", now).unwrap_err().contains("not a time"));
        assert!(parse_since("1969-12-31T23:59:59Z", now).is_err());
        assert_eq!(
            parse_since("9999-12-31T23:59:59Z", now),
            Ok(253_402_300_799_000)
        );
    }
}
