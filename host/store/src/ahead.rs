//! Calls reserved ahead on policy counters, so that a host making many calls does not pay a
//! store round trip for each (see [`crate::Store::reserve_calls`]).
//!
//! A counter's row for a minute is a line of places, one per call: a call reserved on it is
//! given the next place, and the number of places before it is the count its rules read. The
//! store hands places out by adding to the row, so two hosts never get the same place. A
//! host that keeps coming back to a row while no other host takes places from it asks for
//! more than the call needs (1, 2, 4, … up to what the counter's rules allow, see
//! `cordon_policy::places_ahead`, at most [`MOST_AHEAD`] and [`DEFAULT_AHEAD`] where no
//! threshold is known; halved each time another host took places between two of its visits) and gives its later calls the
//! spare places itself, in order, without asking the store again. Each of those calls still
//! sees every call that holds an earlier place, whichever host holds it; a call of another
//! host that comes meanwhile is given a place after the spare ones, and so counts them:
//! - a spare place counts as a call until it is used or given back, so a count is never too
//!   low and a limit is never passed; at worst another host's call sees about a sixteenth
//!   of the counter's least threshold (or [`DEFAULT_AHEAD`]) calls too many (more by the places of calls that did not run and
//!   were given back to the block), for as long as the spare places are held;
//! - spare places are given back once this host has not used them for [`IDLE`], once their
//!   minute is over, and when the store is closed; a host killed with spare places leaves
//!   them counted until the window passes them;
//! - for the first [`SETTLE`] of each minute nothing is reserved ahead and no place is
//!   handed out without the store, so a call given a place by its host reads the earlier
//!   minutes' counts as they stood after every host whose clock is less than that behind
//!   (plus the time its statements take) had finished adding to them.
//!
//! Precedence, for a call's reservation on one row:
//! 1. spare places of this host's block for the row, if it has enough and knows the sums of
//!    every window the call's rules count over;
//! 2. otherwise the store, asked for the call's places and as many spare as the row's block
//!    has earned (none in a minute's first [`SETTLE`]).
//!
//! A call that does not run gives its places back. Which places were its own is not known
//! (calls are settled by counter), so the block takes back its last places instead, which the
//! next calls are given again; that is never fewer calls counted below any place, as long as
//! this host's block lies above every place it handed out on the row before. The block then
//! holds no more spare places than the row allows: those past it go back to the store from
//! its top, as spare places due do, since held ones count as calls also for this host's own
//! calls that go to the store. So this happens
//! only on a windowed counter's row whose block went on from the first place this host
//! handed out in the minute (or from above every one). Otherwise the places go back to the
//! store, as without blocks: the store's count goes down, and a later place may be given
//! twice, which is still never fewer calls counted below any place.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The most places reserved ahead on one row.
pub(crate) const MOST_AHEAD: i64 = 64;

/// The most places reserved ahead on a row that no query of the call sizes (a counter the
/// policy cannot see a threshold of, or that only other tools' rules read).
pub(crate) const DEFAULT_AHEAD: i64 = 16;

/// Spare places not used for this long are given back.
pub(crate) const IDLE: Duration = Duration::from_millis(500);

/// How long into each minute nothing is reserved ahead (see the module docs).
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// The spare places of one row, and what this host knows of the minutes before it.
#[derive(Debug)]
struct Block {
    /// The first place of the block: places from here on up to `next` were handed out by
    /// this host.
    start: i64,
    /// The next place to hand out.
    next: i64,
    /// One past the last place this host holds: `[next, end)` are spare.
    end: i64,
    /// How many spare places to ask for at the next visit to the store.
    earned: i64,
    /// The calls in the minutes before the row's, from each first minute counted, as the
    /// store answered at the last visit.
    earlier: HashMap<i64, i64>,
    /// When a place was last handed out or given back.
    used: Instant,
    /// The highest place this host handed out on the row.
    highest: i64,
    /// Whether a call that did not run may give its places back to the block (see the
    /// module docs).
    local: bool,
    /// Whether `earlier` was read after the minute's first [`SETTLE`] (or the row is a
    /// session's own): only then are places handed out without the store.
    settled: bool,
    /// The most spare places the row's reservations allow, as of the last visit to the
    /// store: places given back by calls that did not run are held only up to it.
    most: i64,
}

