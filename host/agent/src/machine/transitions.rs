//! The transitions of the table in the module doc, one handler per row, and what they share.
//! A handler runs only for the pair its row names; [`step`](super::step) has already taken the
//! state out of the conversation, so each handler sets the state it leaves behind.

use std::collections::BTreeMap;

use cordon_core::Requester;
use serde_json::Value;

use super::granting::Given;
use super::places::start_queued;
use super::{Action, AgentEvent, Env, RequestedCall, ToolCatalog, ToolOutcome};
use super::{ApprovalRequest, catalog::Checked, catalog::Refusal};
use crate::approval::{ApprovalAnswer, Policy, StandingAnswer};
use crate::config::RetryConfig;
use crate::conversation::{
    CallApproval, CallStatus, Conversation, Note, PlannedCall, State, Turn, TurnOutcome,
    identify_calls,
};
use crate::messages::{KeptResult, LlmFailure, Message, ModelResponse, ToolCall};
use crate::tools::{ToolFailure, ToolFailureKind, ToolSpec, render_failure};
use cordon_core::CallOutcome;

/// What a `UserMessage` brings: see [`Event::UserMessage`](super::Event::UserMessage).
pub(super) struct UserTurn {
    pub(super) text: String,
    pub(super) by: Option<Requester>,
    pub(super) parts: Option<Vec<serde_json::Value>>,
    pub(super) parameters: crate::parameters::TurnParameters,
}

/// Idle or Failed, `UserMessage`: the message opens a turn and goes to the model.
pub(super) fn start_turn(conv: &mut Conversation, user: UserTurn, out: &mut Vec<Action>) {
    let UserTurn {
        text,
        by,
        parts,
        parameters,
    } = user;
    conv.messages.push(Message::User {
        content: text.clone(),
        parts,
    });
    conv.turns.push(Turn {
        first_message: conv.messages.len() - 1,
        outcome: None,
        requested_by: by,
        parameters,
    });
    conv.progress = Default::default();
    out.push(Action::Emit(AgentEvent::TurnStarted {
        turn: conv.turns.len() - 1,
        input: text,
    }));
    out.push(Action::Persist);
    call_model(conv, false, out);
}

/// Failed, `Retry`: the failed request goes out again, with a fresh retry budget.
pub(super) fn retry_failed(conv: &mut Conversation, final_pass: bool, out: &mut Vec<Action>) {
    if let Some(t) = conv.turns.last_mut() {
        t.outcome = None;
    }
    conv.progress.retries = 0;
    call_model(conv, final_pass, out);
}

/// AwaitingModel, `ModelResponded`: the answer is counted and kept for processing.
pub(super) fn receive_response(
    conv: &mut Conversation,
    response: ModelResponse,
    final_pass: bool,
    out: &mut Vec<Action>,
) {
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

/// AwaitingModel, `ModelFailed`: a transient failure with retries left waits and retries;
/// anything else fails the turn.
pub(super) fn model_failed(
    conv: &mut Conversation,
    failure: LlmFailure,
    final_pass: bool,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
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
        let upstream = Upstream {
            status: failure.status,
            retry_after_ms: failure.retry_after_ms,
        };
        fail(conv, error, upstream, final_pass, out);
    }
}

/// Whether `call_id` names a call of the batch that waits for the user.
pub(super) fn is_pending(batch: &[PlannedCall], call_id: &str) -> bool {
    batch
        .iter()
        .any(|p| p.id == call_id && p.status == CallStatus::Pending)
}

