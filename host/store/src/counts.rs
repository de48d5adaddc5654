//! Counters of earlier tool calls, which per-call policy rules read ("at most 20 writes an
//! hour, then ask"; see [`cordon_policy::CountQuery`]). They live in the store so that they
//! hold across restarts, and across hosts sharing a PostgreSQL store: every host adds to the
//! same rows with an upsert, which neither backend lets lose an addition.
//!
//! One row per counter and minute (minutes since the Unix epoch). What the table holds is
//! bounded two ways:
//! - rows of windowed counters go once they are older than the longest window a rule may have
//!   (30 days), plus an hour for hosts whose clocks lag; each store handle prunes at most once
//!   an hour, after an addition;
//! - a session's own counters (`session:ID|…`, which count over the session's whole life) are
//!   kept at minute 0, so pruning by age never resets them however long the session lives,
//!   and they are deleted with the session, in the same transaction.

use std::sync::atomic::Ordering;

use cordon_agent::cordon_policy::CountQuery;
use cordon_core::now_ms;
use sqlx::Row;

use crate::{Store, StoreError, on_backend};

/// The longest window a rule may count over, in minutes (`cordon_policy::Window::parse`
/// refuses longer ones).
pub const LONGEST_WINDOW_MINUTES: i64 = 30 * 24 * 60;

/// How much longer than the longest window rows are kept: a host whose clock lags the pruning
/// host's by less than this still counts its whole window.
const PRUNE_SLACK_MINUTES: i64 = 60;

/// How often one store handle (and its clones) prunes, at most, in minutes.
const PRUNE_EVERY_MINUTES: i64 = 60;

/// The minute a session's own counters are kept at.
const SESSION_MINUTE: i64 = 0;

/// Counters per statement: SQLite joins at most 500 selects into one, and both backends bound
/// the number of parameters.
const PER_STATEMENT: usize = 100;

/// Deletes the counters of a session, all minutes: `$1` and `$2` from [`session_range`]. A
/// range on the primary key rather than `LIKE`, which would read `_` in a session's name as
/// any character (and, in SQLite, ignore case).
pub(crate) const DELETE_SESSION_COUNTS: &str =
    "DELETE FROM call_counts WHERE counter >= $1 AND counter < $2";

/// The keys of session `id`'s counters are those in `[start, end)`: `session:ID|` and
/// everything after it, up to `session:ID}` (`}` follows `|` in byte order, which both
/// backends sort the column by).
pub(crate) fn session_range(id: &str) -> (String, String) {
    (format!("session:{id}|"), format!("session:{id}}}"))
}

/// Whether `key` is one of `session`'s own counters, kept at minute 0 until it is deleted.
fn kept_for_session(key: &str, session: Option<&str>) -> bool {
    session.is_some_and(|id| {
        key.strip_prefix("session:")
            .and_then(|rest| rest.strip_prefix(id))
            .is_some_and(|rest| rest.starts_with('|'))
    })
}

/// One statement counting `n` counters: `$2i+1` the counter, `$2i+2` the first minute. Each
/// part answers with its place, so the order of the answer does not matter.
fn count_sql(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "SELECT CAST({i} AS BIGINT) AS i, CAST(COALESCE(SUM(calls), 0) AS BIGINT) AS n \
                 FROM call_counts WHERE counter = ${} AND minute >= ${}",
                2 * i + 1,
                2 * i + 2
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// One statement adding one to `n` counters: `$2i+1` the counter, `$2i+2` its minute.
fn add_sql(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| format!("(${}, ${}, 1)", 2 * i + 1, 2 * i + 2))
        .collect();
    format!(
        "INSERT INTO call_counts (counter, minute, calls) VALUES {} \
         ON CONFLICT (counter, minute) DO UPDATE SET calls = call_counts.calls + 1",
        rows.join(", ")
    )
}

impl Store {
    /// How many calls each of `queries` counts: the sum over its key's minutes from its
    /// `since_minute` on, in the order asked. For `session`'s own counters (kept at minute 0)
    /// the whole session is counted whatever `since_minute` says, which never counts less than
    /// asked.
    pub async fn count_calls(
        &self,
        queries: &[CountQuery],
        session: Option<&str>,
    ) -> Result<Vec<u64>, StoreError> {
        // Rules of one tool often count the same key over the same window (every rule of a
        // kind reading `of = "tool"`, `within = "1h"`): each such pair is counted once.
        let mut distinct: Vec<(&str, i64)> = Vec::new();
        let mut seen: std::collections::HashMap<(&str, i64), usize> = Default::default();
        let places: Vec<usize> = queries
            .iter()
            .map(|q| {
                let since = if kept_for_session(&q.key, session) {
                    q.since_minute.min(SESSION_MINUTE)
                } else {
                    q.since_minute
                };
                *seen.entry((q.key.as_str(), since)).or_insert_with(|| {
                    distinct.push((q.key.as_str(), since));
                    distinct.len() - 1
                })
            })
            .collect();
        let mut counted = vec![0; distinct.len()];
        for (chunk_index, chunk) in distinct.chunks(PER_STATEMENT).enumerate() {
            let rows = on_backend!(self, pool => {
                // Built of numbers only: the counters go as parameters.
                let mut query = sqlx::query(sqlx::AssertSqlSafe(count_sql(chunk.len())));
                for (key, since) in chunk {
                    query = query.bind(*key).bind(*since);
                }
                query
                    .fetch_all(pool)
                    .await
                    .and_then(|rows| {
                        rows.iter()
                            .map(|r| Ok((r.try_get::<i64, _>("i")?, r.try_get::<i64, _>("n")?)))
                            .collect::<Result<Vec<_>, sqlx::Error>>()
                    })
            })
            .map_err(|e| self.failed(e))?;
            for (i, n) in rows {
                let place = chunk_index * PER_STATEMENT + usize::try_from(i).unwrap_or(usize::MAX);
                if let Some(count) = counted.get_mut(place) {
                    *count = u64::try_from(n).unwrap_or(0);
                }
            }
        }
        Ok(places.into_iter().map(|p| counted[p]).collect())
    }

