//! Sends the spans Cordon's crates make (turns, model requests, approvals, tool calls, HTTP
//! requests) over OTLP/HTTP when `[telemetry]` or the environment names an endpoint
//! (`cordon_agent::telemetry`). Without one, no layer is installed: spans are disabled at
//! their call sites and cost nothing.
//!
//! Only spans go out, and only Cordon's: log events (a plugin's log records among them) stay
//! in the log, and dependencies' spans stay out of the trace.

use std::time::Duration;

use anyhow::Context;
use cordon_agent::telemetry::TelemetryConfig;
use opentelemetry::trace::TracerProvider;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

use crate::errln;

/// How long one export may take: also how long a command may wait at exit for the last
/// spans when the collector does not answer.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The exporter in use; dropping it sends what is still buffered.
pub struct Exporting {
    provider: SdkTracerProvider,
    url: String,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
            errln!(
                "cordon: the last spans could not be sent to {}: {e}",
                self.url
            );
        }
    }
}

/// The layer that exports spans, and the exporter to keep until the process ends; `None`
/// when no endpoint is set.
pub fn start<S>(
    config: &TelemetryConfig,
) -> anyhow::Result<Option<(impl Layer<S> + use<S>, Exporting)>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let env = |name: &str| std::env::var(name).ok();
    let Some(url) = config.traces_url(env) else {
        return Ok(None);
    };
    cordon_agent::telemetry::check_url(&url, env)?;
    // The exporter's client may reach an https:// collector; rustls needs its provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Headers (a tracing service's key) come from OTEL_EXPORTER_OTLP_HEADERS, which the
    // exporter reads itself.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .with_context(|| format!("cannot send traces to {url}"))?;
    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty());
    match &config.service_name {
        Some(name) => resource = resource.with_service_name(name.clone()),
        None if !named => resource = resource.with_service_name("cordon"),
        None => {}
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sample_ratio,
        ))))
        .with_resource(resource.build())
        .build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("cordon"))
        .with_threads(false)
        // Busy and idle time would take two clock reads at every poll of every span's
        // future; a span's own start and end say what a trace needs.
        .with_tracked_inactivity(false)
        .with_filter(
            filter_fn(|meta| {
                meta.is_span()
                    && *meta.level() <= tracing::Level::INFO
                    && meta.target().starts_with("cordon")
            })
            // Without it every debug and trace call site of every crate would be looked at
            // again at each call (wasmtime's among them, many per instantiation).
            .with_max_level_hint(tracing::Level::INFO),
        );
    Ok(Some((layer, Exporting { provider, url })))
}
