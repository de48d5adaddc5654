//! `/metrics`: the numbers of [`cordon_core::metrics`] in Prometheus' text format, for a
//! scraper holding a token with the scope `metrics` (rule 6 of [`crate::auth`]).
//!
//! The recorder is the process's, installed by the first host a process starts (tests start
//! several), so every host of a process shows the same counts. Gauges (sessions open,
//! questions waiting) are read from the host when scraped rather than kept up to date on
//! every change.

use std::sync::OnceLock;

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::auth::{Caller, Scopes};
use crate::error::ApiError;
use crate::state::AppState;

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder, once a process; `None` when another recorder was
/// installed first (an embedder's), whose numbers this host then does not show.
pub(crate) fn install() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let mut builder = PrometheusBuilder::new();
            for name in cordon_core::metrics::HISTOGRAMS {
                builder = builder
                    .set_buckets_for_metric(
                        Matcher::Full(name.to_string()),
                        &cordon_core::metrics::BUCKETS,
                    )
                    .ok()?;
            }
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            match metrics::set_global_recorder(recorder) {
                Ok(()) => {
                    cordon_core::metrics::describe();
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!("/metrics shows nothing: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// `GET /metrics`.
pub(crate) async fn scrape(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    caller.require(Scopes::METRICS, "read /metrics")?;
    let Some(handle) = install() else {
        return Err(ApiError::unavailable(
            "this process recorded its numbers elsewhere (another metrics recorder was \
             installed first)",
        ));
    };
    let waiting = state.host.pending().await.len();
    cordon_core::metrics::gauges(state.host.live_count(), waiting);
    // Histograms' buckets are kept for the recorder's whole life; nothing to drain here.
    handle.run_upkeep();
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response())
}
