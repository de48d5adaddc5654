//! The conversation state machine, sans IO.
//!
//! [`step`] is a pure transition: given a conversation (its state and history), an [`Event`]
//! and the environment (the tool catalogue and the limits), it updates the conversation and
//! returns the [`Action`]s the driver must perform. Nothing here talks to the network, the
//! terminal or the tools, so every transition is unit-tested and a conversation saved in any
//! state can be resumed with [`resume`].
//!
//! | state                     | event             | next state / effect |
//! |---------------------------|-------------------|---------------------|
//! | Idle, Failed              | UserMessage       | AwaitingModel: call the model |
//! | Failed                    | Retry             | AwaitingModel: call the model again |
//! | AwaitingModel             | ModelResponded    | ProcessingModelResponse |
//! | AwaitingModel             | ModelFailed       | TransientFailure (retry left) or Failed |
//! | TransientFailure          | RetryTimerFired   | AwaitingModel |
//! | ProcessingModelResponse   | Proceed           | Idle (answer), Idle (no progress), AwaitingApproval, ExecutingTools or HandlingToolError |
//! | AwaitingApproval          | ApprovalGiven     | AwaitingApproval (more pending), ExecutingTools or HandlingToolError |
//! | ExecutingTools            | ToolsFinished     | AwaitingModel (next iteration or final-answer pass) or HandlingToolError |
//! | HandlingToolError         | Proceed           | AwaitingModel (next iteration or final-answer pass) |
//! | any state but Idle/Failed | Cancel            | Idle (partial answer kept and marked; pending calls answered as cancelled) |
//!
//! Every other pair is rejected with a [`StepError`] and leaves the conversation unchanged.
//!
//! Every tool call gets an identity of Cordon's own (`c1`, `c2`, … per conversation) when the
//! model's answer is processed: approvals, runs, results and events address a call by it. The
//! model's id is kept only for the wire, after making it unique within the answer (a missing
//! or repeated id is replaced), so one answer never stands for two calls and each `role: tool`
//! result answers exactly one call.

use std::collections::BTreeMap;

use cordon_core::{InputSchema, SchemaError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::{self, ApprovalAnswer, ApprovalConfig, Decision, Policy};
use crate::config::RetryConfig;
pub use crate::conversation::{CallStatus, PlannedCall, State};
use crate::conversation::{Conversation, Note, Turn, TurnOutcome, identify_calls};
use crate::messages::{LlmFailure, Message, ModelResponse, ToolCall, Usage};
use crate::tools::{ToolFailure, ToolFailureKind, ToolSpec, render_failure};

/// What the user is asked about a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Cordon's id of the call (answer with it).
    pub call_id: String,
    /// The tool, by the name the model used.
    pub tool: String,
    /// The plugin that provides it.
    pub plugin: String,
    /// The validated arguments.
    pub arguments: Value,
    /// The tool's grants, one line each.
    pub grants: Vec<String>,
    /// Why the user is asked.
    pub reason: String,
}

/// The result of one call, from the driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// Cordon's id of the call, from [`ToolRun::call_id`].
    pub call_id: String,
    /// The text for the model (a rendered result or failure).
    pub content: String,
    /// Whether the tool failed.
    pub is_error: bool,
}

/// Inputs to the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The user sent a message (starts a turn).
    UserMessage {
        /// The text.
        text: String,
    },
    /// Re-send the failed request.
    Retry,
    /// The model's complete answer.
    ModelResponded {
        /// The answer (text-format tool calls already parsed out).
        response: ModelResponse,
    },
    /// The request failed.
    ModelFailed {
        /// Why.
        failure: LlmFailure,
    },
    /// The retry delay passed.
    RetryTimerFired,
    /// Continue from a state that needs no outside input.
    Proceed,
    /// The user's answer for one pending call.
    ApprovalGiven {
        /// Cordon's id of the call, from [`ApprovalRequest::call_id`].
        call_id: String,
        /// The answer.
        answer: ApprovalAnswer,
    },
    /// The approved calls finished.
    ToolsFinished {
        /// One outcome per approved call (any order).
        results: Vec<ToolOutcome>,
    },
    /// The user cancelled the running turn.
    Cancel {
        /// Text streamed before the cancellation.
        partial: String,
    },
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Send the history to the model (without tools when `final_pass`); answer with
    /// `ModelResponded`, `ModelFailed` or `Cancel`.
    CallModel {
        /// The final-answer pass.
        final_pass: bool,
    },
    /// Ask the user about one call; answer with `ApprovalGiven` or `Cancel`.
    RequestApproval {
        /// The question.
        request: ApprovalRequest,
    },
    /// Run these calls concurrently; answer with `ToolsFinished` or `Cancel`.
    RunTools {
        /// The approved calls, in order, with validated arguments.
        calls: Vec<ToolRun>,
    },
    /// Wait, then answer with `RetryTimerFired` (or `Cancel`).
    ScheduleRetry {
        /// The retry number.
        retry: u32,
        /// The delay in milliseconds.
        delay_ms: u64,
        /// Whether the driver should randomise the delay (not when the server said when).
        jitter: bool,
    },
    /// Feed `Proceed`.
    Advance,
    /// Tell the user interface.
    Emit(AgentEvent),
    /// Save the conversation (the history changed).
    Persist,
}

/// One approved call for the driver to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    /// Cordon's id of the call; the [`ToolOutcome`] carries it back.
    pub call_id: String,
    /// The tool, by the name the model used (the host's model-facing name).
    pub tool: String,
    /// The validated arguments.
    pub arguments: Value,
}

/// One call of a model's answer, as [`AgentEvent::ToolCallsRequested`] shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestedCall {
    /// Cordon's id of the call, which every later event about it carries.
    pub call_id: String,
    /// The call as stored for the wire (the model's id, made unique within the answer).
    #[serde(flatten)]
    pub call: ToolCall,
}

/// What a user interface or script sees; `cordon run --json` prints these as JSON lines.
/// Events about one call carry Cordon's id of it (`call_id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// A turn started.
    TurnStarted {
        /// Its index.
        turn: usize,
        /// The user's message.
        input: String,
    },
    /// A request goes to the model.
    ModelRequest {
        /// Iteration in the turn (1-based).
        iteration: u32,
        /// The final-answer pass.
        final_pass: bool,
        /// Messages sent (after pruning, with the system prompt).
        messages: usize,
        /// Tools offered.
        tools: usize,
    },
    /// Streamed text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// The model's answer text, complete.
    AssistantMessage {
        /// The text.
        content: String,
        /// True when cut short by a cancellation.
        partial: bool,
    },
    /// The model asked for tool calls.
    ToolCallsRequested {
        /// The calls, in order.
        calls: Vec<RequestedCall>,
    },
    /// A call was refused before running (unknown tool, bad arguments, policy, user).
    ToolCallRejected {
        /// The call.
        call_id: String,
        /// The tool name as the model wrote it.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The user is asked.
    ApprovalNeeded {
        /// The question.
        request: ApprovalRequest,
    },
    /// The user answered.
    ApprovalGiven {
        /// The call.
        call_id: String,
        /// The answer.
        answer: ApprovalAnswer,
    },
    /// A tool starts running.
    ToolStarted {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// The arguments.
        arguments: Value,
    },
    /// A tool call's result (as the model will read it).
    ToolResult {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// The text.
        content: String,
        /// Whether it failed.
        is_error: bool,
    },
    /// A transient failure; the request is retried.
    Retrying {
        /// Retry number.
        retry: u32,
        /// Maximum retries.
        max_retries: u32,
        /// Delay before it (before jitter), in milliseconds.
        delay_ms: u64,
        /// Why.
        cause: String,
    },
    /// Older messages were left out of the request to fit the context window.
    ContextPruned {
        /// The strategy.
        strategy: String,
        /// Messages left out.
        dropped_messages: usize,
        /// Their tokens.
        dropped_tokens: usize,
        /// Tokens sent.
        kept_tokens: usize,
        /// Whether a summary replaces them.
        summarized: bool,
        /// False when the request is still too big.
        fits: bool,
    },
    /// Usage reported for one answer.
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// The iteration limit was reached; one last request without tools follows.
    IterationLimitReached {
        /// The limit.
        limit: u32,
    },
    /// The turn ended.
    TurnFinished {
        /// The turn.
        turn: usize,
        /// How it ended.
        outcome: TurnOutcome,
        /// The final answer text (may be empty).
        answer: String,
    },
}

