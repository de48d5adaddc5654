//! Running a batch of approved calls: each in its sandbox, at most `max_parallel_tools` at a
//! time, the built-in `read_result` answered from the conversation; each result audited and
//! fed to the machine as it comes.

use std::collections::{BTreeMap, VecDeque};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tracing::Instrument;

use cordon_core::{
    AuditEntry, AuditRecord, CallOutcome, CallReport, Content, ToolCallAudit, arguments_sha256,
    now_ms,
};
use serde_json::Value;

use super::{Agent, AgentError, AuditContext, TurnIo};
use crate::conversation::{Conversation, PlannedCall, State};
use crate::grant_requests::{Applying, GrantSpan};
use crate::machine::{Action, Event, ToolCatalog, ToolOutcome, ToolRun};
use crate::messages::KeptResult;
use crate::pages::{KeptAt, KeptPart, KeptParts};
use crate::tools::{ToolFailure, ToolFailureKind, render_result};

/// The calls a transition started, taken from the actions it queued, their `tool_started`
/// events shown at once: they run beside the calls still running, not after the batch.
fn started(queue: &mut VecDeque<Action>, frontend: &mut dyn crate::Frontend) -> Vec<ToolRun> {
    let mut runs = Vec::new();
    queue.retain(|action| match action {
        Action::RunTools { calls } => {
            runs.extend(calls.iter().cloned());
            false
        }
        Action::Emit(event @ crate::AgentEvent::ToolStarted { .. }) => {
            frontend.event(event);
            false
        }
        _ => true,
    });
    runs
}

impl Agent {
    /// Runs the calls the machine started: those of `calls`, then each it starts as another
    /// ends (it starts at most `max_parallel_tools` at a time, recording each start before the
    /// call runs). Each result is audited and fed to the machine (and so recorded) as soon as
    /// its call ends, so a stop of the host loses only the results of calls still running. A
    /// cancel stops the running calls and wins over whatever finishes at the same moment.
    pub(super) async fn run_tools(
        &self,
        conv: &mut Conversation,
        catalog: &ToolCatalog,
        calls: Vec<ToolRun>,
        io: &mut TurnIo<'_>,
        queue: &mut VecDeque<Action>,
    ) -> Result<(), AgentError> {
        let planned: BTreeMap<String, PlannedCall> = match &conv.state {
            State::ExecutingTools { batch } => {
                batch.iter().map(|p| (p.id.clone(), p.clone())).collect()
            }
            _ => BTreeMap::new(),
        };
        let child = io.cancel.child_token();
        let mut results = FuturesUnordered::new();
        let mut running: Vec<String> = Vec::new();
        let mut starting = calls;
        loop {
            if !starting.is_empty() {
                self.tally(conv, catalog, &planned, &starting, io).await?;
                let prepared = self.prepare(conv, catalog, std::mem::take(&mut starting), io);
                for (run, grants, answered) in prepared.await {
                    running.push(run.call_id.clone());
                    let token = child.clone();
                    let tools = self.tools.clone();
                    let span = super::spans::tool_call(&run, planned.get(&run.call_id));
                    results.push(async move {
                        let (result, report) = match answered {
                            Some(result) => (result, None),
                            None => {
                                tools
                                    .call_granted(&run.tool, run.arguments.clone(), &grants, token)
                                    .instrument(span.clone())
                                    .await
                            }
                        };
                        crate::tools::record_call_outcome(&span, &result, report.as_ref());
                        (run, result, report)
                    });
                }
            }
            // Every call has returned: the batch's last result ends the loop, so a cancel that
            // comes after it is the next action's to handle, never this batch's.
            if running.is_empty() {
                return Ok(());
            }
            let next = tokio::select! {
                biased;
                _ = io.cancel.cancelled() => None,
                next = results.next() => match next {
                    // A call stopped by the cancel may return before the cancel is seen here.
                    Some(_) if io.cancel.is_cancelled() => None,
                    Some(done) => Some(done),
                    None => return Ok(()),
                },
            };
            let Some((run, result, report)) = next else {
                // Cancelled: stop every running call (dropping its future ends its sandbox)
                // and record each as cancelled; those still queued never ran.
                child.cancel();
                drop(results);
                let mut records = Vec::new();
                for id in &running {
                    if let Some(p) = planned.get(id) {
                        let outcome = CallOutcome::Error {
                            kind: "cancelled".to_string(),
                            message: "cancelled by the user while it ran; it may have had part \
                                      of its effect"
                                .to_string(),
                        };
                        records.push(self.call_record(conv, catalog, &io.audit, p, outcome, None));
                    }
                }
                let cancel = Event::Cancel {
                    partial: String::new(),
                };
                return self.apply(conv, catalog, cancel, records, io, queue).await;
            };
            running.retain(|id| *id != run.call_id);
            // What a grant would have allowed, when the sandbox refused it and the call failed.
            let (wanted, refused) = match &report {
                Some(r) if result.is_err() && !r.wanted.is_empty() => (
                    self.tools.requestable(&run.tool, &r.wanted),
                    r.refused.clone(),
                ),
                _ => (Vec::new(), Vec::new()),
            };
            // Recorded with the result (see `Journal::transition_audited`).
            let mut records = Vec::new();
            if let Some(p) = planned.get(&run.call_id) {
                let outcome = match &result {
                    Ok(_) => CallOutcome::Ok,
                    Err(f) => CallOutcome::Error {
                        kind: f.kind.as_str().to_string(),
                        message: f.message.clone(),
                    },
                };
                records.push(self.call_record(conv, catalog, &io.audit, p, outcome, report));
            }
            let model_id = planned.get(&run.call_id).map(|p| p.call.id.as_str());
            let (content, kept) = self
                .result_text(&run, model_id, catalog, &result, io)
                .await?;
            let outcome = ToolOutcome {
                call_id: run.call_id,
                content,
                is_error: result.is_err(),
                wanted,
                refused,
                kept,
            };
            let finished = Event::ToolFinished { outcome };
            self.apply(conv, catalog, finished, records, io, queue)
                .await?;
            starting = started(queue, &mut *io.frontend);
        }
    }

