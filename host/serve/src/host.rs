//! The resident host: the installed tools (reloaded when the home changes), one engine per
//! set of session settings, and the sessions it drives, each turn on its own task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cordon_agent::{
    Agent, AgentConfig, AgentError, AuditContext, CancellationToken, Conversation, Driven,
    JournalError, State, ToolHost, ToolSource, TurnInput, TurnIo,
};
use cordon_core::Requester;
use cordon_store::{NewSession, SessionJournal, SessionSettings, Store};
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, Place};
use crate::error::ApiError;
use crate::live::{
    HostEvent, LiveSession, PendingApproval, Published, ServeFrontend, SessionEvent,
};

/// Changes a session's tools for one turn: the gateway adds the tools its client runs.
pub(crate) type ToolsForTurn = Arc<dyn Fn(Arc<dyn ToolHost>) -> Arc<dyn ToolHost> + Send + Sync>;

/// How many engines (one per distinct set of session settings) the host keeps made.
const MAX_CACHED_ENGINES: usize = 64;

/// How the host behaves.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The engine's configuration (model, limits, approval rules, `[serve]`, `[audit]`).
    pub config: AgentConfig,
    /// How long a tool call waits for an approval before it is denied.
    pub approval_timeout: Duration,
    /// How long running tool calls get to finish when the host stops.
    pub shutdown_grace: Duration,
}

struct LoadedTools {
    stamp: String,
    tools: Arc<dyn ToolHost>,
    generation: u64,
}

/// A turn marked running on its live record that is not driven yet: unmarked when dropped
/// unless kept.
struct Claimed(Option<Arc<LiveSession>>);

impl Claimed {
    /// The record, for the turn that now drives it.
    fn keep(mut self) -> Arc<LiveSession> {
        self.0.take().expect("a claim is kept once")
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        if let Some(live) = self.0.take() {
            live.release();
        }
    }
}

/// The shared state of a running `cordon serve`.
pub struct Host {
    pub(crate) store: Store,
    source: Arc<dyn ToolSource>,
    loaded: RwLock<LoadedTools>,
    reloading: tokio::sync::Mutex<()>,
    generation: AtomicU64,
    pub(crate) options: HostOptions,
    agents: Mutex<HashMap<String, (u64, Arc<Agent>)>>,
    live: Mutex<HashMap<String, Arc<LiveSession>>>,
    /// Fired when the host stops: turns stop at their next safe point.
    pub(crate) stopping: CancellationToken,
    draining: AtomicBool,
    pub(crate) turns: TaskTracker,
    /// What the host takes on at once ([`crate::admission`]).
    pub(crate) admission: Admission,
    /// Where the other hosts on a shared store reach this one (none: they cannot).
    pub(crate) reached_at: std::sync::OnceLock<String>,
}

