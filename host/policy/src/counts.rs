//! Counters of earlier calls, which `calls` rules and `context.calls` read.
//!
//! The host asks the store for the counts a call's rules need ([`crate::Policy::counters_for`])
//! and, in the same statement, reserves the call on every counter that may count it
//! ([`crate::Policy::reservable`]), so that calls decided at once see each other. Once the
//! call is decided, [`settle`] says what to keep: a call that runs keeps what counts it
//! ([`crate::Policy::tally`]); the rest is taken back. Counts are kept per minute in the
//! store, so they hold across restarts and across hosts that share a PostgreSQL store.

use std::sync::Arc;

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
}

/// One count the store must give: the calls under `key` since minute `since` (minutes since
/// the Unix epoch; 0 for a session's whole life).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountQuery {
    /// The counter's name in `context.calls`.
    pub name: Arc<str>,
    /// The store's key: what is counted, and for whom. Counters that differ only in name or
    /// window share it (the 60 counters of the 1,000-rule benchmark policy have three keys).
    pub key: Arc<str>,
    /// The first minute counted.
    pub since_minute: i64,
}

/// Counter values by counter name, as the store gave them for
/// [`crate::Policy::counters_for`]: what a call's `calls` rules and `context.calls` read.
pub type Counts = std::collections::BTreeMap<Arc<str>, u64>;

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
}

impl Counter {
    pub(crate) fn new(name: &str, spec: CounterSpec) -> Counter {
        Counter {
            name: name.into(),
            // A policy refuses a window that does not parse at load.
            window: Window::parse(&spec.within).unwrap_or(Window::Session),
            kind: KeyKind::of(&spec),
            spec,
        }
    }

    /// The first minute the counter counts at minute `now`.
    fn since(&self, now_minute: i64) -> i64 {
        match self.window {
            Window::Minutes(m) => now_minute - i64::from(m) + 1,
            Window::Session => 0,
        }
    }
}

/// How one tool's calls are counted, made once at load: a call makes each kind of key once,
/// however many counters share it, and asks for its keys three times (to count, to reserve,
/// to keep).
#[derive(Debug, Default)]
pub(crate) struct ToolCounting {
    kinds: Vec<KeyKind>,
    /// The counters its rules read (indices into `Policy::counters`), each with its kind.
    reads: Vec<(usize, usize)>,
    /// The kinds of the counters that may count its calls: those of the tool or its plugin,
    /// and those of rules that may apply to it.
    counted_by: Vec<usize>,
}

impl ToolCounting {
    pub(crate) fn new(counters: &[Counter], reads: &[usize], counted_by: &[usize]) -> Self {
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
        let reads = reads
            .iter()
            .filter_map(|&i| Some((i, kind_of(i)?)))
            .collect();
        let mut counted: Vec<usize> = counted_by.iter().filter_map(|&i| kind_of(i)).collect();
        counted.sort_unstable();
        counted.dedup();
        ToolCounting {
            kinds,
            reads,
            counted_by: counted,
        }
    }

    /// What the store must count before a call is decided: one query for each counter read.
    pub(crate) fn queries(
        &self,
        counters: &[Counter],
        (identity, plugin): (&str, &str),
        scope: CountScope<'_>,
        now_ms: i64,
    ) -> Vec<CountQuery> {
        let minute = now_ms.div_euclid(60_000);
        let mut keys: Vec<Option<Arc<str>>> = vec![None; self.kinds.len()];
        self.reads
            .iter()
            .map(|&(i, kind)| {
                let key = keys[kind]
                    .get_or_insert_with(|| self.kinds[kind].key(identity, plugin, scope).into());
                CountQuery {
                    name: counters[i].name.clone(),
                    key: key.clone(),
                    since_minute: counters[i].since(minute),
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
}

/// What reserved counts need once the calls are decided, as `(add, release)`: `kept` (the
/// keys of the calls that run, [`crate::Policy::tally`]) less `reserved` are added, and
/// `reserved` less `kept` are taken back; each key as often as it is named.
pub fn settle(reserved: &[String], kept: &[String]) -> (Vec<String>, Vec<String>) {
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
