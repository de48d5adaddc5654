//! Routes of the model server that involve no tools, forwarded: `POST /v1/completions` and
//! `POST /v1/embeddings`, so one base URL serves an IDE's chat (through Cordon's sessions), its
//! completions and its embeddings.
//!
//! What is forwarded, in order:
//! 1. The model must be one the gateway offers (`[gateway.models]`, else `llm.model`): it is
//!    sent as the upstream model it stands for, and any other name is a 404, as for chat, so
//!    a client cannot pick models on the operator's key.
//! 2. For completions, `[gateway.parameters]` applies as for chat to the fields they share:
//!    `refuse`, `drop`, the `max_tokens` ceiling (also when the request sets no limit) and
//!    the `temperature` range; `n` and
//!    `best_of` above 1 are refused (one answer per request).
//! 3. The rest of the body goes unchanged, with Cordon's upstream key, never the client's
//!    token. The upstream's status, content type and body (streamed, as it arrives) come
//!    back, except that its refusing Cordon's own key is a 502: the client's token is fine.
//!    Nothing is kept, and a client that goes away closes the upstream request.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cordon_agent::GatewayParameters;
use futures::TryStreamExt;
use serde_json::{Map, Value};

use super::request::{json_object, model_of};
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
    let (_, upstream_model) = model_of(&value, &config.gateway.offered(&config.llm.model))?;
    value.insert("model".into(), Value::String(upstream_model));
    if route == "completions" {
        bound(&mut value, &config.gateway.parameters)?;
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
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(GatewayError::upstream(format!(
            "the model server refused Cordon's own key for /v1/{route} (HTTP {status}); the \
             operator must check `llm.api_key_env`"
        )));
    }
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

/// `[gateway.parameters]` on a completions request (see the module's rule 2).
fn bound(body: &mut Map<String, Value>, bounds: &GatewayParameters) -> Result<(), GatewayError> {
    if let Some(name) = bounds.refuse.iter().find(|r| body.contains_key(*r)) {
        return Err(super::parameters::refused(name));
    }
    body.retain(|name, _| !bounds.drop.contains(name));
    for name in ["n", "best_of"] {
        if body
            .get(name)
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 1)
        {
            return Err(GatewayError::invalid(
                name,
                format!("`{name}` above 1 is not forwarded: one answer per request"),
            ));
        }
    }
    // No `[llm] max_tokens` applies here: a ceiling also bounds a request that sets none.
    if let Some(ceiling) = bounds.max_tokens {
        let asked = body.get("max_tokens").and_then(Value::as_u64);
        let limit = bounds.max_tokens_within(asked.unwrap_or(u64::from(ceiling)));
        body.insert("max_tokens".into(), Value::from(limit));
    }
    if let (Some(_), Some(t)) = (
        bounds.temperature,
        body.get("temperature").and_then(Value::as_f64),
    ) {
        body.insert(
            "temperature".into(),
            Value::from(bounds.temperature_within(t)),
        );
    }
    Ok(())
}
