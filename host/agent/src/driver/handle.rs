//! A turn on a task of its own ([`Agent::start_turn`]): events come out of a channel, approvals
//! and cancellation go in through the [`TurnHandle`].

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Agent, AgentError, Frontend, TurnInput};
use crate::approval::{ApprovalAnswer, GivenAnswer};
use crate::conversation::{Conversation, TurnOutcome};
use crate::machine::{AgentEvent, ApprovalRequest};

impl Agent {
    /// Starts a turn on a task; events arrive on the returned handle, approvals and
    /// cancellation go through it, and [`TurnHandle::finish`] gives the conversation back.
    pub fn start_turn(self: &Arc<Self>, mut conv: Conversation, input: TurnInput) -> TurnHandle {
        let (etx, erx) = mpsc::unbounded_channel();
        let (atx, arx) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let agent = self.clone();
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            let mut frontend = ChannelFrontend {
                events: etx,
                answers: arx,
            };
            let r = agent
                .run_turn(&mut conv, input, &mut frontend, &token)
                .await;
            (conv, r)
        });
        TurnHandle {
            events: erx,
            answers: atx,
            cancel,
            task,
        }
    }
}

struct ChannelFrontend {
    events: mpsc::UnboundedSender<AgentEvent>,
    answers: mpsc::UnboundedReceiver<(String, GivenAnswer)>,
}

#[async_trait]
impl Frontend for ChannelFrontend {
    fn event(&mut self, event: &AgentEvent) {
        let _ = self.events.send(event.clone());
    }

    async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer {
        while let Some((id, answer)) = self.answers.recv().await {
            if id == request.call_id {
                return answer;
            }
        }
        // The handle was dropped: nobody can approve, so refuse.
        GivenAnswer::new(ApprovalAnswer::No, "nobody (the turn's handle was dropped)")
    }
}

/// A turn running on a task (see [`Agent::start_turn`]).
pub struct TurnHandle {
    events: mpsc::UnboundedReceiver<AgentEvent>,
    answers: mpsc::UnboundedSender<(String, GivenAnswer)>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<(Conversation, Result<TurnOutcome, AgentError>)>,
}

impl TurnHandle {
    /// The next event; `None` when the turn has ended.
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        self.events.recv().await
    }

    /// Answers the approval question for `call_id`, as `the user`.
    pub fn answer(&self, call_id: &str, answer: ApprovalAnswer) {
        self.answer_as(call_id, GivenAnswer::new(answer, "the user"));
    }

    /// Answers the approval question for `call_id`, saying who answered.
    pub fn answer_as(&self, call_id: &str, answer: GivenAnswer) {
        let _ = self.answers.send((call_id.to_string(), answer));
    }

    /// Cancels the running stream or tool calls; the turn ends with a partial answer kept.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Waits for the end; gives the conversation back with the turn's outcome (an `Err`
    /// outcome, such as a message sent while a turn runs, leaves the conversation unchanged).
    /// The outer `Err` only when the task itself died.
    pub async fn finish(
        self,
    ) -> Result<(Conversation, Result<TurnOutcome, AgentError>), AgentError> {
        self.task.await.map_err(|e| AgentError::Task(e.to_string()))
    }
}
