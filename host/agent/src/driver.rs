//! The tokio driver: performs the machine's actions (call the model, ask for approval, run
//! tools, wait before retrying, persist, emit) and feeds the results back as events.
//!
//! - here: the turn loop ([`Agent::drive`]), and how each transition is recorded before its
//!   actions are performed ([`Agent::commit`]);
//! - `actions`: what each action does, and the event that starts a turn;
//! - `catalog`: the tools and the system prompt a turn offers;
//! - `model_request`: the request to the model, and reading its answer;
//! - `tool_runs`: running the calls that may run, and giving grants a person gave;
//! - `policy_inputs`: what the policy sees of a call;
//! - `held_events`: what a turn shows, held back until its transition is recorded;
//! - `handle`: a turn on a task of its own ([`TurnHandle`]);
//! - `spans`: the turn's trace spans.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use cordon_core::{AuditRecord, Requester};

use crate::approval::GivenAnswer;
use crate::config::{AgentConfig, ConfigError};
use crate::context::Tokenizer;
use crate::conversation::{Conversation, ConversationError, State, TurnOutcome};
use crate::journal::{Cause, Journal, JournalError, NoJournal};
use crate::llm::{LlmClient, LlmSetupError};
use crate::machine::{
    Action, AgentEvent, ApprovalRequest, Event, StepError, ToolCatalog, TurnLimits,
};
use crate::parameters::TurnParameters;
use crate::tool_host::ToolHost;

/// Errors that stop a turn before or outside the model's control.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model client could not be created.
    #[error(transparent)]
    Llm(#[from] LlmSetupError),
    /// The request does not fit the conversation's state (e.g. a message while a turn runs).
    #[error(transparent)]
    Step(#[from] StepError),
    /// A saved conversation could not be used.
    #[error(transparent)]
    Conversation(#[from] ConversationError),
    /// The turn's task ended abnormally.
    #[error("the conversation task stopped unexpectedly: {0}")]
    Task(String),
    /// The journal did not record a transition or a tool call: the turn stopped before
    /// performing anything that was not recorded, and can be resumed from the last record.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The `[policy]` does not load for the installed tools.
    #[error(transparent)]
    Policy(#[from] cordon_policy::PolicyError),
}

/// The built-in base system prompt.
pub const BASE_PROMPT: &str = "You are a helpful assistant. Answer accurately and concisely; check facts with a tool rather than guess.";

/// The instruction of the final-answer pass.
pub fn final_pass_prompt(limit: u32) -> String {
    format!(
        "You have used the maximum number of tool steps ({limit}) for this request. Do not call any more tools. \
Using only the information above, give your final answer now, and say clearly what you could not find out."
    )
}

/// How a turn starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnInput {
    /// A new user message.
    Message(String),
    /// A new user message as a client sent it: with content parts, and what the client set
    /// for the turn's model requests.
    Request(Box<TurnRequest>),
    /// Re-send the request of a failed turn.
    Retry,
    /// Continue a conversation saved in the middle of a turn.
    Resume,
}

/// A user message as a client sent it; see [`TurnInput::Request`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnRequest {
    /// The text (of every text part).
    pub text: String,
    /// The content parts as sent (images, audio), when not plain text.
    pub parts: Option<Vec<Value>>,
    /// Sampling and output settings, and the first request's tool choice.
    pub parameters: TurnParameters,
}

impl TurnRequest {
    fn into_event(self, by: Option<Requester>) -> Event {
        Event::UserMessage {
            text: self.text,
            by,
            parts: self.parts,
            parameters: self.parameters,
        }
    }
}

/// The user interface of a turn: receives events, answers approval questions, saves.
#[async_trait]
pub trait Frontend: Send {
    /// An event to show.
    fn event(&mut self, event: &AgentEvent);
    /// Asks about a call; the answer says who gave it.
    async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer;
    /// The history changed; save it if you keep it on disk.
    fn persist(&mut self, _conversation: &Conversation) {}
}

/// Where a driven turn records itself and how it can be stopped; see [`Agent::drive`].
pub struct TurnIo<'a> {
    /// Shows events and answers approval questions.
    pub frontend: &'a mut dyn Frontend,
    /// Records every transition before its actions are performed, and every tool call.
    pub journal: &'a mut dyn Journal,
    /// Cancels the turn: the machine records the cancellation and the turn ends.
    pub cancel: &'a CancellationToken,
    /// Stops driving at the next point where nothing is lost (the host is shutting down): a
    /// model request or an approval wait is abandoned without a transition, running tool
    /// calls are let finish, and the conversation stays where the journal last recorded it,
    /// to be resumed.
    pub suspend: Option<&'a CancellationToken>,
    /// What the audit records of the turn's tool calls carry besides the call.
    pub audit: AuditContext,
}

