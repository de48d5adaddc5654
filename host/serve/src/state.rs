//! What the routes share: the host, the tokens, the identity provider, and how the host is
//! reached, and which sessions a caller sees. Below every route module, so none of them
//! depends on another for it.

use std::sync::Arc;

use axum::http::header;

use crate::auth::{Caller, Scopes, Tokens};
use crate::error::ApiError;
use crate::host::Host;

/// What the routes share.
#[derive(Clone)]
pub(crate) struct AppState {
    pub host: Arc<Host>,
    pub tokens: Arc<Tokens>,
    /// The `Host` header values a request may carry (empty: any), against DNS rebinding.
    pub allowed_hosts: Arc<Vec<String>>,
    /// The identity provider whose access tokens are taken, if one is set.
    pub oidc: Option<Arc<crate::oidc::Oidc>>,
    /// `[serve] public_url`, without a trailing slash.
    pub public_url: Option<String>,
}

/// This host's URL as clients reach it: `[serve] public_url`, else `http://` and the request's
/// `Host` (checked against DNS rebinding on a loopback address).
pub(crate) fn base_url(state: &AppState, headers: &axum::http::HeaderMap) -> String {
    if let Some(url) = &state.public_url {
        return url.clone();
    }
    // Only what a host name and port are made of: the value goes into headers and JSON.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// Session `id` if `caller` may see it (see [`crate::auth`], rule 3): a session of another
/// token is answered exactly as one that does not exist.
pub(crate) async fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<cordon_store::SessionInfo, ApiError> {
    caller.require(Scopes::SESSIONS, "use sessions")?;
    let info = state.host.store().session(id).await?;
    if caller.sees(info.created_by.as_deref()) {
        return Ok(info);
    }
    Err(cordon_store::StoreError::UnknownSession { id: id.to_string() }.into())
}
