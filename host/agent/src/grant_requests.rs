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
//! 6. A grant recorded in the lock is also kept by the conversation, for a host that does not
//!    reload the lock (a chat), but applies to a call only while the lock still holds it
//!    ([`ToolHost::lock_grants`](crate::ToolHost::lock_grants)): `cordon revoke` reaches the
//!    sessions running when it is run.
//! 5. The call runs again, once, with the grants given; what it returns is its result.

use cordon_core::Requester;
use serde::{Deserialize, Serialize};

/// Grant requests one turn may make.
pub const MAX_PER_TURN: u32 = 3;
/// Grant requests one conversation may make.
pub const MAX_PER_SESSION: u32 = 20;
/// The longest a grant may be given for through a grant request, in minutes (a day).
pub const MAX_MINUTES: u64 = 24 * 60;

/// How long a person gave a grant for, in answer to a grant request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantSpan {
    /// The call that asked, once (`yes`).
    Call,
    /// The plugin's calls in the rest of the conversation (`always`).
    Session,
    /// This many minutes, kept in the lock with its end (`for 30m`).
    Minutes(u64),
    /// For good, kept in the lock (`forever`).
    Forever,
}

impl GrantSpan {
    /// In words, for the audit log.
    pub fn describe(self) -> String {
        match self {
            GrantSpan::Call => "for this call".to_string(),
            GrantSpan::Session => "for this conversation".to_string(),
            GrantSpan::Minutes(m) => format!("for {m} minutes"),
            GrantSpan::Forever => "for good".to_string(),
        }
    }
}

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

/// One grant a person gave for a conversation (`always`), or for a while (`for`, also kept in
/// the lock, which a long-running host reloads and a chat does not).
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
    /// The plugin's component then (`sha256:…`): an upgraded plugin is asked again.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// Whose turns it applies to in a served session (as `always` answers are bound); `None`
    /// for a conversation without requesters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<Requester>,
    /// When it ends, for a grant given for a while.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
    /// Also recorded in the lock (`for 30m`, `forever`): applies only while the lock holds it
    /// (rule 6).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_lock: bool,
}

/// Which calls a session grant may apply to: of a plugin, its component now, in a turn of a
/// requester, at a time (0: not known, and a grant's end is then not checked here; its copy in
/// the lock still ends).
#[derive(Debug, Clone, Copy)]
pub struct Applying<'a> {
    /// The plugin.
    pub plugin: &'a str,
    /// Its component now (empty: not known).
    pub digest: &'a str,
    /// The turn's requester.
    pub requester: Option<&'a Requester>,
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: i64,
}

impl SessionGrant {
    fn applies(&self, to: Applying<'_>) -> bool {
        self.plugin == to.plugin
            && (self.digest.is_empty() || to.digest.is_empty() || self.digest == to.digest)
            && self.requester.as_ref() == to.requester
            && self
                .until_ms
                .is_none_or(|until| to.now_ms == 0 || to.now_ms < until)
    }
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

    /// The grants given in this conversation that apply to a call (see [`Applying`]).
    pub fn of(&self, to: Applying<'_>) -> Vec<String> {
        self.of_held(to, None)
    }

    /// Whether a grant that applies to a call was also recorded in the lock: then what the
    /// lock holds now decides whether it still applies (rule 6).
    pub fn any_in_lock(&self, to: Applying<'_>) -> bool {
        self.given.iter().any(|g| g.in_lock && g.applies(to))
    }

