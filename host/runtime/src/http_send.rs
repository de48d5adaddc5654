//! Sending an allowed HTTP request to an address that was checked after DNS.
//!
//! An allowlist of host *names* is not enough on its own: whoever controls a granted name's DNS
//! can point it at `127.0.0.1`, `10.0.0.1` or `169.254.169.254` (DNS rebinding), and a plugin
//! granted `net:https://telemetry.example` would reach the user's router, local model server or
//! cloud metadata service. So the host resolves the name itself, keeps only public addresses
//! (unless the grant itself names an internal address or `localhost`), and connects to exactly
//! those addresses — the name is never resolved a second time by anyone else.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// Looks a host name up; replaceable so tests can play a rebinding DNS server.
pub(crate) type Resolver = Arc<
    dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system resolver (getaddrinfo, through tokio); one shared instance, since every call's
/// sandbox takes a handle to it.
pub(crate) fn system_resolver() -> Resolver {
    static SYSTEM: OnceLock<Resolver> = OnceLock::new();
    SYSTEM
        .get_or_init(|| {
            Arc::new(|host, port| {
                Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
            })
        })
        .clone()
}

/// Whether `ip` belongs to the public internet rather than to this machine, a private or
/// carrier network, or a special-purpose range. An IPv6 address that carries an IPv4 address
/// (mapped, compatible, translated, NAT64, 6to4, Teredo, ISATAP) is judged by the IPv4 address
/// it carries: the network delivers it there, so `::7f00:1` or `2002:7f00:1::` is this machine.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            let embedded = embedded_ipv4(v6);
            if !embedded.is_empty() {
                return embedded.into_iter().all(is_public_v4);
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unique_local()
                || v6.is_unicast_link_local()
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated, still routed inside sites)
                || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64, any embedding
                || (s[0] == 0x2001 && s[1] == 0x0db8)) // documentation
        }
    }
}

/// The IPv4 addresses an IPv6 address carries, by the forms that deliver to them.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Vec<Ipv4Addr> {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-translated ::ffff:0:a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0xffff, 0, hi, lo] => vec![v4(hi, lo)],
        // IPv4-compatible ::a.b.c.d (deprecated); `::` and `::1` are IPv6's own.
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) != (0, 0) && (hi, lo) != (0, 1) => vec![v4(hi, lo)],
        // NAT64 well-known prefix 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => vec![v4(hi, lo)],
        // 6to4: 2002:AABB:CCDD::/48.
        [0x2002, hi, lo, ..] => vec![v4(hi, lo)],
        // Teredo 2001::/32: the server's address, and the client's, stored inverted.
        [0x2001, 0, server_hi, server_lo, _, _, client_hi, client_lo] => {
            vec![v4(server_hi, server_lo), v4(!client_hi, !client_lo)]
        }
        // ISATAP interface identifiers (any prefix): ::0:5efe:a.b.c.d and ::200:5efe:a.b.c.d.
        [_, _, _, _, u, 0x5efe, hi, lo] if u & 0xfdff == 0 => vec![v4(hi, lo)],
        _ => Vec::new(),
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, _, _] = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

/// Why a request to a granted host cannot be sent to any address.
#[derive(Debug)]
pub(crate) struct Unreachable {
    /// What the guest is told.
    pub(crate) guest: HttpError,
    /// The reason, for the host log.
    pub(crate) why: String,
    /// The line for the call's report when Cordon refused the addresses the name resolves to
    /// (`dns: rebind.example resolves to a private address 127.0.0.1`); `None` when the name
    /// did not resolve, which is no refusal.
    pub(crate) refused: Option<String>,
}