    /// The calls to run with what they run with: the built-in `read_result` answered from
    /// the conversation and what its journal keeps; the others with their grants and those
    /// given through grant requests (to the call, and to the conversation).
    async fn prepare(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        calls: Vec<ToolRun>,
        io: &mut TurnIo<'_>,
    ) -> Vec<(
        ToolRun,
        Vec<String>,
        Option<Result<Vec<Content>, ToolFailure>>,
    )> {
        let page = crate::spill::threshold(self.config.context.result_budget_tokens)
            .unwrap_or(crate::spill::PAGE_BYTES);
        let mut prepared = Vec::with_capacity(calls.len());
        for run in calls {
            let spec = catalog.spec(&run.tool);
            if spec.is_some_and(crate::spill::is_builtin) {
                let mut parts = JournalParts(&mut *io.journal);
                let answer = crate::spill::read(&conv.messages, &run.arguments, page, &mut parts)
                    .await
                    .map(|text| vec![Content::Text(text)])
                    .map_err(|e| ToolFailure::new(ToolFailureKind::InvalidArguments, e));
                prepared.push((run, Vec::new(), Some(answer)));
                continue;
            }
            let mut grants = run.grants.clone();
            if let Some(spec) = spec {
                let to = Applying {
                    plugin: &spec.plugin,
                    digest: &spec.digest,
                    requester: conv.requester(),
                    now_ms: now_ms(),
                };
                // Only a call given a grant that is also in the lock reads the lock.
                let held = conv
                    .grants
                    .any_in_lock(to)
                    .then(|| self.tools.lock_grants(&run.tool))
                    .flatten();
                grants.extend(conv.grants.of_held(to, held.as_deref()));
            }
            prepared.push((run, grants, None));
        }
        prepared
    }

