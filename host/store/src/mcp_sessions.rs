//! What an MCP client over HTTP leaves on the host it reached, kept where every host on the
//! store finds it: its session (so its next request may reach another host behind a load
//! balancer), and the labels its model was given (so the Rule of Two holds whichever host
//! runs its next call).
//!
//! A session row names the token that opened it once the opening host recorded it; until
//! then, and for any other token, it is nobody's and is never taken up. Rows are kept for
//! [`MCP_SESSION_LIFE_MS`] from their opening; a client whose session is older starts a new
//! one, as the MCP specification has it do after a `404`. A client's labels are kept as long
//! from when they were first recorded: a client that calls for longer keeps its labels on the
//! hosts it reached, and others learn them again as its results carry them.

use cordon_core::{LabelSource, now_ms};
use sqlx::Row;

use crate::{Store, StoreError, on_backend};

/// How long an MCP session is kept in the store from its opening.
pub const MCP_SESSION_LIFE_MS: i64 = 24 * 60 * 60 * 1000;

impl Store {
    /// Records MCP session `id` with what its client said when it initialised (`state`, as
    /// the MCP SDK keeps it); sessions past their life are cleared.
    pub async fn put_mcp_session(&self, id: &str, state: &str) -> Result<(), StoreError> {
        const CLEAR: &str = "DELETE FROM mcp_sessions WHERE opened_ms < $1";
        const PUT: &str = "INSERT INTO mcp_sessions (id, state, opened_ms) VALUES ($1, $2, $3) \
                           ON CONFLICT (id) DO UPDATE SET state = excluded.state";
        let now = now_ms();
        on_backend!(self, pool => async {
            sqlx::query(CLEAR).bind(now - MCP_SESSION_LIFE_MS).execute(pool).await?;
            sqlx::query(PUT).bind(id).bind(state).bind(now).execute(pool).await.map(|_| ())
        }.await)
        .map_err(|e| self.failed(e))
    }

    /// Records that `token` opened MCP session `id`; a session already some token's keeps
    /// its owner.
    pub async fn own_mcp_session(&self, id: &str, token: &str) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE mcp_sessions SET token = $2 WHERE id = $1 AND token IS NULL";
        on_backend!(self, pool => sqlx::query(SQL).bind(id).bind(token).execute(pool).await.map(|_| ()))
            .map_err(|e| self.failed(e))
    }

    /// MCP session `id`, if it is `token`'s and within its life: what its client said when
    /// it initialised.
    pub async fn mcp_session(&self, id: &str, token: &str) -> Result<Option<String>, StoreError> {
        const SQL: &str =
            "SELECT state FROM mcp_sessions WHERE id = $1 AND token = $2 AND opened_ms >= $3";
        let since = now_ms() - MCP_SESSION_LIFE_MS;
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(token)
            .bind(since)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| r.try_get::<String, _>(0)).transpose()))
        .map_err(|e| self.failed(e))
    }

    /// What MCP session `id`'s client said when it initialised, whoever's it is (the MCP SDK
    /// asks so once the caller's right to it was checked).
    pub async fn mcp_session_state(&self, id: &str) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT state FROM mcp_sessions WHERE id = $1 AND opened_ms >= $2";
        let since = now_ms() - MCP_SESSION_LIFE_MS;
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(since)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| r.try_get::<String, _>(0)).transpose()))
        .map_err(|e| self.failed(e))
    }

    /// Ends MCP session `id` (its client ended it).
    pub async fn delete_mcp_session(&self, id: &str) -> Result<(), StoreError> {
        const SQL: &str = "DELETE FROM mcp_sessions WHERE id = $1";
        on_backend!(self, pool => sqlx::query(SQL).bind(id).execute(pool).await.map(|_| ()))
            .map_err(|e| self.failed(e))
    }

    /// The label sources the MCP client `client` of `token` was given results of, on any
    /// host, oldest first.
    pub async fn mcp_labels(
        &self,
        token: &str,
        client: &str,
    ) -> Result<Vec<LabelSource>, StoreError> {
        const SQL: &str = "SELECT label, tool, grant_text FROM mcp_labels \
                           WHERE token = $1 AND client = $2 AND at_ms >= $3 \
                           ORDER BY at_ms, label, tool";
        let since = now_ms() - MCP_SESSION_LIFE_MS;
        let rows: Vec<(String, String, String)> = on_backend!(self, pool => sqlx::query(SQL)
            .bind(token)
            .bind(client)
            .bind(since)
            .fetch_all(pool)
            .await
            .and_then(|rows| rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).collect()))
        .map_err(|e| self.failed(e))?;
        Ok(rows
            .into_iter()
            .filter_map(|(label, tool, grant)| {
                Some(LabelSource {
                    label: serde_json::from_value(serde_json::Value::String(label)).ok()?,
                    tool,
                    grant,
                })
            })
            .collect())
    }

    /// Adds label sources the client was given results of (those known already are kept a
    /// day from now); those older than a day are cleared.
    pub async fn add_mcp_labels(
        &self,
        token: &str,
        client: &str,
        sources: &[LabelSource],
    ) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO mcp_labels (token, client, label, tool, grant_text, at_ms) \
                           VALUES ($1, $2, $3, $4, $5, $6) \
                           ON CONFLICT (token, client, label, tool, grant_text) \
                           DO UPDATE SET at_ms = excluded.at_ms";
        const CLEAR: &str = "DELETE FROM mcp_labels WHERE at_ms < $1";
        let now = now_ms();
        on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            sqlx::query(CLEAR).bind(now - MCP_SESSION_LIFE_MS).execute(&mut *tx).await?;
            for source in sources {
                sqlx::query(SQL)
                    .bind(token)
                    .bind(client)
                    .bind(source.label.as_str())
                    .bind(&source.tool)
                    .bind(&source.grant)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await
        }.await)
        .map_err(|e| self.failed(e))
    }
}

/// How long a host's address is trusted after it last said it was there.
const HOST_SEEN_MS: i64 = 5 * 60 * 1000;

impl Store {
    /// Records that this process (its name in leases) is reached at `url`, now.
    pub async fn announce_host(&self, url: &str) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO serve_hosts (holder, url, seen_ms) VALUES ($1, $2, $3) \
                           ON CONFLICT (holder) DO UPDATE SET url = excluded.url, \
                           seen_ms = excluded.seen_ms";
        const CLEAR: &str = "DELETE FROM serve_hosts WHERE seen_ms < $1";
        let now = now_ms();
        on_backend!(self, pool => async {
            sqlx::query(CLEAR).bind(now - HOST_SEEN_MS).execute(pool).await?;
            sqlx::query(SQL).bind(self.holder()).bind(url).bind(now).execute(pool).await.map(|_| ())
        }.await)
        .map_err(|e| self.failed(e))
    }

    /// Where the process named `holder` in leases is reached, if it said so lately.
    pub async fn host_url(&self, holder: &str) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT url FROM serve_hosts WHERE holder = $1 AND seen_ms >= $2";
        let since = now_ms() - HOST_SEEN_MS;
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(holder)
            .bind(since)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| r.try_get::<String, _>(0)).transpose()))
        .map_err(|e| self.failed(e))
    }
}
