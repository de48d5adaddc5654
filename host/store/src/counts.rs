//! Counters of earlier tool calls, which per-call policy rules read ("at most 20 writes an
//! hour, then ask"; see [`cordon_policy::CountQuery`]). They live in the store so that they
//! hold across restarts, and across hosts sharing a PostgreSQL store: every host adds to the
//! same rows with an upsert, which neither backend lets lose an addition. A host making calls
//! in quick succession reserves places for its next calls ahead ([`crate::ahead`]), so most
//! of its calls need no round trip to the store.
//!
//! One row per counter and minute (minutes since the Unix epoch). What the table holds is
//! bounded two ways:
//! - rows of windowed counters go once they are older than the longest window a rule may have
//!   (30 days), plus an hour for hosts whose clocks lag; each store handle prunes at most once
//!   an hour, after an addition;
//! - a session's own counters (`session:ID|…`, which count over the session's whole life) are
//!   kept at minute 0, so pruning by age never resets them however long the session lives,
//!   and they are deleted with the session, in the same transaction.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cordon_agent::cordon_policy::{CountQuery, Reservation};
use cordon_core::now_ms;
use sqlx::Row;

use crate::ahead::{DEFAULT_AHEAD, MOST_AHEAD};
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

/// One statement counting `n` counters: `$3i+1` the counter, minutes from `$3i+2` up to but
/// not including `$3i+3`. Each part answers with its place, so the order of the answer does
/// not matter.
fn count_sql(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "SELECT CAST({i} AS BIGINT) AS i, CAST(COALESCE(SUM(calls), 0) AS BIGINT) AS n \
                 FROM call_counts WHERE counter = ${} AND minute >= ${} AND minute < ${}",
                3 * i + 1,
                3 * i + 2,
                3 * i + 3
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// One statement adding to `n` counters: `$3i+1` the counter, `$3i+2` its minute, `$3i+3`
/// how many calls. It answers nothing.
fn add_sql(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
        .collect();
    format!(
        "INSERT INTO call_counts (counter, minute, calls) VALUES {} \
         ON CONFLICT (counter, minute) DO UPDATE SET calls = call_counts.calls + excluded.calls",
        rows.join(", ")
    )
}

/// One statement reserving: adds to `n` counters as [`add_sql`] does, and answers for each
/// its count after the addition at the minute added to (`after`: every addition that reached
/// the row first, from any host, since both backends make additions to one row wait for
/// each other), and the sum of its earlier minutes from `$4i+4` on (`earlier`). Parameters
/// go in fours: counter, minute, calls, first minute counted.
fn reserve_sql(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| format!("(${}, ${}, ${})", 4 * i + 1, 4 * i + 2, 4 * i + 3))
        .collect();
    let since: String = (0..n)
        .map(|i| format!(" WHEN ${} THEN ${}", 4 * i + 1, 4 * i + 4))
        .collect();
    format!(
        "INSERT INTO call_counts (counter, minute, calls) VALUES {} \
         ON CONFLICT (counter, minute) DO UPDATE SET calls = call_counts.calls + excluded.calls \
         RETURNING counter, CAST(calls AS BIGINT) AS after, \
         (SELECT CAST(COALESCE(SUM(c.calls), 0) AS BIGINT) FROM call_counts c \
         WHERE c.counter = call_counts.counter AND c.minute < call_counts.minute \
         AND c.minute >= CASE call_counts.counter{since} ELSE call_counts.minute END) AS earlier",
        rows.join(", ")
    )
}

/// The windows asked of `key` (their first minutes), from [`Store::reserve_calls`].
fn windows_of<'w>(windows: &'w HashMap<&str, Vec<i64>>, key: &str) -> &'w [i64] {
    windows.get(key).map_or(&[], Vec::as_slice)
}

/// The first minute `q` counts: for `session`'s own counters (kept at minute 0) the
/// session's whole life, whatever `q` says, which never counts less than asked.
fn first_minute(q: &CountQuery, session: Option<&str>) -> i64 {
    if kept_for_session(&q.key, session) {
        q.since_minute.min(SESSION_MINUTE)
    } else {
        q.since_minute
    }
}