/// What the audit records of a turn's tool calls carry besides the call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditContext {
    /// The session, if the conversation is one.
    pub session: Option<String>,
    /// Which door the turn came through: `chat`, `run`, `serve`.
    pub origin: String,
    /// Whether the records keep the arguments themselves, not only their digest.
    pub keep_arguments: bool,
    /// Who asks for a turn this starts, through a served door (`None`: a user at the
    /// terminal). A resumed turn keeps the requester it was recorded with.
    pub requested_by: Option<Requester>,
}

/// How [`Agent::drive`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Driven {
    /// The turn ended (answered, failed, cancelled, …).
    Finished(TurnOutcome),
    /// Driving stopped on `suspend`; the turn goes on when resumed.
    Suspended,
}

/// The conversation engine: a model client, the tools and the configuration.
pub struct Agent {
    config: AgentConfig,
    llm: LlmClient,
    /// `[agent] router_model`'s client, when one is named.
    router: Option<LlmClient>,
    tools: Arc<dyn ToolHost>,
    tokenizer: Tokenizer,
    limits: TurnLimits,
    /// The limits while the host is stopping: running calls finish, queued ones stay queued
    /// (and run when the session is taken up again).
    stopping: TurnLimits,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("llm", &self.llm).finish()
    }
}

mod actions;
mod catalog;
mod handle;
mod held_events;
mod model_request;
mod policy_inputs;
mod spans;
mod tool_runs;

pub use handle::TurnHandle;

use actions::Performed;
use held_events::{HeldEvents, until_suspended};

pub use policy_inputs::policy_origin;

use model_request::Asking;