/// Whether the earlier minutes' counts are settled at `now_ms` for a row of `minute`: a
/// session's own counters (minute 0) have no minutes before them.
fn settled(minute: i64, now_ms: i64) -> bool {
    minute == 0 || now_ms.rem_euclid(60_000) >= SETTLE.as_millis() as i64
}

impl Block {
    /// How many spare places it holds past what its row allows.
    fn past_most(&self) -> i64 {
        (self.end - self.next - self.most).max(0)
    }

    /// Hands out the next `n` places; answers the first.
    fn hand_out(&mut self, n: i64) -> i64 {
        let first = self.next;
        self.next += n;
        self.highest = self.highest.max(self.next - 1);
        self.used = Instant::now();
        first
    }
}

/// The blocks of one store handle and its clones, by counter and minute (looked up by the
/// counter without making a key, since a call looks its rows up on every reservation).
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    blocks: Mutex<Blocks>,
    /// Whether a task gives back the spare places that are due.
    pub(crate) returner: AtomicBool,
    /// Held while spare places go back to the store, and while places are reserved there.
    pub(crate) giving_back: tokio::sync::Mutex<()>,
}

/// Hashed with foldhash rather than SipHash: the keys are this host's own counters' names,
/// looked up several times on every call.
type Blocks = HashMap<String, HashMap<i64, Block, Fast>, Fast>;
type Fast = foldhash::fast::RandomState;

/// The block of row (`key`, `minute`).
fn block_of<'b>(blocks: &'b mut Blocks, key: &str, minute: i64) -> Option<&'b mut Block> {
    blocks.get_mut(key)?.get_mut(&minute)
}

/// A row's places handed out without the store: the count before the first, and the sums of
/// the earlier minutes asked for, in the order asked.
pub(crate) struct Taken {
    pub(crate) before: i64,
    pub(crate) earlier: Vec<i64>,
}

impl Ahead {
    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The places of every row `(counter, minute, calls, first minutes of its windows)` from
    /// this host's spare ones, if it holds enough on each and knows the sums of the earlier
    /// minutes from each first minute; otherwise none, and they all go to the store (so that
    /// the rows of a call refill together, in one statement).
    pub(crate) fn take_all(&self, rows: &[(&str, i64, i64, &[i64])]) -> Option<Vec<Taken>> {
        let mut blocks = self.lock();
        let mut found = Vec::with_capacity(rows.len());
        for &(key, minute, n, sinces) in rows {
            let block = blocks.get(key)?.get(&minute)?;
            if !block.settled || block.end - block.next < n {
                return None;
            }
            let earlier = sinces
                .iter()
                .map(|s| block.earlier.get(s).copied())
                .collect::<Option<Vec<i64>>>()?;
            found.push(earlier);
        }
        let taken = rows
            .iter()
            .zip(found)
            .filter_map(|(&(key, minute, n, _), earlier)| {
                let block = block_of(&mut blocks, key, minute)?;
                Some(Taken {
                    before: block.hand_out(n),
                    earlier,
                })
            })
            .collect();
        Some(taken)
    }