/// The rows `keys` add to at `minute` (minute 0 for `session`'s own counters), each with how
/// often it is named, in one order on every host, so that hosts adding to the same counters
/// at once wait for each other rather than deadlock.
fn rows_of<'k>(
    keys: impl IntoIterator<Item = &'k str>,
    minute: i64,
    session: Option<&str>,
) -> Vec<(&'k str, i64, i64)> {
    // A sorted vector rather than a map: a call names a handful of keys, on every call.
    let mut rows: Vec<(&str, i64, i64)> = keys
        .into_iter()
        .map(|k| {
            let at = if kept_for_session(k, session) {
                SESSION_MINUTE
            } else {
                // Minute 0 and before are the sessions'; a clock that says otherwise is
                // counted at the first minute after.
                minute.max(SESSION_MINUTE + 1)
            };
            (k, at, 1)
        })
        .collect();
    rows.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    rows.dedup_by(|later, kept| {
        let same = (later.0, later.1) == (kept.0, kept.1);
        if same {
            kept.2 += later.2;
        }
        same
    });
    rows
}

/// The different `(key, first minute)` pairs of `queries`, and each query's place among
/// them. A tool's queries are different pairs already (the policy asks once for counters
/// reading the same count), but the calls of one model answer may ask for the same pair
/// from several tools (`of = "plugin"`), or be at minutes a session's own counters make the
/// same: each pair is counted once.
fn distinct_windows<'q>(
    queries: &'q [CountQuery],
    session: Option<&str>,
) -> (Vec<(&'q str, i64)>, Vec<usize>) {
    let mut distinct: Vec<(&str, i64)> = Vec::new();
    let mut seen: HashMap<(&str, i64), usize> = HashMap::new();
    let places = queries
        .iter()
        .map(|q| {
            let pair = (&*q.key, first_minute(q, session));
            *seen.entry(pair).or_insert_with(|| {
                distinct.push(pair);
                distinct.len() - 1
            })
        })
        .collect();
    (distinct, places)
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
        let (distinct, places) = distinct_windows(queries, session);
        let bounds: Vec<(&str, i64, i64)> = distinct
            .into_iter()
            .map(|(key, since)| (key, since, i64::MAX))
            .collect();
        let counted = self.count_between(&bounds).await?;
        Ok(places.into_iter().map(|p| counted[p]).collect())
    }

    /// Calls that run: adds one to each counter `keys` names, for each time it is named (the
    /// keys of several calls may name one counter), at `minute`, or at minute 0 for
    /// `session`'s own counters. Atomic: all are added or none. At most once an hour per
    /// store handle, rows older than any window are then pruned (see the module docs).
    pub async fn add_calls(
        &self,
        keys: &[String],
        minute: i64,
        session: Option<&str>,
    ) -> Result<(), StoreError> {
        // Spare places this host reserved ahead are in the store already.
        let rows: Vec<(&str, i64, i64)> = rows_of(keys.iter().map(String::as_str), minute, session)
            .into_iter()
            .filter(|&(key, at, n)| !self.ahead.use_spare(key, at, n))
            .collect();
        // The statement adding to each of a chunk of rows (built of numbers only: the
        // counters go as parameters).
        macro_rules! add {
            ($chunk:expr) => {{
                let mut query = sqlx::query(sqlx::AssertSqlSafe(add_sql($chunk.len())));
                for (key, at, n) in $chunk {
                    query = query.bind(*key).bind(*at).bind(*n);
                }
                query
            }};
        }
        if !rows.is_empty() {
            tracing::trace!(rows = rows.len(), "policy counters added to in the store");
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

    /// Calls about to be decided: adds them to the counters `adds` names (as
    /// [`Store::add_calls`] does) and answers `queries` as [`Store::count_calls`] would have
    /// just before, in one round trip for the usual call, or none when this host holds places
    /// reserved ahead (see [`crate::ahead`]).
    ///
    /// Why not count, decide and then add: two calls decided at once (two sessions, two
    /// hosts) would both read the count before either added to it, so both could pass the
    /// last place under a limit. Reserved, each sees every call that reserved before it: the
    /// additions to one row wait for each other in both backends, and each answers the row as
    /// it left it. Only the minute being added to is ordered so; two hosts whose clocks put
    /// calls on either side of a minute's end do not see each other's call at that instant.
    ///
    /// A reserved call that then does not run, or is not counted by a counter it was reserved
    /// on, is taken back with [`Store::release_calls`].
    pub async fn reserve_calls(
        &self,
        adds: &[Reservation],
        queries: &[CountQuery],
        minute: i64,
        session: Option<&str>,
    ) -> Result<Vec<u64>, StoreError> {
        let rows = rows_of(adds.iter().map(|a| a.key.as_str()), minute, session);
        if rows.is_empty() {
            return self.count_calls(queries, session).await;
        }
        // The usual call: every query reads a row the call is reserved on, and this host
        // holds places ahead on each (no map is built: this runs on every call).
        let wanted: Option<Vec<(usize, i64)>> = queries
            .iter()
            .map(|q| {
                let row = rows.iter().position(|r| r.0 == &*q.key)?;
                Some((row, first_minute(q, session)))
            })
            .collect();
        if let Some(found) = wanted.and_then(|w| self.ahead.take_counted(&rows, &w)) {
            return Ok(found
                .into_iter()
                .map(|n| u64::try_from(n).unwrap_or(0))
                .collect());
        }
        let (distinct, places) = distinct_windows(queries, session);
        // The windows asked of each counter, the first asked first: the store answers the
        // first with the reservation, and the others are counted beside it.
        let mut windows: HashMap<&str, Vec<i64>> = Default::default();
        for &(key, since) in &distinct {
            windows.entry(key).or_default().push(since);
        }
        // For each row reserved: the count before the call's first place, and the calls in
        // the minutes before the row's from each first minute asked.
        let mut answered: HashMap<&str, (i64, HashMap<i64, i64>)> = Default::default();
        let wanted: Vec<(&str, i64, i64, &[i64])> = rows
            .iter()
            .map(|&(key, at, n)| (key, at, n, windows_of(&windows, key)))
            .collect();
        if let Some(taken) = self.ahead.take_all(&wanted) {
            for ((key, .., w), t) in wanted.into_iter().zip(taken) {
                answered.insert(key, (t.before, w.iter().copied().zip(t.earlier).collect()));
            }
        } else {
            let now = now_ms();
            // A row's places ahead: the least its reservations allow.
            let most = |key: &str| {
                adds.iter()
                    .filter(|a| a.key == key)
                    .map(|a| a.most_ahead.map_or(DEFAULT_AHEAD, i64::from))
                    .min()
                    .unwrap_or(DEFAULT_AHEAD)
                    .min(MOST_AHEAD)
            };
            let to_store: Vec<_> = rows
                .iter()
                .map(|&(key, at, n)| {
                    let most = most(key);
                    (key, at, n, n + self.ahead.to_ask(key, at, now, most), most)
                })
                .collect();
            self.reserve_in_store(&to_store, &windows, &mut answered)
                .await?;
        }
        // Counters not reserved on are counted.
        let mut counted = vec![0u64; distinct.len()];
        let mut unreserved = Vec::new();
        let mut rest: Vec<(&str, i64, i64)> = Vec::new();
        for (at, &(key, since)) in distinct.iter().enumerate() {
            match answered.get(key) {
                Some((before, earlier)) => {
                    let sum = before.saturating_add(earlier.get(&since).copied().unwrap_or(0));
                    counted[at] = u64::try_from(sum).unwrap_or(0);
                }
                None => {
                    unreserved.push(at);
                    rest.push((key, since, i64::MAX));
                }
            }
        }
        if !rest.is_empty() {
            let found = self.count_between(&rest).await?;
            for (at, n) in unreserved.into_iter().zip(found) {
                counted[at] = n;
            }
        }
        Ok(places.into_iter().map(|at| counted[at]).collect())
    }

    /// The store's part of [`Store::reserve_calls`]: rows `(counter, minute, calls, places
    /// asked, most places ahead)` are added to, each answering its first window in `windows_of`; the others are
    /// counted up to the row's minute. What was reserved is recorded as this host's blocks.
    async fn reserve_in_store<'k>(
        &self,
        rows: &[(&'k str, i64, i64, i64, i64)],
        windows: &HashMap<&str, Vec<i64>>,
        answered: &mut HashMap<&'k str, (i64, HashMap<i64, i64>)>,
    ) -> Result<(), StoreError> {
        tracing::trace!(rows = rows.len(), "policy counters reserved in the store");
        let mut stranded = Vec::new();
        // Not while spare places are being given back: the row would still count them.
        let _giving_back = self.ahead.giving_back.lock().await;
        // The places in `rows` of the rows added to.
        let mut added: Vec<usize> = Vec::new();
        for (chunk_index, chunk) in rows.chunks(PER_STATEMENT).enumerate() {
            let found = on_backend!(self, pool => {
                let mut query = sqlx::query(sqlx::AssertSqlSafe(reserve_sql(chunk.len())));
                for (key, at, _, asked, _) in chunk {
                    let first = windows_of(windows, key).first().copied().unwrap_or(*at);
                    query = query.bind(*key).bind(*at).bind(*asked).bind(first.min(*at));
                }
                query.fetch_all(pool).await.and_then(|rows| {
                    rows.iter()
                        .map(|r| {
                            Ok((
                                r.try_get::<String, _>("counter")?,
                                r.try_get::<i64, _>("after")?,
                                r.try_get::<i64, _>("earlier")?,
                            ))
                        })
                        .collect::<Result<Vec<_>, sqlx::Error>>()
                })
            })
            .map_err(|e| self.failed(e))?;
            // Recorded at once, so that the places reserved are this host's whatever fails
            // later: spare ones are given back in time.
            let now = now_ms();
            for (key, after, first_sum) in found {
                if let Some(i) = chunk.iter().position(|(k, ..)| *k == key) {
                    let (key, at, n, asked, most) = chunk[i];
                    let first = windows_of(windows, key).first().copied().unwrap_or(at);
                    let earlier = HashMap::from([(first, first_sum)]);
                    let (before, lost) =
                        self.ahead
                            .record(key, at, (n, asked, after, most), earlier.clone(), now);
                    if lost > 0 {
                        stranded.push((key.to_string(), at, lost));
                    }
                    answered.insert(key, (before, earlier));
                    added.push(chunk_index * PER_STATEMENT + i);
                }
            }
        }
        drop(_giving_back);
        self.prune_now_and_then().await;
        // Second and later windows: the minutes before the row's.
        let mut bounds: Vec<(&str, i64, i64)> = Vec::new();
        for &i in &added {
            let (key, at, ..) = rows[i];
            for since in windows_of(windows, key).iter().skip(1) {
                bounds.push((key, *since, at));
            }
        }
        self.keep_giving_back();
        if !stranded.is_empty()
            && let Err(e) = self.subtract(&stranded).await
        {
            tracing::warn!("spare places on policy counters could not be given back: {e}");
        }
        let sums = self.count_between(&bounds).await?;
        for (&(key, since, at), sum) in bounds.iter().zip(sums) {
            let sum = i64::try_from(sum).unwrap_or(i64::MAX);
            self.ahead.learn(key, at, &[(since, sum)]);
            if let Some((_, earlier)) = answered.get_mut(key) {
                earlier.insert(since, sum);
            }
        }
        Ok(())
    }

    /// Takes back calls [`Store::reserve_calls`] added at `minute` that did not run, or that a
    /// counter does not count after all (a `rule:` counter whose rule did not apply): one for
    /// each time a key is named. A count never goes below zero.
    pub async fn release_calls(
        &self,
        keys: &[String],
        minute: i64,
        session: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut rows: Vec<(String, i64, i64)> = Vec::new();
        let mut over: Vec<(&str, i64)> = Vec::new();
        for (key, at, n) in rows_of(keys.iter().map(String::as_str), minute, session) {
            match self.ahead.give_back(key, at, n) {
                None => rows.push((key.to_string(), at, n)),
                Some(0) => {}
                Some(_) => over.push((key, at)),
            }
        }
        if !rows.is_empty() {
            tracing::trace!(rows = rows.len(), "policy counters taken back in the store");
        }
        self.subtract(&rows).await?;
        if over.is_empty() {
            return Ok(());
        }
        // Spare places past what their rows allow go back as spare places due do.
        let _giving_back = self.ahead.giving_back.lock().await;
        let trimmed: Vec<(String, i64, i64)> = over
            .into_iter()
            .map(|(key, at)| (key.to_string(), at, self.ahead.trim(key, at)))
            .filter(|&(_, _, n)| n > 0)
            .collect();
        self.subtract(&trimmed).await
    }

    /// Takes `calls` off each row `(counter, minute, calls)`, never below zero, in one
    /// transaction.
    async fn subtract(&self, rows: &[(String, i64, i64)]) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE call_counts SET calls = calls - $3 \
                           WHERE counter = $1 AND minute = $2 AND calls >= $3";
        if rows.is_empty() {
            return Ok(());
        }
        on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            for (key, at, n) in rows {
                sqlx::query(SQL).bind(key).bind(*at).bind(*n).execute(&mut *tx).await?;
            }
            tx.commit().await
        }.await)
        .map_err(|e| self.failed(e))
    }

    /// Gives back every spare place reserved ahead (see [`crate::ahead`]): for a process
    /// about to exit (closing the store does it too). A failure is only logged: they stay
    /// counted, never too few.
    pub async fn give_back_spare(&self) {
        self.give_back_due(true).await;
    }

    /// Gives back the spare places reserved ahead that are due, or all of them with `all`.
    async fn give_back_due(&self, all: bool) {
        // Until the store has them back, no reservation may read the row, and a second
        // giving back (closing the store) waits for this one.
        let _giving_back = self.ahead.giving_back.lock().await;
        let due = self.ahead.due(now_ms().div_euclid(60_000), all);
        if let Err(e) = self.subtract(&due).await {
            tracing::warn!("spare places on policy counters could not be given back: {e}");
        }
    }

    /// Makes sure a task gives back spare places once they are due, while any are held.
    fn keep_giving_back(&self) {
        let ahead = &self.ahead;
        if ahead.is_empty() || ahead.returner.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            ahead.returner.store(false, Ordering::SeqCst);
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            // A task dropped with its runtime lets the next reservation start another.
            struct Stopped(Arc<crate::ahead::Ahead>);
            impl Drop for Stopped {
                fn drop(&mut self) {
                    self.0.returner.store(false, Ordering::SeqCst);
                }
            }
            let _stopped = Stopped(store.ahead.clone());
            loop {
                tokio::time::sleep(crate::ahead::IDLE / 2).await;
                store.give_back_due(false).await;
                let ahead = &store.ahead;
                if ahead.is_empty() {
                    ahead.returner.store(false, Ordering::SeqCst);
                    // A block recorded meanwhile saw the task running and started none.
                    if ahead.is_empty() || ahead.returner.swap(true, Ordering::SeqCst) {
                        return;
                    }
                }
            }
        });
    }

    /// The calls under each key in minutes `[from, upto)`, in the order asked.
    async fn count_between(&self, bounds: &[(&str, i64, i64)]) -> Result<Vec<u64>, StoreError> {
        if bounds.is_empty() {
            return Ok(Vec::new());
        }
        tracing::trace!(
            counters = bounds.len(),
            "policy counters counted in the store"
        );
        let mut counted = vec![0u64; bounds.len()];
        for (chunk_index, chunk) in bounds.chunks(PER_STATEMENT).enumerate() {
            let rows = on_backend!(self, pool => {
                // Built of numbers only: the counters go as parameters.
                let mut query = sqlx::query(sqlx::AssertSqlSafe(count_sql(chunk.len())));
                for (key, from, upto) in chunk {
                    query = query.bind(*key).bind(*from).bind(*upto);
                }
                query.fetch_all(pool).await.and_then(|rows| {
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
        Ok(counted)
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
             FROM call_counts WHERE counter = $1 AND minute >= $2 AND minute < $3 UNION ALL \
             SELECT CAST(1 AS BIGINT) AS i, CAST(COALESCE(SUM(calls), 0) AS BIGINT) AS n \
             FROM call_counts WHERE counter = $4 AND minute >= $5 AND minute < $6"
        );
        assert!(add_sql(2).contains("VALUES ($1, $2, $3), ($4, $5, $6) ON CONFLICT"));
        let reserve = reserve_sql(2);
        assert!(reserve.contains("VALUES ($1, $2, $3), ($5, $6, $7) ON CONFLICT"));
        assert!(reserve.contains("CASE call_counts.counter WHEN $1 THEN $4 WHEN $5 THEN $8 ELSE"));
    }

    #[test]
    fn a_key_named_twice_adds_two() {
        let keys = ["tool:a.b", "plugin:a", "tool:a.b", "session:s|tool:a.b"].map(String::from);
        assert_eq!(
            rows_of(keys.iter().map(String::as_str), 100, Some("s")),
            [
                ("plugin:a", 100, 1),
                ("session:s|tool:a.b", 0, 1),
                ("tool:a.b", 100, 2)
            ]
        );
    }
}
