//! Counters of earlier calls, which `calls` rules and `context.calls` read.
//!
//! The host asks the store for the counts a call's rules need ([`crate::Policy::counters_for`])
//! and, in the same statement, reserves the call on every counter that may count it
//! ([`crate::Policy::reservable`]), so that calls decided at once see each other. Once the
//! call is decided, [`settle`] says what to keep: a call that runs keeps what counts it
//! ([`crate::Policy::tally`]); the rest is taken back. Counts are kept per minute in the
//! store, so they hold across restarts and across hosts that share a PostgreSQL store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::CounterSpec;

/// Over what a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last this many minutes, this one included.
    Minutes(u32),
    /// The whole session.
    Session,
}

impl Window {
    /// `session`, `30m`, `2h`, `1d`.
    pub fn parse(text: &str) -> Result<Window, String> {
        if text == "session" {
            return Ok(Window::Session);
        }
        let wrong = || {
            format!(
                "`within = \"{text}\"`: write `session` or a window such as `30m`, `1h`, `1d` (at most 30d)"
            )
        };
        let (n, unit) = text.split_at(text.len().saturating_sub(1));
        let n: u32 = n.parse().map_err(|_| wrong())?;
        let minutes = match unit {
            "m" => n,
            "h" => n.checked_mul(60).ok_or_else(wrong)?,
            "d" => n.checked_mul(24 * 60).ok_or_else(wrong)?,
            _ => return Err(wrong()),
        };
        if minutes == 0 || minutes > 30 * 24 * 60 {
            return Err(wrong());
        }
        Ok(Window::Minutes(minutes))
    }

    /// The first minute counted at minute `now_minute`.
    fn since(self, now_minute: i64) -> i64 {
        match self {
            Window::Minutes(m) => now_minute - i64::from(m) + 1,
            Window::Session => 0,
        }
    }
}

/// One count the store must give: the calls under `key` since minute `since` (minutes since
/// the Unix epoch; 0 for a session's whole life), which every counter in `names` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountQuery {
    /// The names in `context.calls` of the counters that read this count: those of the
    /// tool's rules that count the same key over the same window, so the store counts it
    /// once (the 60 counters of the 1,000-rule benchmark policy make three queries).
    pub names: Arc<[Arc<str>]>,
    /// The numbers of the same counters in the policy that asked (`policy`), ascending:
    /// what its rules look their counters up by. Empty when the query names counters only.
    pub numbers: Arc<[u32]>,
    /// Which loaded policy numbered the counters (0 for none): a policy loaded later numbers
    /// its counters afresh, so its rules find these counts by name instead.
    pub policy: u64,
    /// The store's key: what is counted, and for whom.
    pub key: Arc<str>,
    /// The first minute counted.
    pub since_minute: i64,
}

/// A store key a call is reserved on before it is decided ([`crate::Policy::reservable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub key: String,
    /// How many places a host may reserve ahead on the key (see [`places_ahead`]); `None`
    /// where the policy cannot tell (a `when` or Cedar policy reads the count), which leaves
    /// it to the store.
    pub most_ahead: Option<u32>,
}

/// How many places a host may reserve ahead on a counter whose smallest threshold is
/// `at_least` (the least `calls.at_least` of the rules that read it): a sixteenth of it, at
/// most 64. Places held ahead by one host count as calls for the others until they are used
/// or given back (see the store's `ahead`), so another host's call sees at most a sixteenth of
/// the threshold more calls than were made; a threshold under 16 reserves nothing ahead.
pub fn places_ahead(at_least: u64) -> u32 {
    u32::try_from((at_least / 16).min(64)).unwrap_or(64)
}

impl CountQuery {
    /// A query of the counters `names`, known by name only.
    pub fn named(names: &[&str], key: &str, since_minute: i64) -> CountQuery {
        let mut names: Vec<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
        names.sort();
        CountQuery {
            names: names.into(),
            numbers: Arc::new([]),
            policy: 0,
            key: key.into(),
            since_minute,
        }
    }
}

