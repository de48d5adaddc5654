//! Cordon's own client for the OCI distribution API, on the same reqwest as its other clients.
//!
//! A registry is a stranger: every byte it sends (manifest, blob, error body, token) is read
//! through [`read_capped`], which refuses a body whose `Content-Length` is over the cap before
//! reading any of it, stops at the cap when there is none, and gives up on a registry that sends
//! slower than a minimum rate; the operations in `oci.rs` each run under a deadline. Credentials
//! go to the registry itself, or to a token service on its host and port, and never over plain
//! HTTP to another machine. (oci-client, used before, read bodies whole and sent the credentials
//! to whatever token service a registry named.)

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use reqwest::redirect::Policy;
use reqwest::{Method, Response, StatusCode, Url};
use serde::Deserialize;

use crate::error::HomeError;

/// The variable that sets the deadline of one registry operation.
pub const TIMEOUT_ENV: &str = "CORDON_REGISTRY_TIMEOUT";
/// How long one registry operation (an install's pull, its signature check, a push) may take.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// The slowest a registry may send, in bytes per second, averaged over [`RATE_WINDOW`].
pub const MIN_RATE: u64 = 64 * 1024;
/// The window the minimum rate is averaged over: long enough for a stall to recover.
pub const RATE_WINDOW: Duration = Duration::from_secs(30);
/// The most Cordon reads of an error body (for its message) or a token response.
const MAX_SMALL_BODY: u64 = 64 * 1024;

/// How long a registry may take, and how slowly it may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// For one whole operation.
    pub deadline: Duration,
    /// Bytes per second, averaged over `window`.
    pub min_rate: u64,
    /// The window the rate is averaged over.
    pub window: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            deadline: DEFAULT_DEADLINE,
            min_rate: MIN_RATE,
            window: RATE_WINDOW,
        }
    }
}

impl Limits {
    /// The defaults, with the deadline from [`TIMEOUT_ENV`] if it is set.
    pub fn from_env() -> Result<Limits, HomeError> {
        Limits::with_timeout(std::env::var(TIMEOUT_ENV).ok().as_deref())
    }

    /// The defaults, with the deadline `value` (of [`TIMEOUT_ENV`]) if there is one.
    fn with_timeout(value: Option<&str>) -> Result<Limits, HomeError> {
        let mut limits = Limits::default();
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return Ok(limits);
        };
        let bad = |reason: &str| HomeError::BadSetting {
            name: TIMEOUT_ENV,
            value: value.to_string(),
            reason: reason.to_string(),
        };
        limits.deadline = humantime::parse_duration(value)
            .map_err(|_| bad("give a duration such as 90s or 10m"))?;
        if limits.deadline.is_zero() {
            return Err(bad(
                "a registry needs some time; give a duration such as 90s",
            ));
        }
        Ok(limits)
    }
}

/// What went wrong talking to a registry. The operation in `oci.rs` adds which artifact.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No answer, or the connection broke.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// Where Cordon was going.
        url: String,
        /// The error with its causes.
        reason: String,
    },
    /// The registry answered with an error status.
    #[error("the registry answered {status} to {what}{detail}")]
    Status {
        /// The request.
        what: String,
        /// Its status.
        status: StatusCode,
        /// The registry's own message, and what Cordon knows more.
        detail: String,
    },
    /// A body over its cap: stopped there, or not read at all.
    #[error("{what} is larger than {cap} bytes, the most Cordon reads of it ({how})")]
    TooLarge {
        /// The body.
        what: String,
        /// The cap.
        cap: u64,
        /// Whether the size was announced or found out.
        how: String,
    },
    /// A body that came slower than the minimum rate.
    #[error(
        "{what} came too slowly: {received} bytes in {}, less than the {} KiB/s a registry must \
         keep up; Cordon gave up on {registry}",
        humantime::format_duration(*.window),
        .min_rate / 1024
    )]
    TooSlow {
        /// The body.
        what: String,
        /// The registry.
        registry: String,
        /// Bytes received in the last window.
        received: u64,
        /// The window.
        window: Duration,
        /// The minimum rate.
        min_rate: u64,
    },
    /// The operation's deadline passed.
    #[error(
        "{registry} did not finish within {}, the deadline of one registry operation; Cordon \
         gave up on it (set {TIMEOUT_ENV}, e.g. to 10m, to allow more)",
        humantime::format_duration(*.deadline)
    )]
    Deadline {
        /// The registry.
        registry: String,
        /// The deadline.
        deadline: Duration,
    },
    /// Something Cordon will not do, or a registry answer it cannot use.
    #[error("{0}")]
    Refused(String),
}

