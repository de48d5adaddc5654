//! How the asker of a question in the store learns of its answer, wherever it was given.
//!
//! - On PostgreSQL the answer's commit notifies (a trigger, migration 9, on the channel
//!   [`ANSWERS_CHANNEL`]); one connection per store handle listens, and every waiter wakes
//!   on its question's id and reads the answer. An answer given on another host reaches the
//!   waiting turn in milliseconds, with no query in between.
//! - A slow look every [`SHARED_LOOK_EVERY`] on PostgreSQL covers a notification lost while
//!   the listening connection was being replaced.
//! - SQLite has no notifications: its waiters look every [`LOCAL_LOOK_EVERY`]. The processes
//!   sharing a SQLite file are on one machine, and an answer given through the host that
//!   asks reaches it at once through that host's own memory (see `cordon-serve`'s live
//!   sessions), so only `cordon approve` and a second process wait for the look.
//! - The same connection hears requests to cancel a session's turn ([`CANCELS_CHANNEL`]),
//!   which any host may send for a turn another host drives.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cordon_agent::{CancellationToken, GivenAnswer};
use tokio::sync::broadcast;

use crate::{Backend, Store, StoreError};

/// The channel answers are announced on (PostgreSQL).
pub const ANSWERS_CHANNEL: &str = "cordon_approvals";

/// The channel requests to cancel a session's turn go on (PostgreSQL), the session as
/// payload.
pub const CANCELS_CHANNEL: &str = "cordon_cancels";

/// How often a waiter looks on PostgreSQL, besides being told.
const SHARED_LOOK_EVERY: Duration = Duration::from_secs(2);

/// How often a waiter looks on SQLite.
const LOCAL_LOOK_EVERY: Duration = Duration::from_millis(250);

/// What the listener tells waiters: a question answered, or that announcements may have been
/// missed (everyone looks).
#[derive(Debug, Clone)]
pub enum Heard {
    /// Question `id` was answered.
    Answered(String),
    /// Someone asked to cancel the turn of this session.
    Cancel(String),
    /// The listening connection was replaced: announcements may have been missed.
    MayHaveMissed,
}

/// The announcements of one store handle and its clones; the listener starts with the first
/// waiter.
#[derive(Debug, Default)]
pub(crate) struct Announcements {
    sender: OnceLock<broadcast::Sender<Heard>>,
}

/// How a wait for an answer ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Waited {
    /// Answered (by anyone, or withdrawn by the asker).
    Answered(GivenAnswer),
    /// The deadline passed first.
    TimedOut,
    /// The waiter was cancelled.
    Cancelled,
}

impl Store {
    /// Waits until question `id` is answered, `deadline` passes or `cancel` fires. A store
    /// error ends the wait: the caller decides what an unknown answer means.
    pub async fn wait_for_answer(
        &self,
        id: &str,
        deadline: tokio::time::Instant,
        cancel: &CancellationToken,
    ) -> Result<Waited, StoreError> {
        let (mut heard, every) = match &self.backend {
            Backend::Postgres(pool) => (Some(self.listen(pool)), SHARED_LOOK_EVERY),
            Backend::Sqlite(_) => (None, LOCAL_LOOK_EVERY),
        };
        loop {
            // Subscribed before the look: an answer committed after it is heard.
            if let Some(answer) = self.approval_answer(id).await? {
                return Ok(Waited::Answered(answer));
            }
            let look_at = tokio::time::Instant::now() + every;
            loop {
                let woken = async {
                    match heard.as_mut() {
                        Some(rx) => match rx.recv().await {
                            Ok(Heard::Answered(answered)) => answered == id,
                            Ok(Heard::Cancel(_)) => false,
                            Ok(Heard::MayHaveMissed) => true,
                            Err(broadcast::error::RecvError::Lagged(_)) => true,
                            Err(broadcast::error::RecvError::Closed) => {
                                std::future::pending::<bool>().await
                            }
                        },
                        None => std::future::pending::<bool>().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return Ok(Waited::Cancelled),
                    () = tokio::time::sleep_until(deadline) => return Ok(Waited::TimedOut),
                    () = tokio::time::sleep_until(look_at) => break,
                    woken = woken => if woken { break },
                }
            }
        }
    }

    /// What this handle hears on a shared store (answers, cancels), the listener started if
    /// it is not running; none on SQLite, which announces nothing.
    pub fn announcements(&self) -> Option<broadcast::Receiver<Heard>> {
        match &self.backend {
            Backend::Postgres(pool) => Some(self.listen(pool)),
            Backend::Sqlite(_) => None,
        }
    }

    /// Asks whichever host drives session `id`'s turn to cancel it; false on SQLite, where
    /// no other host can be asked.
    pub async fn announce_cancel(&self, id: &str) -> Result<bool, StoreError> {
        const SQL: &str = "SELECT pg_notify($1, $2)";
        match &self.backend {
            Backend::Postgres(pool) => sqlx::query(SQL)
                .bind(CANCELS_CHANNEL)
                .bind(id)
                .execute(pool)
                .await
                .map(|_| true)
                .map_err(|e| self.failed(e)),
            Backend::Sqlite(_) => Ok(false),
        }
    }

    /// This handle's announcements, the listener started if it is not running.
    fn listen(&self, pool: &sqlx::PgPool) -> broadcast::Receiver<Heard> {
        let announcements: &Arc<Announcements> = &self.announcements;
        if let Some(sender) = announcements.sender.get() {
            return sender.subscribe();
        }
        let (sender, receiver) = broadcast::channel(1024);
        if announcements.sender.set(sender.clone()).is_err() {
            // Another waiter started it first.
            return announcements
                .sender
                .get()
                .map(broadcast::Sender::subscribe)
                .unwrap_or(receiver);
        }
        let pool = pool.clone();
        tokio::spawn(async move { listen_on(pool, sender).await });
        receiver
    }
}

/// Listens on [`ANSWERS_CHANNEL`] until the pool closes, passing on what it hears. After a
/// lost connection (replaced by the listener) waiters look, since announcements made
/// meanwhile are lost.
async fn listen_on(pool: sqlx::PgPool, sender: broadcast::Sender<Heard>) {
    let mut listener = loop {
        match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(mut listener) => match listener
                .listen_all([ANSWERS_CHANNEL, CANCELS_CHANNEL])
                .await
            {
                Ok(()) => break listener,
                Err(e) => tracing::warn!("cannot listen for answers (looking instead): {e}"),
            },
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => tracing::warn!("cannot listen for answers (looking instead): {e}"),
        }
        tokio::time::sleep(SHARED_LOOK_EVERY).await;
    };
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let payload = notification.payload().to_string();
                let _ = sender.send(if notification.channel() == CANCELS_CHANNEL {
                    Heard::Cancel(payload)
                } else {
                    Heard::Answered(payload)
                });
            }
            Ok(None) => {
                let _ = sender.send(Heard::MayHaveMissed);
            }
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => {
                tracing::debug!("listening for answers: {e}");
                let _ = sender.send(Heard::MayHaveMissed);
                tokio::time::sleep(SHARED_LOOK_EVERY).await;
            }
        }
    }
}
