//! Counters of earlier calls, which `calls` rules and `context.calls` read.
//!
//! The host asks the store for the counts a call's rules need before deciding
//! ([`crate::Policy::counters_for`]), and adds the call to every counter that counts it once it
//! runs ([`crate::Policy::tally`]). Counts are kept per minute in the store, so they hold
//! across restarts and across hosts that share a PostgreSQL store.

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

/// The store key of `spec` for a call of `identity` (in `plugin`); with `rules` (the rules
/// that applied to a call that runs), `None` when the counter does not count that call.
pub(crate) fn key_for(
    spec: &CounterSpec,
    identity: &str,
    plugin: &str,
    rules: Option<&[&str]>,
    scope: CountScope<'_>,
) -> Option<String> {
    let subject = match spec.of.as_str() {
        "tool" => format!("tool:{identity}"),
        "plugin" => format!("plugin:{plugin}"),
        of => {
            let id = of.strip_prefix("rule:")?;
            if rules.is_some_and(|r| !r.contains(&id)) {
                return None;
            }
            format!("rule:{id}")
        }
    };
    let mut key = String::new();
    if Window::parse(&spec.within) == Ok(Window::Session) {
        key.push_str(&format!("session:{}|", scope.session));
    }
    if spec.per.as_deref() == Some("caller") {
        key.push_str(&format!("caller:{}/{}|", scope.caller.0, scope.caller.1));
    }
    key.push_str(&subject);
    Some(key)
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
    fn windows_parse_with_clear_errors() {
        assert_eq!(Window::parse("30m"), Ok(Window::Minutes(30)));
        assert_eq!(Window::parse("1h"), Ok(Window::Minutes(60)));
        assert_eq!(Window::parse("session"), Ok(Window::Session));
        for bad in ["", "h", "0m", "31d", "5s", "-1m"] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
    }
}
