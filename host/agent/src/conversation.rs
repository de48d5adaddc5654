//! A conversation: its history, its turns, where its state machine stands, and what the user
//! decided along the way. Everything here is plain data so it can be saved as JSON at any
//! moment and resumed, continued or forked later. The state machine ([`crate::machine`]) acts
//! on a conversation; nothing here depends on it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use cordon_core::{Requester, SessionLabels};

use crate::approval::{Standing, StandingAnswer};
use crate::grant_requests::{GrantRequest, SessionGrants};
use crate::messages::{Message, ModelResponse, ToolCall, Usage};
use crate::parameters::TurnParameters;

/// The save format version; bumped when the layout changes incompatibly. 2: a recorded tail
/// may hold only the turns and notes that changed (see [`ConversationTail`]), which a reader of
/// format 1 would take for the whole list.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest format this version reads (format 1 is format 2 with every tail whole).
const OLDEST_FORMAT: u32 = 1;

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
        /// The model server's HTTP status, when it answered the last attempt with an error:
        /// what a gateway reports to its own client (a 429 as a 429).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_status: Option<u16>,
        /// The model server's `Retry-After` with that error, in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
}

/// One user message and everything the engine did for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// Index in `messages` of the user message that started the turn.
    pub first_message: usize,
    /// How it ended (`None` while it runs).
    pub outcome: Option<TurnOutcome>,
    /// Who asked for it through a served door (`None`: a user at the terminal, or a turn
    /// recorded before requesters were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Requester>,
    /// What its client set for its model requests (empty: the configuration's settings).
    #[serde(default, skip_serializing_if = "TurnParameters::is_empty")]
    pub parameters: TurnParameters,
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
    /// Grant requests made in this turn (see [`crate::grant_requests`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grant_requests: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A cached summary of pruned messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The message indices it covers.
    pub covers: Vec<usize>,
    /// The summary text.
    pub text: String,
}

/// Where a conversation stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    /// No turn is running; the last one (if any) finished.
    Idle,
    /// A request to the model is in flight (streaming). `final_pass`: the last request of a
    /// turn, without tools, asking for the final answer.
    AwaitingModel {
        /// Whether this is the final-answer pass.
        final_pass: bool,
    },
    /// A complete answer arrived and is about to be acted on.
    ProcessingModelResponse {
        /// The answer.
        response: ModelResponse,
        /// Whether it answers the final-answer pass.
        final_pass: bool,
    },
    /// Some tool calls wait for the user's decision.
    AwaitingApproval {
        /// The calls of the answer, in order.
        batch: Vec<PlannedCall>,
    },
    /// Approved tool calls are running.
    ExecutingTools {
        /// The calls of the answer, in order.
        batch: Vec<PlannedCall>,
    },
    /// Some calls failed (invalid, refused, errored); their errors were returned to the model,
    /// which gets another request to correct itself.
    HandlingToolError {
        /// One line per failed call.
        errors: Vec<String>,
    },
    /// The request failed in a way that may pass; waiting before retry number `retry`.
    TransientFailure {
        /// The retry about to happen (1-based).
        retry: u32,
        /// Why the last attempt failed.
        cause: String,
        /// Whether the failed request was the final-answer pass.
        final_pass: bool,
    },
    /// The turn failed. A new message or `Retry` continues.
    Failed {
        /// The error shown to the user.
        error: String,
        /// Whether the failed request was the final-answer pass (for `Retry`).
        final_pass: bool,
    },
}

impl State {
    /// The state's tag as saved (`idle`, `awaiting_model`, `awaiting_approval`, …): what a
    /// store lists and filters by.
    pub fn key(&self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::AwaitingModel { .. } => "awaiting_model",
            State::ProcessingModelResponse { .. } => "processing_model_response",
            State::AwaitingApproval { .. } => "awaiting_approval",
            State::ExecutingTools { .. } => "executing_tools",
            State::HandlingToolError { .. } => "handling_tool_error",
            State::TransientFailure { .. } => "transient_failure",
            State::Failed { .. } => "failed",
        }
    }

    /// A short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::AwaitingModel { .. } => "waiting for the model",
            State::ProcessingModelResponse { .. } => "processing the model's answer",
            State::AwaitingApproval { .. } => "waiting for approval",
            State::ExecutingTools { .. } => "running tools",
            State::HandlingToolError { .. } => "returning tool errors to the model",
            State::TransientFailure { .. } => "waiting to retry",
            State::Failed { .. } => "failed",
        }
    }
}