    /// [`SessionGrants::of`], leaving out a grant recorded in the lock that `held` (what the
    /// lock holds now for the plugin, when known) no longer holds: revoked, or ended.
    pub fn of_held(&self, to: Applying<'_>, held: Option<&[String]>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for g in self.given.iter().filter(|g| g.applies(to)) {
            let revoked = g.in_lock && held.is_some_and(|held| !held.contains(&g.grant));
            if !revoked && !out.contains(&g.grant) {
                out.push(g.grant.clone());
            }
        }
        out
    }

    /// The grants of `wanted` that may still be asked for a call (rule 2). One given for the
    /// conversation is not asked for again, unless it was also recorded in the lock: that the
    /// call still lacked it means the lock no longer holds it (rule 6), and it may be asked for
    /// again.
    pub fn askable(&self, to: Applying<'_>, wanted: &[String]) -> Vec<String> {
        let given: Vec<&str> = self
            .given
            .iter()
            .filter(|g| !g.in_lock && g.applies(to))
            .map(|g| g.grant.as_str())
            .collect();
        wanted
            .iter()
            .filter(|w| !given.contains(&w.as_str()) && !self.refused.contains(&key(to.plugin, w)))
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

    /// Gives `grants` to the calls `to` describes, until `until_ms` or for the conversation;
    /// `in_lock` when they were also recorded in the lock.
    pub fn give(
        &mut self,
        to: Applying<'_>,
        grants: &[String],
        by: &str,
        at_ms: i64,
        until_ms: Option<i64>,
        in_lock: bool,
    ) {
        for g in grants {
            self.given.retain(|s| !(s.applies(to) && s.grant == *g));
            self.given.push(SessionGrant {
                plugin: to.plugin.to_string(),
                grant: g.clone(),
                by: by.to_string(),
                at_ms,
                digest: to.digest.to_string(),
                requester: to.requester.cloned(),
                until_ms,
                in_lock,
            });
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
    // What the plugin said it lacked is the plugin's word, not something the sandbox saw.
    let said = !request.refused.is_empty()
        && request
            .refused
            .iter()
            .all(|r| r.starts_with(cordon_core::SAID_LACKED));
    let what = if said {
        format!("`{tool}` failed for want of a grant")
    } else {
        format!("the sandbox refused `{tool}` something")
    };
    format!(
        "{what}{refused}; it would be allowed with {}",
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

    fn to<'a>(plugin: &'a str, requester: Option<&'a Requester>, now_ms: i64) -> Applying<'a> {
        Applying {
            plugin,
            digest: "sha256:1",
            requester,
            now_ms,
        }
    }

    #[test]
    fn a_grant_kept_in_the_lock_applies_only_while_the_lock_holds_it() {
        let mut s = SessionGrants::default();
        let web = to("web", None, 0);
        let (lasting, session) = ("net:https://a.example", "net:https://b.example");
        s.give(web, &[lasting.to_string()], "ann", 1, None, true);
        s.give(web, &[session.to_string()], "ann", 1, None, false);
        assert!(s.any_in_lock(web));
        assert!(!s.any_in_lock(to("fetch", None, 0)));
        // Unknown (a host that cannot tell): both apply.
        assert_eq!(s.of_held(web, None), [lasting, session]);
        assert_eq!(
            s.of_held(web, Some(&[lasting.to_string()])),
            [lasting, session]
        );
        // Revoked: only the one given for the conversation is left, and the other may be
        // asked for again.
        assert_eq!(s.of_held(web, Some(&[])), [session]);
        let wanted = [lasting.to_string(), session.to_string()];
        assert_eq!(s.askable(web, &wanted), [lasting]);
    }

    #[test]
    fn refused_and_given_grants_are_not_asked_again_and_requests_are_bounded() {
        let mut s = SessionGrants::default();
        let wanted = vec![
            "net:https://a.example".to_string(),
            "net:https://b.example".into(),
        ];
        let web = to("web", None, 0);
        assert_eq!(s.askable(web, &wanted), wanted);
        s.refuse("web", &wanted[..1]);
        s.give(web, &wanted[1..], "ann", 1, None, false);
        assert!(s.askable(web, &wanted).is_empty());
        // Another plugin is another question.
        assert_eq!(s.askable(to("fetch", None, 0), &wanted), wanted);
        assert_eq!(s.of(web), vec!["net:https://b.example".to_string()]);
        // Not for another requester's turns, another component, or past its end.
        let bob = Requester::token("bob");
        assert!(s.of(to("web", Some(&bob), 0)).is_empty());
        assert!(
            s.of(Applying {
                digest: "sha256:2",
                ..web
            })
            .is_empty()
        );
        s.give(
            to("web", Some(&bob), 0),
            &wanted[..1],
            "ann",
            1,
            Some(100),
            false,
        );
        assert_eq!(s.of(to("web", Some(&bob), 99)).len(), 1);
        assert!(s.of(to("web", Some(&bob), 100)).is_empty());
        assert!(s.limit_reached(MAX_PER_TURN - 1).is_none());
        assert!(s.limit_reached(MAX_PER_TURN).unwrap().contains("this turn"));
        s.asked = MAX_PER_SESSION;
        assert!(s.limit_reached(0).unwrap().contains("conversation"));
    }
}
