//! Session labels and the Rule of Two: what a conversation's model has seen, and when a call
//! that could send data out must not run unasked.
//!
//! An agent that has read private data and has seen untrusted content can be steered by that
//! content into sending the private data out ("the lethal trifecta"). Cordon knows from a
//! tool's effective grants what its results may hold and whether it can send anything out, so
//! it enforces this without the plugin's help. How it decides, in order:
//!
//! 1. A tool's result is `private` when the tool holds a directory or environment grant not
//!    marked `:public` (what it returns may have been read through it).
//! 2. A tool's result is `untrusted` when the tool holds a network grant (HTTP origin or TCP
//!    address) not marked `:trusted` (what it returns may carry someone else's words).
//! 3. A session (a conversation, an MCP connection) holds every label of every result its
//!    model was given, errors included, for good: nothing takes a label away, and a fork keeps
//!    its parent's.
//! 4. A tool is egress-capable when it holds any network grant (trusted or not: a trusted
//!    origin can still receive what it is sent) or a read-write directory marked `:shared` or
//!    `:public` (what is written to a public place is published).
//! 5. Once a session holds `untrusted`, a call of an egress-capable tool is asked (or denied,
//!    if the config says so), whatever the other rules and standing answers say, when the
//!    session also holds `private`, or when the tool itself can read private data (one call
//!    could read it and send it); [`rule_of_two`] gives the reason shown to the human and the
//!    model.
//!
//! Labels are derived from what a tool could reach, not from what one call touched: a result
//! of a tool that can read `/home/ann/docs` is private even if that call read nothing there.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::grant::{FsMode, Grant, Grants};

/// What a tool result can carry into a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    /// Read through a directory or environment grant.
    Private,
    /// Came from the network: someone else's words, which may instruct the model.
    Untrusted,
}

impl Label {
    /// The label's name, as the policy, the audit log and the API show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Private => "private",
            Label::Untrusted => "untrusted",
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one tool's results carry and whether it can send data out, from its effective grants
/// (rules 1, 2 and 4): each list holds the grants, as written, that make it so.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposure {
    /// Grants its results may be read through, making them private.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub private: Vec<String>,
    /// Grants its results may come from, making them untrusted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untrusted: Vec<String>,
    /// Grants it can send data out through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
}

impl Exposure {
    /// The exposure of a plugin holding `grants`.
    pub fn of(grants: &Grants) -> Exposure {
        let mut exposure = Exposure::default();
        for grant in grants {
            let marks = grant.marks();
            let text = grant.to_string();
            match grant {
                Grant::Fs(fs) => {
                    if !marks.public {
                        exposure.private.push(text.clone());
                    }
                    if fs.mode == FsMode::ReadWrite && (marks.shared || marks.public) {
                        exposure.egress.push(text);
                    }
                }
                // A variable or a configuration value usually holds a credential.
                Grant::Env(..) | Grant::Config(..) => {
                    if !marks.public {
                        exposure.private.push(text);
                    }
                }
                Grant::Http(..) | Grant::Tcp(..) => {
                    if !marks.trusted {
                        exposure.untrusted.push(text.clone());
                    }
                    exposure.egress.push(text);
                }
            }
        }
        exposure
    }

    /// The labels its results carry, each with the first grant that gives it.
    pub fn labels(&self) -> impl Iterator<Item = (Label, &str)> {
        let private = self.private.first().map(|g| (Label::Private, g.as_str()));
        let untrusted = self
            .untrusted
            .first()
            .map(|g| (Label::Untrusted, g.as_str()));
        private.into_iter().chain(untrusted)
    }

    /// Whether it can send data out (rule 4).
    pub fn is_egress(&self) -> bool {
        !self.egress.is_empty()
    }
}

/// Where a session's label came from: a tool whose result carried it, and the grant that
/// made it so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelSource {
    /// The label.
    pub label: Label,
    /// The tool, by identity (`plugin.tool`).
    pub tool: String,
    /// The grant, as written (`fs:/home/ann/docs:/docs:ro`).
    pub grant: String,
}

/// How many sources a session keeps of each label: the first ones, which are what the reason
/// names. A label, once held, is never lost however many results carry it.
pub const SOURCES_KEPT: usize = 8;

/// No labels: what decisions outside any session read.
pub static NO_LABELS: SessionLabels = SessionLabels {
    sources: Vec::new(),
};

/// The labels a session holds, with where they came from (rule 3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLabels {
    /// The first sources of each label, in the order they were seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<LabelSource>,
}

