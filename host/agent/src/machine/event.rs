//! What the driver feeds the machine: [`Event`]s, and the results of the tool calls it ran.

use serde::{Deserialize, Serialize};

use cordon_core::Requester;

use crate::approval::ApprovalAnswer;
use crate::messages::{LlmFailure, ModelResponse};
use crate::parameters::TurnParameters;

/// The result of one call, from the driver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// Cordon's id of the call, from [`ToolRun::call_id`](super::ToolRun::call_id).
    pub call_id: String,
    /// The text for the model (a rendered result or failure).
    pub content: String,
    /// Whether the tool failed.
    pub is_error: bool,
    /// For a failed call, the grants that would have allowed what the sandbox refused, as
    /// the host found them requestable (see [`crate::grant_requests`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wanted: Vec<String>,
    /// What the sandbox refused, one line each, for the person a grant request asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// When the result was kept apart from the conversation: its size; `content` is then its
    /// preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<crate::messages::KeptResult>,
}

/// Inputs to the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The user sent a message (starts a turn).
    UserMessage {
        /// The text.
        text: String,
        /// Who asked, through a served door: recorded on the turn, and the requester whose
        /// standing answers apply in it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Requester>,
        /// The content parts as the client sent them (images, audio), when not plain text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<serde_json::Value>>,
        /// What the client set for the turn's model requests.
        #[serde(default, skip_serializing_if = "TurnParameters::is_empty")]
        parameters: TurnParameters,
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
        /// What failed, and whether retrying may help.
        failure: LlmFailure,
    },
    /// The retry delay passed.
    RetryTimerFired,
    /// Continue from a state that needs no outside input.
    Proceed,
    /// The user's answer for one pending call.
    ApprovalGiven {
        /// Cordon's id of the call, from [`ApprovalRequest::call_id`](super::ApprovalRequest::call_id).
        call_id: String,
        /// The answer.
        answer: ApprovalAnswer,
        /// Who answered, for the audit log (empty: `the user`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        by: String,
        /// When, in milliseconds since the Unix epoch (0: not known), for the record of an
        /// `always`/`never` and the calls it later decides.
        #[serde(default, skip_serializing_if = "is_zero")]
        at_ms: i64,
    },
    /// One running call finished; the batch goes on until every approved call has a result.
    /// The driver feeds one per call as each ends, so each result is recorded when it exists.
    ToolFinished {
        /// Its outcome.
        outcome: ToolOutcome,
    },
    /// The approved calls finished; a call without an outcome here is answered with an error.
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

fn is_zero(n: &i64) -> bool {
    *n == 0
}