/// The limits of one turn that the machine enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnLimits {
    /// Model answers with tools per turn before the final-answer pass.
    pub max_iterations: u32,
    /// Times the same call may be requested in a turn before the loop stops.
    pub max_repeats: u32,
    /// Retry policy for transient failures.
    pub retry: RetryConfig,
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            max_iterations: 8,
            max_repeats: 2,
            retry: RetryConfig::default(),
        }
    }
}

/// The tools known to the turn, with compiled schemas and the user's approval rules.
pub struct ToolCatalog {
    tools: BTreeMap<String, (ToolSpec, Result<InputSchema, SchemaError>)>,
    approval: ApprovalConfig,
}

impl std::fmt::Debug for ToolCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolCatalog {
    /// Compiles the schemas of the installed tools.
    pub fn new(specs: Vec<ToolSpec>, approval: ApprovalConfig) -> Self {
        let tools = specs
            .into_iter()
            .map(|s| {
                let v = InputSchema::compile(&s.input_schema);
                (s.name.clone(), (s, v))
            })
            .collect();
        Self { tools, approval }
    }

    /// The approval decision for a tool.
    pub fn decision(&self, spec: &ToolSpec, session: &BTreeMap<String, Policy>) -> Decision {
        approval::decide(&self.approval, session, spec)
    }

    /// The tools the model is offered: installed, enabled and not denied.
    pub fn offered(&self, session: &BTreeMap<String, Policy>) -> Vec<&ToolSpec> {
        self.tools
            .values()
            .map(|(s, _)| s)
            .filter(|s| self.decision(s, session).policy != Policy::Deny)
            .collect()
    }

    /// Checks a call: the tool must exist, policy must not deny it and the arguments must be
    /// valid. Returns the parsed arguments, the spec and the decision, or what stands in the way.
    fn check(
        &self,
        call: &ToolCall,
        session: &BTreeMap<String, Policy>,
    ) -> Result<(Value, &ToolSpec, Decision), Refusal> {
        let offered: Vec<&str> = self
            .offered(session)
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        let available = if offered.is_empty() {
            "no tools are available".to_string()
        } else {
            format!("the available tools are: {}", offered.join(", "))
        };
        if call.name.is_empty() {
            return Err(Refusal::Invalid(
                None,
                format!(
                    "the tool call has no tool name (got `{}`); {available}",
                    crate::messages::snippet(&call.arguments)
                ),
            ));
        }
        let Some((spec, schema)) = self.tools.get(&call.name) else {
            return Err(Refusal::Invalid(
                None,
                format!("there is no tool named `{}`; {available}", call.name),
            ));
        };
        let decision = self.decision(spec, session);
        if decision.policy == Policy::Deny {
            return Err(Refusal::Denied(format!(
                "refused by policy: {}; do not try to get around it, tell the user if you need it",
                decision.reason
            )));
        }
        let text = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        let args: Value = serde_json::from_str(text).map_err(|e| {
            Refusal::Invalid(
                None,
                format!(
                    "the arguments for `{}` are not valid JSON ({e}); send a JSON object matching its schema: {}",
                    call.name, spec.input_schema
                ),
            )
        })?;
        let schema = schema.as_ref().map_err(|e| {
            Refusal::Invalid(
                Some(args.clone()),
                format!(
                    "the tool `{}` cannot be called: its own input schema is invalid ({e})",
                    call.name
                ),
            )
        })?;
        if let Err(e) = schema.check(&args) {
            // The model reads at most five violations; more would bury the schema after them.
            let problems: Vec<&str> = e.violations().iter().take(5).map(String::as_str).collect();
            return Err(Refusal::Invalid(
                Some(args),
                format!(
                    "the arguments for `{}` do not match its schema: {}; the schema is {}",
                    call.name,
                    problems.join("; "),
                    spec.input_schema
                ),
            ));
        }
        Ok((args, spec, decision))
    }

    fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|(s, _)| s)
    }

    /// Rewrites `always`/`never` answers saved under a tool's model-facing name (as
    /// conversations saved before answers bound to identities did) to the tool's identity, so
    /// they keep applying. Identities contain a `.`, model-facing names never do.
    pub fn upgrade_session(&self, session: &mut BTreeMap<String, Policy>) {
        let legacy: Vec<String> = session
            .keys()
            .filter(|k| !k.contains('.'))
            .cloned()
            .collect();
        for key in legacy {
            if let Some(spec) = self.spec(&key)
                && let Some(policy) = session.remove(&key)
            {
                session.entry(spec.identity()).or_insert(policy);
            }
        }
    }
}

/// Why a call is not run before anyone is asked.
enum Refusal {
    /// The call is malformed (unknown tool, bad arguments): the arguments when they parsed,
    /// and the message for the model.
    Invalid(Option<Value>, String),
    /// Policy denies the tool: the message for the model, naming the rule.
    Denied(String),
}

/// What the machine needs besides the conversation.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    /// The tools.
    pub catalog: &'a ToolCatalog,
    /// The limits.
    pub limits: &'a TurnLimits,
}

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

fn signature(call: &ToolCall) -> String {
    let args = serde_json::from_str::<Value>(&call.arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| call.arguments.trim().to_string());
    format!("{}\u{0}{args}", call.name)
}

fn backoff(retry: &RetryConfig, n: u32) -> u64 {
    let factor = 1u64.checked_shl(n.saturating_sub(1)).unwrap_or(u64::MAX);
    retry
        .initial_backoff_ms
        .saturating_mul(factor)
        .min(retry.max_backoff_ms)
}

