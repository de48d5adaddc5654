//! MCP over Streamable HTTP at `/mcp`: the same tools, approvals and audit log as `cordon mcp`
//! on stdio, behind the same token and `Host` check as the rest of the API, with browsers'
//! `Origin`s refused unless they are this server's own.

use std::net::SocketAddr;
use std::sync::Arc;

use cordon_agent::ToolSource;
use cordon_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use cordon_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};
use cordon_mcp::{McpHost, McpOptions, StoreApprover};
use cordon_store::Store;
use tokio_util::sync::CancellationToken;

use crate::host::HostOptions;

/// The `/mcp` endpoint's service. `stop` ends its streams when the host stops.
pub(crate) fn service(
    store: &Store,
    source: Arc<dyn ToolSource>,
    options: &HostOptions,
    addr: SocketAddr,
    stop: CancellationToken,
) -> StreamableHttpService<cordon_mcp::McpServer, LocalSessionManager> {
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
    StreamableHttpService::new(
        move || Ok(mcp.connection()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