/// Each loaded policy's own number, for [`CountQuery::policy`] (0 is none).
static POLICIES: AtomicU64 = AtomicU64::new(1);

/// A number no other policy loaded by this process has.
pub(crate) fn next_policy() -> u64 {
    POLICIES.fetch_add(1, Ordering::Relaxed)
}

/// A counter as a rule reads it: by its number in its policy, where the counts carry numbers
/// from that policy, and otherwise by name.
#[derive(Debug, Clone)]
pub(crate) struct CounterRef {
    pub(crate) name: String,
    /// Its place in `Policy::counters`, and the policy's number; set at load (until then
    /// the policy is 0, which no counts carry).
    pub(crate) number: u32,
    pub(crate) policy: u64,
}

impl CounterRef {
    pub(crate) fn new(name: String) -> CounterRef {
        CounterRef {
            name,
            number: u32::MAX,
            policy: 0,
        }
    }
}

/// Counter values by counter name, as the store gave them for
/// [`crate::Policy::counters_for`]: what a call's `calls` rules and `context.calls` read.
///
/// Every call with counting rules makes one. Counts answered for a policy's queries
/// ([`counts_of`]) are kept as the queries' answers, each with the numbers of its counters
/// in that policy, ascending: made without sorting or copying, and a counter is found by
/// searching a few short lists of integers. A call looks up one count for each group of
/// rules reading it ([`crate::by_count`]), not one for each rule. Counts given by name are
/// kept in a vector sorted by name. A name is found either way.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Given by name, sorted by name.
    sorted: Vec<(Arc<str>, u64)>,
    /// Answered for the queries of policy `policy`: each query's names, numbers and count.
    answered: Vec<Answer>,
    policy: u64,
}

/// One query's count, for the counters it names.
#[derive(Debug, Clone)]
struct Answer {
    names: Arc<[Arc<str>]>,
    /// The same counters' numbers, as the query gave them (ascending, as
    /// [`crate::Policy::counters_for`] makes them; a number out of order is found by name).
    numbers: Arc<[u32]>,
    n: u64,
}

impl Counts {
    /// No counts: every counter reads 0.
    pub fn new() -> Counts {
        Counts::default()
    }

    /// The value of counter `name`, if it was given.
    pub fn get(&self, name: &str) -> Option<u64> {
        if let Ok(at) = self.sorted.binary_search_by(|(n, _)| (**n).cmp(name)) {
            return Some(self.sorted[at].1);
        }
        // Searched in turn: a query's names need not be sorted (its fields are public), and
        // a policy names each counter once.
        self.answered
            .iter()
            .find_map(|a| a.names.iter().any(|k| **k == *name).then_some(a.n))
    }

    /// Whether these counts were answered for queries of policy `policy` ([`counts_of`]).
    fn answered_for(&self, policy: u64) -> bool {
        policy != 0 && self.policy == policy
    }

    /// The count answered for the very query whose counters' numbers are `numbers` (the
    /// same allocation, which one tool's queries of one policy carry, see
    /// [`ToolCounting::read_of`]): every counter it names has it.
    pub(crate) fn answer_to(&self, numbers: &Arc<[u32]>) -> Option<u64> {
        self.answered
            .iter()
            .find(|a| Arc::ptr_eq(&a.numbers, numbers))
            .map(|a| a.n)
    }

    /// The value of the counter a rule reads.
    pub(crate) fn of(&self, counter: &CounterRef) -> Option<u64> {
        self.numbered_or_named(counter.policy, counter.number, &counter.name)
    }

    /// The value of counter `number` of policy `policy`, found by `name` when these counts
    /// were not answered for that policy.
    pub(crate) fn numbered_or_named(&self, policy: u64, number: u32, name: &str) -> Option<u64> {
        if self.answered_for(policy)
            && let Some(a) = self
                .answered
                .iter()
                .find(|a| a.numbers.binary_search(&number).is_ok())
        {
            return Some(a.n);
        }
        self.get(name)
    }

