//! The tool catalog of a turn: which tools the model is offered and whether a call may run.

use std::collections::BTreeMap;

use cordon_core::{CompiledSchema, SchemaError};
use serde_json::Value;

use crate::approval::{self, ApprovalConfig, Decision, Policy, Standing, StandingAnswer};
use crate::messages::{ToolCall, snippet};
use crate::tools::ToolSpec;

/// The tools known to the turn, with compiled schemas and the user's approval rules.
pub struct ToolCatalog {
    tools: BTreeMap<String, (ToolSpec, Result<CompiledSchema, SchemaError>)>,
    approval: ApprovalConfig,
}

impl std::fmt::Debug for ToolCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolCatalog {
    /// Compiles the schemas of the installed tools.
    pub fn new(specs: Vec<ToolSpec>, approval: ApprovalConfig) -> Self {
        let tools = specs
            .into_iter()
            .map(|s| {
                let v = CompiledSchema::compile(&s.input_schema);
                (s.name.clone(), (s, v))
            })
            .collect();
        Self { tools, approval }
    }

    /// The approval decision for a tool.
    pub fn decision(&self, spec: &ToolSpec, standing: Standing<'_>) -> Decision {
        approval::decide(&self.approval, standing, spec)
    }

    /// The tools the model is offered: installed, enabled and not denied.
    pub fn offered(&self, standing: Standing<'_>) -> Vec<&ToolSpec> {
        self.tools
            .values()
            .map(|(s, _)| s)
            .filter(|s| self.decision(s, standing).policy != Policy::Deny)
            .collect()
    }

    /// Checks a call: the tool must exist, policy must not deny it and the arguments must be
    /// valid. Returns the parsed arguments, the spec and the decision, or what stands in the way.
    pub(super) fn check(
        &self,
        call: &ToolCall,
        standing: Standing<'_>,
    ) -> Result<(Value, &ToolSpec, Decision), Refusal> {
        // Only a refused call names the offered tools: deciding for every tool is not work
        // a valid call should pay for.
        let available = || {
            let offered: Vec<&str> = self
                .offered(standing)
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            if offered.is_empty() {
                "no tools are available".to_string()
            } else {
                format!("the available tools are: {}", offered.join(", "))
            }
        };
        if call.name.is_empty() {
            return Err(Refusal::Invalid(
                None,
                format!(
                    "the tool call has no tool name (got `{}`); {}",
                    snippet(&call.arguments),
                    available()
                ),
            ));
        }
        let Some((spec, schema)) = self.tools.get(&call.name) else {
            return Err(Refusal::Invalid(
                None,
                format!("there is no tool named `{}`; {}", call.name, available()),
            ));
        };
        let decision = self.decision(spec, standing);
        if decision.policy == Policy::Deny {
            return Err(Refusal::Denied {
                message: format!(
                    "refused by policy: {}; do not try to get around it, tell the user if you need it",
                    decision.reason
                ),
                reason: decision.reason,
            });
        }
        let text = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        let args: Value = serde_json::from_str(text).map_err(|e| {
            Refusal::Invalid(
                None,
                format!(
                    "the arguments for `{}` are not valid JSON ({e}); send a JSON object matching its schema: {}",
                    call.name, spec.input_schema
                ),
            )
        })?;
        let schema = schema.as_ref().map_err(|e| {
            Refusal::Invalid(
                Some(args.clone()),
                format!(
                    "the tool `{}` cannot be called: its own input schema is invalid ({e})",
                    call.name
                ),
            )
        })?;
        if let Err(e) = schema.check(&args) {
            // The model reads at most five violations; more would bury the schema after them.
            let problems: Vec<&str> = e.violations().iter().take(5).map(String::as_str).collect();
            return Err(Refusal::Invalid(
                Some(args),
                format!(
                    "the arguments for `{}` do not match its schema: {}; the schema is {}",
                    call.name,
                    problems.join("; "),
                    spec.input_schema
                ),
            ));
        }
        Ok((args, spec, decision))
    }

    /// The spec of the tool the model calls `name`.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|(s, _)| s)
    }

    /// Rewrites `always`/`never` answers saved under a tool's model-facing name (as
    /// conversations saved before answers bound to identities did) to the tool's identity, so
    /// they keep applying. Identities contain a `.`, model-facing names never do.
    pub fn upgrade_session(&self, session: &mut BTreeMap<String, StandingAnswer>) {
        let legacy: Vec<String> = session
            .keys()
            .filter(|k| !k.contains('.'))
            .cloned()
            .collect();
        for key in legacy {
            if let Some(spec) = self.spec(&key)
                && let Some(answer) = session.remove(&key)
            {
                session.entry(spec.identity()).or_insert(answer);
            }
        }
    }
}

/// Why a call is not run before anyone is asked.
pub(super) enum Refusal {
    /// The call is malformed (unknown tool, bad arguments): the arguments when they parsed,
    /// and the message for the model.
    Invalid(Option<Value>, String),
    /// Policy denies the tool.
    Denied {
        /// The message for the model, naming the rule.
        message: String,
        /// The policy's reason alone, for the record of who decided.
        reason: String,
    },
}
