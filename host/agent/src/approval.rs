//! Who decides whether a tool call runs: the user's policy, then the tool's real capabilities.
//!
//! A plugin's `read_only` hint is never consulted: a tool runs without asking only when the
//! host says its effective grants cannot change anything (or the user said so). Rules bind to a
//! tool's identity (its plugin and its own name), never to the name the model sees, which
//! changes when two plugins offer a tool of the same name. Of the rules that apply, the most
//! restrictive wins, and `deny` from the config always wins.

use std::collections::BTreeMap;

use cordon_core::{Requester, RuleOfTwo, SessionLabels};
use cordon_policy::{RuleRef, Verdict};
use serde::{Deserialize, Serialize};

use crate::tools::ToolSpec;

/// What to do with a call to a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Ask the user before each call.
    Ask,
    /// Run without asking.
    Auto,
    /// Never run; the model is told the call was refused.
    Deny,
}

impl Policy {
    /// How restrictive the policy is, for picking the strictest of several rules.
    fn strictness(self) -> u8 {
        match self {
            Policy::Auto => 0,
            Policy::Ask => 1,
            Policy::Deny => 2,
        }
    }

    /// The word used in `cordon.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Ask => "ask",
            Policy::Auto => "auto",
            Policy::Deny => "deny",
        }
    }
}

/// Policy rules from `cordon.toml`:
///
/// ```toml
/// [approval.tools]
/// sql_query = "auto"          # the tool `sql_query` of every plugin
/// "files.read_file" = "deny"  # only the `read_file` of the plugin `files`
/// [approval.plugins]
/// files = "ask"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Rules by tool: a bare tool name applies to that tool in every plugin, `plugin.tool` to
    /// one plugin's tool.
    #[serde(default)]
    pub tools: BTreeMap<String, Policy>,
    /// Rules by plugin name.
    #[serde(default)]
    pub plugins: BTreeMap<String, Policy>,
    /// What a call that could send data out gets once the session has seen both private data
    /// and untrusted content: `ask` (the default) or `deny`.
    #[serde(default)]
    pub rule_of_two: RuleOfTwo,
}

impl ApprovalConfig {
    /// The rules that name no tool or plugin among `tools`, each with what to write instead.
    /// A rule that silently matches nothing (say, one written with the name the model sees,
    /// `files__read_file`) protects nothing, so interfaces warn about it.
    pub fn unmatched_rules(&self, tools: &[ToolSpec]) -> Vec<String> {
        let mut out = Vec::new();
        for (key, policy) in &self.tools {
            let matches = tools.iter().any(|t| t.tool == *key || t.identity() == *key);
            if matches {
                continue;
            }
            let hint = match tools.iter().find(|t| t.name == *key) {
                Some(t) => format!(
                    "`{key}` is the name the model sees for `{}`; write `{}` (that plugin only) or `{}` (every plugin)",
                    t.identity(),
                    t.identity(),
                    t.tool
                ),
                None => "name a tool as `tool` (in every plugin) or `plugin.tool`".to_string(),
            };
            out.push(format!(
                "the rule `[approval.tools] {key} = \"{}\"` matches no installed tool; {hint}",
                policy.as_str()
            ));
        }
        for (key, policy) in &self.plugins {
            if !tools.iter().any(|t| t.plugin == *key) {
                out.push(format!(
                    "the rule `[approval.plugins] {key} = \"{}\"` matches no installed plugin",
                    policy.as_str()
                ));
            }
        }
        out
    }
}

