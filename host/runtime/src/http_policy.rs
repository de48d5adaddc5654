//! The HTTP origin allowlist, enforced where wasi-http hands a request to the network.
//!
//! Every outgoing request passes through [`HttpPolicy::check`] before a connection is made, and
//! then connects only to addresses checked after DNS (see `http_send`). The host never follows
//! redirects itself (wasi-http returns 3xx responses to the guest), so a guest that follows one
//! issues a new request that is checked again.

use std::future::Future;

use cordon_core::{HttpOrigin, HttpScheme};
use http::Request;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::caps::{HTTP_OUTGOING_BODY_CHUNK, MAX_HTTP_CONNECTIONS_PER_CALL};
use crate::http_send::{Resolver, checked_addresses, send_pinned};
use crate::refusals::Refusals;

/// Allowed origins of one call, the plugin name for log messages, the call's connection
/// budget, and what it refused the call (wasmtime-wasi-http lends out this policy alone, so
/// it keeps its own refusals; the call's report gathers them).
pub(crate) struct HttpPolicy {
    pub(crate) origins: Vec<HttpOrigin>,
    pub(crate) plugin: std::sync::Arc<str>,
    pub(crate) resolver: Resolver,
    /// One permit per open connection, held from the request until the connection closes.
    pub(crate) connections: std::sync::Arc<tokio::sync::Semaphore>,
    /// Whether the host log already says this call hit the connection cap.
    pub(crate) warned: bool,
    /// Requests refused by this policy or by the check of their addresses after DNS.
    pub(crate) refused: Refusals,
}

impl HttpPolicy {
    pub(crate) fn new(
        origins: Vec<HttpOrigin>,
        plugin: std::sync::Arc<str>,
        resolver: Resolver,
    ) -> HttpPolicy {
        HttpPolicy {
            origins,
            plugin,
            resolver,
            connections: std::sync::Arc::new(tokio::sync::Semaphore::new(
                MAX_HTTP_CONNECTIONS_PER_CALL,
            )),
            warned: false,
            refused: Refusals::default(),
        }
    }
}

/// Why [`HttpPolicy::check`] refused a request.
#[derive(Debug)]
pub(crate) struct Refused {
    /// The reason, for the host log.
    pub(crate) why: String,
    /// The line for the call's report: the origin for a request that was well-formed but not
    /// granted (`http: https://evil.example:443 (not granted)`), else the reason.
    pub(crate) line: String,
    /// The grant that would have allowed the request (`net:https://api.example`), for a
    /// well-formed request to an origin not granted.
    pub(crate) wanted: Option<String>,
}

impl Refused {
    /// A request whose form the policy refuses, whatever the grants.
    fn malformed(why: String) -> Refused {
        Refused {
            line: format!("http: {why}"),
            why,
            wanted: None,
        }
    }
}

