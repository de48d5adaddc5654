//! The tool catalog of a turn: which tools the model is offered and whether a call may run.

use std::collections::BTreeMap;
use std::sync::Arc;

use cordon_core::{CompiledSchema, SchemaError};
use cordon_policy::Verdict;
use serde_json::Value;

use super::CallInputs;
use crate::approval::{self, ApprovalConfig, Decision, Policy, Standing, StandingAnswer};
use crate::conversation::PolicyNote;
use crate::messages::{ToolCall, snippet};
use crate::tools::ToolSpec;

/// The tools known to the turn, with compiled schemas, the user's approval rules and the
/// per-call policy.
pub struct ToolCatalog {
    tools: BTreeMap<String, (ToolSpec, Result<CompiledSchema, SchemaError>)>,
    approval: ApprovalConfig,
    /// The per-call policy, or why it does not load (every call is then asked).
    policy: Result<Arc<cordon_policy::Policy>, String>,
}

/// A call that may go on to be run or asked about.
pub(super) struct Checked {
    pub args: Value,
    pub decision: Decision,
    pub note: Option<Box<PolicyNote>>,
}

impl std::fmt::Debug for ToolCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolCatalog {
    /// Compiles the schemas of the installed tools; no per-call policy.
    pub fn new(specs: Vec<ToolSpec>, approval: ApprovalConfig) -> Self {
        let policy = Arc::new(cordon_policy::Policy::empty(&[]));
        Self::with_policy(specs, approval, Ok(policy))
    }

    /// As [`ToolCatalog::new`], with a per-call policy loaded for these tools (or why it
    /// does not load).
    pub fn with_policy(
        specs: Vec<ToolSpec>,
        approval: ApprovalConfig,
        policy: Result<Arc<cordon_policy::Policy>, String>,
    ) -> Self {
        let tools = specs
            .into_iter()
            .map(|s| {
                let v = CompiledSchema::compile(&s.input_schema);
                (s.name.clone(), (s, v))
            })
            .collect();
        Self {
            tools,
            approval,
            policy,
        }
    }

    /// The per-call policy, when it loaded.
    pub fn policy(&self) -> Option<&cordon_policy::Policy> {
        self.policy.as_deref().ok()
    }

    /// The approval decision for a tool as a whole: what is offered and what `/tools` shows.
    /// Only a policy rule that denies every call of the tool counts here; rules on arguments
    /// decide each call.
    pub fn decision(&self, spec: &ToolSpec, standing: Standing<'_>) -> Decision {
        let verdict = self
            .policy()
            .and_then(|p| p.denies_every_call(&spec.identity()))
            .map(|rule| Verdict {
                decision: Some(rule.decision),
                applied: vec![rule.clone()],
                rule: Some(rule),
                digest: self
                    .policy()
                    .map(|p| p.digest().to_string())
                    .unwrap_or_default(),
            });
        approval::decide(&self.approval, standing, spec, verdict.as_ref())
    }

    /// What the per-call policy says of a call with `args`, or `None` when there is no policy.
    /// `widened`: the spec carries grants given through grant requests, so rules on its reach
    /// decide by what it reaches now.
    fn verdict(
        &self,
        spec: &ToolSpec,
        widened: bool,
        args: &Value,
        conv_approved: &BTreeMap<String, usize>,
        labels: &cordon_core::SessionLabels,
        inputs: &CallInputs,
    ) -> Option<Verdict> {
        match &self.policy {
            Ok(p) if p.is_empty() => None,
            Ok(p) => {
                let identity = spec.identity();
                let session = cordon_policy::SessionFacts {
                    approved: conv_approved.keys().cloned().collect(),
                    labels: labels.names().into_iter().collect(),
                };
                let none = cordon_policy::Counts::new();
                Some(p.decide(&cordon_policy::Call {
                    tool: &identity,
                    args,
                    caller: &inputs.caller,
                    session: &session,
                    counts: inputs.counts.get(&identity).unwrap_or(&none),
                    now_ms: inputs.now_ms,
                    reach: widened.then_some(&spec.reach),
                }))
            }
            Err(e) => Some(approval::broken_policy(e)),
        }
    }

    /// Why the policy would deny a call with `args` of `widened` (the tool with the grants a
    /// grant request would give it), or `None` when it would not: a person is not asked for
    /// grants the call could not run with. Only a denial counts here; an `ask` is met by the
    /// person answering the request.
    pub(super) fn denies_widened(
        &self,
        widened: &ToolSpec,
        args: &Value,
        standing: Standing<'_>,
        approved: &BTreeMap<String, usize>,
        inputs: &CallInputs,
    ) -> Option<String> {
        let verdict = self.verdict(widened, true, args, approved, standing.labels, inputs)?;
        let decision = approval::decide(&self.approval, standing, widened, Some(&verdict));
        (decision.policy == Policy::Deny).then_some(decision.reason)
    }