/// The addresses a request to `host:port` may connect to.
///
/// An IP literal was named by the grant itself, so it is used as is. `localhost` means this
/// machine: only loopback answers count. Any other name must resolve to public addresses;
/// internal answers are dropped, and a name with nothing else is refused.
pub(crate) async fn checked_addresses(
    host: &str,
    port: u16,
    resolver: &Resolver,
) -> Result<Vec<SocketAddr>, Unreachable> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let resolved = resolver(bare.to_string(), port)
        .await
        .map_err(|e| Unreachable {
            guest: HttpError::DnsError {
                rcode: None,
                info_code: None,
            },
            why: format!("cannot resolve `{bare}`: {e}"),
            refused: None,
        })?;
    let local = bare == "localhost";
    let (kept, dropped): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved.into_iter().partition(|a| {
        if local {
            a.ip().is_loopback()
        } else {
            is_public(a.ip())
        }
    });
    if kept.is_empty() {
        let found: Vec<String> = dropped.iter().map(|a| a.ip().to_string()).collect();
        return Err(if found.is_empty() {
            Unreachable {
                guest: HttpError::DestinationNotFound,
                why: format!("`{bare}` does not resolve to any address"),
                refused: None,
            }
        } else {
            Unreachable {
                guest: HttpError::DestinationIpProhibited,
                why: format!(
                    "`{bare}` resolves to {}, which is not a public address; the grant names a host, \
                 not this machine or a private network (grant the address itself, e.g. \
                 net:http://{}:{port}, if that is intended)",
                    found.join(", "),
                    found[0]
                ),
                refused: Some(if local {
                    format!(
                        "dns: localhost resolves to {}, not this machine",
                        found.join(", ")
                    )
                } else if found.len() == 1 {
                    format!("dns: {bare} resolves to a private address {}", found[0])
                } else {
                    format!(
                        "dns: {bare} resolves to private addresses {}",
                        found.join(", ")
                    )
                }),
            }
        });
    }
    Ok(kept)
}

trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            // The provider is named rather than taken from the process default: with more than
            // one crypto backend linked in (reqwest brings its own), the default is ambiguous
            // and `ClientConfig::builder()` would panic.
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            Arc::new(
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default TLS versions")
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            )
        })
        .clone()
}

/// The response body, failing when the server pauses longer than `between_bytes` between two
/// frames.
struct TimedBody {
    inner: hyper::body::Incoming,
    between_bytes: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = tokio::time::Instant::now() + self.between_bytes;
                self.sleep.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                HttpError::HttpResponseTimeout
            } else {
                HttpError::from(e)
            }))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Aborts the connection task when the call that owns it goes away.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

