//! A loaded policy: Cedar policies checked against the installed tools, split by tool so a
//! call is decided by the rules that can apply to it only.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Authorizer, Effect, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    PolicyId, PolicySet, RestrictedExpression, Schema, ValidationMode, Validator,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::by_caller::ByCaller;
use crate::by_count::ByCount;
use crate::call::RegexSets;
use crate::compile::{self, Fact};
use crate::config::{Decision, PolicyConfig};
use crate::context::Needs;
use crate::counts::{self, CountQuery, CountScope, Counter};
use crate::error::PolicyError;
use crate::native::{self, Check};
use crate::schema::{self, ArgType, ToolFacts};

/// A rule as the audit log and `policy explain` name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRef {
    /// Its id.
    pub id: String,
    /// `file:line`.
    pub source: String,
    /// What it decides.
    pub decision: Decision,
    /// Its reason, if it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set when the rule could not be evaluated for this call and counts as applying
    /// because it denies or asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RuleRef {
    /// The rule as audit records name it: `id (file:line)`.
    pub fn audit_name(&self) -> String {
        format!("{} ({})", self.id, self.source)
    }

    /// The rule in words for the person or model who sees its decision.
    pub fn describe(&self) -> String {
        let mut text = format!("policy rule `{}` ({})", self.id, self.source);
        if let Some(reason) = &self.reason {
            text.push_str(&format!(": {reason}"));
        }
        if let Some(e) = &self.error {
            text.push_str(&format!(
                " [could not be evaluated: {e}; treated as applying]"
            ));
        }
        text
    }
}

/// What the policy says of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The strictest decision of the rules that apply; `None` when none does (the
    /// grant-derived default decides).
    pub decision: Option<Decision>,
    /// The rule that made it: the first written of the strictest.
    pub rule: Option<RuleRef>,
    /// The rules found to apply. When a rule denies, only the denying ones are listed
    /// (`Policy::explain` lists every one).
    pub applied: Vec<RuleRef>,
    /// The digest of the policy in force.
    pub digest: String,
}

pub(crate) struct RuleMeta {
    pub(crate) rule: RuleRef,
    /// A `cordon.toml` rule as the host evaluates it; `None` for a policy of a Cedar file.
    pub(crate) check: Option<Check>,
}

pub(crate) struct ToolPolicy {
    pub(crate) plugin: String,
    pub(crate) action: EntityUid,
    pub(crate) resource: EntityUid,
    pub(crate) input: ArgType,
    /// The `cordon.toml` rules that may apply to the tool (scope and reach), as indices into
    /// `Policy::rules`, in the order written: evaluated by the host.
    pub(crate) native: Vec<usize>,
    /// `native` but for `by_count`'s, filed by the caller each rule is for.
    pub(crate) by_caller: ByCaller,
    /// The rules of `native` tested only on a count, by the count they read.
    pub(crate) by_count: ByCount,
    /// The policies of Cedar files that may apply to the tool: evaluated by Cedar.
    pub(crate) cedar: PolicySet,
    /// Whether any of `native` reads the time.
    pub(crate) reads_time: bool,
    /// The `cordon.toml` rules in the tool's scope that test its reach, fitting what it was
    /// installed with or not: a call whose tool reaches more ([`crate::Call::reach`]) is
    /// decided by those of them that fit what it reaches then, instead of by `native`'s.
    pub(crate) reach_bound: Vec<usize>,
    /// The regular expressions of `native` and `reach_bound`, as sets by argument.
    pub(crate) regex_sets: RegexSets,
    /// What of a request's context the tool's Cedar evaluations read.
    pub(crate) needs: Needs,
    /// Indices into `Policy::facts` of the tests its rules need.
    pub(crate) facts: Vec<usize>,
    /// Indices into `Policy::counters` of the counters its rules read: only these are asked
    /// of the store and put in `context.calls`, so a tool pays for its own rules' counters,
    /// not for every counter of the policy.
    pub(crate) counters: Vec<usize>,
    /// The store keys of `counters`, and of the counters that may count its calls (a call
    /// is reserved on these before it is decided, [`Policy::reservable`]).
    pub(crate) counting: counts::ToolCounting,
}

