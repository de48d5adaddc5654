//! Errors of the HTTP API: a status and a message that says what was wrong and what to do,
//! as `{"error": {"kind": …, "message": …}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cordon_store::StoreError;
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A word for programs: `not_found`, `conflict`, `bad_request`, `unavailable`, `internal`.
    pub kind: &'static str,
    /// What was wrong and what to do.
    pub message: String,
    /// Seconds for a `Retry-After` header: when trying again may succeed.
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// 400: the request itself is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404: what the request names does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 403: the caller's token lacks a scope the request needs ([`crate::auth`]).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 409: the request does not fit the current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 503: the host cannot do it now (shutting down, store away).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 503 with `Retry-After`: the host has no place for this now ([`crate::admission`]).
    pub(crate) fn busy(refused: crate::admission::Refused) -> Self {
        cordon_core::metrics::request_refused("busy");
        Self {
            retry_after_secs: Some(refused.retry_after_secs),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy", refused.message)
        }
    }

    /// 429 with `Retry-After`: the caller's token is past its rate.
    pub(crate) fn rate_limited(refused: crate::admission::Refused) -> Self {
        cordon_core::metrics::request_refused("rate");
        Self {
            retry_after_secs: Some(refused.retry_after_secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                refused.message,
            )
        }
    }

    /// 500: something failed on the host's side.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            retry_after_secs: None,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let message = e.to_string();
        match e {
            StoreError::UnknownSession { .. } | StoreError::UnknownApproval { .. } => {
                ApiError::not_found(message)
            }
            StoreError::ApprovalAnswered { .. } | StoreError::ApprovalExpired { .. } => {
                ApiError::conflict(message)
            }
            StoreError::SessionExists { .. }
            | StoreError::Busy { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::NotIdle { .. } => ApiError::conflict(message),
            StoreError::BadSessionId { .. } | StoreError::BadUrl { .. } => {
                ApiError::bad_request(message)
            }
            StoreError::Database { .. } | StoreError::Open { .. } => ApiError::unavailable(message),
            StoreError::Create { .. }
            | StoreError::Migrate { .. }
            | StoreError::Corrupt { .. }
            | StoreError::Unkept { .. } => ApiError::internal(message),
            StoreError::KeptFull { .. } => ApiError::conflict(message),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"kind": self.kind, "message": self.message}});
        with_retry_after(
            (self.status, Json(body)).into_response(),
            self.retry_after_secs,
        )
    }
}

/// `response` with a `Retry-After` of `secs`, when there is one: every answer that tells a
/// client to come back later says when the same way.
pub(crate) fn with_retry_after(mut response: Response, secs: Option<u64>) -> Response {
    if let Some(secs) = secs {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    response
}
