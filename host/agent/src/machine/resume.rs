//! Continuing a conversation loaded in the middle of a turn.

use cordon_core::CallOutcome;

use super::places::start_queued;
use super::transitions::{approval_request, finish_batch};
use super::{Action, AgentEvent, Env, StepError, reject};
use crate::conversation::{CallStatus, Conversation, State};
use crate::tools::{ToolFailure, ToolFailureKind, render_failure};

/// What a call that was running when the host stopped tells the model.
pub const INTERRUPTED: &str = "Cordon stopped while this call was running (or about to run), \
     so its effect is unknown: it may or may not have taken effect. It was not run again; \
     check its effect before calling it again";

/// The actions that continue a conversation loaded in the middle of a turn (after a crash, a
/// stop of the host, or a save). Idle and failed conversations need a new message or `Retry`
/// instead.
///
/// A conversation stopped while tools were running cannot tell whether a call whose result
/// was not recorded had any effect, so no such call is ever run again behind the user's back:
/// each is closed with an error telling the model it was interrupted and its effect is
/// unknown. Results recorded before the stop are kept. A call still waiting for its place
/// (`queued`) provably never started when `recorded` says every transition of the
/// conversation was recorded before its actions ran (a session store's journal): it runs now.
/// Otherwise (a conversation saved to a file now and then) it may have started after the
/// save, and is closed as interrupted too.
pub fn resume(
    conv: &mut Conversation,
    env: Env<'_>,
    recorded: bool,
) -> Result<Vec<Action>, StepError> {
    Ok(match &conv.state {
        State::Idle | State::Failed { .. } => {
            return Err(reject(
                &conv.state,
                "nothing to resume: no turn is running; send a message (or retry a failed turn)",
            ));
        }
        State::AwaitingModel { final_pass } => vec![Action::CallModel {
            final_pass: *final_pass,
        }],
        State::TransientFailure { retry, .. } => vec![Action::ScheduleRetry {
            retry: *retry,
            delay_ms: 0,
            jitter: false,
        }],
        State::ProcessingModelResponse { .. } | State::HandlingToolError { .. } => {
            vec![Action::Advance]
        }
        State::AwaitingApproval { batch } => {
            let p = batch
                .iter()
                .find(|p| p.status == CallStatus::Pending)
                .ok_or_else(|| {
                    reject(&conv.state, "the saved approval state has no pending call")
                })?;
            vec![Action::RequestApproval {
                request: approval_request(conv, p, env.catalog),
            }]
        }
        State::ExecutingTools { .. } => resume_running(conv, env, recorded),
    })
}

/// Closes every call of a running batch that may have started and has no recorded result
/// as interrupted, runs those that provably never started, and finishes the batch once none
/// is left to run.
fn resume_running(conv: &mut Conversation, env: Env<'_>, recorded: bool) -> Vec<Action> {
    let State::ExecutingTools { batch } = std::mem::replace(&mut conv.state, State::Idle) else {
        return Vec::new();
    };
    let mut batch = batch;
    let mut out = Vec::new();
    for p in batch.iter_mut().filter(|p| {
        p.status == CallStatus::Approved || (p.status == CallStatus::Queued && !recorded)
    }) {
        out.push(Action::Emit(AgentEvent::ToolCallRejected {
            call_id: p.id.clone(),
            tool: p.call.name.clone(),
            reason: INTERRUPTED.to_string(),
        }));
        p.status = CallStatus::Done {
            content: render_failure(&ToolFailure::new(ToolFailureKind::Failed, INTERRUPTED)),
            is_error: true,
            kept: None,
        };
        out.push(Action::AuditCall {
            call: p.clone(),
            outcome: CallOutcome::Error {
                kind: "interrupted".to_string(),
                message: INTERRUPTED.to_string(),
            },
        });
    }
    start_queued(&mut batch, env, &mut out);
    if batch.iter().any(|p| p.status.is_to_run()) {
        conv.state = State::ExecutingTools { batch };
    } else {
        finish_batch(conv, batch, env, &mut out);
    }
    out
}
