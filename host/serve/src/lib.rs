//! cordon-serve: `cordon serve`, a resident host that other programs connect to and that loses
//! nothing.
//!
//! - Sessions live in the store ([`cordon_store`]); each turn runs on its own task, with every
//!   transition recorded before its effects, under a lease on the session. A session stopped
//!   mid-turn (a crash, a shutdown, a store that went away) is taken up again from its last
//!   recorded state by the next host that looks, with no tool call run twice.
//! - A tool that needs approval waits for an answer from the API or the console, up to a
//!   timeout, then is denied; the audit log records who answered.
//! - The installed tools are reloaded when the home changes (install, grant, revoke), without
//!   a restart.
//! - The HTTP API takes a bearer token; the console at `/` is plain HTML and JavaScript.
//!
//! The crate does not link the sandbox: the binary hands it a [`ToolSource`] over the home.

mod admission;
mod api;
mod approvals;
mod auth;
mod body;
mod connections;
mod console;
mod error;
mod follow;
mod forward;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gateway;
mod host;
mod live;
mod mcp;
mod metrics;
mod oidc;
mod sign_in;
mod spans;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use api::parse_since;
pub use auth::{Scopes, TokenError, Tokens};
pub use cordon_agent::ToolSource;
pub use error::ApiError;
pub use host::{Host, HostOptions};
pub use live::{HostEvent, PendingApproval, Published, SessionEvent};

use cordon_store::Store;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be listened on.
    #[error(
        "cannot listen on {addr}: {source}; is another `cordon serve` running there? choose another with --listen"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The installed tools could not be loaded.
    #[error("cannot load the installed tools: {0}")]
    Tools(String),
    /// A setting of `[serve]` cannot be used.
    #[error("{0}")]
    Config(String),
    /// The server failed while running.
    #[error("the server failed: {0}")]
    Io(#[source] std::io::Error),
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen (port 0: any free port).
    pub listen: SocketAddr,
    /// The accepted tokens.
    pub tokens: Tokens,
    /// How the host behaves.
    pub host: HostOptions,
}

/// Serves until `shutdown` completes: then takes no new work, lets running tool calls finish
/// (up to the grace period), records everything and returns. `on_listening` is told the
/// address once the socket is open.
pub async fn serve(
    store: Store,
    source: Arc<dyn ToolSource>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::Io)?;
    // Before any work, so `/metrics` counts everything this process did.
    metrics::install();
    let oidc = match &options.host.config.serve.oidc {
        Some(config) => Some(Arc::new(
            oidc::Oidc::new(config).map_err(|e| ServeError::Config(e.to_string()))?,
        )),
        None => None,
    };
    let public_url = options
        .host
        .config
        .serve
        .public_url
        .as_ref()
        .map(|u| u.trim_end_matches('/').to_string());
    let public = match &public_url {
        Some(url) => Some(url::Url::parse(url).map_err(|e| {
            ServeError::Config(format!(
                "[serve] public_url `{url}` is not a URL ({e}); write it as clients reach this \
                 host, such as https://cordon.example.com"
            ))
        })?),
        None => None,
    };
    let lease = store.options().lease_ttl;
    let host = Host::new(store.clone(), source.clone(), options.host)
        .await
        .map_err(ServeError::Tools)?;
    let state = api::AppState {
        host: host.clone(),
        tokens: Arc::new(options.tokens),
        allowed_hosts: Arc::new(allowed_hosts(addr, public.as_ref())),
        oidc,
        public_url,
    };
    let (mcp, mcp_host) = mcp::service(
        &store,
        source.clone(),
        &host.options,
        addr,
        public.as_ref(),
        host.stopping.child_token(),
        host.admission.tool_calls.clone(),
    );
    let app = api::router(state, mcp);
    on_listening(addr);
    let internal = host
        .options
        .config
        .serve
        .internal_url
        .clone()
        .or_else(|| (!addr.ip().is_unspecified()).then(|| format!("http://{addr}")));
    if let Some(url) = internal {
        let _ = host.reached_at.set(url.trim_end_matches('/').to_string());
    }
    host.announce().await;
    host.resume_orphans().await;
    tokio::spawn(host.clone().hear_cancels());
    tokio::spawn(
        host.clone()
            .watch((lease / 2).clamp(Duration::from_millis(500), Duration::from_secs(5))),
    );
    let stopping = host.clone();
    // Each connection gets a number of its own, which binds the `always` answers of stateless
    // MCP clients to the program holding that connection.
    let limits = host.options.config.serve.limits.clone();
    connections::make_room_for(limits.max_connections);
    let server = connections::serve(listener, app, &limits, async move {
        shutdown.await;
        tracing::info!("stopping: no new turns; running tool calls may finish");
        stopping.begin_shutdown();
    });
    // Connections still open when the host stops (turn streams) end with their turns; the
    // grace period bounds the wait for both.
    let grace = host.options.shutdown_grace;
    let stopped = host.stopping.clone();
    tokio::select! {
        () = server => {}
        () = async move {
            stopped.cancelled().await;
            tokio::time::sleep(grace.saturating_add(Duration::from_secs(1))).await;
        } => {}
    }
    host.finish().await;
    mcp_host.finish().await;
    store.close().await;
    Ok(())
}

/// The `Host` header values a server on a loopback address answers to — its own address, and
/// the `[serve] public_url` a proxy on the same machine (a load balancer in front of several
/// hosts, a TLS terminator) passes requests on with; any for others (the user chose to
/// expose it).
fn allowed_hosts(addr: SocketAddr, public: Option<&url::Url>) -> Vec<String> {
    if !addr.ip().is_loopback() {
        return Vec::new();
    }
    let port = addr.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        addr.to_string(),
    ];
    if let Some(host) = public.and_then(|u| u.host_str()) {
        // As clients send it: without the scheme's default port.
        hosts.push(match public.and_then(url::Url::port) {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        });
    }
    hosts
}
