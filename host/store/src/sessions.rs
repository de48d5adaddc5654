//! Sessions: creating, listing, loading, forking and removing them, and the leases that let
//! one host at a time drive one.

use cordon_agent::{Conversation, Message, SessionSettings};
use cordon_core::now_ms;
use serde::Serialize;
use serde_json::Value;
use sqlx::Row;

use crate::counts::{DELETE_SESSION_COUNTS, session_range};
use crate::{Store, StoreError, on_backend};

/// Who drives a session, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// The host process (`host:pid:random`).
    pub holder: String,
    /// When it expires unless renewed (ms since the epoch).
    pub until_ms: i64,
}

/// A session as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    /// Its name.
    pub id: String,
    /// When it was created (ms since the epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// Where it was created: `chat`, `run`, `serve`, `fork`, `replay`.
    pub origin: String,
    /// The session it was forked or replayed from.
    pub parent: Option<String>,
    /// The start of its first message.
    pub title: String,
    /// Where its state machine stands (`idle`, `awaiting_approval`, …).
    pub state: String,
    /// Its turns.
    pub turns: i64,
    /// Its messages.
    pub messages: i64,
    /// Transitions recorded.
    pub seq: i64,
    /// What it uses instead of the host's defaults.
    pub settings: SessionSettings,
    /// Who drives it now, if a lease is held (possibly expired).
    pub lease: Option<Lease>,
    /// The name of the token that created it through a served door (`None`: created at the
    /// terminal, or before creators were kept). The gateway continues a session only for it.
    pub created_by: Option<String>,
}

impl SessionInfo {
    /// Whether a turn is under way (the session needs driving to go on).
    pub fn mid_turn(&self) -> bool {
        !matches!(self.state.as_str(), "idle" | "failed")
    }

    /// The lease, if it is still valid now.
    pub fn live_lease(&self) -> Option<&Lease> {
        self.lease.as_ref().filter(|l| l.until_ms > now_ms())
    }
}

/// A session to create.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Its name; generated (`s-…`) when absent.
    pub id: Option<String>,
    /// Where it is created (`chat`, `run`, `serve`, `fork`, `replay`).
    pub origin: String,
    /// The session it comes from.
    pub parent: Option<String>,
    /// What it uses instead of the host's defaults.
    pub settings: SessionSettings,
    /// Its conversation to start from (empty, or a fork).
    pub conversation: Conversation,
    /// The name of the token creating it through a served door (`None`: at the terminal).
    pub created_by: Option<String>,
}

/// One recorded transition, for showing and exporting a session's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionRecord {
    /// Its number in the session (1 is the first after creation).
    pub seq: i64,
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// Why the conversation changed (a [`cordon_agent::Cause`] as JSON).
    pub cause: Value,
    /// The index of the first message it added.
    pub first_message: i64,
    /// The messages it added.
    pub messages: Vec<Message>,
    /// The state the machine was left in.
    pub state: String,
    /// The bytes its record takes beside its messages (the state, the changed turns and notes,
    /// the counters): what a long session's transitions must not grow with.
    pub tail_bytes: usize,
}

/// What loading a session read: the transitions after its snapshot (how many, their bytes)
/// and the snapshot's size.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Replayed {
    pub(crate) transitions: u32,
    pub(crate) bytes: usize,
    pub(crate) snapshot_bytes: usize,
}

/// Checks a session name: 1 to 64 ASCII letters, digits, `.`, `_` or `-`, starting with a
/// letter or digit, so it is safe in URLs, file names and terminals.
pub fn validate_session_id(id: &str) -> Result<(), StoreError> {
    let bad = |reason: &str| {
        Err(StoreError::BadSessionId {
            id: id.chars().take(80).collect(),
            reason: reason.to_string(),
        })
    };
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > 64 {
        return bad("it is longer than 64 characters");
    }
    if !id.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it must start with a letter or digit");
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!("it contains {c:?}"));
    }
    Ok(())
}

/// A new session's row: `$1` id, `$2` when (created and updated), `$3` origin, `$4` parent,
/// `$5` title, `$6` state, `$7` turns, `$8` messages, `$9` seq, `$10` settings, `$11` lease
/// holder, `$12` lease until, `$13` creator. Adds nothing if the name is taken.
pub(crate) const INSERT_SESSION: &str = "INSERT INTO sessions (id, created_ms, updated_ms, origin, parent, title, state, turns, \
     messages, seq, settings, lease_holder, lease_until_ms, created_by) \
     VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (id) DO NOTHING";

