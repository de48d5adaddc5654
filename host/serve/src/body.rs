//! Request bodies as the API takes them.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body whose errors say what was wrong and what was expected.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            ApiError::bad_request(format!("cannot read the request body: {}", e.body_text()))
        })?;
        let text = if bytes.iter().all(u8::is_ascii_whitespace) {
            &b"{}"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(text)
            .map(Body)
            .map_err(|e| ApiError::bad_request(format!("the body is not the JSON expected: {e}")))
    }
}