/// A user's answer to an approval question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// Run this call.
    Yes,
    /// Do not run this call; the model is told the user declined.
    No,
    /// Run this call and every later call of this tool in the conversation.
    Always,
    /// Refuse this call and every later call of this tool in the conversation. To a grant
    /// request: refuse, and never ask for this grant again in the conversation.
    Never,
    /// To a grant request only: give the grant for this many minutes (kept in the lock with
    /// its end, at most a day), and run the call again with it.
    For {
        /// How long, in minutes (at least 1).
        minutes: u64,
    },
    /// To a grant request only: give the grant for good (as `cordon grant` does), and run the
    /// call again with it.
    Forever,
    /// Do not run this call, and nobody was asked: the interface cannot ask (no terminal) or
    /// was told not to (`cordon run --approve auto`). The model is told this reason rather
    /// than that the user declined.
    Refused {
        /// Why, for the model and the user.
        reason: String,
    },
}

impl ApprovalAnswer {
    /// The word the audit log records for the answer (`yes`, `no`, `always`, `never`,
    /// `refused`).
    pub fn as_str(&self) -> &'static str {
        match self {
            ApprovalAnswer::Yes => "yes",
            ApprovalAnswer::No => "no",
            ApprovalAnswer::Always => "always",
            ApprovalAnswer::Never => "never",
            ApprovalAnswer::For { .. } => "for",
            ApprovalAnswer::Forever => "forever",
            ApprovalAnswer::Refused { .. } => "refused",
        }
    }

    /// A person's answer as the doors take it: `yes`, `no`, `always`, `never`, and to a grant
    /// request also `forever` and `for 30m` (or `for:2h`, any length from a minute to a day).
    /// `grant` says whether the question is a grant request; the error names what to type.
    pub fn parse(word: &str, grant: bool) -> Result<ApprovalAnswer, String> {
        let word = word.trim().to_lowercase();
        let words = if grant {
            "yes (this call), always (this session), `for 30m` (a while, up to a day), forever,              no or never"
        } else {
            "yes, no, always or never"
        };
        let answer = match word.as_str() {
            "y" | "yes" | "once" => ApprovalAnswer::Yes,
            "n" | "no" => ApprovalAnswer::No,
            "a" | "always" | "session" => ApprovalAnswer::Always,
            "v" | "never" => ApprovalAnswer::Never,
            "forever" | "f" if grant => ApprovalAnswer::Forever,
            other if grant && other.starts_with("for") => {
                let span = other["for".len()..]
                    .trim_start_matches([' ', ':', '='])
                    .trim();
                let minutes = humantime::parse_duration(span)
                    .map_err(|e| format!("`{span}` is not a duration ({e}); type e.g. `for 30m`"))?
                    .as_secs()
                    / 60;
                if !(1..=24 * 60).contains(&minutes) {
                    return Err(format!(
                        "`{span}` is outside a minute to a day; for longer, answer `forever`"
                    ));
                }
                ApprovalAnswer::For { minutes }
            }
            other => return Err(format!("`{other}` is not an answer; answer {words}")),
        };
        Ok(answer)
    }
}

/// An answer with who gave it and when: the audit log records them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GivenAnswer {
    /// The answer.
    pub answer: ApprovalAnswer,
    /// Who gave it: `user `ann` at the terminal`, `API token `ops``, `cordon run --approve
    /// auto`, `no answer within 5m`.
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub at_ms: i64,
}

impl GivenAnswer {
    /// An answer given by `by`, now.
    pub fn new(answer: ApprovalAnswer, by: impl Into<String>) -> Self {
        Self {
            answer,
            by: by.into(),
            at_ms: cordon_core::now_ms(),
        }
    }
}

/// An `always` or `never` a person gave in a conversation, kept with what it is bound to:
/// who gave it, when, the call it answered, and whose turns it covers. It decides later calls
/// of the same tool only in turns asked for by the same requester as the turn it was given
/// in, so a session that another token or end user reaches (through the API, which lets
/// tokens act on each other's sessions until scopes exist) never inherits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingAnswer {
    /// `auto` for `always`, `deny` for `never`.
    pub policy: Policy,
    /// Who gave it (as the audit log names them).
    pub by: String,
    /// When, in milliseconds since the Unix epoch (0: recorded before this was kept).
    #[serde(default)]
    pub at_ms: i64,
    /// Cordon's id of the call it answered (empty: recorded before this was kept).
    #[serde(default)]
    pub call_id: String,
    /// The turn of that call (0-based).
    #[serde(default)]
    pub turn: usize,
    /// The requester of that turn; the answer covers only their turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<Requester>,
}

