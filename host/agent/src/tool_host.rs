//! How the engine reaches tools: the [`ToolHost`] trait.
//!
//! The engine never links the sandbox: the host application implements [`ToolHost`] over its
//! runtime, so this crate builds and tests without wasmtime.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use cordon_core::CallReport;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::tools::{Content, ToolFailure, ToolFailureKind, ToolSpec};

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

    /// [`ToolHost::call_reported`] with `grants` (grant syntax) besides the plugin's own, for
    /// this call only: what a person gave through a grant request. Hosts that run sandboxes
    /// override it; the default refuses a call with any.
    async fn call_granted(
        &self,
        name: &str,
        arguments: Value,
        grants: &[String],
        cancel: CancellationToken,
    ) -> (Result<Vec<Content>, ToolFailure>, Option<CallReport>) {
        if grants.is_empty() {
            return self.call_reported(name, arguments, cancel).await;
        }
        let failure = ToolFailure::new(
            ToolFailureKind::Failed,
            "this host cannot give a call grants of its own",
        );
        (Err(failure), None)
    }

    /// The grants of `wanted` (as a sandbox's report names them) that a person may be asked
    /// to give the plugin of tool `name`: those that resolve, reach none of Cordon's own state
    /// and lie within the plugin's ceiling. The default offers none.
    fn requestable(&self, name: &str, wanted: &[String]) -> Vec<String> {
        let _ = (name, wanted);
        Vec::new()
    }

    /// Records `grants` for the plugin of tool `name` in the lock: for `minutes`, or for good
    /// when `None`, as given by `by`. Returns one line per grant recorded, for the audit log.
    async fn grant_for(
        &self,
        name: &str,
        grants: &[String],
        minutes: Option<u64>,
        by: &str,
    ) -> Result<Vec<String>, String> {
        let _ = (name, grants, minutes, by);
        Err("this host cannot record grants".to_string())
    }

    /// The grants the lock holds now for the plugin of tool `name`, lasting ones and those
    /// given for a while that have not ended, in grant syntax; `None` when this host has no
    /// lock or cannot read it (then a conversation's copies of them apply as kept). Read for
    /// calls that a conversation gave such grants to, so that `cordon revoke` reaches them.
    fn lock_grants(&self, name: &str) -> Option<Vec<String>> {
        let _ = name;
        None
    }

    /// Grants given for a while whose end passed, dropped from the lock since last asked, as
    /// (plugin, line): the driver puts them in the audit log. The default has none.
    fn take_expired(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// Where a long-running host gets its tools (the home's installed plugins, verified and ready
/// to call), and how it notices that they changed.
#[async_trait]
pub trait ToolSource: Send + Sync + 'static {
    /// A value that changes whenever the installed tools, their grants or their limits change
    /// (for a home: the lock file's identity, size and time). Cheap: checked before every turn
    /// or request.
    fn stamp(&self) -> String;

    /// The tools installed now.
    async fn load(&self) -> Result<Arc<dyn ToolHost>, String>;
}

/// Some of another host's tools: only those named (by the name the model sees, `plugin.tool`,
/// or a plugin's name) are listed, and a call of any other is refused as not found.
pub struct SelectedTools {
    inner: Arc<dyn ToolHost>,
    names: BTreeSet<String>,
}

impl SelectedTools {
    /// The tools of `inner` that `names` name.
    pub fn new(inner: Arc<dyn ToolHost>, names: impl IntoIterator<Item = String>) -> Self {
        Self {
            inner,
            names: names.into_iter().collect(),
        }
    }

    fn selects(&self, spec: &ToolSpec) -> bool {
        self.names.contains(&spec.name)
            || self.names.contains(&spec.identity())
            || self.names.contains(&spec.plugin)
    }
}

#[async_trait]
impl ToolHost for SelectedTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.inner
            .tools()
            .into_iter()
            .filter(|s| self.selects(s))
            .collect()
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure> {
        self.call_reported(name, arguments, cancel).await.0
    }

    async fn call_reported(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> (Result<Vec<Content>, ToolFailure>, Option<CallReport>) {
        self.call_granted(name, arguments, &[], cancel).await
    }

    async fn call_granted(
        &self,
        name: &str,
        arguments: Value,
        grants: &[String],
        cancel: CancellationToken,
    ) -> (Result<Vec<Content>, ToolFailure>, Option<CallReport>) {
        if !self.tools().iter().any(|s| s.name == name) {
            let failure = ToolFailure::new(
                ToolFailureKind::NotFound,
                format!("the tool `{name}` is not offered in this conversation"),
            );
            return (Err(failure), None);
        }
        self.inner
            .call_granted(name, arguments, grants, cancel)
            .await
    }

    fn requestable(&self, name: &str, wanted: &[String]) -> Vec<String> {
        self.inner.requestable(name, wanted)
    }

    async fn grant_for(
        &self,
        name: &str,
        grants: &[String],
        minutes: Option<u64>,
        by: &str,
    ) -> Result<Vec<String>, String> {
        self.inner.grant_for(name, grants, minutes, by).await
    }

    fn lock_grants(&self, name: &str) -> Option<Vec<String>> {
        self.inner.lock_grants(name)
    }

    fn take_expired(&self) -> Vec<(String, String)> {
        self.inner.take_expired()
    }
}