/// What a registry may be sent to prove who the user is. Not `Debug`: it holds secrets.
#[derive(Clone)]
pub enum Credentials {
    /// A user name and password (or access token used as one).
    Basic {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
    /// A Docker identity token, sent to the registry as a bearer token.
    Token(String),
}

/// Credentials for `registry`: `CORDON_REGISTRY_USERNAME` and `CORDON_REGISTRY_PASSWORD` when
/// `CORDON_REGISTRY` names this registry (`host[:port]`), else the Docker config
/// (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, with its credential helpers), else
/// none. Never stored by Cordon. The variables name their registry so that `plugin update
/// --all`, which contacts every registry plugins came from, sends them to that registry only.
pub fn credentials(registry: &str) -> Option<Credentials> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(user), Some(password)) = (
        env("CORDON_REGISTRY_USERNAME"),
        env("CORDON_REGISTRY_PASSWORD"),
    ) {
        match env("CORDON_REGISTRY") {
            Some(named) if named.eq_ignore_ascii_case(registry) => {
                return Some(Credentials::Basic { user, password });
            }
            Some(_) => {}
            None => tracing::warn!(
                "CORDON_REGISTRY_USERNAME is set but CORDON_REGISTRY is not: set it to the \
                 registry (host[:port]) these credentials are for; they were not sent to \
                 {registry}"
            ),
        }
    }
    match docker_credential::get_credential(registry) {
        Ok(docker_credential::DockerCredential::UsernamePassword(user, password)) => {
            Some(Credentials::Basic { user, password })
        }
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => {
            Some(Credentials::Token(token))
        }
        Err(_) => None,
    }
}

/// Whether `url` is on this machine, where plain HTTP cannot be overheard.
pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The registry's base URL: https, or http for one on this machine.
pub fn base_url(registry: &str) -> Result<Url, RegistryError> {
    let bad =
        |e: String| RegistryError::Refused(format!("`{registry}` is not a registry host: {e}"));
    let url = Url::parse(&format!("http://{registry}/")).map_err(|e| bad(e.to_string()))?;
    if is_loopback(&url) {
        return Ok(url);
    }
    Url::parse(&format!("https://{registry}/")).map_err(|e| bad(e.to_string()))
}

/// Whether two URLs are on one host and port (credentials for one may go to the other).
fn same_origin(a: &Url, b: &Url) -> bool {
    a.host_str()
        .zip(b.host_str())
        .is_some_and(|(x, y)| x.eq_ignore_ascii_case(y))
        && a.port_or_known_default() == b.port_or_known_default()
}

/// `url` for a message: without its query, which may hold a signature (a storage service's
/// signed URL a registry redirects to).
fn shown(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// Refuses plain HTTP to another machine, where what it carries can be read and changed on the
/// way. Only a registry on this machine (`local`) may send Cordon to plain HTTP on this machine:
/// one elsewhere has no business with the user's local services.
fn check_transport(url: &Url, local: bool) -> Result<(), RegistryError> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if local && is_loopback(url) => Ok(()),
        _ => Err(RegistryError::Refused(format!(
            "the registry sent Cordon to {}; Cordon uses plain HTTP only for a registry on \
             this machine and only to this machine, so it did not go there",
            shown(url)
        ))),
    }
}