impl Agent {
    /// Checks the config and creates the model client (reading the API key variable).
    pub fn new(config: AgentConfig, tools: Arc<dyn ToolHost>) -> Result<Self, AgentError> {
        config.validate()?;
        // A policy that does not load stops the host before it serves anything.
        crate::policy::load(&config.policy, &tools.tools())?;
        let llm = LlmClient::new(&config.llm)?;
        // The router is the same server and key with its own model.
        let router = match &config.agent.router_model {
            Some(model) => Some(LlmClient::new(&crate::config::LlmConfig {
                model: model.clone(),
                ..config.llm.clone()
            })?),
            None => None,
        };
        let tokenizer = Tokenizer::new(&config.context.tokenizer, &config.llm.model);
        let limits = TurnLimits {
            max_iterations: config.agent.max_iterations,
            max_repeats: config.agent.max_repeats,
            retry: config.llm.retry,
            max_parallel_tools: config.agent.max_parallel_tools,
        };
        let stopping = TurnLimits {
            max_parallel_tools: 0,
            ..limits.clone()
        };
        Ok(Self {
            config,
            llm,
            router,
            tools,
            tokenizer,
            limits,
            stopping,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Runs one turn to its end (answer, failure, cancellation), driving the state machine,
    /// with nothing recorded. `Err` only for requests that do not fit the conversation's state;
    /// the conversation is then unchanged.
    pub async fn run_turn(
        &self,
        conv: &mut Conversation,
        input: TurnInput,
        frontend: &mut dyn Frontend,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, AgentError> {
        let mut io = TurnIo {
            frontend,
            journal: &mut NoJournal,
            cancel,
            suspend: None,
            audit: AuditContext::default(),
        };
        match self.drive(conv, input, &mut io).await? {
            Driven::Finished(outcome) => Ok(outcome),
            // Without a suspend token, driving only stops when the turn ends.
            Driven::Suspended => Err(AgentError::Task("the turn was suspended".to_string())),
        }
    }

    /// Drives one turn: each event goes through the state machine, the resulting conversation
    /// is recorded in the journal, and only then are the transition's actions performed (a
    /// model request, which changes nothing outside, may go out while the record is written;
    /// its answer and everything shown wait for the record: see [`Agent::commit`]). So
    /// whatever stops the process, the journal holds a state from which the turn can go on
    /// ([`TurnInput::Resume`]) with nothing performed twice. `Err` for requests that do not fit
    /// the conversation's state (the conversation is unchanged) and when the journal fails
    /// (the turn stops at the last recorded state).
    pub async fn drive(
        &self,
        conv: &mut Conversation,
        input: TurnInput,
        io: &mut TurnIo<'_>,
    ) -> Result<Driven, AgentError> {
        let span = spans::turn(&input, &io.audit);
        let driven = self
            .drive_turn(conv, input, io)
            .instrument(span.clone())
            .await;
        spans::turn_ended(&span, &driven, conv);
        driven
    }

    /// [`Agent::drive`], inside the turn's span: the first transition, then each queued action
    /// performed ([`Agent::perform`]) and the event it brings fed back, until nothing is left.
    async fn drive_turn(
        &self,
        conv: &mut Conversation,
        input: TurnInput,
        io: &mut TurnIo<'_>,
    ) -> Result<Driven, AgentError> {
        let mut catalog = self.catalog(&conv.grants, conv.requester());
        // Answers saved under model-facing names move to identities; same meaning, so the
        // conversation counts as unchanged even if the turn is then refused.
        catalog.upgrade_session(&mut conv.session_approvals);
        catalog.label_history(conv);
        self.audit_expired(io).await?;
        let (first, cause) = self.first_step(conv, &catalog, input, io)?;
        let mut queue: VecDeque<Action> = VecDeque::new();
        let mut next = self
            .commit(conv, &mut catalog, cause, first, io, &mut queue)
            .await?;
        loop {
            let action = match next {
                Committed::Queued => match queue.pop_front() {
                    Some(action) => action,
                    None => break,
                },
                Committed::Answered(event) => {
                    next = self
                        .advance(conv, &mut catalog, event, io, &mut queue)
                        .await?;
                    continue;
                }
                Committed::Suspended => return Ok(Driven::Suspended),
            };
            next = match self
                .perform(action, conv, &mut catalog, io, &mut queue)
                .await?
            {
                Performed::Done => Committed::Queued,
                Performed::Brought(event) => {
                    self.advance(conv, &mut catalog, event, io, &mut queue)
                        .await?
                }
                Performed::Suspended => return Ok(Driven::Suspended),
            };
        }
        // Stopped with calls still queued: they run when the session is taken up again.
        if matches!(conv.state, State::ExecutingTools { .. })
            && io.suspend.is_some_and(CancellationToken::is_cancelled)
        {
            return Ok(Driven::Suspended);
        }
        Ok(Driven::Finished(
            conv.turns
                .last()
                .and_then(|t| t.outcome.clone())
                .unwrap_or(TurnOutcome::Failed {
                    error: format!("the turn stopped while {}", conv.state.name()),
                    upstream_status: None,
                    retry_after_ms: None,
                }),
        ))
    }

    /// One transition: the event goes through the machine, the journal records the result
    /// with `audits` (the records of the calls whose end the event brings) and those of the
    /// calls the transition settled, and the other actions join the queue.
    async fn apply(
        &self,
        conv: &mut Conversation,
        catalog: &ToolCatalog,
        event: Event,
        mut audits: Vec<AuditRecord>,
        io: &mut TurnIo<'_>,
        queue: &mut VecDeque<Action>,
    ) -> Result<(), AgentError> {
        let mut actions = self.step(conv, catalog, &event, io).await?;
        audits.extend(self.settled(conv, catalog, &io.audit, &mut actions));
        io.journal
            .transition_audited(conv, &Cause::Event { event }, audits)
            .await?;
        queue.extend(actions);
        Ok(())
    }

    /// The audit records of the calls a transition settled without running them (denied,
    /// closed as interrupted), taken out of its actions to be recorded with the transition
    /// itself (see [`Journal::transition_audited`]).
    fn settled(
        &self,
        conv: &Conversation,
        catalog: &ToolCatalog,
        audit: &AuditContext,
        actions: &mut Vec<Action>,
    ) -> Vec<AuditRecord> {
        let mut records = Vec::new();
        actions.retain(|action| match action {
            Action::AuditCall { call, outcome } => {
                records.push(self.call_record(conv, catalog, audit, call, outcome.clone(), None));
                false
            }
            _ => true,
        });
        records
    }

    /// The turn's limits, or while the host is stopping, limits that start no queued call.
    fn limits_now(&self, io: &TurnIo<'_>) -> &TurnLimits {
        match io.suspend {
            Some(s) if s.is_cancelled() => &self.stopping,
            _ => &self.limits,
        }
    }

    /// One transition of the main loop: as [`Agent::apply`], but recorded by
    /// [`Agent::commit`], so a transition that asks the model next asks it at once.
    async fn advance(
        &self,
        conv: &mut Conversation,
        catalog: &mut ToolCatalog,
        event: Event,
        io: &mut TurnIo<'_>,
        queue: &mut VecDeque<Action>,
    ) -> Result<Committed, AgentError> {
        let actions = self.step(conv, catalog, &event, io).await?;
        self.commit(conv, catalog, Cause::Event { event }, actions, io, queue)
            .await
    }

    /// Records the transition that produced `actions` and queues them; except when they only
    /// announce (emit, persist) and then ask the model, with nothing else queued and no context
    /// summary to make first: then the
    /// model is asked while the transition is being recorded, and what the turn shows (the
    /// announcements, the model's deltas) is held back until the record is written. A model
    /// request changes nothing outside, so if the process stops before the record, the turn
    /// resumes from the previous one and asks again, and still nothing unrecorded was shown;
    /// if the record fails, the request is dropped. This takes the write off the time to the
    /// first token (one for a new session, which is written with its first transition).
    async fn commit(
        &self,
        conv: &mut Conversation,
        catalog: &mut ToolCatalog,
        cause: Cause,
        mut actions: Vec<Action>,
        io: &mut TurnIo<'_>,
        queue: &mut VecDeque<Action>,
    ) -> Result<Committed, AgentError> {
        let suspended = io.suspend.is_some_and(CancellationToken::is_cancelled);
        let audits = self.settled(conv, catalog, &io.audit, &mut actions);
        // Summarising a pruned context is a model call of its own, made while the request is
        // built: the transition is recorded first then, so it never waits for one.
        let summarizes = self.config.context.summarize;
        let final_pass = match actions.last() {
            Some(Action::CallModel { final_pass })
                if queue.is_empty()
                    && !suspended
                    && !summarizes
                    && actions[..actions.len() - 1]
                        .iter()
                        .all(|a| matches!(a, Action::Emit(_) | Action::Persist)) =>
            {
                *final_pass
            }
            _ => {
                io.journal.transition_audited(conv, &cause, audits).await?;
                queue.extend(actions);
                return Ok(Committed::Queued);
            }
        };
        actions.pop();
        *catalog = self.catalog(&conv.grants, conv.requester());
        let held = HeldEvents::new(&mut *io.frontend);
        for action in actions {
            match action {
                Action::Emit(e) => held.event(&e),
                Action::Persist => held.persist_when_recorded(),
                _ => {}
            }
        }
        let (request, count) = self
            .build_request(conv, catalog, final_pass, &mut |e| held.event(e), io.cancel)
            .await;
        let asking = Asking {
            iteration: conv.progress.iterations + 1,
            messages: conv.messages.len(),
            final_pass,
        };
        let conv: &Conversation = conv;
        let journal = &mut *io.journal;
        let record = async {
            journal.transition_audited(conv, &cause, audits).await?;
            held.release(conv);
            Ok::<(), AgentError>(())
        };
        let mut emit = |e: &AgentEvent| held.event(e);
        let ask = until_suspended(
            io.suspend,
            self.ask_model(&request, count, asking, &mut emit, io.cancel),
        );
        tokio::pin!(record, ask);
        let answered = tokio::select! {
            biased;
            recorded = &mut record => {
                recorded?;
                ask.await
            }
            answered = &mut ask => {
                record.await?;
                answered
            }
        };
        Ok(answered.map_or(Committed::Suspended, Committed::Answered))
    }
}

/// How a transition went on in [`Agent::commit`].
enum Committed {
    /// Recorded; its actions are queued.
    Queued,
    /// Recorded, and the model it asked for has answered: the next event.
    Answered(Event),
    /// Recorded; the model was not asked to the end, since the host is stopping.
    Suspended,
}
