//! `[serve.oidc]`: signing in to `cordon serve` with the organisation's identity provider.
//! Besides the token file's static tokens, the host takes OAuth 2.1 / OpenID Connect access
//! tokens (JWTs) the configured issuer signed for the configured audience; a claim names the
//! user and another carries the scopes. How a token is checked is written in
//! `cordon_serve`'s `oidc` module.

use serde::{Deserialize, Serialize};

/// The identity provider whose access tokens the host takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer (`https://login.example.com/realms/acme`): its discovery document is
    /// `ISSUER/.well-known/openid-configuration`, and tokens must carry it as `iss`. Plain
    /// `http` only on a loopback address.
    pub issuer: String,
    /// What tokens must carry in `aud`: the host's own URL, or its `/mcp` URL for MCP clients
    /// that sign in by themselves (they ask for a token for that resource). One or a list.
    pub audience: Audience,
    /// The claim naming the user (`sub`, `preferred_username`, `email`): the name sessions,
    /// questions and audit records are kept under.
    #[serde(default = "default_user_claim")]
    pub user_claim: String,
    /// The claim carrying the scopes, a space-separated string (`scope`, as OAuth has it) or
    /// a list (`roles`, `groups`); only Cordon's scope names in it count.
    #[serde(default = "default_scopes_claim")]
    pub scopes_claim: String,
    /// The scopes of a token whose claim names none of Cordon's, as in the token file
    /// (`sessions,approve,audit`); empty: such a token may do nothing.
    #[serde(default = "default_scopes")]
    pub default_scopes: String,
    /// Seconds of clock difference allowed when checking `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// The console's client id at the provider (a public client allowed the
    /// authorization-code flow with PKCE, redirecting to the console's URL); unset: the console
    /// signs in with a token only.
    #[serde(default)]
    pub console_client_id: Option<String>,
}

/// One audience or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// One.
    One(String),
    /// Any of these.
    Any(Vec<String>),
}

impl Audience {
    /// Each accepted audience.
    pub fn all(&self) -> Vec<String> {
        match self {
            Audience::One(a) => vec![a.clone()],
            Audience::Any(list) => list.clone(),
        }
    }
}

fn default_user_claim() -> String {
    "sub".to_string()
}

fn default_scopes_claim() -> String {
    "scope".to_string()
}

fn default_scopes() -> String {
    "sessions,approve,audit".to_string()
}

fn default_leeway() -> u64 {
    30
}
