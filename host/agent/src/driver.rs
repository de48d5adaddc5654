//! The tokio driver: performs the machine's actions (call the model, ask for approval, run
//! tools, wait before retrying, persist, emit) and feeds the results back as events.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use cordon_core::{AuditRecord, Requester};

use crate::approval::{ApprovalAnswer, GivenAnswer, Standing};
use crate::config::{AgentConfig, ConfigError, ToolFormat};
use crate::context::Tokenizer;
use crate::conversation::{Conversation, ConversationError, State, TurnOutcome};
use crate::grant_requests::{Applying, SessionGrants};
use crate::journal::{Cause, Journal, JournalError, NoJournal};
use crate::llm::{LlmClient, LlmSetupError};
use crate::machine::{
    self, Action, AgentEvent, ApprovalRequest, CallInputs, Env, Event, StepError, ToolCatalog,
    TurnLimits,
};
use crate::parameters::TurnParameters;
use crate::text_tool_calls;
use crate::tool_host::ToolHost;
use crate::tools::ToolSpec;

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

mod model_request;
mod policy_inputs;
mod spans;
mod tool_runs;

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

    /// The tools the model would be offered now in `conv` (installed, enabled, not denied).
    pub fn offered_tools(&self, conv: &Conversation) -> Vec<ToolSpec> {
        let catalog = self.catalog(&conv.grants, conv.requester());
        let mut session = conv.session_approvals.clone();
        catalog.upgrade_session(&mut session);
        let standing = Standing {
            answers: &session,
            requester: conv.requester(),
            labels: &conv.labels,
        };
        catalog.offered(standing).into_iter().cloned().collect()
    }

    /// The approval policy that applies to each installed tool in `conv`, for `/tools`.
    pub fn tool_policies(&self, conv: &Conversation) -> Vec<(ToolSpec, crate::approval::Decision)> {
        let catalog = self.catalog(&conv.grants, conv.requester());
        let mut session = conv.session_approvals.clone();
        catalog.upgrade_session(&mut session);
        let standing = Standing {
            answers: &session,
            requester: conv.requester(),
            labels: &conv.labels,
        };
        self.tools
            .tools()
            .into_iter()
            .map(|s| {
                let d = catalog.decision(&s, standing);
                (s, d)
            })
            .collect()
    }

    /// The catalog of a turn of a conversation that was given `grants` for itself: each tool
    /// as it runs with them (see [`ToolSpec::widened`]).
    fn catalog(&self, grants: &SessionGrants, requester: Option<&Requester>) -> ToolCatalog {
        let now_ms = cordon_core::now_ms();
        let mut specs: Vec<ToolSpec> = self
            .tools
            .tools()
            .into_iter()
            .map(|s| {
                let extra = grants.of(Applying {
                    plugin: &s.plugin,
                    digest: &s.digest,
                    requester,
                    now_ms,
                });
                if extra.is_empty() {
                    s
                } else {
                    s.widened(&extra)
                }
            })
            .collect();
        // The built-in pager (offered only once a result was too long to send whole), under
        // a name no other tool has; before the policy loads, so rules can name it.
        let free = |name: &str| !specs.iter().any(|s| s.name == name);
        let name = std::iter::once(crate::spill::TOOL.to_string())
            .chain((0..).map(|n| {
                format!(
                    "cordon__read_result{}",
                    if n == 0 {
                        String::new()
                    } else {
                        format!("_{n}")
                    }
                )
            }))
            .find(|n| free(n))
            .unwrap_or_default();
        specs.push(crate::spill::tool_spec(&name));
        // The `[policy]` as cordon.toml says now, so an edit takes effect without a restart.
        let config = crate::policy::reread(&self.config.policy);
        let policy = crate::policy::load_or_last(&config, &specs);
        ToolCatalog::with_policy(specs, self.config.approval.clone(), policy)
    }

    /// The system prompt: the base prompt plus what is actually available.
    pub fn system_prompt(&self, tools: &[&ToolSpec], final_pass: bool) -> String {
        let mut p = self
            .config
            .agent
            .system_prompt
            .clone()
            .unwrap_or_else(|| BASE_PROMPT.to_string());
        if final_pass {
            p.push_str("\n\nTools are no longer available for this request.");
        } else if tools.is_empty() {
            p.push_str(
                "\n\nNo tools are available in this conversation: answer from what you know, and say so when you cannot.",
            );
        } else {
            // The tools themselves are described once: in the request's `tools`, or for text
            // tool calls in the list below.
            p.push_str(
                "\n\nTools run in a sandbox reaching only what the user granted: if a call is \
refused or declined, tell the user; do not work around it.",
            );
            if self.config.llm.tool_format == ToolFormat::Hermes {
                p.push_str("\n\n");
                p.push_str(&text_tool_calls::tools_section(
                    &tools.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
                ));
            }
        }
        p
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

    /// [`Agent::drive`], inside the turn's span.
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
        let inputs = CallInputs::default();
        let (first, cause) = {
            let env = Env {
                catalog: &catalog,
                limits: self.limits_now(io),
                inputs: &inputs,
            };
            match input {
                TurnInput::Message(text) => {
                    let request = TurnRequest {
                        text,
                        ..TurnRequest::default()
                    };
                    let event = request.into_event(io.audit.requested_by.clone());
                    (
                        machine::step(conv, event.clone(), env)?,
                        Cause::Event { event },
                    )
                }
                TurnInput::Request(request) => {
                    let event = request.into_event(io.audit.requested_by.clone());
                    (
                        machine::step(conv, event.clone(), env)?,
                        Cause::Event { event },
                    )
                }
                TurnInput::Retry => (
                    machine::step(conv, Event::Retry, env)?,
                    Cause::Event {
                        event: Event::Retry,
                    },
                ),
                TurnInput::Resume => {
                    let recorded = io.journal.records_every_transition();
                    (machine::resume(conv, env, recorded)?, Cause::Resume)
                }
            }
        };
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
            let suspended = io.suspend.is_some_and(CancellationToken::is_cancelled);
            let event = match action {
                Action::Emit(e) => {
                    io.frontend.event(&e);
                    None
                }
                Action::Persist => {
                    io.frontend.persist(conv);
                    None
                }
                Action::AuditCall { call, outcome } => {
                    let record = self.call_record(conv, &catalog, &io.audit, &call, outcome, None);
                    io.journal.audit(record).await?;
                    None
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
                    self.give_grants(&catalog, io, given).await?;
                    None
                }
                Action::Advance => Some(Event::Proceed),
                // Work that starts something new waits for the next drive when suspended.
                // Calls are the exception: the transition that gave them their places
                // recorded them as started, so they run (while stopping, none is given one).
                Action::CallModel { .. }
                | Action::ScheduleRetry { .. }
                | Action::RequestApproval { .. }
                    if suspended =>
                {
                    return Ok(Driven::Suspended);
                }
                Action::CallModel { final_pass } => {
                    catalog = self.catalog(&conv.grants, conv.requester());
                    let frontend = &mut *io.frontend;
                    let mut emit = |e: &AgentEvent| frontend.event(e);
                    let call = self.call_model(conv, &catalog, final_pass, &mut emit, io.cancel);
                    match until_suspended(io.suspend, call).await {
                        Some(event) => Some(event),
                        None => return Ok(Driven::Suspended),
                    }
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
                    match until_suspended(io.suspend, wait).await {
                        Some(event) => Some(event),
                        None => return Ok(Driven::Suspended),
                    }
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
                    match given {
                        Some(event) => Some(event),
                        None => return Ok(Driven::Suspended),
                    }
                }
                Action::RunTools { calls } => {
                    self.run_tools(conv, &catalog, calls, io, &mut queue)
                        .await?;
                    None
                }
            };
            next = match event {
                Some(event) => {
                    self.advance(conv, &mut catalog, event, io, &mut queue)
                        .await?
                }
                None => Committed::Queued,
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

/// How a transition went on in [`Agent::commit`].
enum Committed {
    /// Recorded; its actions are queued.
    Queued,
    /// Recorded, and the model it asked for has answered: the next event.
    Answered(Event),
    /// Recorded; the model was not asked to the end, since the host is stopping.
    Suspended,
}

/// A turn's frontend, holding back what the turn shows until the transition before it is
/// recorded (see [`Agent::commit`]). Shared by the record and the model request, which run
/// together on the turn's task, so the lock is never contended for long.
struct HeldEvents<'f> {
    inner: std::sync::Mutex<Held<'f>>,
}

struct Held<'f> {
    frontend: &'f mut dyn Frontend,
    /// What waits for the record, in order; `None` once it is written.
    waiting: Option<Vec<Shown>>,
}

