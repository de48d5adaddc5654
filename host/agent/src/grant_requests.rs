//! Grant requests: a call the sandbox refused something a grant would allow becomes a question
//! to a person, who may give that grant for this call, this session, a while, or for good.
//!
//! What decides, in order:
//! 1. Only what the sandbox refused and a grant can lift is asked about: its report names the
//!    narrowest grant (that directory read-write, that origin, that address), and the host
//!    offers only grants that resolve, reach none of Cordon's own state and lie within the
//!    plugin's ceiling ([`ToolHost::requestable`](crate::ToolHost::requestable)).
//! 2. A grant refused with `never` in this conversation is not asked for again; one already
//!    given for the session is not asked for again either (the call failed with it).
//! 3. At most [`MAX_PER_TURN`] requests in one turn and [`MAX_PER_SESSION`] in a
//!    conversation: a model that makes calls fail on purpose cannot flood a person. Past
//!    either, the call's error goes to the model as it would have, with a line saying why
//!    nobody was asked.
//! 4. A person answers, never the model and never a standing setting (`--approve all`,
//!    `always` for the tool, an allow rule): each request is its own question.
//!    `yes` gives the grants to this call only, `always` to every call of the plugin in this
//!    conversation, `for 30m` and `forever` record them in the lock (the host's
//!    [`ToolHost::grant_for`](crate::ToolHost::grant_for)) and also give them to the call
//!    again; `no` and `never` send the model the refused call's own error.
//! 5. The call runs again, once, with the grants given; what it returns is its result.

use serde::{Deserialize, Serialize};

/// Grant requests one turn may make.
pub const MAX_PER_TURN: u32 = 3;
/// Grant requests one conversation may make.
pub const MAX_PER_SESSION: u32 = 20;
/// The longest a grant may be given for through a grant request, in minutes (a day).
pub const MAX_MINUTES: u64 = 24 * 60;

/// A grant request held on a call: what it asks for, and what the model is sent if it is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRequest {
    /// The grants asked for (grant syntax).
    pub grants: Vec<String>,
    /// What the sandbox refused, one line each, for the person.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// The refused call's result, as the model reads it.
    pub result: String,
}

/// One grant a person gave for a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionGrant {
    /// The plugin it was given to.
    pub plugin: String,
    /// The grant (grant syntax).
    pub grant: String,
    /// Who gave it.
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// The grants of a conversation: given for it, and refused for good in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionGrants {
    /// Given for this conversation (`always` to a grant request).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given: Vec<SessionGrant>,
    /// Refused for good in it (`never`), as `plugin grant`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// Grant requests made so far in the conversation.
    #[serde(default)]
    pub asked: u32,
}

impl SessionGrants {
    /// Whether nothing was given, refused or asked.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty() && self.refused.is_empty() && self.asked == 0
    }

    /// The grants given to `plugin` for this conversation.
    pub fn of(&self, plugin: &str) -> Vec<String> {
        self.given
            .iter()
            .filter(|g| g.plugin == plugin)
            .map(|g| g.grant.clone())
            .collect()
    }

    /// The grants of `wanted` that may still be asked for `plugin` (rule 2).
    pub fn askable(&self, plugin: &str, wanted: &[String]) -> Vec<String> {
        let given = self.of(plugin);
        wanted
            .iter()
            .filter(|w| !given.contains(w) && !self.refused.contains(&key(plugin, w)))
            .cloned()
            .collect()
    }

    /// Why no request may be made now, with `in_turn` made in this turn (rule 3).
    pub fn limit_reached(&self, in_turn: u32) -> Option<String> {
        if self.asked >= MAX_PER_SESSION {
            Some(format!(
                "this conversation already made {MAX_PER_SESSION} grant requests, the most it may"
            ))
        } else if in_turn >= MAX_PER_TURN {
            Some(format!(
                "this turn already made {MAX_PER_TURN} grant requests, the most one turn may"
            ))
        } else {
            None
        }
    }

    /// Remembers `grants` as refused for good for `plugin`.
    pub fn refuse(&mut self, plugin: &str, grants: &[String]) {
        for g in grants {
            let k = key(plugin, g);
            if !self.refused.contains(&k) {
                self.refused.push(k);
            }
        }
    }

    /// Gives `grants` to `plugin` for the conversation.
    pub fn give(&mut self, plugin: &str, grants: &[String], by: &str, at_ms: i64) {
        for g in grants {
            if !self.of(plugin).contains(g) {
                self.given.push(SessionGrant {
                    plugin: plugin.to_string(),
                    grant: g.clone(),
                    by: by.to_string(),
                    at_ms,
                });
            }
        }
    }
}

fn key(plugin: &str, grant: &str) -> String {
    format!("{plugin} {grant}")
}

/// The question a person is asked, in words: what was refused and what would allow it.
pub fn reason(tool: &str, request: &GrantRequest) -> String {
    let refused = if request.refused.is_empty() {
        String::new()
    } else {
        format!(" ({})", request.refused.join("; "))
    };
    format!(
        "the sandbox refused `{tool}` something{refused}; it would be allowed with {}",
        request
            .grants
            .iter()
            .map(|g| format!("`{g}`"))
            .collect::<Vec<_>>()
            .join(" and ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_given_grants_are_not_asked_again_and_requests_are_bounded() {
        let mut s = SessionGrants::default();
        let wanted = vec![
            "net:https://a.example".to_string(),
            "net:https://b.example".into(),
        ];
        assert_eq!(s.askable("web", &wanted), wanted);
        s.refuse("web", &wanted[..1]);
        s.give("web", &wanted[1..], "ann", 1);
        assert!(s.askable("web", &wanted).is_empty());
        // Another plugin is another question.
        assert_eq!(s.askable("fetch", &wanted), wanted);
        assert_eq!(s.of("web"), vec!["net:https://b.example".to_string()]);
        assert!(s.limit_reached(MAX_PER_TURN - 1).is_none());
        assert!(s.limit_reached(MAX_PER_TURN).unwrap().contains("this turn"));
        s.asked = MAX_PER_SESSION;
        assert!(s.limit_reached(0).unwrap().contains("conversation"));
    }
}
