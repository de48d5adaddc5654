//! `cordon policy test | explain`: the per-call policy of the config in use, loaded against
//! the installed tools as a conversation loads it, and what it decides for one call. Also the
//! config lookup and the grant-derived default that `plugin install` and `inspect` show.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use cordon_agent::approval::{self, ApprovalConfig, Decision as GrantDecision, Policy as Approval};
use cordon_agent::{AgentConfig, ToolHost, ToolSpec};
use cordon_home::{Home, Toolbox};
use cordon_policy::{Call, Caller, CountScope, Policy, RuleRef, SessionFacts, Verdict};
use serde_json::{Value, json};

use crate::term::{errln, outln, print_json_line};
use crate::toolbox_host::ToolboxHost;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Load the [policy] of the config in use against the installed tools, run every rule's
    /// examples, and list the rules and the policy's digest. Exits 2 when the policy is broken.
    Test(TestArgs),
    /// What the policy decides for one call: the decision, the rule that made it, every rule
    /// of the tool and whether it applies, and the grant-derived default. Nothing is run.
    Explain(Box<ExplainArgs>),
}

/// Which config holds the policy.
#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The config whose [policy] applies, as for `cordon chat`/`run` (default:
    /// ./cordon.toml when it exists).
    #[arg(long, env = "CORDON_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Print JSON (keys: config, digest, tools, rules) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The tool: `plugin.tool`, or its bare name when only one plugin has it.
    tool: String,
    /// The call's arguments, a JSON object.
    #[arg(default_value = "{}")]
    args: String,
    /// Where the call comes from.
    #[arg(long, default_value = "cli", value_parser = ["cli", "serve", "mcp", "mcp-http", "gateway"])]
    origin: String,
    /// The API token's name the call is made with.
    #[arg(long = "as", value_name = "TOKEN")]
    token: Option<String>,
    /// The gateway's `user`.
    #[arg(long)]
    user: Option<String>,
    /// The MCP client's name.
    #[arg(long)]
    client: Option<String>,
    /// A tool a human approved a call of earlier in the session. Repeatable.
    #[arg(long, value_name = "PLUGIN.TOOL")]
    approved: Vec<String>,
    /// A label the session holds. Repeatable.
    #[arg(long = "label", value_name = "LABEL")]
    labels: Vec<String>,
    /// A counter's value: a [policy.counters] name, or `rule:ID` for a rule's `calls`
    /// (default 0). Repeatable.
    #[arg(long = "count", value_name = "NAME=N")]
    counts: Vec<String>,
    /// When the call is made, local time in the policy's time zone (default: now).
    #[arg(long, value_name = "YYYY-MM-DDTHH:MM")]
    at: Option<String>,
    #[command(flatten)]
    config: ConfigArg,
    /// Print JSON (keys: tool, args, caller, session, counts, at, decision, decided_by,
    /// rule, rules, default, digest) instead of text.
    #[arg(long)]
    json: bool,
}

/// A command the user can fix: a broken policy, an unknown tool, arguments that are not
/// JSON. Exits 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyUsage(String);

fn usage(message: impl Into<String>) -> anyhow::Error {
    PolicyUsage(message.into()).into()
}

pub async fn run(home: &Home, command: PolicyCommand) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Test(args) => test(home, args).await,
        PolicyCommand::Explain(args) => explain(home, *args).await,
    }
}

/// The config a command here uses, as `cordon chat`/`run` find it.
pub struct ConfigInUse {
    /// Its contents (the defaults when there is none).
    pub config: AgentConfig,
    /// The file, as shown to the user; `None` when there is none.
    pub shown: Option<String>,
}

impl ConfigInUse {
    /// `--config` (or $CORDON_CONFIG), else ./cordon.toml when it exists.
    pub fn find(explicit: Option<&Path>) -> anyhow::Result<ConfigInUse> {
        let Some(path) = crate::chat::config_in_use(explicit) else {
            return Ok(ConfigInUse {
                config: AgentConfig::default(),
                shown: None,
            });
        };
        let shown = if explicit.is_some() {
            path.display().to_string()
        } else {
            format!("./{}", path.display())
        };
        Ok(ConfigInUse {
            config: AgentConfig::load(&path, true)?,
            shown: Some(shown),
        })
    }

    /// Which approval rules apply, in words.
    pub fn rules_words(&self) -> String {
        match &self.shown {
            Some(shown) => format!("the rules of {shown}"),
            None => "no ./cordon.toml here, so only the built-in rules".to_string(),
        }
    }