impl StandingAnswer {
    /// An answer of an unknown person at the terminal: what a conversation recorded before
    /// answers were attributed reads as (it covers only turns with no requester).
    pub fn unattributed(policy: Policy) -> Self {
        StandingAnswer {
            policy,
            by: "the user".to_string(),
            at_ms: 0,
            call_id: String::new(),
            turn: 0,
            requester: None,
        }
    }

    /// Whether the answer decides calls in a turn asked for by `requester`.
    pub fn covers(&self, requester: Option<&Requester>) -> bool {
        self.requester.as_ref() == requester
    }

    /// The answer as the reason of a decision it makes: which answer, by whom, when, for
    /// which call. The audit record of a call it lets run (or refuses) carries this.
    pub fn reason(&self) -> String {
        let word = match self.policy {
            Policy::Auto => "always",
            Policy::Deny => "never",
            Policy::Ask => "ask",
        };
        let mut text = format!("{} answered `{word}` for this tool", self.by);
        if self.at_ms > 0 {
            text.push_str(&format!(" at {}", rfc3339_ms(self.at_ms)));
        }
        if !self.call_id.is_empty() {
            text.push_str(&format!(" (call {}, turn {})", self.call_id, self.turn + 1));
        }
        text.push_str(" in this conversation");
        text
    }
}

/// `at_ms` as an RFC 3339 UTC time with milliseconds.
fn rfc3339_ms(at_ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

/// The standing answers of a conversation, seen from one requester's turn: only the answers
/// that [cover](StandingAnswer::covers) the requester decide anything.
#[derive(Debug, Clone, Copy)]
pub struct Standing<'a> {
    /// The answers, by tool identity.
    pub answers: &'a BTreeMap<String, StandingAnswer>,
    /// Who asked for the turn.
    pub requester: Option<&'a Requester>,
    /// What the conversation's model has seen (the Rule of Two reads it); for a decision
    /// outside any conversation, [`cordon_core::labels::NO_LABELS`].
    pub labels: &'a SessionLabels,
}

impl<'a> Standing<'a> {
    /// The answer for the tool `identity` that applies in this turn.
    pub fn get(&self, identity: &str) -> Option<&'a StandingAnswer> {
        self.answers
            .get(identity)
            .filter(|a| a.covers(self.requester))
    }
}

/// Reads recorded standing answers: today's [`StandingAnswer`]s, or the bare policies
/// (`"auto"`, `"deny"`) that conversations recorded before answers were attributed, which
/// become answers of an unknown person covering only turns with no requester.
pub(crate) fn standing_answers<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, StandingAnswer>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Recorded {
        Now(StandingAnswer),
        Before(Policy),
    }
    let map = BTreeMap::<String, Recorded>::deserialize(d)?;
    Ok(map
        .into_iter()
        .map(|(k, v)| {
            let answer = match v {
                Recorded::Now(a) => a,
                Recorded::Before(policy) => StandingAnswer::unattributed(policy),
            };
            (k, answer)
        })
        .collect())
}

/// A decision with the reason shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The policy that applies.
    pub policy: Policy,
    /// Why, in words.
    pub reason: String,
    /// The per-call policy rule that made the decision, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleRef>,
}

impl Decision {
    fn plain(policy: Policy, reason: impl Into<String>) -> Decision {
        Decision {
            policy,
            reason: reason.into(),
            rule: None,
        }
    }

    fn by_rule(policy: Policy, rule: &RuleRef) -> Decision {
        Decision {
            policy,
            reason: rule.describe(),
            rule: Some(rule.clone()),
        }
    }
}