/// Applies one event. On error the conversation is unchanged.
pub fn step(conv: &mut Conversation, event: Event, env: Env<'_>) -> Result<Vec<Action>, StepError> {
    validate(conv, &event)?;
    let state = std::mem::replace(&mut conv.state, State::Idle);
    let mut out = Vec::new();
    match (state, event) {
        (State::Idle | State::Failed { .. }, Event::UserMessage { text }) => {
            conv.messages.push(Message::user(text.clone()));
            conv.turns.push(Turn {
                first_message: conv.messages.len() - 1,
                outcome: None,
            });
            conv.progress = Default::default();
            out.push(Action::Emit(AgentEvent::TurnStarted {
                turn: conv.turns.len() - 1,
                input: text,
            }));
            out.push(Action::Persist);
            call_model(conv, false, &mut out);
        }
        (State::Failed { final_pass, .. }, Event::Retry) => {
            if let Some(t) = conv.turns.last_mut() {
                t.outcome = None;
            }
            conv.progress.retries = 0;
            call_model(conv, final_pass, &mut out);
        }
        (State::AwaitingModel { final_pass }, Event::ModelResponded { response }) => {
            if let Some(u) = response.usage {
                conv.usage.add(u);
                out.push(Action::Emit(AgentEvent::Usage { usage: u }));
            }
            conv.progress.retries = 0;
            if !final_pass {
                conv.progress.iterations += 1;
            }
            conv.state = State::ProcessingModelResponse {
                response,
                final_pass,
            };
            out.push(Action::Advance);
        }
        (State::AwaitingModel { final_pass }, Event::ModelFailed { failure }) => {
            let retry = conv.progress.retries + 1;
            let max = env.limits.retry.max_retries;
            let too_long = failure
                .retry_after_ms
                .filter(|&ms| ms > env.limits.retry.max_retry_after_ms);
            if failure.transient && retry <= max && too_long.is_none() {
                conv.progress.retries = retry;
                let (delay_ms, jitter) = match failure.retry_after_ms {
                    Some(ms) => (ms, false),
                    None => (backoff(&env.limits.retry, retry), true),
                };
                out.push(Action::Emit(AgentEvent::Retrying {
                    retry,
                    max_retries: max,
                    delay_ms,
                    cause: failure.message.clone(),
                }));
                conv.state = State::TransientFailure {
                    retry,
                    cause: failure.message,
                    final_pass,
                };
                out.push(Action::ScheduleRetry {
                    retry,
                    delay_ms,
                    jitter,
                });
            } else {
                let error = if let Some(ms) = too_long {
                    format!(
                        "{} — the server asked to wait {} s, longer than llm.retry.max_retry_after_ms allows",
                        failure.message,
                        ms / 1000
                    )
                } else if failure.transient {
                    format!(
                        "{} (gave up after {} retries)",
                        failure.message, conv.progress.retries
                    )
                } else {
                    failure.message
                };
                fail(conv, error, final_pass, &mut out);
            }
        }
        (State::TransientFailure { final_pass, .. }, Event::RetryTimerFired) => {
            call_model(conv, final_pass, &mut out);
        }
        (
            State::ProcessingModelResponse {
                response,
                final_pass,
            },
            Event::Proceed,
        ) => {
            process_response(conv, response, final_pass, env, &mut out);
        }
        (State::AwaitingApproval { mut batch }, Event::ApprovalGiven { call_id, answer }) => {
            out.push(Action::Emit(AgentEvent::ApprovalGiven {
                call_id: call_id.clone(),
                answer: answer.clone(),
            }));
            // `always`/`never` bind to the tool's identity (plugin and tool), and also settle
            // the other pending calls of the same tool in this answer.
            let identity = batch
                .iter()
                .find(|p| p.id == call_id)
                .and_then(|p| env.catalog.spec(&p.call.name))
                .map(ToolSpec::identity);
            let remembered = match answer {
                ApprovalAnswer::Always => Some(Policy::Auto),
                ApprovalAnswer::Never => Some(Policy::Deny),
                _ => None,
            };
            if let (Some(identity), Some(policy)) = (&identity, remembered) {
                conv.session_approvals.insert(identity.clone(), policy);
            }
            for p in batch.iter_mut().filter(|p| p.status == CallStatus::Pending) {
                let same_tool = remembered.is_some()
                    && identity.is_some()
                    && env.catalog.spec(&p.call.name).map(ToolSpec::identity) == identity;
                if p.id != call_id && !same_tool {
                    continue;
                }
                let declined = match &answer {
                    ApprovalAnswer::Yes | ApprovalAnswer::Always => None,
                    ApprovalAnswer::No | ApprovalAnswer::Never => Some(
                        "the user declined this call; do not retry it unless the user asks"
                            .to_string(),
                    ),
                    ApprovalAnswer::Refused { reason } => Some(format!(
                        "not run, and no one was asked: {reason}; do not retry it unless the user asks"
                    )),
                };
                p.status = match declined {
                    None => CallStatus::Approved,
                    Some(message) => {
                        out.push(Action::Emit(AgentEvent::ToolCallRejected {
                            call_id: p.id.clone(),
                            tool: p.call.name.clone(),
                            reason: message.clone(),
                        }));
                        CallStatus::Denied { message }
                    }
                };
            }
            after_approval(conv, batch, env, &mut out);
        }
        (State::ExecutingTools { mut batch }, Event::ToolsFinished { results }) => {
            for p in batch
                .iter_mut()
                .filter(|p| p.status == CallStatus::Approved)
            {
                let r = results.iter().find(|r| r.call_id == p.id);
                p.status = match r {
                    Some(r) => CallStatus::Done {
                        content: r.content.clone(),
                        is_error: r.is_error,
                    },
                    None => CallStatus::Done {
                        content: render_failure(&ToolFailure::new(
                            ToolFailureKind::Failed,
                            "the host returned no result for this call",
                        )),
                        is_error: true,
                    },
                };
            }
            finish_batch(conv, batch, env, &mut out);
        }
        (State::HandlingToolError { .. }, Event::Proceed) => {
            next_request(conv, env, &mut out);
        }
        (state, Event::Cancel { partial }) => cancel(conv, state, partial, &mut out),
        (state, event) => {
            // `validate` accepted a pair that no arm handles: restore and report.
            conv.state = state;
            return Err(reject(&conv.state, format!("unexpected event {event:?}")));
        }
    }
    Ok(out)
}

fn validate(conv: &Conversation, event: &Event) -> Result<(), StepError> {
    let s = &conv.state;
    let ok = match (s, event) {
        (State::Idle | State::Failed { .. }, Event::UserMessage { .. }) => true,
        (_, Event::UserMessage { .. }) => {
            return Err(reject(
                s,
                format!(
                    "cannot send a new message: the current turn is still {} — wait for it to finish or cancel it",
                    s.name()
                ),
            ));
        }
        (State::Failed { .. }, Event::Retry) => true,
        (_, Event::Retry) => {
            return Err(reject(
                s,
                format!(
                    "nothing to retry: the conversation is {}, not failed",
                    s.name()
                ),
            ));
        }
        (State::AwaitingModel { .. }, Event::ModelResponded { .. } | Event::ModelFailed { .. }) => {
            true
        }
        (State::TransientFailure { .. }, Event::RetryTimerFired) => true,
        (
            State::ProcessingModelResponse { .. } | State::HandlingToolError { .. },
            Event::Proceed,
        ) => true,
        (State::AwaitingApproval { batch }, Event::ApprovalGiven { call_id, .. }) => {
            if batch
                .iter()
                .any(|p| &p.id == call_id && p.status == CallStatus::Pending)
            {
                true
            } else {
                let pending: Vec<&str> = batch
                    .iter()
                    .filter(|p| p.status == CallStatus::Pending)
                    .map(|p| p.id.as_str())
                    .collect();
                return Err(reject(
                    s,
                    format!(
                        "no pending call `{call_id}`; the calls waiting for approval are: {}",
                        pending.join(", ")
                    ),
                ));
            }
        }
        (State::ExecutingTools { .. }, Event::ToolsFinished { .. }) => true,
        (State::Idle | State::Failed { .. }, Event::Cancel { .. }) => {
            return Err(reject(s, "nothing to cancel: no turn is running"));
        }
        (_, Event::Cancel { .. }) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(reject(
            s,
            format!(
                "the event {} does not apply while {}",
                event_name(event),
                s.name()
            ),
        ))
    }
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
        Event::ToolsFinished { .. } => "tools_finished",
        Event::Cancel { .. } => "cancel",
    }
}

fn call_model(conv: &mut Conversation, final_pass: bool, out: &mut Vec<Action>) {
    conv.state = State::AwaitingModel { final_pass };
    out.push(Action::CallModel { final_pass });
}

fn finish(conv: &mut Conversation, outcome: TurnOutcome, out: &mut Vec<Action>) {
    let answer = conv.last_answer().unwrap_or_default().to_string();
    if let Some(t) = conv.turns.last_mut() {
        t.outcome = Some(outcome.clone());
    }
    conv.state = State::Idle;
    out.push(Action::Persist);
    out.push(Action::Emit(AgentEvent::TurnFinished {
        turn: conv.turns.len().saturating_sub(1),
        outcome,
        answer,
    }));
}

fn fail(conv: &mut Conversation, error: String, final_pass: bool, out: &mut Vec<Action>) {
    if let Some(t) = conv.turns.last_mut() {
        t.outcome = Some(TurnOutcome::Failed {
            error: error.clone(),
        });
    }
    conv.state = State::Failed {
        error: error.clone(),
        final_pass,
    };
    out.push(Action::Persist);
    out.push(Action::Emit(AgentEvent::TurnFinished {
        turn: conv.turns.len().saturating_sub(1),
        outcome: TurnOutcome::Failed { error },
        answer: String::new(),
    }));
}

