//! MCP over Streamable HTTP at `/mcp`: the same tools, approvals and audit log as `cordon mcp`
//! on stdio, behind the same token and `Host` check as the rest of the API, with browsers'
//! `Origin`s refused unless they are this server's own. An MCP session belongs to the token
//! that opened it: to any other it does not exist. A body over `[serve]
//! mcp_max_message_bytes` is refused before it is read whole. Each request carries the number
//! of the TCP connection it came over, to which a stateless client's `always` answers are
//! bound. On a store several hosts share (PostgreSQL), a session opened on one host is taken
//! up by any other its client's next request reaches (behind a load balancer): the session,
//! its owner and the labels its client holds are in the store.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use cordon_agent::ToolSource;
use cordon_mcp::rmcp::model::ProtocolVersion;
use cordon_mcp::rmcp::transport::common::http_header::HEADER_SESSION_ID;
use cordon_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use cordon_mcp::rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use cordon_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};
use cordon_mcp::{Authenticated, Connection, McpHost, McpOptions, StoreApprover};
use cordon_store::Store;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::admission::{Place, Places, Refused};
use crate::connections::ConnectionId;
use crate::error::{ApiError, with_retry_after};
use crate::host::HostOptions;

/// The `/mcp` endpoint: the SDK's service, and the checks in front of it.
#[derive(Clone)]
pub(crate) struct Endpoint {
    service: StreamableHttpService<cordon_mcp::McpServer, LocalSessionManager>,
    gate: Arc<Gate>,
}

/// What the checks in front of the SDK's service know.
struct Gate {
    /// The largest body taken.
    max_message: usize,
    /// The SDK's sessions, to forget the owners of those that ended.
    sessions: Arc<LocalSessionManager>,
    /// The token (by name) each open MCP session was opened with, by session id.
    owners: Mutex<HashMap<String, String>>,
    /// `initialize`s let through and not answered yet, by token: they count as open, so
    /// that many sent at once cannot all pass the bound before any session exists.
    opening: Mutex<HashMap<String, usize>>,
    /// Places for tool calls ([`crate::admission`], step 5).
    calls: Arc<Places>,
    /// Sessions open at once, and for one token (step 6).
    max_sessions: usize,
    max_sessions_per_token: usize,
    /// The store sessions are shared through with other hosts (PostgreSQL), if any.
    shared: Option<Store>,
}

/// MCP sessions kept in a store several hosts share, so that a client's request may reach a
/// host that did not open its session: the SDK takes the session up there, replaying the
/// client's `initialize` ([`Gate::owns`] checks first that the session is the caller's).
struct SharedSessions(Store);

#[cordon_agent::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let state = self.0.mcp_session_state(id).await?;
        Ok(state.and_then(|s| serde_json::from_str(&s).ok()))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(self
            .0
            .put_mcp_session(id, &serde_json::to_string(state)?)
            .await?)
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        Ok(self.0.delete_mcp_session(id).await?)
    }
}

/// The setting that caps `/mcp` bodies, as errors name it.
const MAX_MESSAGE_SETTING: &str = "[serve] mcp_max_message_bytes";

/// The `/mcp` endpoint, and its host (to [`McpHost::finish`] at shutdown). `stop` ends its
/// streams when the host stops.
pub(crate) fn service(
    store: &Store,
    source: Arc<dyn ToolSource>,
    options: &HostOptions,
    addr: SocketAddr,
    public: Option<&url::Url>,
    stop: CancellationToken,
    calls: Arc<Places>,
) -> (Endpoint, Arc<McpHost>) {
    let max_message = options.config.serve.mcp_max_message_bytes;
    let mcp = McpHost::new(
        source,
        Some(store.clone()),
        Arc::new(StoreApprover::new(store.clone())),
        McpOptions {
            approval: options.config.approval.clone(),
            policy: options.config.policy.clone(),
            approval_timeout: options.approval_timeout,
            keep_arguments: options.config.audit.keep_arguments,
            origin: "mcp-http".to_string(),
            result_budget_tokens: options.config.context.result_budget_tokens,
            ..McpOptions::default()
        },
    );
    // Cordon's own middleware checks `Host` (loopback only, like the rest of the API), so the
    // SDK's check, which knows only loopback names, is off.
    // A call's answer is plain JSON unless something (progress, a question) comes before
    // it: a client reads a JSON body to its end and keeps the connection for its next
    // request, where it drops a stream as soon as its answer came. The `always` answers of
    // stateless clients hold for the connection they came over, so they last as long as the
    // client keeps it.
    let mut config = StreamableHttpServerConfig::default();
    let shared = store.is_shared().then(|| store.clone());
    config.session_store = shared
        .clone()
        .map(|s| Arc::new(SharedSessions(s)) as Arc<dyn SessionStore>);
    let config = config
        .with_json_response(true)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(max_message)
        .with_cancellation_token(stop);
    let config = if addr.ip().is_loopback() {
        let port = addr.port();
        // And the origin of the public URL a proxy on this machine serves it at.
        let public = public.map(|u| u.origin().ascii_serialization());
        config.with_allowed_origins(
            [
                format!("http://127.0.0.1:{port}"),
                format!("http://localhost:{port}"),
                format!("http://[::1]:{port}"),
                format!("http://{addr}"),
            ]
            .into_iter()
            .chain(public),
        )
    } else {
        // Exposed on purpose: no web page may use it from a browser.
        config.enforce_origin_validation()
    };
    let host = mcp.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let service =
        StreamableHttpService::new(move || Ok(mcp.connection()), sessions.clone(), config);
    let gate = Arc::new(Gate {
        max_message,
        sessions,
        owners: Mutex::new(HashMap::new()),
        opening: Mutex::new(HashMap::new()),
        calls,
        max_sessions: options.config.serve.limits.max_mcp_sessions,
        max_sessions_per_token: options.config.serve.limits.max_mcp_sessions_per_token,
        shared,
    });
    (Endpoint { service, gate }, host)
}