/// A policy ready to decide calls.
pub struct Policy {
    pub(crate) digest: String,
    /// Every rule and Cedar policy, in the order written.
    pub(crate) rules: Vec<RuleMeta>,
    /// Where each policy id is in `rules`.
    pub(crate) index: HashMap<PolicyId, usize>,
    /// By identity; hashed with foldhash, as a call looks its tool up several times (the keys
    /// are the installed tools' names, not a caller's).
    pub(crate) tools: HashMap<String, ToolPolicy, foldhash::fast::RandomState>,
    pub(crate) entities: Entities,
    pub(crate) facts: Vec<Fact>,
    /// How many different argument paths the rules read.
    pub(crate) arg_paths: usize,
    pub(crate) counters: Vec<Counter>,
    /// This policy's own number, which its counters' numbers are valid with (see `Counts`).
    pub(crate) number: u64,
    pub(crate) tz: jiff::tz::TimeZone,
    /// The local time of the last UTC minute asked about (see [`crate::call::MinuteCache`]).
    pub(crate) moments: crate::call::MinuteCache,
    pub(crate) authorizer: Authorizer,
    /// Each rule's Cedar policy alone, by id: the reference for examples and explain.
    pub(crate) singles: HashMap<String, PolicySet>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("digest", &self.digest)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// A policy with no rules: every call is left to the grant-derived default.
    pub fn empty(tools: &[ToolFacts]) -> Policy {
        Policy::compile(&PolicyConfig::default(), tools)
            .map(|(policy, _)| policy)
            .expect("an empty policy always loads")
    }

    /// Compiles `config` against the installed `tools`: the rules, the Cedar files, all
    /// validated against the tools' schema; with the place (`file:line`) of each
    /// `[policy]` rule. [`Policy::load`] then runs the examples.
    pub(crate) fn compile(
        config: &PolicyConfig,
        tools: &[ToolFacts],
    ) -> Result<(Policy, Vec<String>), PolicyError> {
        let tz = match &config.timezone {
            None => jiff::tz::TimeZone::UTC,
            Some(name) => jiff::tz::TimeZone::get(name).map_err(|e| {
                PolicyError::Config(format!(
                    "timezone = \"{name}\" is not a known IANA time zone (such as \"Europe/Berlin\" or \"UTC\"): {e}"
                ))
            })?,
        };
        let typed: Vec<(ToolFacts, ArgType)> = tools
            .iter()
            .map(|t| {
                let ty = ArgType::of_schema(&t.input_schema)
                    .filter(|t| matches!(t, ArgType::Record(_)))
                    .unwrap_or(ArgType::Record(BTreeMap::new()));
                (t.clone(), ty)
            })
            .collect();
        let (path, text) = match &config.source {
            Some(s) => (s.path.display().to_string(), Some(s.text.clone())),
            None => ("cordon.toml".to_string(), None),
        };
        let source_of = |index: usize, span: std::ops::Range<usize>| match &text {
            Some(t) if span.start <= t.len() => {
                format!("{path}:{}", t[..span.start].matches('\n').count() + 1)
            }
            _ => format!("{path} [policy] rule {}", index + 1),
        };
        let sources: Vec<String> = config
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| source_of(i, r.span()))
            .collect();

