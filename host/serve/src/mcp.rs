//! MCP over Streamable HTTP at `/mcp`: the same tools, approvals and audit log as `cordon mcp`
//! on stdio, behind the same token and `Host` check as the rest of the API, with browsers'
//! `Origin`s refused unless they are this server's own.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cordon_agent::ToolSource;
use cordon_mcp::rmcp::model::ProtocolVersion;
use cordon_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use cordon_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};
use cordon_mcp::{McpHost, McpOptions, StoreApprover};
use cordon_store::Store;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::host::HostOptions;

/// The `/mcp` endpoint's service, and its host (to [`McpHost::finish`] at shutdown). `stop`
/// ends its streams when the host stops.
pub(crate) fn service(
    store: &Store,
    source: Arc<dyn ToolSource>,
    options: &HostOptions,
    addr: SocketAddr,
    stop: CancellationToken,
) -> (
    StreamableHttpService<cordon_mcp::McpServer, LocalSessionManager>,
    Arc<McpHost>,
) {
    let mcp = McpHost::new(
        source,
        Some(store.clone()),
        Arc::new(StoreApprover::new(store.clone())),
        McpOptions {
            approval: options.config.approval.clone(),
            approval_timeout: options.approval_timeout,
            keep_arguments: options.config.audit.keep_arguments,
            origin: "mcp-http".to_string(),
            ..McpOptions::default()
        },
    );
    // Cordon's own middleware checks `Host` (loopback only, like the rest of the API), so the
    // SDK's check, which knows only loopback names, is off.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(stop);
    let config = if addr.ip().is_loopback() {
        let port = addr.port();
        config.with_allowed_origins([
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
            format!("http://{addr}"),
        ])
    } else {
        // Exposed on purpose: no web page may use it from a browser.
        config.enforce_origin_validation()
    };
    let host = mcp.clone();
    let service = StreamableHttpService::new(
        move || Ok(mcp.connection()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    (service, host)
}

/// The largest MCP message `/mcp` takes.
const MAX_MESSAGE: usize = 16 << 20;

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

/// Answers what the MCP SDK would answer with plain text (or not at all) with the JSON-RPC
/// error for it: a body that is not JSON (`-32700`), not a JSON-RPC message (`-32600`), too
/// large, or a protocol version this server does not speak (`-32022`, with the versions it
/// does).
pub(crate) async fn check_message(request: Request, next: Next) -> Response {
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
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_MESSAGE).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                -32600,
                format!(
                    "Invalid Request: the message is larger than {} MiB",
                    MAX_MESSAGE >> 20
                ),
                None,
            );
        }
    };
    if let Err(refusal) = cordon_mcp::read_message(&bytes) {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            refusal.id,
            refusal.code,
            refusal.message,
            None,
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
