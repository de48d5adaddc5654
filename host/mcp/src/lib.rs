//! Cordon's MCP server: every installed tool, sandboxed, for any MCP client.
//!
//! A client lists the tools that policy does not deny, with annotations Cordon derives from
//! each tool's effective grants (never the plugin's own claims), and calls them: every call
//! runs in a fresh sandbox under its plugin's grants and limits exactly as `cordon call`, is
//! checked against the tool's schema before anything runs, asks a person first when policy
//! says `ask`, can be cancelled (the sandbox stops the guest), reports progress when asked,
//! and goes to the audit log with the client's name. Tool failures, sandbox refusals and
//! exceeded limits are `isError` results that say what to do; only calls that cannot be
//! routed (an unknown tool) are JSON-RPC errors.
//!
//! The transport is the caller's: `cordon mcp` serves stdio, `cordon serve` Streamable HTTP.
//! This crate does not link the sandbox; it reaches tools through
//! [`ToolSource`](cordon_agent::ToolSource).

mod asking;
mod audit;
mod calls;
mod catalog;
mod kept;
mod server;
mod stdio;

/// Entry points for the fuzz targets in `tests/fuzz`.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::stdio::{read_lines as stdio_lines, read_message};
}

pub use asking::{Approver, NobodyElse, StoreApprover, can_elicit_form};
pub use catalog::{Catalog, describe};
/// The MCP SDK this server is built on, for transports.
pub use rmcp;

/// Who a transport authenticated (the name of the bearer token an HTTP request carried): put
/// into the request's extensions, it is recorded beside the client's own name, and binds what
/// the client's user answers (a question in an `InputRequiredResult`, `always`) to that token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated(pub String);

/// The transport connection (over HTTP, the TCP connection) a request came over, numbered so
/// that no two connections of one process share a number: put into the request's extensions,
/// it binds what a stateless (2026-07-28) client's user answers `always` to the one program
/// that holds that connection, since nothing else in such a request (its token, the client's
/// name) tells one program from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection(pub u64);
pub use server::{McpHost, McpOptions, McpServer};
pub use stdio::{Refusal, StdioTransport, read_message};

/// Why serving a client stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client never completed the start of the conversation.
    #[error("the MCP client did not start the conversation: {0}")]
    Start(#[from] Box<rmcp::service::ServerInitializeError>),
    /// The connection failed while serving.
    #[error("serving the MCP client failed: {0}")]
    Serving(#[from] tokio::task::JoinError),
}

/// Serves one client over this process's stdin and stdout until it disconnects. Nothing else
/// may write to stdout meanwhile: it carries the protocol.
pub async fn serve_stdio(host: &std::sync::Arc<McpHost>) -> Result<(), ServeError> {
    use rmcp::ServiceExt;
    let running = host
        .connection()
        .serve(stdio::StdioTransport::new())
        .await
        .map_err(Box::new)?;
    let served = running.waiting().await;
    host.finish().await;
    served?;
    Ok(())
}