/// Where one tool call of an answer stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallStatus {
    /// Rejected before running (unknown tool, bad arguments); the message tells the model why.
    Invalid {
        /// The error for the model.
        message: String,
    },
    /// Not run because of policy or the user's answer.
    Denied {
        /// The reason for the model.
        message: String,
    },
    /// Waiting for the user.
    Pending,
    /// To run; in a running batch, started: a call is marked so in the transition that gives
    /// it a place, recorded before it runs.
    Approved,
    /// Approved, in a running batch, waiting for a place (see `max_parallel_tools`): it has
    /// not started.
    Queued,
    /// Ran (successfully or not).
    Done {
        /// The text returned to the model.
        content: String,
        /// Whether the tool failed.
        is_error: bool,
        /// When the result was kept apart from the conversation: its size (`content` is its
        /// preview).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<crate::messages::KeptResult>,
    },
}

impl CallStatus {
    /// Whether the call is to run or running: approved, started or queued.
    pub fn is_to_run(&self) -> bool {
        matches!(self, CallStatus::Approved | CallStatus::Queued)
    }
}

/// Who decided whether a call runs, and how: what the audit log records for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallApproval {
    /// `auto` or `deny` (policy), `yes`, `no`, `always`, `never`, `refused` (an answer), or
    /// `invalid` (refused before any decision).
    pub decision: String,
    /// Who or what decided: `policy: <reason>`, or who answered.
    pub by: String,
}

/// One tool call of an answer with its parsed arguments and status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedCall {
    /// Cordon's identity for the call (`c1`, `c2`, …, unique in the conversation): approvals,
    /// runs and results address the call by it, never by the model's id, which may repeat.
    /// Empty only in conversations saved before calls had one; loading gives them one.
    #[serde(default)]
    pub id: String,
    /// The call as the model made it, with its wire id made unique within the answer.
    pub call: ToolCall,
    /// The arguments, when they parsed.
    pub arguments: Option<Value>,
    /// Where it stands.
    pub status: CallStatus,
    /// Who decided whether it runs; `None` while it waits for an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<CallApproval>,
    /// What the per-call policy said of it, when a `[policy]` is in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Box<PolicyNote>>,
    /// The labels the conversation held when the call was decided (its audit record says
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// A grant request held on the call: the sandbox refused it something a grant would allow,
    /// and a person is asked (the call is `Pending` meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_request: Option<Box<GrantRequest>>,
    /// Grants a person gave this call through a grant request: it runs again with them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub granted: Vec<String>,
}

/// What the per-call policy said of a call: kept with the call so its audit record names the
/// rule and the exact policy text in force, and so counters count it once it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyNote {
    /// The digest of the policy in force (`sha256:…`).
    pub digest: String,
    /// The rule that decided, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<cordon_policy::RuleRef>,
    /// The ids of every rule found to apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    /// Whether the call was counted when it was decided: it runs unasked, and the counts
    /// reserved for it before the decision stand (see the driver's `settle_counts`). A call
    /// put to a person is counted when it runs instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted: bool,
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
    /// The user's `always`/`never` answers, by tool identity (`plugin.tool`), each with who
    /// gave it, when, for which call and for whose turns.
    #[serde(deserialize_with = "crate::approval::standing_answers")]
    pub session_approvals: BTreeMap<String, StandingAnswer>,
    /// Tools (`plugin.tool`) a person approved a call of in this conversation (`yes` or
    /// `always`), each with the turn (0-based) of the first such answer: what
    /// approval-before-action rules (`approved = "…"`) read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approved_tools: BTreeMap<String, usize>,
    /// What the model has been given results of: private data, untrusted content (see
    /// [`cordon_core::labels`]). Only ever added to.
    #[serde(default, skip_serializing_if = "SessionLabels::is_empty")]
    pub labels: SessionLabels,
    /// Grants given for this conversation through grant requests, and those refused for good.
    #[serde(default, skip_serializing_if = "SessionGrants::is_empty")]
    pub grants: SessionGrants,
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
    /// What `[agent] router_model` picked for the last turn it was asked about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed: Option<crate::selection::Routed>,
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
            approved_tools: Default::default(),
            labels: SessionLabels::default(),
            grants: SessionGrants::default(),
            next_call: 0,
            notes: Vec::new(),
            usage: Usage::default(),
            summary: None,
            routed: None,
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
        if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&found) {
            return Err(ConversationError::Version { found });
        }
        let mut conv: Self =
            serde_json::from_value(v).map_err(|e| ConversationError::Parse(e.to_string()))?;
        conv.format = FORMAT_VERSION;
        identify_saved_calls(&mut conv);
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
    /// do not. The session labels carry over whole: they are only ever added to, and a fork
    /// is not a way to shed them.
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
            Some(TurnOutcome::Failed { error, .. }) => State::Failed {
                error,
                final_pass: false,
            },
            _ => State::Idle,
        };
        copy.progress = Progress::default();
        copy.summary = copy.summary.filter(|s| s.covers.iter().all(|&i| i < end));
        // An `always` or `never` belongs to the turns up to where it was given: one given in
        // a turn the copy leaves out never happened there.
        copy.session_approvals.retain(|_, a| a.turn < keep_turns);
        copy.approved_tools.retain(|_, turn| *turn < keep_turns);
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

