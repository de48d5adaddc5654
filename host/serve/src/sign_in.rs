//! What the host tells clients about signing in, without a token: the protected resource
//! metadata of `/mcp` (RFC 9728), which the MCP authorization spec has clients read to find
//! the identity provider, and the console's sign-in settings. Both only when `[serve.oidc]`
//! is set; otherwise `404`, as for any route that is not there.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::state::{AppState, base_url};

/// Where `/mcp`'s metadata is: the well-known prefix put before the resource's path.
pub const MCP_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// Code exchanges under way at once: each is a request to the provider on behalf of a client
/// that has no token yet, so there are few.
static EXCHANGES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

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
        // No `scopes_supported`: a client would ask for them, and what it asks for is not what
        // its user may do. The provider grants `cordon:` scopes per user (see `crate::oidc`).
        "resource_name": "Cordon",
    }))
    .into_response()
}

/// `GET /api/v1/sign-in`: what the console needs to sign in with the identity provider
/// (authorization code with PKCE): where to send the user, as which client, for what.
pub(crate) async fn console_settings(State(state): State<AppState>) -> Response {
    let Some(oidc) = &state.oidc else {
        return not_set();
    };
    let Some(client_id) = &oidc.console_client_id else {
        return ApiError::not_found(
            "the console signs in with a token only ([serve.oidc] console_client_id is not set)",
        )
        .into_response();
    };
    match oidc.authorization_endpoint().await {
        Ok(endpoint) => Json(json!({
            "issuer": oidc.issuer(),
            "authorization_endpoint": endpoint,
            "client_id": client_id,
            "resource": oidc.audience(),
            // No more than a named token's defaults: what the user may do beyond them comes
            // from the provider's grant for the user, not from what the page asks for.
            "scope": oidc.console_scope(),
        }))
        .into_response(),
        Err(e) => ApiError::unavailable(e).into_response(),
    }
}

/// What the console sends back from the identity provider.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Code {
    code: String,
    code_verifier: String,
    redirect_uri: String,
}

/// `POST /api/v1/sign-in/token`: the console's authorization code and PKCE verifier,
/// exchanged for an access token at the provider (the page may only talk to its own origin).
pub(crate) async fn console_token(
    State(state): State<AppState>,
    Json(code): Json<Code>,
) -> Response {
    let Some(oidc) = &state.oidc else {
        return not_set();
    };
    let Ok(_exchanging) = EXCHANGES.try_acquire() else {
        return ApiError::unavailable(
            "too many sign-ins are under way at once; try again in a moment",
        )
        .into_response();
    };
    match oidc
        .exchange(&code.code, &code.code_verifier, &code.redirect_uri)
        .await
    {
        Ok(token) => Json(token).into_response(),
        Err(why) => ApiError::bad_request(why.0).into_response(),
    }
}
