//! Trace context at Cordon's edges (W3C Trace Context, `traceparent`/`tracestate`).
//!
//! A client that traces its own work (an agent framework, an MCP client) sends a `traceparent`;
//! the span Cordon opens for that request continues the client's trace, so one trace shows the
//! agent's step, Cordon's turn and every model request and tool call under it. A model request
//! carries Cordon's context on to the model server the same way.
//!
//! Both are no-ops until the binary installs a propagator, which it does only when traces are
//! exported (`[telemetry]`): otherwise no header is read and none is written.

use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes the trace a request's headers name the parent of `span`, which must be new (not yet
/// entered). Headers that name no valid trace leave `span` where it is.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    let context = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    });
    if context.span().span_context().is_valid() {
        // Fails only when no trace layer is installed or the span is disabled: nothing to join.
        let _ = span.set_parent(context);
    }
}

/// Writes the current span's trace context into `headers`, for a request Cordon sends.
pub fn pass_on(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_propagator_nothing_is_read_or_written() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        let span = tracing::info_span!("request");
        continue_trace(&span, &headers);
        let mut out = http::HeaderMap::new();
        pass_on(&mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}
