//! Continuing a conversation loaded in the middle of a turn.

use super::transitions::{approval_request, approved_calls};
use super::{Action, AgentEvent, StepError, ToolCatalog, reject};
use crate::conversation::{CallStatus, Conversation, State};
use crate::tools::{ToolFailure, ToolFailureKind, render_failure};

/// The actions that continue a conversation loaded in the middle of a turn (after a crash or
/// save). Idle and failed conversations need a new message or `Retry` instead.
///
/// A conversation saved while tools were running cannot tell which of them finished. Calls
/// of tools that cannot change anything are simply run again; a call that could have changed
/// something (a write, a message sent) is never repeated behind the user's back: it is
/// closed with an error telling the model it may or may not have taken effect, so the model
/// can check before asking for it again.
pub fn resume(conv: &mut Conversation, catalog: &ToolCatalog) -> Result<Vec<Action>, StepError> {
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
                request: approval_request(conv, p, catalog),
            }]
        }
        State::ExecutingTools { .. } => return Ok(resume_running(conv, catalog)),
    })
}

/// Resumes a batch that was running: calls that cannot change anything run again; the others
/// are closed with an error, since they may or may not have taken effect.
fn resume_running(conv: &mut Conversation, catalog: &ToolCatalog) -> Vec<Action> {
    let State::ExecutingTools { batch } = &mut conv.state else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in batch
        .iter_mut()
        .filter(|p| p.status == CallStatus::Approved)
    {
        let repeatable = catalog
            .spec(&p.call.name)
            .is_some_and(|spec| !spec.can_change_anything);
        if repeatable {
            continue;
        }
        let message = "Cordon stopped while this call was running, so it may or may \
                       not have taken effect. It was not repeated, because this tool \
                       can change things: check its effect before calling it again";
        out.push(Action::Emit(AgentEvent::ToolCallRejected {
            call_id: p.id.clone(),
            tool: p.call.name.clone(),
            reason: message.to_string(),
        }));
        p.status = CallStatus::Done {
            content: render_failure(&ToolFailure::new(ToolFailureKind::Failed, message)),
            is_error: true,
        };
    }
    out.push(Action::RunTools {
        calls: approved_calls(batch),
    });
    out
}
