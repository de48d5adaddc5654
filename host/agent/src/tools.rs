//! The data that crosses the [`ToolHost`](crate::tool_host::ToolHost) boundary: tool specs,
//! failures, and the text the model reads for a result. Plain data, so the state machine can
//! use it without the async interface.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The plugin author's behaviour claims (shared with the runtime). Shown to users and models,
/// never trusted for approval except `destructive`, which can only make approval stricter.
pub use cordon_core::ToolHints;

/// One piece of a tool's result (shared with the runtime).
pub use cordon_core::Content;

/// One tool the host offers, with what the engine needs to offer it, validate calls and decide
/// approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model uses; unique across the host. It may differ from `tool` (qualified
    /// as `plugin__tool` when several plugins offer the same tool), so it is only an address
    /// for the model, never what approval rules match.
    pub name: String,
    /// The tool's own name in its plugin. With `plugin` it is the tool's identity, which
    /// approval rules and the user's `always`/`never` answers bind to, so a rule keeps
    /// applying however the model-facing `name` changes.
    pub tool: String,
    /// What the tool does, written for a model.
    pub description: String,
    /// JSON Schema the arguments must satisfy.
    pub input_schema: Value,
    /// JSON Schema of the tool's result, for a tool that returns one JSON object (see
    /// [`cordon_core::ToolDescriptor::output_schema`]); the host checked the result against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The author's hints.
    #[serde(default)]
    pub hints: ToolHints,
    /// The plugin that provides the tool (policy rules can name it).
    pub plugin: String,
    /// A human summary of the grants, one line each (e.g. `read ~/notes`), shown when asking.
    #[serde(default)]
    pub grants: Vec<String>,
    /// Whether the tool's effective capabilities (read-write paths, network hosts, environment)
    /// could change anything; computed by the host from grants and imports, not from hints.
    pub can_change_anything: bool,
    /// The sha256 of the plugin's component (`sha256:…`), so the audit log can say which code
    /// ran; empty for tools that are not components (tests, embedders).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// What the host can prove of the tool's behaviour from its grants (see
    /// [`cordon_core::ProvenHints`]): what clients are told, unlike `hints`. The default
    /// proves nothing (not read-only, not idempotent).
    #[serde(default)]
    pub proven: cordon_core::ProvenHints,
    /// What the tool's effective grants reach, as policy rules see it (`resource` in Cedar).
    #[serde(default)]
    pub reach: cordon_policy::Reach,
    /// What its results carry and whether it can send data out, from its effective grants
    /// (see [`cordon_core::labels`]).
    #[serde(default)]
    pub exposure: cordon_core::Exposure,
}

/// Why a tool call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFailureKind {
    /// The arguments did not fit the tool.
    InvalidArguments,
    /// Something named in the arguments does not exist.
    NotFound,
    /// The sandbox or the plugin refused (outside a grant, read-only grant, …).
    Denied,
    /// Anything else.
    Failed,
    /// The call was cancelled before it finished.
    Cancelled,
}

/// A failed tool call; the message goes to the user and the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct ToolFailure {
    /// The category.
    pub kind: ToolFailureKind,
    /// What went wrong and what to do instead.
    pub message: String,
}

