//! Messages, tool calls and model responses as the conversation stores them.
//!
//! The history is kept in one canonical form (native OpenAI tool calls) whatever the wire format
//! of the model, so a conversation saved with one model can be continued with another.

use serde::{Deserialize, Serialize};

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The wire id: the one the model gave (or one the host generated for text-format calls),
    /// which `role: tool` results refer to. Empty in a [`ModelResponse`] when the model sent
    /// none; the engine makes the ids of an answer unique before storing it. Cordon addresses
    /// a call by its own id (see [`crate::conversation::PlannedCall::id`]), never by this one.
    pub id: String,
    /// The tool name exactly as the model wrote it; it may not exist.
    pub name: String,
    /// The argument text exactly as the model wrote it; it may not be JSON.
    pub arguments: String,
}

/// One message of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions from the host (the system prompt is rebuilt per request and not stored
    /// here; stored system messages are notes such as summaries).
    System {
        /// The text.
        content: String,
    },
    /// What the user typed.
    User {
        /// The text (of every text part, when the client sent parts).
        content: String,
        /// The content parts as a client sent them (text, images, audio), sent to the model
        /// as given in place of `content`; `None` for plain text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<serde_json::Value>>,
    },
    /// What the model answered.
    Assistant {
        /// The text (may be empty when the model only called tools).
        content: String,
        /// The tool calls, in the order the model made them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// True when the answer was cut short by a cancellation: it is kept but marked.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    /// The result of one tool call, sent back to the model.
    Tool {
        /// The call this answers.
        tool_call_id: String,
        /// The tool that was called.
        name: String,
        /// The result or error text the model reads.
        content: String,
        /// True when the call did not succeed (invalid, denied, failed, cancelled).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// When the result was kept in the store apart from the conversation (see
        /// [`crate::spill`]): its size; `content` is then its preview.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<KeptResult>,
    },
}

/// A tool result too large to hold in the conversation, kept by the journal in parts (see
/// [`crate::Journal::keep_result`]) and read with `read_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptResult {
    /// What the journal keeps it under: Cordon's id of the call (unique in the conversation,
    /// where the model's may repeat).
    pub id: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Its lines (a last line without a newline counts).
    pub lines: u64,
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Message::User {
            content: text.into(),
            parts: None,
        }
    }

    /// An assistant text message without tool calls.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::Assistant {
            content: text.into(),
            tool_calls: Vec::new(),
            partial: false,
        }
    }

    /// The role name used on the wire.
    pub fn role(&self) -> &'static str {
        match self {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        }
    }

    /// The `content` sent to the model: the parts a client sent, or else the text.
    pub fn wire_content(&self) -> serde_json::Value {
        match self {
            Message::User {
                parts: Some(parts), ..
            } => serde_json::Value::Array(parts.clone()),
            other => serde_json::Value::from(other.content()),
        }
    }

    /// The text content.
    pub fn content(&self) -> &str {
        match self {
            Message::System { content }
            | Message::User { content, .. }
            | Message::Assistant { content, .. }
            | Message::Tool { content, .. } => content,
        }
    }
}

/// Token usage reported by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens in the answer.
    pub completion_tokens: u64,
}

impl Usage {
    /// Adds another usage record.
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// A complete answer from the model: text, tool calls, usage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The text (with any text-format tool call blocks removed).
    pub content: String,
    /// The tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Usage, when the server sent it.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The server's finish reason (`stop`, `tool_calls`, `length`, …).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// Why a request to the model failed. Plain data: the client produces it and the state machine
/// decides on it (retry or give up) without knowing about HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct LlmFailure {
    /// Whether retrying may help (connect errors, 429, 5xx, cut streams).
    pub transient: bool,
    /// What happened and what to do.
    pub message: String,
    /// The HTTP status, when there was one.
    pub status: Option<u16>,
    /// The server's `Retry-After`, in milliseconds.
    pub retry_after_ms: Option<u64>,
}

impl LlmFailure {
    pub(crate) fn transient(message: String) -> Self {
        Self {
            transient: true,
            message,
            status: None,
            retry_after_ms: None,
        }
    }

    pub(crate) fn fatal(message: String) -> Self {
        Self {
            transient: false,
            message,
            status: None,
            retry_after_ms: None,
        }
    }
}

/// The first 200 characters of a text the model or server sent, for quoting in a message.
pub(crate) fn snippet(text: &str) -> String {
    let t: String = text.chars().take(200).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}