impl SessionLabels {
    /// The model was given a result of `tool`, whose exposure is `exposure`.
    pub fn saw(&mut self, tool: &str, exposure: &Exposure) {
        for (label, grant) in exposure.labels() {
            let kept = self.sources.iter().filter(|s| s.label == label).count();
            let known = self
                .sources
                .iter()
                .any(|s| s.label == label && s.tool == tool && s.grant == grant);
            if kept < SOURCES_KEPT && !known {
                self.sources.push(LabelSource {
                    label,
                    tool: tool.to_string(),
                    grant: grant.to_string(),
                });
            }
        }
    }

    /// Adds what another record of the same session holds (another host's, through the
    /// store), as [`SessionLabels::saw`] would have: a label is never lost, and at most
    /// [`SOURCES_KEPT`] sources of each are kept. The sources added.
    pub fn merge(&mut self, sources: &[LabelSource]) -> Vec<LabelSource> {
        let mut added = Vec::new();
        for source in sources {
            let kept = self
                .sources
                .iter()
                .filter(|s| s.label == source.label)
                .count();
            if (kept < SOURCES_KEPT || !self.holds(source.label)) && !self.sources.contains(source)
            {
                self.sources.push(source.clone());
                added.push(source.clone());
            }
        }
        added
    }

    /// Whether the session holds `label`.
    pub fn holds(&self, label: Label) -> bool {
        self.sources.iter().any(|s| s.label == label)
    }

    /// The labels held.
    pub fn labels(&self) -> BTreeSet<Label> {
        self.sources.iter().map(|s| s.label).collect()
    }

    /// The labels held, by name, as policy rules and the audit log see them.
    pub fn names(&self) -> Vec<String> {
        self.labels()
            .into_iter()
            .map(|l| l.as_str().to_string())
            .collect()
    }

    /// Whether no label is held.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Whether the session holds both labels: then calls that can send data out are held
    /// back (rule 5).
    pub fn holds_both(&self) -> bool {
        self.holds(Label::Private) && self.holds(Label::Untrusted)
    }