/// Holds a registry to the minimum rate: at the end of each window, at least `min_rate` ×
/// `window` bytes must have come in it. A body that ends within a window is never judged.
#[derive(Debug)]
struct Pace {
    window: Duration,
    min_bytes: u64,
    window_end: Instant,
    in_window: u64,
}

impl Pace {
    fn new(now: Instant, limits: &Limits) -> Pace {
        Pace {
            window: limits.window,
            min_bytes: (limits.min_rate as f64 * limits.window.as_secs_f64()) as u64,
            window_end: now + limits.window,
            in_window: 0,
        }
    }

    fn received(&mut self, bytes: usize) {
        self.in_window += bytes as u64;
    }

    /// At or after the end of a window: `Err(bytes received in it)` if too few, else the next
    /// window starts.
    fn check(&mut self, now: Instant) -> Result<(), u64> {
        if now < self.window_end {
            return Ok(());
        }
        if self.in_window < self.min_bytes {
            return Err(self.in_window);
        }
        self.in_window = 0;
        self.window_end = now + self.window;
        Ok(())
    }
}

/// reqwest's top-level message ("error sending request") hides the cause; show the chain.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Reads the body of `response` (`what` names it in errors), at most `cap` bytes: a larger
/// announced `Content-Length` is refused before anything is read, and a body that goes on past
/// the cap is dropped there. A registry sending slower than `limits` allow is given up on.
pub(crate) async fn read_capped(
    mut response: Response,
    cap: u64,
    what: &str,
    registry: &str,
    limits: &Limits,
) -> Result<Vec<u8>, RegistryError> {
    let too_large = |how: String| RegistryError::TooLarge {
        what: what.to_string(),
        cap,
        how,
    };
    if let Some(announced) = response.content_length()
        && announced > cap
    {
        return Err(too_large(format!(
            "the registry announced {announced} bytes; none were read"
        )));
    }
    let url = shown(response.url());
    let mut body = Vec::with_capacity(response.content_length().unwrap_or(0) as usize);
    let mut pace = Pace::new(Instant::now(), limits);
    loop {
        let next = tokio::time::timeout_at(
            tokio::time::Instant::from_std(pace.window_end),
            response.chunk(),
        )
        .await;
        let chunk = match next {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => return Ok(body),
            Ok(Err(e)) => {
                return Err(RegistryError::Unreachable {
                    url,
                    reason: format!("{what} broke off: {}", error_chain(&e.without_url())),
                });
            }
            // The window ended with nothing more received: judged below.
            Err(_) => bytes::Bytes::new(),
        };
        if body.len() as u64 + chunk.len() as u64 > cap {
            return Err(too_large(format!(
                "the registry sent more; Cordon stopped reading at {cap} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
        pace.received(chunk.len());
        pace.check(Instant::now())
            .map_err(|received| RegistryError::TooSlow {
                what: what.to_string(),
                registry: registry.to_string(),
                received,
                window: limits.window,
                min_rate: limits.min_rate,
            })?;
    }
}

/// How the registry is being asked now, after its challenge.
enum Authorization {
    Basic(String, String),
    Bearer(String),
}

/// A token service's answer (the distribution spec's `token`, or OAuth2's `access_token`).
#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// The distribution spec's error envelope.
#[derive(Deserialize)]
struct ErrorEnvelope {
    #[serde(default)]
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// The registry's own words for an error, shortened and with control characters escaped.
fn error_words(body: &[u8]) -> String {
    let Ok(envelope) = serde_json::from_slice::<ErrorEnvelope>(body) else {
        return String::new();
    };
    let words: Vec<String> = envelope
        .errors
        .iter()
        .take(3)
        .map(|e| {
            let text = format!("{} {}", e.code, e.message);
            let short: String = text.trim().chars().take(200).collect();
            short.escape_debug().to_string()
        })
        .collect();
    if words.is_empty() {
        String::new()
    } else {
        format!(": {}", words.join("; "))
    }
}

/// Requests to one repository of one registry, with what its challenge asked for kept
/// between them.
pub struct Session {
    http: reqwest::Client,
    registry: String,
    base: Url,
    repository: String,
    scope: String,
    credentials: Option<Credentials>,
    authorization: Option<Authorization>,
    /// Why credentials were kept from a token service, to say if the registry then refuses.
    withheld: Option<String>,
    limits: Limits,
}

impl Session {
    /// A session with `repository` at `registry` (`host[:port]`), to read it or (`push`) also
    /// to write it.
    pub fn new(
        registry: &str,
        repository: &str,
        push: bool,
        credentials: Option<Credentials>,
        limits: Limits,
    ) -> Result<Session, RegistryError> {
        let base = base_url(registry)?;
        let local = is_loopback(&base);
        // Redirects (blobs are often served from storage elsewhere) may not leave https for
        // another machine; reqwest drops the Authorization header on one to another host.
        let policy = Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                attempt.error("more than 5 redirects")
            } else if check_transport(attempt.url(), local).is_ok() {
                attempt.follow()
            } else {
                attempt.error("redirect to a plain http:// URL on another machine refused")
            }
        });
        // reqwest is built without a TLS crypto provider of its own: ring is the process's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder();
        if local {
            // A proxy's loopback is not this machine's, and plain HTTP to it could be overheard.
            builder = builder.no_proxy();
        }
        let http = builder
            .redirect(policy)
            .connect_timeout(Duration::from_secs(15))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("cordon/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                RegistryError::Refused(format!(
                    "cannot set up the HTTP client: {}",
                    error_chain(&e.without_url())
                ))
            })?;
        Ok(Session {
            http,
            registry: registry.to_string(),
            base,
            repository: repository.to_string(),
            scope: format!(
                "repository:{repository}:{}",
                if push { "pull,push" } else { "pull" }
            ),
            credentials,
            authorization: None,
            withheld: None,
            limits,
        })
    }

    /// The limits this session holds the registry to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn url(&self, rest: &str) -> Result<Url, RegistryError> {
        self.base
            .join(&format!("v2/{}/{rest}", self.repository))
            .map_err(|e| RegistryError::Refused(format!("cannot form a URL for `{rest}`: {e}")))
    }

    async fn read(
        &self,
        response: Response,
        cap: u64,
        what: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        read_capped(response, cap, what, &self.registry, &self.limits).await
    }

    /// Sends a request; on a 401 answers the challenge once and sends it again. Credentials
    /// and tokens go only with requests to the registry's own host and port.
    async fn send(
        &mut self,
        method: Method,
        url: Url,
        accept: Option<&str>,
        body: Option<(bytes::Bytes, &'static str)>,
    ) -> Result<Response, RegistryError> {
        check_transport(&url, is_loopback(&self.base))?;
        let mut challenged = false;
        loop {
            let mut request = self.http.request(method.clone(), url.clone());
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some((bytes, content_type)) = &body {
                request = request
                    .header(CONTENT_TYPE, *content_type)
                    .body(bytes.clone());
            }
            if same_origin(&url, &self.base) {
                request = match &self.authorization {
                    Some(Authorization::Basic(user, password)) => {
                        request.basic_auth(user, Some(password))
                    }
                    Some(Authorization::Bearer(token)) => request.bearer_auth(token),
                    None => request,
                };
            }
            let response = request
                .send()
                .await
                .map_err(|e| RegistryError::Unreachable {
                    url: shown(&url),
                    reason: error_chain(&e.without_url()),
                })?;
            if response.status() != StatusCode::UNAUTHORIZED || challenged {
                return Ok(response);
            }
            challenged = true;
            if !self.answer_challenge(&response).await? {
                return Ok(response);
            }
        }
    }

    /// Works out how to ask again after a 401: a token from the registry's token service, or
    /// the credentials themselves. `false` if there is nothing to try.
    async fn answer_challenge(&mut self, response: &Response) -> Result<bool, RegistryError> {
        let Some(header) = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(false);
        };
        let challenges = http_auth::parse_challenges(header).map_err(|e| {
            RegistryError::Refused(format!(
                "cannot read the registry's WWW-Authenticate header: {e}"
            ))
        })?;
        if let Some(Credentials::Token(token)) = &self.credentials {
            self.authorization = Some(Authorization::Bearer(token.clone()));
            return Ok(true);
        }
        let param = |c: &http_auth::ChallengeRef<'_>, name: &str| {
            c.params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_unescaped())
        };
        if let Some(bearer) = challenges
            .iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        {
            let realm = param(bearer, "realm").ok_or_else(|| {
                RegistryError::Refused(
                    "the registry asked for a token without naming where to get one (no realm)"
                        .into(),
                )
            })?;
            let token = self.token(&realm, param(bearer, "service")).await?;
            self.authorization = Some(Authorization::Bearer(token));
            return Ok(true);
        }
        if challenges
            .iter()
            .any(|c| c.scheme.eq_ignore_ascii_case("basic"))
            && let Some(Credentials::Basic { user, password }) = &self.credentials
        {
            self.authorization = Some(Authorization::Basic(user.clone(), password.clone()));
            return Ok(true);
        }
        Ok(false)
    }

    /// A token from the service at `realm`. The credentials go along only if it is on the
    /// registry's own host and port; a token service elsewhere is asked anonymously.
    async fn token(
        &mut self,
        realm: &str,
        service: Option<String>,
    ) -> Result<String, RegistryError> {
        let realm = Url::parse(realm).map_err(|e| {
            RegistryError::Refused(format!(
                "the registry names `{}` as its token service, which is not a URL: {e}",
                realm.escape_debug()
            ))
        })?;
        check_transport(&realm, is_loopback(&self.base)).map_err(|_| {
            RegistryError::Refused(format!(
                "the registry sends Cordon to {} for a token over plain HTTP; Cordon uses \
                 plain HTTP only for a registry on this machine and only to this machine, so it \
                 sent nothing there",
                realm.origin().ascii_serialization()
            ))
        })?;
        let origin = realm.origin().ascii_serialization();
        let mut url = realm.clone();
        url.query_pairs_mut().append_pair("scope", &self.scope);
        if let Some(service) = &service {
            url.query_pairs_mut().append_pair("service", service);
        }
        let mut request = self.http.get(url);
        match &self.credentials {
            Some(Credentials::Basic { user, password }) if same_origin(&realm, &self.base) => {
                request = request.basic_auth(user, Some(password));
            }
            Some(_) => {
                let why = format!(
                    "the credentials for {} were not sent to the token service at {origin}, \
                     which is not on the registry's host and port",
                    self.registry
                );
                tracing::warn!("{why}; asking it for an anonymous token");
                self.withheld = Some(why);
            }
            None => {}
        }
        let response = request
            .send()
            .await
            .map_err(|e| RegistryError::Unreachable {
                url: origin.clone(),
                reason: error_chain(&e.without_url()),
            })?;
        let what = format!("the token response of {origin}");
        if !response.status().is_success() {
            return Err(self
                .status_error(response, &format!("a token request to {origin}"))
                .await);
        }
        let body = self.read(response, MAX_SMALL_BODY, &what).await?;
        let answer: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
            RegistryError::Refused(format!("{what} is not the JSON of a token: {e}"))
        })?;
        answer
            .token
            .or(answer.access_token)
            .ok_or_else(|| RegistryError::Refused(format!("{what} holds no token")))
    }

    /// The error for an unsuccessful `response`, with the registry's message if it gave one in
    /// a small body.
    async fn status_error(&self, response: Response, what: &str) -> RegistryError {
        let status = response.status();
        let mut detail = match self.read(response, MAX_SMALL_BODY, "its error body").await {
            Ok(body) => error_words(&body),
            Err(e @ RegistryError::TooLarge { .. }) => format!(" ({e})"),
            Err(_) => String::new(),
        };
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            match (&self.withheld, &self.credentials) {
                (Some(why), _) => detail.push_str(&format!("; {why}")),
                (None, None) => detail.push_str(
                    "; no credentials were given for this registry (set \
                     CORDON_REGISTRY_USERNAME, CORDON_REGISTRY_PASSWORD and CORDON_REGISTRY, or \
                     log in with docker)",
                ),
                (None, Some(_)) => {}
            }
        }
        RegistryError::Status {
            what: what.to_string(),
            status,
            detail,
        }
    }

    /// The manifest `reference` (a tag or digest) names, of one of the media types `accept`,
    /// at most `cap` bytes; or `None` if the registry has none by that name.
    pub async fn manifest(
        &mut self,
        reference: &str,
        accept: &[&str],
        cap: u64,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let url = self.url(&format!("manifests/{reference}"))?;
        let accept = accept.join(", ");
        let response = self.send(Method::GET, url, Some(&accept), None).await?;
        let what = format!("manifest `{reference}`");
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(self
                .status_error(response, &format!("the request for {what}"))
                .await);
        }
        self.read(response, cap, &what).await.map(Some)
    }

    /// The blob `digest` names, at most `size` bytes (the caller checks the digest; `what`
    /// names the blob in errors).
    pub async fn blob(
        &mut self,
        digest: &str,
        size: u64,
        what: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let url = self.url(&format!("blobs/{digest}"))?;
        let response = self.send(Method::GET, url, None, None).await?;
        if !response.status().is_success() {
            return Err(self
                .status_error(response, &format!("the request for {what}"))
                .await);
        }
        self.read(response, size, what).await
    }

    /// Uploads `bytes` as the blob `digest` (one monolithic upload).
    pub async fn push_blob(&mut self, bytes: Vec<u8>, digest: &str) -> Result<(), RegistryError> {
        let start = self.url("blobs/uploads/")?;
        let response = self.send(Method::POST, start.clone(), None, None).await?;
        if !response.status().is_success() {
            return Err(self.status_error(response, "the start of an upload").await);
        }
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                RegistryError::Refused(
                    "the registry started an upload without saying where to send it (no \
                     Location header)"
                        .into(),
                )
            })?;
        let mut url = start.join(location).map_err(|e| {
            RegistryError::Refused(format!("the registry's upload location is not a URL: {e}"))
        })?;
        url.query_pairs_mut().append_pair("digest", digest);
        let body = Some((bytes::Bytes::from(bytes), "application/octet-stream"));
        let response = self.send(Method::PUT, url, None, body).await?;
        if !response.status().is_success() {
            return Err(self
                .status_error(response, &format!("the upload of {digest}"))
                .await);
        }
        Ok(())
    }

    /// Stores `manifest` (of `media_type`) under `tag`.
    pub async fn push_manifest(
        &mut self,
        tag: &str,
        manifest: Vec<u8>,
        media_type: &'static str,
    ) -> Result<(), RegistryError> {
        let url = self.url(&format!("manifests/{tag}"))?;
        let body = Some((bytes::Bytes::from(manifest), media_type));
        let response = self.send(Method::PUT, url, None, body).await?;
        if !response.status().is_success() {
            return Err(self
                .status_error(response, &format!("the manifest for `{tag}`"))
                .await);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_must_keep_up_the_minimum_rate_in_every_window() {
        let limits = Limits {
            deadline: Duration::from_secs(60),
            min_rate: 1000,
            window: Duration::from_secs(10),
        };
        let start = Instant::now();
        let mut pace = Pace::new(start, &limits);
        // Within a window nothing is judged, however little has come.
        assert_eq!(pace.check(start + Duration::from_secs(9)), Ok(()));
        pace.received(10_000);
        assert_eq!(pace.check(start + Duration::from_secs(10)), Ok(()));
        // The next window starts afresh: what came before does not carry over.
        pace.received(9_999);
        assert_eq!(pace.check(start + Duration::from_secs(20)), Err(9_999));
    }

    #[tokio::test]
    async fn a_registry_sending_below_the_minimum_rate_is_given_up_on() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = listener.local_addr().unwrap().to_string();
        // Announces a megabyte, then sends a byte every 50 ms: 60 at most, 3 s.
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") && request.len() < 64 * 1024 {
                let n = stream.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
            stream.write_all(head.as_bytes()).await.unwrap();
            for _ in 0..60 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if stream.write_all(b" ").await.is_err() {
                    break;
                }
            }
        });
        let limits = Limits {
            deadline: Duration::from_secs(60),
            min_rate: MIN_RATE,
            window: Duration::from_millis(500),
        };
        let mut session = Session::new(&registry, "slow", false, None, limits).unwrap();
        let digest = format!("sha256:{}", "0".repeat(64));
        let e = session
            .blob(&digest, 1 << 20, "the layer")
            .await
            .unwrap_err();
        match &e {
            RegistryError::TooSlow {
                received, window, ..
            } => {
                assert!(*received < 100, "{e}");
                assert_eq!(*window, Duration::from_millis(500));
            }
            other => panic!("not given up for its rate: {other}"),
        }
        let text = e.to_string();
        assert!(
            text.contains("less than the 64 KiB/s") && text.contains(&registry),
            "{text}"
        );
        server.abort();
    }

    #[test]
    fn credentials_and_tokens_stay_on_the_registry_host_and_off_plain_http() {
        let registry = base_url("registry.example.com").unwrap();
        assert_eq!(registry.scheme(), "https");
        let url = |s: &str| Url::parse(s).unwrap();
        assert!(same_origin(
            &registry,
            &url("https://registry.example.com/token")
        ));
        assert!(same_origin(
            &registry,
            &url("https://REGISTRY.example.com:443/t")
        ));
        assert!(!same_origin(
            &registry,
            &url("https://auth.example.com/token")
        ));
        assert!(!same_origin(
            &registry,
            &url("https://registry.example.com:8443/t")
        ));
        let local = base_url("127.0.0.1:5000").unwrap();
        assert_eq!(local.as_str(), "http://127.0.0.1:5000/");
        assert!(!same_origin(&local, &url("http://127.0.0.1:5001/token")));
        assert_eq!(base_url("localhost:5000").unwrap().scheme(), "http");
        assert_eq!(base_url("[::1]:5000").unwrap().scheme(), "http");
        // Plain HTTP only on this machine, even to the registry's own host, and only for a
        // registry on this machine.
        assert!(check_transport(&url("http://registry.example.com:443/token"), false).is_err());
        assert!(check_transport(&url("http://registry.example.com/token"), true).is_err());
        assert!(check_transport(&url("http://127.0.0.2:80/token"), true).is_ok());
        assert!(check_transport(&url("http://127.0.0.1:80/token"), false).is_err());
        assert!(check_transport(&url("https://auth.example.com/token"), false).is_ok());
        assert!(check_transport(&url("ftp://registry.example.com/"), true).is_err());
    }

    #[test]
    fn the_deadline_is_a_duration_from_the_environment() {
        assert_eq!(Limits::with_timeout(None).unwrap(), Limits::default());
        assert_eq!(Limits::with_timeout(Some("")).unwrap(), Limits::default());
        let two = Limits::with_timeout(Some("2s")).unwrap();
        assert_eq!(two.deadline, Duration::from_secs(2));
        for bad in ["soon", "0s"] {
            let e = Limits::with_timeout(Some(bad)).unwrap_err().to_string();
            assert!(e.contains(TIMEOUT_ENV) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn error_words_are_the_registry_s_own_shortened_and_inert() {
        let body = br#"{"errors":[{"code":"DENIED","message":"no \u001b[2J way"}]}"#;
        assert_eq!(error_words(body), ": DENIED no \\u{1b}[2J way");
        assert_eq!(error_words(b"<html>"), "");
    }
}
