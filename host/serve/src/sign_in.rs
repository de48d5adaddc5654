//! What the host tells clients about signing in, without a token: the protected resource
//! metadata of `/mcp` (RFC 9728), which the MCP authorization spec has clients read to find
//! the identity provider, and the console's sign-in settings. Both only when `[serve.oidc]`
//! is set; otherwise `404`, as for any route that is not there.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::api::{AppState, base_url};
use crate::error::ApiError;

/// Where `/mcp`'s metadata is: the well-known prefix put before the resource's path.
pub const MCP_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// The scopes a token may carry, for clients to ask for.
const SCOPES: [&str; 8] = [
    "sessions",
    "sessions:all",
    "approve",
    "approve:own",
    "audit",
    "audit:all",
    "admin",
    "metrics",
];

fn not_set() -> Response {
    ApiError::not_found(
        "this host takes no identity provider's tokens ([serve.oidc] is not set); use a token \
         from its token file",
    )
    .into_response()
}

/// `GET /.well-known/oauth-protected-resource/mcp`: the resource `/mcp` is, who issues its
/// tokens, and how they are sent.
pub(crate) async fn mcp_metadata(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(oidc) = &state.oidc else {
        return not_set();
    };
    Json(json!({
        "resource": format!("{}/mcp", base_url(&state, &headers)),
        "authorization_servers": [oidc.issuer()],
        "bearer_methods_supported": ["header"],
        "scopes_supported": SCOPES,
        "resource_name": "Cordon",
    }))
    .into_response()
}

/// `GET /api/v1/sign-in`: what the console needs to sign in with the identity provider
/// (authorization code with PKCE).
pub(crate) async fn console_settings(State(state): State<AppState>) -> Response {
    let Some(oidc) = &state.oidc else {
        return not_set();
    };
    Json(json!({
        "issuer": oidc.issuer(),
        "client_id": oidc.console_client_id,
        "scopes": SCOPES,
    }))
    .into_response()
}