    /// What the model gets of a call's result, and when the result was kept apart from the
    /// conversation (a written piece over the keep threshold, when the journal keeps
    /// results: see [`crate::spill`], rule 3), its size. The piece is read from its file in
    /// parts, never whole.
    async fn result_text(
        &self,
        run: &ToolRun,
        model_id: Option<&str>,
        catalog: &ToolCatalog,
        result: &Result<Vec<Content>, ToolFailure>,
        io: &mut TurnIo<'_>,
    ) -> Result<(String, Option<KeptResult>), AgentError> {
        let budget = self.config.context.result_budget_tokens;
        let threshold = crate::spill::keep_threshold(budget) as u64;
        let large = |p: &Content| matches!(p, Content::Written(w) if w.len() > threshold);
        let Some(pieces) = result.as_ref().ok().filter(|p| p.iter().any(large)) else {
            return Ok((render_result(result), None));
        };
        let limit = crate::spill::kept_preview_bytes(budget);
        let mut kept = None;
        let mut shown = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let written = match piece {
                Content::Written(w) if kept.is_none() && large(piece) => w,
                // The other pieces, each held to the budget: only the kept one can be paged.
                other => {
                    let text = render_result(&Ok(vec![other.clone()]));
                    shown.push(crate::spill::ends(
                        &text,
                        &run.tool,
                        limit,
                        "The rest of this piece of the result was not kept.",
                    ));
                    continue;
                }
            };
            let not_kept = |why: String| {
                crate::pages::line_count(written)
                    .and_then(|lines| {
                        crate::spill::written_ends(written, lines, &run.tool, limit, &why)
                    })
                    .unwrap_or_else(|e| format!("(the result could not be read back: {e}; {why})"))
            };
            match io.journal.keep_result(&run.call_id, written).await {
                Ok(Some(lines)) => {
                    let pager = catalog.pager_name().unwrap_or(crate::spill::TOOL);
                    shown.push(
                        crate::spill::written_preview(
                            written,
                            lines,
                            model_id.unwrap_or(&run.call_id),
                            &run.tool,
                            pager,
                            limit,
                        )
                        .unwrap_or_else(|e| {
                            not_kept(format!("Its preview could not be read: {e}."))
                        }),
                    );
                    kept = Some(KeptResult {
                        id: run.call_id.clone(),
                        bytes: written.len(),
                        lines,
                    });
                }
                // A journal that keeps nothing (no store): the conversation holds it whole,
                // up to what a plugin may return at once.
                Ok(None) if written.len() <= crate::spill::KEEP_WITHOUT_PREVIEWS as u64 => {
                    shown.push(render_result(&Ok(vec![piece.clone()])));
                }
                Ok(None) => shown.push(not_kept(
                    "This host keeps no results, and it is too long to hold: only this preview \
                     remains."
                        .to_string(),
                )),
                // Another host drives the session now: this one stops at once.
                Err(e @ crate::JournalError::LeaseLost { .. }) => return Err(e.into()),
                // The call ran and its result stays in the conversation as a preview.
                Err(e) => {
                    tracing::warn!(call = %run.call_id, "a result was not kept: {e}");
                    shown.push(not_kept(format!(
                        "The store could not keep the whole result ({e}): only this preview remains."
                    )));
                }
            }
        }
        Ok((shown.join("\n"), kept))
    }

    /// The audit record of one call of this conversation.
    pub(super) fn call_record(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        audit: &AuditContext,
        call: &PlannedCall,
        outcome: CallOutcome,
        report: Option<CallReport>,
    ) -> AuditRecord {
        let spec = catalog.spec(&call.call.name);
        // The arguments as the model sent them when they did not parse.
        let arguments = call
            .arguments
            .clone()
            .unwrap_or_else(|| Value::String(call.call.arguments.clone()));
        let (decision, decided_by) = match &call.approval {
            Some(a) => (a.decision.clone(), a.by.clone()),
            None => (
                "none".to_string(),
                "nobody decided before the turn ended".to_string(),
            ),
        };
        AuditRecord {
            at_ms: now_ms(),
            origin: audit.origin.clone(),
            entry: AuditEntry::ToolCall(Box::new(ToolCallAudit {
                session: audit.session.clone(),
                turn: Some(conv.turns.len().saturating_sub(1) as u64),
                call_id: Some(call.id.clone()),
                client: None,
                requested_by: conv.requester().cloned(),
                tool: spec.map_or_else(|| call.call.name.clone(), |s| s.tool.clone()),
                plugin: spec.map(|s| s.plugin.clone()).unwrap_or_default(),
                digest: spec.map(|s| s.digest.clone()).unwrap_or_default(),
                arguments_sha256: arguments_sha256(&arguments),
                arguments: audit.keep_arguments.then_some(arguments),
                grants: {
                    // The grants it ran with: its plugin's, and those given through grant
                    // requests, marked as such.
                    let mut grants = spec.map(|s| s.grants.clone()).unwrap_or_default();
                    grants.extend(
                        call.granted
                            .iter()
                            .map(|g| format!("{g} (given to this call by a grant request)")),
                    );
                    grants
                },
                decision,
                decided_by,
                policy_rule: call
                    .policy
                    .as_ref()
                    .and_then(|n| n.rule.as_ref())
                    .map(cordon_policy::RuleRef::audit_name),
                policy_digest: call
                    .policy
                    .as_ref()
                    .map(|n| n.digest.clone())
                    .filter(|d| !d.is_empty()),
                labels: call.labels.clone(),
                outcome,
                report,
            })),
        }
    }
}

