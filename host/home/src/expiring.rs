//! Grants given for a while: what a person answered to a grant request with "for 30 minutes".
//!
//! What decides, in order:
//! 1. A grant request may offer only a grant that parses, resolves (a directory that exists),
//!    reaches none of Cordon's own state (the reserved paths and addresses) and lies within the
//!    plugin's ceiling: [`Home::requestable`]. What fails any of these is never put to a person.
//! 2. A grant given for a while is kept in the lock with the time it ends ([`ExpiringGrant`]),
//!    beside the lasting grants; giving the same access again (for a while or for good)
//!    replaces it, so one access has one end.
//! 3. A call applies an expiring grant only before its end, checked when the call starts
//!    ([`ToolEntry`](crate::ToolEntry) keeps the ends); a host that loads the lock after an end
//!    drops the grant from the lock ([`Home::prune_expired`]), and the caller records that.

use std::time::{Duration, SystemTime};

use cordon_core::Grant;
use serde::{Deserialize, Serialize};

use crate::{GrantChange, Home, HomeError};

/// A grant that ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpiringGrant {
    /// The grant (resolved, as lasting grants are kept).
    pub grant: Grant,
    /// When it ends (RFC 3339, UTC).
    pub until: String,
    /// Who gave it, as the audit log names them.
    pub by: String,
}

impl ExpiringGrant {
    /// When it ends, in milliseconds since the Unix epoch; a time that does not parse (an edit
    /// by hand) counts as already past.
    pub fn until_ms(&self) -> i64 {
        humantime::parse_rfc3339(&self.until)
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(i64::MIN)
    }

    /// Whether it still applies at `now_ms`.
    pub fn applies_at(&self, now_ms: i64) -> bool {
        now_ms < self.until_ms()
    }

    /// How long it still applies at `now_ms`, for people (`24m left`, `expired`).
    pub fn time_left(&self, now_ms: i64) -> String {
        let left = self.until_ms().saturating_sub(now_ms);
        if left <= 0 {
            return "expired".to_string();
        }
        let secs = (left as u64).div_ceil(1000);
        let shown = if secs >= 3600 {
            Duration::from_secs(secs / 60 * 60)
        } else {
            Duration::from_secs(secs)
        };
        format!("{} left", humantime::format_duration(shown))
    }
}

/// The longest a grant may be given for through a grant request: past a day, grant it for good
/// (`cordon grant`), where it is seen and revoked like any other.
pub const MAX_GRANT_DURATION: Duration = Duration::from_secs(24 * 3600);

impl Home {
    /// `wanted` (grant syntax, as a sandbox's report names it) as a grant a person may be asked
    /// to give `plugin`: resolved, clear of Cordon's own state, within the plugin's ceiling.
    /// The error says which check it failed.
    pub fn requestable(&self, plugin: &str, wanted: &str) -> Result<Grant, HomeError> {
        let grant = self
            .parse_grants(&[wanted.to_string()])?
            .pop()
            .expect("one grant parsed");
        // Marks say what a person knows of a grant's contents (`public`, `trusted`); what a
        // plugin or a sandbox's report names never carries them.
        if grant.marks() != cordon_core::Marks::default() {
            return Err(HomeError::Grant(cordon_core::GrantError::Syntax {
                input: wanted.to_string(),
                reason: "a grant asked for carries no marks; only a person marks a grant".into(),
            }));
        }
        let lock = self.read()?;
        let record = lock.plugin(plugin)?;
        record
            .ceiling()
            .permits(&grant)
            .map_err(|e| HomeError::from(e.for_plugin(plugin)))?;
        Ok(grant)
    }

    /// Gives `plugin` the grant `wanted` for `duration` (at most [`MAX_GRANT_DURATION`]), or for
    /// good when `duration` is `None`; checked as [`Home::requestable`] checks it. Replaces an
    /// expiring grant of the same access.
    pub fn grant_for(
        &self,
        plugin: &str,
        wanted: &str,
        duration: Option<Duration>,
        by: &str,
    ) -> Result<GrantChange, HomeError> {
        let grant = self.requestable(plugin, wanted)?;
        self.update(|lock| {
            let record = lock.plugin_mut(plugin)?;
            record.expiring.retain(|e| !e.grant.same_access(&grant));
            match duration {
                None => Ok(GrantChange {
                    granted: grant.clone(),
                    replaced: record.grants.add(grant.clone()).filter(|old| *old != grant),
                }),
                Some(d) => {
                    let until = SystemTime::now() + d.min(MAX_GRANT_DURATION);
                    record.expiring.push(ExpiringGrant {
                        grant: grant.clone(),
                        until: humantime::format_rfc3339_seconds(until).to_string(),
                        by: by.to_string(),
                    });
                    Ok(GrantChange {
                        granted: grant.clone(),
                        replaced: None,
                    })
                }
            }
        })
    }

    /// Drops every expiring grant whose end has passed from the lock; returns them by plugin,
    /// for the audit log. Writes nothing when none has.
    pub fn prune_expired(&self) -> Result<Vec<(String, ExpiringGrant)>, HomeError> {
        let now = cordon_core::now_ms();
        let lock = self.read()?;
        let any = lock
            .plugins
            .values()
            .any(|r| r.expiring.iter().any(|e| !e.applies_at(now)));
        if !any {
            return Ok(Vec::new());
        }
        self.update(|lock| {
            let mut gone = Vec::new();
            for (name, record) in lock.plugins.iter_mut() {
                let (kept, ended): (Vec<_>, Vec<_>) = std::mem::take(&mut record.expiring)
                    .into_iter()
                    .partition(|e| e.applies_at(now));
                record.expiring = kept;
                gone.extend(ended.into_iter().map(|e| (name.clone(), e)));
            }
            Ok(gone)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(until: &str) -> ExpiringGrant {
        ExpiringGrant {
            grant: "net:https://api.example".parse().unwrap(),
            until: until.to_string(),
            by: "ann".to_string(),
        }
    }

    #[test]
    fn an_expiring_grant_applies_until_its_end_only() {
        let g = at("2026-01-01T00:10:00Z");
        let end = g.until_ms();
        assert!(g.applies_at(end - 1));
        assert!(!g.applies_at(end));
        assert_eq!(g.time_left(end - 90_000), "1m 30s left");
        assert_eq!(g.time_left(end - 2 * 3600 * 1000 - 5_000), "2h left");
        assert_eq!(g.time_left(end), "expired");
        // A time edited into something unreadable never applies.
        assert!(!at("soon").applies_at(0));
    }
}