        // Cedar files first, so rule ids across both are checked together.
        let dir = config
            .source
            .as_ref()
            .and_then(|s| s.path.parent().map(|p| p.to_path_buf()))
            .unwrap_or_default();
        let mut file_policies = Vec::new();
        let mut digest_text = String::new();
        for file in &config.files {
            let full = dir.join(file);
            let display = full.display().to_string();
            let body = std::fs::read_to_string(&full).map_err(|cause| PolicyError::Read {
                path: display.clone(),
                cause,
            })?;
            digest_text.push_str(&format!("-- {file}\n{body}\n"));
            let set = PolicySet::from_str(&body).map_err(|e| PolicyError::Parse {
                path: display.clone(),
                message: format!("{e:?}")
                    .lines()
                    .take(12)
                    .collect::<Vec<_>>()
                    .join("\n"),
            })?;
            let mut from = 0;
            let mut parsed: Vec<_> = set.policies().cloned().collect();
            parsed.sort_by_key(|p| {
                p.id()
                    .to_string()
                    .trim_start_matches("policy")
                    .parse::<usize>()
                    .unwrap_or(0)
            });
            for (n, p) in parsed.into_iter().enumerate() {
                let shown = p.to_string();
                let line = match body[from..].find(shown.trim()) {
                    Some(at) => {
                        from += at + shown.trim().len();
                        body[..from - shown.trim().len()].matches('\n').count() + 1
                    }
                    None => 0,
                };
                let id = p
                    .annotation("id")
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{file}#{}", n + 1));
                let decision = match p.effect() {
                    Effect::Forbid => Decision::Deny,
                    Effect::Permit if p.annotation("ask").is_some() => Decision::Ask,
                    Effect::Permit => Decision::Allow,
                };
                let rule = RuleRef {
                    id: id.clone(),
                    source: if line > 0 {
                        format!("{file}:{line}")
                    } else {
                        file.clone()
                    },
                    decision,
                    reason: p.annotation("reason").map(str::to_string),
                    error: None,
                };
                file_policies.push((p.new_id(PolicyId::new(&id)), rule));
            }
        }

        let ids: Vec<(&str, String)> = config
            .rules
            .iter()
            .zip(&sources)
            .map(|(r, s)| (r.get_ref().id.as_str(), s.clone()))
            .chain(
                file_policies
                    .iter()
                    .map(|(_, r)| (r.id.as_str(), r.source.clone())),
            )
            .collect();
        let rule_ids = compile::unique_ids(ids)?;

        let mut counters: Vec<Counter> = Vec::new();
        for (name, spec) in &config.counters {
            compile::check_counter(spec, &rule_ids)
                .map_err(|m| PolicyError::Config(format!("counters.{name}: {m}")))?;
            counters.push(Counter::new(name, spec.clone()));
        }
        let mut facts = Vec::new();
        let mut rules: Vec<RuleMeta> = Vec::new();
        let mut index = HashMap::new();
        let mut all = PolicySet::new();
        let mut singles = HashMap::new();
        for (rule, source) in config.rules.iter().zip(&sources) {
            let rule = rule.get_ref();
            let compiled = compile::compile(rule, source, &typed, &rule_ids)?;
            // The digest follows the text and each rule's line, not how the config's path
            // was spelled (`cordon.toml`, `./cordon.toml`, `/etc/cordon/cordon.toml`), so a
            // decision in the audit log and `cordon policy explain` agree on it.
            let place = source.strip_prefix(path.as_str()).unwrap_or(source);
            digest_text.push_str(&compiled.text.replacen(
                &format!("@source({})", compile::lit(source)),
                &format!("@source({})", compile::lit(place)),
                1,
            ));
            facts.extend(compiled.facts);
            if let Some((name, spec)) = compiled.counter {
                // One name, one counter: rules and `context.calls` find a counter by it.
                if counters.iter().any(|c| *c.name == *name) {
                    return Err(PolicyError::Config(format!(
                        "counters.\"{name}\": the name of rule `{}`'s own counter; name the counter otherwise",
                        rule.id
                    )));
                }
                counters.push(Counter::new(&name, spec));
            }
            let id = PolicyId::new(&rule.id);
            let policy =
                cedar_policy::Policy::parse(Some(id.clone()), &compiled.text).map_err(|e| {
                    PolicyError::Rule {
                        id: rule.id.clone(),
                        at: source.clone(),
                        message: format!("its `when` is not valid Cedar: {e}"),
                    }
                })?;
            add(&mut all, &mut singles, policy)?;
            index.insert(id, rules.len());
            rules.push(RuleMeta {
                rule: RuleRef {
                    id: rule.id.clone(),
                    source: source.clone(),
                    decision: rule.decision,
                    reason: rule.reason.clone(),
                    error: None,
                },
                check: Some(compiled.check),
            });
        }
        for (policy, rule) in file_policies {
            let id = policy.id().clone();
            add(&mut all, &mut singles, policy)?;
            index.insert(id, rules.len());
            rules.push(RuleMeta { rule, check: None });
        }

