//! The spans a turn makes (exported only with `[telemetry]`; see [`crate::telemetry`]): the
//! turn, each approval it waits for and each tool call it runs, named and attributed as
//! OpenTelemetry's conventions for generative AI name them where they have a name
//! (`execute_tool TOOL`, `gen_ai.tool.call.id`) and `cordon.*` otherwise. Model requests make
//! their own span ([`crate::llm::LlmClient::complete`]).
//!
//! Never an argument, a result or a message: a trace store is read by more people than the
//! audit log, which keeps arguments only when asked. Nor who or what decided a call in the
//! audit log's words: those name a grant request's directories and a rule's reason. A span
//! says the decision and the rule's id; the audit record says the rest.

use tracing::Span;
use tracing::field::Empty;

use super::{AuditContext, Driven, TurnInput};
use crate::AgentError;
use crate::conversation::{Conversation, PlannedCall, TurnOutcome};
use crate::machine::{ApprovalRequest, Event, ToolRun};

/// A turn, from its input to its end or suspension.
pub(super) fn turn(input: &TurnInput, audit: &AuditContext) -> Span {
    let input = match input {
        TurnInput::Message(_) | TurnInput::Request(_) => "message",
        TurnInput::Retry => "retry",
        TurnInput::Resume => "resume",
    };
    tracing::info_span!(
        "turn",
        otel.name = "turn",
        otel.status_code = Empty,
        cordon.session = audit.session.as_deref().unwrap_or(""),
        cordon.origin = %audit.origin,
        cordon.input = input,
        enduser.id = audit.requested_by.as_ref().map(|r| r.token.as_str()).unwrap_or(""),
        cordon.outcome = Empty,
        cordon.state = Empty,
        "error.type" = Empty,
    )
}

/// Records how the turn ended on its span.
pub(super) fn turn_ended(span: &Span, driven: &Result<Driven, AgentError>, conv: &Conversation) {
    let outcome = match driven {
        Ok(Driven::Finished(outcome)) => match outcome {
            TurnOutcome::Answered => "answered",
            TurnOutcome::FinalAnswerAfterLimit => "final_answer_after_limit",
            TurnOutcome::NoProgress { .. } => "no_progress",
            TurnOutcome::Cancelled => "cancelled",
            TurnOutcome::Failed { .. } => "failed",
        },
        Ok(Driven::Suspended) => "suspended",
        Err(_) => "error",
    };
    span.record("cordon.outcome", outcome);
    span.record("cordon.state", conv.state.key());
    if matches!(outcome, "failed" | "error") {
        span.record("otel.status_code", "error");
        span.record("error.type", outcome);
    }
}

/// The wait for a person's answer to one call.
pub(super) fn approval(request: &ApprovalRequest) -> Span {
    tracing::info_span!(
        "approval",
        otel.name = %format_args!("approval {}", request.tool),
        cordon.call_id = %request.call_id,
        cordon.plugin = %request.plugin,
        gen_ai.tool.name = %request.tool,
        cordon.rule_of_two = request.rule_of_two,
        cordon.grant_request = request.is_grant_request(),
        cordon.answer = Empty,
        cordon.answered_by = Empty,
    )
}

/// Records the answer (none: the turn was cancelled or stopped) on its span.
pub(super) fn approval_ended(span: &Span, event: Option<&Event>) {
    let (answer, by) = match event {
        Some(Event::ApprovalGiven { answer, by, .. }) => (answer.as_str(), by.as_str()),
        Some(Event::Cancel { .. }) => ("cancelled", ""),
        _ => ("stopped", ""),
    };
    span.record("cordon.answer", answer);
    span.record("cordon.answered_by", by);
}

/// One tool call, from its start in the sandbox to its result.
pub(super) fn tool_call(run: &ToolRun, planned: Option<&PlannedCall>) -> Span {
    let approval = planned.and_then(|p| p.approval.as_ref());
    let rule = planned
        .and_then(|p| p.policy.as_ref())
        .and_then(|p| p.rule.as_ref());
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", run.tool),
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %run.tool,
        gen_ai.tool.call.id = planned.map(|p| p.call.id.as_str()).unwrap_or(""),
        cordon.call_id = %run.call_id,
        cordon.decision = approval.map(|a| a.decision.as_str()).unwrap_or(""),
        cordon.policy_rule = rule.map(|r| r.id.as_str()).unwrap_or(""),
        cordon.peak_memory_bytes = Empty,
        cordon.refusals = Empty,
        "error.type" = Empty,
    )
}
