//! One span per authenticated API, gateway and `/mcp` request (exported only with
//! `[telemetry]`), named as OpenTelemetry's HTTP conventions name a server span (`POST
//! /v1/chat/completions`: the route, never the path with its ids), continuing the trace the
//! client sent in `traceparent`. A turn the request starts runs in its trace, and an MCP
//! call's span is its child.
//!
//! It runs after the token is checked: a client Cordon does not know neither chooses a trace
//! id nor makes a span. The console's files, sign-in, health checks and `/metrics` scrapes
//! make none.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

/// Runs `request` inside its span.
pub(crate) async fn traced(mut request: Request, next: Next) -> Response {
    let Some(route) = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
    else {
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
    let parent = span.in_scope(cordon_core::trace::Parent::current);
    request.extensions_mut().insert(parent);
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response
}