        let names: Vec<String> = counters.iter().map(|c| c.name.to_string()).collect();
        let schema = Schema::from_json_value(schema::cedar_schema(&typed, &names))
            .map_err(|e| PolicyError::Config(format!("the tools' schema does not load: {e}")))?;
        let validated = Validator::new(schema.clone()).validate(&all, ValidationMode::Strict);
        if let Some(e) = validated.validation_errors().next() {
            let id = e.policy_id();
            let rule = &rules[index[id]].rule;
            return Err(PolicyError::Invalid {
                id: rule.id.clone(),
                at: rule.source.clone(),
                message: match miette::Diagnostic::help(e) {
                    Some(help) => format!("{e}; {help}"),
                    None => e.to_string(),
                },
            });
        }

        let mut plugin_entities = BTreeMap::new();
        for t in tools {
            plugin_entities
                .entry(t.plugin.clone())
                .or_insert_with(|| t.reach.clone());
        }
        let entities = plugin_entities
            .into_iter()
            .map(|(name, reach)| plugin_entity(&name, &reach))
            .collect::<Result<Vec<_>, _>>()?;
        let entities = Entities::from_entities(entities, Some(&schema)).map_err(|e| {
            PolicyError::Config(format!("the plugins' grants do not fit the schema: {e}"))
        })?;