/// Everything of a conversation but its messages, borrowed: what a store records with each
/// transition beside the messages appended since the last one, so recording a transition costs
/// what changed rather than the whole history. Turns and notes are recorded from where they
/// may have changed on: a turn changes only while it is the last, and notes are only added
/// (a fork, which drops some, is a new conversation recorded whole). [`Conversation::replay`]
/// puts the records back together.
#[derive(Debug, Serialize)]
pub struct ConversationTail<'a> {
    format: u32,
    /// The index of the first turn `turns` holds; the earlier ones are as recorded before.
    #[serde(skip_serializing_if = "is_zero_usize")]
    turns_from: usize,
    turns: &'a [Turn],
    state: &'a State,
    progress: &'a Progress,
    session_approvals: &'a BTreeMap<String, StandingAnswer>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    approved_tools: &'a BTreeMap<String, usize>,
    #[serde(skip_serializing_if = "SessionLabels::is_empty")]
    labels: &'a SessionLabels,
    #[serde(skip_serializing_if = "SessionGrants::is_empty")]
    grants: &'a SessionGrants,
    next_call: u64,
    /// The index of the first note `notes` holds; the earlier ones are as recorded before.
    #[serde(skip_serializing_if = "is_zero_usize")]
    notes_from: usize,
    notes: &'a [Note],
    usage: &'a Usage,
    summary: &'a Option<Summary>,
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