/// Lower-cases a host and strips one trailing dot, the forms a grant stores.
fn normalize_host(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

impl HttpPolicy {
    /// Decides whether `req` may be sent, returning the host and port it goes to; `Err`
    /// carries the reason for the log and the line for the call's report.
    pub(crate) fn check<B>(&self, req: &Request<B>) -> Result<(String, u16), Refused> {
        self.check_target(req).map_err(Refused::malformed)?
    }

    /// The form checks of [`HttpPolicy::check`]: `Err` is a malformed request, `Ok` the
    /// decision on its origin.
    fn check_target<B>(&self, req: &Request<B>) -> Result<Result<(String, u16), Refused>, String> {
        let uri = req.uri();
        let scheme = match uri.scheme_str() {
            Some("http") => HttpScheme::Http,
            Some("https") => HttpScheme::Https,
            other => return Err(format!("scheme {other:?} is not http or https")),
        };
        let authority = uri
            .authority()
            .ok_or("the request has no authority (host)")?;
        let auth_str = authority.as_str();
        if auth_str.contains('@') {
            return Err(format!("authority `{auth_str}` contains user information"));
        }
        let host = authority.host();
        if host.is_empty() {
            return Err("the request has an empty host".into());
        }
        // `Authority::port_u16` is None both without a port and with an unparsable one; only
        // the former may default.
        let port = match authority.port() {
            Some(p) => p.as_u16(),
            None if auth_str.ends_with(':') => {
                return Err(format!("authority `{auth_str}` has an empty port"));
            }
            None => scheme.default_port(),
        };
        let host = normalize_host(host);
        match uri.path_and_query() {
            None => {}
            Some(pq) if pq.as_str().starts_with('/') => {}
            Some(pq) => {
                return Err(format!(
                    "request target `{pq}` is not a path (absolute-form or odd targets are refused)"
                ));
            }
        }
        let mut host_headers = req.headers().get_all(http::header::HOST).iter();
        match (host_headers.next(), host_headers.next()) {
            (None, _) => {}
            (Some(h), None) if h.as_bytes() == auth_str.as_bytes() => {}
            _ => {
                return Err(format!(
                    "the Host header does not match the authority `{auth_str}`"
                ));
            }
        }
        if self.origins.iter().any(|o| o.matches(scheme, &host, port)) {
            return Ok(Ok((host, port)));
        }
        let origin = format!("{}://{host}:{port}", scheme.as_str());
        let why = if self.origins.is_empty() {
            format!("{origin} — the plugin has no network grant")
        } else {
            format!(
                "{origin} is not among the granted origins ({})",
                self.origins
                    .iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let wanted = format!("net:{origin}")
            .parse::<cordon_core::Grant>()
            .ok()
            .map(|g| g.to_string());
        Ok(Err(Refused {
            why,
            line: format!("http: {origin} (not granted)"),
            wanted,
        }))
    }
}

type SendResult = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
)>;

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let (host, port) = match self.check(&request) {
            Ok(target) => target,
            Err(refused) => {
                tracing::warn!(target: "cordon::sandbox", plugin = %self.plugin, "refused HTTP request: {}", refused.why);
                self.refused.refuse(refused.line);
                if let Some(grant) = refused.wanted {
                    self.refused.want(grant);
                }
                return Box::new(async { Err(HttpError::HttpRequestDenied) });
            }
        };
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            if !std::mem::replace(&mut self.warned, true) {
                tracing::warn!(
                    target: "cordon::sandbox",
                    plugin = %self.plugin,
                    "refusing HTTP requests: the call has {MAX_HTTP_CONNECTIONS_PER_CALL} connections \
                     open, the most one call may have"
                );
            }
            return Box::new(async { Err(HttpError::ConnectionLimitReached) });
        };
        let resolver = self.resolver.clone();
        let plugin = self.plugin.clone();
        // The addresses are checked in the future, which wasmtime-wasi-http polls without the
        // store.
        let refusals = self.refused.shared();
        Box::new(async move {
            let addresses = match checked_addresses(&host, port, &resolver).await {
                Ok(addresses) => addresses,
                Err(unreachable) => {
                    tracing::warn!(target: "cordon::sandbox", plugin = %plugin, "refused HTTP request: {}", unreachable.why);
                    if let Some(line) = unreachable.refused {
                        refusals.refuse(line);
                    }
                    return Err(unreachable.guest);
                }
            };
            send_pinned(request, options, &host, addresses, permit).await
        })
    }

    /// What one outgoing body buffers on the host before it is sent: a request built and
    /// never sent keeps it for the rest of the call (the default, 1 MiB chunks, let 64 such
    /// requests hold 128 MiB).
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        HTTP_OUTGOING_BODY_CHUNK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(grants: &[&str]) -> HttpPolicy {
        HttpPolicy::new(
            grants
                .iter()
                .map(|g| match g.parse::<cordon_core::Grant>().unwrap() {
                    cordon_core::Grant::Http(o, _) => o,
                    other => panic!("{other:?}"),
                })
                .collect(),
            "t".into(),
            crate::http_send::system_resolver(),
        )
    }

    fn req(uri: &str, host: Option<&str>) -> Request<()> {
        let mut b = Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(http::header::HOST, h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn allows_only_exact_origins() {
        let p = policy(&["net:https://api.example.com", "net:http://127.0.0.1:8080"]);
        assert!(
            p.check(&req(
                "https://api.example.com/v1?q=1",
                Some("api.example.com")
            ))
            .is_ok()
        );
        assert!(p.check(&req("https://API.example.com:443/", None)).is_ok());
        assert!(p.check(&req("https://api.example.com./", None)).is_ok());
        assert!(
            p.check(&req("http://127.0.0.1:8080/x", Some("127.0.0.1:8080")))
                .is_ok()
        );
        for (uri, why) in [
            ("http://api.example.com/", "granted origins"),
            ("https://api.example.com:8443/", "granted origins"),
            ("https://evil.example.com/", "granted origins"),
            ("http://127.0.0.1:8081/", "granted origins"),
            ("http://127.0.0.1/", "granted origins"),
            ("https://user@api.example.com/", "user information"),
        ] {
            let e = p.check(&req(uri, None)).unwrap_err();
            assert!(e.why.contains(why), "{uri}: {e:?}");
        }
        let e = p
            .check(&req("https://api.example.com/", Some("evil.example.com")))
            .unwrap_err();
        assert!(e.why.contains("Host header"), "{e:?}");
        let e = policy(&[])
            .check(&req("https://a.example/", None))
            .unwrap_err();
        assert!(e.why.contains("no network grant"), "{e:?}");
    }

    /// The call's report names the origin a well-formed request was refused, without the
    /// grants (the audit record lists those), and the reason for a malformed one.
    #[test]
    fn refusals_have_a_line_for_the_report() {
        let p = policy(&["net:https://api.example.com"]);
        let e = p
            .check(&req("https://Evil.example./x?q=1", None))
            .unwrap_err();
        assert_eq!(e.line, "http: https://evil.example:443 (not granted)");
        // The grant a person may be asked for: that origin, nothing wider.
        assert_eq!(e.wanted.as_deref(), Some("net:https://evil.example"));
        let e = policy(&[])
            .check(&req("http://10.0.0.1:8080/", None))
            .unwrap_err();
        assert_eq!(e.line, "http: http://10.0.0.1:8080 (not granted)");
        assert_eq!(e.wanted.as_deref(), Some("net:http://10.0.0.1:8080"));
        let e = p
            .check(&req("https://user@api.example.com/", None))
            .unwrap_err();
        assert_eq!(
            e.line,
            "http: authority `user@api.example.com` contains user information"
        );
    }
}