    /// A one-line account for people: `private (files.read_file through fs:/docs:/docs:ro),
    /// untrusted (web.fetch from net:https://example.com)`; empty when nothing is held.
    pub fn describe(&self) -> String {
        self.labels()
            .into_iter()
            .map(|label| {
                let first = self.sources.iter().find(|s| s.label == label);
                match first {
                    Some(s) => format!("{label} ({} {} {})", s.tool, via(label), s.grant),
                    None => label.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn via(label: Label) -> &'static str {
    match label {
        Label::Private => "through",
        Label::Untrusted => "from",
    }
}

/// What happens to an egress-capable call once a session holds both labels (rule 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleOfTwo {
    /// A human is asked, with the reason.
    #[default]
    Ask,
    /// The call is refused, and the model told why.
    Deny,
}

/// Why a call of `tool` (with `exposure`) must not run unasked in a session holding
/// `session`'s labels, in plain words; `None` when the Rule of Two does not stop it (rule 5).
pub fn rule_of_two(session: &SessionLabels, tool: &str, exposure: &Exposure) -> Option<String> {
    let out = exposure.egress.first()?;
    let first = |label| session.sources.iter().find(|s| s.label == label);
    let untrusted = first(Label::Untrusted)?;
    let private = match (first(Label::Private), exposure.private.first()) {
        (Some(seen), _) => format!(
            "this session read private data through `{}` ({})",
            seen.grant, seen.tool
        ),
        (None, Some(own)) => format!("`{tool}` can read private data through `{own}`"),
        (None, None) => return None,
    };
    Some(format!(
        "{private} and untrusted content from `{}` ({}), and `{tool}` can send data out through \
         `{out}`: untrusted content could be steering it to leak the private data",
        untrusted.grant, untrusted.tool
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Grants {
        list.iter().map(|g| g.parse::<Grant>().unwrap()).collect()
    }

    #[test]
    fn grants_and_their_marks_decide_what_results_carry() {
        let files = Exposure::of(&grants(&["fs:/docs:/docs:ro", "fs:/www:/www:ro:public"]));
        assert_eq!(files.private, ["fs:/docs:/docs:ro"]);
        assert!(files.untrusted.is_empty() && !files.is_egress());
        let fetch = Exposure::of(&grants(&["net:https://example.com", "env:TOKEN"]));
        assert_eq!(fetch.untrusted, ["net:https://example.com"]);
        assert_eq!(fetch.private, ["env:TOKEN"]);
        assert!(fetch.is_egress());
        let trusted = Exposure::of(&grants(&[
            "net:https://docs.rs:trusted",
            "env:REGION:public",
        ]));
        assert!(trusted.private.is_empty() && trusted.untrusted.is_empty());
        // A trusted origin still receives what it is sent.
        assert_eq!(trusted.egress, ["net:https://docs.rs:trusted"]);
        let sync = Exposure::of(&grants(&[
            "fs:/sync:/sync:rw:shared",
            "fs:/tmp:/tmp:rw",
            "fs:/www:/www:rw:public",
        ]));
        // Writing to a public place publishes.
        assert_eq!(
            sync.egress,
            ["fs:/sync:/sync:rw:shared", "fs:/www:/www:rw:public"]
        );
        assert_eq!(sync.private.len(), 2);
        assert_eq!(Exposure::of(&Grants::new()), Exposure::default());
    }

    #[test]
    fn labels_merged_from_another_record_are_never_lost_and_stay_bounded() {
        let source = |label, i: usize| LabelSource {
            label,
            tool: format!("p.t{i}"),
            grant: format!("fs:/d{i}:/d:ro"),
        };
        let mut here = SessionLabels::default();
        here.saw("p.t0", &Exposure::of(&grants(&["fs:/d0:/d:ro"])));
        let theirs: Vec<LabelSource> = (0..20)
            .map(|i| source(Label::Private, i))
            .chain([source(Label::Untrusted, 99)])
            .collect();
        let added = here.merge(&theirs);
        // The one already held is not added again; the untrusted label always is.
        assert!(!added.contains(&source(Label::Private, 0)));
        assert!(added.contains(&source(Label::Untrusted, 99)));
        assert!(here.holds_both());
        assert_eq!(
            here.sources
                .iter()
                .filter(|s| s.label == Label::Private)
                .count(),
            SOURCES_KEPT
        );
        assert!(here.merge(&theirs).is_empty());
    }

    #[test]
    fn both_labels_stop_only_egress_capable_calls() {
        let files = Exposure::of(&grants(&["fs:/home/ann/docs:/docs:ro"]));
        let fetch = Exposure::of(&grants(&["net:https://example.com"]));
        let mut session = SessionLabels::default();
        assert_eq!(rule_of_two(&session, "web.fetch", &fetch), None);
        session.saw("web.fetch", &fetch);
        assert_eq!(session.names(), ["untrusted"]);
        // Untrusted content alone: nothing private to leak.
        assert_eq!(rule_of_two(&session, "web.fetch", &fetch), None);
        session.saw("files.read_file", &files);
        assert_eq!(session.names(), ["private", "untrusted"]);
        let reason = rule_of_two(&session, "web.fetch", &fetch).unwrap();
        assert!(
            reason.contains("`fs:/home/ann/docs:/docs:ro` (files.read_file)"),
            "{reason}"
        );
        assert!(
            reason.contains("`net:https://example.com` (web.fetch)"),
            "{reason}"
        );
        // A tool that cannot send anything out still runs as its rules say.
        assert_eq!(rule_of_two(&session, "files.read_file", &files), None);
        // A tool that can read private data and send it out is held back as soon as the
        // session has seen untrusted content: one call could do both.
        let both = Exposure::of(&grants(&[
            "fs:/home/ann/docs:/docs:ro",
            "net:https://x.org",
        ]));
        let mut web_only = SessionLabels::default();
        web_only.saw("web.fetch", &fetch);
        let reason = rule_of_two(&web_only, "sync.upload", &both).unwrap();
        assert!(
            reason.starts_with("`sync.upload` can read private data"),
            "{reason}"
        );
        assert_eq!(
            rule_of_two(&SessionLabels::default(), "sync.upload", &both),
            None
        );
        assert_eq!(
            session.describe(),
            "private (files.read_file through fs:/home/ann/docs:/docs:ro), \
             untrusted (web.fetch from net:https://example.com)"
        );
    }

    #[test]
    fn labels_are_kept_whatever_else_is_seen() {
        let mut session = SessionLabels::default();
        for i in 0..50 {
            let e = Exposure::of(&grants(&[&format!("env:V{i}")]));
            session.saw(&format!("p.t{i}"), &e);
            session.saw(&format!("p.t{i}"), &e);
        }
        assert_eq!(session.sources.len(), SOURCES_KEPT);
        // The cap on private sources does not keep the other label out.
        session.saw(
            "web.fetch",
            &Exposure::of(&grants(&["net:https://example.com"])),
        );
        assert!(session.holds_both());
        let json = serde_json::to_string(&session).unwrap();
        assert_eq!(
            serde_json::from_str::<SessionLabels>(&json).unwrap(),
            session
        );
    }
}