/// What a policy that does not load decides: every call is asked, with the reason, until
/// the policy is fixed (a host that had loaded a good one keeps using it instead).
pub fn broken_policy(error: &str) -> Verdict {
    Verdict {
        decision: Some(cordon_policy::Decision::Ask),
        rule: Some(RuleRef {
            id: "policy".to_string(),
            source: "[policy]".to_string(),
            decision: cordon_policy::Decision::Ask,
            reason: Some(format!(
                "the policy does not load, so every call is asked: {error}"
            )),
            error: None,
        }),
        applied: Vec::new(),
        digest: String::new(),
    }
}

/// Decides whether a call runs. The `[approval]` rules that apply to the tool are the
/// `[approval.tools]` rule for its bare name, the one for `plugin.tool` and the
/// `[approval.plugins]` rule for its plugin; the strictest of them counts (deny > ask > auto).
/// `verdict` is what the per-call `[policy]` said of this call's arguments, caller, session
/// and time (`None` when deciding for a tool as a whole). In order of precedence:
///
/// 1. an `[approval]` `deny`;
/// 2. a per-call policy `deny` (its rule and reason given to the model);
/// 3. a standing `never` in this conversation that covers the turn's requester (see
///    [`StandingAnswer::covers`]);
/// 4. the Rule of Two ([`cordon_core::labels`]): once the conversation has seen private data
///    and untrusted content, a call of a tool that can send data out is asked (or denied,
///    with `rule_of_two = "deny"`), even after an `always` or under an `allow` rule;
/// 5. a per-call policy `ask`: asked every time, even after an `always` for the tool, since
///    the rule singles out this kind of call (an `always` answers the tool's ordinary calls);
/// 6. a standing `always` that covers the requester;
/// 7. the strictest of a per-call policy `allow` and the `[approval]` rules;
/// 8. the default: `ask` for tools that declare themselves destructive, `auto` for tools
///    whose effective capabilities cannot change anything, `ask` for everything else.
///
/// Nothing here widens what a tool can reach: `auto` only skips the question.
pub fn decide(
    config: &ApprovalConfig,
    standing: Standing<'_>,
    spec: &ToolSpec,
    verdict: Option<&Verdict>,
) -> Decision {
    use cordon_policy::Decision as Rule;
    let identity = spec.identity();
    // Most specific first: on equal strictness the reason names the most specific rule.
    let candidates = [
        (config.tools.get(&identity), format!("`{identity}`")),
        (
            config.tools.get(&spec.tool),
            format!("the tool `{}`", spec.tool),
        ),
        (
            config.plugins.get(&spec.plugin),
            format!("the plugin `{}`", spec.plugin),
        ),
    ];
    let mut strictest: Option<(Policy, &String)> = None;
    for (policy, subject) in &candidates {
        if let Some(&p) = *policy
            && strictest.is_none_or(|(s, _)| p.strictness() > s.strictness())
        {
            strictest = Some((p, subject));
        }
    }
    if let Some((Policy::Deny, subject)) = strictest {
        return Decision::plain(Policy::Deny, format!("cordon.toml denies {subject}"));
    }
    let ruled = verdict.and_then(|v| Some((v.decision?, v.rule.as_ref()?)));
    if let Some((Rule::Deny, rule)) = ruled {
        return Decision::by_rule(Policy::Deny, rule);
    }
    let answer = standing.get(&identity);
    if let Some(answer) = answer.filter(|a| a.policy == Policy::Deny) {
        return Decision::plain(Policy::Deny, answer.reason());
    }
    if let Some(reason) = cordon_core::rule_of_two(standing.labels, &identity, &spec.exposure) {
        let policy = match config.rule_of_two {
            RuleOfTwo::Ask => Policy::Ask,
            RuleOfTwo::Deny => Policy::Deny,
        };
        return Decision::plain(policy, reason);
    }
    if let Some((Rule::Ask, rule)) = ruled {
        return Decision::by_rule(Policy::Ask, rule);
    }
    if let Some(answer) = answer {
        return Decision::plain(answer.policy, answer.reason());
    }
    if let Some((Rule::Allow, rule)) = ruled {
        return match strictest {
            Some((Policy::Ask, subject)) => Decision::plain(
                Policy::Ask,
                format!(
                    "cordon.toml sets `ask` for {subject}, stricter than {}",
                    rule.describe()
                ),
            ),
            _ => Decision::by_rule(Policy::Auto, rule),
        };
    }
    if let Some((p, subject)) = strictest {
        return Decision::plain(
            p,
            format!("cordon.toml sets `{}` for {subject}", p.as_str()),
        );
    }
    if spec.hints.destructive {
        return Decision::plain(Policy::Ask, "the tool declares itself destructive");
    }
    if spec.can_change_anything {
        Decision::plain(
            Policy::Ask,
            "its grants allow changing something (a writable path, a network host or environment)",
        )
    } else {
        Decision::plain(Policy::Auto, "its grants cannot change anything")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolHints;

    /// The decision for a tool as a whole (no per-call verdict).
    fn decide(config: &ApprovalConfig, standing: Standing<'_>, spec: &ToolSpec) -> Decision {
        super::decide(config, standing, spec, None)
    }

    /// An answer given at the terminal (no requester).
    fn answer(policy: Policy) -> StandingAnswer {
        StandingAnswer::unattributed(policy)
    }

    /// `answers` as they apply in a turn at the terminal.
    fn local(answers: &BTreeMap<String, StandingAnswer>) -> Standing<'_> {
        Standing {
            answers,
            requester: None,
            labels: &cordon_core::labels::NO_LABELS,
        }
    }

    fn spec(
        name: &str,
        plugin: &str,
        can_change: bool,
        read_only_hint: bool,
        destructive: bool,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            tool: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            hints: ToolHints {
                read_only: read_only_hint,
                destructive,
                ..ToolHints::default()
            },
            plugin: plugin.into(),
            grants: vec![],
            can_change_anything: can_change,
            digest: String::new(),
            proven: Default::default(),
            reach: Default::default(),
            exposure: Default::default(),
        }
    }

    /// The same tool offered by two plugins: the model sees qualified names.
    fn clashing() -> (ToolSpec, ToolSpec) {
        let mut one = spec("read_file", "files", false, true, false);
        one.name = "files__read_file".into();
        let mut two = spec("read_file", "files2", false, true, false);
        two.name = "files2__read_file".into();
        (one, two)
    }

    #[test]
    fn the_rule_of_two_asks_before_any_allowance_once_both_labels_are_held() {
        let grants = |list: &[&str]| -> cordon_core::Grants {
            list.iter().map(|g| g.parse().unwrap()).collect()
        };
        let mut fetch = spec("fetch", "web", true, false, false);
        fetch.exposure = cordon_core::Exposure::of(&grants(&["net:https://example.com"]));
        let mut read = spec("read_file", "files", false, true, false);
        read.exposure = cordon_core::Exposure::of(&grants(&["fs:/docs:/docs:ro"]));
        let mut c = ApprovalConfig::default();
        c.tools.insert("web.fetch".into(), Policy::Auto);
        let always = BTreeMap::from([("web.fetch".to_string(), answer(Policy::Auto))]);
        fn in_session<'a>(
            answers: &'a BTreeMap<String, StandingAnswer>,
            labels: &'a cordon_core::SessionLabels,
        ) -> Standing<'a> {
            Standing {
                answers,
                requester: None,
                labels,
            }
        }
        let none = BTreeMap::new();
        let mut labels = cordon_core::SessionLabels::default();
        labels.saw("web.fetch", &fetch.exposure);
        // Untrusted content alone: the rules decide.
        assert_eq!(
            decide(&c, in_session(&always, &labels), &fetch).policy,
            Policy::Auto
        );
        labels.saw("files.read_file", &read.exposure);
        for answers in [&none, &always] {
            let d = decide(&c, in_session(answers, &labels), &fetch);
            assert_eq!(d.policy, Policy::Ask);
            assert!(
                d.reason.contains("`fs:/docs:/docs:ro` (files.read_file)"),
                "{}",
                d.reason
            );
        }
        // A tool that cannot send anything out is not held back.
        let d = decide(&c, in_session(&none, &labels), &read);
        assert_eq!(d.policy, Policy::Auto);
        c.rule_of_two = RuleOfTwo::Deny;
        assert_eq!(
            decide(&c, in_session(&always, &labels), &fetch).policy,
            Policy::Deny
        );
        // An `[approval]` deny still names itself.
        c.tools.insert("web.fetch".into(), Policy::Deny);
        let d = decide(&c, in_session(&always, &labels), &fetch);
        assert!(d.reason.contains("cordon.toml denies"), "{}", d.reason);
        let parsed: ApprovalConfig = toml::from_str("rule_of_two = \"deny\"").unwrap();
        assert_eq!(parsed.rule_of_two, RuleOfTwo::Deny);
        assert!(toml::from_str::<ApprovalConfig>("rule_of_two = \"off\"").is_err());
    }

    #[test]
    fn defaults_follow_capabilities_not_hints() {
        let c = ApprovalConfig::default();
        let s = BTreeMap::new();
        assert_eq!(
            decide(&c, local(&s), &spec("a", "p", false, false, false)).policy,
            Policy::Auto
        );
        // A tool that claims to be read-only but can write is still asked about.
        assert_eq!(
            decide(&c, local(&s), &spec("a", "p", true, true, false)).policy,
            Policy::Ask
        );
        // Destructive is always ask by default, even with harmless grants.
        assert_eq!(
            decide(&c, local(&s), &spec("a", "p", false, true, true)).policy,
            Policy::Ask
        );
    }

    #[test]
    fn deny_wins_and_rules_apply_in_order() {
        let mut c = ApprovalConfig::default();
        c.tools.insert("a".into(), Policy::Auto);
        c.plugins.insert("p".into(), Policy::Deny);
        let mut s = BTreeMap::new();
        s.insert("p.a".to_string(), answer(Policy::Auto));
        assert_eq!(
            decide(&c, local(&s), &spec("a", "p", true, false, false)).policy,
            Policy::Deny
        );
        // A config rule sets the policy even against the default for destructive tools.
        c.plugins.clear();
        assert_eq!(
            decide(
                &c,
                local(&BTreeMap::new()),
                &spec("a", "p", true, false, true)
            )
            .policy,
            Policy::Auto
        );
        c.plugins.insert("p".into(), Policy::Ask);
        assert_eq!(
            decide(
                &c,
                local(&BTreeMap::new()),
                &spec("b", "p", false, false, false)
            )
            .policy,
            Policy::Ask
        );
        s.insert("p.b".to_string(), answer(Policy::Deny));
        assert_eq!(
            decide(&c, local(&s), &spec("b", "p", false, false, false)).policy,
            Policy::Deny
        );
        // A session `always` does not lift a config `deny`.
        c.tools.insert("b".into(), Policy::Deny);
        s.insert("p.b".to_string(), answer(Policy::Auto));
        let d = decide(&c, local(&s), &spec("b", "p", false, false, false));
        assert_eq!(d.policy, Policy::Deny);
        assert_eq!(d.reason, "cordon.toml denies the tool `b`");
    }

    #[test]
    fn a_bare_tool_rule_applies_to_the_tool_in_every_plugin_whatever_the_model_calls_it() {
        let (one, two) = clashing();
        let mut c = ApprovalConfig::default();
        c.tools.insert("read_file".into(), Policy::Deny);
        for t in [&one, &two] {
            let d = decide(&c, local(&BTreeMap::new()), t);
            assert_eq!(d.policy, Policy::Deny, "{}", t.name);
            assert_eq!(d.reason, "cordon.toml denies the tool `read_file`");
        }
        assert!(c.unmatched_rules(&[one, two]).is_empty());
    }

    #[test]
    fn a_qualified_rule_applies_to_one_plugins_tool() {
        let (one, two) = clashing();
        let mut c = ApprovalConfig::default();
        c.tools.insert("files.read_file".into(), Policy::Deny);
        let d = decide(&c, local(&BTreeMap::new()), &one);
        assert_eq!(d.policy, Policy::Deny);
        assert_eq!(d.reason, "cordon.toml denies `files.read_file`");
        assert_eq!(
            decide(&c, local(&BTreeMap::new()), &two).policy,
            Policy::Auto
        );
    }

    #[test]
    fn the_strictest_applicable_rule_wins() {
        let (one, _) = clashing();
        let none = BTreeMap::new();
        let rules = |tools: &[(&str, Policy)], plugins: &[(&str, Policy)]| ApprovalConfig {
            tools: tools.iter().map(|(k, p)| (k.to_string(), *p)).collect(),
            plugins: plugins.iter().map(|(k, p)| (k.to_string(), *p)).collect(),
            ..ApprovalConfig::default()
        };
        // A permissive tool rule does not lift a stricter plugin rule, nor the reverse.
        let c = rules(&[("read_file", Policy::Auto)], &[("files", Policy::Ask)]);
        let d = decide(&c, local(&none), &one);
        assert_eq!(d.policy, Policy::Ask);
        assert_eq!(d.reason, "cordon.toml sets `ask` for the plugin `files`");
        let c = rules(&[("read_file", Policy::Ask)], &[("files", Policy::Auto)]);
        assert_eq!(decide(&c, local(&none), &one).policy, Policy::Ask);
        // A qualified `auto` does not lift a bare `deny`.
        let c = rules(
            &[
                ("files.read_file", Policy::Auto),
                ("read_file", Policy::Deny),
            ],
            &[],
        );
        assert_eq!(decide(&c, local(&none), &one).policy, Policy::Deny);
        // A plugin `deny` beats a qualified `auto` and a session `always`.
        let c = rules(
            &[("files.read_file", Policy::Auto)],
            &[("files", Policy::Deny)],
        );
        let always = BTreeMap::from([("files.read_file".to_string(), answer(Policy::Auto))]);
        let d = decide(&c, local(&always), &one);
        assert_eq!(d.policy, Policy::Deny);
        assert_eq!(d.reason, "cordon.toml denies the plugin `files`");
        // Equal strictness: the reason names the most specific rule.
        let c = rules(
            &[("files.read_file", Policy::Ask), ("read_file", Policy::Ask)],
            &[("files", Policy::Ask)],
        );
        assert_eq!(
            decide(&c, local(&none), &one).reason,
            "cordon.toml sets `ask` for `files.read_file`"
        );
        // A session `always` still answers a config `ask`.
        let c = rules(&[("read_file", Policy::Ask)], &[]);
        assert_eq!(decide(&c, local(&always), &one).policy, Policy::Auto);
    }

    #[test]
    fn session_answers_bind_to_the_tool_identity() {
        let (one, two) = clashing();
        let c = ApprovalConfig::default();
        let never = BTreeMap::from([("files.read_file".to_string(), answer(Policy::Deny))]);
        assert_eq!(decide(&c, local(&never), &one).policy, Policy::Deny);
        assert_eq!(decide(&c, local(&never), &two).policy, Policy::Auto);
        // A key that is only a model-facing name binds to nothing.
        let by_name = BTreeMap::from([("files2__read_file".to_string(), answer(Policy::Deny))]);
        assert_eq!(decide(&c, local(&by_name), &two).policy, Policy::Auto);
    }

    #[test]
    fn rules_that_match_nothing_are_reported_with_what_to_write() {
        let (one, two) = clashing();
        let mut c = ApprovalConfig::default();
        c.tools.insert("files__read_file".into(), Policy::Deny);
        c.tools.insert("nope".into(), Policy::Ask);
        c.tools.insert("files2.read_file".into(), Policy::Ask);
        c.plugins.insert("gone".into(), Policy::Deny);
        c.plugins.insert("files".into(), Policy::Ask);
        // The model-facing name does not deny anything...
        assert_eq!(
            decide(&c, local(&BTreeMap::new()), &one).policy,
            Policy::Ask
        );
        // ...and says so.
        let notes = c.unmatched_rules(&[one, two]);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].contains("files__read_file = \"deny\"")
                && notes[0].contains("the name the model sees for `files.read_file`")
                && notes[0].contains("`read_file` (every plugin)"),
            "{}",
            notes[0]
        );
        assert!(notes[1].contains("`[approval.tools] nope"), "{}", notes[1]);
        assert!(
            notes[2].contains("`[approval.plugins] gone"),
            "{}",
            notes[2]
        );
    }

    #[test]
    fn a_standing_answer_covers_only_its_requesters_turns_and_says_whose_it_is() {
        let (one, _) = clashing();
        let c = ApprovalConfig::default();
        let ann = Requester::token("ann");
        let bob = Requester::token("bob");
        let given = StandingAnswer {
            policy: Policy::Deny,
            by: "API token `ops`".into(),
            at_ms: 1_700_000_000_123,
            call_id: "c3".into(),
            turn: 1,
            requester: Some(ann.clone()),
        };
        let answers = BTreeMap::from([("files.read_file".to_string(), given)]);
        let turn_of = |requester| Standing {
            answers: &answers,
            requester,
            labels: &cordon_core::labels::NO_LABELS,
        };
        let d = decide(&c, turn_of(Some(&ann)), &one);
        assert_eq!(d.policy, Policy::Deny);
        assert_eq!(
            d.reason,
            "API token `ops` answered `never` for this tool at 2023-11-14T22:13:20.123Z \
             (call c3, turn 2) in this conversation"
        );
        // Another token's turn, the same token for another end user, or a turn at the
        // terminal: the answer decides nothing there.
        let ann_as_carol = Requester {
            token: "ann".into(),
            user: Some("carol".into()),
        };
        for other in [Some(&bob), Some(&ann_as_carol), None] {
            assert_eq!(decide(&c, turn_of(other), &one).policy, Policy::Auto);
        }
    }

    #[test]
    fn answers_recorded_before_they_were_attributed_still_read() {
        #[derive(Deserialize)]
        struct Saved {
            #[serde(deserialize_with = "standing_answers")]
            answers: BTreeMap<String, StandingAnswer>,
        }
        let saved: Saved =
            serde_json::from_str(r#"{"answers": {"p.a": "auto", "p.b": "deny"}}"#).unwrap();
        assert_eq!(saved.answers["p.a"], answer(Policy::Auto));
        assert_eq!(saved.answers["p.b"].policy, Policy::Deny);
        // They keep covering turns at the terminal, where they were given.
        let spec = spec("a", "p", true, false, false);
        let standing = local(&saved.answers);
        assert_eq!(
            decide(&ApprovalConfig::default(), standing, &spec).policy,
            Policy::Auto
        );
        let now = StandingAnswer {
            requester: Some(Requester::token("ops")),
            ..answer(Policy::Auto)
        };
        let text = serde_json::to_string(&BTreeMap::from([("p.a", &now)])).unwrap();
        let saved: Saved = serde_json::from_str(&format!(r#"{{"answers": {text}}}"#)).unwrap();
        assert_eq!(saved.answers["p.a"], now);
    }

    #[test]
    fn refused_answers_carry_their_reason_through_serde() {
        let a = ApprovalAnswer::Refused {
            reason: "no terminal".into(),
        };
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(text, r#"{"refused":{"reason":"no terminal"}}"#);
        assert_eq!(serde_json::from_str::<ApprovalAnswer>(&text).unwrap(), a);
        assert_eq!(
            serde_json::to_string(&ApprovalAnswer::Always).unwrap(),
            "\"always\""
        );
    }
}