    /// Loads its policy against `tools`; a broken one names the config.
    pub fn policy(&self, tools: &[ToolSpec]) -> anyhow::Result<Arc<Policy>> {
        cordon_agent::policy::load(&self.config.policy, tools).map_err(|e| {
            anyhow::Error::new(e).context(format!(
                "the [policy] of {} does not load",
                self.shown.as_deref().unwrap_or("the built-in config")
            ))
        })
    }
}

/// The tools a conversation started here would be offered (those of plugins that load), as
/// the policy is loaded against them. `warn`: say which plugins are left out.
pub async fn installed_tools(home: &Home, warn: bool) -> anyhow::Result<Vec<ToolSpec>> {
    let host = ToolboxHost::new(Toolbox::load(home).await?);
    if warn {
        for (plugin, reason) in host.unavailable() {
            errln!("warning: plugin `{plugin}` is not offered, so rules cannot name it: {reason}");
        }
    }
    Ok(host.tools())
}

/// The decision for one tool as `cordon chat`/`run` make it before any answer is given:
/// the default the policy's rules are laid over.
pub fn grant_default(rules: &ApprovalConfig, spec: &ToolSpec) -> GrantDecision {
    let none = approval::Standing {
        answers: &Default::default(),
        requester: None,
        labels: &cordon_core::labels::NO_LABELS,
    };
    approval::decide(rules, none, spec, None)
}

/// The decision a conversation makes for a call the policy gave `verdict` (no answers given
/// yet): the rules laid over `[approval]` and the default, in the host's precedence.
fn final_decision(
    rules: &ApprovalConfig,
    spec: &ToolSpec,
    verdict: &cordon_agent::cordon_policy::Verdict,
    labels: &cordon_core::SessionLabels,
) -> GrantDecision {
    let none = approval::Standing {
        answers: &Default::default(),
        requester: None,
        labels,
    };
    approval::decide(rules, none, spec, Some(verdict))
}

/// The session labels `--label` gives, so the Rule of Two decides as in such a session.
fn held_labels(given: &[String]) -> anyhow::Result<cordon_core::SessionLabels> {
    let mut held = cordon_core::SessionLabels::default();
    for label in given {
        let source = format!("--label {label}");
        let exposure = match label.as_str() {
            "private" => cordon_core::Exposure {
                private: vec![source],
                ..Default::default()
            },
            "untrusted" => cordon_core::Exposure {
                untrusted: vec![source],
                ..Default::default()
            },
            other => {
                return Err(usage(format!(
                    "--label `{other}`: a session's labels are `private` and `untrusted`"
                )));
            }
        };
        held.saw("the session", &exposure);
    }
    Ok(held)
}

/// What a conversation does with calls of the tool: the decision in words, and why.
pub fn describe_default(d: &GrantDecision) -> String {
    format!("{} ({}): {}", d.policy.as_str(), meaning(d), d.reason)
}

fn meaning(d: &GrantDecision) -> &'static str {
    match d.policy {
        Approval::Ask => "asks before each call",
        Approval::Auto => "runs without asking",
        Approval::Deny => "never runs",
    }
}

/// The grant-derived default in the policy's words: `allow`, `ask` or `deny`.
fn default_word(d: &GrantDecision) -> &'static str {
    match d.policy {
        Approval::Auto => "allow",
        Approval::Ask => "ask",
        Approval::Deny => "deny",
    }
}

/// `id (file:line)`, with the rule's reason.
fn rule_words(r: &RuleRef) -> String {
    match &r.reason {
        Some(reason) => format!("`{}` ({}): {reason}", r.id, r.source),
        None => format!("`{}` ({})", r.id, r.source),
    }
}

/// The policy `plugin inspect` shows the rules of: `None` (after a warning) when it cannot be
/// loaded, which does not stop the inspection.
pub async fn for_inspect(home: &Home, found: &ConfigInUse) -> Option<Arc<Policy>> {
    if found.config.policy.is_empty() {
        return None;
    }
    let loaded = match installed_tools(home, false).await {
        Ok(tools) => found.policy(&tools),
        Err(e) => Err(e.context("the installed tools do not load")),
    };
    match loaded {
        Ok(policy) => Some(policy),
        Err(e) => {
            errln!(
                "warning: no policy rules are shown: {} (`cordon policy test` says more)",
                crate::render_error(&e)
            );
            None
        }
    }
}

/// The rules that may apply to calls of `tool`, one line each.
pub fn rules_words(policy: &Policy, tool: &str) -> Vec<String> {
    policy
        .rules_for(tool)
        .iter()
        .map(|r| format!("{} {}", r.decision, rule_words(r)))
        .collect()
}