impl Conversation {
    /// The conversation without its messages (see [`ConversationTail`]).
    pub fn tail(&self) -> ConversationTail<'_> {
        self.tail_since(0, 0)
    }

    /// [`Conversation::tail`] with only the turns from `turns_from` on and the notes from
    /// `notes_from` on: what changed since a record that had `turns_from + 1` turns and
    /// `notes_from` notes.
    pub fn tail_since(&self, turns_from: usize, notes_from: usize) -> ConversationTail<'_> {
        let turns_from = turns_from.min(self.turns.len());
        let notes_from = notes_from.min(self.notes.len());
        ConversationTail {
            format: FORMAT_VERSION,
            turns_from,
            turns: &self.turns[turns_from..],
            notes_from,
            state: &self.state,
            progress: &self.progress,
            session_approvals: &self.session_approvals,
            approved_tools: &self.approved_tools,
            labels: &self.labels,
            grants: &self.grants,
            next_call: self.next_call,
            notes: &self.notes[notes_from..],
            usage: &self.usage,
            summary: &self.summary,
        }
    }

    /// The standing answers as they apply to the latest turn's requester.
    pub fn standing(&self) -> Standing<'_> {
        Standing {
            answers: &self.session_approvals,
            requester: self.requester(),
            labels: &self.labels,
        }
    }

    /// Who asked for the latest turn through a served door.
    pub fn requester(&self) -> Option<&Requester> {
        self.turns.last().and_then(|t| t.requested_by.as_ref())
    }

    /// Puts a conversation back together from a recorded tail (JSON of a whole
    /// [`ConversationTail`], [`Conversation::tail`]) and its messages.
    pub fn from_tail(tail: &str, messages: Vec<Message>) -> Result<Self, ConversationError> {
        let value: Value =
            serde_json::from_str(tail).map_err(|e| ConversationError::Parse(e.to_string()))?;
        Self::from_tail_value(value, messages)
    }

    /// Puts a conversation back together from `base` (a snapshot) and the records of the
    /// transitions after it, oldest first: for each, the index of the first message it holds,
    /// those messages (JSON), and its tail (JSON of a [`ConversationTail`], whole or since the
    /// record before). The last tail is the conversation's state; messages, turns and notes
    /// are folded through all of them.
    pub fn replay<'r>(
        base: Conversation,
        records: impl IntoIterator<Item = (usize, &'r str, &'r str)>,
    ) -> Result<Self, ConversationError> {
        let parse = |e: serde_json::Error| ConversationError::Parse(e.to_string());
        let mut base = base;
        let mut messages = std::mem::take(&mut base.messages);
        let mut turns = std::mem::take(&mut base.turns);
        let mut notes = std::mem::take(&mut base.notes);
        let mut last: Option<Value> = None;
        for (first, added, tail) in records {
            let added: Vec<Message> = serde_json::from_str(added).map_err(parse)?;
            let gap = |what: &str, from: usize, had: usize| {
                ConversationError::Parse(format!(
                    "a record continues from {what} {from}, and the records before it hold {had}"
                ))
            };
            if first > messages.len() {
                return Err(gap("message", first, messages.len()));
            }
            messages.truncate(first);
            messages.extend(added);
            let mut tail: Value = serde_json::from_str(tail).map_err(parse)?;
            let Some(object) = tail.as_object_mut() else {
                return Err(ConversationError::Parse(
                    "a recorded conversation is not a JSON object".to_string(),
                ));
            };
            let from = |o: &mut serde_json::Map<String, Value>, key: &str| {
                o.remove(key).and_then(|v| v.as_u64()).unwrap_or(0) as usize
            };
            let turns_from = from(object, "turns_from");
            let recorded: Vec<Turn> = match object.remove("turns") {
                Some(v) => serde_json::from_value(v).map_err(parse)?,
                None => Vec::new(),
            };
            if turns_from > turns.len() {
                return Err(gap("turn", turns_from, turns.len()));
            }
            turns.truncate(turns_from);
            turns.extend(recorded);
            let notes_from = from(object, "notes_from");
            let recorded: Vec<Note> = match object.remove("notes") {
                Some(v) => serde_json::from_value(v).map_err(parse)?,
                None => Vec::new(),
            };
            if notes_from > notes.len() {
                return Err(gap("note", notes_from, notes.len()));
            }
            notes.truncate(notes_from);
            notes.extend(recorded);
            last = Some(tail);
        }
        let Some(mut tail) = last else {
            base.messages = messages;
            base.turns = turns;
            base.notes = notes;
            return Ok(base);
        };
        tail["turns"] = serde_json::to_value(turns).map_err(parse)?;
        tail["notes"] = serde_json::to_value(notes).map_err(parse)?;
        Self::from_tail_value(tail, messages)
    }

    fn from_tail_value(
        mut value: Value,
        messages: Vec<Message>,
    ) -> Result<Self, ConversationError> {
        let Some(object) = value.as_object_mut() else {
            return Err(ConversationError::Parse(
                "a recorded conversation is not a JSON object".to_string(),
            ));
        };
        let messages =
            serde_json::to_value(messages).map_err(|e| ConversationError::Parse(e.to_string()))?;
        object.insert("messages".to_string(), messages);
        let found = object.get("format").and_then(Value::as_u64).unwrap_or(0) as u32;
        if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&found) {
            return Err(ConversationError::Version { found });
        }
        object.insert("format".to_string(), Value::from(FORMAT_VERSION));
        serde_json::from_value(value).map_err(|e| ConversationError::Parse(e.to_string()))
    }
}

/// Gives each call of an answer Cordon's id (counting on from `next_call`) and makes the
/// answer's wire ids unique: a call whose id is missing or repeats an earlier call's gets a
/// fresh one (`cordon_c7`) that no call of the answer uses. An id the model sent once is kept,
/// since some servers accept only ids in their own format.
pub(crate) fn identify_calls(next_call: &mut u64, calls: Vec<ToolCall>) -> Vec<(String, ToolCall)> {
    let sent: BTreeSet<String> = calls.iter().map(|c| c.id.clone()).collect();
    let mut used = BTreeSet::new();
    calls
        .into_iter()
        .map(|mut call| {
            *next_call += 1;
            let id = format!("c{next_call}");
            if call.id.is_empty() || used.contains(&call.id) {
                let mut wire = format!("cordon_{id}");
                let mut n = 1;
                while sent.contains(&wire) || used.contains(&wire) {
                    n += 1;
                    wire = format!("cordon_{id}_{n}");
                }
                call.id = wire;
            }
            used.insert(call.id.clone());
            (id, call)
        })
        .collect()
}