/// The `/mcp` route, its requests checked by [`check_message`]; the caller puts the token
/// check in front (it must run first: sessions are bound to the token's name).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(endpoint: Endpoint) -> Router<S> {
    Router::new()
        .route_service("/mcp", endpoint.service)
        .route_layer(middleware::from_fn_with_state(endpoint.gate, check_message))
}

/// A JSON-RPC error response with HTTP status `status`.
fn rpc_error(
    status: StatusCode,
    id: Value,
    code: i64,
    message: String,
    data: Option<Value>,
) -> Response {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// An error of the host's (a refusal past a bound: `429`, `503`) as a JSON-RPC error, with
/// its `Retry-After`.
pub(crate) fn refusal(e: ApiError) -> Response {
    let response = rpc_error(
        e.status,
        Value::Null,
        -32000,
        e.message,
        Some(json!({"kind": e.kind, "retry_after_secs": e.retry_after_secs})),
    );
    with_retry_after(response, e.retry_after_secs)
}

/// `bytes` as people read sizes: `1 MiB`, `64 KiB`, `1000 bytes`.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// The answer to a body over the cap: `413`, naming the cap and the setting that raises it.
fn too_large(max: usize) -> Response {
    rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        Value::Null,
        -32600,
        format!(
            "Invalid Request: the message is larger than the {} /mcp takes; send less, or raise \
             {MAX_MESSAGE_SETTING} in cordon.toml",
            size(max)
        ),
        Some(json!({"limit_bytes": max, "setting": "serve.mcp_max_message_bytes"})),
    )
}

/// The answer to a session id that names no session of the caller's token, whether the
/// session is unknown, ended, or another token's: `404`, as the SDK answers an unknown
/// session, after which a client starts a new one. Alike in each case, so it does not tell
/// another token's session from none.
fn unknown_session() -> Response {
    rpc_error(
        StatusCode::NOT_FOUND,
        Value::Null,
        -32600,
        "Not Found: Session not found; start a new session (send initialize without \
         Mcp-Session-Id)"
            .to_string(),
        None,
    )
}

/// The body, up to `max` bytes; `Err` is the answer when it is larger or cannot be read. A
/// `Content-Length` over `max` is refused before anything is read.
async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Bytes, Response> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large(max));
    }
    let mut collected = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32600,
                format!("Invalid Request: the body could not be read ({e})"),
                None,
            )
        })?;
        if chunk.len() > max - collected.len() {
            return Err(too_large(max));
        }
        collected.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(collected))
}

/// Whether the request says its body is JSON, as the SDK judges it.
fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

impl Gate {
    /// Whether `session` is open and was opened with `token`: here, or on another host on a
    /// shared store, whose session the SDK then takes up here.
    async fn owns(&self, session: &str, token: Option<&str>) -> bool {
        let Some(token) = token else {
            return false;
        };
        let here = {
            let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            owners.get(session).is_some_and(|owner| owner == token)
        };
        if here {
            return true;
        }
        let Some(store) = &self.shared else {
            return false;
        };
        // Taken up here, it is held here: within this host's bounds, as one opened here.
        {
            let open = self.sessions.sessions.read().await.len();
            let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            let held = owners.values().filter(|owner| *owner == token).count();
            if open >= self.max_sessions || held >= self.max_sessions_per_token {
                return false;
            }
        }
        match store.mcp_session(session, token).await {
            Ok(Some(_)) => {
                self.owners
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(session.to_string(), token.to_string());
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!("cannot look for MCP session {session} in the store: {e}");
                false
            }
        }
    }