/// One new row of `sessions`, as [`INSERT_SESSION`] takes it: the one place its columns are
/// bound, for a session created on its own and for one written with its first transition.
pub(crate) struct SessionRow<'a> {
    pub(crate) id: &'a str,
    pub(crate) origin: &'a str,
    pub(crate) parent: Option<&'a str>,
    pub(crate) conversation: &'a Conversation,
    pub(crate) seq: i64,
    /// The settings as JSON.
    pub(crate) settings: &'a str,
    /// The lease it is created with: this host's, until then.
    pub(crate) lease: Option<(&'a str, i64)>,
    /// The token that creates it.
    pub(crate) created_by: Option<&'a str>,
}

impl<'a> SessionRow<'a> {
    /// [`INSERT_SESSION`] with this row bound, for either backend; `now` is its creation time.
    pub(crate) fn insert<'q, DB>(
        &'q self,
        now: i64,
    ) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
    where
        DB: sqlx::Database,
        &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        let conv = self.conversation;
        sqlx::query(INSERT_SESSION)
            .bind(self.id)
            .bind(now)
            .bind(self.origin)
            .bind(self.parent)
            .bind(title_of(conv))
            .bind(conv.state.key())
            .bind(conv.turns.len() as i64)
            .bind(conv.messages.len() as i64)
            .bind(self.seq)
            .bind(self.settings)
            .bind(self.lease.map(|(holder, _)| holder))
            .bind(self.lease.map(|(_, until)| until))
            .bind(self.created_by)
    }
}

/// A snapshot of a session's whole conversation: `$1` session, `$2` seq, `$3` conversation.
pub(crate) const INSERT_SNAPSHOT: &str =
    "INSERT INTO snapshots (session, seq, conversation) VALUES ($1, $2, $3)";

/// The name a new session gets: the one asked for, checked, or a generated `s-…`.
pub(crate) fn new_session_id(asked: Option<String>) -> Result<String, StoreError> {
    match asked {
        Some(id) => {
            validate_session_id(&id)?;
            Ok(id)
        }
        None => Ok(format!(
            "s-{:012x}",
            rand::random::<u64>() & 0xffff_ffff_ffff
        )),
    }
}

/// The start of a session's first user message, for listings.
pub(crate) fn title_of(conv: &Conversation) -> String {
    let first = conv.messages.iter().find_map(|m| match m {
        Message::User { content, .. } => Some(content.as_str()),
        _ => None,
    });
    let flat: String = first
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if flat.chars().count() > 80 {
        format!("{}…", flat.chars().take(79).collect::<String>())
    } else {
        flat
    }
}

/// Reads a [`SessionInfo`] from a row of `sessions` (a macro, since each backend has its
/// own row type and the code is the same).
macro_rules! info_from_row {
    ($row:expr) => {{
        let row = $row;
        (|| -> Result<SessionInfo, sqlx::Error> {
            let settings: String = row.try_get("settings")?;
            let holder: Option<String> = row.try_get("lease_holder")?;
            let until: Option<i64> = row.try_get("lease_until_ms")?;
            Ok(SessionInfo {
                id: row.try_get("id")?,
                created_ms: row.try_get("created_ms")?,
                updated_ms: row.try_get("updated_ms")?,
                origin: row.try_get("origin")?,
                parent: row.try_get("parent")?,
                title: row.try_get("title")?,
                state: row.try_get("state")?,
                turns: row.try_get("turns")?,
                messages: row.try_get("messages")?,
                seq: row.try_get("seq")?,
                settings: serde_json::from_str(&settings).unwrap_or_default(),
                lease: holder
                    .zip(until)
                    .map(|(holder, until_ms)| Lease { holder, until_ms }),
                created_by: row.try_get("created_by")?,
            })
        })()
    }};
}

impl Store {
    /// Creates a session holding `new.conversation` (recorded as its first snapshot).
    pub async fn create_session(&self, new: NewSession) -> Result<SessionInfo, StoreError> {
        let id = self.insert_session(new).await?;
        self.session(&id).await
    }

