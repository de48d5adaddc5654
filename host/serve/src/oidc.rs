//! Access tokens from the organisation's identity provider (`[serve.oidc]`): JWTs its issuer
//! signed, checked against the keys it publishes.
//!
//! A bearer that is not one of the token file's is taken as such a token only if, in this
//! order:
//! 1. it has the shape of a JWS (three dot-separated parts) and its header names an asymmetric
//!    algorithm (RS*, PS*, ES*, EdDSA): never `none`, never a shared-secret `HS*`, which
//!    anyone holding the public key could forge;
//! 2. its `kid` names a key of the issuer's JWKS (found through the issuer's discovery
//!    document, and kept for at most [`KEYS_MAX_AGE`]): a `kid` not among the kept keys
//!    fetches them again, at most once every [`REFETCH_EVERY`], so a provider that rotated its
//!    key is followed within seconds, one that withdrew a key within minutes (while the
//!    provider cannot be reached, the kept keys are used), and a flood of made-up `kid`s
//!    costs the provider one request in that time; the key's own `alg`, when it says one,
//!    must be the header's;
//! 3. the signature verifies with that key;
//! 4. `iss` is the issuer, `aud` holds one of the audiences, `exp` has not passed and `nbf`
//!    has (within `leeway_secs`), and `exp` is present; a token with a `nonce` is an ID token,
//!    not an access token, and is refused;
//! 5. the user claim is a non-empty string without control characters, at most
//!    [`MAX_USER_BYTES`] long; the user is named [`USER_PREFIX`] and that (`oidc:alice`), a
//!    name no token of the token file can have, so a provider's user never takes over a
//!    static token's sessions, now or after the token file changes;
//! 6. the scopes are the values of the scopes claim (a space-separated string or a list) of
//!    the form [`SCOPE_PREFIX`] and one scope name (`cordon:approve`), or `default_scopes`
//!    when it has none: a generic `admin` group grants nothing. The provider must grant these
//!    per user; a provider that puts in `scope` whatever a client asked for lets every user
//!    ask for `cordon:admin`.
//!
//! Any other bearer is refused with `401`, whose `WWW-Authenticate` says why for a JWT (expired,
//! wrong audience, …) so its holder knows to get a new one, and nothing for anything else. A
//! token checked and taken is kept (by its sha256) until it expires, at most
//! [`MAX_VERIFIED`]; the kept ones are forgotten whenever the keys are fetched again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cordon_agent::serve_sign_in::OidcConfig;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use crate::auth::{Caller, Scopes};

/// How often an unknown `kid` may fetch the issuer's keys again.
pub const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// How long fetched keys are used before they are fetched again.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(600);
/// What a provider's user is named with before its claim.
pub const USER_PREFIX: &str = "oidc:";
/// What a value of the scopes claim starts with to name a Cordon scope.
pub const SCOPE_PREFIX: &str = "cordon:";
/// The longest user name taken from a token.
pub const MAX_USER_BYTES: usize = 200;
/// The largest discovery document or key set read from the provider.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// Why the identity provider's settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OidcSetupError {
    /// A setting is wrong: which and why.
    #[error("[serve.oidc] {field}: {message}")]
    Invalid {
        /// The key.
        field: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
}

/// Why a token was refused, said to its holder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The keys of the issuer, as last fetched, and its discovery document.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, (DecodingKey, Option<Algorithm>)>,
    fetched: Option<Instant>,
    discovery: Option<Value>,
    /// When the discovery document alone was last asked for (the console's sign-in).
    discovery_tried: Option<Instant>,
    /// When the fetch whose keys are kept began: a slower, older fetch finishing later
    /// does not replace them.
    kept_from: Option<Instant>,
}

/// Tokens checked and taken, kept until they expire so that a client sending the same token
/// with every request pays for its signature once; at most this many.
pub const MAX_VERIFIED: usize = 10_000;

/// A token checked and taken: who it stands for, and until when.
struct Verified {
    caller: Caller,
    exp: u64,
}

/// The longest code or verifier the console's sign-in forwards.
const MAX_CODE_BYTES: usize = 4096;