    /// [`Ahead::take_all`] for the usual call, answering counts rather than places: each of
    /// `wanted` (a row of `rows` and the first minute it counts from) is the count before the
    /// call's first place on the row plus the row's earlier minutes from that first minute.
    /// All rows are taken from spare places, or none (`None`, and they all go to the store).
    /// `rows` are distinct (`counts::rows_of` sums a row named twice), as for `take_all`:
    /// each row's spare places are checked once, before any is handed out.
    pub(crate) fn take_counted(
        &self,
        rows: &[(&str, i64, i64)],
        wanted: &[(usize, i64)],
    ) -> Option<Vec<i64>> {
        let mut blocks = self.lock();
        for (at, &(key, minute, n)) in rows.iter().enumerate() {
            let block = blocks.get(key)?.get(&minute)?;
            if !block.settled || block.end - block.next < n {
                return None;
            }
            for &(_, first) in wanted.iter().filter(|(row, _)| *row == at) {
                block.earlier.get(&first)?;
            }
        }
        // Each row's block looked up once more: its places handed out and its counts read.
        let mut counts = vec![0; wanted.len()];
        for (at, &(key, minute, n)) in rows.iter().enumerate() {
            let block = block_of(&mut blocks, key, minute)?;
            let before = block.hand_out(n);
            for (count, &(_, first)) in counts
                .iter_mut()
                .zip(wanted)
                .filter(|(_, (row, _))| *row == at)
            {
                *count = before.saturating_add(*block.earlier.get(&first)?);
            }
        }
        Some(counts)
    }

    /// How many places to ask the store for beyond the call's on row (`key`, `minute`), at
    /// `now_ms`: enough to bring the spare ones to what the block has earned, and to no more
    /// than `most`.
    pub(crate) fn to_ask(&self, key: &str, minute: i64, now_ms: i64, most: i64) -> i64 {
        let mut blocks = self.lock();
        let Some(block) = block_of(&mut blocks, key, minute) else {
            return 0;
        };
        // Kept at the row's most, so that another host's places halve what it allows.
        block.earned = block.earned.min(most);
        if !settled(minute, now_ms) {
            return 0;
        }
        (block.earned - (block.end - block.next)).max(0)
    }

    /// What the store answered for row (`key`, `minute`): it added `asked` places (the
    /// call's `n` and the spare ones), leaving the row at `after`, and the minutes before
    /// sum to `earlier` from each first minute. Returns the count before the call's first
    /// place. Spare places left of an earlier block that this one does not follow on from
    /// are returned, to be given back to the store. `now_ms` is when the store answered.
    pub(crate) fn record(
        &self,
        key: &str,
        minute: i64,
        (n, asked, after, most): (i64, i64, i64, i64),
        earlier: HashMap<i64, i64>,
        now_ms: i64,
    ) -> (i64, i64) {
        let mut blocks = self.lock();
        let first = after - asked;
        let now = Instant::now();
        let block = blocks
            .entry(key.to_string())
            .or_default()
            .entry(minute)
            .or_insert_with(|| Block {
                start: first,
                next: first,
                end: first,
                earned: 0,
                earlier: HashMap::new(),
                used: now,
                highest: -1,
                local: true,
                settled: false,
                most,
            });
        let mut stranded = 0;
        if block.end == first {
            // No other host took places since this one's last: the block goes on, and may
            // reserve further ahead next time.
            block.earned = (block.earned * 2).clamp(1, MOST_AHEAD);
        } else {
            stranded = block.end - block.next;
            if first <= block.highest {
                block.local = false;
            }
            block.start = first;
            block.next = first;
            // Halved, not reset: another process that took places once (and may now be
            // idle) is not a contest for every call; hosts that do contend halve it at
            // each visit.
            block.earned /= 2;
        }
        block.end = after;
        block.most = most;
        block.earlier = earlier;
        block.settled = settled(minute, now_ms);
        (block.hand_out(n), stranded)
    }

    /// The sums of more windows of row (`key`, `minute`), counted after [`Ahead::record`].
    pub(crate) fn learn(&self, key: &str, minute: i64, sums: &[(i64, i64)]) {
        if let Some(block) = block_of(&mut self.lock(), key, minute) {
            block.earlier.extend(sums.iter().copied());
        }
    }

    /// Gives back `n` places of row (`key`, `minute`) of a call that did not run, if the
    /// block may take them (see the module docs): the next calls take them again, and the
    /// answer is how many spare places the block now holds past what the row allows (to go
    /// back to the store, see [`Ahead::trim`]). Otherwise (`None`) they go back to the store.
    pub(crate) fn give_back(&self, key: &str, minute: i64, n: i64) -> Option<i64> {
        match block_of(&mut self.lock(), key, minute) {
            Some(block) if minute > 0 && block.local && block.next - block.start >= n => {
                block.next -= n;
                block.used = Instant::now();
                Some(block.past_most())
            }
            _ => None,
        }
    }