    /// Sets counter `name` to `n`.
    pub fn insert(&mut self, name: Arc<str>, n: u64) {
        if !self.answered.is_empty() {
            // Kept by name from here on, so that the new value is the one found.
            let sorted = std::mem::take(&mut self.sorted)
                .into_iter()
                .chain(self.named_answers())
                .collect::<Vec<_>>();
            *self = Counts::sorting(sorted);
        }
        match self.sorted.binary_search_by(|(k, _)| (**k).cmp(&*name)) {
            Ok(at) => self.sorted[at].1 = n,
            Err(at) => self.sorted.insert(at, (name, n)),
        }
    }

    /// The counters given, by name, in the order of their names.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        let mut all: Vec<(&str, u64)> = self
            .sorted
            .iter()
            .map(|(name, n)| (&**name, *n))
            .chain(
                self.answered
                    .iter()
                    .flat_map(|a| a.names.iter().map(move |name| (&**name, a.n))),
            )
            .collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// Whether no counter was given.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty() && self.answered.is_empty()
    }

    fn named_answers(&self) -> impl Iterator<Item = (Arc<str>, u64)> + '_ {
        self.answered
            .iter()
            .flat_map(|a| a.names.iter().map(move |name| (name.clone(), a.n)))
    }
}

impl PartialEq for Counts {
    /// The same counters with the same values, however they were given.
    fn eq(&self, other: &Counts) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Counts {}

impl Counts {
    /// `sorted` (any order) made sorted by name; a name given twice keeps its last value, as
    /// a map would.
    fn sorting(mut sorted: Vec<(Arc<str>, u64)>) -> Counts {
        // Stable, and quick on runs already sorted (each query's names are).
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        sorted.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = later.1;
            }
            same
        });
        Counts {
            sorted,
            ..Counts::default()
        }
    }
}

impl FromIterator<(Arc<str>, u64)> for Counts {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, u64)>>(iter: I) -> Counts {
        Counts::sorting(iter.into_iter().collect())
    }
}

/// The counts `queries` read, given the store's answer `found` to each: every counter of each
/// query has its value. Queries one policy numbered ([`crate::Policy::counters_for`]) are
/// kept by number (no name is compared); others by name.
pub fn counts_of(queries: &[CountQuery], found: &[u64]) -> Counts {
    debug_assert_eq!(queries.len(), found.len(), "one answer for each query");
    let policy = queries.first().map_or(0, |q| q.policy);
    let numbered = policy != 0
        && queries
            .iter()
            .all(|q| q.policy == policy && q.numbers.len() == q.names.len());
    if !numbered {
        let mut named = Vec::with_capacity(queries.iter().map(|q| q.names.len()).sum());
        for (q, &n) in queries.iter().zip(found) {
            named.extend(q.names.iter().map(|name| (name.clone(), n)));
        }
        return Counts::sorting(named);
    }
    Counts {
        sorted: Vec::new(),
        answered: queries
            .iter()
            .zip(found)
            .map(|(q, &n)| Answer {
                names: q.names.clone(),
                numbers: q.numbers.clone(),
                n,
            })
            .collect(),
        policy,
    }
}

/// Who and where a call is, for the keys of its counters.
#[derive(Debug, Clone, Copy)]
pub struct CountScope<'a> {
    /// The session's id.
    pub session: &'a str,
    /// The caller, for `per = "caller"` counters: the token and the user.
    pub caller: (&'a str, &'a str),
}

/// What a counter counts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subject {
    Tool,
    Plugin,
    Rule(String),
}

/// What a counter's store key is made of: what it counts, and whether it is kept per session
/// and per caller. Counters differing only in name or window share one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyKind {
    subject: Subject,
    session: bool,
    per_caller: bool,
}

