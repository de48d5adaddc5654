//! A conversation: its history, its turns, where its state machine stands, and what the user
//! decided along the way. Everything here is plain data so it can be saved as JSON at any
//! moment and resumed, continued or forked later.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::approval::Policy;
use crate::machine::State;
use crate::messages::{Message, Usage};

/// The save format version; bumped when the layout changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;

/// Errors in loading, saving or forking a conversation.
#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    /// The JSON is not a saved conversation.
    #[error("not a saved Cordon conversation: {0}")]
    Parse(String),
    /// The conversation was saved by an incompatible version.
    #[error(
        "the conversation was saved in format {found}, this version reads format {FORMAT_VERSION}"
    )]
    Version {
        /// The version in the file.
        found: u32,
    },
    /// The fork point is past the finished turns.
    #[error("cannot fork after turn {requested}: the conversation has {finished} finished turn(s)")]
    Fork {
        /// The requested number of turns to keep.
        requested: usize,
        /// The finished turns available.
        finished: usize,
    },
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The model answered.
    Answered,
    /// The iteration limit was reached and the model gave its final answer without tools.
    FinalAnswerAfterLimit,
    /// The model kept asking for the same call; the loop stopped.
    NoProgress {
        /// What happened, for the user.
        explanation: String,
    },
    /// The user cancelled; any partial answer is kept and marked.
    Cancelled,
    /// The turn failed; the history holds everything up to the failure.
    Failed {
        /// The error.
        error: String,
    },
}

/// One user message and everything the engine did for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// Index in `messages` of the user message that started the turn.
    pub first_message: usize,
    /// How it ended (`None` while it runs).
    pub outcome: Option<TurnOutcome>,
}

/// Something the transcript shows that is not a message (e.g. pruning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// The history length when it happened.
    pub at_message: usize,
    /// What happened.
    pub text: String,
}

/// Counters of the running turn; reset when a turn starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Model answers with tools offered so far in this turn.
    pub iterations: u32,
    /// Retries of the current request.
    pub retries: u32,
    /// How often each (tool, canonical arguments) was requested in this turn.
    pub calls_seen: BTreeMap<String, u32>,
}

/// A cached summary of pruned messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The message indices it covers.
    pub covers: Vec<usize>,
    /// The summary text.
    pub text: String,
}

/// A conversation; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Save format version.
    pub format: u32,
    /// The full history (never pruned; pruning applies to requests only).
    pub messages: Vec<Message>,
    /// The turns, oldest first.
    pub turns: Vec<Turn>,
    /// Where the state machine stands.
    pub state: State,
    /// Counters of the running turn.
    pub progress: Progress,
    /// The user's `always`/`never` answers, by tool identity (`plugin.tool`).
    pub session_approvals: BTreeMap<String, Policy>,
    /// Tool calls identified so far: the number in Cordon's id of the last call (`c7` → 7).
    #[serde(default)]
    pub next_call: u64,
    /// Transcript notes.
    pub notes: Vec<Note>,
    /// Total usage reported by the server.
    pub usage: Usage,
    /// The last summary of pruned messages.
    #[serde(default)]
    pub summary: Option<Summary>,
}

impl Default for Conversation {
    fn default() -> Self {
        Self::new()
    }
}

impl Conversation {
    /// An empty conversation, ready for a first message.
    pub fn new() -> Self {
        Self {
            format: FORMAT_VERSION,
            messages: Vec::new(),
            turns: Vec::new(),
            state: State::Idle,
            progress: Progress::default(),
            session_approvals: BTreeMap::new(),
            next_call: 0,
            notes: Vec::new(),
            usage: Usage::default(),
            summary: None,
        }
    }

    /// The conversation as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a conversation saved by [`Conversation::to_json`].
    pub fn from_json(text: &str) -> Result<Self, ConversationError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ConversationError::Parse(e.to_string()))?;
        let found = v["format"].as_u64().unwrap_or(0) as u32;
        if found != FORMAT_VERSION {
            return Err(ConversationError::Version { found });
        }
        let mut conv: Self =
            serde_json::from_value(v).map_err(|e| ConversationError::Parse(e.to_string()))?;
        crate::machine::identify_saved_calls(&mut conv);
        Ok(conv)
    }

    /// Turns that have an outcome.
    pub fn finished_turns(&self) -> usize {
        self.turns
            .iter()
            .take_while(|t| t.outcome.is_some())
            .count()
    }

    /// Whether a new message can be sent (no turn is running).
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle | State::Failed { .. })
    }

    /// An independent copy holding the first `keep_turns` finished turns, ready for a new
    /// message. Approvals given with `always`/`never` carry over; notes after the fork point
    /// do not.
    pub fn fork(&self, keep_turns: usize) -> Result<Self, ConversationError> {
        let finished = self.finished_turns();
        if keep_turns > finished {
            return Err(ConversationError::Fork {
                requested: keep_turns,
                finished,
            });
        }
        let end = self
            .turns
            .get(keep_turns)
            .map(|t| t.first_message)
            .unwrap_or(self.messages.len());
        let mut copy = self.clone();
        copy.messages.truncate(end);
        copy.turns.truncate(keep_turns);
        copy.notes.retain(|n| n.at_message <= end);
        copy.state = match copy.turns.last().and_then(|t| t.outcome.clone()) {
            Some(TurnOutcome::Failed { error }) => State::Failed {
                error,
                final_pass: false,
            },
            _ => State::Idle,
        };
        copy.progress = Progress::default();
        copy.summary = copy.summary.filter(|s| s.covers.iter().all(|&i| i < end));
        Ok(copy)
    }

    /// The last assistant text of the current or last turn.
    pub fn last_answer(&self) -> Option<&str> {
        let start = self.turns.last()?.first_message;
        self.messages[start..].iter().rev().find_map(|m| match m {
            Message::Assistant { content, .. } if !content.is_empty() => Some(content.as_str()),
            _ => None,
        })
    }
}
