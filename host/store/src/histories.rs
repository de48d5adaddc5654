//! The sessions that histories sent to the OpenAI-compatible gateway continue, by digest: a
//! client of that API sends the whole conversation each time, and the session it continues
//! must be found again after the host restarts, or on another host sharing the store.

use sqlx::Row;

use crate::{Store, StoreError, on_backend};

/// How many sessions of one history are looked at: more than one already means the gateway
/// starts a new session rather than guess, so a few tell that apart.
pub const MAX_HISTORY_SESSIONS: i64 = 8;

impl Store {
    /// Records that the history with `digest` may continue `session`, beside any other
    /// session recorded for it: none replaces another, and the caller decides between them by
    /// what each session holds now.
    pub async fn remember_history(&self, digest: &str, session: &str) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO gateway_histories (digest, session, at_ms) \
                           VALUES ($1, $2, $3) \
                           ON CONFLICT (digest, session) DO UPDATE SET at_ms = excluded.at_ms";
        let now = cordon_core::now_ms();
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(digest)
            .bind(session)
            .bind(now)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(|e| self.failed(e))
    }

    /// The sessions recorded for the history with `digest`, newest first, at most
    /// [`MAX_HISTORY_SESSIONS`].
    pub async fn history_sessions(&self, digest: &str) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT session FROM gateway_histories WHERE digest = $1 \
                           ORDER BY at_ms DESC, session LIMIT $2";
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(digest)
            .bind(MAX_HISTORY_SESSIONS)
            .fetch_all(pool)
            .await
            .and_then(|rows| rows.iter().map(|r| r.try_get::<String, _>("session")).collect()))
        .map_err(|e| self.failed(e))
    }
}