impl KeyKind {
    /// `None` for a counter of nothing known (a policy refuses such a counter at load).
    fn of(spec: &CounterSpec) -> Option<KeyKind> {
        let subject = match spec.of.as_str() {
            "tool" => Subject::Tool,
            "plugin" => Subject::Plugin,
            of => Subject::Rule(of.strip_prefix("rule:")?.to_string()),
        };
        Some(KeyKind {
            subject,
            // `Window::parse` takes exactly this for the whole session.
            session: spec.within == "session",
            per_caller: spec.per.as_deref() == Some("caller"),
        })
    }

    /// The store key for a call of `identity` (in `plugin`).
    fn key(&self, identity: &str, plugin: &str, scope: CountScope<'_>) -> String {
        // Pieces pushed onto one string: a call makes its keys three times.
        let (what, name) = match &self.subject {
            Subject::Tool => ("tool:", identity),
            Subject::Plugin => ("plugin:", plugin),
            Subject::Rule(id) => ("rule:", id.as_str()),
        };
        let (session, (token, user)) = (scope.session, scope.caller);
        let mut key = String::with_capacity(
            what.len() + name.len() + session.len() + token.len() + user.len() + 16,
        );
        if self.session {
            key.push_str("session:");
            key.push_str(session);
            key.push('|');
        }
        if self.per_caller {
            key.push_str("caller:");
            key.push_str(token);
            key.push('/');
            key.push_str(user);
            key.push('|');
        }
        key.push_str(what);
        key.push_str(name);
        key
    }
}

/// A counter as calls use it, made once at load.
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    pub(crate) name: Arc<str>,
    pub(crate) spec: CounterSpec,
    window: Window,
    kind: Option<KeyKind>,
    /// How many places ahead its rules allow ([`places_ahead`] of their least threshold;
    /// `None` when one reads it other than by a `calls` condition). Set at load.
    pub(crate) most_ahead: Option<u32>,
}

impl Counter {
    pub(crate) fn new(name: &str, spec: CounterSpec) -> Counter {
        Counter {
            name: name.into(),
            // A policy refuses a window that does not parse at load.
            window: Window::parse(&spec.within).unwrap_or(Window::Session),
            kind: KeyKind::of(&spec),
            spec,
            most_ahead: Some(places_ahead(u64::MAX)),
        }
    }
}

/// How one tool's calls are counted, made once at load: a call makes each kind of key once,
/// however many counters share it, and the store counts each (kind, window) its rules read
/// once, however many counters read it.
#[derive(Debug, Default)]
pub(crate) struct ToolCounting {
    kinds: Vec<KeyKind>,
    /// What its rules read: each (kind, window) once, with the names of the counters that
    /// read it.
    reads: Vec<Read>,
    /// The kinds of the counters that may count its calls: those of the tool or its plugin,
    /// and those of rules that may apply to it.
    counted_by: Vec<usize>,
    /// The policy's number, which its queries carry.
    policy: u64,
    /// The places ahead each kind's keys allow (see [`Reservation::most_ahead`]).
    most_ahead: Vec<Option<u32>>,
}

/// Counters of one tool's rules that read the same count.
#[derive(Debug)]
struct Read {
    kind: usize,
    window: Window,
    names: Arc<[Arc<str>]>,
    /// The same counters' numbers in the policy, ascending.
    numbers: Arc<[u32]>,
}