/// The tools each rule may apply to, by rule id.
fn tools_by_rule(policy: &Policy, tools: &[ToolSpec]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in tools {
        let identity = t.identity();
        for r in policy.rules_for(&identity) {
            out.entry(r.id).or_default().push(identity.clone());
        }
    }
    out
}

async fn test(home: &Home, args: TestArgs) -> anyhow::Result<()> {
    let found =
        ConfigInUse::find(args.config.config.as_deref()).map_err(|e| usage(format!("{e:#}")))?;
    let tools = installed_tools(home, true).await?;
    let policy = found.policy(&tools)?;
    let by_rule = tools_by_rule(&policy, &tools);
    let examples: BTreeMap<&str, (usize, usize)> = found
        .config
        .policy
        .rules
        .iter()
        .map(|r| {
            let r = r.get_ref();
            (r.id.as_str(), (r.matches.len(), r.not_match.len()))
        })
        .collect();
    let rules = policy.rules();
    let total: usize = examples.values().map(|(m, n)| m + n).sum();
    if args.json {
        let rules: Vec<Value> = rules
            .iter()
            .map(|r| {
                let (m, n) = examples.get(r.id.as_str()).copied().unwrap_or_default();
                json!({
                    "id": r.id,
                    "source": r.source,
                    "decision": r.decision,
                    "reason": r.reason,
                    "tools": by_rule.get(&r.id).cloned().unwrap_or_default(),
                    "examples": {"match": m, "not_match": n},
                })
            })
            .collect();
        let out = json!({
            "config": found.shown,
            "digest": policy.digest(),
            "tools": tools.len(),
            "rules": rules,
        });
        print_json_line(&serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let Some(shown) = &found.shown else {
        outln!(
            "No config in use (no --config, $CORDON_CONFIG or ./cordon.toml here), so no policy \
             rules: every call is decided by the grant-derived default."
        );
        return Ok(());
    };
    if rules.is_empty() {
        outln!(
            "{shown} has no [policy] rules: every call is decided by the grant-derived default."
        );
        outln!("digest: {}", policy.digest());
        return Ok(());
    }
    outln!(
        "The policy of {shown} loads against the {} installed tools: {} rules, {total} examples, all pass.",
        tools.len(),
        rules.len()
    );
    for r in &rules {
        outln!("  {} ({})", r.id, r.source);
        match &r.reason {
            Some(reason) => outln!("    {}: {reason}", r.decision),
            None => outln!("    {}", r.decision),
        }
        let applies_to = by_rule.get(&r.id).map(Vec::as_slice).unwrap_or_default();
        let tools_words = match applies_to.len() {
            0 => "none installed".to_string(),
            n if n == tools.len() && n > 1 => format!("every installed tool ({n})"),
            n if n > 6 => format!("{} and {} more", applies_to[..5].join(", "), n - 5),
            _ => applies_to.join(", "),
        };
        outln!("    tools: {tools_words}");
        match examples.get(r.id.as_str()) {
            Some((0, 0)) => outln!("    examples: none"),
            Some((m, n)) => outln!("    examples: {m} match, {n} not_match: pass"),
            None => outln!(
                "    examples: none (a Cedar policy has none; try it with `cordon policy explain`)"
            ),
        }
    }
    outln!("digest: {}", policy.digest());
    Ok(())
}

/// The installed tool `name` names: `plugin.tool`, or a bare tool name only one plugin has.
fn resolve<'a>(tools: &'a [ToolSpec], name: &str) -> anyhow::Result<&'a ToolSpec> {
    if let Some(t) = tools.iter().find(|t| t.identity() == name) {
        return Ok(t);
    }
    let bare: Vec<&ToolSpec> = tools.iter().filter(|t| t.tool == name).collect();
    match bare.as_slice() {
        [one] => Ok(one),
        [] if tools.is_empty() => Err(usage(format!(
            "no installed tool is named `{name}`: no plugin is installed (cordon plugin install …)"
        ))),
        [] => Err(usage(format!(
            "no installed tool is named `{name}`; the installed tools are: {}",
            tools
                .iter()
                .map(ToolSpec::identity)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        many => Err(usage(format!(
            "`{name}` is a tool of several plugins: {}; name one as plugin.tool",
            many.iter()
                .map(|t| t.identity())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The call's arguments: a JSON object that fits the tool's input schema (what a call with
/// other arguments gets is a refusal before any decision).
fn arguments(text: &str, spec: &ToolSpec) -> anyhow::Result<Value> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        usage(format!(
            "the arguments are not JSON ({e}); write them as one JSON object in single quotes, \
             such as '{{\"path\": \"/data/x.csv\"}}'"
        ))
    })?;
    if !value.is_object() {
        return Err(usage(format!(
            "the arguments must be a JSON object such as '{{\"path\": \"/data/x.csv\"}}', not `{value}`"
        )));
    }
    let identity = spec.identity();
    let schema = cordon_core::CompiledSchema::compile(&spec.input_schema)
        .map_err(|e| anyhow::anyhow!("the input schema of `{identity}` does not compile: {e}"))?;
    schema.check(&value).map_err(|e| {
        usage(format!(
            "the arguments do not fit the input schema of `{identity}` ({e}); a call with them \
             is refused before any rule is asked (see `cordon plugin inspect {}`)",
            spec.plugin
        ))
    })?;
    Ok(value)
}

/// `--count NAME=N` values, by the counter names the policy reads.
fn counts(given: &[String], policy: &Policy, tool: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let scope = CountScope {
        session: "",
        caller: ("", ""),
    };
    // Named counters, and the `calls` of the rules of this tool only.
    let rules: BTreeSet<String> = policy.rules_for(tool).into_iter().map(|r| r.id).collect();
    let known: BTreeSet<String> = policy
        .counters_for(tool, scope, 0)
        .into_iter()
        .flat_map(|q| q.names.to_vec())
        .map(|n| n.to_string())
        .filter(|n| n.strip_prefix("rule:").is_none_or(|id| rules.contains(id)))
        .collect();
    let mut out: BTreeMap<String, u64> = known.iter().map(|n| (n.clone(), 0)).collect();
    for item in given {
        let (name, n) = item.split_once('=').ok_or_else(|| {
            usage(format!(
                "--count `{item}`: write NAME=N, such as rule:too-many=20"
            ))
        })?;
        let n: u64 = n.trim().parse().map_err(|_| {
            usage(format!(
                "--count `{item}`: `{n}` is not a count (a whole number from 0)"
            ))
        })?;
        if !known.contains(name) {
            return Err(usage(format!(
                "--count `{item}`: the policy has no counter `{name}` (its counters: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                }
            )));
        }
        out.insert(name.to_string(), n);
    }
    Ok(out)
}

async fn explain(home: &Home, args: ExplainArgs) -> anyhow::Result<()> {
    let found =
        ConfigInUse::find(args.config.config.as_deref()).map_err(|e| usage(format!("{e:#}")))?;
    let tools = installed_tools(home, true).await?;
    let policy = found.policy(&tools)?;
    let spec = resolve(&tools, &args.tool)?;
    let identity = spec.identity();
    let call_args = arguments(&args.args, spec)?;
    for a in &args.approved {
        if !tools.iter().any(|t| t.identity() == *a) {
            return Err(usage(format!(
                "--approved `{a}`: no installed tool is named so; write plugin.tool, such as `{identity}`"
            )));
        }
    }
    let caller = Caller {
        origin: args.origin.clone(),
        token: args.token.clone().unwrap_or_default(),
        user: args.user.clone().unwrap_or_default(),
        client: args.client.clone().unwrap_or_default(),
    };
    let session = SessionFacts {
        approved: args.approved.iter().cloned().collect(),
        labels: args.labels.iter().cloned().collect(),
    };
    let held = held_labels(&args.labels)?;
    let counts = counts(&args.counts, &policy, &identity)?;
    let now_ms = match &args.at {
        Some(at) => policy
            .local_time(at)
            .map_err(|e| usage(format!("--at: {e}")))?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default(),
    };
    let named: cordon_policy::Counts = counts
        .iter()
        .map(|(n, c)| (n.as_str().into(), *c))
        .collect();
    let (verdict, each) = policy.explain(&Call {
        tool: &identity,
        args: &call_args,
        caller: &caller,
        session: &session,
        counts: &named,
        now_ms,
        reach: None,
    });
    let default = grant_default(&found.config.approval, spec);
    let each = with_errors(each, &verdict);
    let decided = final_decision(&found.config.approval, spec, &verdict, &held);
    let decision = default_word(&decided);
    let at = policy.show_time(now_ms);
    if args.json {
        let rules: Vec<Value> = each
            .iter()
            .map(|(r, applies)| {
                let mut rule = rule_json(r);
                rule["applies"] = json!(applies);
                rule
            })
            .collect();
        let out = json!({
            "tool": identity,
            "args": call_args,
            "caller": {
                "origin": caller.origin,
                "token": caller.token,
                "user": caller.user,
                "client": caller.client,
            },
            "session": {"approved": session.approved, "labels": session.labels},
            "counts": counts,
            "at": at,
            "decision": decision,
            "decided_by": match (&decided.rule, &verdict.rule) {
                (Some(_), _) => "rule",
                (None, _) if !held.is_empty()
                    && cordon_core::rule_of_two(&held, &identity, &spec.exposure).is_some() =>
                {
                    "rule_of_two"
                }
                (None, Some(_)) => "approval",
                (None, None) => "default",
            },
            "reason": decided.reason,
            "rule": verdict.rule.as_ref().map(rule_json),
            "rules": rules,
            "default": {"decision": default_word(&default), "reason": default.reason},
            "digest": verdict.digest,
        });
        print_json_line(&serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!("{identity} {call_args}");
    outln!("  {}, at {at}", caller_words(&caller, &session, &counts));
    match (&decided.rule, &verdict.rule) {
        (Some(rule), _) => outln!("decision: {decision}, by rule {}", rule_words(rule)),
        // A rule applied, but `[approval]` (stricter) decides; or the Rule of Two does, over
        // the rules and the default alike.
        (None, Some(_)) => outln!("decision: {decision}: {}", decided.reason),
        (None, None) if decided.reason != default.reason => {
            outln!("decision: {decision}: {}", decided.reason)
        }
        (None, None) => {
            outln!("decision: {decision} (no rule applies: the grant-derived default decides)")
        }
    }
    if each.is_empty() {
        outln!("rules of {identity}: none");
    } else {
        outln!("rules of {identity}:");
        for (r, applies) in &each {
            let mark = if *applies { "applies" } else { "-" };
            outln!("  {mark:8} {:6} {}", r.decision.as_str(), rule_words(r));
            if let Some(e) = &r.error {
                outln!("           could not be evaluated ({e}), so it counts as applying");
            }
        }
    }
    if let Some(off) = policy.denies_every_call(&identity) {
        outln!(
            "note: rule `{}` denies every call of {identity}, so a model is not offered it",
            off.id
        );
    }
    outln!(
        "grant-derived default: {} ({}): {}",
        default_word(&default),
        meaning(&default),
        default.reason
    );
    if let Some(out) = spec.exposure.egress.first() {
        outln!(
            "Rule of Two: {identity} can send data out (`{out}`), so in a session that has seen \
             untrusted content and private data{} every call of it is asked first, whatever \
             the rules say",
            match spec.exposure.private.first() {
                Some(own) => format!(" (or only untrusted content: it reads `{own}` itself)"),
                None => String::new(),
            }
        );
    }
    outln!("digest: {}", verdict.digest);
    Ok(())
}

/// A rule as JSON, every key present.
fn rule_json(r: &RuleRef) -> Value {
    json!({
        "id": r.id,
        "source": r.source,
        "decision": r.decision,
        "reason": r.reason,
        "error": r.error,
    })
}

/// Every rule of the tool and whether it applies: a rule that could not be evaluated for the
/// call and so counts as applying (the verdict says so) is marked as applying, with why.
fn with_errors(each: Vec<(RuleRef, bool)>, verdict: &Verdict) -> Vec<(RuleRef, bool)> {
    each.into_iter()
        .map(|(rule, applies)| {
            match verdict
                .applied
                .iter()
                .find(|a| a.id == rule.id && a.error.is_some())
            {
                Some(failed) => (failed.clone(), true),
                None => (rule, applies),
            }
        })
        .collect()
}

/// Who calls, what the session holds and the counts, in words.
fn caller_words(caller: &Caller, session: &SessionFacts, counts: &BTreeMap<String, u64>) -> String {
    let mut parts = vec![format!("from {}", caller.origin)];
    for (what, value) in [
        ("token", &caller.token),
        ("user", &caller.user),
        ("client", &caller.client),
    ] {
        if !value.is_empty() {
            parts.push(format!("{what} `{value}`"));
        }
    }
    let list = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(", ");
    if !session.approved.is_empty() {
        parts.push(format!("approved earlier: {}", list(&session.approved)));
    }
    if !session.labels.is_empty() {
        parts.push(format!("labels: {}", list(&session.labels)));
    }
    if !counts.is_empty() {
        let shown: Vec<String> = counts.iter().map(|(n, c)| format!("{n}={c}")).collect();
        parts.push(format!("counts: {}", shown.join(", ")));
    }
    parts.join(", ")
}
