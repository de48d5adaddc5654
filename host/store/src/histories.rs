//! The sessions that histories sent to the OpenAI-compatible gateway continue, by digest: a
//! client of that API sends the whole conversation each time, and the session it continues
//! must be found again after the host restarts, or on another host sharing the store.

use sqlx::Row;

use crate::{Store, StoreError, on_backend};

impl Store {
    /// Records that the history with `digest` continues `session` (replacing what it
    /// continued before: the newest turn wins).
    pub async fn remember_history(&self, digest: &str, session: &str) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO gateway_histories (digest, session, at_ms) \
                           VALUES ($1, $2, $3) \
                           ON CONFLICT (digest) DO UPDATE \
                           SET session = excluded.session, at_ms = excluded.at_ms";
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

    /// The session the history with `digest` continues, if one was recorded.
    pub async fn history_session(&self, digest: &str) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT session FROM gateway_histories WHERE digest = $1";
        let row = on_backend!(self, pool => sqlx::query(SQL)
            .bind(digest)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| r.try_get::<String, _>("session")).transpose()))
        .map_err(|e| self.failed(e))?;
        Ok(row)
    }
}
