//! The error a tool returns, mirroring the WIT `tool-error` variants.

use std::io;

/// Why a tool call failed.
///
/// The variant tells the host and the model what kind of failure it was (so the model knows
/// whether to fix its arguments, look for something else, or give up); the message is shown
/// to both, so it should say what was wrong and what to do instead.
///
/// Convert your own error type with `impl From<MyError> for ToolError`, then return
/// `Result<_, MyError>` from the tool function; `std::io::Error` and `serde_json::Error`
/// convert out of the box.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments did not fit the tool (wrong type, missing field, bad value).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// Something named in the arguments does not exist (a file, a table, a tool name).
    #[error("not found: {0}")]
    NotFound(String),
    /// The plugin was not allowed to do it (outside a grant, read-only grant, policy).
    #[error("denied: {0}")]
    Denied(String),
    /// Anything else that went wrong while running the tool.
    #[error("failed: {0}")]
    Failed(String),
}

impl ToolError {
    /// Shorthand for [`ToolError::InvalidArguments`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArguments(message.into())
    }

    /// Shorthand for [`ToolError::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound(message.into())
    }

    /// Shorthand for [`ToolError::Denied`].
    pub fn denied(message: impl Into<String>) -> Self {
        Self::Denied(message.into())
    }

    /// Shorthand for [`ToolError::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// The message without the variant prefix, as it travels over WIT.
    pub fn message(&self) -> &str {
        match self {
            Self::InvalidArguments(m) | Self::NotFound(m) | Self::Denied(m) | Self::Failed(m) => m,
        }
    }

    /// Maps an I/O error about `what` (usually a guest path) to the variant a model can act
    /// on: a missing file is `not-found`, a refused one `denied`, the rest `failed`.
    pub fn from_io(what: &str, err: &io::Error) -> Self {
        match err.kind() {
            io::ErrorKind::NotFound => Self::NotFound(format!(
                "{what} does not exist, or is outside every directory this tool was granted"
            )),
            io::ErrorKind::ReadOnlyFilesystem => {
                Self::Denied(format!("{what}: {err} (the grant is read-only)"))
            }
            io::ErrorKind::PermissionDenied => Self::Denied(format!(
                "{what}: access refused ({err}); it may be outside the granted directories, \
                 or the grant may not allow this (read-only?)"
            )),
            io::ErrorKind::InvalidInput
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::IsADirectory
            | io::ErrorKind::InvalidFilename => Self::InvalidArguments(format!("{what}: {err}")),
            _ => Self::Failed(format!("{what}: {err}")),
        }
    }
}

impl From<io::Error> for ToolError {
    fn from(err: io::Error) -> Self {
        Self::from_io("I/O error", &err)
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(err: serde_json::Error) -> Self {
        Self::Failed(format!("JSON error: {err}"))
    }
}

impl From<ToolError> for crate::bindings::cordon::tool::types::ToolError {
    fn from(err: ToolError) -> Self {
        use crate::bindings::cordon::tool::types::ToolError as Wit;
        match err {
            ToolError::InvalidArguments(m) => Wit::InvalidArguments(m),
            ToolError::NotFound(m) => Wit::NotFound(m),
            ToolError::Denied(m) => Wit::Denied(m),
            ToolError::Failed(m) => Wit::Failed(m),
        }
    }
}
