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
    pub(crate) fn new(event: SessionEvent) -> Self {
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
    /// Its id in the store, where it waits for whichever host an answer reaches (none: kept
    /// in this host's memory alone, because the store could not be reached when it was
    /// asked).
    #[serde(skip)]
    pub question: Option<String>,
}

impl From<cordon_store::ApprovalWaiting> for PendingApproval {
    /// A question waiting in the store, as the approvals API lists it. A session's is
    /// answered by its session and call, whichever host drives the turn. An MCP client's
    /// call's is listed under session `mcp:` and answered by its id; the client's token
    /// (over HTTP) stands for the session's owner and for whose turn caused the call.
    fn from(w: cordon_store::ApprovalWaiting) -> Self {
        match w.session {
            Some(call) => PendingApproval {
                session: call.session,
                client: None,
                request: ApprovalRequest {
                    call_id: call.call_id,
                    ..w.request
                },
                asked_ms: w.asked_ms,
                expires_ms: w.expires_ms,
                owner: call.owner,
                asked_by: w.token,
                question: Some(w.id),
            },
            None => PendingApproval {
                session: cordon_store::WAITING_APPROVALS_SESSION.to_string(),
                client: Some(w.client),
                request: ApprovalRequest {
                    call_id: w.id.clone(),
                    ..w.request
                },
                asked_ms: w.asked_ms,
                expires_ms: w.expires_ms,
                owner: w.token.clone(),
                asked_by: w.token,
                question: Some(w.id),
            },
        }
    }
}

/// Refuses an answer that does not fit the question: `for …` and `forever` answer grant
/// requests only.
pub fn fits_question(
    request: &ApprovalRequest,
    answer: &ApprovalAnswer,
    call_id: &str,
) -> Result<(), ApiError> {
    if !request.is_grant_request()
        && matches!(answer, ApprovalAnswer::For { .. } | ApprovalAnswer::Forever)
    {
        return Err(ApiError::bad_request(format!(
            "`{}` answers a grant request, and call `{call_id}` waits for approval to run; \
             answer yes, no, always or never",
            answer.as_str()
        )));
    }
    Ok(())
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

    /// Whether the running turn was cancelled (by a person), not stopped by its host.
    fn turn_cancelled(&self) -> bool {
        self.state()
            .cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
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
        if let Some(waiting) = state.waiting.get(call_id) {
            fits_question(&waiting.approval.request, &answer.answer, call_id)?;
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
        if waiting.reply.send(answer).is_err() {
            return Err(ApiError::conflict(format!(
                "the turn of session `{}` stopped before the answer arrived",
                self.id
            )));
        }
        state.answered.insert(call_id.to_string(), record);
        Ok(())
    }

    /// Hands an answer the store took to the turn waiting here, if it still waits (it may
    /// have read the answer from the store first).
    pub fn deliver(&self, call_id: &str, answer: GivenAnswer) {
        let mut state = self.state();
        if let Some(waiting) = state.waiting.remove(call_id) {
            let record = format!("{} by {}", answer.answer.as_str(), answer.by);
            let _ = waiting.reply.send(answer);
            state.answered.insert(call_id.to_string(), record);
        }
    }

    fn wait_for(&self, approval: PendingApproval) -> oneshot::Receiver<GivenAnswer> {
        let (reply, rx) = oneshot::channel();
        let id = approval.request.call_id.clone();
        self.state().waiting.insert(id, Waiting { approval, reply });
        rx
    }

    /// The question about `call_id` waits in the store too, under `id`.
    fn set_question(&self, call_id: &str, id: &str) {
        if let Some(waiting) = self.state().waiting.get_mut(call_id) {
            waiting.approval.question = Some(id.to_string());
        }
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
    /// `approval_needed`, held back until the question can be answered through any host
    /// (see [`Frontend::approve`] below).
    pub asking: Option<AgentEvent>,
    /// The token that created the session.
    pub owner: Option<String>,
    /// The token that asked for the turn.
    pub asked_by: Option<String>,
    /// Where questions wait for an answer given through any host (none: in memory alone).
    pub store: Option<cordon_store::Store>,
}

/// Removes a question from the waiting list however its wait ends (answered, timed out, the
/// turn dropped on shutdown or cancelled). A question still open in the store is withdrawn
/// when the turn was cancelled, so no host lists it any more; when the host stopped the turn
/// (shutting down, the session taken over), it stays: the turn taken up again asks about the
/// call again, and takes an answer given meanwhile.
struct WaitGuard<'a> {
    live: &'a LiveSession,
    call_id: String,
    open_in: Option<(cordon_store::Store, String)>,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.live.stop_waiting(&self.call_id);
        if let Some((store, id)) = self.open_in.take()
            && self.live.turn_cancelled()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = store
                    .withdraw_approval(&id, "the turn stopped waiting for an answer")
                    .await;
            });
        }
    }
}

