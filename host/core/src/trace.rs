//! Trace context at Cordon's edges (W3C Trace Context, `traceparent`/`tracestate`).
//!
//! A client that traces its own work (an agent framework, an MCP client) sends a `traceparent`;
//! the span Cordon opens for that request continues the client's trace, so one trace shows the
//! agent's step, Cordon's turn and every model request and tool call under it. A model request
//! carries Cordon's context on to the model server the same way.
//!
//! All of it is a no-op until the binary installs a propagator and the trace layer, which it
//! does only when traces are exported (`[telemetry]`): otherwise no header is read and none is
//! written.

use std::future::Future;

use opentelemetry::Context;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes the trace a request's headers name the parent of `span`, which must be new (not yet
/// entered). Headers that name no valid trace leave `span` where it is. Only for requests
/// whose sender is known (an authenticated one): the headers choose the trace id and whether
/// it is kept.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    let context = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    });
    adopt(span, context);
}

/// Writes the current span's trace context into `headers`, for a request Cordon sends.
pub fn pass_on(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers))
    });
}

/// Runs `future` in the current span's trace without entering the span, for work a request
/// starts that outlives it (a turn): spans it makes are children of the request's, and the
/// request's span still ends with the request.
pub fn in_current_trace<F: Future>(future: F) -> impl Future<Output = F::Output> {
    future.with_context(tracing::Span::current().context())
}

/// The trace a served request runs in, kept in its extensions for handlers that run apart
/// from the request's own span (an MCP session's task).
#[derive(Clone, Debug)]
pub struct Parent(Context);

impl Parent {
    /// The current span's trace.
    pub fn current() -> Parent {
        Parent(tracing::Span::current().context())
    }

    /// Makes this trace the parent of `span`, which must be new.
    pub fn adopt(&self, span: &tracing::Span) {
        adopt(span, self.0.clone());
    }
}

fn adopt(span: &tracing::Span, context: Context) {
    if context.span().span_context().is_valid() {
        // Fails only when no trace layer is installed or the span is disabled: nothing to join.
        let _ = span.set_parent(context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider;
    use tracing_subscriber::layer::SubscriberExt;

    const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

    fn traceparent_of(headers: &http::HeaderMap) -> Option<String> {
        headers
            .get("traceparent")
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn a_clients_trace_is_continued_and_passed_on_only_with_a_propagator() {
        let mut sent = http::HeaderMap::new();
        sent.insert(
            "traceparent",
            format!("00-{CLIENT_TRACE}-b7ad6b7169203331-01")
                .parse()
                .unwrap(),
        );
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            // The trace layer alone reads and writes nothing.
            let span = tracing::info_span!("request");
            continue_trace(&span, &sent);
            let mut out = http::HeaderMap::new();
            span.in_scope(|| pass_on(&mut out));
            assert!(out.is_empty(), "{out:?}");

            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
            let span = tracing::info_span!("request");
            continue_trace(&span, &sent);
            let mut out = http::HeaderMap::new();
            span.in_scope(|| pass_on(&mut out));
            let passed = traceparent_of(&out).expect("a traceparent passed on");
            let parts: Vec<&str> = passed.split('-').collect();
            assert_eq!(parts[1], CLIENT_TRACE, "{passed}");
            assert_ne!(
                parts[2], "b7ad6b7169203331",
                "the request's own span: {passed}"
            );

            // A malformed traceparent starts a trace of Cordon's own.
            let mut bad = http::HeaderMap::new();
            bad.insert("traceparent", "00-zz-yy-01".parse().unwrap());
            let span = tracing::info_span!("request");
            continue_trace(&span, &bad);
            let mut out = http::HeaderMap::new();
            span.in_scope(|| pass_on(&mut out));
            let passed = traceparent_of(&out).expect("a traceparent passed on");
            assert!(!passed.contains(CLIENT_TRACE), "{passed}");
        });
    }
}