    /// Inserts a session and its first snapshot in one transaction. Returns its id.
    async fn insert_session(&self, new: NewSession) -> Result<String, StoreError> {
        let id = new_session_id(new.id)?;
        let conv = &new.conversation;
        let now = now_ms();
        let settings = serde_json::to_string(&new.settings).unwrap_or_else(|_| "{}".into());
        let snapshot = conv.to_json();
        let created = on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            let row = SessionRow {
                id: &id,
                origin: &new.origin,
                parent: new.parent.as_deref(),
                conversation: conv,
                seq: 0,
                settings: &settings,
                lease: None,
                created_by: new.created_by.as_deref(),
            };
            let done = row.insert(now).execute(&mut *tx).await?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query(INSERT_SNAPSHOT).bind(&id).bind(0_i64).bind(&snapshot).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(true)
        }.await)
        .map_err(|e| self.failed(e))?;
        if !created {
            return Err(StoreError::SessionExists { id });
        }
        Ok(id)
    }

    /// One session's listing.
    pub async fn session(&self, id: &str) -> Result<SessionInfo, StoreError> {
        const SQL: &str = "SELECT id, created_ms, updated_ms, origin, parent, title, state, \
                           turns, messages, seq, settings, lease_holder, lease_until_ms, created_by \
                           FROM sessions WHERE id = $1";
        let found =
            on_backend!(self, pool => match sqlx::query(SQL).bind(id).fetch_optional(pool).await {
                Ok(Some(row)) => info_from_row!(&row).map(Some),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            })
            .map_err(|e| self.failed(e))?;
        found.ok_or_else(|| StoreError::UnknownSession { id: id.to_string() })
    }

    /// The sessions, most recently changed first, at most `limit`.
    pub async fn sessions(&self, limit: i64) -> Result<Vec<SessionInfo>, StoreError> {
        self.sessions_created_by(limit, None).await
    }

    /// As [`Store::sessions`], only those created by the token named `by` when there is one.
    pub async fn sessions_created_by(
        &self,
        limit: i64,
        by: Option<&str>,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        const SQL: &str = "SELECT id, created_ms, updated_ms, origin, parent, title, state, \
                           turns, messages, seq, settings, lease_holder, lease_until_ms, created_by \
                           FROM sessions WHERE (CAST($2 AS TEXT) IS NULL OR created_by = $2) \
                           ORDER BY updated_ms DESC, id LIMIT $1";
        on_backend!(self, pool => match sqlx::query(SQL).bind(limit.max(1)).bind(by).fetch_all(pool).await {
            Ok(rows) => rows.iter().map(|r| info_from_row!(r)).collect::<Result<Vec<_>, _>>(),
            Err(e) => Err(e),
        })
        .map_err(|e| self.failed(e))
    }

    /// Sessions stopped in the middle of a turn that no host drives (no lease, an expired one,
    /// one held by a process of this machine that no longer runs, or one this store's own
    /// holder kept after its turn stopped, when the store failed as it gave the lease up):
    /// what a host takes up again. The caller skips those it drives itself.
    pub async fn orphaned_sessions(&self) -> Result<Vec<SessionInfo>, StoreError> {
        const SQL: &str = "SELECT id, created_ms, updated_ms, origin, parent, title, state, \
                           turns, messages, seq, settings, lease_holder, lease_until_ms, created_by \
                           FROM sessions WHERE state <> 'idle' AND state <> 'failed' \
                           ORDER BY updated_ms";
        let mid_turn = on_backend!(self, pool => match sqlx::query(SQL).fetch_all(pool).await {
            Ok(rows) => rows.iter().map(|r| info_from_row!(r)).collect::<Result<Vec<_>, _>>(),
            Err(e) => Err(e),
        })
        .map_err(|e| self.failed(e))?;
        Ok(mid_turn
            .into_iter()
            .filter(|s| match &s.lease {
                None => true,
                Some(l) => {
                    l.holder == self.holder
                        || l.until_ms < now_ms()
                        || crate::holder_is_gone(&l.holder)
                }
            })
            .collect())
    }

    /// A session's conversation as last recorded: the newest snapshot and the transitions
    /// after it.
    pub async fn load(&self, id: &str) -> Result<(SessionInfo, Conversation), StoreError> {
        self.load_replayed(id)
            .await
            .map(|(info, conv, _)| (info, conv))
    }

    /// [`Store::load`], with what loading it replayed: what the journal that drives it next
    /// counts on from, to know when its next snapshot is due.
    pub(crate) async fn load_replayed(
        &self,
        id: &str,
    ) -> Result<(SessionInfo, Conversation, Replayed), StoreError> {
        const SNAPSHOT: &str = "SELECT seq, conversation FROM snapshots WHERE session = $1 \
                                ORDER BY seq DESC LIMIT 1";
        const AFTER: &str = "SELECT seq, first_message, messages, tail FROM transitions \
                             WHERE session = $1 AND seq > $2 ORDER BY seq";
        let info = self.session(id).await?;
        let rows = on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            let snapshot = sqlx::query(SNAPSHOT).bind(id).fetch_optional(&mut *tx).await?;
            let Some(snapshot) = snapshot else {
                return Ok(None);
            };
            let seq: i64 = snapshot.try_get("seq")?;
            let conversation: String = snapshot.try_get("conversation")?;
            let after = sqlx::query(AFTER).bind(id).bind(seq).fetch_all(&mut *tx).await?;
            let mut tail = Vec::with_capacity(after.len());
            for row in &after {
                tail.push((
                    row.try_get::<i64, _>("first_message")?,
                    row.try_get::<String, _>("messages")?,
                    row.try_get::<String, _>("tail")?,
                ));
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(Some((conversation, tail)))
        }.await)
        .map_err(|e| self.failed(e))?;
        let corrupt = |reason: String| StoreError::Corrupt {
            id: id.to_string(),
            reason,
        };
        let Some((snapshot, after)) = rows else {
            return Err(corrupt("it has no snapshot".to_string()));
        };
        let base = Conversation::from_json(&snapshot).map_err(|e| corrupt(e.to_string()))?;
        // Each transition added messages (from `first` on) and the turns and notes that
        // changed; the last one's tail is the conversation's state now. Put back together once
        // per load, not once per transition since the snapshot.
        let records = after.iter().map(|(first, messages, tail)| {
            (
                usize::try_from(*first).unwrap_or(0),
                messages.as_str(),
                tail.as_str(),
            )
        });
        let conv = Conversation::replay(base, records).map_err(|e| corrupt(e.to_string()))?;
        let replayed = Replayed {
            transitions: after.len() as u32,
            bytes: after.iter().map(|(_, m, t)| m.len() + t.len()).sum(),
            snapshot_bytes: snapshot.len(),
        };
        Ok((info, conv, replayed))
    }

    /// A session's recorded transitions after `after_seq`, oldest first.
    pub async fn transitions(
        &self,
        id: &str,
        after_seq: i64,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        const SQL: &str = "SELECT seq, at_ms, cause, first_message, messages, tail \
                           FROM transitions WHERE session = $1 AND seq > $2 ORDER BY seq";
        self.session(id).await?;
        let rows = on_backend!(self, pool => match sqlx::query(SQL).bind(id).bind(after_seq).fetch_all(pool).await {
            Ok(rows) => rows.iter().map(|r| Ok((
                r.try_get::<i64, _>("seq")?,
                r.try_get::<i64, _>("at_ms")?,
                r.try_get::<String, _>("cause")?,
                r.try_get::<i64, _>("first_message")?,
                r.try_get::<String, _>("messages")?,
                r.try_get::<String, _>("tail")?,
            ))).collect::<Result<Vec<_>, sqlx::Error>>(),
            Err(e) => Err(e),
        })
        .map_err(|e| self.failed(e))?;
        rows.into_iter()
            .map(|(seq, at_ms, cause, first_message, messages, tail)| {
                let corrupt = |e: serde_json::Error| StoreError::Corrupt {
                    id: id.to_string(),
                    reason: format!("transition {seq}: {e}"),
                };
                let tail_bytes = tail.len();
                let tail: Value = serde_json::from_str(&tail).map_err(corrupt)?;
                Ok(TransitionRecord {
                    tail_bytes,
                    seq,
                    at_ms,
                    cause: serde_json::from_str(&cause).map_err(corrupt)?,
                    first_message,
                    messages: serde_json::from_str(&messages).map_err(corrupt)?,
                    state: tail["state"]["state"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                })
            })
            .collect()
    }

    /// A new session holding the first `keep_turns` finished turns of `id` (all finished
    /// turns when `None`), created by the token `by` (`None`: at the terminal).
    pub async fn fork(
        &self,
        id: &str,
        keep_turns: Option<usize>,
        new_id: Option<String>,
        by: Option<String>,
    ) -> Result<SessionInfo, StoreError> {
        let (info, conv) = self.load(id).await?;
        let keep = keep_turns.unwrap_or_else(|| conv.finished_turns());
        let copy = conv.fork(keep).map_err(|e| StoreError::NotIdle {
            id: id.to_string(),
            state: info.state.clone(),
            what: e.to_string(),
        })?;
        // The results the copy's messages keep apart go with it.
        let kept: Vec<String> = copy
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { kept: Some(k), .. } => Some(k.id.clone()),
                _ => None,
            })
            .collect();
        let made = self
            .create_session(NewSession {
                id: new_id,
                origin: "fork".to_string(),
                parent: Some(id.to_string()),
                settings: info.settings,
                conversation: copy,
                created_by: by,
            })
            .await?;
        // A fork whose kept results could not be copied is no fork: it goes again.
        if let Err(e) = self.copy_kept(id, &made.id, &kept).await {
            let _ = self.delete_session(&made.id).await;
            return Err(e);
        }
        Ok(made)
    }

    /// Removes a session, its log, the results it kept apart, its questions and its own policy
    /// counters (the audit log keeps its records). Refused while another host drives it.
    pub async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        const SQL: &str = "DELETE FROM sessions WHERE id = $1 \
                           AND (lease_holder IS NULL OR lease_holder = $2 OR lease_until_ms < $3)";
        const LOG: &str = "DELETE FROM transitions WHERE session = $1";
        const SNAPSHOTS: &str = "DELETE FROM snapshots WHERE session = $1";
        const HISTORIES: &str = "DELETE FROM gateway_histories WHERE session = $1";
        const KEPT: &str = "DELETE FROM kept_results WHERE session = $1";
        // A session made again under the same name never finds the old one's answers.
        const QUESTIONS: &str = "DELETE FROM approvals WHERE session = $1";
        let (counts_from, counts_to) = session_range(id);
        let info = self.session(id).await?;
        let deleted = on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            let done = sqlx::query(SQL).bind(id).bind(&self.holder).bind(now_ms()).execute(&mut *tx).await?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query(LOG).bind(id).execute(&mut *tx).await?;
            sqlx::query(SNAPSHOTS).bind(id).execute(&mut *tx).await?;
            sqlx::query(HISTORIES).bind(id).execute(&mut *tx).await?;
            sqlx::query(KEPT).bind(id).execute(&mut *tx).await?;
            sqlx::query(QUESTIONS).bind(id).execute(&mut *tx).await?;
            sqlx::query(DELETE_SESSION_COUNTS).bind(&counts_from).bind(&counts_to).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(true)
        }.await)
        .map_err(|e| self.failed(e))?;
        if deleted {
            return Ok(());
        }
        Err(self.busy(id, info.lease))
    }

    pub(crate) fn busy(&self, id: &str, lease: Option<Lease>) -> StoreError {
        match lease {
            Some(l) => StoreError::Busy {
                id: id.to_string(),
                holder: l.holder,
                seconds: ((l.until_ms - now_ms()) / 1000).max(0),
            },
            None => StoreError::UnknownSession { id: id.to_string() },
        }
    }

    /// Takes the lease on a session for this process, if no other host holds a valid one. A
    /// lease held by a process of this machine that no longer runs is taken at once.
    pub async fn acquire(&self, id: &str) -> Result<SessionInfo, StoreError> {
        const SQL: &str = "UPDATE sessions SET lease_holder = $2, lease_until_ms = $3 \
                           WHERE id = $1 AND (lease_holder IS NULL OR lease_holder = $2 \
                           OR lease_until_ms < $4 OR lease_holder = $5)";
        let now = now_ms();
        let until = self.lease_until(now);
        let before = self.session(id).await?;
        // Only the holder seen to be gone may be displaced, never one that took over since.
        let gone = before
            .lease
            .as_ref()
            .map(|l| l.holder.clone())
            .filter(|h| crate::holder_is_gone(h))
            .unwrap_or_default();
        let done = on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(&self.holder)
            .bind(until)
            .bind(now)
            .bind(&gone)
            .execute(pool)
            .await
            .map(|d| d.rows_affected()))
        .map_err(|e| self.failed(e))?;
        let info = self.session(id).await?;
        if done == 0 {
            return Err(self.busy(id, info.lease));
        }
        Ok(info)
    }

    /// Extends this process's lease on a session; fails with [`StoreError::LeaseLost`] when
    /// another host took it.
    pub async fn renew(&self, id: &str) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE sessions SET lease_until_ms = $3 \
                           WHERE id = $1 AND lease_holder = $2";
        let until = self.lease_until(now_ms());
        let done = on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(&self.holder)
            .bind(until)
            .execute(pool)
            .await
            .map(|d| d.rows_affected()))
        .map_err(|e| self.failed(e))?;
        if done == 0 {
            let holder = self
                .session(id)
                .await?
                .lease
                .map(|l| l.holder)
                .unwrap_or_else(|| "nobody".to_string());
            return Err(StoreError::LeaseLost {
                id: id.to_string(),
                holder,
            });
        }
        Ok(())
    }

    /// Gives up this process's lease on a session, so another host may drive it at once.
    pub async fn release(&self, id: &str) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE sessions SET lease_holder = NULL, lease_until_ms = NULL \
                           WHERE id = $1 AND lease_holder = $2";
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(&self.holder)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(|e| self.failed(e))
    }
}