/// The journal as `read_result` reads kept results from it.
struct JournalParts<'a>(&'a mut dyn crate::Journal);

#[async_trait::async_trait]
impl KeptParts for JournalParts<'_> {
    async fn kept_part(&mut self, id: &str, at: KeptAt) -> Result<Option<KeptPart>, String> {
        self.0
            .kept_part(id, at)
            .await
            .map_err(|e| format!("the kept result could not be read: {e}"))
    }
}

/// Grants a person gave through a grant request, as the machine asks the driver to record them.
pub(super) struct GivenGrants<'a> {
    pub(super) call_id: &'a str,
    pub(super) tool: &'a str,
    pub(super) grants: &'a [String],
    pub(super) span: GrantSpan,
    pub(super) by: &'a str,
}

impl Agent {
    /// Records grants a person gave through a grant request: in the lock when given for a
    /// while or for good, and in the audit log whatever the span (or why the lock did not take
    /// them). The call runs again with them either way: a lock that cannot be written costs
    /// only their lasting.
    pub(super) async fn give_grants(
        &self,
        catalog: &ToolCatalog,
        io: &mut TurnIo<'_>,
        given: GivenGrants<'_>,
    ) -> Result<(), AgentError> {
        let GivenGrants {
            call_id,
            tool,
            grants,
            span,
            by,
        } = given;
        let spec = catalog.spec(tool);
        let how_long = span.describe();
        let minutes = match span {
            GrantSpan::Call | GrantSpan::Session => None,
            GrantSpan::Minutes(m) => Some(Some(m)),
            GrantSpan::Forever => Some(None),
        };
        let details = match minutes {
            None => grants
                .iter()
                .map(|g| format!("+ {g} {how_long} (grant request of call {call_id})"))
                .collect(),
            Some(minutes) => match self.tools.grant_for(tool, grants, minutes, by).await {
                Ok(lines) => lines
                    .into_iter()
                    .map(|l| format!("+ {l} (grant request of call {call_id})"))
                    .collect(),
                Err(e) => {
                    tracing::warn!("grants given {how_long} were not recorded: {e}");
                    vec![format!(
                        "not recorded: {} {how_long} ({e}); given to this conversation only \
                         (grant request of call {call_id})",
                        grants.join(", ")
                    )]
                }
            },
        };
        let record = AuditRecord {
            at_ms: now_ms(),
            origin: io.audit.origin.clone(),
            entry: AuditEntry::HomeChange(cordon_core::HomeChangeAudit {
                action: "grant".to_string(),
                plugin: spec.map(|s| s.plugin.clone()).unwrap_or_default(),
                digest: spec.map(|s| s.digest.clone()).unwrap_or_default(),
                details,
                by: by.to_string(),
            }),
        };
        io.journal.audit(record).await?;
        Ok(())
    }
}

impl Agent {
    /// Puts in the audit log the grants given for a while that ended and were dropped from the
    /// lock since the tools last said so.
    pub(super) async fn audit_expired(&self, io: &mut TurnIo<'_>) -> Result<(), AgentError> {
        for (plugin, line) in self.tools.take_expired() {
            let record = AuditRecord {
                at_ms: now_ms(),
                origin: io.audit.origin.clone(),
                entry: AuditEntry::HomeChange(cordon_core::HomeChangeAudit {
                    action: "expire".to_string(),
                    plugin,
                    digest: String::new(),
                    details: vec![line],
                    by: "Cordon (the grant's time ran out)".to_string(),
                }),
            };
            io.journal.audit(record).await?;
        }
        Ok(())
    }
}
