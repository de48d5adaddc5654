//! The journals the conversation engine records into: [`SessionJournal`] for a session (its
//! transitions and the audit log), [`AuditJournal`] for a conversation that is not a session
//! (the audit log only).

use std::time::Duration;

use cordon_agent::cordon_policy::{CountQuery, Reservation};
use cordon_agent::pages::{InFiles, KeptAt, KeptPart, Parts};
use cordon_agent::{CancellationToken, Cause, Conversation, Journal, JournalError, async_trait};
use cordon_core::Written;
use cordon_core::{AuditRecord, now_ms};
use sqlx::Row;

use crate::audit::{AuditRow, PER_STATEMENT, insert_audit_rows};
use crate::sessions::{INSERT_SNAPSHOT, SessionRow, new_session_id, title_of};
use crate::{NewSession, Store, StoreError, on_backend};

/// The right to drive one session, and the record of its transitions.
///
/// Made by [`Store::drive`], which takes the session's lease and loads it, or by
/// [`Store::create_and_drive`] for a session written with its first transition. Each
/// [`Journal::transition`] appends one row to the session's log, in one database transaction
/// that also checks this process still holds the lease and that nobody appended since (so a
/// host that lost its lease can never write), renews the lease, and every
/// [`StoreOptions::snapshot_every`](crate::StoreOptions::snapshot_every) transitions replaces
/// the session's snapshot. A background task renews the lease while the session waits (for an
/// answer, a model, a long tool call); [`SessionJournal::lost`] fires if another host took it.
/// Messages are only ever appended to a conversation, so each row holds just the messages
/// added since the previous one.
#[derive(Debug)]
pub struct SessionJournal {
    store: Store,
    id: String,
    seq: i64,
    /// Messages recorded so far.
    messages: usize,
    /// Turns and notes recorded so far: a transition records the last of those turns again
    /// (it may have changed) and what came after, and the notes after these.
    turns: usize,
    notes: usize,
    /// Transitions recorded since the newest snapshot, and their bytes; the snapshot's size.
    since_snapshot: u32,
    since_snapshot_bytes: usize,
    snapshot_bytes: usize,
    lost: CancellationToken,
    /// Renews the lease; started once the session is in the store.
    keeper: Option<tokio::task::JoinHandle<()>>,
    /// A session [`Store::create_and_drive`] made, not written yet: it is written with its
    /// first transition.
    unborn: Option<Unborn>,
}

/// What a new session is written with besides its first transition.
#[derive(Debug)]
struct Unborn {
    origin: String,
    parent: Option<String>,
    created_by: Option<String>,
    /// Its settings as JSON.
    settings: String,
    /// The conversation it was created with as JSON, its snapshot 0.
    start: String,
}

impl Store {
    /// Takes the lease on session `id` and loads it, ready to drive. Fails with
    /// [`StoreError::Busy`] while another host drives it.
    pub async fn drive(&self, id: &str) -> Result<(SessionJournal, Conversation), StoreError> {
        self.acquire(id).await?;
        let (info, conv, replayed) = match self.load_replayed(id).await {
            Ok(loaded) => loaded,
            Err(e) => {
                let _ = self.release(id).await;
                return Err(e);
            }
        };
        Ok((self.journal(id, info.seq, &conv, replayed), conv))
    }

    /// A new session holding `new.conversation`, ready to drive, and its journal: for a
    /// host that drives a new session's first turn at once (the OpenAI gateway does for most
    /// requests). Nothing is written yet: the session is inserted, with this process's lease
    /// on it, in the same database transaction as its first transition, so a turn that
    /// starts at once waits for one write, not two, and a turn that never records anything
    /// leaves nothing behind. Until then nobody else can see the session, and its name is
    /// taken only then (a name taken meanwhile fails that transition with
    /// [`StoreError::SessionExists`]).
    pub fn create_and_drive(
        &self,
        new: NewSession,
    ) -> Result<(String, SessionJournal, Conversation), StoreError> {
        let id = new_session_id(new.id)?;
        let unborn = Unborn {
            origin: new.origin,
            parent: new.parent,
            created_by: new.created_by,
            settings: serde_json::to_string(&new.settings).unwrap_or_else(|_| "{}".into()),
            start: new.conversation.to_json(),
        };
        let snapshot_bytes = unborn.start.len();
        let journal = SessionJournal {
            store: self.clone(),
            id: id.clone(),
            seq: 0,
            messages: new.conversation.messages.len(),
            turns: new.conversation.turns.len(),
            notes: new.conversation.notes.len(),
            since_snapshot: 0,
            since_snapshot_bytes: 0,
            snapshot_bytes,
            lost: CancellationToken::new(),
            keeper: None,
            unborn: Some(unborn),
        };
        Ok((id, journal, new.conversation))
    }