        // Which counters each policy could read: a Cedar attribute is named literally, so a
        // policy whose text does not contain a counter's name cannot read it (a name that
        // merely appears elsewhere in the text only adds a counter that is not needed).
        let reads: HashMap<&PolicyId, Vec<usize>> = all
            .policies()
            .map(|p| {
                let text = p.to_string();
                let read = counters
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| text.contains(&*c.name))
                    .map(|(i, _)| i)
                    .collect();
                (p.id(), read)
            })
            .collect();
        let scopes: Vec<HashSet<String>> = typed
            .iter()
            .map(|(tool, _)| {
                let mut ancestors: HashSet<String> = schema::groups(tool).into_iter().collect();
                ancestors.insert(schema::action_id(&tool.identity()));
                ancestors
            })
            .collect();
        // A Cedar file's policy in the subset of Cedar the host evaluates is evaluated by the
        // host, like a rule of cordon.toml.
        for p in all.policies() {
            let i = index[p.id()];
            if rules[i].check.is_some() {
                continue;
            }
            let inputs: Vec<&ArgType> = typed
                .iter()
                .zip(&scopes)
                .filter(|(_, ancestors)| in_scope(p, ancestors))
                .map(|((_, input), _)| input)
                .collect();
            if let Some(expr) = p
                .to_json()
                .ok()
                .and_then(|j| crate::subset::lower_policy(&j, &inputs))
            {
                rules[i].check = Some(Check {
                    reach: Vec::new(),
                    conds: Vec::new(),
                    when: None,
                    expr,
                });
            }
        }
        let mut arg_paths: HashMap<Vec<String>, usize> = HashMap::new();
        let mut regexes = 0;
        // The counters' numbers are their places in `counters`, valid with this policy's
        // number only (see `Counts`).
        let number = counts::next_policy();
        let counter_numbers: HashMap<&str, u32> = counters
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((&*c.name, u32::try_from(i).ok()?)))
            .collect();
        for check in rules.iter_mut().filter_map(|r| r.check.as_mut()) {
            check.number_counters(&mut |counter| {
                // A counter the policy does not have reads 0 as before: by name.
                if let Some(&n) = counter_numbers.get(counter.name.as_str()) {
                    counter.number = n;
                    counter.policy = number;
                }
            });
            check.number_regexes(&mut regexes);
            check.number_paths(&mut |path| {
                let next = arg_paths.len();
                path.number = *arg_paths.entry(path.names.clone()).or_insert(next);
            });
        }
        let sizes = places_ahead(
            counters.len(),
            &counter_numbers,
            &all,
            &index,
            &rules,
            &reads,
        );
        for (counter, most_ahead) in counters.iter_mut().zip(sizes) {
            counter.most_ahead = most_ahead;
        }
        let mut by_tool = HashMap::default();
        for ((tool, input), ancestors) in typed.into_iter().zip(scopes) {
            let identity = tool.identity();
            let mut native = Vec::new();
            let mut cedar = PolicySet::new();
            let mut cedar_texts = Vec::new();
            let mut wanted: HashSet<&str> = HashSet::new();
            let mut tool_counters: BTreeSet<usize> = BTreeSet::new();
            let mut reach_bound = Vec::new();
            for p in all.policies() {
                if in_scope(p, &ancestors) {
                    let i = index[p.id()];
                    wanted.insert(rules[i].rule.id.as_str());
                    tool_counters.extend(&reads[p.id()]);
                    match &rules[i].check {
                        Some(check) => {
                            if check.fits(&tool.reach) {
                                native.push(i);
                            }
                            if !check.reach.is_empty() {
                                reach_bound.push(i);
                            }
                            // Every rule here is in `native` or `reach_bound`, either of which a
                            // call may evaluate.
                            if let Some(when) = &check.when {
                                cedar_texts.push(when.text.clone());
                            }
                        }
                        None => {
                            cedar.add(p.clone()).expect("ids are unique");
                            cedar_texts.push(p.to_string());
                        }
                    }
                }
            }
            native.sort_unstable();
            reach_bound.sort_unstable();
            // What a widened call may evaluate: `native` and the rules bound to a reach.
            let mut either: Vec<usize> = native.iter().chain(&reach_bound).copied().collect();
            either.sort_unstable();
            either.dedup();
            let regex_sets = native::regex_sets(
                either.iter().filter_map(|&i| rules[i].check.as_ref()),
                regexes,
            );
            let reads_time = either
                .iter()
                .any(|&i| rules[i].check.as_ref().is_some_and(Check::reads_time));
            let tool_counters: Vec<usize> = tool_counters.into_iter().collect();
            // Those of the tool or its plugin, and those of rules that may apply to it.
            let counted_by: Vec<usize> = counters
                .iter()
                .enumerate()
                .filter(|(_, c)| match c.spec.of.strip_prefix("rule:") {
                    Some(id) => wanted.contains(id),
                    None => true,
                })
                .map(|(i, _)| i)
                .collect();
            let tool_facts = facts
                .iter()
                .enumerate()
                .filter(|(_, f)| wanted.contains(f.id.split('#').next().unwrap_or_default()))
                .map(|(i, _)| i)
                .collect();
            let check_of = |i: usize| rules[i].check.as_ref().expect("a rule the host evaluates");
            let counting =
                counts::ToolCounting::new(&counters, &tool_counters, &counted_by, number);
            let (by_count, filed) = ByCount::split(&native, check_of, |c| {
                if c.policy != number {
                    return None;
                }
                counting.read_of(c.number)
            });
            by_tool.insert(
                identity.clone(),
                ToolPolicy {
                    plugin: tool.plugin.clone(),
                    action: uid("Action", &schema::action_id(&identity)),
                    resource: uid("Plugin", &tool.plugin),
                    input,
                    by_caller: ByCaller::new(&filed, check_of),
                    by_count,
                    native,
                    reach_bound,
                    cedar,
                    reads_time,
                    regex_sets,
                    needs: Needs::of(&cedar_texts),
                    facts: tool_facts,
                    counting,
                    counters: tool_counters,
                },
            );
        }

        digest_text.push_str(&format!(
            "-- timezone {}\n-- counters {}\n",
            config.timezone.as_deref().unwrap_or("UTC"),
            serde_json::to_string(&config.counters).unwrap_or_default()
        ));
        let digest = format!(
            "sha256:{}",
            hex::encode(Sha256::digest(digest_text.as_bytes()))
        );
        let policy = Policy {
            digest,
            rules,
            index,
            tools: by_tool,
            entities,
            facts,
            arg_paths: arg_paths.len(),
            counters,
            number,
            tz,
            moments: Default::default(),
            authorizer: Authorizer::new(),
            singles,
        };
        Ok((policy, sources))
    }

    /// The digest of the policy text in force (`sha256:…`), which audit records carry.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// How many rules and Cedar policies the policy has.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every rule and Cedar policy, in the order written (the rules of `cordon.toml` first,
    /// then the Cedar files'): what `cordon policy test` lists.
    pub fn rules(&self) -> Vec<RuleRef> {
        self.rules.iter().map(|m| m.rule.clone()).collect()
    }

    /// The instant of a local time `YYYY-MM-DDTHH:MM` in the policy's time zone, in
    /// milliseconds since the Unix epoch: how examples and `cordon policy explain --at` say
    /// when a call happens.
    pub fn local_time(&self, text: &str) -> Result<i64, String> {
        let civil: jiff::civil::DateTime = text
            .parse()
            .map_err(|e| format!("`{text}` is not a local time `YYYY-MM-DDTHH:MM` ({e})"))?;
        let zoned = civil
            .to_zoned(self.tz.clone())
            .map_err(|e| format!("`{text}`: {e}"))?;
        Ok(zoned.timestamp().as_millisecond())
    }

    /// A moment as local time in the policy's time zone (`2026-11-30T12:00 Europe/Berlin`).
    pub fn show_time(&self, ms: i64) -> String {
        match jiff::Timestamp::from_millisecond(ms) {
            Ok(t) => {
                let z = t.to_zoned(self.tz.clone());
                format!(
                    "{} {}",
                    z.strftime("%Y-%m-%dT%H:%M"),
                    self.tz.iana_name().unwrap_or("UTC")
                )
            }
            Err(_) => format!("{ms} ms"),
        }
    }

    /// What the store must count before a call of `tool` is decided: the counters its rules
    /// read.
    pub fn counters_for(&self, tool: &str, scope: CountScope<'_>, now_ms: i64) -> Vec<CountQuery> {
        match self.tools.get(tool) {
            Some(t) => t.counting.queries((tool, &t.plugin), scope, now_ms),
            None => Vec::new(),
        }
    }

    /// The store keys a call of `tool` adds one to once it runs, given the ids of the rules
    /// that applied to it ([`Verdict::applied`]).
    pub fn tally(&self, tool: &str, applied: &[String], scope: CountScope<'_>) -> Vec<String> {
        let Some(t) = self.tools.get(tool) else {
            return Vec::new();
        };
        let applied: Vec<&str> = applied.iter().map(String::as_str).collect();
        t.counting
            .keys((tool, &t.plugin), scope, Some(applied.as_slice()))
    }

    /// The names of the counters a call's context carries.
    pub(crate) fn counter_names(&self) -> impl Iterator<Item = &str> {
        self.counters.iter().map(|c| &*c.name)
    }
}