    /// Takes the spare places past what row (`key`, `minute`) allows off the top of its
    /// block, to be given back to the store (under [`Ahead::giving_back`], as spare places
    /// due are): places given back by calls that did not run. Held, they would still count
    /// in the store, also for this host's own calls that go there (in a minute's first
    /// [`SETTLE`], or in a later minute's window): a row that allows no places ahead, for a
    /// rule that asks from the first call, would read a call that never ran.
    pub(crate) fn trim(&self, key: &str, minute: i64) -> i64 {
        match block_of(&mut self.lock(), key, minute) {
            Some(block) => {
                let over = block.past_most();
                block.end -= over;
                over
            }
            None => 0,
        }
    }

    /// `n` spare places of row (`key`, `minute`) for calls counted as they run (already
    /// in the store), if this host holds that many.
    pub(crate) fn use_spare(&self, key: &str, minute: i64, n: i64) -> bool {
        match block_of(&mut self.lock(), key, minute) {
            Some(block) if block.end - block.next >= n => {
                block.hand_out(n);
                true
            }
            _ => false,
        }
    }

    /// The spare places to give back now, as (counter, minute, places): those not used for
    /// [`IDLE`], those of minutes before `minute` (not a session's own, at minute 0), or all
    /// of them with `all`. Blocks of a minute that is over, of a session's own counters once
    /// idle, or all with `all`, are forgotten; the others keep what they know of the
    /// minute's places.
    pub(crate) fn due(&self, minute: i64, all: bool) -> Vec<(String, i64, i64)> {
        let mut blocks = self.lock();
        let now = Instant::now();
        let mut due = Vec::new();
        for (key, rows) in blocks.iter_mut() {
            rows.retain(|at, block| {
                let idle = now.duration_since(block.used) >= IDLE;
                let forget = all || (*at > 0 && *at < minute) || (*at == 0 && idle);
                if (forget || idle) && block.end > block.next {
                    due.push((key.clone(), *at, block.end - block.next));
                    block.end = block.next;
                    block.earned = 0;
                }
                !forget
            });
        }
        blocks.retain(|_, rows| !rows.is_empty());
        due
    }