/// AwaitingApproval, `ApprovalGiven`: the answer settles the call (and, for `always`/`never`,
/// the other pending calls of the same tool); then the next question, the run, or the errors.
pub(super) fn apply_approval(
    conv: &mut Conversation,
    mut batch: Vec<PlannedCall>,
    call_id: String,
    answer: ApprovalAnswer,
    given: Given,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    let at_ms = given.at_ms;
    let by = given.announce(&call_id, &answer, out);
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
        let answer = StandingAnswer {
            policy,
            by: by.clone(),
            at_ms,
            call_id: call_id.clone(),
            turn: conv.turns.len().saturating_sub(1),
            requester: conv.requester().cloned(),
        };
        conv.session_approvals.insert(identity.clone(), answer);
    }
    // `for` and `forever` answer grant requests only; to any other question they are a yes
    // for this call, never a standing answer.
    let approved = matches!(
        answer,
        ApprovalAnswer::Yes
            | ApprovalAnswer::Always
            | ApprovalAnswer::For { .. }
            | ApprovalAnswer::Forever
    );
    if let (Some(identity), true) = (&identity, approved) {
        let turn = conv.turns.len().saturating_sub(1);
        conv.approved_tools.entry(identity.clone()).or_insert(turn);
    }
    for p in batch.iter_mut().filter(|p| p.status == CallStatus::Pending) {
        // An `always` does not answer another call a policy rule asks about, nor one the Rule
        // of Two holds back: each such call is asked about on its own, with its own arguments
        // shown. A `never` refuses it all the same.
        let held_back = env.catalog.held_back(&p.call.name, &conv.labels);
        let asked_by_rule = held_back || p.policy.as_ref().is_some_and(|n| n.rule.is_some());
        let same_tool = remembered.is_some()
            && identity.is_some()
            && !(asked_by_rule && remembered == Some(Policy::Auto))
            && env.catalog.spec(&p.call.name).map(ToolSpec::identity) == identity;
        if p.id != call_id && !same_tool {
            continue;
        }
        let declined = match &answer {
            ApprovalAnswer::Yes
            | ApprovalAnswer::Always
            | ApprovalAnswer::For { .. }
            | ApprovalAnswer::Forever => None,
            ApprovalAnswer::No | ApprovalAnswer::Never => Some(
                "the user declined this call; do not retry it unless the user asks".to_string(),
            ),
            ApprovalAnswer::Refused { reason } => Some(format!(
                "not run, and no one was asked: {reason}; do not retry it unless the user asks"
            )),
        };
        p.approval = Some(CallApproval {
            decision: answer.as_str().to_string(),
            by: by.clone(),
        });
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
    after_approval(conv, batch, env, out);
}

/// ExecutingTools, `ToolFinished`: the call gets its result; the batch finishes when no
/// approved call is left without one.
pub(super) fn record_result(
    conv: &mut Conversation,
    mut batch: Vec<PlannedCall>,
    outcome: ToolOutcome,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    if let Some(p) = batch.iter_mut().find(|p| p.id == outcome.call_id) {
        label(conv, env, &p.call.name, &p.granted, out);
        super::granting::settle(conv, p, outcome, env);
    }
    start_queued(&mut batch, env, out);
    if batch.iter().any(|p| p.status.is_to_run()) {
        conv.state = State::ExecutingTools { batch };
    } else {
        // Calls held for a grant request are asked about once every running call is done.
        after_approval(conv, batch, env, out);
    }
}

/// ExecutingTools, `ToolsFinished`: each approved call gets its result (an error when the
/// host returned none), and the results go into the history.
pub(super) fn record_results(
    conv: &mut Conversation,
    mut batch: Vec<PlannedCall>,
    results: Vec<ToolOutcome>,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    for p in batch.iter_mut().filter(|p| p.status.is_to_run()) {
        let r = results.iter().find(|r| r.call_id == p.id);
        if r.is_some() {
            label(conv, env, &p.call.name, &p.granted, out);
        }
        p.status = match r {
            Some(r) => {
                super::granting::settle(conv, p, r.clone(), env);
                continue;
            }
            None => CallStatus::Done {
                content: render_failure(&ToolFailure::new(
                    ToolFailureKind::Failed,
                    "the host returned no result for this call",
                )),
                is_error: true,
                kept: None,
            },
        };
    }
    after_approval(conv, batch, env, out);
}

