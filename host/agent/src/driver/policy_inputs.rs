//! What per-call policy rules read that the state machine cannot know: who asks, the
//! counters the model's calls need (from the journal's store, just before they are decided),
//! and the time; and the counting of calls that run.

use std::collections::BTreeMap;

use cordon_core::now_ms;

use super::{Agent, AgentError, AuditContext, TurnIo};
use crate::conversation::{Conversation, PlannedCall, State};
use crate::machine::{self, Action, CallInputs, Env, Event, ToolCatalog, ToolRun};

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

    /// `event` through the machine, with what per-call policy rules read
    /// ([`Agent::call_inputs`]); the counts reserved for the calls it decides are settled
    /// ([`Agent::settle_counts`]), also when the step fails: nothing was decided then, and
    /// what was reserved is taken back.
    pub(super) async fn step(
        &self,
        conv: &mut Conversation,
        catalog: &ToolCatalog,
        event: &Event,
        io: &mut TurnIo<'_>,
    ) -> Result<Vec<Action>, AgentError> {
        let (inputs, reserved) = self.call_inputs(conv, catalog, event, io).await?;
        let env = Env {
            catalog,
            limits: self.limits_now(io),
            inputs: &inputs,
        };
        let stepped = machine::step(conv, event.clone(), env);
        self.settle_counts(conv, catalog, &inputs, reserved, io)
            .await;
        Ok(stepped?)
    }

    /// Who asks, the counters the model's tool calls need and the time, for the per-call
    /// policy: counts come from the journal's store just before the calls are decided, and
    /// the calls are reserved on their counters at the same time (see
    /// [`Agent::settle_counts`]).
    async fn call_inputs(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        event: &Event,
        io: &mut TurnIo<'_>,
    ) -> Result<(CallInputs, Reserved), AgentError> {
        let mut inputs = CallInputs {
            caller: caller_of(conv, &io.audit),
            counts: BTreeMap::new(),
            keys: BTreeMap::new(),
            session: io.audit.session.clone().unwrap_or_default(),
            now_ms: now_ms(),
        };
        // The model's calls are decided when its answer is processed (`Proceed` on a
        // recorded answer), so that is when their counters are needed.
        let minute = inputs.now_ms.div_euclid(60_000);
        let mut reserved = Reserved {
            keys: Vec::new(),
            minute,
        };
        let (Event::Proceed, State::ProcessingModelResponse { response, .. }, Some(policy)) =
            (event, &conv.state, catalog.policy())
        else {
            return Ok((inputs, reserved));
        };
        let scope = count_scope(&inputs.session, &inputs.caller);
        let mut queries = Vec::new();
        let mut reservations: Vec<cordon_policy::Reservation> = Vec::new();
        for call in &response.tool_calls {
            let Some(spec) = catalog.spec(&call.name) else {
                continue;
            };
            let identity = spec.identity();
            // Every call is reserved; the counters are read once for each tool.
            reservations.extend(policy.reservable(&identity, scope));
            if inputs.counts.contains_key(&identity) {
                continue;
            }
            inputs.counts.insert(identity.clone(), Default::default());
            for q in policy.counters_for(&identity, scope, inputs.now_ms) {
                queries.push((identity.clone(), q));
            }
        }
        if queries.is_empty() && reservations.is_empty() {
            return Ok((inputs, reserved));
        }
        let asked: Vec<_> = queries.iter().map(|(_, q)| q.clone()).collect();
        let mut counts = io
            .journal
            .reserve_calls(&reservations, &asked, minute)
            .await?;
        reserved.keys = reservations.into_iter().map(|r| r.key).collect();
        // A journal that answers too few counts must not let a call past a limit: the rest
        // read as full.
        counts.resize(asked.len(), u64::MAX);
        // Each tool's queries were asked together: its counts are made from them in one go
        // (kept by the counters' numbers in this policy, see `cordon_policy::Counts`).
        let mut at = 0;
        while at < queries.len() {
            let identity = queries[at].0.clone();
            let end = at
                + queries[at..]
                    .iter()
                    .take_while(|(i, _)| *i == identity)
                    .count();
            let keys = inputs.keys.entry(identity.clone()).or_default();
            for q in &asked[at..end] {
                for name in q.names.iter() {
                    keys.insert(name.clone(), q.key.clone());
                }
            }
            inputs.counts.insert(
                identity,
                cordon_policy::counts_of(&asked[at..end], &counts[at..end]),
            );
            at = end;
        }
        Ok((inputs, reserved))
    }

    /// Once the calls reserved by [`Agent::call_inputs`] are decided: a call that runs
    /// unasked (`counted`) keeps what its rules count; everything else reserved is taken back
    /// (denied calls, calls put to a person — counted when they run — and `rule:` counters of
    /// rules that did not apply). A failure to take back is only logged: it counts a call
    /// too many, never one too few.
    async fn settle_counts(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        inputs: &CallInputs,
        reserved: Reserved,
        io: &mut TurnIo<'_>,
    ) {
        let Some(policy) = catalog.policy().filter(|_| !reserved.keys.is_empty()) else {
            return;
        };
        let scope = count_scope(&inputs.session, &inputs.caller);
        let batch = match &conv.state {
            State::AwaitingApproval { batch } | State::ExecutingTools { batch } => batch.as_slice(),
            _ => &[],
        };
        let mut kept = Vec::new();
        for p in batch {
            if let (Some(note), Some(spec)) = (&p.policy, catalog.spec(&p.call.name))
                && note.counted
            {
                kept.extend(policy.tally(&spec.identity(), &note.applied, scope));
            }
        }
        let (add, release) = cordon_policy::settle(&reserved.keys, &kept);
        if !release.is_empty()
            && let Err(e) = io.journal.release_calls(&release, reserved.minute).await
        {
            tracing::warn!("policy counters reserved for calls that did not run stay: {e}");
        }
        if !add.is_empty()
            && let Err(e) = io.journal.add_calls(&add, reserved.minute).await
        {
            tracing::warn!("policy counters could not be written: {e}");
        }
    }

    /// Adds the calls about to run to the policy's counters.
    pub(super) async fn tally(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        planned: &BTreeMap<String, PlannedCall>,
        calls: &[ToolRun],
        io: &mut TurnIo<'_>,
    ) -> Result<(), AgentError> {
        let Some(policy) = catalog.policy().filter(|p| !p.is_empty()) else {
            return Ok(());
        };
        // The caller the calls were decided for ([`Agent::call_inputs`]), so a per-caller
        // counter counts a call under it, also in a turn taken up again or retried by someone
        // else.
        let caller = caller_of(conv, &io.audit);
        let session = io.audit.session.clone().unwrap_or_default();
        let scope = count_scope(&session, &caller);
        let mut keys = Vec::new();
        for run in calls {
            let (Some(p), Some(spec)) = (planned.get(&run.call_id), catalog.spec(&run.tool)) else {
                continue;
            };
            // Counted when it was decided.
            if p.policy.as_ref().is_some_and(|n| n.counted) {
                continue;
            }
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

/// Who asks, as per-call policy rules see it: the turn's recorded requester (else the one
/// sending this request) through the turn's door.
fn caller_of(conv: &Conversation, audit: &AuditContext) -> cordon_policy::Caller {
    let requester = conv
        .requester()
        .cloned()
        .or_else(|| audit.requested_by.clone());
    cordon_policy::Caller {
        origin: policy_origin(&audit.origin).to_string(),
        token: requester
            .as_ref()
            .map(|r| r.token.clone())
            .unwrap_or_default(),
        user: requester.and_then(|r| r.user).unwrap_or_default(),
        client: String::new(),
    }
}

/// The session and caller that `per = "caller"` and `within = "session"` counters key on.
fn count_scope<'a>(
    session: &'a str,
    caller: &'a cordon_policy::Caller,
) -> cordon_policy::CountScope<'a> {
    cordon_policy::CountScope {
        session,
        caller: (&caller.token, &caller.user),
    }
}

/// The counters calls were reserved on before they were decided, at `minute`.
pub(super) struct Reserved {
    keys: Vec<String>,
    minute: i64,
}

/// The origin a per-call policy sees for an interface: `cli` for the terminal commands (chat,
/// run, call, replay), else the door's own name (`serve`, `gateway`, `mcp`, `mcp-http`).
pub fn policy_origin(origin: &str) -> &str {
    match origin {
        "serve" | "gateway" | "mcp" | "mcp-http" => origin,
        _ => "cli",
    }
}
