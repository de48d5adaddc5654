//! One span per HTTP request (exported only with `[telemetry]`), named as OpenTelemetry's HTTP
//! conventions name a server span (`POST /v1/chat/completions`: the route, never the path with
//! its ids), continuing the trace a client sent in `traceparent`. A turn a request starts is
//! driven under it, so the client's trace holds the turn, its model requests and its calls.
//! Health checks and scrapes make none: they come every few seconds and say nothing.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

/// Runs `request` inside its span.
pub(crate) async fn traced(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    let Some(route) = route.filter(|r| !matches!(r.as_str(), "/api/v1/health" | "/metrics")) else {
        return next.run(request).await;
    };
    let span = tracing::info_span!(
        "http",
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %request.method(),
        http.route = %route,
        http.response.status_code = Empty,
    );
    cordon_core::trace::continue_trace(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response
}