/// The conversation holds the labels of a result of the tool the model calls `name`, run
/// with the `granted` grants besides its own: the result, error or not, goes to the model
/// with the batch (see [`cordon_core::labels`]). A label new to the conversation is announced.
fn label(
    conv: &mut Conversation,
    env: Env<'_>,
    name: &str,
    granted: &[String],
    out: &mut Vec<Action>,
) {
    let before = conv.labels.labels();
    match env.catalog.spec(name) {
        Some(spec) => conv
            .labels
            .saw(&spec.identity(), &spec.widened(granted).exposure),
        // A tool gone from the catalog since it was called: what it could reach is no longer
        // known, so its result is taken to carry both labels.
        None => {
            let unknown = "(a tool no longer installed)".to_string();
            let exposure = cordon_core::Exposure {
                private: vec![unknown.clone()],
                untrusted: vec![unknown],
                egress: Vec::new(),
            };
            conv.labels.saw(name, &exposure);
        }
    }
    if conv.labels.labels() != before {
        out.push(Action::Emit(AgentEvent::LabelsChanged {
            labels: conv.labels.names(),
            sources: conv.labels.describe(),
            rule_of_two: conv.labels.holds_both(),
        }));
    }
}

fn signature(call: &ToolCall) -> String {
    let args = serde_json::from_str::<Value>(&call.arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| call.arguments.trim().to_string());
    format!("{}\u{0}{args}", call.name)
}

pub(super) fn backoff(retry: &RetryConfig, n: u32) -> u64 {
    let factor = 1u64.checked_shl(n.saturating_sub(1)).unwrap_or(u64::MAX);
    retry
        .initial_backoff_ms
        .saturating_mul(factor)
        .min(retry.max_backoff_ms)
}

pub(super) fn call_model(conv: &mut Conversation, final_pass: bool, out: &mut Vec<Action>) {
    conv.state = State::AwaitingModel { final_pass };
    out.push(Action::CallModel { final_pass });
}

fn finish(conv: &mut Conversation, outcome: TurnOutcome, out: &mut Vec<Action>) {
    finish_answer(conv, outcome, false, out);
}

/// Ends the turn; `truncated`: its answer stopped at the model's length limit.
fn finish_answer(
    conv: &mut Conversation,
    outcome: TurnOutcome,
    truncated: bool,
    out: &mut Vec<Action>,
) {
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
        truncated,
    }));
}

/// What the model server said with the failure that ended a turn.
struct Upstream {
    status: Option<u16>,
    retry_after_ms: Option<u64>,
}

fn fail(
    conv: &mut Conversation,
    error: String,
    upstream: Upstream,
    final_pass: bool,
    out: &mut Vec<Action>,
) {
    let outcome = TurnOutcome::Failed {
        error: error.clone(),
        upstream_status: upstream.status,
        retry_after_ms: upstream.retry_after_ms,
    };
    if let Some(t) = conv.turns.last_mut() {
        t.outcome = Some(outcome.clone());
    }
    conv.state = State::Failed { error, final_pass };
    out.push(Action::Persist);
    out.push(Action::Emit(AgentEvent::TurnFinished {
        turn: conv.turns.len().saturating_sub(1),
        outcome,
        answer: String::new(),
        truncated: false,
    }));
}

