//! What the machine asks of the driver: [`Action`]s, and the [`AgentEvent`]s a user interface
//! is shown.

use cordon_core::CallOutcome;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::ApprovalAnswer;
use crate::conversation::{PlannedCall, TurnOutcome};
use crate::messages::{ToolCall, Usage};

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
    /// Whether the Rule of Two holds the call back (see [`cordon_core::labels`]): a person
    /// must answer, not a standing setting such as `cordon run --approve all`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rule_of_two: bool,
    /// The grants a grant request asks for (see [`crate::grant_requests`]); empty for any
    /// other question. A grant request is answered by a person only, with `yes` (this call),
    /// `always` (this conversation), `for` (a while), `forever`, `no` or `never`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_grants: Vec<String>,
}

impl ApprovalRequest {
    /// Whether it is a grant request rather than a question about running a call.
    pub fn is_grant_request(&self) -> bool {
        !self.requested_grants.is_empty()
    }
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
    /// Record grants a person gave through a grant request: in the audit log always, and in
    /// the lock when given for a while or for good. The call runs again with them whatever
    /// this does.
    GiveGrants {
        /// The call whose grant request was answered.
        call_id: String,
        /// The tool, by the name the model used.
        tool: String,
        /// The grants (grant syntax).
        grants: Vec<String>,
        /// How long.
        span: crate::grant_requests::GrantSpan,
        /// Who gave them.
        by: String,
    },
    /// Feed `Proceed`.
    Advance,
    /// Tell the user interface.
    Emit(AgentEvent),
    /// Save the conversation (the history changed).
    Persist,
    /// Record in the audit log a call that was settled without the driver running it
    /// (invalid, denied, declined, never answered, or interrupted by a stop of the host).
    /// Calls the driver runs it records itself, with what the sandbox reported.
    AuditCall {
        /// The call, with who decided about it.
        call: PlannedCall,
        /// How it ended.
        outcome: CallOutcome,
    },
}

/// One approved call for the driver to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    /// Cordon's id of the call; the [`ToolOutcome`](super::ToolOutcome) carries it back.
    pub call_id: String,
    /// The tool, by the name the model used (the host's model-facing name).
    pub tool: String,
    /// The validated arguments.
    pub arguments: Value,
    /// Grants given to this call through a grant request, besides its plugin's own and those
    /// given for the conversation (which the driver adds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
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
    /// More tools were offered than `[agent] max_offered_tools`: the request offers these
    /// (see [`crate::selection`]).
    ToolsSelected {
        /// Which, out of how many, and why.
        selection: crate::selection::Selection,
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
        /// Cordon's id of the call.
        call_id: String,
        /// The tool name as the model wrote it.
        tool: String,
        /// The refusal, as the model reads it.
        reason: String,
    },
    /// The user is asked.
    ApprovalNeeded {
        /// The question.
        request: ApprovalRequest,
    },
    /// The user answered.
    ApprovalGiven {
        /// Cordon's id of the call.
        call_id: String,
        /// The answer.
        answer: ApprovalAnswer,
    },
    /// A tool starts running.
    ToolStarted {
        /// Cordon's id of the call.
        call_id: String,
        /// The tool, by the name the model used.
        tool: String,
        /// The arguments.
        arguments: Value,
    },
    /// A tool call's result (as the model will read it).
    ToolResult {
        /// Cordon's id of the call.
        call_id: String,
        /// The tool, by the name the model used.
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
        /// What failed in the last attempt.
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
    /// The session holds a label it did not hold before (see [`cordon_core::labels`]).
    LabelsChanged {
        /// Every label it holds now (`private`, `untrusted`).
        labels: Vec<String>,
        /// Where they came from, for people.
        sources: String,
        /// Whether it now holds both, so calls of tools that can send data out are asked.
        rule_of_two: bool,
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
        /// The model stopped that answer at its length limit (`finish_reason: "length"`):
        /// it may be cut off.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
    },
}