impl ServeFrontend {
    /// Puts the question in the store, where any host on it lists it and takes an answer;
    /// its id there, or none (with a warning) when the store cannot be reached, and the
    /// question waits in this host's memory alone. A person's answer to this very question
    /// that no turn received (given while its host died, or the store was away) answers it.
    async fn put_in_store(&self, request: &ApprovalRequest) -> Result<Option<String>, GivenAnswer> {
        let Some(store) = self.store.as_ref() else {
            return Ok(None);
        };
        let timeout_ms = i64::try_from(self.approval_timeout.as_millis()).unwrap_or(i64::MAX);
        match store
            .ask_session_approval(
                &self.live.id,
                self.owner.as_deref(),
                self.asked_by.as_deref(),
                request,
                timeout_ms,
            )
            .await
        {
            Ok(cordon_store::Asked::Waiting(waiting)) => Ok(Some(waiting.id)),
            Ok(cordon_store::Asked::Answered(answer)) => Err(answer),
            Err(e) => {
                tracing::warn!(
                    session = %self.live.id,
                    "the question about `{}` waits on this host alone (the store: {e})",
                    request.tool
                );
                Ok(None)
            }
        }
    }
}

/// An answer read from the store, or never (no store question, or the store failed: the
/// answer then comes through this host, or not at all).
async fn from_store(
    question: Option<&str>,
    store: Option<&cordon_store::Store>,
    deadline: tokio::time::Instant,
) -> GivenAnswer {
    if let (Some(id), Some(store)) = (question, store) {
        match store
            .wait_for_answer(id, deadline, &CancellationToken::new())
            .await
        {
            Ok(cordon_store::Waited::Answered(answer)) => return answer,
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot look for the answer in the store: {e}"),
        }
    }
    std::future::pending().await
}

#[async_trait]
impl Frontend for ServeFrontend {
    fn event(&mut self, event: &AgentEvent) {
        if matches!(event, AgentEvent::TurnFinished { .. }) {
            self.end = Some(event.clone());
        } else if matches!(event, AgentEvent::ApprovalNeeded { .. }) {
            self.asking = Some(event.clone());
        } else {
            self.live.publish(SessionEvent::Agent(event.clone()));
        }
    }

    async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer {
        let asked_ms = now_ms();
        let deadline = tokio::time::Instant::now() + self.approval_timeout;
        // Waiting here first: a follower that saw `approval_needed` may answer through this
        // host before the store holds the question.
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
            question: None,
        });
        let question = match self.put_in_store(request).await {
            Ok(question) => question,
            Err(answered) => {
                self.live.stop_waiting(&request.call_id);
                if let Some(asking) = self.asking.take() {
                    self.live.publish(SessionEvent::Agent(asking));
                }
                cordon_core::metrics::approval_answered(answered.at_ms - asked_ms);
                return answered;
            }
        };
        if let Some(id) = &question {
            self.live.set_question(&request.call_id, id);
        }
        // Only now may a follower answer, through this host or any other.
        if let Some(asking) = self.asking.take() {
            self.live.publish(SessionEvent::Agent(asking));
        }
        let mut guard = WaitGuard {
            live: &self.live,
            call_id: request.call_id.clone(),
            open_in: self.store.clone().zip(question.clone()),
        };
        let waited = humantime::format_duration(self.approval_timeout);
        // Answered through this host (from memory), or through any host (from the store).
        let answered = tokio::select! {
            local = tokio::time::timeout_at(deadline, rx) => local,
            stored = from_store(question.as_deref(), self.store.as_ref(), deadline) => Ok(Ok(stored)),
        };
        let answered = match answered {
            // Answered: nothing to withdraw. The store records the answer, if it reached this
            // host alone (through its memory, while the question was being stored or the
            // store was away), and that this turn has it, so no later question takes it. An
            // answer the store took first is the one that counts, here as everywhere.
            Ok(Ok(answer)) => match guard.open_in.take() {
                Some((store, id)) => {
                    let answer = match store.answer_approval(&id, &answer).await {
                        Err(cordon_store::StoreError::ApprovalAnswered { .. }) => store
                            .approval_answer(&id)
                            .await
                            .ok()
                            .flatten()
                            .unwrap_or(answer),
                        _ => answer,
                    };
                    let _ = store.took_answer(&id).await;
                    Ok(Ok(answer))
                }
                None => Ok(Ok(answer)),
            },
            other => other,
        };
        if !matches!(answered, Ok(Ok(_)))
            && let Some((store, id)) = guard.open_in.take()
        {
            let reason = format!("nobody answered within {waited}, so it was denied");
            let _ = store.withdraw_approval(&id, &reason).await;
            // An answer that arrived just before the withdrawal still counts.
            if let Ok(Some(answer)) = store.approval_answer(&id).await
                && !matches!(answer.answer, ApprovalAnswer::Refused { .. })
            {
                let _ = store.took_answer(&id).await;
                cordon_core::metrics::approval_answered(answer.at_ms - asked_ms);
                return answer;
            }
        }
        match answered {
            Ok(Ok(answer)) => {
                cordon_core::metrics::approval_answered(answer.at_ms - asked_ms);
                answer
            }
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
            asking: None,
            owner: None,
            asked_by: None,
            store: None,
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
            asking: None,
            owner: None,
            asked_by: None,
            store: None,
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