    /// The journal of a session this process holds the lease on, at `seq`, and the task that
    /// keeps the lease.
    fn journal(
        &self,
        id: &str,
        seq: i64,
        conv: &Conversation,
        replayed: crate::sessions::Replayed,
    ) -> SessionJournal {
        let lost = CancellationToken::new();
        SessionJournal {
            store: self.clone(),
            id: id.to_string(),
            seq,
            messages: conv.messages.len(),
            turns: conv.turns.len(),
            notes: conv.notes.len(),
            since_snapshot: replayed.transitions,
            since_snapshot_bytes: replayed.bytes,
            snapshot_bytes: replayed.snapshot_bytes,
            keeper: Some(keep_lease(self.clone(), id.to_string(), lost.clone())),
            lost,
            unborn: None,
        }
    }
}

/// Starts renewing a lease every third of its lifetime until it is lost or the task is
/// stopped.
fn keep_lease(store: Store, id: String, lost: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(renew_lease(store, id, lost))
}

async fn renew_lease(store: Store, id: String, lost: CancellationToken) {
    let every = store.options().lease_ttl / 3;
    loop {
        tokio::time::sleep(every.max(Duration::from_millis(50))).await;
        match store.renew(&id).await {
            Ok(()) => {}
            Err(StoreError::LeaseLost { holder, .. }) => {
                tracing::warn!(session = %id, %holder, "lost the lease on the session");
                lost.cancel();
                return;
            }
            // The store is away: keep trying; appends fail meanwhile, and the lease lasts.
            Err(e) => tracing::warn!(session = %id, "cannot renew the lease: {e}"),
        }
    }
}

impl SessionJournal {
    /// The session.
    pub fn session(&self) -> &str {
        &self.id
    }

    /// The store it records into.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Fires when another host took the session over (this one must stop driving it).
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Stops driving: the lease is given up so another host (or command) may drive the
    /// session at once (as [`Journal::close`] does).
    pub async fn release(mut self) -> Result<(), StoreError> {
        self.stop_keeping();
        if self.lost.is_cancelled() || self.unborn.is_some() {
            return Ok(());
        }
        self.store.release(&self.id).await
    }

    /// The session whose counters the store keeps until it is deleted: none while the session
    /// is not written yet (counters added then are kept by the minute, and pruned with age,
    /// rather than left behind if it never is).
    fn own_counters(&self) -> Option<&str> {
        self.unborn.is_none().then_some(self.id.as_str())
    }

    fn stop_keeping(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }

    /// Records one transition and the audit records of the calls it settled, in one database
    /// transaction, behind the lease: both or neither, and nothing from a host that lost the
    /// session (whose late records would stand beside the next host's).
    async fn append(
        &mut self,
        conv: &Conversation,
        cause: &Cause,
        audits: &[AuditRecord],
    ) -> Result<(), StoreError> {
        const SESSION: &str = "UPDATE sessions SET seq = $3, updated_ms = $4, state = $5, \
                               turns = $6, messages = $7, title = $8, lease_until_ms = $9 \
                               WHERE id = $1 AND seq = $2 AND lease_holder = $10";
        const LOG: &str = "INSERT INTO transitions (session, seq, at_ms, cause, first_message, \
                           messages, tail) VALUES ($1, $2, $3, $4, $5, $6, $7)";
        const OLD_SNAPSHOTS: &str = "DELETE FROM snapshots WHERE session = $1 AND seq < $2";
        let first = self.messages.min(conv.messages.len());
        let added = serde_json::to_string(&conv.messages[first..]).unwrap_or_default();
        let tail =
            serde_json::to_string(&conv.tail_since(self.turns.saturating_sub(1), self.notes))
                .unwrap_or_default();
        let cause = serde_json::to_string(cause).unwrap_or_default();
        // A snapshot once `snapshot_every` transitions and at least the last snapshot's size in
        // transitions came since: writing snapshots then costs at most what the transitions
        // cost, however long the session, and a load reads at most twice the session.
        let since_bytes = self.since_snapshot_bytes + added.len() + tail.len();
        let snapshot = (self.since_snapshot + 1 >= self.store.options().snapshot_every
            && since_bytes >= self.snapshot_bytes)
            .then(|| serde_json::to_string(conv).unwrap_or_default());
        let rows: Vec<AuditRow> = audits.iter().map(AuditRow::of).collect();
        let now = now_ms();
        let seq = self.seq + 1;
        let until = self.store.lease_until(now);
        let store = &self.store;
        let appended = on_backend!(store, pool => async {
            let mut tx = pool.begin().await?;
            let done = match &self.unborn {
                None => sqlx::query(SESSION)
                    .bind(&self.id)
                    .bind(self.seq)
                    .bind(seq)
                    .bind(now)
                    .bind(conv.state.key())
                    .bind(conv.turns.len() as i64)
                    .bind(conv.messages.len() as i64)
                    .bind(title_of(conv))
                    .bind(until)
                    .bind(store.holder())
                    .execute(&mut *tx)
                    .await?,
                Some(unborn) => SessionRow {
                    id: &self.id,
                    origin: &unborn.origin,
                    parent: unborn.parent.as_deref(),
                    conversation: conv,
                    seq,
                    settings: &unborn.settings,
                    lease: Some((store.holder(), until)),
                    created_by: unborn.created_by.as_deref(),
                }
                .insert(now)
                .execute(&mut *tx)
                .await?,
            };
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            if let Some(unborn) = &self.unborn {
                sqlx::query(INSERT_SNAPSHOT).bind(&self.id).bind(0_i64).bind(&unborn.start).execute(&mut *tx).await?;
            }
            sqlx::query(LOG)
                .bind(&self.id)
                .bind(seq)
                .bind(now)
                .bind(&cause)
                .bind(first as i64)
                .bind(&added)
                .bind(&tail)
                .execute(&mut *tx)
                .await?;
            if let Some(snapshot) = &snapshot {
                sqlx::query(INSERT_SNAPSHOT).bind(&self.id).bind(seq).bind(snapshot).execute(&mut *tx).await?;
                sqlx::query(OLD_SNAPSHOTS).bind(&self.id).bind(seq).execute(&mut *tx).await?;
            }
            for chunk in rows.chunks(PER_STATEMENT) {
                insert_audit_rows!(chunk).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(true)
        }.await)
        .map_err(|e| store.failed(e))?;
        if !appended && self.unborn.is_some() {
            return Err(StoreError::SessionExists {
                id: self.id.clone(),
            });
        }
        if !appended {
            let holder = self.current_holder().await;
            self.lost.cancel();
            return Err(StoreError::LeaseLost {
                id: self.id.clone(),
                holder,
            });
        }
        crate::audit::count(audits);
        if self.unborn.take().is_some() {
            self.keeper = Some(keep_lease(
                self.store.clone(),
                self.id.clone(),
                self.lost.clone(),
            ));
        }
        self.seq = seq;
        self.messages = conv.messages.len();
        self.turns = conv.turns.len();
        self.notes = conv.notes.len();
        match &snapshot {
            Some(snapshot) => {
                self.since_snapshot = 0;
                self.since_snapshot_bytes = 0;
                self.snapshot_bytes = snapshot.len();
            }
            None => {
                self.since_snapshot += 1;
                self.since_snapshot_bytes = since_bytes;
            }
        }
        Ok(())
    }

    async fn current_holder(&self) -> String {
        const SQL: &str = "SELECT lease_holder FROM sessions WHERE id = $1";
        let store = &self.store;
        let holder: Option<Option<String>> = on_backend!(store, pool => sqlx::query(SQL)
            .bind(&self.id)
            .fetch_optional(pool)
            .await
            .ok()
            .flatten()
            .and_then(|row| row.try_get::<Option<String>, _>("lease_holder").ok()));
        match holder {
            Some(Some(h)) => h,
            Some(None) => "nobody (the lease was given up)".to_string(),
            None => "nobody (the session was removed)".to_string(),
        }
    }
}

impl Drop for SessionJournal {
    fn drop(&mut self) {
        // The lease then lapses on its own unless released.
        self.stop_keeping();
    }
}

fn journal_error(id: &str, error: StoreError) -> JournalError {
    match error {
        StoreError::LeaseLost { holder, .. } => JournalError::LeaseLost {
            session: id.to_string(),
            holder,
        },
        other => JournalError::Store(Box::new(other)),
    }
}

#[async_trait]
impl Journal for SessionJournal {
    async fn transition(
        &mut self,
        conversation: &Conversation,
        cause: &Cause,
    ) -> Result<(), JournalError> {
        let id = self.id.clone();
        self.append(conversation, cause, &[])
            .await
            .map_err(|e| journal_error(&id, e))
    }

    fn records_every_transition(&self) -> bool {
        true
    }

    async fn transition_audited(
        &mut self,
        conversation: &Conversation,
        cause: &Cause,
        audits: Vec<AuditRecord>,
    ) -> Result<(), JournalError> {
        let id = self.id.clone();
        self.append(conversation, cause, &audits)
            .await
            .map_err(|e| journal_error(&id, e))
    }

    async fn audit(&mut self, record: AuditRecord) -> Result<(), JournalError> {
        self.store
            .append_audit(&record)
            .await
            .map_err(|e| journal_error(&self.id, e))
    }

    /// Counted in the store, so counts hold across restarts and hosts. This session's own
    /// counters are kept for its whole life (see [`Store::add_calls`]).
    async fn count_calls(&mut self, queries: &[CountQuery]) -> Result<Vec<u64>, JournalError> {
        self.store
            .count_calls(queries, self.own_counters())
            .await
            .map_err(|e| journal_error(&self.id, e))
    }

