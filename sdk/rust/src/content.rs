//! What a tool returns: text and JSON pieces, and the conversions that build them.

use serde::Serialize;

use crate::ToolError;

/// One piece of a tool's result, mirroring the WIT `content` variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Plain text meant to be read by a person or a model.
    Text(String),
    /// A JSON document, as JSON text, for structured results.
    Json(String),
}

impl Content {
    /// A text piece.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// A JSON piece serialised from `value`; fails only if `value` cannot be represented as
    /// JSON (for example a map with non-string keys).
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self, ToolError> {
        Ok(Self::Json(serde_json::to_string(value)?))
    }
}

impl From<Content> for crate::bindings::cordon::tool::types::Content {
    fn from(content: Content) -> Self {
        use crate::bindings::cordon::tool::types::Content as Wit;
        match content {
            Content::Text(t) => Wit::Text(t),
            Content::Json(j) => Wit::Json(j),
        }
    }
}

/// Wraps a serialisable value so a tool can return it directly as one JSON piece.
///
/// `Ok(Json(my_struct))` saves writing `Content::json(&my_struct)?` in every tool.
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

/// Anything a tool function may return on success.
///
/// Implemented for text (`String`, `&str`), a single [`Content`], a list of them, a
/// `serde_json::Value` and [`Json`]; implement it for your own type to return it directly.
pub trait IntoContents {
    /// Converts into the pieces sent back to the host.
    fn into_contents(self) -> Result<Vec<Content>, ToolError>;
}

impl IntoContents for Vec<Content> {
    fn into_contents(self) -> Result<Vec<Content>, ToolError> {
        Ok(self)
    }
}

impl IntoContents for Content {
    fn into_contents(self) -> Result<Vec<Content>, ToolError> {
        Ok(vec![self])
    }
}

impl IntoContents for String {
    fn into_contents(self) -> Result<Vec<Content>, ToolError> {
        Ok(vec![Content::Text(self)])
    }
}

impl IntoContents for &str {
    fn into_contents(self) -> Result<Vec<Content>, ToolError> {
        Ok(vec![Content::Text(self.to_owned())])
    }
}

impl IntoContents for serde_json::Value {
    fn into_contents(self) -> Result<Vec<Content>, ToolError> {
        Ok(vec![Content::json(&self)?])
    }
}

impl<T: Serialize> IntoContents for Json<T> {
    fn into_contents(self) -> Result<Vec<Content>, ToolError> {
        Ok(vec![Content::json(&self.0)?])
    }
}