pub(super) fn process_response(
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
        let truncated = response.finish_reason.as_deref() == Some("length");
        finish_answer(conv, outcome, truncated, out);
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
            out.push(Action::AuditCall {
                call: PlannedCall {
                    id: id.clone(),
                    call: call.clone(),
                    arguments: serde_json::from_str(&call.arguments).ok(),
                    status: CallStatus::Denied {
                        message: content.clone(),
                    },
                    approval: Some(CallApproval {
                        decision: "refused".to_string(),
                        by: "Cordon's loop guard (the same call repeated)".to_string(),
                    }),
                    policy: None,
                    labels: conv.labels.names(),
                    grant_request: None,
                    granted: Vec::new(),
                },
                outcome: CallOutcome::NotRun {
                    reason: content.clone(),
                },
            });
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
                kept: None,
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
    // The store keys the calls decided so far in this answer will add to: a later call's
    // counters include them, so one answer cannot pass a limit with a batch of calls. A call
    // that is asked counts as if it ran.
    let mut earlier: BTreeMap<String, u64> = BTreeMap::new();
    for (id, call) in calls {
        let with_earlier;
        let inputs = if earlier.is_empty() {
            env.inputs
        } else {
            with_earlier = env.inputs.with_earlier(&earlier);
            &with_earlier
        };
        let session_grants = |spec: &crate::tools::ToolSpec| {
            conv.grants.of(crate::grant_requests::Applying {
                plugin: &spec.plugin,
                digest: &spec.digest,
                requester: conv.requester(),
                now_ms: env.inputs.now_ms,
            })
        };
        let checked = env.catalog.check(
            &call,
            conv.standing(),
            &conv.approved_tools,
            inputs,
            &session_grants,
        );
        let planned = match checked {
            Err(refusal) => {
                let (arguments, status, message, approval, policy) = match refusal {
                    Refusal::Invalid(arguments, message) => (
                        arguments,
                        CallStatus::Invalid {
                            message: message.clone(),
                        },
                        message,
                        CallApproval {
                            decision: "invalid".to_string(),
                            by: "Cordon's check of the call".to_string(),
                        },
                        None,
                    ),
                    Refusal::Denied {
                        message,
                        reason,
                        args,
                        note,
                    } => (
                        args.map(|a| *a),
                        CallStatus::Denied {
                            message: message.clone(),
                        },
                        message,
                        CallApproval {
                            decision: Policy::Deny.as_str().to_string(),
                            by: format!("policy: {reason}"),
                        },
                        note,
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
                    approval: Some(approval),
                    policy,
                    labels: conv.labels.names(),
                    grant_request: None,
                    granted: Vec::new(),
                }
            }
            Ok(Checked {
                args,
                decision,
                note,
                ..
            }) => PlannedCall {
                id,
                call,
                arguments: Some(args),
                policy: note,
                labels: conv.labels.names(),
                grant_request: None,
                granted: Vec::new(),
                approval: (decision.policy != Policy::Ask).then(|| CallApproval {
                    decision: decision.policy.as_str().to_string(),
                    by: format!("policy: {}", decision.reason),
                }),
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
        count_earlier(env, &planned, &mut earlier);
        batch.push(planned);
    }
    out.push(Action::Persist);
    after_approval(conv, batch, env, out);
}

pub(super) fn after_approval(
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
    let mut batch = batch;
    let mut queued = false;
    for p in batch
        .iter_mut()
        .filter(|p| p.status == CallStatus::Approved)
    {
        p.status = CallStatus::Queued;
        queued = true;
    }
    if queued {
        start_queued(&mut batch, env, out);
        conv.state = State::ExecutingTools { batch };
    } else {
        finish_batch(conv, batch, env, out);
    }
}

pub(super) fn approval_request(
    conv: &Conversation,
    p: &PlannedCall,
    catalog: &ToolCatalog,
) -> ApprovalRequest {
    let spec = catalog.spec(&p.call.name);
    if let Some(request) = &p.grant_request {
        let mut reason = crate::grant_requests::reason(&p.call.name, request);
        let widened = spec.map(|s| s.widened(&request.grants));
        if conv.labels.holds_both()
            && spec.is_some_and(|s| s.exposure.egress.is_empty())
            && widened
                .as_ref()
                .is_some_and(|w| !w.exposure.egress.is_empty())
        {
            reason.push_str(
                "; this conversation holds private data and untrusted content, and the grant \
                 would let the tool send data out",
            );
        }
        return ApprovalRequest {
            call_id: p.id.clone(),
            tool: p.call.name.clone(),
            plugin: spec.map(|s| s.plugin.clone()).unwrap_or_default(),
            arguments: p.arguments.clone().unwrap_or(Value::Null),
            grants: spec.map(|s| s.grants.clone()).unwrap_or_default(),
            reason,
            rule_of_two: false,
            requested_grants: request.grants.clone(),
        };
    }
    ApprovalRequest {
        call_id: p.id.clone(),
        tool: p.call.name.clone(),
        plugin: spec.map(|s| s.plugin.clone()).unwrap_or_default(),
        arguments: p.arguments.clone().unwrap_or(Value::Null),
        grants: spec.map(|s| s.grants.clone()).unwrap_or_default(),
        // A rule that asks about this call gives its own reason; otherwise the tool's.
        reason: match p.policy.as_ref().and_then(|n| n.rule.as_ref()) {
            Some(rule) => rule.describe(),
            None => spec
                .map(|s| catalog.decision(s, conv.standing()).reason)
                .unwrap_or_default(),
        },
        rule_of_two: catalog.held_back(&p.call.name, &conv.labels),
        requested_grants: Vec::new(),
    }
}

/// The text the model gets for `p`, whether it is an error, and when its result was kept apart
/// from the conversation, its size.
fn result_of(p: &PlannedCall) -> (String, bool, Option<KeptResult>) {
    if let (Some(request), CallStatus::Pending) = (&p.grant_request, &p.status) {
        // It ran and was refused; the grant request went unanswered.
        return (request.result.clone(), true, None);
    }
    match &p.status {
        CallStatus::Invalid { message } => (format!("Error (invalid call): {message}"), true, None),
        CallStatus::Denied { message } => (format!("Error (not run): {message}"), true, None),
        CallStatus::Done {
            content,
            is_error,
            kept,
        } => (content.clone(), *is_error, kept.clone()),
        CallStatus::Pending => (
            "Error (not run): the user cancelled the turn before deciding on this call".to_string(),
            true,
            None,
        ),
        CallStatus::Queued => (
            "Error (not run): the user cancelled the turn before this call started".to_string(),
            true,
            None,
        ),
        // Approved calls were running (or about to) when the turn was cancelled.
        CallStatus::Approved => (
            "Error (cancelled): the user cancelled this call while it ran; it may have had part \
             of its effect"
                .to_string(),
            true,
            None,
        ),
    }
}

/// Every call of a finished (or cancelled) batch gets its result in the history, in the
/// order the model made them; calls that never ran go to the audit log.
fn push_results(
    conv: &mut Conversation,
    batch: &[PlannedCall],
    out: &mut Vec<Action>,
) -> Vec<String> {
    let mut errors = Vec::new();
    for p in batch {
        let (content, is_error, kept) = result_of(p);
        if let CallStatus::Invalid { message } | CallStatus::Denied { message } = &p.status {
            out.push(Action::AuditCall {
                call: p.clone(),
                outcome: CallOutcome::NotRun {
                    reason: message.clone(),
                },
            });
        } else if (p.status == CallStatus::Pending && p.grant_request.is_none())
            || p.status == CallStatus::Queued
        {
            out.push(Action::AuditCall {
                call: p.clone(),
                outcome: CallOutcome::NotRun {
                    reason: content.clone(),
                },
            });
        }
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
            kept,
        });
    }
    errors
}

pub(super) fn finish_batch(
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

pub(super) fn next_request(conv: &mut Conversation, env: Env<'_>, out: &mut Vec<Action>) {
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

pub(super) fn cancel(
    conv: &mut Conversation,
    state: State,
    partial: String,
    out: &mut Vec<Action>,
) {
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

/// Adds to `earlier` the store keys `planned` will add to if it runs (see [`crate::policy`]'s
/// counters), unless it will not run.
fn count_earlier(env: Env<'_>, planned: &PlannedCall, earlier: &mut BTreeMap<String, u64>) {
    let (Some(policy), Some(note), CallStatus::Approved | CallStatus::Queued | CallStatus::Pending) =
        (env.catalog.policy(), &planned.policy, &planned.status)
    else {
        return;
    };
    let Some(spec) = env.catalog.spec(&planned.call.name) else {
        return;
    };
    let scope = cordon_policy::CountScope {
        session: &env.inputs.session,
        caller: (&env.inputs.caller.token, &env.inputs.caller.user),
    };
    for key in policy.tally(&spec.identity(), &note.applied, scope) {
        *earlier.entry(key).or_default() += 1;
    }
}