/// Each counter's `most_ahead` (by number), from the thresholds of the rules that read it
/// ([`counts::places_ahead`] of the least). A rule that reads it other than by a `calls`
/// condition (its own `when`, a Cedar policy) has no threshold the host can see, so such a
/// counter's places ahead are left to the store; a counter no rule reads may take the most.
fn places_ahead(
    counters: usize,
    numbers: &HashMap<&str, u32>,
    all: &PolicySet,
    index: &HashMap<PolicyId, usize>,
    rules: &[RuleMeta],
    reads: &HashMap<&PolicyId, Vec<usize>>,
) -> Vec<Option<u32>> {
    let mut least: Vec<Option<u64>> = vec![None; counters];
    let mut unseen = vec![false; counters];
    let at = |name: &str| numbers.get(name).map(|&n| n as usize);
    for p in all.policies() {
        let check = rules[index[p.id()]].check.as_ref();
        match check {
            Some(check) if check.when.is_none() => {
                for cond in &check.conds {
                    if let crate::native::Cond::Calls { counter, at_least } = cond
                        && let Some(i) = at(&counter.name)
                    {
                        least[i] = Some(least[i].map_or(*at_least, |l| l.min(*at_least)));
                    }
                }
                if let Some(expr) = &check.expr {
                    expr.clone().counters_mut(&mut |c| {
                        if let Some(i) = at(&c.name) {
                            unseen[i] = true;
                        }
                    });
                }
            }
            // Cedar evaluates it: what it reads is known from its text only (a name found
            // there may be part of another, which only makes this more careful).
            _ => {
                let read = reads.get(p.id()).map(Vec::as_slice).unwrap_or_default();
                for &i in read {
                    unseen[i] = true;
                }
            }
        }
    }
    (0..counters)
        .map(|i| (!unseen[i]).then(|| counts::places_ahead(least[i].unwrap_or(u64::MAX))))
        .collect()
}

