//! How the engine reaches tools: the [`ToolHost`] trait.
//!
//! The engine never links the sandbox: the host application implements [`ToolHost`] over its
//! runtime, so this crate builds and tests without wasmtime.

use async_trait::async_trait;
use cordon_core::CallReport;
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

    /// [`ToolHost::call`], with what the sandbox measured and refused for the audit log. Hosts
    /// that run sandboxes override it; the default reports nothing.
    async fn call_reported(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> (Result<Vec<Content>, ToolFailure>, Option<CallReport>) {
        (self.call(name, arguments, cancel).await, None)
    }
}
