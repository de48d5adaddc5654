//! Routes of the model server that involve no tools, forwarded: `POST /v1/completions` and
//! `POST /v1/embeddings`, so one base URL serves an IDE's chat (through Cordon's sessions), its
//! completions and its embeddings.
//!
//! The body goes to the upstream unchanged but for `model`: a name `[gateway.models]` maps is
//! sent as the upstream model it stands for, any other name as sent. The request carries
//! Cordon's upstream key, never the client's token. The upstream's status, content type and
//! body (streamed, as it arrives) come back unchanged; nothing is kept, and a client that
//! goes away closes the upstream request.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use serde_json::Value;

use super::request::json_object;
use super::{GatewayError, GatewayState, MAX_BODY};

/// `POST /v1/completions`.
pub(super) async fn completions(State(state): State<GatewayState>, request: Request) -> Response {
    forward(&state, "completions", request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/embeddings`.
pub(super) async fn embeddings(State(state): State<GatewayState>, request: Request) -> Response {
    forward(&state, "embeddings", request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn forward(
    state: &GatewayState,
    route: &str,
    request: Request,
) -> Result<Response, GatewayError> {
    let upstream = state.upstream.as_ref().as_ref().map_err(|e| {
        GatewayError::upstream(format!(
            "cannot reach the model server for /v1/{route}: {e}"
        ))
    })?;
    let body: Bytes = axum::body::to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|e| {
            GatewayError::invalid(
                "",
                format!("the body could not be read ({e}); at most 1 MiB"),
            )
        })?;
    let mut value = json_object(&body)?;
    let config = &state.host.options.config;
    if let Some(model) = value.get("model").and_then(Value::as_str)
        && let Some((_, real)) = config
            .gateway
            .offered(&config.llm.model)
            .into_iter()
            .find(|(name, _)| name == model)
    {
        value.insert("model".into(), Value::String(real));
    }
    let sent = upstream
        .forward(route, Value::Object(value).to_string().into_bytes())
        .send()
        .await
        .map_err(|e| {
            GatewayError::upstream(format!(
                "cannot reach the model server for /v1/{route}: {}",
                cordon_agent::llm::error_chain(&e)
            ))
        })?;
    let status = StatusCode::from_u16(sent.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = sent
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
    let stream = sent.bytes_stream().map_err(std::io::Error::other);
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
    }
    Ok(response)
}
