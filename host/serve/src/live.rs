//! A session while this host drives it: the events its clients follow, the approvals it waits
//! for, and the token that cancels its turn.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use cordon_agent::{
    AgentEvent, ApprovalAnswer, ApprovalRequest, CancellationToken, Frontend, GivenAnswer,
    async_trait,
};
use cordon_core::now_ms;
use serde::Serialize;
use tokio::sync::{broadcast, oneshot};

use crate::error::ApiError;

/// What a client following a session receives: the engine's events, and the host's own.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SessionEvent {
    /// An event of the turn (text, tool calls, approvals, results, the end).
    Agent(AgentEvent),
    /// Something about the host driving it.
    Host(HostEvent),
}

impl SessionEvent {
    /// Whether the turn's stream ends with this event.
    pub fn ends_turn(&self) -> bool {
        matches!(
            self,
            SessionEvent::Agent(AgentEvent::TurnFinished { .. })
                | SessionEvent::Host(HostEvent::TurnStopped { .. })
        )
    }
}

/// An event as every follower of its session gets it: the event, and its Server-Sent Events
/// frame, made once by the first follower that sends it and shared by the others, so a session
/// with hundreds of followers costs its turn one serialization per event, not one per follower.
#[derive(Debug)]
pub struct Published {
    /// The event.
    pub event: SessionEvent,
    frame: std::sync::OnceLock<Bytes>,
}

impl Published {
    fn new(event: SessionEvent) -> Self {
        Published {
            event,
            frame: std::sync::OnceLock::new(),
        }
    }

    /// The event as one SSE frame: `event:` its type, `data:` its JSON (one line: JSON text
    /// escapes its newlines), and the blank line that ends it.
    pub fn frame(&self) -> &Bytes {
        self.frame.get_or_init(|| {
            let value = serde_json::to_value(&self.event).unwrap_or_default();
            let kind = value["type"].as_str().unwrap_or("event");
            Bytes::from(format!("event: {kind}\ndata: {value}\n\n"))
        })
    }
}

/// What the host says about a session besides the engine's events.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostEvent {
    /// The turn stopped without ending: the host is shutting down, the store failed, or
    /// another host took the session over. It goes on from its last recorded state.
    TurnStopped {
        /// Why, and what happens next.
        reason: String,
    },
}

/// A question waiting for an answer from the API or the console.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingApproval {
    /// The session; `mcp:` for a call an MCP client made outside any session.
    pub session: String,
    /// The MCP client that made the call, as it named itself (untrusted text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The question (tool, arguments, grants, why it asks).
    #[serde(flatten)]
    pub request: ApprovalRequest,
    /// When it was asked (ms since the epoch).
    pub asked_ms: i64,
    /// When it is denied if nobody answers.
    pub expires_ms: i64,
    /// The token whose session it is, or that an MCP client's call came with (none: created
    /// at the terminal, or from `cordon mcp` on stdio): who may see it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The token whose turn caused the call: who needs `approve:own` to answer it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked_by: Option<String>,
}

impl From<cordon_store::ApprovalWaiting> for PendingApproval {
    /// A question an MCP client's call waits on in the store, as the approvals API lists it:
    /// session `mcp:`, answered by its id; the client's token (over HTTP) stands for the
    /// session's owner and for whose turn caused the call.
    fn from(w: cordon_store::ApprovalWaiting) -> Self {
        PendingApproval {
            session: cordon_store::WAITING_APPROVALS_SESSION.to_string(),
            client: Some(w.client),
            request: ApprovalRequest {
                call_id: w.id,
                ..w.request
            },
            asked_ms: w.asked_ms,
            expires_ms: w.expires_ms,
            owner: w.token.clone(),
            asked_by: w.token,
        }
    }
}

struct Waiting {
    approval: PendingApproval,
    reply: oneshot::Sender<GivenAnswer>,
}

#[derive(Default)]
struct LiveState {
    running: bool,
    cancel: Option<CancellationToken>,
    waiting: BTreeMap<String, Waiting>,
    /// Answers given in this turn, for telling a second answer it came too late.
    answered: BTreeMap<String, String>,
}

/// A session this host drives or was asked about.
pub struct LiveSession {
    /// The session.
    pub id: String,
    events: broadcast::Sender<Arc<Published>>,
    state: Mutex<LiveState>,
}

/// How many events a slow follower may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

