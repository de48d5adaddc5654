//! Counters of earlier calls, which `calls` rules and `context.calls` read.
//!
//! The host asks the store for the counts a call's rules need ([`crate::Policy::counters_for`])
//! and, in the same statement, reserves the call on every counter that may count it
//! ([`crate::Policy::reservable`]), so that calls decided at once see each other. Once the
//! call is decided, [`settle`] says what to keep: a call that runs keeps what counts it
//! ([`crate::Policy::tally`]); the rest is taken back. Counts are kept per minute in the
//! store, so they hold across restarts and across hosts that share a PostgreSQL store.

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
    pub name: String,
    /// The store's key: what is counted, and for whom.
    pub key: String,
    /// The first minute counted.
    pub since_minute: i64,
}

/// Who and where a call is, for the keys of its counters.
#[derive(Debug, Clone, Copy)]
pub struct CountScope<'a> {
    /// The session's id.
    pub session: &'a str,
    /// The caller, for `per = "caller"` counters: the token and the user.
    pub caller: (&'a str, &'a str),
}

/// The store key of `spec` for a call of `identity` (in `plugin`), `None` for a counter of
/// nothing known ([`Keys::key`] leaves out `rule:` counters of rules that did not apply).
fn key_for(
    spec: &CounterSpec,
    identity: &str,
    plugin: &str,
    scope: CountScope<'_>,
) -> Option<String> {
    let subject = match spec.of.as_str() {
        "tool" => format!("tool:{identity}"),
        "plugin" => format!("plugin:{plugin}"),
        of => format!("rule:{}", of.strip_prefix("rule:")?),
    };
    let mut key = String::new();
    // `Window::parse` takes exactly this for the whole session.
    if spec.within == "session" {
        key.push_str(&format!("session:{}|", scope.session));
    }
    if spec.per.as_deref() == Some("caller") {
        key.push_str(&format!("caller:{}/{}|", scope.caller.0, scope.caller.1));
    }
    key.push_str(&subject);
    Some(key)
}

/// The store keys of one call's counters, each made once however many counters share it:
/// counters differ mostly in name (the 60 counters of the 1,000-rule benchmark policy have
/// three keys), and a call asks for its keys three times (to count, to reserve, to keep).
pub(crate) struct Keys<'a> {
    identity: &'a str,
    plugin: &'a str,
    scope: CountScope<'a>,
    /// (what is counted, whole session, per caller) and its key.
    made: Vec<((&'a str, bool, bool), String)>,
}

impl<'a> Keys<'a> {
    pub(crate) fn new(identity: &'a str, plugin: &'a str, scope: CountScope<'a>) -> Keys<'a> {
        Keys {
            identity,
            plugin,
            scope,
            made: Vec::new(),
        }
    }

    /// [`key_for`], made once per kind of key; with `rules` (the rules that applied to a call
    /// that runs), `None` for a `rule:` counter of a rule not among them.
    pub(crate) fn key(&mut self, spec: &'a CounterSpec, rules: Option<&[&str]>) -> Option<String> {
        if let (Some(id), Some(rules)) = (spec.of.strip_prefix("rule:"), rules)
            && !rules.contains(&id)
        {
            return None;
        }
        let kind = (
            spec.of.as_str(),
            spec.within == "session",
            spec.per.as_deref() == Some("caller"),
        );
        if let Some((_, key)) = self.made.iter().find(|(k, _)| *k == kind) {
            return Some(key.clone());
        }
        let key = key_for(spec, self.identity, self.plugin, self.scope)?;
        self.made.push((kind, key.clone()));
        Some(key)
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

/// The first minute a window counts, at minute `now`.
pub(crate) fn since(spec: &CounterSpec, now_minute: i64) -> i64 {
    match Window::parse(&spec.within) {
        Ok(Window::Minutes(m)) => now_minute - i64::from(m) + 1,
        _ => 0,
    }
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