fn process_response(
    conv: &mut Conversation,
    response: ModelResponse,
    final_pass: bool,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    if final_pass || response.tool_calls.is_empty() {
        if !response.content.is_empty() {
            conv.messages
                .push(Message::assistant(response.content.clone()));
            out.push(Action::Emit(AgentEvent::AssistantMessage {
                content: response.content,
                partial: false,
            }));
        }
        let outcome = if final_pass {
            TurnOutcome::FinalAnswerAfterLimit
        } else {
            TurnOutcome::Answered
        };
        finish(conv, outcome, out);
        return;
    }
    let calls = identify_calls(&mut conv.next_call, response.tool_calls);
    conv.messages.push(Message::Assistant {
        content: response.content.clone(),
        tool_calls: calls.iter().map(|(_, c)| c.clone()).collect(),
        partial: false,
    });
    if !response.content.is_empty() {
        out.push(Action::Emit(AgentEvent::AssistantMessage {
            content: response.content.clone(),
            partial: false,
        }));
    }
    out.push(Action::Emit(AgentEvent::ToolCallsRequested {
        calls: calls
            .iter()
            .map(|(id, call)| RequestedCall {
                call_id: id.clone(),
                call: call.clone(),
            })
            .collect(),
    }));
    // No progress: the same call asked for more often than allowed.
    let mut seen = conv.progress.calls_seen.clone();
    let mut repeated: Option<&ToolCall> = None;
    for (_, c) in &calls {
        let n = seen.entry(signature(c)).or_insert(0);
        *n += 1;
        if *n > env.limits.max_repeats && repeated.is_none() {
            repeated = Some(c);
        }
    }
    conv.progress.calls_seen = seen;
    if let Some(c) = repeated {
        let explanation = format!(
            "Stopped: the model asked for `{}` with the same arguments {} times in this turn without making progress.",
            c.name,
            env.limits.max_repeats + 1
        );
        for (id, call) in &calls {
            let content = "Not run: the same call was already made in this turn; the loop was stopped for lack of progress.".to_string();
            out.push(Action::Emit(AgentEvent::ToolResult {
                call_id: id.clone(),
                tool: call.name.clone(),
                content: content.clone(),
                is_error: true,
            }));
            conv.messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content,
                is_error: true,
            });
        }
        conv.notes.push(Note {
            at_message: conv.messages.len(),
            text: explanation.clone(),
        });
        finish(conv, TurnOutcome::NoProgress { explanation }, out);
        return;
    }
    let mut batch = Vec::with_capacity(calls.len());
    for (id, call) in calls {
        let planned = match env.catalog.check(&call, &conv.session_approvals) {
            Err(refusal) => {
                let (arguments, status, message) = match refusal {
                    Refusal::Invalid(arguments, message) => (
                        arguments,
                        CallStatus::Invalid {
                            message: message.clone(),
                        },
                        message,
                    ),
                    Refusal::Denied(message) => (
                        None,
                        CallStatus::Denied {
                            message: message.clone(),
                        },
                        message,
                    ),
                };
                out.push(Action::Emit(AgentEvent::ToolCallRejected {
                    call_id: id.clone(),
                    tool: call.name.clone(),
                    reason: message,
                }));
                PlannedCall {
                    id,
                    call,
                    arguments,
                    status,
                }
            }
            Ok((args, _, decision)) => PlannedCall {
                id,
                call,
                arguments: Some(args),
                status: match decision.policy {
                    Policy::Auto => CallStatus::Approved,
                    Policy::Ask => CallStatus::Pending,
                    // `check` refuses denied tools; kept for completeness of the match.
                    Policy::Deny => CallStatus::Denied {
                        message: decision.reason,
                    },
                },
            },
        };
        batch.push(planned);
    }
    out.push(Action::Persist);
    after_approval(conv, batch, env, out);
}

fn after_approval(
    conv: &mut Conversation,
    batch: Vec<PlannedCall>,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    if let Some(p) = batch.iter().find(|p| p.status == CallStatus::Pending) {
        let request = approval_request(conv, p, env.catalog);
        out.push(Action::Emit(AgentEvent::ApprovalNeeded {
            request: request.clone(),
        }));
        out.push(Action::RequestApproval { request });
        conv.state = State::AwaitingApproval { batch };
        return;
    }
    let approved = approved_calls(&batch);
    if approved.is_empty() {
        finish_batch(conv, batch, env, out);
    } else {
        for run in &approved {
            out.push(Action::Emit(AgentEvent::ToolStarted {
                call_id: run.call_id.clone(),
                tool: run.tool.clone(),
                arguments: run.arguments.clone(),
            }));
        }
        out.push(Action::RunTools { calls: approved });
        conv.state = State::ExecutingTools { batch };
    }
}

/// The approved calls of a batch with their arguments, as the driver runs them.
fn approved_calls(batch: &[PlannedCall]) -> Vec<ToolRun> {
    batch
        .iter()
        .filter(|p| p.status == CallStatus::Approved)
        .map(|p| ToolRun {
            call_id: p.id.clone(),
            tool: p.call.name.clone(),
            arguments: p.arguments.clone().unwrap_or(Value::Null),
        })
        .collect()
}

fn approval_request(
    conv: &Conversation,
    p: &PlannedCall,
    catalog: &ToolCatalog,
) -> ApprovalRequest {
    let spec = catalog.spec(&p.call.name);
    ApprovalRequest {
        call_id: p.id.clone(),
        tool: p.call.name.clone(),
        plugin: spec.map(|s| s.plugin.clone()).unwrap_or_default(),
        arguments: p.arguments.clone().unwrap_or(Value::Null),
        grants: spec.map(|s| s.grants.clone()).unwrap_or_default(),
        reason: spec
            .map(|s| catalog.decision(s, &conv.session_approvals).reason)
            .unwrap_or_default(),
    }
}

fn result_of(p: &PlannedCall) -> (String, bool) {
    match &p.status {
        CallStatus::Invalid { message } => (format!("Error (invalid call): {message}"), true),
        CallStatus::Denied { message } => (format!("Error (not run): {message}"), true),
        CallStatus::Done { content, is_error } => (content.clone(), *is_error),
        CallStatus::Pending => (
            "Error (not run): the user cancelled the turn before deciding on this call".to_string(),
            true,
        ),
        // Approved calls were running (or about to) when the turn was cancelled.
        CallStatus::Approved => (
            "Error (cancelled): the user cancelled this call while it ran; it may have had part \
             of its effect"
                .to_string(),
            true,
        ),
    }
}

fn push_results(
    conv: &mut Conversation,
    batch: &[PlannedCall],
    out: &mut Vec<Action>,
) -> Vec<String> {
    let mut errors = Vec::new();
    for p in batch {
        let (content, is_error) = result_of(p);
        if is_error {
            errors.push(format!("{}: {}", p.call.name, content));
        }
        out.push(Action::Emit(AgentEvent::ToolResult {
            call_id: p.id.clone(),
            tool: p.call.name.clone(),
            content: content.clone(),
            is_error,
        }));
        conv.messages.push(Message::Tool {
            tool_call_id: p.call.id.clone(),
            name: p.call.name.clone(),
            content,
            is_error,
        });
    }
    errors
}

fn finish_batch(
    conv: &mut Conversation,
    batch: Vec<PlannedCall>,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    let errors = push_results(conv, &batch, out);
    out.push(Action::Persist);
    if errors.is_empty() {
        next_request(conv, env, out);
    } else {
        conv.state = State::HandlingToolError { errors };
        out.push(Action::Advance);
    }
}

fn next_request(conv: &mut Conversation, env: Env<'_>, out: &mut Vec<Action>) {
    if conv.progress.iterations >= env.limits.max_iterations {
        out.push(Action::Emit(AgentEvent::IterationLimitReached {
            limit: env.limits.max_iterations,
        }));
        conv.notes.push(Note {
            at_message: conv.messages.len(),
            text: format!(
                "Iteration limit ({}) reached: asking the model for its final answer without tools.",
                env.limits.max_iterations
            ),
        });
        call_model(conv, true, out);
    } else {
        call_model(conv, false, out);
    }
}

