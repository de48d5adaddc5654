//! The conversation state machine, sans IO.
//!
//! [`step`] is a pure transition: given a conversation (its state and history), an [`Event`]
//! and the environment (the tool catalog and the turn limits), it updates the conversation and
//! returns the [`Action`]s the driver must perform. Nothing here talks to the network, the
//! terminal or the tools, so every transition is unit-tested and a conversation saved in any
//! state can be resumed with [`resume`].
//!
//! The table is the machine: each row is one arm of the match in [`step`], in the same order,
//! and names the handler (in `transitions.rs`) that arm calls; the places of a running batch
//! (which calls may start) are `places.rs`.
//!
//! | state                     | event             | handler            | next state / effect |
//! |---------------------------|-------------------|--------------------|---------------------|
//! | Idle, Failed              | UserMessage       | `start_turn`       | AwaitingModel: call the model |
//! | Failed                    | Retry             | `retry_failed`     | AwaitingModel: call the model again |
//! | AwaitingModel             | ModelResponded    | `receive_response` | ProcessingModelResponse |
//! | AwaitingModel             | ModelFailed       | `model_failed`     | TransientFailure (retry left) or Failed |
//! | TransientFailure          | RetryTimerFired   | `call_model`       | AwaitingModel |
//! | ProcessingModelResponse   | Proceed           | `process_response` | Idle (answer), Idle (no progress), AwaitingApproval, ExecutingTools or HandlingToolError |
//! | AwaitingApproval          | ApprovalGiven (for a grant request) | `granting::answer_grant` | the call approved to run again with the grant, or given its refusal; then as below |
//! | AwaitingApproval          | ApprovalGiven (for a pending call) | `apply_approval` | AwaitingApproval (more pending), ExecutingTools or HandlingToolError |
//! | ExecutingTools            | ToolFinished (for a running call) | `record_result` | ExecutingTools (more running), AwaitingModel or HandlingToolError |
//! | ExecutingTools            | ToolsFinished     | `record_results`   | AwaitingModel (next iteration or final-answer pass) or HandlingToolError |
//! | HandlingToolError         | Proceed           | `next_request`     | AwaitingModel (next iteration or final-answer pass) |
//! | any state but Idle/Failed | Cancel            | `cancel`           | Idle (partial answer kept and marked; pending calls answered as cancelled) |
//! | any other pair            | any other event   | `does_not_apply`   | a [`StepError`]; the conversation is unchanged |
//!
//! Every tool call gets an identity of Cordon's own (`c1`, `c2`, … per conversation) when the
//! model's answer is processed: approvals, runs, results and events address a call by it. The
//! model's id is kept only for the wire, after making it unique within the answer (a missing
//! or repeated id is replaced), so one answer never stands for two calls and each `role: tool`
//! result answers exactly one call.

mod action;
mod catalog;
mod env;
mod event;
mod granting;
mod places;
mod resume;
mod transitions;

#[cfg(test)]
mod tests;

pub use action::{Action, AgentEvent, ApprovalRequest, RequestedCall, ToolRun};
pub use catalog::ToolCatalog;
pub use env::{CallInputs, Env, NO_INPUTS, TurnLimits};
pub use event::{Event, ToolOutcome};
pub use resume::{INTERRUPTED, resume};

use crate::conversation::Conversation;
pub use crate::conversation::{CallStatus, PlannedCall, State};
use granting::Given;
use places::is_running;
use transitions::{
    UserTurn, after_approval, apply_approval, call_model, cancel, is_pending, model_failed,
    next_request, process_response, receive_response, record_result, record_results, retry_failed,
    start_turn,
};

/// An event that does not fit the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StepError {
    /// The state's name.
    pub state: &'static str,
    /// What was wrong and what to do.
    pub message: String,
}

fn reject(state: &State, message: impl Into<String>) -> StepError {
    StepError {
        state: state.name(),
        message: message.into(),
    }
}

