//! Which session a Chat Completions request continues.
//!
//! Clients send the whole conversation with every request, so the gateway recognises the
//! session a request belongs to by what it sends. A session is continued only when all of
//! these hold, and otherwise a new session starts from the history the client sent (never a
//! merge, never another requester's session):
//!
//! 1. the history was recorded, under the digest of the requester (token and end user), the
//!    model and the messages, as the end of one of this requester's responses;
//! 2. the session was created by the same token ([`SessionInfo::created_by`]);
//! 3. the session's recorded conversation still ends at that history ([`ends_at`]): it was not
//!    continued since by another request, and the client did not edit an earlier message;
//! 4. exactly one session passes 1–3. Two sessions of one requester that hold the same
//!    history (the same opening sent twice to a deterministic model) cannot be told apart, so
//!    neither is continued.
//!
//! A history may be recorded for several sessions; none replaces another.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use cordon_agent::{Conversation, Message};
use cordon_core::Requester;
use cordon_store::SessionInfo;

use super::request::{ChatRequest, Role, Said, history_digest};
use crate::host::Host;

/// How many histories the host remembers the sessions of; past that the oldest are
/// forgotten here (the store still has them).
const REMEMBERED_HISTORIES: usize = 10_000;

/// How many sessions of one history are remembered here; the store keeps a few more.
const SESSIONS_PER_HISTORY: usize = 4;

/// The sessions of histories clients sent, by digest: the recent ones in memory, in front of
/// the store's record, which outlives the host and is shared with other hosts on the store.
#[derive(Default)]
pub(crate) struct Histories {
    inner: Mutex<Remembered>,
}

/// The sessions of each remembered history, newest first, and the histories in the order
/// they were first remembered (the oldest is forgotten first).
#[derive(Default)]
struct Remembered {
    sessions: HashMap<String, Vec<String>>,
    order: VecDeque<String>,
}