/// Conversations saved before calls had Cordon's ids may hold a pending batch without them:
/// gives those calls ids, and makes their wire ids unique in the batch and in the stored
/// assistant message, as a new answer gets. Run when a conversation is loaded.
fn identify_saved_calls(conv: &mut Conversation) {
    let (State::AwaitingApproval { batch } | State::ExecutingTools { batch }) = &mut conv.state
    else {
        return;
    };
    if batch.iter().all(|p| !p.id.is_empty()) {
        return;
    }
    let calls = batch.iter().map(|p| p.call.clone()).collect();
    let identified = identify_calls(&mut conv.next_call, calls);
    let stored = conv.messages.iter_mut().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls),
        _ => None,
    });
    let same_calls = stored.as_ref().is_some_and(|stored| {
        stored.len() == batch.len()
            && stored
                .iter()
                .zip(batch.iter())
                .all(|(s, p)| s.name == p.call.name && s.arguments == p.call.arguments)
    });
    if let Some(stored) = stored.filter(|_| same_calls) {
        for (s, (_, call)) in stored.iter_mut().zip(&identified) {
            s.id = call.id.clone();
        }
    }
    for (p, (id, call)) in batch.iter_mut().zip(identified) {
        p.id = id;
        p.call = call;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conversation with every field away from its default.
    fn populated() -> Conversation {
        let mut conv = Conversation::new();
        conv.messages.push(Message::user("hi"));
        conv.turns.push(Turn {
            first_message: 0,
            outcome: Some(TurnOutcome::Answered),
            requested_by: Some(Requester::token("ops")),
            parameters: TurnParameters {
                sent: [("temperature".to_string(), serde_json::json!(0.5))]
                    .into_iter()
                    .collect(),
                tool_choice: Some(crate::parameters::ToolChoice::Required),
            },
        });
        conv.state = State::Failed {
            error: "x".into(),
            final_pass: true,
        };
        conv.progress.iterations = 2;
        conv.session_approvals.insert(
            "p.t".into(),
            StandingAnswer {
                policy: crate::approval::Policy::Deny,
                by: "API token `ops`".into(),
                at_ms: 1_700_000_000_000,
                call_id: "c3".into(),
                turn: 0,
                requester: Some(Requester::token("ops")),
            },
        );
        conv.next_call = 7;
        let read: cordon_core::Grants =
            ["fs:/docs:/docs:ro".parse().unwrap()].into_iter().collect();
        conv.labels
            .saw("files.read_file", &cordon_core::Exposure::of(&read));
        conv.notes.push(Note {
            at_message: 1,
            text: "n".into(),
        });
        conv.usage.prompt_tokens = 5;
        conv.summary = Some(Summary {
            covers: vec![0],
            text: "s".into(),
        });
        conv
    }

    #[test]
    fn a_tail_and_its_messages_make_the_conversation_again() {
        let conv = populated();
        let tail = serde_json::to_string(&conv.tail()).unwrap();
        let back = Conversation::from_tail(&tail, conv.messages.clone()).unwrap();
        assert_eq!(back, conv);
    }

    #[test]
    fn a_fork_keeps_only_the_standing_answers_given_in_its_turns() {
        let mut conv = Conversation::new();
        for (i, tool) in ["files.read_file", "sql.sql_execute"].iter().enumerate() {
            conv.messages.push(Message::user("q"));
            conv.messages.push(Message::assistant("a"));
            conv.turns.push(Turn {
                first_message: i * 2,
                outcome: Some(TurnOutcome::Answered),
                requested_by: None,
                parameters: TurnParameters::default(),
            });
            let mut answer = StandingAnswer::unattributed(crate::approval::Policy::Auto);
            answer.turn = i;
            conv.session_approvals.insert(tool.to_string(), answer);
        }
        conv.labels.saw(
            "web.fetch",
            &cordon_core::Exposure {
                untrusted: vec!["net:https://example.com".into()],
                ..Default::default()
            },
        );
        let fork = conv.fork(1).unwrap();
        let kept: Vec<&String> = fork.session_approvals.keys().collect();
        assert_eq!(kept, ["files.read_file"]);
        // What the session saw is never taken back, not even by forking before it.
        assert_eq!(fork.labels, conv.labels);
        assert_eq!(conv.fork(2).unwrap().session_approvals.len(), 2);
    }

    #[test]
    fn the_tail_holds_every_field_but_the_messages() {
        // A field added to Conversation but not to ConversationTail would be lost by a store.
        let conv = populated();
        let mut whole = serde_json::to_value(&conv).unwrap();
        whole.as_object_mut().unwrap().remove("messages");
        assert_eq!(serde_json::to_value(conv.tail()).unwrap(), whole);
    }
}