    /// Whether any block is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(pairs: &[(i64, i64)]) -> HashMap<i64, i64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_host_alone_on_a_row_reserves_further_ahead_each_visit_up_to_the_most() {
        // What a counter's rules allow: none, a few, the default, the most.
        for (most, most_visits) in [(0, 100), (3, 27), (DEFAULT_AHEAD, 10), (MOST_AHEAD, 8)] {
            let ahead = Ahead::default();
            let mut row = 0;
            let mut visits = 0;
            let mut seen = Vec::new();
            let mut most_spare = 0;
            for _ in 0..100 {
                if let Some(t) = ahead
                    .take_all(&[("tool:a.b", 9, 1, &[3])])
                    .map(|mut t| t.remove(0))
                {
                    assert_eq!(t.earlier, vec![7]);
                    seen.push(t.before);
                    continue;
                }
                visits += 1;
                let asked = 1 + ahead.to_ask("tool:a.b", 9, 30_000, most);
                most_spare = most_spare.max(asked - 1);
                row += asked;
                let (before, stranded) = ahead.record(
                    "tool:a.b",
                    9,
                    (1, asked, row, most),
                    sums(&[(3, 7)]),
                    30_000,
                );
                assert_eq!(stranded, 0);
                seen.push(before);
            }
            // Every call saw every call before it, exactly.
            assert_eq!(seen, (0..100).collect::<Vec<i64>>(), "most {most}");
            // 1, 1+1, 1+2, 1+4, … then 1+`most` each time.
            assert_eq!(most_spare, most, "most {most}");
            assert!(visits <= most_visits, "most {most}: {visits} visits");
            assert!(row - 100 <= most, "most {most}: spare {}", row - 100);
        }
    }

    #[test]
    fn counts_taken_from_spare_places_are_those_taken_places_give_and_all_rows_or_none() {
        let (a, b) = (Ahead::default(), Ahead::default());
        for ahead in [&a, &b] {
            // Rows of two counters, each with spare places; the first knows two windows.
            ahead.record("k1", 9, (1, 5, 5, DEFAULT_AHEAD), sums(&[(3, 7)]), 30_000);
            ahead.learn("k1", 9, &[(9, 0)]);
            ahead.record("k2", 9, (1, 3, 12, DEFAULT_AHEAD), sums(&[(9, 0)]), 30_000);
        }
        let rows = [("k1", 9, 1), ("k2", 9, 1)];
        for _ in 0..2 {
            let by_places = a
                .take_all(&[("k1", 9, 1, &[3, 9]), ("k2", 9, 1, &[9])])
                .expect("spare places");
            let counted = b
                .take_counted(&rows, &[(0, 3), (1, 9), (0, 9)])
                .expect("spare places");
            let want = vec![
                by_places[0].before + by_places[0].earlier[0],
                by_places[1].before + by_places[1].earlier[0],
                by_places[0].before + by_places[0].earlier[1],
            ];
            assert_eq!(counted, want);
        }
        // `k2` has no spare place left: neither row is taken from, and nothing changes.
        assert_eq!(b.take_counted(&rows, &[(0, 3)]), None);
        // A window whose sum is not known goes to the store too.
        assert_eq!(b.take_counted(&rows[..1], &[(0, 5)]), None);
        assert_eq!(b.take_counted(&rows[..1], &[(0, 3)]), Some(vec![3 + 7]));
        // One spare place left: a call wanting two goes to the store.
        assert_eq!(b.take_counted(&[("k1", 9, 2)], &[(0, 3)]), None);
        assert_eq!(
            b.take_counted(&[("k1", 9, 1)], &[(0, 3)]),
            Some(vec![4 + 7])
        );

        // In a minute's first seconds nothing is handed out without the store, except on a
        // session's own row (minute 0), which has no minutes before it.
        let c = Ahead::default();
        c.record(
            "k",
            9,
            (1, 4, 4, DEFAULT_AHEAD),
            sums(&[(9, 0)]),
            9 * 60_000 + 1_000,
        );
        c.record(
            "s",
            0,
            (1, 4, 4, DEFAULT_AHEAD),
            sums(&[(0, 0)]),
            9 * 60_000 + 1_000,
        );
        assert_eq!(c.take_counted(&[("k", 9, 1)], &[(0, 9)]), None);
        assert_eq!(c.take_counted(&[("s", 0, 1)], &[(0, 0)]), Some(vec![1]));
        assert_eq!(
            c.take_counted(&[("k", 9, 1), ("s", 0, 1)], &[(1, 0)]),
            None,
            "all rows or none"
        );
        // Two places for one call: the count before the first.
        assert_eq!(c.take_counted(&[("s", 0, 2)], &[(0, 0)]), Some(vec![2]));
        assert_eq!(
            c.take_counted(&[("s", 0, 1)], &[(0, 0)]),
            None,
            "none spare"
        );
    }

    #[test]
    fn another_hosts_places_between_visits_halve_what_is_reserved_ahead_and_its_calls_count_the_spare()
     {
        let ahead = Ahead::default();
        // Two visits alone: the second asks one ahead.
        ahead.record("k", 9, (1, 1, 1, DEFAULT_AHEAD), sums(&[]), 30_000);
        assert_eq!(ahead.to_ask("k", 9, 30_000, DEFAULT_AHEAD), 1);
        let (before, _) = ahead.record("k", 9, (1, 2, 3, DEFAULT_AHEAD), sums(&[]), 30_000);
        assert_eq!(before, 1);
        // Another host's call takes place 3 (it counts our spare place 2 as a call).
        // Our spare place is used by our next call, without the store.
        assert_eq!(
            ahead
                .take_all(&[("k", 9, 1, &[])])
                .map(|mut t| t.remove(0))
                .map(|t| t.before),
            Some(2)
        );
        // Our next visit asks for 1 and 2 ahead and finds the row at 7: another host took
        // place 3, so half as many ahead next time.
        assert_eq!(ahead.to_ask("k", 9, 30_000, DEFAULT_AHEAD), 2);
        let (before, stranded) = ahead.record("k", 9, (1, 3, 7, DEFAULT_AHEAD), sums(&[]), 30_000);
        assert_eq!((before, stranded), (4, 0));
        // It holds places 5 and 6, more than the one ahead it has earned now.
        assert_eq!(ahead.to_ask("k", 9, 30_000, DEFAULT_AHEAD), 0);
        for place in [5, 6] {
            let taken = ahead.take_all(&[("k", 9, 1, &[])]).expect("spare");
            assert_eq!(taken[0].before, place);
        }
        assert_eq!(ahead.to_ask("k", 9, 30_000, DEFAULT_AHEAD), 1);
        // Each visit that finds another host's places halves it.
        ahead.record("k", 9, (1, 2, 10, DEFAULT_AHEAD), sums(&[]), 30_000);
        assert_eq!(ahead.to_ask("k", 9, 30_000, DEFAULT_AHEAD), 0);
    }

    #[test]
    fn another_hosts_places_halve_what_a_row_allows_not_what_it_would_have_earned() {
        let ahead = Ahead::default();
        let mut row = 0;
        let visit = |row: &mut i64| {
            let asked = 1 + ahead.to_ask("k", 9, 30_000, 2);
            *row += asked;
            ahead.record("k", 9, (1, asked, *row, 2), sums(&[]), 30_000);
            while ahead.take_all(&[("k", 9, 1, &[])]).is_some() {}
        };
        for _ in 0..10 {
            visit(&mut row);
        }
        assert_eq!(ahead.to_ask("k", 9, 30_000, 2), 2);
        // Another host takes places: the row allows 2 ahead, so 1 now.
        row += 5;
        visit(&mut row);
        assert_eq!(ahead.to_ask("k", 9, 30_000, 2), 1);
    }

    #[test]
    fn nothing_is_reserved_ahead_in_a_minutes_first_seconds_except_for_a_sessions_own_counters() {
        let ahead = Ahead::default();
        ahead.record("k", 9, (1, 1, 1, DEFAULT_AHEAD), sums(&[]), 30_000);
        ahead.record(
            "session:s|k",
            0,
            (1, 1, 1, DEFAULT_AHEAD),
            sums(&[]),
            30_000,
        );
        assert_eq!(ahead.to_ask("k", 9, 60_000 * 9 + 500, DEFAULT_AHEAD), 0);
        assert_eq!(ahead.to_ask("k", 9, 60_000 * 9 + 2_500, DEFAULT_AHEAD), 1);
        assert_eq!(
            ahead.to_ask("session:s|k", 0, 60_000 * 9 + 500, DEFAULT_AHEAD),
            1
        );
    }

    #[test]
    fn in_a_minutes_first_seconds_a_place_given_back_is_not_handed_out_without_the_store() {
        // The attack: a call read the earlier minutes at second 0.3 and did not run; a host
        // whose clock lags adds to the minute before; a call at second 0.6 must not be
        // given the place back with the count read at 0.3.
        let ahead = Ahead::default();
        ahead.record(
            "k",
            9,
            (1, 1, 1, DEFAULT_AHEAD),
            sums(&[(5, 9)]),
            60_000 * 9 + 300,
        );
        assert_eq!(ahead.give_back("k", 9, 1), Some(0));
        assert!(ahead.take_all(&[("k", 9, 1, &[5])]).is_none());
        // Once the store has been asked again after the minute settled, it is: the call
        // that asked takes the place given back, and the one the store added is spare.
        let (before, _) = ahead.record(
            "k",
            9,
            (1, 1, 2, DEFAULT_AHEAD),
            sums(&[(5, 10)]),
            60_000 * 9 + 2_500,
        );
        assert_eq!(before, 0);
        assert_eq!(ahead.give_back("k", 9, 1), Some(0));
        let taken = ahead.take_all(&[("k", 9, 1, &[5])]).expect("a spare place");
        assert_eq!(taken[0].earlier, vec![10]);
    }

    #[test]
    fn a_call_that_did_not_run_gives_its_place_to_the_next_and_unknown_windows_go_to_the_store() {
        let ahead = Ahead::default();
        ahead.record("k", 9, (1, 1, 1, DEFAULT_AHEAD), sums(&[(5, 2)]), 30_000);
        ahead.record("k", 9, (1, 5, 6, DEFAULT_AHEAD), sums(&[(5, 2)]), 30_000);
        let t = ahead
            .take_all(&[("k", 9, 1, &[5])])
            .map(|mut t| t.remove(0))
            .expect("spare");
        assert_eq!(t.before, 2);
        assert_eq!(ahead.give_back("k", 9, 1), Some(0));
        assert_eq!(
            ahead
                .take_all(&[("k", 9, 1, &[5])])
                .map(|mut t| t.remove(0))
                .map(|t| t.before),
            Some(2)
        );
        // A window whose earlier minutes this host does not know: to the store.
        assert!(
            ahead
                .take_all(&[("k", 9, 1, &[4])])
                .map(|mut t| t.remove(0))
                .is_none()
        );
        // More given back than the block handed out: to the store.
        assert_eq!(ahead.give_back("k", 9, 5), None);
        // Spare places for calls counted as they run.
        assert!(ahead.use_spare("k", 9, 2));
        assert!(!ahead.use_spare("k", 9, 2));
    }

    #[test]
    fn places_given_back_past_what_a_row_allows_are_trimmed_off_the_top() {
        // A row allowing none ahead: the place of a call that did not run is the block's
        // again, and past the row's most, so it is trimmed for the store.
        let ahead = Ahead::default();
        ahead.record("k", 9, (1, 1, 1, 0), sums(&[(5, 0)]), 30_000);
        assert_eq!(ahead.give_back("k", 9, 1), Some(1));
        assert_eq!(ahead.trim("k", 9), 1);
        assert_eq!(ahead.trim("k", 9), 0);
        assert!(ahead.take_all(&[("k", 9, 1, &[5])]).is_none(), "none held");
        // A row allowing two: two spare, and one given back, makes one past it.
        ahead.record("j", 9, (1, 3, 3, 2), sums(&[(5, 0)]), 30_000);
        assert_eq!(ahead.give_back("j", 9, 1), Some(1));
        assert_eq!(ahead.trim("j", 9), 1);
        let taken = ahead.take_all(&[("j", 9, 2, &[5])]).expect("two spare");
        assert_eq!(
            taken[0].before, 0,
            "the place given back is handed out again"
        );
        assert!(ahead.take_all(&[("j", 9, 1, &[5])]).is_none());
    }

    #[test]
    fn spare_places_are_given_back_when_their_minute_is_over_or_when_asked_to() {
        let ahead = Ahead::default();
        ahead.record("k", 9, (1, 1, 1, DEFAULT_AHEAD), sums(&[]), 30_000);
        ahead.record("k", 9, (1, 4, 5, DEFAULT_AHEAD), sums(&[]), 30_000);
        ahead.record(
            "session:s|k",
            0,
            (1, 1, 1, DEFAULT_AHEAD),
            sums(&[]),
            30_000,
        );
        ahead.record(
            "session:s|k",
            0,
            (1, 3, 4, DEFAULT_AHEAD),
            sums(&[]),
            30_000,
        );
        assert_eq!(ahead.due(9, false), vec![]);
        assert_eq!(ahead.due(10, false), vec![("k".to_string(), 9, 3)]);
        assert!(!ahead.is_empty());
        assert_eq!(ahead.due(10, true), vec![("session:s|k".to_string(), 0, 2)]);
        assert!(ahead.is_empty());
    }
}