impl ToolCounting {
    /// The counting of a tool of policy `policy` whose rules read `reads` and whose calls
    /// `counted_by` count (indices into `counters`, which are the counters' numbers).
    pub(crate) fn new(
        counters: &[Counter],
        reads: &[usize],
        counted_by: &[usize],
        policy: u64,
    ) -> Self {
        let mut kinds: Vec<KeyKind> = Vec::new();
        let mut kind_of = |i: usize| {
            let kind = counters[i].kind.clone()?;
            Some(match kinds.iter().position(|k| *k == kind) {
                Some(at) => at,
                None => {
                    kinds.push(kind);
                    kinds.len() - 1
                }
            })
        };
        let mut grouped: Vec<(usize, Window, Vec<usize>)> = Vec::new();
        for &i in reads {
            let Some(kind) = kind_of(i) else { continue };
            let window = counters[i].window;
            match grouped
                .iter_mut()
                .find(|(k, w, _)| *k == kind && *w == window)
            {
                Some((.., read_by)) => read_by.push(i),
                None => grouped.push((kind, window, vec![i])),
            }
        }
        let reads = grouped
            .into_iter()
            .map(|(kind, window, mut read_by)| {
                // Both sorted, so that a call's counts are quick to make (see `Counts`).
                read_by.sort_unstable();
                let mut names: Vec<Arc<str>> =
                    read_by.iter().map(|&i| counters[i].name.clone()).collect();
                names.sort();
                // Numbered only when every number fits (else its counts go by name).
                let numbers: Option<Vec<u32>> =
                    read_by.iter().map(|&i| u32::try_from(i).ok()).collect();
                Read {
                    kind,
                    window,
                    names: names.into(),
                    numbers: numbers.unwrap_or_default().into(),
                }
            })
            .collect();
        let mut counted: Vec<usize> = counted_by.iter().filter_map(|&i| kind_of(i)).collect();
        counted.sort_unstable();
        counted.dedup();
        // The places ahead a kind's keys allow: the least of every counter of the policy with
        // that kind of key (whichever tool's rules read them), since they share its rows.
        let most_ahead = kinds
            .iter()
            .map(|kind| {
                counters
                    .iter()
                    .filter(|c| c.kind.as_ref() == Some(kind))
                    .map(|c| c.most_ahead)
                    .try_fold(u32::MAX, |least, c| Some(least.min(c?)))
            })
            .collect();
        ToolCounting {
            most_ahead,
            kinds,
            reads,
            counted_by: counted,
            policy,
        }
    }

    /// What the store must count before a call is decided: one query for each (key, window)
    /// the tool's rules read.
    pub(crate) fn queries(
        &self,
        (identity, plugin): (&str, &str),
        scope: CountScope<'_>,
        now_ms: i64,
    ) -> Vec<CountQuery> {
        let minute = now_ms.div_euclid(60_000);
        let mut keys: Vec<Option<Arc<str>>> = vec![None; self.kinds.len()];
        self.reads
            .iter()
            .map(|read| {
                let key = keys[read.kind].get_or_insert_with(|| {
                    self.kinds[read.kind].key(identity, plugin, scope).into()
                });
                CountQuery {
                    names: read.names.clone(),
                    numbers: read.numbers.clone(),
                    policy: self.policy,
                    key: key.clone(),
                    since_minute: read.window.since(minute),
                }
            })
            .collect()
    }

    /// The store keys a call adds one to, each once, in order; with `applied` (the ids of
    /// the rules that applied to a call that runs), without the `rule:` counters of rules
    /// not among them.
    pub(crate) fn keys(
        &self,
        (identity, plugin): (&str, &str),
        scope: CountScope<'_>,
        applied: Option<&[&str]>,
    ) -> Vec<String> {
        let mut keys: Vec<String> = self
            .counted_by
            .iter()
            .map(|&k| &self.kinds[k])
            .filter(|kind| match (&kind.subject, applied) {
                (Subject::Rule(id), Some(applied)) => applied.contains(&id.as_str()),
                _ => true,
            })
            .map(|kind| kind.key(identity, plugin, scope))
            .collect();
        keys.sort_unstable();
        keys
    }

    /// The numbers of the counters (of this tool's rules) that read the same count as counter
    /// `number`, as the tool's queries carry them: what [`Counts::answer_to`] knows a count
    /// answered for this very query by.
    pub(crate) fn read_of(&self, number: u32) -> Option<Arc<[u32]>> {
        self.reads
            .iter()
            .find(|r| r.numbers.binary_search(&number).is_ok())
            .map(|r| r.numbers.clone())
    }