fn cancel(conv: &mut Conversation, state: State, partial: String, out: &mut Vec<Action>) {
    match state {
        State::AwaitingModel { .. } | State::TransientFailure { .. } => {
            if !partial.is_empty() {
                conv.messages.push(Message::Assistant {
                    content: partial.clone(),
                    tool_calls: Vec::new(),
                    partial: true,
                });
                out.push(Action::Emit(AgentEvent::AssistantMessage {
                    content: partial,
                    partial: true,
                }));
            }
        }
        State::ProcessingModelResponse { response, .. } => {
            // The answer arrived but its calls will not run: keep its text, marked.
            if !response.content.is_empty() {
                conv.messages.push(Message::Assistant {
                    content: response.content,
                    tool_calls: Vec::new(),
                    partial: true,
                });
            }
        }
        State::AwaitingApproval { batch } | State::ExecutingTools { batch } => {
            // The assistant message with the calls is in the history: every call needs a result.
            push_results(conv, &batch, out);
        }
        State::HandlingToolError { .. } | State::Idle | State::Failed { .. } => {}
    }
    conv.notes.push(Note {
        at_message: conv.messages.len(),
        text: "Cancelled by the user.".to_string(),
    });
    finish(conv, TurnOutcome::Cancelled, out);
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolHints;
    use serde_json::json;
    use std::collections::BTreeSet;

    fn spec(name: &str, can_change: bool) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            tool: name.into(),
            description: format!("{name} tool"),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false}),
            hints: ToolHints::default(),
            plugin: "p".into(),
            grants: vec![format!("{name} grant")],
            can_change_anything: can_change,
        }
    }

    fn catalog() -> ToolCatalog {
        let mut approval = ApprovalConfig::default();
        approval.tools.insert("banned".into(), Policy::Deny);
        ToolCatalog::new(
            vec![
                spec("read", false),
                spec("write", true),
                spec("banned", false),
            ],
            approval,
        )
    }

    fn limits() -> TurnLimits {
        TurnLimits {
            max_iterations: 3,
            max_repeats: 2,
            retry: RetryConfig {
                max_retries: 2,
                initial_backoff_ms: 100,
                max_backoff_ms: 150,
                max_retry_after_ms: 5_000,
            },
        }
    }

    struct T {
        conv: Conversation,
        cat: ToolCatalog,
        lim: TurnLimits,
    }

    impl T {
        fn new() -> Self {
            Self {
                conv: Conversation::new(),
                cat: catalog(),
                lim: limits(),
            }
        }
        fn step(&mut self, e: Event) -> Vec<Action> {
            step(
                &mut self.conv,
                e,
                Env {
                    catalog: &self.cat,
                    limits: &self.lim,
                },
            )
            .unwrap()
        }
        fn err(&mut self, e: Event) -> StepError {
            let before = self.conv.clone();
            let err = step(
                &mut self.conv,
                e,
                Env {
                    catalog: &self.cat,
                    limits: &self.lim,
                },
            )
            .unwrap_err();
            assert_eq!(
                self.conv, before,
                "a rejected event must not change the conversation"
            );
            err
        }
        fn started(mut self) -> Self {
            self.step(Event::UserMessage { text: "hi".into() });
            self
        }
        fn respond(&mut self, content: &str, calls: &[(&str, &str, Value)]) -> Vec<Action> {
            let response = ModelResponse {
                content: content.into(),
                tool_calls: calls
                    .iter()
                    .map(|(id, name, args)| ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: match args {
                            Value::String(s) => s.clone(),
                            v => v.to_string(),
                        },
                    })
                    .collect(),
                usage: Some(Usage {
                    prompt_tokens: 10,
                    completion_tokens: 2,
                }),
                finish_reason: None,
            };
            let mut a = self.step(Event::ModelResponded { response });
            assert_eq!(a.pop(), Some(Action::Advance));
            self.step(Event::Proceed)
        }
    }

    fn has(actions: &[Action], pred: impl Fn(&Action) -> bool) -> bool {
        actions.iter().any(pred)
    }

    fn tool_messages(conv: &Conversation) -> Vec<(String, String, bool)> {
        conv.messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool {
                    tool_call_id,
                    content,
                    is_error,
                    ..
                } => Some((tool_call_id.clone(), content.clone(), *is_error)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn user_message_starts_a_turn_from_idle_or_failed_only() {
        let mut t = T::new();
        let a = t.step(Event::UserMessage { text: "hi".into() });
        assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
        assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
        assert_eq!(t.conv.messages, vec![Message::user("hi")]);
        assert_eq!(t.conv.turns.len(), 1);
        let e = t.err(Event::UserMessage {
            text: "again".into(),
        });
        assert!(e.message.contains("still waiting for the model"), "{e}");
        // A failed turn can be continued.
        t.step(Event::ModelFailed {
            failure: LlmFailure {
                transient: false,
                message: "bad".into(),
                status: Some(400),
                retry_after_ms: None,
            },
        });
        assert!(matches!(t.conv.state, State::Failed { .. }));
        t.step(Event::UserMessage {
            text: "next".into(),
        });
        assert_eq!(t.conv.turns.len(), 2);
        assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
    }

    #[test]
    fn text_answer_finishes_the_turn() {
        let mut t = T::new().started();
        let a = t.respond("hello", &[]);
        assert_eq!(t.conv.state, State::Idle);
        assert_eq!(t.conv.turns[0].outcome, Some(TurnOutcome::Answered));
        assert_eq!(t.conv.messages.last(), Some(&Message::assistant("hello")));
        assert_eq!(
            t.conv.usage,
            Usage {
                prompt_tokens: 10,
                completion_tokens: 2
            }
        );
        assert!(has(
            &a,
            |a| matches!(a, Action::Emit(AgentEvent::TurnFinished { answer, .. }) if answer == "hello")
        ));
    }

    #[test]
    fn auto_tools_run_and_results_return_in_call_order() {
        let mut t = T::new().started();
        let a = t.respond(
            "",
            &[
                ("1", "read", json!({"q": "a"})),
                ("2", "read", json!({"q": "b"})),
            ],
        );
        assert!(matches!(t.conv.state, State::ExecutingTools { .. }));
        let Some(Action::RunTools { calls }) =
            a.iter().find(|a| matches!(a, Action::RunTools { .. }))
        else {
            panic!("{a:?}")
        };
        assert_eq!(
            calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
            vec!["c1", "c2"]
        );
        // Results arrive out of order; history keeps call order.
        let a = t.step(Event::ToolsFinished {
            results: vec![
                ToolOutcome {
                    call_id: "c2".into(),
                    content: "B".into(),
                    is_error: false,
                },
                ToolOutcome {
                    call_id: "c1".into(),
                    content: "A".into(),
                    is_error: false,
                },
            ],
        });
        assert_eq!(
            tool_messages(&t.conv),
            vec![
                ("1".into(), "A".into(), false),
                ("2".into(), "B".into(), false)
            ]
        );
        assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
        assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
    }

    #[test]
    fn tool_errors_go_through_handling_tool_error() {
        let mut t = T::new().started();
        t.respond("", &[("1", "read", json!({"q": "a"}))]);
        let a = t.step(Event::ToolsFinished {
            results: vec![ToolOutcome {
                call_id: "c1".into(),
                content: "Error (failed): x".into(),
                is_error: true,
            }],
        });
        assert!(matches!(t.conv.state, State::HandlingToolError { .. }));
        assert_eq!(a.last(), Some(&Action::Advance));
        let a = t.step(Event::Proceed);
        assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
        assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
    }

    #[test]
    fn missing_tool_result_is_an_error_result() {
        let mut t = T::new().started();
        t.respond("", &[("1", "read", json!({"q": "a"}))]);
        t.step(Event::ToolsFinished { results: vec![] });
        assert!(tool_messages(&t.conv)[0].2);
    }

    #[test]
    fn unknown_tool_and_invalid_arguments_are_reported_to_the_model() {
        let mut t = T::new().started();
        t.respond(
            "",
            &[
                ("1", "reed", json!({"q": "a"})),
                ("2", "read", Value::String("{not json".into())),
                ("3", "read", json!({"q": 5})),
                ("4", "banned", json!({"q": "a"})),
                ("5", "", Value::String("garbage".into())),
            ],
        );
        let msgs = tool_messages(&t.conv);
        assert_eq!(msgs.len(), 5);
        assert!(msgs.iter().all(|m| m.2));
        assert!(
            msgs[0].1.contains("no tool named `reed`") && msgs[0].1.contains("read, write"),
            "{}",
            msgs[0].1
        );
        assert!(
            !msgs[0].1.contains("banned"),
            "denied tools are not advertised: {}",
            msgs[0].1
        );
        assert!(msgs[1].1.contains("not valid JSON"), "{}", msgs[1].1);
        assert!(
            msgs[2].1.contains("do not match its schema") && msgs[2].1.contains("/q"),
            "{}",
            msgs[2].1
        );
        assert!(
            msgs[3].1.starts_with(
                "Error (not run): refused by policy: cordon.toml denies the tool `banned`"
            ),
            "{}",
            msgs[3].1
        );
        assert!(msgs[4].1.contains("no tool name"), "{}", msgs[4].1);
        assert!(
            matches!(t.conv.state, State::HandlingToolError { ref errors } if errors.len() == 5)
        );
    }

    #[test]
    fn ask_tools_wait_for_approval_yes_and_no() {
        let mut t = T::new().started();
        let a = t.respond(
            "",
            &[
                ("1", "write", json!({"q": "a"})),
                ("2", "read", json!({"q": "b"})),
                ("3", "write", json!({"q": "c"})),
            ],
        );
        let Some(Action::RequestApproval { request }) = a
            .iter()
            .find(|a| matches!(a, Action::RequestApproval { .. }))
        else {
            panic!("{a:?}")
        };
        assert_eq!(request.call_id, "c1");
        assert_eq!(request.grants, vec!["write grant".to_string()]);
        assert!(
            request.reason.contains("grants allow changing"),
            "{}",
            request.reason
        );
        let e = t.err(Event::ApprovalGiven {
            call_id: "c2".into(),
            answer: ApprovalAnswer::Yes,
        });
        assert!(e.message.contains("c1, c3"), "{e}");
        let a = t.step(Event::ApprovalGiven {
            call_id: "c1".into(),
            answer: ApprovalAnswer::Yes,
        });
        assert!(matches!(&t.conv.state, State::AwaitingApproval { .. }));
        assert!(has(
            &a,
            |a| matches!(a, Action::RequestApproval { request } if request.call_id == "c3")
        ));
        let a = t.step(Event::ApprovalGiven {
            call_id: "c3".into(),
            answer: ApprovalAnswer::No,
        });
        let Some(Action::RunTools { calls }) =
            a.iter().find(|a| matches!(a, Action::RunTools { .. }))
        else {
            panic!("{a:?}")
        };
        assert_eq!(
            calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
            vec!["c1", "c2"]
        );
        t.step(Event::ToolsFinished {
            results: vec![
                ToolOutcome {
                    call_id: "c1".into(),
                    content: "W".into(),
                    is_error: false,
                },
                ToolOutcome {
                    call_id: "c2".into(),
                    content: "R".into(),
                    is_error: false,
                },
            ],
        });
        let msgs = tool_messages(&t.conv);
        assert_eq!(msgs[0].1, "W");
        assert_eq!(msgs[1].1, "R");
        assert!(msgs[2].1.contains("user declined"), "{}", msgs[2].1);
        assert!(matches!(t.conv.state, State::HandlingToolError { .. }));
    }

    fn approval_of(actions: &[Action]) -> Option<ApprovalRequest> {
        actions.iter().find_map(|a| match a {
            Action::RequestApproval { request } => Some(request.clone()),
            _ => None,
        })
    }

    /// The attack of issue #20: two calls share the id `dup`; the answer about the first must
    /// not approve the second, and each result must answer its own call.
    #[test]
    fn calls_sharing_an_id_are_approved_run_and_answered_one_by_one() {
        let mut t = T::new().started();
        let a = t.respond(
            "",
            &[
                ("dup", "write", json!({"q": "harmless"})),
                ("dup", "write", json!({"q": "harmful"})),
            ],
        );
        let first = approval_of(&a).expect("asked about the first call");
        assert_eq!(first.arguments, json!({"q": "harmless"}));
        let a = t.step(Event::ApprovalGiven {
            call_id: first.call_id.clone(),
            answer: ApprovalAnswer::Yes,
        });
        let second = approval_of(&a).expect("the second call is asked about on its own");
        assert_ne!(second.call_id, first.call_id);
        assert_eq!(second.arguments, json!({"q": "harmful"}));
        let a = t.step(Event::ApprovalGiven {
            call_id: second.call_id.clone(),
            answer: ApprovalAnswer::No,
        });
        let Some(Action::RunTools { calls }) =
            a.iter().find(|a| matches!(a, Action::RunTools { .. }))
        else {
            panic!("{a:?}")
        };
        assert_eq!(calls.len(), 1, "only the approved call runs: {calls:?}");
        t.step(Event::ToolsFinished {
            results: vec![ToolOutcome {
                call_id: first.call_id.clone(),
                content: "harmless result".into(),
                is_error: false,
            }],
        });
        // On the wire, each result answers exactly one call.
        let Message::Assistant { tool_calls, .. } = &t.conv.messages[1] else {
            panic!("{:?}", t.conv.messages)
        };
        let wire: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(wire[0], "dup", "a unique first id is kept");
        assert_ne!(wire[1], "dup", "{wire:?}");
        let results = tool_messages(&t.conv);
        assert_eq!(results.len(), 2);
        assert_eq!(
            (results[0].0.as_str(), results[0].1.as_str()),
            (wire[0], "harmless result")
        );
        assert_eq!(results[1].0, wire[1]);
        assert!(results[1].1.contains("declined"), "{}", results[1].1);
    }

    #[test]
    fn missing_and_repeated_wire_ids_are_replaced_and_unique_ones_kept() {
        let mut t = T::new().started();
        let a = t.respond(
            "",
            &[
                ("", "read", json!({"q": "a"})),
                ("cordon_c1", "read", json!({"q": "b"})),
                ("x", "read", json!({"q": "c"})),
                ("x", "read", json!({"q": "d"})),
                ("", "read", json!({"q": "e"})),
            ],
        );
        let Message::Assistant { tool_calls, .. } = &t.conv.messages[1] else {
            panic!("{:?}", t.conv.messages)
        };
        let wire: Vec<String> = tool_calls.iter().map(|c| c.id.clone()).collect();
        let wire: Vec<&str> = wire.iter().map(String::as_str).collect();
        // The model's own unique ids stay; the generated ones avoid them.
        assert_eq!(wire[1], "cordon_c1");
        assert_eq!(wire[2], "x");
        let unique: BTreeSet<&str> = wire.iter().copied().collect();
        assert_eq!(unique.len(), 5, "{wire:?}");
        assert!(wire.iter().all(|w| !w.is_empty()), "{wire:?}");
        // Events carry Cordon's ids beside the wire ids.
        let Some(Action::Emit(AgentEvent::ToolCallsRequested { calls })) = a
            .iter()
            .find(|a| matches!(a, Action::Emit(AgentEvent::ToolCallsRequested { .. })))
        else {
            panic!("{a:?}")
        };
        let ids: Vec<(&str, &str)> = calls
            .iter()
            .map(|c| (c.call_id.as_str(), c.call.id.as_str()))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("c1", wire[0]),
                ("c2", "cordon_c1"),
                ("c3", "x"),
                ("c4", wire[3]),
                ("c5", wire[4])
            ]
        );
        let results = ["A", "B", "C", "D", "E"];
        t.step(Event::ToolsFinished {
            results: results
                .iter()
                .enumerate()
                .map(|(i, r)| ToolOutcome {
                    call_id: format!("c{}", i + 1),
                    content: r.to_string(),
                    is_error: false,
                })
                .collect(),
        });
        let answered: Vec<(String, String)> = tool_messages(&t.conv)
            .into_iter()
            .map(|(id, content, _)| (id, content))
            .collect();
        let expected: Vec<(String, String)> = wire
            .iter()
            .zip(results)
            .map(|(w, r)| (w.to_string(), r.to_string()))
            .collect();
        assert_eq!(answered, expected);
        // Ids keep counting through the conversation.
        t.respond("", &[("y", "read", json!({"q": "f"}))]);
        let State::ExecutingTools { batch } = &t.conv.state else {
            panic!("{:?}", t.conv.state)
        };
        assert_eq!(batch[0].id, "c6");
    }

    #[test]
    fn a_policy_denial_names_the_rule_and_a_refusal_its_reason() {
        let mut t = T::new().started();
        t.respond(
            "",
            &[
                ("1", "banned", json!({"q": "a"})),
                ("2", "write", json!({"q": "b"})),
            ],
        );
        let a = t.step(Event::ApprovalGiven {
            call_id: "c2".into(),
            answer: ApprovalAnswer::Refused {
                reason: "this run approves nothing it would have to ask about".into(),
            },
        });
        let rejected: Vec<&str> = a
            .iter()
            .filter_map(|a| match a {
                Action::Emit(AgentEvent::ToolCallRejected { reason, .. }) => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        let msgs = tool_messages(&t.conv);
        assert!(
            msgs[0].1.starts_with(
                "Error (not run): refused by policy: cordon.toml denies the tool `banned`"
            ),
            "{}",
            msgs[0].1
        );
        assert!(
            msgs[1]
                .1
                .contains("no one was asked: this run approves nothing")
                && !msgs[1].1.contains("declined"),
            "{}",
            msgs[1].1
        );
    }

    #[test]
    fn always_binds_to_the_tool_identity_not_its_name() {
        // Two plugins offer `read_file`; the model sees qualified names.
        let clash = |plugin: &str| ToolSpec {
            name: format!("{plugin}__read_file"),
            tool: "read_file".into(),
            plugin: plugin.into(),
            ..spec("read_file", true)
        };
        let mut t = T::new();
        t.cat = ToolCatalog::new(
            vec![clash("files"), clash("files2")],
            ApprovalConfig::default(),
        );
        t = t.started();
        t.respond(
            "",
            &[
                ("1", "files__read_file", json!({"q": "a"})),
                ("2", "files2__read_file", json!({"q": "b"})),
            ],
        );
        let a = t.step(Event::ApprovalGiven {
            call_id: "c1".into(),
            answer: ApprovalAnswer::Always,
        });
        assert_eq!(
            t.conv.session_approvals,
            BTreeMap::from([("files.read_file".to_string(), Policy::Auto)])
        );
        let request = approval_of(&a).expect("the other plugin's tool is still asked about");
        assert_eq!(request.call_id, "c2");
        // Answers saved under a model-facing name move to the identity.
        let mut legacy = BTreeMap::from([
            ("files2__read_file".to_string(), Policy::Deny),
            ("gone".to_string(), Policy::Auto),
            ("files.read_file".to_string(), Policy::Auto),
        ]);
        t.cat.upgrade_session(&mut legacy);
        assert_eq!(
            legacy,
            BTreeMap::from([
                ("files.read_file".to_string(), Policy::Auto),
                ("files2.read_file".to_string(), Policy::Deny),
                ("gone".to_string(), Policy::Auto),
            ])
        );
    }

    #[test]
    fn a_batch_saved_without_call_ids_gets_them_when_loaded() {
        let mut t = T::new().started();
        t.respond(
            "",
            &[
                ("dup", "write", json!({"q": "a"})),
                ("dup", "write", json!({"q": "b"})),
            ],
        );
        // The layout of an older save: no Cordon ids, the model's repeated id everywhere.
        let mut old: Value = serde_json::from_str(&t.conv.to_json()).unwrap();
        old.as_object_mut().unwrap().remove("next_call");
        for p in old["state"]["batch"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("id");
            p["call"]["id"] = json!("dup");
        }
        for c in old["messages"][1]["tool_calls"].as_array_mut().unwrap() {
            c["id"] = json!("dup");
        }
        let mut loaded = Conversation::from_json(&old.to_string()).unwrap();
        let State::AwaitingApproval { batch } = &loaded.state else {
            panic!("{:?}", loaded.state)
        };
        let ids: Vec<&str> = batch.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, vec!["c1", "c2"]);
        let wire: Vec<String> = batch.iter().map(|p| p.call.id.clone()).collect();
        assert_eq!(wire[0], "dup");
        assert_ne!(wire[1], "dup");
        let Message::Assistant { tool_calls, .. } = &loaded.messages[1] else {
            panic!()
        };
        assert_eq!(
            tool_calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
            wire
        );
        let actions = resume(&mut loaded, &t.cat).unwrap();
        assert!(
            matches!(&actions[0], Action::RequestApproval { request } if request.call_id == "c1"),
            "{actions:?}"
        );
    }

    #[test]
    fn always_and_never_apply_to_the_rest_of_the_conversation() {
        let mut t = T::new().started();
        t.respond(
            "",
            &[
                ("1", "write", json!({"q": "a"})),
                ("2", "write", json!({"q": "b"})),
            ],
        );
        let a = t.step(Event::ApprovalGiven {
            call_id: "c1".into(),
            answer: ApprovalAnswer::Always,
        });
        assert!(has(
            &a,
            |a| matches!(a, Action::RunTools { calls } if calls.len() == 2)
        ));
        assert_eq!(t.conv.session_approvals["p.write"], Policy::Auto);
        t.step(Event::ToolsFinished { results: vec![] });
        t.step(Event::Proceed);
        // Next answer: `write` now runs without asking.
        let a = t.respond("", &[("3", "write", json!({"q": "c"}))]);
        assert!(has(&a, |a| matches!(a, Action::RunTools { .. })));
        let mut t = T::new().started();
        t.respond("", &[("1", "write", json!({"q": "a"}))]);
        t.step(Event::ApprovalGiven {
            call_id: "c1".into(),
            answer: ApprovalAnswer::Never,
        });
        assert_eq!(t.conv.session_approvals["p.write"], Policy::Deny);
        assert!(matches!(t.conv.state, State::HandlingToolError { .. }));
    }

    #[test]
    fn iteration_limit_leads_to_a_final_answer_pass() {
        let mut t = T::new().started();
        for i in 0..3 {
            t.respond(
                "",
                &[(&format!("c{i}"), "read", json!({"q": format!("{i}")}))],
            );
            let a = t.step(Event::ToolsFinished { results: vec![] });
            t.step(Event::Proceed);
            if i < 2 {
                assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
            } else {
                let _ = a;
                assert_eq!(t.conv.state, State::AwaitingModel { final_pass: true });
            }
        }
        // Even if the model still asks for tools, the final pass ends the turn.
        t.respond("final words", &[("x", "read", json!({"q": "z"}))]);
        assert_eq!(t.conv.state, State::Idle);
        assert_eq!(
            t.conv.turns[0].outcome,
            Some(TurnOutcome::FinalAnswerAfterLimit)
        );
        assert_eq!(
            t.conv.messages.last(),
            Some(&Message::assistant("final words"))
        );
    }

    #[test]
    fn limit_check_after_successful_tools_too() {
        let mut t = T::new().started();
        t.lim.max_iterations = 1;
        t.respond("", &[("1", "read", json!({"q": "a"}))]);
        let a = t.step(Event::ToolsFinished {
            results: vec![ToolOutcome {
                call_id: "c1".into(),
                content: "ok".into(),
                is_error: false,
            }],
        });
        assert!(has(&a, |a| matches!(
            a,
            Action::Emit(AgentEvent::IterationLimitReached { limit: 1 })
        )));
        assert_eq!(t.conv.state, State::AwaitingModel { final_pass: true });
    }

    #[test]
    fn repeating_the_same_call_stops_for_lack_of_progress() {
        let mut t = T::new().started();
        t.lim.max_iterations = 10;
        for i in 0..2 {
            t.respond("", &[(&format!("c{i}"), "read", json!({"q": "same"}))]);
            t.step(Event::ToolsFinished { results: vec![] });
            t.step(Event::Proceed);
        }
        // Same arguments with different key order/spacing still count as the same call.
        let a = t.respond(
            "",
            &[("c2", "read", Value::String("{ \"q\" : \"same\" }".into()))],
        );
        assert_eq!(t.conv.state, State::Idle);
        let Some(TurnOutcome::NoProgress { explanation }) = &t.conv.turns[0].outcome else {
            panic!("{:?}", t.conv.turns)
        };
        assert!(
            explanation.contains("`read`") && explanation.contains("3 times"),
            "{explanation}"
        );
        assert!(has(&a, |a| matches!(
            a,
            Action::Emit(AgentEvent::TurnFinished { .. })
        )));
        // Every call has a result so the history stays valid for the next turn.
        assert!(
            matches!(t.conv.messages.last(), Some(Message::Tool { tool_call_id, .. }) if tool_call_id == "c2")
        );
    }

    #[test]
    fn transient_failures_back_off_then_give_up() {
        let mut t = T::new().started();
        let transient = |after: Option<u64>| LlmFailure {
            transient: true,
            message: "HTTP 503".into(),
            status: Some(503),
            retry_after_ms: after,
        };
        let a = t.step(Event::ModelFailed {
            failure: transient(None),
        });
        assert!(has(&a, |a| *a
            == Action::ScheduleRetry {
                retry: 1,
                delay_ms: 100,
                jitter: true
            }));
        assert!(matches!(
            t.conv.state,
            State::TransientFailure { retry: 1, .. }
        ));
        let a = t.step(Event::RetryTimerFired);
        assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
        let a = t.step(Event::ModelFailed {
            failure: transient(Some(1000)),
        });
        assert!(has(&a, |a| *a
            == Action::ScheduleRetry {
                retry: 2,
                delay_ms: 1000,
                jitter: false
            }));
        t.step(Event::RetryTimerFired);
        let len = t.conv.messages.len();
        t.step(Event::ModelFailed {
            failure: transient(None),
        });
        let State::Failed { error, .. } = &t.conv.state else {
            panic!("{:?}", t.conv.state)
        };
        assert!(
            error.contains("HTTP 503") && error.contains("gave up after 2 retries"),
            "{error}"
        );
        assert_eq!(t.conv.messages.len(), len, "history intact");
        // Retry from Failed.
        let a = t.step(Event::Retry);
        assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
        assert_eq!(t.conv.turns[0].outcome, None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = limits().retry;
        assert_eq!(backoff(&r, 1), 100);
        assert_eq!(backoff(&r, 2), 150);
        assert_eq!(backoff(&r, 60), 150);
    }

    #[test]
    fn fatal_failures_and_long_retry_after_fail_at_once() {
        let mut t = T::new().started();
        t.step(Event::ModelFailed {
            failure: LlmFailure {
                transient: false,
                message: "HTTP 401: bad key".into(),
                status: Some(401),
                retry_after_ms: None,
            },
        });
        assert!(
            matches!(&t.conv.state, State::Failed { error, .. } if error == "HTTP 401: bad key")
        );
        let mut t = T::new().started();
        t.step(Event::ModelFailed {
            failure: LlmFailure {
                transient: true,
                message: "429".into(),
                status: Some(429),
                retry_after_ms: Some(60_000),
            },
        });
        assert!(
            matches!(&t.conv.state, State::Failed { error, .. } if error.contains("wait 60 s"))
        );
    }

    #[test]
    fn cancel_keeps_partial_answer_marked() {
        let mut t = T::new().started();
        t.step(Event::Cancel {
            partial: "half an ans".into(),
        });
        assert_eq!(t.conv.state, State::Idle);
        assert_eq!(t.conv.turns[0].outcome, Some(TurnOutcome::Cancelled));
        assert!(
            matches!(t.conv.messages.last(), Some(Message::Assistant { content, partial: true, .. }) if content == "half an ans")
        );
        // The conversation stays usable.
        t.step(Event::UserMessage {
            text: "again".into(),
        });
        assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
    }

    #[test]
    fn cancel_during_approval_tools_retry_and_processing() {
        let mut t = T::new().started();
        t.respond("", &[("1", "write", json!({"q": "a"}))]);
        t.step(Event::Cancel {
            partial: String::new(),
        });
        // Cancelled while waiting for approval: the call never started.
        let result = &tool_messages(&t.conv)[0].1;
        assert!(
            result.starts_with("Error (not run)") && result.contains("cancelled"),
            "{result}"
        );
        assert_eq!(t.conv.state, State::Idle);

        // Cancelled while running: it did start, and may have done part of its work.
        let mut t = T::new().started();
        t.respond("", &[("1", "read", json!({"q": "a"}))]);
        t.step(Event::Cancel {
            partial: String::new(),
        });
        let result = &tool_messages(&t.conv)[0].1;
        assert!(
            result.starts_with("Error (cancelled)") && result.contains("while it ran"),
            "{result}"
        );

        let mut t = T::new().started();
        t.step(Event::ModelFailed {
            failure: LlmFailure {
                transient: true,
                message: "x".into(),
                status: None,
                retry_after_ms: None,
            },
        });
        t.step(Event::Cancel {
            partial: String::new(),
        });
        assert_eq!(t.conv.turns[0].outcome, Some(TurnOutcome::Cancelled));

        let mut t = T::new().started();
        t.step(Event::ModelResponded {
            response: ModelResponse {
                content: "text".into(),
                ..Default::default()
            },
        });
        t.step(Event::Cancel {
            partial: String::new(),
        });
        assert!(matches!(
            t.conv.messages.last(),
            Some(Message::Assistant { partial: true, .. })
        ));

        let mut t = T::new().started();
        t.respond("", &[("1", "nope", json!({}))]);
        t.step(Event::Cancel {
            partial: String::new(),
        });
        assert_eq!(t.conv.state, State::Idle);

        let mut t = T::new();
        assert!(
            t.err(Event::Cancel {
                partial: String::new()
            })
            .message
            .contains("nothing to cancel")
        );
    }

    #[test]
    fn events_that_do_not_fit_are_rejected() {
        let mut t = T::new();
        for e in [
            Event::Proceed,
            Event::RetryTimerFired,
            Event::Retry,
            Event::ToolsFinished { results: vec![] },
            Event::ModelResponded {
                response: ModelResponse::default(),
            },
            Event::ApprovalGiven {
                call_id: "x".into(),
                answer: ApprovalAnswer::Yes,
            },
        ] {
            t.err(e);
        }
        let mut t = T::new().started();
        t.err(Event::Proceed);
        t.err(Event::ToolsFinished { results: vec![] });
        t.err(Event::RetryTimerFired);
    }

    #[test]
    fn resume_gives_the_next_action_for_every_state() {
        let mut t = T::new();
        assert!(resume(&mut t.conv, &t.cat).is_err());
        t.step(Event::UserMessage { text: "hi".into() });
        assert_eq!(
            resume(&mut t.conv, &t.cat).unwrap(),
            vec![Action::CallModel { final_pass: false }]
        );
        t.step(Event::ModelResponded {
            response: ModelResponse {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "1".into(),
                    name: "write".into(),
                    arguments: "{\"q\":\"a\"}".into(),
                }],
                ..Default::default()
            },
        });
        assert_eq!(resume(&mut t.conv, &t.cat).unwrap(), vec![Action::Advance]);
        t.step(Event::Proceed);
        assert!(matches!(
            &resume(&mut t.conv, &t.cat).unwrap()[0],
            Action::RequestApproval { request } if request.grants == vec!["write grant".to_string()]
        ));
        t.step(Event::ApprovalGiven {
            call_id: "c1".into(),
            answer: ApprovalAnswer::Yes,
        });
        // `write` can change things: after a stop mid-run it is not repeated.
        let actions = resume(&mut t.conv, &t.cat).unwrap();
        assert!(
            matches!(&actions[0], Action::Emit(AgentEvent::ToolCallRejected { call_id, .. }) if call_id == "c1")
        );
        assert!(matches!(&actions[1], Action::RunTools { calls } if calls.is_empty()));
        // Save and load in the middle of the turn, then continue.
        let mut loaded = Conversation::from_json(&t.conv.to_json()).unwrap();
        assert_eq!(loaded, t.conv);
        step(
            &mut loaded,
            Event::ToolsFinished { results: vec![] },
            Env {
                catalog: &t.cat,
                limits: &t.lim,
            },
        )
        .unwrap();
        assert!(matches!(loaded.state, State::HandlingToolError { .. }));
        t.step(Event::ToolsFinished { results: vec![] });
        t.step(Event::Proceed);
        t.step(Event::ModelFailed {
            failure: LlmFailure {
                transient: true,
                message: "x".into(),
                status: None,
                retry_after_ms: None,
            },
        });
        assert!(matches!(
            resume(&mut t.conv, &t.cat).unwrap()[0],
            Action::ScheduleRetry { .. }
        ));
    }

    #[test]
    fn resuming_mid_run_repeats_only_calls_that_cannot_change_anything() {
        let mut t = T::new();
        t.step(Event::UserMessage { text: "hi".into() });
        t.respond(
            "",
            &[
                ("1", "read", json!({"q": "a"})),
                ("2", "write", json!({"q": "b"})),
            ],
        );
        t.step(Event::ApprovalGiven {
            call_id: "c2".into(),
            answer: ApprovalAnswer::Yes,
        });
        assert!(matches!(t.conv.state, State::ExecutingTools { .. }));
        // The process stops here; the saved conversation is loaded and resumed.
        let mut loaded = Conversation::from_json(&t.conv.to_json()).unwrap();
        let actions = resume(&mut loaded, &t.cat).unwrap();
        let run: Vec<&str> = actions
            .iter()
            .find_map(|a| match a {
                Action::RunTools { calls } => {
                    Some(calls.iter().map(|c| c.call_id.as_str()).collect())
                }
                _ => None,
            })
            .unwrap();
        assert_eq!(run, vec!["c1"], "only the read-only call runs again");
        step(
            &mut loaded,
            Event::ToolsFinished {
                results: vec![ToolOutcome {
                    call_id: "c1".into(),
                    content: "read again".into(),
                    is_error: false,
                }],
            },
            Env {
                catalog: &t.cat,
                limits: &t.lim,
            },
        )
        .unwrap();
        let results: Vec<(&str, &str)> = loaded
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool {
                    tool_call_id,
                    content,
                    ..
                } => Some((tool_call_id.as_str(), content.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(results[0], ("1", "read again"));
        assert_eq!(results[1].0, "2");
        assert!(
            results[1].1.contains("may or may not have taken effect"),
            "{results:?}"
        );
    }

    #[test]
    fn events_and_actions_serialize() {
        let e = Event::ApprovalGiven {
            call_id: "1".into(),
            answer: ApprovalAnswer::Always,
        };
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), e);
        let a = Action::Emit(AgentEvent::TextDelta { text: "x".into() });
        let text = serde_json::to_string(&a).unwrap();
        assert!(text.contains("\"type\":\"text_delta\""), "{text}");
        assert_eq!(serde_json::from_str::<Action>(&text).unwrap(), a);
    }
}