/// The identity provider: its settings and its keys.
pub struct Oidc {
    issuer: String,
    audiences: Vec<String>,
    user_claim: String,
    scopes_claim: String,
    default_scopes: Scopes,
    leeway_secs: u64,
    /// The console's public client, for its sign-in.
    pub console_client_id: Option<String>,
    http: reqwest::Client,
    keys: Mutex<Keys>,
    /// By the token's sha256.
    verified: std::sync::Mutex<HashMap<[u8; 32], Verified>>,
    /// How many times the keys were fetched: a check that began before a fetch keeps
    /// nothing, as its key may be gone.
    generation: std::sync::atomic::AtomicU64,
}

/// The algorithms a token may be signed with: asymmetric ones only.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl Oidc {
    /// Checks the settings; the provider is asked for its keys on the first token.
    pub fn new(config: &OidcConfig) -> Result<Oidc, OidcSetupError> {
        let invalid = |field, message: String| OidcSetupError::Invalid { field, message };
        let issuer = config.issuer.trim_end_matches('/').to_string();
        let url = url_of(&issuer).map_err(|e| invalid("issuer", e))?;
        if url.0 == "http" && !is_loopback(&url.1) {
            return Err(invalid(
                "issuer",
                format!(
                    "`{issuer}` is plain http on a host that is not this machine: whoever sits \
                     between the host and it could hand out keys of their own; use https"
                ),
            ));
        }
        let audiences = config.audience.all();
        if audiences.is_empty() || audiences.iter().any(|a| a.trim().is_empty()) {
            return Err(invalid(
                "audience",
                "name the URL tokens are issued for (this host's, or its /mcp URL)".into(),
            ));
        }
        let default_scopes = if config.default_scopes.trim().is_empty() {
            Scopes::NONE
        } else {
            Scopes::parse(&config.default_scopes).map_err(|e| invalid("default_scopes", e))?
        };
        for (field, claim) in [
            ("user_claim", &config.user_claim),
            ("scopes_claim", &config.scopes_claim),
        ] {
            if claim.trim().is_empty() {
                return Err(invalid(field, "name a claim of the tokens".into()));
            }
        }
        // Ring is the process's TLS provider (see the workspace's Cargo.toml).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| invalid("issuer", format!("no HTTP client: {e}")))?;
        Ok(Oidc {
            issuer,
            audiences,
            user_claim: config.user_claim.clone(),
            scopes_claim: config.scopes_claim.clone(),
            default_scopes,
            leeway_secs: config.leeway_secs,
            console_client_id: config.console_client_id.clone(),
            http,
            keys: Mutex::new(Keys::default()),
            verified: std::sync::Mutex::new(HashMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The issuer, as tokens carry it.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Whether `bearer` has a JWS's shape (rule 1's first half): only such bearers are
    /// checked here.
    pub fn looks_like_jwt(bearer: &str) -> bool {
        bearer.split('.').count() == 3 && bearer.len() < 16 << 10
    }

    /// The caller `bearer` stands for, by the rules of the module's doc.
    pub async fn caller(&self, bearer: &str) -> Result<Caller, Refused> {
        use std::sync::atomic::Ordering;
        let digest: [u8; 32] = Sha256::digest(bearer.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        if let Some(seen) = self.verified().get(&digest)
            && now <= seen.exp.saturating_add(self.leeway_secs)
        {
            return Ok(seen.caller.clone());
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let (caller, exp) = self.check(bearer).await?;
        let mut verified = self.verified();
        if self.generation.load(Ordering::SeqCst) != generation {
            return Ok(caller);
        }
        if verified.len() >= MAX_VERIFIED {
            verified.retain(|_, v| now <= v.exp.saturating_add(self.leeway_secs));
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
        }
        verified.insert(
            digest,
            Verified {
                caller: caller.clone(),
                exp,
            },
        );
        Ok(caller)
    }

    fn verified(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Verified>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rules 1 to 6 for a token not seen before: the caller and the token's `exp`.
    async fn check(&self, bearer: &str) -> Result<(Caller, u64), Refused> {
        let header = jsonwebtoken::decode_header(bearer)
            .map_err(|e| Refused(format!("not a signed token: {e}")))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(Refused(format!(
                "tokens signed with {:?} are not taken; the identity provider signs with a \
                 public-key algorithm",
                header.alg
            )));
        }
        let kid = header.kid.clone().unwrap_or_default();
        let (key, key_alg) = self.key(&kid).await?;
        if key_alg.is_some_and(|alg| alg != header.alg) {
            return Err(Refused(format!(
                "the token says {:?} but key `{kid}` is for {:?}",
                header.alg,
                key_alg.unwrap_or(header.alg)
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&self.audiences);
        validation.leeway = self.leeway_secs;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims =
            jsonwebtoken::decode::<serde_json::Map<String, Value>>(bearer, &key, &validation)
                .map_err(|e| Refused(why(e.kind(), &self.issuer, &self.audiences)))?
                .claims;
        if claims.contains_key("nonce") {
            return Err(Refused(
                "this is an ID token (it has a nonce); send the access token".into(),
            ));
        }
        let name = match claims.get(&self.user_claim) {
            Some(Value::String(s))
                if !s.is_empty()
                    && s.len() <= MAX_USER_BYTES
                    && !s.chars().any(char::is_control) =>
            {
                format!("{USER_PREFIX}{s}")
            }
            _ => {
                return Err(Refused(format!(
                    "the token's claim `{}` (the user's name, [serve.oidc] user_claim) is \
                     missing or not a short string",
                    self.user_claim
                )));
            }
        };
        let named: Vec<&str> = match claims.get(&self.scopes_claim) {
            Some(Value::String(s)) => s.split_whitespace().collect(),
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let scopes = named
            .iter()
            .filter_map(|n| n.strip_prefix(SCOPE_PREFIX).and_then(Scopes::named))
            .fold(Scopes::NONE, Scopes::with);
        let scopes = if scopes == Scopes::NONE {
            self.default_scopes
        } else {
            scopes
        };
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        Ok((Caller { name, scopes }, exp))
    }

    /// The key `kid` names, fetching the issuer's keys when none is kept yet or it is not
    /// among them (at most once every [`REFETCH_EVERY`]).
    async fn key(&self, kid: &str) -> Result<(DecodingKey, Option<Algorithm>), Refused> {
        let may_fetch = {
            let mut keys = self.keys.lock().await;
            let fresh = keys.fetched.is_some_and(|at| at.elapsed() < KEYS_MAX_AGE);
            if let Some(found) = keys.by_kid.get(kid)
                && fresh
            {
                return Ok(found.clone());
            }
            let may_fetch = keys.fetched.is_none_or(|at| at.elapsed() >= REFETCH_EVERY);
            if may_fetch {
                keys.fetched = Some(Instant::now());
            }
            may_fetch.then(Instant::now)
        };
        // Fetched without holding the keys, so tokens of known keys are not held up by a
        // slow provider.
        let fetched = match may_fetch {
            Some(began) => Some((began, self.fetch_keys().await)),
            None => None,
        };
        let mut keys = self.keys.lock().await;
        if let Some((began, fetched)) = fetched {
            match fetched {
                Ok(_) if keys.kept_from.is_some_and(|kept| kept > began) => {}
                Ok((by_kid, discovery)) => {
                    keys.kept_from = Some(began);
                    // Every kept token is checked again against these keys: a key withdrawn,
                    // or a `kid` given to new key material, takes its tokens with it.
                    self.generation
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    self.verified().clear();
                    keys.by_kid = by_kid;
                    keys.discovery = Some(discovery);
                }
                // While the provider cannot be reached, the keys kept are used: its users are
                // not locked out by an outage, and a withdrawn key goes once it answers.
                Err(e) if keys.by_kid.contains_key(kid) => {
                    tracing::warn!(
                        "the identity provider's keys could not be fetched again (the kept ones \
                         are used): {e}"
                    );
                }
                Err(e) => {
                    tracing::warn!("the identity provider's keys could not be fetched: {e}");
                    return Err(Refused(
                        "the identity provider's keys could not be fetched; try again".into(),
                    ));
                }
            }
        }
        keys.by_kid.get(kid).cloned().ok_or_else(|| {
            Refused(format!(
                "no key `{kid}` among the identity provider's keys (a key it no longer uses, or \
                 not its token)"
            ))
        })
    }

    /// The issuer's discovery document, fetched once (and again with its keys).
    /// Tried at most once every [`REFETCH_EVERY`] while it fails, as the keys are.
    async fn discovery(&self) -> Result<Value, String> {
        {
            let mut keys = self.keys.lock().await;
            if let Some(document) = &keys.discovery {
                return Ok(document.clone());
            }
            if keys
                .discovery_tried
                .is_some_and(|at| at.elapsed() < REFETCH_EVERY)
            {
                return Err("the identity provider could not be reached; try again".into());
            }
            keys.discovery_tried = Some(Instant::now());
        }
        let document = self.fetch_discovery().await.map_err(|e| {
            tracing::warn!("the identity provider's discovery document: {e}");
            "the identity provider could not be reached; try again".to_string()
        })?;
        self.keys.lock().await.discovery = Some(document.clone());
        Ok(document)
    }

    async fn fetch_discovery(&self) -> Result<Value, String> {
        let discovery = format!("{}/.well-known/openid-configuration", self.issuer);
        let document = self.get_json(&discovery).await?;
        if document["issuer"].as_str().map(|i| i.trim_end_matches('/')) != Some(&self.issuer) {
            return Err(format!(
                "{discovery} names another issuer ({}), so it is not this issuer's",
                document["issuer"]
            ));
        }
        Ok(document)
    }

    /// Where the console sends its user to sign in.
    pub async fn authorization_endpoint(&self) -> Result<String, String> {
        let document = self.discovery().await?;
        document["authorization_endpoint"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "the identity provider names no authorization_endpoint".into())
    }

    /// What the console asks for: `openid` and the default scopes, as the provider names
    /// them.
    pub fn console_scope(&self) -> String {
        std::iter::once("openid".to_string())
            .chain(
                self.default_scopes
                    .names()
                    .into_iter()
                    .map(|n| format!("{SCOPE_PREFIX}{n}")),
            )
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The first audience: what the console asks a token for.
    pub fn audience(&self) -> &str {
        &self.audiences[0]
    }

    /// Exchanges the console's authorization code (with its PKCE verifier) for an access
    /// token at the provider's token endpoint, as the console's public client. The browser
    /// could not: the console's page may talk only to its own origin.
    pub async fn exchange(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<Value, Refused> {
        let client_id = self.console_client_id.as_deref().ok_or_else(|| {
            Refused("the console has no client at the identity provider ([serve.oidc] console_client_id)".into())
        })?;
        for (what, value) in [
            ("code", code),
            ("code_verifier", verifier),
            ("redirect_uri", redirect_uri),
        ] {
            if value.is_empty() || value.len() > MAX_CODE_BYTES {
                return Err(Refused(format!(
                    "`{what}` must be given, at most {MAX_CODE_BYTES} bytes"
                )));
            }
        }
        let document = self.discovery().await.map_err(Refused)?;
        let endpoint = document["token_endpoint"]
            .as_str()
            .ok_or_else(|| Refused("the identity provider names no token_endpoint".into()))?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("grant_type", "authorization_code"),
                ("code", code),
                ("code_verifier", verifier),
                ("redirect_uri", redirect_uri),
                ("client_id", client_id),
                ("resource", self.audience()),
            ])
            .finish();
        let response = self
            .http
            .post(endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|e| {
                tracing::warn!("{endpoint}: {}", cordon_agent::llm::error_chain(&e));
                Refused("the identity provider could not be reached; try again".into())
            })?;
        let status = response.status();
        let answer = read_json(endpoint, response).await.unwrap_or(Value::Null);
        if !status.is_success() || !answer["access_token"].is_string() {
            return Err(Refused(format!(
                "the identity provider did not give a token ({status}): {}",
                answer["error_description"]
                    .as_str()
                    .or(answer["error"].as_str())
                    .unwrap_or("no reason given")
            )));
        }
        Ok(serde_json::json!({
            "access_token": answer["access_token"],
            "expires_in": answer["expires_in"],
        }))
    }

    /// The issuer's keys: its discovery document names its JWKS.
    async fn fetch_keys(
        &self,
    ) -> Result<(HashMap<String, (DecodingKey, Option<Algorithm>)>, Value), String> {
        let document = self.fetch_discovery().await?;
        let jwks_uri = document["jwks_uri"]
            .as_str()
            .ok_or_else(|| "the discovery document names no jwks_uri".to_string())?;
        let set: JwkSet = serde_json::from_value(self.get_json(jwks_uri).await?)
            .map_err(|e| format!("{jwks_uri} is not a key set: {e}"))?;
        let mut by_kid = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = &jwk.common.key_id else {
                continue;
            };
            // Keys for encryption, and keys of algorithms not taken, sign nothing here.
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            if alg.is_some_and(|a| !ALGORITHMS.contains(&a)) {
                continue;
            }
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                by_kid.insert(kid.clone(), (key, alg));
            }
        }
        Ok((by_kid, document))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", cordon_agent::llm::error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        read_json(url, response).await
    }
}

/// A JSON answer of at most [`MAX_DOCUMENT_BYTES`].
async fn read_json(url: &str, mut response: reqwest::Response) -> Result<Value, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("{url}: {}", cordon_agent::llm::error_chain(&e)))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("{url} sent more than {MAX_DOCUMENT_BYTES} bytes"));
        }
    }
    serde_json::from_slice(&body).map_err(|e| format!("{url} sent no JSON: {e}"))
}

/// A failed check, said to the token's holder.
fn why(kind: &ErrorKind, issuer: &str, audiences: &[String]) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired; get a new one".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => format!(
            "the token is for another audience; ask for one for {}",
            audiences.join(" or ")
        ),
        ErrorKind::InvalidIssuer => format!("the token is not from {issuer}"),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}`"),
        other => format!("the token is not valid: {other:?}"),
    }
}

/// A URL's scheme and host.
fn url_of(text: &str) -> Result<(String, String), String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("`{text}` is not an http(s) URL"));
    }
    Ok((
        url.scheme().to_string(),
        url.host_str().unwrap_or_default().to_string(),
    ))
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_agent::serve_sign_in::Audience;

    fn config(issuer: &str) -> OidcConfig {
        OidcConfig {
            issuer: issuer.into(),
            audience: Audience::One("https://cordon.example".into()),
            user_claim: "sub".into(),
            scopes_claim: "scope".into(),
            default_scopes: "sessions,approve,audit".into(),
            leeway_secs: 0,
            console_client_id: None,
        }
    }

    #[test]
    fn an_issuer_over_plain_http_elsewhere_is_refused() {
        let e = Oidc::new(&config("http://login.example.com"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("use https"), "{e}");
        assert!(Oidc::new(&config("http://127.0.0.1:9000")).is_ok());
        assert!(Oidc::new(&config("https://login.example.com/realms/a/")).is_ok());
        let e = Oidc::new(&config("ftp://x")).err().unwrap();
        assert!(e.to_string().contains("not an http(s) URL"), "{e}");
        let mut bad = config("https://login.example.com");
        bad.default_scopes = "sesions".into();
        let e = Oidc::new(&bad).err().unwrap();
        assert!(e.to_string().contains("did you mean `sessions`"), "{e}");
    }

    #[tokio::test]
    async fn unsigned_and_shared_secret_tokens_are_refused_before_any_key_is_fetched() {
        // The issuer does not exist: a token that got as far as fetching keys would say so.
        let oidc = Oidc::new(&config("http://127.0.0.1:9")).unwrap();
        let none = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.";
        assert!(Oidc::looks_like_jwt(none));
        let e = oidc.caller(none).await.unwrap_err();
        assert!(e.0.contains("not a signed token"), "{e}");
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(Algorithm::HS256),
            &serde_json::json!({"sub": "a", "exp": 4_000_000_000u64}),
            &jsonwebtoken::EncodingKey::from_secret(b"public key text").unwrap(),
        )
        .unwrap();
        let e = oidc.caller(&hs).await.unwrap_err();
        assert!(e.0.contains("HS256") && e.0.contains("public-key"), "{e}");
        assert!(!Oidc::looks_like_jwt("abc.def"));
    }
}