    /// The tools the model is offered: installed, enabled and not denied (the built-in
    /// `read_result` is offered apart, when there is something to page; see
    /// [`crate::spill`]).
    pub fn offered(&self, standing: Standing<'_>) -> Vec<&ToolSpec> {
        self.tools
            .values()
            .map(|(s, _)| s)
            .filter(|s| !crate::spill::is_builtin(s))
            .filter(|s| self.decision(s, standing).policy != Policy::Deny)
            .collect()
    }

    /// Whether the Rule of Two holds back calls of the tool the model calls `name` in a
    /// session holding `labels` (see [`cordon_core::labels`]).
    pub fn held_back(&self, name: &str, labels: &cordon_core::SessionLabels) -> bool {
        self.spec(name)
            .is_some_and(|s| cordon_core::rule_of_two(labels, &s.identity(), &s.exposure).is_some())
    }

    /// The name the model knows the built-in `read_result` by.
    pub fn pager_name(&self) -> Option<&str> {
        self.tools
            .values()
            .map(|(s, _)| s)
            .find(|s| crate::spill::is_builtin(s))
            .map(|s| s.name.as_str())
    }

    /// The built-in `read_result`, unless a rule denies it.
    pub fn pager(&self, standing: Standing<'_>) -> Option<&ToolSpec> {
        self.tools
            .values()
            .map(|(s, _)| s)
            .find(|s| crate::spill::is_builtin(s))
            .filter(|s| self.decision(s, standing).policy != Policy::Deny)
    }

    /// Checks a call: the tool must exist, policy must not deny it and the arguments must be
    /// valid; then decides the call itself. Returns the parsed arguments, the spec and the
    /// decision, or what stands in the way.
    ///
    /// `session_grants` gives the grants a grant request gave the tool for the conversation
    /// (or a while): the call is decided for the tool with them, as it will run.
    pub(super) fn check(
        &self,
        call: &ToolCall,
        standing: Standing<'_>,
        approved: &BTreeMap<String, usize>,
        inputs: &CallInputs,
        session_grants: &dyn Fn(&ToolSpec) -> Vec<String>,
    ) -> Result<Checked, Refusal> {
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
            return Err(Refusal::denied(decision, None, None));
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
        // Rules on the tool's reach decide by what those grants make it reach.
        let given = session_grants(spec);
        let policy_spec = spec.with_grants(&given);
        let Some(verdict) = self.verdict(
            &policy_spec,
            !given.is_empty(),
            &args,
            approved,
            standing.labels,
            inputs,
        ) else {
            return Ok(Checked {
                args,
                decision,
                note: None,
            });
        };
        let decision = approval::decide(&self.approval, standing, spec, Some(&verdict));
        let note = Box::new(PolicyNote {
            digest: verdict.digest.clone(),
            rule: decision.rule.clone(),
            applied: verdict.applied.iter().map(|r| r.id.clone()).collect(),
            counted: decision.policy == Policy::Auto,
        });
        if decision.policy == Policy::Deny {
            return Err(Refusal::denied(decision, Some(args), Some(note)));
        }
        Ok(Checked {
            args,
            decision,
            note: Some(note),
        })
    }

    /// The spec of the tool the model calls `name`.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|(s, _)| s)
    }

    /// Gives a conversation that holds no label the labels of the tool results in its
    /// history: one saved before labels were kept, or one a gateway client sent whole (a
    /// history that continues no session of this host). Labels only follow from what the
    /// history holds, so this changes nothing it means. Results of tools not installed (a
    /// client's own tools) carry none.
    pub fn label_history(&self, conv: &mut crate::Conversation) {
        if !conv.labels.is_empty() {
            return;
        }
        let crate::Conversation {
            messages, labels, ..
        } = conv;
        for message in messages.iter() {
            if let crate::Message::Tool { name, .. } = message
                && let Some(spec) = self.spec(name)
            {
                labels.saw(&spec.identity(), &spec.exposure);
            }
        }
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
        /// The arguments, when the call was denied for them.
        args: Option<Box<Value>>,
        /// What the per-call policy said, when it decided.
        note: Option<Box<PolicyNote>>,
    },
}

impl Refusal {
    /// A call policy denies: the model is told the reason and not to work around it.
    fn denied(decision: Decision, args: Option<Value>, note: Option<Box<PolicyNote>>) -> Refusal {
        Refusal::Denied {
            message: format!(
                "refused by policy: {}; do not try to get around it, tell the user if you need it",
                decision.reason
            ),
            reason: decision.reason,
            args: args.map(Box::new),
            note,
        }
    }
}