    /// The keys a call is reserved on (those of [`ToolCounting::keys`] without `applied`),
    /// each with the places ahead it allows, in the order of the keys.
    pub(crate) fn reservations(
        &self,
        (identity, plugin): (&str, &str),
        scope: CountScope<'_>,
    ) -> Vec<Reservation> {
        let mut reservations: Vec<Reservation> = self
            .counted_by
            .iter()
            .map(|&k| Reservation {
                key: self.kinds[k].key(identity, plugin, scope),
                most_ahead: self.most_ahead[k],
            })
            .collect();
        reservations.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        reservations
    }
}

/// What reserved counts need once the calls are decided, as `(add, release)`: `kept` (the
/// keys of the calls that run, [`crate::Policy::tally`]) less `reserved` are added, and
/// `reserved` less `kept` are taken back; each key as often as it is named.
pub fn settle(reserved: &[String], kept: &[String]) -> (Vec<String>, Vec<String>) {
    // The usual call: it keeps just what it reserved (both are sorted, as `keys` makes them).
    if reserved == kept {
        return (Vec::new(), Vec::new());
    }
    let mut balance: std::collections::BTreeMap<&str, i64> = Default::default();
    for k in kept {
        *balance.entry(k).or_default() += 1;
    }
    for k in reserved {
        *balance.entry(k).or_default() -= 1;
    }
    let (mut add, mut release) = (Vec::new(), Vec::new());
    for (key, n) in balance {
        let into = if n > 0 { &mut add } else { &mut release };
        for _ in 0..n.unsigned_abs() {
            into.push(key.to_string());
        }
    }
    (add, release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_adds_what_was_not_reserved_and_takes_back_what_is_not_kept() {
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let reserved = keys(&["tool:a.b", "tool:a.b", "rule:w", "plugin:a"]);
        let kept = keys(&["tool:a.b", "plugin:a", "rule:x"]);
        assert_eq!(
            settle(&reserved, &kept),
            (keys(&["rule:x"]), keys(&["rule:w", "tool:a.b"]))
        );
        assert_eq!(settle(&kept, &kept), (vec![], vec![]));
        assert_eq!(
            settle(&reserved, &[]),
            (
                vec![],
                keys(&["plugin:a", "rule:w", "tool:a.b", "tool:a.b"])
            )
        );
    }

    /// Counters that count the same key over the same window are one query, which gives
    /// each of them its value; another window of the same key is another query.
    #[test]
    fn counters_reading_the_same_count_are_asked_once() {
        let spec = |of: &str, within: &str| CounterSpec {
            of: of.into(),
            within: within.into(),
            per: None,
        };
        let counters = [
            Counter::new("a", spec("tool", "1h")),
            Counter::new("b", spec("plugin", "1h")),
            Counter::new("c", spec("tool", "1h")),
            Counter::new("d", spec("tool", "1d")),
        ];
        let counting = ToolCounting::new(&counters, &[0, 1, 2, 3], &[0, 1], 0);
        let scope = CountScope {
            session: "s",
            caller: ("", ""),
        };
        let queries = counting.queries(("p.t", "p"), scope, 120 * 60_000);
        let asked: Vec<(Vec<&str>, &str, i64)> = queries
            .iter()
            .map(|q| {
                (
                    q.names.iter().map(|n| &**n).collect(),
                    &*q.key,
                    q.since_minute,
                )
            })
            .collect();
        assert_eq!(
            asked,
            [
                (vec!["a", "c"], "tool:p.t", 61),
                (vec!["b"], "plugin:p", 61),
                (vec!["d"], "tool:p.t", 120 - 1440 + 1),
            ]
        );
        let counts = counts_of(&queries, &[7, 2, 9]);
        let values: Vec<(&str, u64)> = counts.iter().collect();
        assert_eq!(values, [("a", 7), ("b", 2), ("c", 7), ("d", 9)]);
        assert_eq!((counts.get("c"), counts.get("e")), (Some(7), None));
    }

    #[test]
    fn counts_keep_a_names_last_value_and_find_each_name() {
        let names = ["r9", "r10", "a", "r1", "zz", "r10"];
        let mut counts: Counts = names
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::from(*n), i as u64))
            .collect();
        assert_eq!(
            counts.get("r10"),
            Some(5),
            "the last value of a name given twice"
        );
        for (i, n) in names.iter().enumerate().take(5) {
            if *n != "r10" {
                assert_eq!(counts.get(n), Some(i as u64), "{n}");
            }
        }
        counts.insert("b".into(), 40);
        counts.insert("zz".into(), 41);
        let sorted: Vec<&str> = counts.iter().map(|(n, _)| n).collect();
        assert_eq!(sorted, ["a", "b", "r1", "r10", "r9", "zz"]);
        assert_eq!(
            (counts.get("b"), counts.get("zz"), counts.get("q")),
            (Some(40), Some(41), None)
        );
    }

    #[test]
    fn counts_answered_for_a_policy_are_found_by_number_and_by_name() {
        let query = |names: &[&str], numbers: &[u32], policy: u64| CountQuery {
            numbers: numbers.into(),
            policy,
            ..CountQuery::named(names, "tool:p.t", 1)
        };
        let queries = [query(&["b", "d"], &[4, 1], 7), query(&["a"], &[2], 7)];
        let mut counts = counts_of(&queries, &[5, 6]);
        let counter = |name: &str, number: u32, policy: u64| CounterRef {
            name: name.into(),
            number,
            policy,
        };
        assert_eq!(counts.of(&counter("b", 4, 7)), Some(5));
        assert_eq!(counts.of(&counter("d", 1, 7)), Some(5));
        assert_eq!(counts.of(&counter("a", 2, 7)), Some(6));
        // Another policy's numbers are not these: found by name.
        assert_eq!(counts.of(&counter("a", 4, 8)), Some(6));
        assert_eq!(counts.of(&counter("zz", 4, 8)), None);
        // A number this policy did not ask for: found by name, or not at all.
        assert_eq!(counts.of(&counter("d", 3, 7)), Some(5));
        assert_eq!(counts.of(&counter("q", 3, 7)), None);
        assert_eq!(counts.get("b"), Some(5));
        assert_eq!(
            counts.iter().collect::<Vec<_>>(),
            [("a", 6), ("b", 5), ("d", 5)]
        );
        // A value set by name is the one found from then on, by number too.
        counts.insert("d".into(), 40);
        assert_eq!(counts.of(&counter("d", 1, 7)), Some(40));
        assert_eq!(counts.of(&counter("b", 4, 7)), Some(5));
        assert_eq!(
            counts,
            [("a", 6), ("b", 5), ("d", 40)]
                .into_iter()
                .map(|(n, c)| (Arc::from(n), c))
                .collect()
        );
        // Queries named only, or of two policies, are kept by name.
        let mixed = [query(&["b"], &[4], 7), query(&["a"], &[2], 8)];
        let counts = counts_of(&mixed, &[1, 2]);
        assert_eq!(counts.of(&counter("b", 4, 7)), Some(1));
        assert_eq!(counts.of(&counter("a", 2, 8)), Some(2));
        assert_eq!(
            counts.of(&counter("x", 2, 7)),
            None,
            "policy 8's number 2 is not policy 7's"
        );
        // Names given in any order are found.
        for policy in [0, 5] {
            let unsorted = [CountQuery {
                names: [Arc::from("z"), Arc::from("a")].into(),
                ..query(&[], &[1, 2], policy)
            }];
            let counts = counts_of(&unsorted, &[3]);
            assert_eq!((counts.get("z"), counts.get("a")), (Some(3), Some(3)));
        }
    }

    #[test]
    fn windows_parse_with_clear_errors() {
        assert_eq!(Window::parse("30m"), Ok(Window::Minutes(30)));
        assert_eq!(Window::parse("1h"), Ok(Window::Minutes(60)));
        assert_eq!(Window::parse("session"), Ok(Window::Session));
        for bad in ["", "h", "0m", "31d", "5s", "-1m"] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
    }
}
