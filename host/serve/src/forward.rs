//! Passing a request on to the host that drives its session, for what only that host can
//! answer: the results of a gateway client's own tools, awaited by the turn that asked for
//! them in that host's memory, and a session's live events. On a store several hosts share,
//! a host that such a request reaches (a load balancer spreading requests) passes it on,
//! once: a request passed on is never passed on again.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;

use crate::host::Host;

/// Marks a request passed on by another host (its name in leases).
pub(crate) const FORWARDED_HEADER: &str = "x-cordon-forwarded-by";

/// The address of the other host that drives session `id`'s turn now, if one does (it
/// holds the lease) and said where it is reached; none for a request passed on already.
pub(crate) async fn driving_host(host: &Host, id: &str, headers: &HeaderMap) -> Option<String> {
    if headers.contains_key(FORWARDED_HEADER) || !host.store().is_shared() {
        return None;
    }
    let info = host.store().session(id).await.ok()?;
    let lease = info
        .lease
        .filter(|l| l.until_ms > cordon_core::now_ms() && l.holder != host.store().holder())?;
    host.store().host_url(&lease.holder).await.ok().flatten()
}

/// A request to pass on: its method, path, the headers it keeps (of `headers`) and body.
pub(crate) struct Passed<'a> {
    pub method: Method,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub keep: &'a [&'a str],
    pub body: Bytes,
}

/// Sends `passed` to the host at `url`, and its answer back as it streams; `Err` says why
/// that host could not be reached.
pub(crate) async fn forward(
    host: &Host,
    url: &str,
    passed: Passed<'_>,
) -> Result<Response, String> {
    let unreachable = |e: String| {
        format!(
            "the host driving this session ({url}) could not be reached ({e}); send the \
             request again"
        )
    };
    // One client for the process: its connections to the other hosts are kept and reused.
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = match CLIENT.get() {
        Some(client) => client,
        None => {
            let built = reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(5))
                .build()
                .map_err(|e| unreachable(e.to_string()))?;
            CLIENT.get_or_init(|| built)
        }
    };
    // The host passed to continues this request's trace.
    let mut trace = reqwest::header::HeaderMap::new();
    cordon_core::trace::pass_on(&mut trace);
    let mut request = client
        .request(passed.method, format!("{url}{}", passed.path))
        .headers(trace)
        .header(FORWARDED_HEADER, host.store().holder())
        .body(passed.body);
    for name in passed.keep {
        if let Some(value) = passed.headers.get(*name) {
            request = request.header(*name, value);
        }
    }
    let answer = request
        .send()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let mut response = Response::builder().status(answer.status().as_u16());
    // Its headers but those of the connection it came over.
    for (name, value) in answer.headers() {
        if ![
            header::CONNECTION,
            header::TRANSFER_ENCODING,
            header::CONTENT_LENGTH,
        ]
        .contains(name)
        {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .map_err(|e| unreachable(e.to_string()))
}