impl ToolFailure {
    /// A failure of the given kind.
    pub fn new(kind: ToolFailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// Records a tool call's outcome and what the sandbox measured on its span (`execute_tool`
/// in a conversation, `tools/call` over MCP), whose fields `cordon.peak_memory_bytes`,
/// `cordon.refusals`, `otel.status_code` and `error.type` were declared empty.
pub fn record_call_outcome(
    span: &tracing::Span,
    result: &Result<Vec<Content>, ToolFailure>,
    report: Option<&cordon_core::CallReport>,
) {
    if let Some(report) = report {
        span.record("cordon.peak_memory_bytes", report.peak_memory);
        span.record("cordon.refusals", report.refused.len());
    }
    if let Err(failure) = result {
        span.record("otel.status_code", "error");
        span.record("error.type", failure.kind.as_str());
    }
}

impl From<cordon_core::ToolError> for ToolFailure {
    fn from(e: cordon_core::ToolError) -> Self {
        let kind = match e.kind {
            cordon_core::ToolErrorKind::InvalidArguments => ToolFailureKind::InvalidArguments,
            cordon_core::ToolErrorKind::NotFound => ToolFailureKind::NotFound,
            cordon_core::ToolErrorKind::Denied => ToolFailureKind::Denied,
            cordon_core::ToolErrorKind::Failed => ToolFailureKind::Failed,
        };
        Self {
            kind,
            message: e.message,
        }
    }
}

impl ToolSpec {
    /// The tool's identity, `plugin.tool`: the key of `plugin.tool` approval rules and of the
    /// user's `always`/`never` answers.
    pub fn identity(&self) -> String {
        format!("{}.{}", self.plugin, self.tool)
    }

    /// Builds the engine's view of a plugin's tool from its descriptor and what the host
    /// computed from the grants and imports.
    pub fn from_descriptor(
        descriptor: cordon_core::ToolDescriptor,
        plugin: impl Into<String>,
        grants: Vec<String>,
        can_change_anything: bool,
    ) -> Self {
        Self {
            name: descriptor.name.clone(),
            tool: descriptor.name,
            description: descriptor.description,
            input_schema: descriptor.input_schema,
            output_schema: descriptor.output_schema,
            hints: descriptor.hints,
            plugin: plugin.into(),
            grants,
            can_change_anything,
            digest: String::new(),
            proven: cordon_core::ProvenHints::default(),
            reach: cordon_policy::Reach {
                can_change: can_change_anything,
                ..cordon_policy::Reach::default()
            },
            exposure: cordon_core::Exposure::default(),
        }
    }

    /// [`ToolSpec::widened`], borrowing the tool as it is when there are no `extra` grants.
    pub fn with_grants(&self, extra: &[String]) -> std::borrow::Cow<'_, ToolSpec> {
        if extra.is_empty() {
            std::borrow::Cow::Borrowed(self)
        } else {
            std::borrow::Cow::Owned(self.widened(extra))
        }
    }

    /// The tool as it runs with `extra` grants besides its own (given for a session through a
    /// grant request): its grants, what it can change, its reach and its exposure recomputed,
    /// so approval, policy and the Rule of Two see what it can now reach.
    pub fn widened(&self, extra: &[String]) -> ToolSpec {
        if extra.is_empty() {
            return self.clone();
        }
        let grants: cordon_core::Grants = self
            .grants
            .iter()
            .chain(extra)
            .filter_map(|g| g.parse::<cordon_core::Grant>().ok())
            .collect();
        let can_change = self.can_change_anything || grants.can_change_anything();
        ToolSpec {
            grants: grants.iter().map(|g| g.to_string()).collect(),
            can_change_anything: can_change,
            proven: cordon_core::ProvenHints::derive(&grants, &self.hints),
            reach: reach_of(&grants, can_change),
            exposure: cordon_core::Exposure::of(&grants),
            ..self.clone()
        }
    }

    /// What the policy engine knows of the tool.
    pub fn facts(&self) -> cordon_policy::ToolFacts {
        cordon_policy::ToolFacts {
            plugin: self.plugin.clone(),
            tool: self.tool.clone(),
            input_schema: self.input_schema.clone(),
            reach: cordon_policy::Reach {
                can_change: self.can_change_anything,
                ..self.reach.clone()
            },
        }
    }
}

/// What `grants` reach, as policy rules see it (`resource` in Cedar).
pub fn reach_of(grants: &cordon_core::Grants, can_change: bool) -> cordon_policy::Reach {
    use cordon_core::{FsMode, Grant};
    let mut reach = cordon_policy::Reach {
        can_change,
        ..cordon_policy::Reach::default()
    };
    for g in grants.iter() {
        match g {
            Grant::Fs(fs) => match fs.mode {
                FsMode::ReadWrite => reach.read_write.push(fs.guest_path()),
                FsMode::ReadOnly => reach.read_only.push(fs.guest_path()),
            },
            Grant::Env(name, _) => reach.env.push(name.clone()),
            Grant::Config(key, _) => reach.config.push(key.clone()),
            Grant::Http(origin, _) => reach.network.push(origin.to_string()),
            Grant::Tcp(addr, _) => reach.network.push(format!("tcp://{addr}")),
        }
    }
    reach
}

/// Renders a tool result as the text the model reads.
pub fn render_result(result: &Result<Vec<Content>, ToolFailure>) -> String {
    match result {
        Ok(parts) => {
            let texts: Vec<String> = parts
                .iter()
                .map(|p| match p {
                    Content::Text(t) => t.clone(),
                    Content::Json(v) => v.to_string(),
                    // Read whole: results kept apart never come here (see `crate::spill`).
                    Content::Written(w) => w.to_text().unwrap_or_else(|e| {
                        format!("(the written result could not be read back: {e})")
                    }),
                })
                .collect();
            if texts.is_empty() {
                "(the tool returned no output)".to_string()
            } else {
                texts.join("\n")
            }
        }
        Err(f) => render_failure(f),
    }
}

impl ToolFailureKind {
    /// The word the audit log and APIs use (`invalid_arguments`, `not_found`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolFailureKind::InvalidArguments => "invalid_arguments",
            ToolFailureKind::NotFound => "not_found",
            ToolFailureKind::Denied => "denied",
            ToolFailureKind::Failed => "failed",
            ToolFailureKind::Cancelled => "cancelled",
        }
    }
}

/// Renders a failure as the text the model reads.
pub fn render_failure(f: &ToolFailure) -> String {
    let what = match f.kind {
        ToolFailureKind::InvalidArguments => "invalid arguments",
        ToolFailureKind::NotFound => "not found",
        ToolFailureKind::Denied => "denied by the sandbox",
        ToolFailureKind::Failed => "failed",
        ToolFailureKind::Cancelled => "cancelled",
    };
    format!("Error ({what}): {}", f.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_types_convert_and_render() {
        let f: ToolFailure = cordon_core::ToolError {
            kind: cordon_core::ToolErrorKind::Denied,
            message: "outside the grant".into(),
        }
        .into();
        assert_eq!(f.kind, ToolFailureKind::Denied);
        assert_eq!(
            render_failure(&f),
            "Error (denied by the sandbox): outside the grant"
        );
        let spec = ToolSpec::from_descriptor(
            cordon_core::ToolDescriptor {
                name: "t".into(),
                description: "d".into(),
                input_schema: serde_json::json!({"type": "object"}),
                hints: ToolHints {
                    destructive: true,
                    ..ToolHints::default()
                },
                output_schema: None,
            },
            "p",
            vec!["read /x".into()],
            false,
        );
        assert!(spec.hints.destructive && spec.plugin == "p" && !spec.can_change_anything);
        assert_eq!((spec.name.as_str(), spec.tool.as_str()), ("t", "t"));
        assert_eq!(spec.identity(), "p.t");
        let ok = Ok(vec![
            Content::Text("a".into()),
            Content::Json(serde_json::json!({"b": 1})),
        ]);
        assert_eq!(render_result(&ok), "a\n{\"b\":1}");
        assert_eq!(render_result(&Ok(vec![])), "(the tool returned no output)");
    }
}
