//! The conversation engine's view of the installed plugins: [`ToolHost`] over the home's
//! [`Toolbox`], so every tool a model asks for runs in the same sandbox, under the same grants
//! and limits, as `cordon call`.

use std::collections::BTreeMap;

use cordon_agent::{
    CancellationToken, Content, ToolFailure, ToolFailureKind, ToolHost, ToolSpec, async_trait,
};
use cordon_home::{HomeError, Toolbox};
use cordon_runtime::CallError;
use serde_json::Value;

/// Installed tools offered to a model.
pub struct SandboxTools {
    toolbox: Toolbox,
    /// Model-facing name → the toolbox's call name. They differ only for `plugin.tool`, because
    /// OpenAI-style function names allow just letters, digits, `_` and `-`.
    call_names: BTreeMap<String, String>,
}

impl SandboxTools {
    /// Wraps a loaded toolbox; tools whose plugin failed its checks are simply not offered
    /// (the CLI reports them separately).
    pub fn new(toolbox: Toolbox) -> Self {
        let call_names = toolbox
            .tools()
            .iter()
            .map(|entry| (model_name(&entry.call_name), entry.call_name.clone()))
            .collect();
        Self {
            toolbox,
            call_names,
        }
    }

    /// Plugins that were installed but could not be loaded, with the reason.
    pub fn unavailable(&self) -> Vec<(String, String)> {
        self.toolbox
            .unavailable()
            .map(|(plugin, error)| (plugin.to_string(), error.to_string()))
            .collect()
    }
}

/// A name the chat APIs accept for a toolbox call name (`plugin.tool` → `plugin__tool`).
fn model_name(call_name: &str) -> String {
    call_name.replace('.', "__")
}

#[async_trait]
impl ToolHost for SandboxTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.toolbox
            .tools()
            .iter()
            .map(|entry| {
                let mut spec = ToolSpec::from_descriptor(
                    entry.descriptor.clone(),
                    entry.plugin.clone(),
                    entry.grants.iter().map(|g| g.to_string()).collect(),
                    entry.can_change_anything,
                );
                spec.name = model_name(&entry.call_name);
                spec
            })
            .collect()
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure> {
        let Some(call_name) = self.call_names.get(name) else {
            return Err(ToolFailure::new(
                ToolFailureKind::NotFound,
                format!(
                    "there is no tool `{name}`; the tools are: {}",
                    self.call_names
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        // Dropping the call future drops its wasmtime Store, which ends the guest at once.
        tokio::select! {
            () = cancel.cancelled() => Err(ToolFailure::new(
                ToolFailureKind::Cancelled,
                format!("the call to `{name}` was cancelled by the user"),
            )),
            result = self.toolbox.call_value(call_name, &arguments) => match result {
                Ok(output) => Ok(output.content),
                Err(error) => Err(failure(error)),
            },
        }
    }
}

/// Turns a sandbox error into what the model reads: the category it can act on and a message
/// that names the limit, grant or argument involved.
fn failure(error: HomeError) -> ToolFailure {
    let kind = match &error {
        HomeError::Call { source, .. } => match source {
            CallError::Tool(tool_error) => return ToolFailure::from(tool_error.clone()),
            CallError::Denied(_) => ToolFailureKind::Denied,
            CallError::LimitExceeded { .. } | CallError::Trapped(_) | CallError::Malformed(_) => {
                ToolFailureKind::Failed
            }
        },
        HomeError::InvalidArguments { .. } => ToolFailureKind::InvalidArguments,
        HomeError::UnknownTool { .. } | HomeError::AmbiguousTool { .. } => {
            ToolFailureKind::NotFound
        }
        _ => ToolFailureKind::Failed,
    };
    ToolFailure::new(kind, error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_become_function_names() {
        assert_eq!(model_name("sql_query"), "sql_query");
        assert_eq!(model_name("db.sql_query"), "db__sql_query");
    }

    #[test]
    fn sandbox_errors_keep_their_category() {
        let denied = failure(HomeError::Call {
            tool: "read_file".into(),
            source: CallError::Denied("outside every grant".into()),
        });
        assert_eq!(denied.kind, ToolFailureKind::Denied);
        assert!(
            denied.message.contains("outside every grant"),
            "{}",
            denied.message
        );

        let limit = failure(HomeError::Call {
            tool: "run_python".into(),
            source: CallError::Trapped("wasm trap: unreachable".into()),
        });
        assert_eq!(limit.kind, ToolFailureKind::Failed);
        assert!(limit.message.contains("unreachable"), "{}", limit.message);
    }
}
