//! How the engine reaches tools: the [`ToolHost`] trait.
//!
//! The engine never links the sandbox: the host application implements [`ToolHost`] over its
//! runtime, so this crate builds and tests without wasmtime.

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::tools::{Content, ToolFailure, ToolSpec};

/// The tools available to a conversation.
#[async_trait]
pub trait ToolHost: Send + Sync {
    /// The tools that are installed and enabled now.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Runs tool `name` with arguments that already passed schema validation. Must return soon
    /// after `cancel` fires, with a
    /// [`ToolFailureKind::Cancelled`](crate::tools::ToolFailureKind::Cancelled) failure.
    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure>;
}