    async fn add_calls(&mut self, keys: &[String], minute: i64) -> Result<(), JournalError> {
        self.store
            .add_calls(keys, minute, self.own_counters())
            .await
            .map_err(|e| journal_error(&self.id, e))
    }

    async fn reserve_calls(
        &mut self,
        adds: &[Reservation],
        queries: &[CountQuery],
        minute: i64,
    ) -> Result<Vec<u64>, JournalError> {
        self.store
            .reserve_calls(adds, queries, minute, self.own_counters())
            .await
            .map_err(|e| journal_error(&self.id, e))
    }

    async fn release_calls(&mut self, keys: &[String], minute: i64) -> Result<(), JournalError> {
        self.store
            .release_calls(keys, minute, self.own_counters())
            .await
            .map_err(|e| journal_error(&self.id, e))
    }

    /// Kept in the store with the session (see `kept`); a session not written yet keeps none.
    async fn keep_result(
        &mut self,
        id: &str,
        written: &Written,
    ) -> Result<Option<u64>, JournalError> {
        if self.unborn.is_some() {
            return Ok(None);
        }
        let mut parts = Parts::of(written);
        self.store
            .keep_result(&self.id, id, written.len(), &mut parts)
            .await
            .map_err(|e| journal_error(&self.id, e))?;
        Ok(Some(parts.lines()))
    }

    async fn kept_part(&mut self, id: &str, at: KeptAt) -> Result<Option<KeptPart>, JournalError> {
        self.store
            .kept_part(&self.id, id, at)
            .await
            .map_err(|e| journal_error(&self.id, e))
    }

    async fn close(&mut self) -> Result<(), JournalError> {
        self.stop_keeping();
        // Counters' places reserved ahead go back before the process may exit.
        self.store.give_back_spare().await;
        if self.lost.is_cancelled() || self.unborn.is_some() {
            return Ok(());
        }
        self.store
            .release(&self.id)
            .await
            .map_err(|e| journal_error(&self.id, e))
    }
}

/// The journal of a conversation that is not a session: its transitions are not kept, its
/// tool calls go to the audit log.
#[derive(Debug)]
pub struct AuditJournal {
    store: Store,
    /// Results kept apart from the conversation, in their files, for as long as it lasts.
    files: InFiles,
}

impl AuditJournal {
    /// Records tool calls into `store`.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            files: InFiles::default(),
        }
    }
}

#[async_trait]
impl Journal for AuditJournal {
    async fn transition(&mut self, _: &Conversation, _: &Cause) -> Result<(), JournalError> {
        Ok(())
    }

    /// Counters' places reserved ahead go back before the process may exit.
    async fn close(&mut self) -> Result<(), JournalError> {
        self.store.give_back_spare().await;
        Ok(())
    }

    async fn audit(&mut self, record: AuditRecord) -> Result<(), JournalError> {
        self.store
            .append_audit(&record)
            .await
            .map_err(|e| JournalError::Store(Box::new(e)))
    }

    /// Counted in the store, like a session's; with no session to keep them for, every
    /// counter is kept by the minute (and pruned after the longest window).
    async fn count_calls(&mut self, queries: &[CountQuery]) -> Result<Vec<u64>, JournalError> {
        self.store
            .count_calls(queries, None)
            .await
            .map_err(|e| JournalError::Store(Box::new(e)))
    }

    async fn add_calls(&mut self, keys: &[String], minute: i64) -> Result<(), JournalError> {
        self.store
            .add_calls(keys, minute, None)
            .await
            .map_err(|e| JournalError::Store(Box::new(e)))
    }

    async fn reserve_calls(
        &mut self,
        adds: &[Reservation],
        queries: &[CountQuery],
        minute: i64,
    ) -> Result<Vec<u64>, JournalError> {
        self.store
            .reserve_calls(adds, queries, minute, None)
            .await
            .map_err(|e| JournalError::Store(Box::new(e)))
    }

    async fn release_calls(&mut self, keys: &[String], minute: i64) -> Result<(), JournalError> {
        self.store
            .release_calls(keys, minute, None)
            .await
            .map_err(|e| JournalError::Store(Box::new(e)))
    }

    /// Kept in their files, not in the store: the conversation lives only in this process.
    async fn keep_result(
        &mut self,
        id: &str,
        written: &Written,
    ) -> Result<Option<u64>, JournalError> {
        self.files
            .keep(id, written)
            .map(Some)
            .map_err(|e| JournalError::Store(Box::new(e)))
    }

    async fn kept_part(&mut self, id: &str, at: KeptAt) -> Result<Option<KeptPart>, JournalError> {
        self.files
            .part(id, at)
            .map_err(|e| JournalError::Store(Box::new(e)))
    }
}