impl Histories {
    fn get(&self, digest: &str) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.sessions.get(digest).cloned().unwrap_or_default()
    }

    /// The session `chat`, sent by `requester`, continues, if exactly one qualifies (see the
    /// module's doc).
    pub(super) async fn find(
        &self,
        host: &Host,
        requester: &Requester,
        chat: &ChatRequest,
    ) -> Option<String> {
        let digest = history_digest(requester, &chat.model, &chat.history);
        let mut candidates = self.get(&digest);
        match host.store().history_sessions(&digest).await {
            Ok(found) => {
                for id in found {
                    if !candidates.contains(&id) {
                        candidates.push(id);
                    }
                }
            }
            Err(e) => {
                tracing::warn!("the store could not say which session a history continues: {e}")
            }
        }
        let mut continued = None;
        for id in candidates {
            let Ok((info, conversation)) = host.store().load(&id).await else {
                continue;
            };
            if !created_by(&info, requester) || !ends_at(&conversation, &chat.history) {
                continue;
            }
            if continued.is_some() {
                tracing::info!(
                    "two sessions of one requester end at the history sent; a new session starts"
                );
                return None;
            }
            continued = Some(id);
        }
        continued
    }

    /// Remembers that `digest` may continue `session`, here at once and in the store by the
    /// task returned, which the response awaits before its last bytes: the client's next
    /// request, which will carry this history, may reach another host on the store, and
    /// comes after the response it is reading now.
    pub(super) fn record(
        &self,
        host: &Host,
        digest: String,
        session: String,
    ) -> tokio::task::JoinHandle<()> {
        let store = host.store().clone();
        let (d, s) = (digest.clone(), session.clone());
        self.remember(digest, session);
        tokio::spawn(async move {
            if let Err(e) = store.remember_history(&d, &s).await {
                tracing::warn!("the store did not record which session a history continues: {e}");
            }
        })
    }

    fn remember(&self, digest: String, session: String) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Remembered {
            sessions: map,
            order,
        } = &mut *inner;
        let sessions = map.entry(digest.clone()).or_default();
        if sessions.is_empty() {
            order.push_back(digest);
        }
        sessions.retain(|s| *s != session);
        sessions.insert(0, session);
        sessions.truncate(SESSIONS_PER_HISTORY);
        while order.len() > REMEMBERED_HISTORIES {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

/// Whether `info` was created by `requester`'s token: a session created at the terminal, or
/// by another token, is never continued through the gateway.
pub(super) fn created_by(info: &SessionInfo, requester: &Requester) -> bool {
    info.created_by.as_deref() == Some(requester.token.as_str())
}

/// Whether a session's recorded conversation ends where `history` (everything a client sent
/// before its new message or tool results) leaves off. Cordon's own tool calls and results
/// never reach the client, so the check compares what both sides hold: the user messages, in
/// order and exact; and the last thing the model said to the client — the answer text of an
/// idle session, or the client's own tool calls a turn waits on.
pub(super) fn ends_at(conv: &Conversation, history: &[Said]) -> bool {
    let ours = conv.messages.iter().filter_map(|m| match m {
        Message::User { content, parts } => Some((content.as_str(), parts.as_ref())),
        _ => None,
    });
    let theirs = history
        .iter()
        .filter(|s| s.role == Role::User)
        .map(|s| (s.text.as_str(), s.parts.as_ref()));
    if !ours.eq(theirs) {
        return false;
    }
    let Some(last) = history.last().filter(|s| s.role == Role::Assistant) else {
        return false;
    };
    let said = conv.messages.iter().rev().find_map(|m| match m {
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => Some((content, tool_calls)),
        _ => None,
    });
    if last.tool_calls.is_empty() {
        // An answer: the turn is over and the answer is the session's last word.
        conv.is_idle()
            && matches!(conv.messages.last(), Some(Message::Assistant { .. }))
            && said.is_some_and(|(content, calls)| calls.is_empty() && *content == last.text)
    } else {
        // The client's tool calls: the turn waits on exactly these calls of its last answer.
        !conv.is_idle()
            && conv
                .messages
                .iter()
                .rev()
                .find_map(|m| match m {
                    Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                        Some(tool_calls)
                    }
                    _ => None,
                })
                .is_some_and(|calls| {
                    last.tool_calls
                        .iter()
                        .all(|w| calls.iter().any(|c| c.id == w.id && c.name == w.name))
                })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::request::WireCall;
    use cordon_agent::ToolCall;

    fn said(role: Role, text: &str) -> Said {
        Said::new(role, text)
    }

    fn answered(pairs: &[(&str, &str)]) -> Conversation {
        let mut conv = Conversation::new();
        for (q, a) in pairs {
            conv.messages.push(Message::user(*q));
            conv.messages.push(Message::assistant(*a));
        }
        conv
    }

    #[test]
    fn sessions_of_one_history_are_kept_side_by_side_newest_first() {
        let histories = Histories::default();
        histories.remember("d".into(), "s-1".into());
        histories.remember("d".into(), "s-2".into());
        assert_eq!(histories.get("d"), ["s-2", "s-1"]);
        histories.remember("d".into(), "s-1".into());
        assert_eq!(histories.get("d"), ["s-1", "s-2"]);
        for i in 3..10 {
            histories.remember("d".into(), format!("s-{i}"));
        }
        assert_eq!(histories.get("d").len(), SESSIONS_PER_HISTORY);
        assert!(histories.get("e").is_empty());
    }

    #[test]
    fn a_session_continues_only_where_the_client_left_it() {
        let conv = answered(&[("hi", "hello"), ("and?", "more")]);
        let history = [
            said(Role::System, "be brief"),
            said(Role::User, "hi"),
            said(Role::Assistant, "hello"),
            said(Role::User, "and?"),
            said(Role::Assistant, "more"),
        ];
        assert!(ends_at(&conv, &history));
        // The session went on since (another request continued it).
        assert!(!ends_at(&conv, &history[..3]));
        // The client edited an earlier message.
        let mut edited = history.clone();
        edited[3] = said(Role::User, "but?");
        assert!(!ends_at(&conv, &edited));
        // The client holds another answer.
        let mut other = history.clone();
        other[4] = said(Role::Assistant, "less");
        assert!(!ends_at(&conv, &other));
        // A history that ends with the user's message was never an answer of this session.
        assert!(!ends_at(&conv, &history[..4]));
    }

    #[test]
    fn a_turn_waiting_on_client_tools_continues_with_their_results() {
        let mut conv = Conversation::new();
        conv.messages.push(Message::user("look it up"));
        conv.messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            }],
            partial: false,
        });
        conv.state = cordon_agent::machine::State::ExecutingTools { batch: vec![] };
        let asked = Said {
            tool_calls: vec![WireCall {
                id: "call_1".into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            }],
            ..said(Role::Assistant, "")
        };
        let history = [said(Role::User, "look it up"), asked.clone()];
        assert!(ends_at(&conv, &history));
        let mut elsewhere = asked;
        elsewhere.tool_calls[0].id = "call_2".into();
        assert!(!ends_at(
            &conv,
            &[said(Role::User, "look it up"), elsewhere]
        ));
        // Once the turn is over, those calls are answered already.
        conv.state = cordon_agent::machine::State::Idle;
        assert!(!ends_at(&conv, &history));
    }
}