impl LiveSession {
    /// A session with nothing running.
    pub fn new(id: &str) -> Arc<Self> {
        Arc::new(Self {
            id: id.to_string(),
            events: broadcast::channel(EVENT_BUFFER).0,
            state: Mutex::new(LiveState::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, LiveState> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows the session's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.events.subscribe()
    }

    /// How many follow its events.
    pub fn followers(&self) -> usize {
        self.events.receiver_count()
    }

    /// Tells every follower.
    pub fn publish(&self, event: SessionEvent) {
        let _ = self.events.send(Arc::new(Published::new(event)));
    }

    /// Marks a turn as running, unless one already is.
    pub fn claim(&self) -> Result<(), ApiError> {
        let mut state = self.state();
        if state.running {
            return Err(ApiError::conflict(format!(
                "a turn is running in session `{}`; wait for it to finish, or cancel it \
                 (POST /api/v1/sessions/{}/cancel)",
                self.id, self.id
            )));
        }
        state.running = true;
        state.answered.clear();
        Ok(())
    }

    /// Sets the token that cancels the running turn.
    pub fn set_cancel(&self, token: CancellationToken) {
        self.state().cancel = Some(token);
    }

    /// The turn ended or stopped: nothing runs, nothing waits.
    pub fn release(&self) {
        self.end_turn(Vec::new());
    }

    /// Tells every follower how the turn ended (`last`, the events that end it) and marks it
    /// over, in one step: a client that saw the end may start the next turn at once, and no
    /// follower of a next turn can receive this one's end.
    pub fn end_turn(&self, last: Vec<SessionEvent>) {
        let mut state = self.state();
        for event in last {
            self.publish(event);
        }
        state.running = false;
        state.cancel = None;
        state.waiting.clear();
    }

    /// Whether a turn runs here now.
    pub fn is_running(&self) -> bool {
        self.state().running
    }

    /// Cancels the running turn.
    pub fn cancel(&self) -> Result<(), ApiError> {
        match &self.state().cancel {
            Some(token) => {
                token.cancel();
                Ok(())
            }
            None => Err(ApiError::conflict(format!(
                "no turn is running in session `{}` on this host",
                self.id
            ))),
        }
    }

    /// The questions waiting for an answer.
    pub fn pending(&self) -> Vec<PendingApproval> {
        self.state()
            .waiting
            .values()
            .map(|w| w.approval.clone())
            .collect()
    }

    /// Answers a waiting question.
    pub fn answer(&self, call_id: &str, answer: GivenAnswer) -> Result<(), ApiError> {
        let mut state = self.state();
        if let Some(waiting) = state.waiting.get(call_id)
            && !waiting.approval.request.is_grant_request()
            && matches!(
                answer.answer,
                ApprovalAnswer::For { .. } | ApprovalAnswer::Forever
            )
        {
            return Err(ApiError::bad_request(format!(
                "`{}` answers a grant request, and call `{call_id}` waits for approval to run; \
                 answer yes, no, always or never",
                answer.answer.as_str()
            )));
        }
        let Some(waiting) = state.waiting.remove(call_id) else {
            if let Some(earlier) = state.answered.get(call_id) {
                return Err(ApiError::conflict(format!(
                    "call `{call_id}` of session `{}` was already answered ({earlier})",
                    self.id
                )));
            }
            let ids: Vec<&str> = state.waiting.keys().map(String::as_str).collect();
            let now = if ids.is_empty() {
                "none is".to_string()
            } else {
                format!("{} are", ids.join(", "))
            };
            return Err(ApiError::not_found(format!(
                "session `{}` has no call `{call_id}` waiting for an answer; {now} waiting",
                self.id
            )));
        };
        let record = format!("{} by {}", answer.answer.as_str(), answer.by);
        let waited_ms = answer.at_ms - waiting.approval.asked_ms;
        if waiting.reply.send(answer).is_err() {
            return Err(ApiError::conflict(format!(
                "the turn of session `{}` stopped before the answer arrived",
                self.id
            )));
        }
        state.answered.insert(call_id.to_string(), record);
        cordon_core::metrics::approval_answered(waited_ms);
        Ok(())
    }

    fn wait_for(&self, approval: PendingApproval) -> oneshot::Receiver<GivenAnswer> {
        let (reply, rx) = oneshot::channel();
        let id = approval.request.call_id.clone();
        self.state().waiting.insert(id, Waiting { approval, reply });
        rx
    }

    fn stop_waiting(&self, call_id: &str) {
        self.state().waiting.remove(call_id);
    }
}

/// The engine's view of clients: events go to the session's followers, questions wait for
/// the approvals API or the console, up to a timeout. The event that ends the turn is held
/// back until the host is done with the session (see [`LiveSession::end_turn`]).
pub struct ServeFrontend {
    /// The session.
    pub live: Arc<LiveSession>,
    /// How long a question waits before the call is denied.
    pub approval_timeout: Duration,
    /// The turn's end, once the engine announced it.
    pub end: Option<AgentEvent>,
    /// The token that created the session.
    pub owner: Option<String>,
    /// The token that asked for the turn.
    pub asked_by: Option<String>,
}

/// Removes a question from the waiting list however its wait ends (answered, timed out, the
/// turn dropped on shutdown).
struct WaitGuard<'a> {
    live: &'a LiveSession,
    call_id: String,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.live.stop_waiting(&self.call_id);
    }
}

#[async_trait]
impl Frontend for ServeFrontend {
    fn event(&mut self, event: &AgentEvent) {
        if matches!(event, AgentEvent::TurnFinished { .. }) {
            self.end = Some(event.clone());
        } else {
            self.live.publish(SessionEvent::Agent(event.clone()));
        }
    }