impl Host {
    /// A host over `store`, with the tools `source` loads now.
    pub async fn new(
        store: Store,
        source: Arc<dyn ToolSource>,
        options: HostOptions,
    ) -> Result<Arc<Host>, String> {
        let stamp = source.stamp();
        let tools = source.load().await?;
        Ok(Arc::new(Host {
            store,
            source,
            loaded: RwLock::new(LoadedTools {
                stamp,
                tools,
                generation: 0,
            }),
            reloading: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            agents: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            draining: AtomicBool::new(false),
            turns: TaskTracker::new(),
            admission: Admission::new(&options.config.serve.limits),
            options,
            reached_at: std::sync::OnceLock::new(),
        }))
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The tools as installed now: reloaded first if the home changed since the last load
    /// (an install, a grant, a revoke), so a change needs no restart.
    pub async fn tools(&self) -> (Arc<dyn ToolHost>, u64) {
        let stamp = self.source.stamp();
        {
            let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
            if loaded.stamp == stamp {
                return (loaded.tools.clone(), loaded.generation);
            }
        }
        let _one_at_a_time = self.reloading.lock().await;
        let stamp = self.source.stamp();
        {
            let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
            if loaded.stamp == stamp {
                return (loaded.tools.clone(), loaded.generation);
            }
        }
        match self.source.load().await {
            Ok(tools) => {
                let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                tracing::info!(
                    tools = tools.tools().len(),
                    "the installed tools changed; reloaded"
                );
                let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
                *loaded = LoadedTools {
                    stamp,
                    tools: tools.clone(),
                    generation,
                };
                (tools, generation)
            }
            Err(e) => {
                tracing::warn!("cannot reload the installed tools, keeping the previous ones: {e}");
                let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
                (loaded.tools.clone(), loaded.generation)
            }
        }
    }

    /// The engine for a session's settings, with the tools as installed now.
    pub async fn agent(&self, settings: &SessionSettings) -> Result<Arc<Agent>, ApiError> {
        let (tools, generation) = self.tools().await;
        let key = serde_json::to_string(settings).unwrap_or_default();
        if let Some((made_for, agent)) = self
            .agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            && *made_for == generation
        {
            return Ok(agent.clone());
        }
        let mut config = self.options.config.clone();
        settings.apply(&mut config);
        let tools = settings.tools(tools);
        let agent = Arc::new(
            Agent::new(config, tools)
                .map_err(|e| ApiError::bad_request(format!("the session's settings: {e}")))?,
        );
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        // Each distinct set of settings gets an engine; a client making endless distinct ones
        // must not grow the host without bound, so past a few dozen they are made afresh.
        if agents.len() >= MAX_CACHED_ENGINES {
            agents.clear();
        }
        agents.insert(key, (generation, agent.clone()));
        Ok(agent)
    }

    /// An engine for a session's settings whose tools `wrap` changes, made for one turn (not
    /// kept: what a client adds differs from request to request).
    fn agent_with(
        &self,
        settings: &SessionSettings,
        tools: Arc<dyn ToolHost>,
        wrap: &ToolsForTurn,
    ) -> Result<Arc<Agent>, ApiError> {
        let mut config = self.options.config.clone();
        settings.apply(&mut config);
        let agent = Agent::new(config, wrap(settings.tools(tools)))
            .map_err(|e| ApiError::bad_request(format!("the session's settings: {e}")))?;
        Ok(Arc::new(agent))
    }

    /// Marks a turn of session `id` as running on this host (its live record made if need be),
    /// unless one already runs. Under the map's lock, so a sweep cannot drop the record
    /// between its lookup and its claim.
    fn claim(&self, id: &str) -> Result<Arc<LiveSession>, ApiError> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let session = live
            .entry(id.to_string())
            .or_insert_with(|| LiveSession::new(id))
            .clone();
        session.claim()?;
        Ok(session)
    }