/// Applies one event. On error the conversation is unchanged.
pub fn step(conv: &mut Conversation, event: Event, env: Env<'_>) -> Result<Vec<Action>, StepError> {
    let state = std::mem::replace(&mut conv.state, State::Idle);
    let mut out = Vec::new();
    match (state, event) {
        (
            State::Idle | State::Failed { .. },
            Event::UserMessage {
                text,
                by,
                parts,
                parameters,
            },
        ) => start_turn(
            conv,
            UserTurn {
                text,
                by,
                parts,
                parameters,
            },
            &mut out,
        ),
        (State::Failed { final_pass, .. }, Event::Retry) => {
            retry_failed(conv, final_pass, &mut out)
        }
        (State::AwaitingModel { final_pass }, Event::ModelResponded { response }) => {
            receive_response(conv, response, final_pass, &mut out)
        }
        (State::AwaitingModel { final_pass }, Event::ModelFailed { failure }) => {
            model_failed(conv, failure, final_pass, env, &mut out)
        }
        (State::TransientFailure { final_pass, .. }, Event::RetryTimerFired) => {
            call_model(conv, final_pass, &mut out)
        }
        (
            State::ProcessingModelResponse {
                response,
                final_pass,
            },
            Event::Proceed,
        ) => process_response(conv, response, final_pass, env, &mut out),
        (
            State::AwaitingApproval { batch },
            Event::ApprovalGiven {
                call_id,
                answer,
                by,
                at_ms,
            },
        ) if is_pending(&batch, &call_id) => {
            let given = Given { by, at_ms };
            if granting::is_grant_request(&batch, &call_id) {
                let mut batch = batch;
                granting::answer_grant(conv, &mut batch, call_id, answer, given, env, &mut out);
                after_approval(conv, batch, env, &mut out)
            } else {
                apply_approval(conv, batch, call_id, answer, given, env, &mut out)
            }
        }
        (State::ExecutingTools { batch }, Event::ToolFinished { outcome })
            if is_running(&batch, &outcome.call_id) =>
        {
            record_result(conv, batch, outcome, env, &mut out)
        }
        (State::ExecutingTools { batch }, Event::ToolsFinished { results }) => {
            record_results(conv, batch, results, env, &mut out)
        }
        (State::HandlingToolError { .. }, Event::Proceed) => next_request(conv, env, &mut out),
        (state, Event::Cancel { partial })
            if !matches!(state, State::Idle | State::Failed { .. }) =>
        {
            cancel(conv, state, partial, &mut out)
        }
        (state, event) => {
            let error = does_not_apply(&state, &event);
            conv.state = state;
            return Err(error);
        }
    }
    Ok(out)
}

/// The error for a pair the table has no row for, saying what to do instead where the event
/// has a meaning in some other state.
fn does_not_apply(state: &State, event: &Event) -> StepError {
    let message = match (state, event) {
        (_, Event::UserMessage { .. }) => format!(
            "cannot send a new message: the current turn is still {} — wait for it to finish or cancel it",
            state.name()
        ),
        (_, Event::Retry) => format!(
            "nothing to retry: the conversation is {}, not failed",
            state.name()
        ),
        (State::AwaitingApproval { batch }, Event::ApprovalGiven { call_id, .. }) => {
            let pending: Vec<&str> = batch
                .iter()
                .filter(|p| p.status == CallStatus::Pending)
                .map(|p| p.id.as_str())
                .collect();
            format!(
                "no pending call `{call_id}`; the calls waiting for approval are: {}",
                pending.join(", ")
            )
        }
        (State::ExecutingTools { batch }, Event::ToolFinished { outcome }) => {
            let running: Vec<&str> = batch
                .iter()
                .filter(|p| p.status == CallStatus::Approved)
                .map(|p| p.id.as_str())
                .collect();
            format!(
                "no running call `{}`; the calls running are: {}",
                outcome.call_id,
                running.join(", ")
            )
        }
        (_, Event::Cancel { .. }) => "nothing to cancel: no turn is running".to_string(),
        _ => format!(
            "the event {} does not apply while {}",
            event_name(event),
            state.name()
        ),
    };
    reject(state, message)
}

fn event_name(e: &Event) -> &'static str {
    match e {
        Event::UserMessage { .. } => "user_message",
        Event::Retry => "retry",
        Event::ModelResponded { .. } => "model_responded",
        Event::ModelFailed { .. } => "model_failed",
        Event::RetryTimerFired => "retry_timer_fired",
        Event::Proceed => "proceed",
        Event::ApprovalGiven { .. } => "approval_given",
        Event::ToolFinished { .. } => "tool_finished",
        Event::ToolsFinished { .. } => "tools_finished",
        Event::Cancel { .. } => "cancel",
    }
}
