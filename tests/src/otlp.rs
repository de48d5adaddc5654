//! An OTLP/HTTP trace receiver on 127.0.0.1: what a collector (the OpenTelemetry Collector,
//! Jaeger, Tempo) is sent, decoded with OpenTelemetry's own protobuf messages
//! (`opentelemetry-proto`), so a test sees the spans exactly as a collector would. It keeps
//! every body raw too, so a test can show that something never left Cordon.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// One span as received, with the attributes a test reads.
#[derive(Debug, Clone)]
pub struct Span {
    /// The span's name (`turn`, `chat scripted`, `execute_tool probe_fs`, …).
    pub name: String,
    /// The trace, in hex.
    pub trace_id: String,
    /// The span, in hex.
    pub span_id: String,
    /// Its parent (empty for a root), in hex.
    pub parent_id: String,
    /// Its kind as OTLP numbers it (2: server, 3: client, 1: internal).
    pub kind: i32,
    /// Its status code (0: unset, 1: ok, 2: error).
    pub status: i32,
    /// Its attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// The `service.name` of the resource that sent it.
    pub service: String,
}

impl Span {
    /// The attribute `key` (empty when absent).
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map(String::as_str).unwrap_or("")
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    bodies: Vec<Vec<u8>>,
    refused: Vec<String>,
}

/// The receiver; stops when dropped. It runs on a runtime of its own, so it may be started
/// and dropped from a test's thread and from inside another runtime alike.
pub struct Collector {
    /// `http://127.0.0.1:PORT`: the OTLP endpoint (spans go to its `/v1/traces`).
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Collector {
    /// Starts a receiver on a free port.
    pub fn start() -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the collector");
        let received = Arc::new(Mutex::new(Received::default()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        listener.set_nonblocking(true).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
            let _ = axum::serve(listener, app).await;
        });
        Collector {
            endpoint,
            received,
            runtime: Some(runtime),
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received.lock().unwrap().spans.clone()
    }

    /// Whether any body received holds `text`, in any field.
    pub fn saw(&self, text: &str) -> bool {
        let needle = text.as_bytes();
        self.received
            .lock()
            .unwrap()
            .bodies
            .iter()
            .any(|b| b.windows(needle.len()).any(|w| w == needle))
    }

    /// Exports that were not OTLP protobuf, with why.
    pub fn refused(&self) -> Vec<String> {
        self.received.lock().unwrap().refused.clone()
    }

    /// The spans once `ready` says they are all there, within `within`.
    pub fn wait_for(&self, within: Duration, ready: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let spans = self.spans();
            if ready(&spans) {
                return spans;
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "the spans did not arrive within {within:?}; received: {:#?}",
                    spans
                        .iter()
                        .map(|s| (&s.name, &s.parent_id, &s.span_id))
                        .collect::<Vec<_>>()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

async fn export(
    State(received): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut received = received.lock().unwrap();
    if content_type != "application/x-protobuf" {
        received
            .refused
            .push(format!("content-type `{content_type}`"));
        return StatusCode::UNSUPPORTED_MEDIA_TYPE;
    }
    let request = match ExportTraceServiceRequest::decode(body.as_ref()) {
        Ok(request) => request,
        Err(e) => {
            received.refused.push(e.to_string());
            return StatusCode::BAD_REQUEST;
        }
    };
    received.bodies.push(body.to_vec());
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .and_then(|a| a.value.as_ref())
            .map(text)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(Span {
                    name: span.name,
                    trace_id: hex::encode(span.trace_id),
                    span_id: hex::encode(span.span_id),
                    parent_id: hex::encode(span.parent_span_id),
                    kind: span.kind,
                    status: span.status.map(|s| s.code).unwrap_or(0),
                    attributes: span
                        .attributes
                        .iter()
                        .filter_map(|a| Some((a.key.clone(), text(a.value.as_ref()?))))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    StatusCode::OK
}

fn text(value: &opentelemetry_proto::tonic::common::v1::AnyValue) -> String {
    match &value.value {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}