    /// Records that `token` opened `session` (in the shared store too, for other hosts),
    /// and forgets the owners of sessions that ended here (closed, or idle past the SDK's
    /// keep-alive).
    async fn opened(&self, session: String, token: String) {
        if let Some(store) = &self.shared
            && let Err(e) = store.own_mcp_session(&session, &token).await
        {
            tracing::warn!("MCP session {session} stays on this host only: {e}");
        }
        let open = self.sessions.sessions.read().await;
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.retain(|id, _| open.contains_key(id.as_str()));
        owners.insert(session, token);
    }

    /// Whether `token` may open one more session: `Err` is the answer when the host holds as
    /// many as it may, or the token does, counting `initialize`s under way; `Ok` holds a place
    /// for this one until it is answered. Sessions that ended are forgotten first.
    async fn may_open(self: &Arc<Self>, token: &str) -> Result<Opening, Response> {
        let open = self.sessions.sessions.read().await;
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let mut opening = self.opening.lock().unwrap_or_else(|e| e.into_inner());
        owners.retain(|id, _| open.contains_key(id.as_str()));
        let pending = opening.get(token).copied().unwrap_or(0);
        let held = owners.values().filter(|owner| *owner == token).count() + pending;
        let total = open.len() + opening.values().sum::<usize>();
        let why = if total >= self.max_sessions {
            format!(
                "{total} MCP sessions are open or opening, as many as [serve.limits] \
                 max_mcp_sessions allows"
            )
        } else if held >= self.max_sessions_per_token {
            format!(
                "token `{token}` holds {held} MCP sessions open, as many as [serve.limits] \
                 max_mcp_sessions_per_token allows; end one (DELETE /mcp) or let it lapse"
            )
        } else {
            *opening.entry(token.to_string()).or_default() += 1;
            return Ok(Opening {
                gate: self.clone(),
                token: token.to_string(),
            });
        };
        Err(refusal(ApiError::busy(Refused {
            message: format!("the host is busy: {why}; try again shortly"),
            retry_after_secs: 1,
        })))
    }

    fn closed(&self, session: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }
}