/// One thing a turn shows.
enum Shown {
    Event(Box<AgentEvent>),
    /// Saving the conversation.
    Persist,
}

impl<'f> HeldEvents<'f> {
    fn new(frontend: &'f mut dyn Frontend) -> Self {
        Self {
            inner: std::sync::Mutex::new(Held {
                frontend,
                waiting: Some(Vec::new()),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<'f>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows `event`, or keeps it until the record is written.
    fn event(&self, event: &AgentEvent) {
        let mut held = self.lock();
        match &mut held.waiting {
            Some(waiting) => waiting.push(Shown::Event(Box::new(event.clone()))),
            None => held.frontend.event(event),
        }
    }

    /// Saves the conversation once the record is written (it is, before anything is shown).
    fn persist_when_recorded(&self) {
        if let Some(waiting) = &mut self.lock().waiting {
            waiting.push(Shown::Persist);
        }
    }

    /// The record is written: what waited is shown, in order, and what follows goes
    /// straight through.
    fn release(&self, conv: &Conversation) {
        let mut held = self.lock();
        let Held { frontend, waiting } = &mut *held;
        for shown in waiting.take().unwrap_or_default() {
            match shown {
                Shown::Event(event) => frontend.event(&event),
                Shown::Persist => frontend.persist(conv),
            }
        }
    }
}

/// Runs `work` unless `suspend` fires first (`None` then; the work is dropped).
async fn until_suspended<T>(
    suspend: Option<&CancellationToken>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    match suspend {
        None => Some(work.await),
        Some(token) => tokio::select! {
            biased;
            _ = token.cancelled() => None,
            out = work => Some(out),
        },
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
