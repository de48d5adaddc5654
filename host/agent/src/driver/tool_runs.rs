//! Running a batch of approved calls: each in its sandbox, at most `max_parallel_tools` at a
//! time, the built-in `read_result` answered from the conversation; each result audited and
//! fed to the machine as it comes.

use std::collections::{BTreeMap, VecDeque};

use futures::StreamExt;

use cordon_core::{
    AuditEntry, AuditRecord, CallOutcome, CallReport, ToolCallAudit, arguments_sha256, now_ms,
};
use serde_json::Value;

use super::{Agent, AgentError, AuditContext, TurnIo};
use crate::conversation::{Conversation, PlannedCall, State};
use crate::machine::{Action, Event, ToolCatalog, ToolOutcome, ToolRun};
use crate::tools::{ToolFailure, ToolFailureKind, render_result};

impl Agent {
    /// Runs the approved calls, at most `max_parallel_tools` at a time. Each result is audited
    /// and fed to the machine (and so recorded) as soon as its call ends, so a stop of the host
    /// loses only the results of calls still running. A cancel stops the running calls and
    /// wins over whatever finishes at the same moment.
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
        self.tally(catalog, &planned, &calls, io).await?;
        let mut running: Vec<String> = calls.iter().map(|c| c.call_id.clone()).collect();
        // Calls of the built-in `read_result` are answered here, from the conversation.
        let page = crate::spill::threshold(self.config.context.result_budget_tokens)
            .unwrap_or(crate::spill::PAGE_BYTES);
        let mut paged: BTreeMap<String, Result<Vec<cordon_core::Content>, ToolFailure>> = calls
            .iter()
            .filter(|run| {
                catalog
                    .spec(&run.tool)
                    .is_some_and(crate::spill::is_builtin)
            })
            .map(|run| {
                let answer = crate::spill::read(&conv.messages, &run.arguments, page)
                    .map(|text| vec![cordon_core::Content::Text(text)])
                    .map_err(|e| ToolFailure::new(ToolFailureKind::InvalidArguments, e));
                (run.call_id.clone(), answer)
            })
            .collect();
        let child = io.cancel.child_token();
        let tools = self.tools.clone();
        let futs = calls.into_iter().map(|run| {
            let token = child.clone();
            let tools = tools.clone();
            let answered = paged.remove(&run.call_id);
            async move {
                let (result, report) = match answered {
                    Some(result) => (result, None),
                    None => {
                        tools
                            .call_reported(&run.tool, run.arguments.clone(), token)
                            .await
                    }
                };
                (run, result, report)
            }
        });
        let mut results =
            futures::stream::iter(futs).buffer_unordered(self.config.agent.max_parallel_tools);
        // Until every call has returned: the batch's last result ends the loop, so a cancel
        // that comes after it is the next action's to handle, never this batch's.
        while !running.is_empty() {
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
                // and record each as cancelled.
                child.cancel();
                drop(results);
                for id in &running {
                    if let Some(p) = planned.get(id) {
                        let outcome = CallOutcome::Error {
                            kind: "cancelled".to_string(),
                            message: "cancelled by the user while it ran or waited to run; it \
                                      may have had part of its effect"
                                .to_string(),
                        };
                        let record = self.call_record(conv, catalog, &io.audit, p, outcome, None);
                        io.journal.audit(record).await?;
                    }
                }
                let cancel = Event::Cancel {
                    partial: String::new(),
                };
                return self.apply(conv, catalog, cancel, io, queue).await;
            };
            running.retain(|id| *id != run.call_id);
            if let Some(p) = planned.get(&run.call_id) {
                let outcome = match &result {
                    Ok(_) => CallOutcome::Ok,
                    Err(f) => CallOutcome::Error {
                        kind: f.kind.as_str().to_string(),
                        message: f.message.clone(),
                    },
                };
                let record = self.call_record(conv, catalog, &io.audit, p, outcome, report);
                io.journal.audit(record).await?;
            }
            let outcome = ToolOutcome {
                call_id: run.call_id,
                content: render_result(&result),
                is_error: result.is_err(),
            };
            self.apply(conv, catalog, Event::ToolFinished { outcome }, io, queue)
                .await?;
        }
        Ok(())
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
                grants: spec.map(|s| s.grants.clone()).unwrap_or_default(),
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