/// Checks a request before the MCP SDK sees it:
/// - the token must hold the scope `sessions` (MCP calls run tools as a session's turns do;
///   see [`crate::auth`]), else `403` naming it;
/// - an `Mcp-Session-Id` must name a session opened with the caller's token (else `404`, as
///   for an unknown session), so no token uses another's session, its `always` answers or
///   its questions;
/// - a body over the cap is refused (`413`), before it is read whole when it says its size;
/// - what the SDK would answer with plain text is answered with the JSON-RPC error for it: a
///   body that is not JSON (`-32700`), not a JSON-RPC message (`-32600`), or a protocol
///   version this server does not speak (`-32022`, with the versions it does);
/// - a session that ended is answered `204 No Content`, not the SDK's `202 Accepted`, which
///   SDKs (the Python one) report as a failure to end it;
/// - the request is told which connection it came over ([`Connection`]), unless a proxy
///   says it passed it on (`Forwarded`, `X-Forwarded-For`, `Via`): a proxy's connection may
///   carry many programs' requests, so no `always` is kept for it.
///
/// The SDK parses the body; it is parsed here again only to explain a body the SDK refused.
async fn check_message(
    State(gate): State<Arc<Gate>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(caller) = request.extensions().get::<crate::auth::Caller>()
        && let Err(e) = caller.require(crate::auth::Scopes::SESSIONS, "use MCP")
    {
        return refusal(e);
    }
    let proxied = ["forwarded", "x-forwarded-for", "via"]
        .iter()
        .any(|h| request.headers().contains_key(*h));
    if let Some(ConnectInfo(ConnectionId(number))) = request
        .extensions()
        .get::<ConnectInfo<ConnectionId>>()
        .copied()
        .filter(|_| !proxied)
    {
        request.extensions_mut().insert(Connection(number));
    }
    let version = request
        .headers()
        .get("mcp-protocol-version")
        .map(|v| v.to_str().unwrap_or("(not text)").to_string());
    if let Some(version) = version
        && !ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .any(|known| known.as_str() == version)
    {
        let supported: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .map(ProtocolVersion::as_str)
            .collect();
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32022,
            format!(
                "Unsupported protocol version `{}`; this server speaks {}",
                version.chars().take(40).collect::<String>(),
                supported.join(", ")
            ),
            Some(json!({"supported": supported, "requested": version})),
        );
    }
    let token = request
        .extensions()
        .get::<Authenticated>()
        .map(|Authenticated(name)| name.clone());
    let session = request
        .headers()
        .get(HEADER_SESSION_ID)
        .map(|v| v.to_str().unwrap_or_default().to_string());
    if let Some(session) = &session
        && !gate.owns(session, token.as_deref()).await
    {
        return unknown_session();
    }
    let method = request.method().clone();
    let (parts, body) = request.into_parts();
    let json = says_json(&parts.headers);
    let (forwarded, bytes) = if method == Method::POST {
        match read_body(&parts.headers, body, gate.max_message).await {
            Ok(bytes) => (Body::from(bytes.clone()), Some(bytes)),
            Err(refused) => return refused,
        }
    } else {
        (body, None)
    };
    let method_called = bytes.as_deref().and_then(called_method);
    let mut place = None;
    let mut _opening = None;
    if let Some(token) = &token {
        match method_called.as_deref() {
            Some("initialize") if session.is_none() => match gate.may_open(token).await {
                Ok(held) => _opening = Some(held),
                Err(refused) => return refused,
            },
            Some("tools/call") => match gate.calls.take(token).await {
                Ok(taken) => place = Some(taken),
                Err(refused) => return refusal(ApiError::busy(refused)),
            },
            _ => {}
        }
    }
    let mut response = next.run(Request::from_parts(parts, forwarded)).await;
    // A call's place is held until its answer has been sent (or the client went away).
    if let Some(place) = place {
        response = response.map(|body| {
            Body::new(Holding {
                body,
                _place: place,
            })
        });
    }
    // The SDK answers a JSON body it cannot take as a message with a plain-text 415.
    if let Some(bytes) = &bytes
        && json
        && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
        && let Err(refusal) = cordon_mcp::read_message(bytes)
    {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            refusal.id,
            refusal.code,
            refusal.message,
            None,
        );
    }
    match (&session, response.headers().get(HEADER_SESSION_ID), token) {
        (None, Some(opened), Some(token)) if response.status().is_success() => {
            if let Ok(opened) = opened.to_str() {
                gate.opened(opened.to_string(), token).await;
            }
        }
        (Some(session), _, _) if method == Method::DELETE && response.status().is_success() => {
            gate.closed(session);
            return StatusCode::NO_CONTENT.into_response();
        }
        _ => {}
    }
    response
}

/// A place held for an `initialize` while it is answered (see [`Gate::may_open`]); given
/// back once the session it opened is counted, or it opened none.
struct Opening {
    gate: Arc<Gate>,
    token: String,
}

impl Drop for Opening {
    fn drop(&mut self) {
        let mut opening = self.gate.opening.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = opening.get_mut(&self.token) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                opening.remove(&self.token);
            }
        }
    }
}

/// The JSON-RPC method a message calls, if it is one request (not a batch, not a response).
fn called_method(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Called {
        method: Option<String>,
    }
    serde_json::from_slice::<Called>(bytes).ok()?.method
}

/// A body that holds a place until it has been sent whole or dropped.
struct Holding {
    body: Body,
    _place: Place,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Admission;

    fn gate(max_sessions: usize, per_token: usize) -> Arc<Gate> {
        Arc::new(Gate {
            max_message: 1 << 20,
            sessions: Arc::new(LocalSessionManager::default()),
            owners: Mutex::new(HashMap::new()),
            opening: Mutex::new(HashMap::new()),
            calls: Admission::new(&Default::default()).tool_calls,
            max_sessions,
            max_sessions_per_token: per_token,
            shared: None,
        })
    }

    #[tokio::test]
    async fn initializes_under_way_count_against_the_bounds_until_answered() {
        let gate = gate(3, 2);
        // Two of `a`'s are under way: a third of `a`'s is past its share, `b`'s is not.
        let a1 = gate.may_open("a").await.unwrap();
        let _a2 = gate.may_open("a").await.unwrap();
        assert!(gate.may_open("a").await.is_err());
        let _b1 = gate.may_open("b").await.unwrap();
        // Three under way: the host's bound.
        let Err(refused) = gate.may_open("c").await else {
            panic!("a fourth session under way was let through");
        };
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        // One answered without opening a session gives its place back.
        drop(a1);
        let _c1 = gate.may_open("c").await.unwrap();
    }
}