    /// Follows session `id`'s events from now on (its live record made if need be), under
    /// the map's lock for the same reason as [`Host::claim`].
    pub fn follow(&self, id: &str) -> broadcast::Receiver<Arc<Published>> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.entry(id.to_string())
            .or_insert_with(|| LiveSession::new(id))
            .subscribe()
    }

    /// Forgets the live records nothing needs: no turn runs and nobody follows. Each holds a
    /// buffer of events, so a host that served many sessions would otherwise keep one per
    /// session it ever touched.
    fn sweep(&self) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, l| l.is_running() || l.followers() > 0);
    }

    /// The live record of a session, if this host has one.
    pub fn live_if_any(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Forgets a session's live record (after it was removed).
    pub fn forget(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// How many sessions have a turn running or a follower on this host.
    pub fn live_count(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Every question waiting for an answer, oldest first: those in the store (of sessions
    /// any host on it drives, and of MCP clients' calls, from `/mcp` or `cordon mcp`), and
    /// those of this host's turns kept in memory alone. While the store cannot be read,
    /// this host's own.
    pub async fn pending(&self) -> Vec<PendingApproval> {
        let live: Vec<Arc<LiveSession>> = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let mut all: Vec<PendingApproval> = live.iter().flat_map(|l| l.pending()).collect();
        match self.store.waiting_approvals().await {
            Ok(waiting) => {
                all.retain(|p| p.question.is_none());
                all.extend(waiting.into_iter().map(PendingApproval::from));
            }
            Err(e) => tracing::warn!("the questions waiting in the store could not be read: {e}"),
        }
        all.sort_by_key(|p| p.asked_ms);
        all
    }

    /// Whether the host is stopping (no new turns).
    pub fn is_stopping(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Refuses a new turn while the host shuts down.
    fn taking_turns(&self) -> Result<(), ApiError> {
        if self.is_stopping() {
            return Err(ApiError::unavailable(
                "the host is shutting down and takes no new turns; try again when it is back",
            ));
        }
        Ok(())
    }

    /// A place for a turn ([`crate::admission`], step 4). A turn that resumes one a host
    /// already took on takes none: it was admitted once, and refusing it would leave its
    /// session stuck mid-turn.
    async fn place_for(
        &self,
        input: &TurnInput,
        by: Option<&Requester>,
    ) -> Result<Option<Place>, ApiError> {
        if matches!(input, TurnInput::Resume) {
            return Ok(None);
        }
        let token = by.map_or("default", |r| r.token.as_str());
        self.admission
            .turns
            .take(token)
            .await
            .map(Some)
            .map_err(ApiError::busy)
    }

    /// Stops taking turns and tells running ones to stop at their next safe point.
    pub fn begin_shutdown(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.stopping.cancel();
    }

    /// Starts a turn of session `id` on its own task: takes the session's lease, loads it, and
    /// drives it. Returns a follower of the session's events subscribed before the turn
    /// starts, so it sees the whole turn. The turn's first transition is recorded before any
    /// event is published.
    /// `by` is who asks, recorded on a turn a message starts.
    pub async fn start_turn(
        self: &Arc<Self>,
        id: &str,
        input: TurnInput,
        by: Option<Requester>,
    ) -> Result<broadcast::Receiver<Arc<Published>>, ApiError> {
        self.start_turn_with(id, input, None, by, "serve").await
    }

    /// [`Host::start_turn`], with the session's tools changed by `tools` for this turn.
    pub(crate) async fn start_turn_with(
        self: &Arc<Self>,
        id: &str,
        input: TurnInput,
        tools: Option<ToolsForTurn>,
        by: Option<Requester>,
        door: &'static str,
    ) -> Result<broadcast::Receiver<Arc<Published>>, ApiError> {
        self.taking_turns()?;
        let place = self.place_for(&input, by.as_ref()).await?;
        // Given back if the turn cannot start, and if the request is dropped while the store
        // is slow (its client went away): a claim nothing drives would refuse every later
        // turn of the session until a restart.
        let claimed = Claimed(Some(self.claim(id)?));
        let (journal, conversation, agent, owner) =
            self.prepare_turn(id, &input, tools.as_ref()).await?;
        Ok(self.spawn_drive(
            claimed.keep(),
            journal,
            conversation,
            agent,
            input,
            Requested {
                by,
                door,
                place,
                owner,
            },
        ))
    }

    /// Creates a session and starts its first turn at once (see [`Host::start_turn`]): the
    /// turn drives the conversation the session is created with, and the session is written,
    /// with this host's lease on it, together with the turn's first transition (so nothing
    /// of a turn that cannot start is left behind, and no follower sees the session before).
    pub(crate) async fn start_new_turn(
        self: &Arc<Self>,
        new: NewSession,
        input: TurnInput,
        tools: Option<ToolsForTurn>,
        by: Option<Requester>,
        door: &'static str,
    ) -> Result<(String, broadcast::Receiver<Arc<Published>>), ApiError> {
        self.taking_turns()?;
        let place = self.place_for(&input, by.as_ref()).await?;
        // Settings that cannot make an engine are refused before anything is created.
        let agent = match &tools {
            None => self.agent(&new.settings).await?,
            Some(wrap) => self.agent_with(&new.settings, self.tools().await.0, wrap)?,
        };
        let owner = new.created_by.clone();
        let (id, journal, conversation) = self.store.create_and_drive(new)?;
        let live = match self.claim(&id) {
            Ok(live) => live,
            Err(e) => {
                let _ = journal.release().await;
                return Err(e);
            }
        };
        let events = self.spawn_drive(
            live,
            journal,
            conversation,
            agent,
            input,
            Requested {
                by,
                door,
                place,
                owner,
            },
        );
        Ok((id, events))
    }

    async fn prepare_turn(
        &self,
        id: &str,
        input: &TurnInput,
        tools: Option<&ToolsForTurn>,
    ) -> Result<(SessionJournal, Conversation, Arc<Agent>, Option<String>), ApiError> {
        let info = self.store.session(id).await?;
        let agent = match tools {
            None => self.agent(&info.settings).await?,
            Some(wrap) => self.agent_with(&info.settings, self.tools().await.0, wrap)?,
        };
        let (journal, conversation) = self.store.drive(id).await?;
        let fits = match input {
            TurnInput::Message(_) | TurnInput::Request(_) => {
                conversation.is_idle().then_some(()).ok_or_else(|| {
                    format!(
                        "session `{id}` is in the middle of a turn ({}); it goes on by itself, or \
                     cancel it (POST /api/v1/sessions/{id}/cancel)",
                        conversation.state.name()
                    )
                })
            }
            TurnInput::Retry => matches!(conversation.state, State::Failed { .. })
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "nothing to retry: session `{id}` is {}, not failed",
                        conversation.state.name()
                    )
                }),
            TurnInput::Resume => (!conversation.is_idle())
                .then_some(())
                .ok_or_else(|| format!("session `{id}` has no turn to resume")),
        };
        if let Err(message) = fits {
            let _ = journal.release().await;
            return Err(ApiError::conflict(message));
        }
        Ok((journal, conversation, agent, info.created_by))
    }

    /// Drives the turn on the host's task set ([`Host::drive`]); the session's events from now
    /// on.
    fn spawn_drive(
        self: &Arc<Self>,
        live: Arc<LiveSession>,
        journal: SessionJournal,
        conversation: Conversation,
        agent: Arc<Agent>,
        input: TurnInput,
        requested: Requested,
    ) -> broadcast::Receiver<Arc<Published>> {
        let events = live.subscribe();
        let host = self.clone();
        // In the trace of the request that starts it (`crate::spans`), when there is one.
        self.turns
            .spawn(cordon_core::trace::in_current_trace(async move {
                host.drive(live, journal, conversation, agent, input, requested)
                    .await;
            }));
        events
    }

    /// Drives one turn to its end, or until the host stops, the store fails or another host
    /// takes the session; then gives up the lease.
    async fn drive(
        self: Arc<Self>,
        live: Arc<LiveSession>,
        mut journal: SessionJournal,
        mut conversation: Conversation,
        agent: Arc<Agent>,
        input: TurnInput,
        requested: Requested,
    ) {
        let Requested {
            by,
            door,
            place,
            owner,
        } = requested;
        let cancel = CancellationToken::new();
        live.set_cancel(cancel.clone());
        // Stop at the next safe point when the host stops or the lease is lost.
        let stop = self.stopping.child_token();
        let lost = journal.lost();
        let stop_on_loss = {
            let stop = stop.clone();
            tokio::spawn(async move {
                lost.cancelled().await;
                stop.cancel();
            })
        };
        // Whose turn causes the calls asked about (rule 4 of `crate::auth`): the token that
        // sends a message; for a turn retried or taken up again (after a restart, on another
        // host), the one recorded with it, as its audit records say; when nobody is known,
        // the session's owner, so an owner without `approve:own` never answers for lack of
        // a name.
        let asked_by = match (&input, &by) {
            (TurnInput::Retry | TurnInput::Resume, _) | (_, None) => {
                conversation.requester().map(|r| r.token.clone())
            }
            (_, Some(r)) => Some(r.token.clone()),
        }
        .or_else(|| owner.clone());
        let mut frontend = ServeFrontend {
            live: live.clone(),
            approval_timeout: self.options.approval_timeout,
            end: None,
            asking: None,
            owner,
            asked_by,
            store: Some(self.store.clone()),
        };
        let result = {
            let mut io = TurnIo {
                frontend: &mut frontend,
                journal: &mut journal,
                cancel: &cancel,
                suspend: Some(&stop),
                audit: AuditContext {
                    session: Some(live.id.clone()),
                    // The door the turn came through (`serve` for the API, `gateway`): what
                    // the audit records and per-call policy rules (`origin`) see.
                    origin: door.to_string(),
                    keep_arguments: self.options.config.audit.keep_arguments,
                    requested_by: by,
                },
            };
            agent.drive(&mut conversation, input, &mut io).await
        };
        stop_on_loss.abort();
        let lease_lost = journal.lost().is_cancelled();
        let stopped = match result {
            Ok(Driven::Finished(_)) => None,
            Ok(Driven::Suspended) if lease_lost => {
                Some("another host took the session over; it goes on there".to_string())
            }
            Ok(Driven::Suspended) => Some(
                "the host is shutting down; the turn goes on from where it stopped when a host \
                 takes the session up again"
                    .to_string(),
            ),
            Err(AgentError::Journal(JournalError::LeaseLost { holder, .. })) => {
                Some(format!("{holder} took the session over; it goes on there"))
            }
            Err(AgentError::Journal(e)) => Some(format!(
                "{e}; the session stays at its last recorded state and goes on when the store \
                 is back"
            )),
            Err(e) => Some(e.to_string()),
        };
        // The lease is given up before the session is free on this host again: a next turn
        // takes it at once (the same holder), and giving it up after that would take it from
        // under that turn, whose first transition would then fail as if another host had it.
        if !lease_lost && let Err(e) = journal.release().await {
            tracing::warn!(session = %live.id, "cannot give up the lease (it lapses by itself): {e}");
        }
        // Only now do clients hear that the turn ended, so one that sends the next message
        // at once is not told a turn is still running.
        let mut last: Vec<SessionEvent> = frontend
            .end
            .take()
            .map(SessionEvent::Agent)
            .into_iter()
            .collect();
        if let Some(reason) = stopped {
            tracing::warn!(session = %live.id, "turn stopped: {reason}");
            last.push(SessionEvent::Host(HostEvent::TurnStopped { reason }));
        }
        live.end_turn(last);
        // The turn's place is given back only now, however long after the request that
        // started it was answered.
        drop(place);
    }

    /// Takes up sessions that stopped mid-turn while a `cordon serve` drove them, or that no
    /// host holds (a crash, a shutdown, a store that went away): each resumes from its last
    /// recorded state. Sessions `cordon chat` and `cordon run` were driving are left to them.
    pub async fn resume_orphans(self: &Arc<Self>) {
        let orphans = match self.store.orphaned_sessions().await {
            Ok(orphans) => orphans,
            Err(e) => {
                tracing::debug!("cannot look for sessions to resume: {e}");
                return;
            }
        };
        // What no host holds, or what a `cordon serve` was driving when it stopped.
        let ours = |s: &cordon_store::SessionInfo| {
            s.lease
                .as_ref()
                .is_none_or(|l| cordon_store::holder_driver(&l.holder) == "serve")
        };
        for info in orphans.into_iter().filter(ours) {
            if self.live_if_any(&info.id).is_some_and(|l| l.is_running()) {
                continue;
            }
            match self.start_turn(&info.id, TurnInput::Resume, None).await {
                Ok(_) => {
                    tracing::info!(session = %info.id, state = %info.state, "resumed a session stopped mid-turn")
                }
                Err(e) if e.status.as_u16() == 409 => {}
                Err(e) => tracing::warn!(session = %info.id, "cannot resume: {}", e.message),
            }
        }
    }

    /// Tells the other hosts on a shared store where this one is reached.
    pub async fn announce(&self) {
        if let (true, Some(url)) = (self.store.is_shared(), self.reached_at.get())
            && let Err(e) = self.store.announce_host(url).await
        {
            tracing::debug!("cannot tell the other hosts where this one is: {e}");
        }
    }

    /// Until the host stops: cancels the turns other hosts on the store are asked to cancel
    /// and this host drives (a shared store only).
    pub async fn hear_cancels(self: Arc<Self>) {
        let Some(mut heard) = self.store.announcements() else {
            return;
        };
        loop {
            let next = tokio::select! {
                _ = self.stopping.cancelled() => return,
                next = heard.recv() => next,
            };
            match next {
                Ok(cordon_store::Heard::Cancel(id)) => {
                    if let Some(live) = self.live_if_any(&id).filter(|l| l.is_running()) {
                        tracing::info!(session = %id, "cancelling the turn, as another host asked");
                        let _ = live.cancel();
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        "{missed} announcements were missed; a request to cancel a turn here \
                         may have been among them (it can be sent again)"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Every `every`, until the host stops: resume orphaned sessions and pick up tool changes.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        loop {
            tokio::select! {
                _ = self.stopping.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            self.tools().await;
            self.announce().await;
            self.resume_orphans().await;
            self.sweep();
        }
    }

    /// After the server stopped: waits up to the grace period for running turns (their tool
    /// calls finish and are recorded), then gives up the leases of any still running so
    /// another host can take them up at once.
    pub async fn finish(&self) {
        self.begin_shutdown();
        self.turns.close();
        if tokio::time::timeout(self.options.shutdown_grace, self.turns.wait())
            .await
            .is_err()
        {
            let running: Vec<String> = self
                .live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .filter(|l| l.is_running())
                .map(|l| l.id.clone())
                .collect();
            tracing::warn!(
                sessions = ?running,
                "tool calls still running after the grace period are abandoned; their sessions resume with those calls marked interrupted"
            );
            for id in running {
                if let Err(e) = self.store.release(&id).await {
                    tracing::debug!(session = %id, "cannot give up the lease: {e}");
                }
            }
        }
    }
}

/// Who asked for a turn, and through which door (`serve` for the API, `gateway`).
struct Requested {
    by: Option<Requester>,
    door: &'static str,
    /// The turn's place among those the host runs at once; given back when the turn ends.
    place: Option<Place>,
    /// The token that created the session: who may see its questions.
    owner: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_agent::{AgentEvent, Content, ToolFailure, ToolHints, ToolSpec, async_trait};
    use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
    use cordon_store::{NewSession, StoreOptions};
    use serde_json::{Value, json};

    /// One tool that answers at once, always installed.
    struct Ping;

    #[async_trait]
    impl ToolHost for Ping {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "ping".into(),
                tool: "ping".into(),
                description: "Answers pong.".into(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
                hints: ToolHints {
                    read_only: true,
                    ..ToolHints::default()
                },
                plugin: "test".into(),
                grants: Vec::new(),
                can_change_anything: false,
                digest: "sha256:00".into(),
                proven: Default::default(),
                reach: Default::default(),
                exposure: Default::default(),
            }]
        }

        async fn call(
            &self,
            _: &str,
            _: Value,
            _: CancellationToken,
        ) -> Result<Vec<Content>, ToolFailure> {
            Ok(vec![Content::Text("pong".into())])
        }
    }

    #[async_trait]
    impl ToolSource for Ping {
        fn stamp(&self) -> String {
            "fixed".into()
        }

        async fn load(&self) -> Result<Arc<dyn ToolHost>, String> {
            Ok(Arc::new(Ping))
        }
    }

    /// A host on a store in `dir`, its model the scripted server at `url`, and a new session.
    async fn host_with_session(dir: &std::path::Path, url: String) -> (Arc<Host>, Store, String) {
        let store = Store::open_in_home(dir, StoreOptions::default())
            .await
            .unwrap();
        let mut config = AgentConfig::default();
        config.llm.url = url;
        let options = HostOptions {
            config,
            approval_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(1),
        };
        let host = Host::new(store.clone(), Arc::new(Ping), options)
            .await
            .unwrap();
        let id = store
            .create_session(NewSession {
                id: None,
                origin: "serve".into(),
                parent: None,
                settings: SessionSettings::default(),
                conversation: Conversation::new(),
                created_by: None,
            })
            .await
            .unwrap()
            .id;
        (host, store, id)
    }

    async fn to_the_end(events: &mut broadcast::Receiver<Arc<Published>>) -> Arc<Published> {
        loop {
            let event = events.recv().await.unwrap();
            if event.event.ends_turn() {
                return event;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_turn_may_start_as_soon_as_a_client_saw_the_last_one_end() {
        let model = ScriptedServer::start(Script::by_role(
            Step::tool_calls(vec![ScriptedCall::new("ping", json!({}))]),
            Step::text("pong it is"),
        ))
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (host, store, id) = host_with_session(dir.path(), model.base_url()).await;
        // Each message goes in the moment the previous turn's end arrives, as a client waiting
        // for a JSON answer sends its next one: never "a turn is running", never a lease lost.
        let turns = 40;
        for n in 0..turns {
            let mut events = host
                .start_turn(&id, TurnInput::Message(format!("ping {n}")), None)
                .await
                .unwrap_or_else(|e| panic!("turn {n} refused: {}", e.message));
            let end = to_the_end(&mut events).await;
            assert!(
                matches!(
                    &end.event,
                    SessionEvent::Agent(AgentEvent::TurnFinished { .. })
                ),
                "turn {n} ended with {end:?}"
            );
        }
        let info = store.session(&id).await.unwrap();
        assert_eq!((info.turns, info.state.as_str()), (turns, "idle"));
        host.finish().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_no_turn_and_no_follower_needs_is_forgotten() {
        let model =
            ScriptedServer::start(Script::by_role(Step::text("hello"), Step::text("hello")))
                .await
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (host, _, id) = host_with_session(dir.path(), model.base_url()).await;
        let follower = host.follow(&id);
        let mut events = host
            .start_turn(&id, TurnInput::Message("hi".into()), None)
            .await
            .unwrap();
        to_the_end(&mut events).await;
        drop(events);
        // Still followed: kept.
        host.sweep();
        assert!(host.live_if_any(&id).is_some());
        drop(follower);
        host.sweep();
        assert!(host.live_if_any(&id).is_none());
        // A session is taken up again as if it had never been here.
        let mut events = host
            .start_turn(&id, TurnInput::Message("again".into()), None)
            .await
            .unwrap();
        assert!(to_the_end(&mut events).await.event.ends_turn());
        host.finish().await;
    }
}
