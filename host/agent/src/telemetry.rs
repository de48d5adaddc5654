//! `[telemetry]`: traces of turns, model requests, approvals and tool calls sent over OTLP/HTTP
//! to a collector (the OpenTelemetry Collector, Jaeger, Tempo, a tracing service). Off unless
//! an endpoint is set here or in `OTEL_EXPORTER_OTLP_ENDPOINT`.
//!
//! What a span carries is chosen so that a trace store never holds what the audit log keeps
//! back: names, ids, decisions, outcomes and sizes, never a call's arguments, a result, a
//! message or a model's text. A collector's key is no setting here, kept out of a file others
//! read: the exporter takes `OTEL_EXPORTER_OTLP_HEADERS` from the environment, as every
//! OpenTelemetry SDK does.

use serde::{Deserialize, Serialize};

/// A setting out of range: the key and what to use instead.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting `{field}`: {message}")]
pub struct InvalidTelemetry {
    /// The key, e.g. `telemetry.otlp_endpoint`.
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// Where traces go and how many.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP endpoint, e.g. `http://127.0.0.1:4318`; spans go to its `/v1/traces`.
    /// Unset: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` when the
    /// environment sets one (as for any OpenTelemetry SDK), else no traces.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` the spans carry; unset: `OTEL_SERVICE_NAME`, else `cordon`.
    pub service_name: Option<String>,
    /// The share of traces kept, 0.0–1.0. A request that arrives in a client's trace
    /// follows that trace's own decision.
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: None,
            sample_ratio: 1.0,
        }
    }
}

impl TelemetryConfig {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), InvalidTelemetry> {
        let invalid = |field: &str, message: String| InvalidTelemetry {
            field: format!("telemetry.{field}"),
            message,
        };
        if let Some(endpoint) = &self.otlp_endpoint {
            match url::Url::parse(endpoint) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
                _ => {
                    return Err(invalid(
                        "otlp_endpoint",
                        format!(
                            "`{endpoint}` is not an http:// or https:// URL; use e.g. \
                             http://127.0.0.1:4318 (an OTLP/HTTP receiver)"
                        ),
                    ));
                }
            }
        }
        if self
            .service_name
            .as_ref()
            .is_some_and(|n| n.trim().is_empty())
        {
            return Err(invalid("service_name", "is empty; e.g. `cordon`".into()));
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(invalid(
                "sample_ratio",
                format!("{} is outside 0.0–1.0", self.sample_ratio),
            ));
        }
        Ok(())
    }

    /// Where spans are sent, when anywhere, not yet checked (see [`TelemetryConfig::check_url`]):
    /// this setting's endpoint, else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT`; an
    /// endpoint (not the traces' own URL) gets `/v1/traces`, as OpenTelemetry's SDKs do.
    /// `None` also when `OTEL_SDK_DISABLED=true`.
    pub fn traces_url(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        let set = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        if set(env("OTEL_SDK_DISABLED")).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        let joined = |base: String| format!("{}/v1/traces", base.trim_end_matches('/'));
        set(self.otlp_endpoint.clone())
            .map(joined)
            .or_else(|| set(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")))
            .or_else(|| set(env("OTEL_EXPORTER_OTLP_ENDPOINT")).map(joined))
    }
}

/// Checks the URL spans go to ([`TelemetryConfig::traces_url`]), which the environment may
/// have named, and the protocol the environment asks for: Cordon sends OTLP over HTTP only.
pub fn check_url(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<(), InvalidTelemetry> {
    let invalid = |message: String| InvalidTelemetry {
        field: "telemetry.otlp_endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT)".into(),
        message,
    };
    match url::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {}
        _ => {
            return Err(invalid(format!(
                "`{url}` is not an http:// or https:// URL; use e.g. http://127.0.0.1:4318"
            )));
        }
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = env(name).filter(|p| !p.trim().is_empty())
            && protocol.trim() != "http/protobuf"
        {
            return Err(InvalidTelemetry {
                field: name.to_string(),
                message: format!(
                    "`{protocol}`: Cordon sends OTLP over HTTP (http/protobuf) only; point it \
                     at the collector's HTTP port (4318 by convention) and unset {name}"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> TelemetryConfig {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        let none = |_: &str| None;
        assert_eq!(TelemetryConfig::default().traces_url(none), None);
        let set = config("otlp_endpoint = 'http://127.0.0.1:4318/'");
        assert_eq!(
            set.traces_url(none).as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://c:4318".into());
        assert_eq!(
            TelemetryConfig::default().traces_url(env).as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let traces = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" => Some("http://t/x".into()),
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://c:4318".into()),
            _ => None,
        };
        assert_eq!(
            TelemetryConfig::default().traces_url(traces).as_deref(),
            Some("http://t/x")
        );
        let disabled = |k: &str| (k == "OTEL_SDK_DISABLED").then(|| "TRUE".into());
        assert_eq!(set.traces_url(disabled), None);
    }

    #[test]
    fn bad_settings_are_named() {
        for (toml, field) in [
            (
                "otlp_endpoint = 'localhost:4318'",
                "telemetry.otlp_endpoint",
            ),
            ("otlp_endpoint = 'grpc://c:4317'", "telemetry.otlp_endpoint"),
            ("service_name = ' '", "telemetry.service_name"),
            ("sample_ratio = 1.5", "telemetry.sample_ratio"),
        ] {
            let error = config(toml).validate().unwrap_err();
            assert_eq!(error.field, field, "{toml}");
        }
        config("otlp_endpoint = 'https://api.example.com'")
            .validate()
            .unwrap();
    }

    #[test]
    fn what_the_environment_names_is_checked_too() {
        let none = |_: &str| None;
        check_url("http://127.0.0.1:4318/v1/traces", none).unwrap();
        let error = check_url("127.0.0.1:4318/v1/traces", none).unwrap_err();
        assert!(error.message.contains("http://"), "{error}");
        let grpc = |k: &str| (k == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "grpc".to_string());
        let error = check_url("http://c:4317/v1/traces", grpc).unwrap_err();
        assert_eq!(error.field, "OTEL_EXPORTER_OTLP_PROTOCOL");
        let http = |k: &str| (k == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "http/protobuf".into());
        check_url("http://c:4318/v1/traces", http).unwrap();
    }
}
