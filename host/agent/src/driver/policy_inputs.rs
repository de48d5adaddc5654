//! What per-call policy rules read that the state machine cannot know: who asks, the
//! counters the model's calls need (from the journal's store, just before they are decided),
//! and the time; and the counting of calls that run.

use std::collections::BTreeMap;

use cordon_core::now_ms;

use super::{Agent, AgentError, AuditContext, TurnIo};
use crate::conversation::{Conversation, PlannedCall, State};
use crate::machine::{CallInputs, Event, ToolCatalog, ToolRun};

impl Agent {
    /// The policy rules that may apply to calls of each installed tool, by identity
    /// (`plugin.tool`), as the policy in force now has them: what `/tools` and the console show.
    pub fn tool_rules(&self) -> BTreeMap<String, Vec<cordon_policy::RuleRef>> {
        let catalog = self.catalog(&Default::default(), None);
        let Some(policy) = catalog.policy() else {
            return BTreeMap::new();
        };
        self.tools
            .tools()
            .iter()
            .map(|s| (s.identity(), policy.rules_for(&s.identity())))
            .collect()
    }

    /// Who asks, the counters the model's tool calls need and the time, for the per-call
    /// policy: counts come from the journal's store just before the calls are decided.
    pub(super) async fn call_inputs(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        event: &Event,
        io: &mut TurnIo<'_>,
    ) -> Result<CallInputs, AgentError> {
        let requester = conv
            .requester()
            .cloned()
            .or_else(|| io.audit.requested_by.clone());
        let mut inputs = CallInputs {
            caller: cordon_policy::Caller {
                origin: policy_origin(&io.audit.origin).to_string(),
                token: requester
                    .as_ref()
                    .map(|r| r.token.clone())
                    .unwrap_or_default(),
                user: requester.and_then(|r| r.user).unwrap_or_default(),
                client: String::new(),
            },
            counts: BTreeMap::new(),
            keys: BTreeMap::new(),
            session: io.audit.session.clone().unwrap_or_default(),
            now_ms: now_ms(),
        };
        // The model's calls are decided when its answer is processed (`Proceed` on a
        // recorded answer), so that is when their counters are needed.
        let (Event::Proceed, State::ProcessingModelResponse { response, .. }, Some(policy)) =
            (event, &conv.state, catalog.policy())
        else {
            return Ok(inputs);
        };
        let scope = self.count_scope(&io.audit, &inputs.caller);
        let mut queries = Vec::new();
        for call in &response.tool_calls {
            let Some(spec) = catalog.spec(&call.name) else {
                continue;
            };
            let identity = spec.identity();
            if inputs.counts.contains_key(&identity) {
                continue;
            }
            inputs.counts.insert(identity.clone(), BTreeMap::new());
            let scope = cordon_policy::CountScope {
                session: &scope.0,
                caller: (&scope.1, &scope.2),
            };
            for q in policy.counters_for(&identity, scope, inputs.now_ms) {
                queries.push((identity.clone(), q));
            }
        }
        if queries.is_empty() {
            return Ok(inputs);
        }
        let asked: Vec<_> = queries.iter().map(|(_, q)| q.clone()).collect();
        let counts = io.journal.count_calls(&asked).await?;
        for ((identity, q), n) in queries.into_iter().zip(counts) {
            inputs
                .keys
                .entry(identity.clone())
                .or_default()
                .insert(q.name.clone(), q.key);
            inputs.counts.entry(identity).or_default().insert(q.name, n);
        }
        Ok(inputs)
    }

    /// The session and caller that `per = "caller"` and `within = "session"` counters key on.
    fn count_scope(
        &self,
        audit: &AuditContext,
        caller: &cordon_policy::Caller,
    ) -> (String, String, String) {
        (
            audit.session.clone().unwrap_or_default(),
            caller.token.clone(),
            caller.user.clone(),
        )
    }

    /// Adds the calls about to run to the policy's counters.
    pub(super) async fn tally(
        &self,
        catalog: &ToolCatalog,
        planned: &BTreeMap<String, PlannedCall>,
        calls: &[ToolRun],
        io: &mut TurnIo<'_>,
    ) -> Result<(), AgentError> {
        let Some(policy) = catalog.policy().filter(|p| !p.is_empty()) else {
            return Ok(());
        };
        let requester = io.audit.requested_by.clone();
        let caller = cordon_policy::Caller {
            token: requester
                .as_ref()
                .map(|r| r.token.clone())
                .unwrap_or_default(),
            user: requester.and_then(|r| r.user).unwrap_or_default(),
            ..Default::default()
        };
        let scope = self.count_scope(&io.audit, &caller);
        let scope = cordon_policy::CountScope {
            session: &scope.0,
            caller: (&scope.1, &scope.2),
        };
        let mut keys = Vec::new();
        for run in calls {
            let (Some(p), Some(spec)) = (planned.get(&run.call_id), catalog.spec(&run.tool)) else {
                continue;
            };
            let applied = p
                .policy
                .as_ref()
                .map(|n| n.applied.as_slice())
                .unwrap_or(&[]);
            keys.extend(policy.tally(&spec.identity(), applied, scope));
        }
        if !keys.is_empty() {
            io.journal
                .add_calls(&keys, now_ms().div_euclid(60_000))
                .await?;
        }
        Ok(())
    }
}

/// The origin a per-call policy sees for an interface: `cli` for the terminal commands (chat,
/// run, call, replay), else the door's own name (`serve`, `gateway`, `mcp`, `mcp-http`).
pub fn policy_origin(origin: &str) -> &str {
    match origin {
        "serve" | "gateway" | "mcp" | "mcp-http" => origin,
        _ => "cli",
    }
}
