//! The places of a running batch: at most `max_parallel_tools` of its calls run at once, and
//! each is marked started in the transition that gives it a place, so a host taking the
//! session up knows which calls never started.

use serde_json::Value;

use super::{Action, AgentEvent, Env, ToolRun};
use crate::conversation::{CallStatus, PlannedCall};

/// Whether `call_id` names a call of the batch that is running (approved, no result yet).
pub(super) fn is_running(batch: &[PlannedCall], call_id: &str) -> bool {
    batch
        .iter()
        .any(|p| p.id == call_id && p.status == CallStatus::Approved)
}

/// Gives the queued calls of a running batch the places free of `max_parallel_tools`, in the
/// model's order: each is marked started (`approved`) in this transition, which is recorded
/// before it runs, and run.
pub(super) fn start_queued(batch: &mut [PlannedCall], env: Env<'_>, out: &mut Vec<Action>) {
    let running = batch
        .iter()
        .filter(|p| p.status == CallStatus::Approved)
        .count();
    let places = env.limits.max_parallel_tools.saturating_sub(running);
    let mut started = Vec::new();
    for p in batch
        .iter_mut()
        .filter(|p| p.status == CallStatus::Queued)
        .take(places)
    {
        p.status = CallStatus::Approved;
        started.push(p.id.clone());
    }
    if started.is_empty() {
        return;
    }
    let runs: Vec<ToolRun> = approved_calls(batch)
        .into_iter()
        .filter(|run| started.contains(&run.call_id))
        .collect();
    for run in &runs {
        out.push(Action::Emit(AgentEvent::ToolStarted {
            call_id: run.call_id.clone(),
            tool: run.tool.clone(),
            arguments: run.arguments.clone(),
        }));
    }
    out.push(Action::RunTools { calls: runs });
}

/// The approved calls of a batch with their arguments, as the driver runs them.
pub(super) fn approved_calls(batch: &[PlannedCall]) -> Vec<ToolRun> {
    batch
        .iter()
        .filter(|p| p.status == CallStatus::Approved)
        .map(|p| ToolRun {
            call_id: p.id.clone(),
            tool: p.call.name.clone(),
            arguments: p.arguments.clone().unwrap_or(Value::Null),
            grants: p.granted.clone(),
        })
        .collect()
}