fn add(
    all: &mut PolicySet,
    singles: &mut HashMap<String, PolicySet>,
    policy: cedar_policy::Policy,
) -> Result<(), PolicyError> {
    let id = policy.id().to_string();
    let mut one = PolicySet::new();
    one.add(policy.clone())
        .map_err(|e| PolicyError::Config(format!("policy `{id}`: {e}")))?;
    singles.insert(id.clone(), one);
    all.add(policy)
        .map_err(|e| PolicyError::Config(format!("policy `{id}`: {e}")))
}

/// Whether `p`'s action scope takes in the tool whose action and groups are `ancestors`.
fn in_scope(p: &cedar_policy::Policy, ancestors: &HashSet<String>) -> bool {
    match p.action_constraint() {
        ActionConstraint::Any => true,
        ActionConstraint::Eq(uid) => ancestors.contains(uid.id().unescaped()),
        ActionConstraint::In(uids) => uids.iter().any(|u| ancestors.contains(u.id().unescaped())),
    }
}

pub(crate) fn uid(ty: &str, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(
        EntityTypeName::from_str(ty).expect("a valid type name"),
        EntityId::new(id),
    )
}

fn plugin_entity(name: &str, reach: &schema::Reach) -> Result<Entity, PolicyError> {
    let set = |v: &[String]| {
        RestrictedExpression::new_set(
            v.iter()
                .map(|x| RestrictedExpression::new_string(x.clone())),
        )
    };
    let attrs = HashMap::from([
        (
            "can_change".to_string(),
            RestrictedExpression::new_bool(reach.can_change),
        ),
        ("read_write".to_string(), set(&reach.read_write)),
        ("read_only".to_string(), set(&reach.read_only)),
        ("network".to_string(), set(&reach.network)),
        ("env".to_string(), set(&reach.env)),
        ("config".to_string(), set(&reach.config)),
    ]);
    Entity::new(uid("Plugin", name), attrs, HashSet::new())
        .map_err(|e| PolicyError::Config(format!("the grants of `{name}`: {e}")))
}
