//! Passing a request on to the host that drives its session: the results of a gateway
//! client's own tools are awaited by the turn that asked for them, in the memory of the host
//! driving it, and the rest of that turn streams from there. On a store several hosts share,
//! a host that such a request reaches (a load balancer spreading requests) passes it on,
//! once: a request passed on is never passed on again.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use super::{GatewayError, SESSION_HEADER, TOOL_EVENTS_HEADER};
use crate::host::Host;

/// Marks a request passed on by another host (its name in leases).
pub(super) const FORWARDED_HEADER: &str = "x-cordon-forwarded-by";

/// The headers a request passed on keeps: who sends it, what it is, what it asks for.
const KEPT: [&str; 5] = [
    "authorization",
    "content-type",
    "accept",
    SESSION_HEADER,
    TOOL_EVENTS_HEADER,
];

/// The address of the other host that drives session `id`'s turn now, if one does (it
/// holds the lease) and said where it is reached; none for a request passed on already.
pub(super) async fn driving_host(host: &Host, id: &str, headers: &HeaderMap) -> Option<String> {
    if headers.contains_key(FORWARDED_HEADER) || !host.store().is_shared() {
        return None;
    }
    let info = host.store().session(id).await.ok()?;
    let lease = info
        .lease
        .filter(|l| l.until_ms > cordon_core::now_ms() && l.holder != host.store().holder())?;
    host.store().host_url(&lease.holder).await.ok().flatten()
}

/// Sends the request (`path`, its kept `headers`, `body`) to the host at `url`, and its
/// answer back as it streams.
pub(super) async fn forward(
    host: &Host,
    url: &str,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, GatewayError> {
    let unreachable = |e: String| GatewayError {
        status: StatusCode::BAD_GATEWAY,
        kind: "service_unavailable",
        code: Some("host_unreachable"),
        param: None,
        message: format!(
            "the host driving this session ({url}) could not be reached ({e}); send the \
             request again"
        ),
        retry_after_secs: Some(1),
    };
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(|e| unreachable(e.to_string()))?;
    let mut request = client
        .post(format!("{url}{path}"))
        .header(FORWARDED_HEADER, host.store().holder())
        .body(body);
    for name in KEPT {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value);
        }
    }
    let answer = request
        .send()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let mut response = Response::builder().status(answer.status().as_u16());
    for name in [
        header::CONTENT_TYPE.as_str(),
        header::CACHE_CONTROL.as_str(),
        header::RETRY_AFTER.as_str(),
        SESSION_HEADER,
    ] {
        if let Some(value) = answer.headers().get(name) {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .map_err(|e| unreachable(e.to_string()))
}