    async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer {
        let asked_ms = now_ms();
        let rx = self.live.wait_for(PendingApproval {
            session: self.live.id.clone(),
            client: None,
            request: request.clone(),
            asked_ms,
            expires_ms: asked_ms.saturating_add(
                i64::try_from(self.approval_timeout.as_millis()).unwrap_or(i64::MAX),
            ),
            owner: self.owner.clone(),
            asked_by: self.asked_by.clone(),
        });
        let _guard = WaitGuard {
            live: &self.live,
            call_id: request.call_id.clone(),
        };
        let waited = humantime::format_duration(self.approval_timeout);
        match tokio::time::timeout(self.approval_timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => GivenAnswer::new(
                ApprovalAnswer::Refused {
                    reason: "the host stopped waiting for an answer".to_string(),
                },
                "nobody (the host stopped waiting)",
            ),
            Err(_) => GivenAnswer::new(
                ApprovalAnswer::Refused {
                    reason: format!("nobody answered within {waited}, so it was denied"),
                },
                format!("nobody (no answer within {waited})"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(call_id: &str) -> ApprovalRequest {
        ApprovalRequest {
            call_id: call_id.into(),
            tool: "fs".into(),
            plugin: "probe".into(),
            arguments: serde_json::json!({}),
            grants: vec![],
            reason: "why".into(),
            rule_of_two: false,
            requested_grants: vec![],
        }
    }

    #[tokio::test]
    async fn a_question_is_answered_once_and_a_second_answer_says_by_whom_the_first_was() {
        let live = LiveSession::new("s");
        live.claim().unwrap();
        let mut frontend = ServeFrontend {
            live: live.clone(),
            approval_timeout: Duration::from_secs(30),
            end: None,
            owner: None,
            asked_by: None,
        };
        let asking = tokio::spawn(async move { frontend.approve(&request("c1")).await });
        while live.pending().is_empty() {
            tokio::task::yield_now().await;
        }
        let e = live
            .answer("c9", GivenAnswer::new(ApprovalAnswer::Yes, "x"))
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 404);
        assert!(e.message.contains("c1 are waiting"), "{}", e.message);
        live.answer(
            "c1",
            GivenAnswer::new(ApprovalAnswer::Always, "API token `ops`"),
        )
        .unwrap();
        let given = asking.await.unwrap();
        assert_eq!(given.answer, ApprovalAnswer::Always);
        assert_eq!(given.by, "API token `ops`");
        assert!(live.pending().is_empty());
        let e = live
            .answer("c1", GivenAnswer::new(ApprovalAnswer::No, "y"))
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 409);
        assert!(
            e.message
                .contains("already answered (always by API token `ops`)"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn an_unanswered_question_is_refused_and_leaves_no_trace() {
        let live = LiveSession::new("s");
        let mut frontend = ServeFrontend {
            live: live.clone(),
            approval_timeout: Duration::from_millis(20),
            end: None,
            owner: None,
            asked_by: None,
        };
        let given = frontend.approve(&request("c1")).await;
        assert!(matches!(given.answer, ApprovalAnswer::Refused { .. }));
        assert_eq!(given.by, "nobody (no answer within 20ms)");
        assert!(live.pending().is_empty());
    }

    #[test]
    fn followers_share_one_frame_of_each_event() {
        let live = LiveSession::new("s");
        let mut one = live.subscribe();
        let mut two = live.subscribe();
        live.publish(SessionEvent::Host(HostEvent::TurnStopped {
            reason: "stopping\nnow".into(),
        }));
        let (a, b) = (one.try_recv().unwrap(), two.try_recv().unwrap());
        assert_eq!(
            &a.frame()[..],
            b"event: turn_stopped\ndata: {\"type\":\"turn_stopped\",\"reason\":\"stopping\\nnow\"}\n\n"
        );
        // The second follower gets the very same bytes, not a second copy.
        assert_eq!(a.frame().as_ptr(), b.frame().as_ptr());
    }

    #[test]
    fn one_turn_at_a_time() {
        let live = LiveSession::new("s");
        live.claim().unwrap();
        let e = live.claim().unwrap_err();
        assert_eq!(e.status.as_u16(), 409);
        assert!(
            e.message.contains("a turn is running in session `s`"),
            "{}",
            e.message
        );
        assert_eq!(live.cancel().unwrap_err().status.as_u16(), 409);
        live.set_cancel(CancellationToken::new());
        live.cancel().unwrap();
        live.release();
        live.claim().unwrap();
    }
}
