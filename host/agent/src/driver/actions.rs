//! What the driver does for each of the machine's actions, and the event that starts a turn.
//!
//! An action either finishes here (shown, saved, audited, grants given, tools run: the results
//! come back through the queue) or brings the next event (the model's answer, a person's
//! answer, a retry timer firing); work that starts something new waits for the next drive when
//! the host is suspending turns.

use std::collections::VecDeque;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::held_events::until_suspended;
use super::{Agent, AgentError, TurnInput, TurnIo, TurnRequest, spans, tool_runs};
use crate::conversation::Conversation;
use crate::journal::Cause;
use crate::machine::{self, Action, AgentEvent, CallInputs, Env, Event, ToolCatalog};

/// What performing one action led to.
pub(super) enum Performed {
    /// Done; the turn goes on with the queue.
    Done,
    /// The event it brought, for the machine.
    Brought(Event),
    /// The host is suspending turns; this one stops here and resumes from its record.
    Suspended,
}

impl Agent {
    /// The first transition of a turn: the user's message or request, a retry, or taking up
    /// a recorded turn where it stopped.
    pub(super) fn first_step(
        &self,
        conv: &mut Conversation,
        catalog: &ToolCatalog,
        input: TurnInput,
        io: &TurnIo<'_>,
    ) -> Result<(Vec<Action>, Cause), AgentError> {
        let inputs = CallInputs::default();
        let env = Env {
            catalog,
            limits: self.limits_now(io),
            inputs: &inputs,
        };
        let event = match input {
            TurnInput::Message(text) => TurnRequest {
                text,
                ..TurnRequest::default()
            }
            .into_event(io.audit.requested_by.clone()),
            TurnInput::Request(request) => request.into_event(io.audit.requested_by.clone()),
            TurnInput::Retry => Event::Retry,
            TurnInput::Resume => {
                let recorded = io.journal.records_every_transition();
                return Ok((machine::resume(conv, env, recorded)?, Cause::Resume));
            }
        };
        Ok((
            machine::step(conv, event.clone(), env)?,
            Cause::Event { event },
        ))
    }

    /// Performs one action of the queue.
    pub(super) async fn perform(
        &self,
        action: Action,
        conv: &mut Conversation,
        catalog: &mut ToolCatalog,
        io: &mut TurnIo<'_>,
        queue: &mut VecDeque<Action>,
    ) -> Result<Performed, AgentError> {
        let suspended = io.suspend.is_some_and(CancellationToken::is_cancelled);
        let brought = |event: Option<Event>| match event {
            Some(event) => Performed::Brought(event),
            None => Performed::Suspended,
        };
        Ok(match action {
            Action::Emit(e) => {
                io.frontend.event(&e);
                Performed::Done
            }
            Action::Persist => {
                io.frontend.persist(conv);
                Performed::Done
            }
            Action::AuditCall { call, outcome } => {
                let record = self.call_record(conv, catalog, &io.audit, &call, outcome, None);
                io.journal.audit(record).await?;
                Performed::Done
            }
            Action::GiveGrants {
                call_id,
                tool,
                grants,
                span,
                by,
            } => {
                let given = tool_runs::GivenGrants {
                    call_id: &call_id,
                    tool: &tool,
                    grants: &grants,
                    span,
                    by: &by,
                };
                self.give_grants(catalog, io, given).await?;
                Performed::Done
            }
            Action::Advance => Performed::Brought(Event::Proceed),
            // Work that starts something new waits for the next drive when suspended. Calls
            // are the exception: the transition that gave them their places recorded them as
            // started, so they run (while stopping, none is given one).
            Action::CallModel { .. }
            | Action::ScheduleRetry { .. }
            | Action::RequestApproval { .. }
                if suspended =>
            {
                Performed::Suspended
            }
            Action::CallModel { final_pass } => {
                *catalog = self.catalog(&conv.grants, conv.requester());
                let frontend = &mut *io.frontend;
                let mut emit = |e: &AgentEvent| frontend.event(e);
                let call = self.call_model(conv, catalog, final_pass, &mut emit, io.cancel);
                brought(until_suspended(io.suspend, call).await)
            }
            Action::ScheduleRetry {
                delay_ms, jitter, ..
            } => {
                let ms = if jitter && delay_ms > 1 {
                    rand::random_range(delay_ms / 2..=delay_ms)
                } else {
                    delay_ms
                };
                let cancel = io.cancel;
                let wait = async move {
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => Event::Cancel { partial: String::new() },
                        _ = tokio::time::sleep(Duration::from_millis(ms)) => Event::RetryTimerFired,
                    }
                };
                brought(until_suspended(io.suspend, wait).await)
            }
            Action::RequestApproval { request } => {
                let cancel = io.cancel;
                let frontend = &mut *io.frontend;
                let span = spans::approval(&request);
                let wait = async move {
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => Event::Cancel { partial: String::new() },
                        given = frontend.approve(&request) => Event::ApprovalGiven {
                            call_id: request.call_id.clone(),
                            answer: given.answer,
                            by: given.by,
                            at_ms: given.at_ms,
                        },
                    }
                };
                let given = until_suspended(io.suspend, wait.instrument(span.clone())).await;
                spans::approval_ended(&span, given.as_ref());
                brought(given)
            }
            Action::RunTools { calls } => {
                self.run_tools(conv, catalog, calls, io, queue).await?;
                Performed::Done
            }
        })
    }
}