    /// A call that runs: adds one to each counter `keys` names (once each, however often it is
    /// named) at `minute`, or at minute 0 for `session`'s own counters. Atomic: all are added
    /// or none. At most once an hour per store handle, rows older than any window are then
    /// pruned (see the module docs).
    pub async fn add_calls(
        &self,
        keys: &[String],
        minute: i64,
        session: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut rows: Vec<(&str, i64)> = keys
            .iter()
            .map(|k| {
                let at = if kept_for_session(k, session) {
                    SESSION_MINUTE
                } else {
                    // Minute 0 and before are the sessions'; a clock that says otherwise is
                    // counted at the first minute after.
                    minute.max(SESSION_MINUTE + 1)
                };
                (k.as_str(), at)
            })
            .collect();
        // In one order on every host, so that two hosts adding to the same counters at once
        // wait for each other rather than deadlock.
        rows.sort_unstable();
        rows.dedup();
        // The statement adding one to each of a chunk of rows (built of numbers only: the
        // counters go as parameters).
        macro_rules! add {
            ($chunk:expr) => {{
                let mut query = sqlx::query(sqlx::AssertSqlSafe(add_sql($chunk.len())));
                for (key, at) in $chunk {
                    query = query.bind(*key).bind(*at);
                }
                query
            }};
        }
        match rows.len() {
            0 => {}
            // The usual case: one statement, one round trip.
            n if n <= PER_STATEMENT => {
                on_backend!(self, pool => add!(&rows).execute(pool).await.map(|_| ()))
                    .map_err(|e| self.failed(e))?;
            }
            _ => {
                on_backend!(self, pool => async {
                    let mut tx = pool.begin().await?;
                    for chunk in rows.chunks(PER_STATEMENT) {
                        add!(chunk).execute(&mut *tx).await?;
                    }
                    tx.commit().await
                }.await)
                .map_err(|e| self.failed(e))?;
            }
        }
        self.prune_now_and_then().await;
        Ok(())
    }

    /// Deletes the rows of windowed counters that no window reaching back from `now_minute`
    /// counts any more (a session's own counters stay); returns how many went.
    pub async fn prune_call_counts(&self, now_minute: i64) -> Result<u64, StoreError> {
        const SQL: &str = "DELETE FROM call_counts WHERE minute > $1 AND minute < $2";
        let before = now_minute - LONGEST_WINDOW_MINUTES - PRUNE_SLACK_MINUTES;
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(SESSION_MINUTE)
            .bind(before)
            .execute(pool)
            .await
            .map(|done| done.rows_affected()))
        .map_err(|e| self.failed(e))
    }

    /// Prunes if this handle has not in the last hour. A failure is only logged: the call
    /// was counted, and the next hour tries again.
    async fn prune_now_and_then(&self) {
        let now = now_ms().div_euclid(60_000);
        let last = self.counts_pruned.load(Ordering::Relaxed);
        if now.saturating_sub(last) < PRUNE_EVERY_MINUTES
            || self
                .counts_pruned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        match self.prune_call_counts(now).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(rows = n, "pruned old call counts"),
            Err(e) => tracing::warn!("cannot prune old call counts: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_keeps_only_its_own_counters() {
        let s = Some("s1");
        assert!(kept_for_session("session:s1|plugin:sql", s));
        assert!(kept_for_session("session:s1|caller:ci/|tool:a.b", s));
        // Another session whose name starts the same, or no session: counted by the minute.
        assert!(!kept_for_session("session:s10|plugin:sql", s));
        assert!(!kept_for_session("session:s1", s));
        assert!(!kept_for_session("rule:writes", s));
        assert!(!kept_for_session("session:s1|plugin:sql", None));
    }

    #[test]
    fn a_sessions_range_holds_its_keys_and_no_others() {
        let (start, end) = session_range("a_b");
        let inside = |k: &str| k >= start.as_str() && k < end.as_str();
        assert!(inside("session:a_b|plugin:sql"));
        assert!(inside("session:a_b|"));
        for other in [
            "session:aXb|plugin:sql",
            "session:a_b",
            "session:a_bc|plugin:sql",
            "session:a_b}",
            "session:A_B|plugin:sql",
            "rule:writes",
        ] {
            assert!(!inside(other), "{other}");
        }
    }

    #[test]
    fn statements_number_their_parameters_in_pairs() {
        assert_eq!(
            count_sql(2),
            "SELECT CAST(0 AS BIGINT) AS i, CAST(COALESCE(SUM(calls), 0) AS BIGINT) AS n \
             FROM call_counts WHERE counter = $1 AND minute >= $2 UNION ALL \
             SELECT CAST(1 AS BIGINT) AS i, CAST(COALESCE(SUM(calls), 0) AS BIGINT) AS n \
             FROM call_counts WHERE counter = $3 AND minute >= $4"
        );
        assert!(add_sql(2).contains("VALUES ($1, $2, 1), ($3, $4, 1) ON CONFLICT"));
    }
}