/// Sends `request` (already allowed by the policy) over a connection to one of `addresses`,
/// with TLS for https verified against `host`. `permit` (the call's connection budget) is held
/// until the connection is closed.
pub(crate) async fn send_pinned(
    mut request: Request<WasiBody>,
    options: Option<RequestOptions>,
    host: &str,
    addresses: Vec<SocketAddr>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<Sent, HttpError> {
    use http_body_util::BodyExt;
    let timeout = |pick: fn(&RequestOptions) -> Option<Duration>| {
        options
            .as_ref()
            .and_then(pick)
            .unwrap_or(Duration::from_secs(600))
    };
    let connect_timeout = timeout(|o| o.connect_timeout);
    let first_byte = timeout(|o| o.first_byte_timeout);
    let between_bytes = timeout(|o| o.between_bytes_timeout).max(Duration::from_nanos(1));

    let tcp = tokio::time::timeout(connect_timeout, TcpStream::connect(&addresses[..]))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Connect)?;
    let stream: Box<dyn Stream> = if request.uri().scheme() == Some(&http::uri::Scheme::HTTPS) {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = match bare.parse::<IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::from(ip),
            Err(_) => rustls::pki_types::ServerName::try_from(bare.to_string())?,
        };
        let tls = tokio::time::timeout(
            connect_timeout,
            tokio_rustls::TlsConnector::from(tls_config()).connect(name, tcp),
        )
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Tls)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (mut sender, connection) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)??;
    let driver = AbortOnDrop(tokio::spawn(connection));

    // On the wire the request line carries only the path; the host goes in the Host header,
    // which wasi-http sets from the authority.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;

    let response = tokio::time::timeout(first_byte, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
    let response = response.map(|inner| {
        TimedBody {
            inner,
            between_bytes,
            sleep: Box::pin(tokio::time::sleep(between_bytes)),
        }
        .boxed_unsync()
    });
    let done = async move {
        let _permit = permit;
        let mut driver = driver;
        match (&mut driver.0).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) if e.is_timeout() => Err(HttpError::HttpResponseTimeout),
            Ok(Err(e)) => Err(HttpError::from(e)),
            Err(_) => Err(HttpError::ConnectionTerminated),
        }
    };
    Ok((response, Box::new(done)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_dns(answers: &'static [(&'static str, &'static str)]) -> Resolver {
        Arc::new(move |host, port| {
            let found: Vec<SocketAddr> = answers
                .iter()
                .filter(|(name, _)| *name == host)
                .map(|(_, ip)| SocketAddr::new(ip.parse().unwrap(), port))
                .collect();
            Box::pin(async move { Ok(found) })
        })
    }

    #[test]
    fn tls_setup_does_not_depend_on_a_process_default() {
        let config = tls_config();
        assert!(Arc::ptr_eq(&config, &tls_config()), "built once");
    }

    #[test]
    fn internal_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
            // IPv4-compatible, translated, 6to4, Teredo, ISATAP forms of internal addresses.
            "::127.0.0.1",
            "::7f00:1",
            "::10.0.0.1",
            "::169.254.169.254",
            "::ffff:0:127.0.0.1",
            "2002:7f00:1::",
            "2002:a00:1:1::1",
            "2002:a9fe:a9fe::1",
            "2001:0:a00:1:0:0:f5ff:fffe",   // Teredo, server 10.0.0.1
            "2001:0:101:101:0:0:80ff:fffe", // Teredo, client 127.0.0.1
            "2001:db9::5efe:7f00:1",        // ISATAP carrying 127.0.0.1
            "fe80::200:5efe:a00:1",
            "64:ff9b:1::a00:1",
            "fec0::1",
            "100::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::101:101",
            "::1.1.1.1",
            "2002:101:101::1",
            "2001:db9::5efe:101:101",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn a_granted_name_that_resolves_inside_is_refused() {
        let dns = fake_dns(&[
            ("rebind.example", "127.0.0.1"),
            ("metadata.example", "169.254.169.254"),
            ("compat.example", "::127.0.0.1"),
            ("sixtofour.example", "2002:a9fe:a9fe::1"),
            ("mixed.example", "10.0.0.7"),
            ("mixed.example", "93.184.216.34"),
            ("public.example", "93.184.216.34"),
            ("localhost", "127.0.0.1"),
            ("localhost", "93.184.216.34"),
        ]);
        for host in [
            "rebind.example",
            "metadata.example",
            "compat.example",
            "sixtofour.example",
        ] {
            let Unreachable {
                guest,
                why: e,
                refused,
            } = checked_addresses(host, 80, &dns).await.unwrap_err();
            assert!(
                matches!(guest, HttpError::DestinationIpProhibited),
                "{guest:?}"
            );
            assert!(e.contains("not a public address"), "{e}");
            assert!(e.contains("grant the address itself"), "{e}");
            let line = refused.expect("a refusal for the report");
            assert!(
                line.starts_with(&format!("dns: {host} resolves to a private address ")),
                "{line}"
            );
        }
        let Unreachable {
            guest,
            why: e,
            refused,
        } = checked_addresses("nowhere.example", 80, &dns)
            .await
            .unwrap_err();
        assert!(matches!(guest, HttpError::DestinationNotFound), "{guest:?}");
        assert!(e.contains("does not resolve"), "{e}");
        assert_eq!(
            refused, None,
            "a name that resolves to nothing is not refused"
        );
        assert_eq!(
            checked_addresses("rebind.example", 80, &dns)
                .await
                .unwrap_err()
                .refused
                .as_deref(),
            Some("dns: rebind.example resolves to a private address 127.0.0.1")
        );
        // Only the public answer of a mixed name is used.
        assert_eq!(
            checked_addresses("mixed.example", 443, &dns).await.unwrap(),
            vec!["93.184.216.34:443".parse().unwrap()]
        );
        assert_eq!(
            checked_addresses("public.example", 80, &dns).await.unwrap(),
            vec!["93.184.216.34:80".parse().unwrap()]
        );
        // `localhost` means this machine, and only this machine.
        assert_eq!(
            checked_addresses("localhost", 8080, &dns).await.unwrap(),
            vec!["127.0.0.1:8080".parse().unwrap()]
        );
        // An address named by the grant itself is taken as is, without DNS.
        assert_eq!(
            checked_addresses("10.0.0.5", 8080, &dns).await.unwrap(),
            vec!["10.0.0.5:8080".parse().unwrap()]
        );
        assert_eq!(
            checked_addresses("[::1]", 8080, &dns).await.unwrap(),
            vec!["[::1]:8080".parse().unwrap()]
        );
    }
}
