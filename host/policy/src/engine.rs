//! A loaded policy: Cedar policies checked against the installed tools, split by tool so a
//! call is decided by the rules that can apply to it only.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Effect, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, PolicyId, PolicySet, Request, RestrictedExpression, Schema, ValidationMode,
    Validator,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::compile::{self, Fact};
use crate::config::{CounterSpec, Decision, PolicyConfig};
use crate::counts::{self, CountQuery, CountScope};
use crate::error::PolicyError;
use crate::schema::{self, ArgType, ToolFacts};

/// Who asks for a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// `cli`, `serve`, `mcp`, `mcp-http` or `gateway`.
    pub origin: String,
    /// The API token's name; empty when there is none.
    pub token: String,
    /// The gateway's `user`; empty when none was sent.
    pub user: String,
    /// The MCP client's name; empty when not over MCP.
    pub client: String,
}

/// What the session has seen so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFacts {
    /// Tools (`plugin.tool`) a human approved a call of in this session.
    pub approved: BTreeSet<String>,
    /// The session's labels.
    pub labels: BTreeSet<String>,
}

/// One call to decide.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool, `plugin.tool`.
    pub tool: &'a str,
    /// Its arguments (already checked against its schema).
    pub args: &'a Value,
    /// Who asks.
    pub caller: &'a Caller,
    /// The session so far.
    pub session: &'a SessionFacts,
    /// Counter values by name, as the store gave them for [`Policy::counters_for`].
    pub counts: &'a BTreeMap<String, u64>,
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: i64,
}

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

struct RuleMeta {
    rule: RuleRef,
    order: usize,
}

struct ToolPolicy {
    plugin: String,
    action: EntityUid,
    resource: EntityUid,
    input: ArgType,
    set: PolicySet,
    /// Indices into `Policy::facts` of the tests its rules need.
    facts: Vec<usize>,
    /// Indices into `Policy::counters` of the counters its rules read: only these are asked
    /// of the store and put in `context.calls`, so a tool pays for its own rules' counters,
    /// not for every counter of the policy.
    counters: Vec<usize>,
}

/// A policy ready to decide calls.
pub struct Policy {
    digest: String,
    meta: HashMap<PolicyId, RuleMeta>,
    tools: HashMap<String, ToolPolicy>,
    entities: Entities,
    facts: Vec<Fact>,
    counters: Vec<(String, CounterSpec)>,
    tz: jiff::tz::TimeZone,
    authorizer: Authorizer,
    rule_count: usize,
    /// For examples: each rule's Cedar policy alone.
    singles: HashMap<String, PolicySet>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("digest", &self.digest)
            .field("rules", &self.rule_count)
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

        let mut counters: Vec<(String, CounterSpec)> = Vec::new();
        for (name, spec) in &config.counters {
            compile::check_counter(spec, &rule_ids)
                .map_err(|m| PolicyError::Config(format!("counters.{name}: {m}")))?;
            counters.push((name.clone(), spec.clone()));
        }
        let mut facts = Vec::new();
        let mut meta = HashMap::new();
        let mut all = PolicySet::new();
        let mut singles = HashMap::new();
        let mut order = 0;
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
            if let Some(c) = compiled.counter {
                counters.push(c);
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
            meta.insert(
                id,
                RuleMeta {
                    rule: RuleRef {
                        id: rule.id.clone(),
                        source: source.clone(),
                        decision: rule.decision,
                        reason: rule.reason.clone(),
                        error: None,
                    },
                    order,
                },
            );
            order += 1;
        }
        for (policy, rule) in file_policies {
            let id = policy.id().clone();
            add(&mut all, &mut singles, policy)?;
            meta.insert(id, RuleMeta { rule, order });
            order += 1;
        }

        let names: Vec<String> = counters.iter().map(|(n, _)| n.clone()).collect();
        let schema = Schema::from_json_value(schema::cedar_schema(&typed, &names))
            .map_err(|e| PolicyError::Config(format!("the tools' schema does not load: {e}")))?;
        let validated = Validator::new(schema.clone()).validate(&all, ValidationMode::Strict);
        if let Some(e) = validated.validation_errors().next() {
            let id = e.policy_id();
            let rule = &meta[id].rule;
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
                    .filter(|(_, (name, _))| text.contains(name.as_str()))
                    .map(|(i, _)| i)
                    .collect();
                (p.id(), read)
            })
            .collect();
        let mut by_tool = HashMap::new();
        for (tool, input) in typed {
            let identity = tool.identity();
            let mut ancestors: HashSet<String> = schema::groups(&tool).into_iter().collect();
            ancestors.insert(schema::action_id(&identity));
            let mut set = PolicySet::new();
            let mut wanted: HashSet<&str> = HashSet::new();
            let mut tool_counters: BTreeSet<usize> = BTreeSet::new();
            for p in all.policies() {
                let applies = match p.action_constraint() {
                    ActionConstraint::Any => true,
                    ActionConstraint::Eq(uid) => ancestors.contains(uid.id().unescaped()),
                    ActionConstraint::In(uids) => {
                        uids.iter().any(|u| ancestors.contains(u.id().unescaped()))
                    }
                };
                if applies {
                    set.add(p.clone()).expect("ids are unique");
                    wanted.insert(meta[p.id()].rule.id.as_str());
                    tool_counters.extend(&reads[p.id()]);
                }
            }
            let tool_facts = facts
                .iter()
                .enumerate()
                .filter(|(_, f)| wanted.contains(f.id.split('#').next().unwrap_or_default()))
                .map(|(i, _)| i)
                .collect();
            by_tool.insert(
                identity.clone(),
                ToolPolicy {
                    plugin: tool.plugin.clone(),
                    action: uid("Action", &schema::action_id(&identity)),
                    resource: uid("Plugin", &tool.plugin),
                    input,
                    set,
                    facts: tool_facts,
                    counters: tool_counters.into_iter().collect(),
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
            rule_count: meta.len(),
            meta,
            tools: by_tool,
            entities,
            facts,
            counters,
            tz,
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
        self.rule_count
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.rule_count == 0
    }

    /// Every rule and Cedar policy, in the order written (the rules of `cordon.toml` first,
    /// then the Cedar files'): what `cordon policy test` lists.
    pub fn rules(&self) -> Vec<RuleRef> {
        let mut rules: Vec<&RuleMeta> = self.meta.values().collect();
        rules.sort_by_key(|m| m.order);
        rules.into_iter().map(|m| m.rule.clone()).collect()
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

    /// The rules that may apply to calls of `tool` (`plugin.tool`), in the order written.
    pub fn rules_for(&self, tool: &str) -> Vec<RuleRef> {
        let Some(t) = self.tools.get(tool) else {
            return Vec::new();
        };
        let mut rules: Vec<&RuleMeta> = t.set.policies().map(|p| &self.meta[p.id()]).collect();
        rules.sort_by_key(|m| m.order);
        rules.into_iter().map(|m| m.rule.clone()).collect()
    }

    /// Whether a rule may deny every call of `tool` whatever its arguments: a rule that
    /// denies it with no condition. Such a tool is not offered to the model.
    pub fn denies_every_call(&self, tool: &str) -> Option<RuleRef> {
        let t = self.tools.get(tool)?;
        t.set
            .policies()
            .filter(|p| p.effect() == Effect::Forbid && unconditional(p))
            .map(|p| &self.meta[p.id()])
            .min_by_key(|m| m.order)
            .map(|m| m.rule.clone())
    }

    /// What the store must count before a call of `tool` is decided: the counters its rules
    /// read.
    pub fn counters_for(&self, tool: &str, scope: CountScope<'_>, now_ms: i64) -> Vec<CountQuery> {
        let Some(t) = self.tools.get(tool) else {
            return Vec::new();
        };
        let minute = now_ms.div_euclid(60_000);
        t.counters
            .iter()
            .map(|&i| &self.counters[i])
            .filter_map(|(name, spec)| {
                let key = counts::key_for(spec, tool, &t.plugin, None, scope)?;
                Some(CountQuery {
                    name: name.clone(),
                    key,
                    since_minute: counts::since(spec, minute),
                })
            })
            .collect()
    }

    /// The store keys a call of `tool` adds one to once it runs, given the ids of the rules
    /// that applied to it ([`Verdict::applied`]).
    pub fn tally(&self, tool: &str, applied: &[String], scope: CountScope<'_>) -> Vec<String> {
        let Some(t) = self.tools.get(tool) else {
            return Vec::new();
        };
        let applied: Vec<&str> = applied.iter().map(String::as_str).collect();
        let mut keys: Vec<String> = self
            .counters
            .iter()
            .filter_map(|(_, spec)| {
                counts::key_for(spec, tool, &t.plugin, Some(applied.as_slice()), scope)
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Decides `call`: the strictest decision of the rules that apply to it.
    pub fn decide(&self, call: &Call<'_>) -> Verdict {
        let Some(t) = self.tools.get(call.tool) else {
            return self.verdict(Vec::new());
        };
        if t.set.is_empty() {
            return self.verdict(Vec::new());
        }
        let request = match self.request(t, call) {
            Ok(r) => r,
            Err(e) => return self.unevaluable(t, &e),
        };
        let response = self
            .authorizer
            .is_authorized(&request, &t.set, &self.entities);
        let mut applied: Vec<&RuleMeta> = response
            .diagnostics()
            .reason()
            .map(|id| &self.meta[id])
            .collect();
        let mut errors = Vec::new();
        for e in response.diagnostics().errors() {
            let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
            let m = &self.meta[e.policy_id()];
            if m.rule.decision != Decision::Allow {
                errors.push((m, e.inner().to_string()));
            }
        }
        applied.sort_by_key(|m| m.order);
        let mut rules: Vec<RuleRef> = applied.into_iter().map(|m| m.rule.clone()).collect();
        for (m, e) in errors {
            rules.push(RuleRef {
                error: Some(e),
                ..m.rule.clone()
            });
        }
        self.verdict(rules)
    }

    /// Every rule of `call`'s tool, each evaluated alone: what `policy explain` shows.
    pub fn explain(&self, call: &Call<'_>) -> (Verdict, Vec<(RuleRef, bool)>) {
        let verdict = self.decide(call);
        let Some(t) = self.tools.get(call.tool) else {
            return (verdict, Vec::new());
        };
        let request = self.request(t, call).ok();
        let mut each: Vec<(&RuleMeta, bool)> = t
            .set
            .policies()
            .map(|p| {
                let m = &self.meta[p.id()];
                let applies = request
                    .as_ref()
                    .map(|r| self.applies_alone(&m.rule.id, r))
                    .unwrap_or(false);
                (m, applies)
            })
            .collect();
        each.sort_by_key(|(m, _)| m.order);
        (
            verdict,
            each.into_iter().map(|(m, a)| (m.rule.clone(), a)).collect(),
        )
    }

    /// Whether the rule `id` alone is satisfied by the call (for examples and explain).
    pub(crate) fn rule_applies(&self, id: &str, call: &Call<'_>) -> Result<bool, String> {
        let t = self
            .tools
            .get(call.tool)
            .ok_or_else(|| format!("no installed tool is named `{}`", call.tool))?;
        let request = self.request(t, call)?;
        Ok(self.applies_alone(id, &request))
    }

    fn applies_alone(&self, id: &str, request: &Request) -> bool {
        let Some(set) = self.singles.get(id) else {
            return false;
        };
        let r = self.authorizer.is_authorized(request, set, &self.entities);
        r.diagnostics().reason().next().is_some()
    }

    /// The names of the counters a call's context carries.
    pub(crate) fn counter_names(&self) -> impl Iterator<Item = &str> {
        self.counters.iter().map(|(n, _)| n.as_str())
    }

    fn request(&self, t: &ToolPolicy, call: &Call<'_>) -> Result<Request, String> {
        let input = t
            .input
            .value(call.args)
            .unwrap_or_else(|| RestrictedExpression::new_record([]).expect("empty record"));
        let s = |v: &str| RestrictedExpression::new_string(v.to_string());
        let set = |v: &BTreeSet<String>| RestrictedExpression::new_set(v.iter().map(|x| s(x)));
        let record = |pairs: Vec<(&str, RestrictedExpression)>| {
            RestrictedExpression::new_record(pairs.into_iter().map(|(k, v)| (k.to_string(), v)))
                .map_err(|e| e.to_string())
        };
        let at = jiff::Timestamp::from_millisecond(call.now_ms)
            .map_err(|e| format!("the time {} is out of range: {e}", call.now_ms))?
            .to_zoned(self.tz.clone());
        let weekday = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
            [at.weekday().to_monday_zero_offset() as usize];
        let (hour, minute) = (i64::from(at.hour()), i64::from(at.minute()));
        let matched: Vec<RestrictedExpression> = t
            .facts
            .iter()
            .map(|&i| &self.facts[i])
            .filter(|f| f.holds(call.args))
            .map(|f| s(&f.id))
            .collect();
        let calls = t
            .counters
            .iter()
            .map(|&i| &self.counters[i])
            .map(|(name, _)| {
                let n = call.counts.get(name).copied().unwrap_or(0);
                (
                    name.as_str(),
                    RestrictedExpression::new_long(n.min(i64::MAX as u64) as i64),
                )
            })
            .collect();
        let context = Context::from_pairs([
            ("input".to_string(), input),
            (
                "caller".to_string(),
                record(vec![
                    ("origin", s(&call.caller.origin)),
                    ("token", s(&call.caller.token)),
                    ("user", s(&call.caller.user)),
                    ("client", s(&call.caller.client)),
                ])?,
            ),
            (
                "session".to_string(),
                record(vec![
                    ("approved", set(&call.session.approved)),
                    ("labels", set(&call.session.labels)),
                ])?,
            ),
            (
                "time".to_string(),
                record(vec![
                    ("hour", RestrictedExpression::new_long(hour)),
                    ("minute", RestrictedExpression::new_long(minute)),
                    (
                        "minute_of_day",
                        RestrictedExpression::new_long(hour * 60 + minute),
                    ),
                    ("weekday", s(weekday)),
                    ("date", s(&at.date().to_string())),
                ])?,
            ),
            ("calls".to_string(), record(calls)?),
            (
                "matched".to_string(),
                RestrictedExpression::new_set(matched),
            ),
        ])
        .map_err(|e| e.to_string())?;
        Request::new(
            uid("Caller", "caller"),
            t.action.clone(),
            t.resource.clone(),
            context,
            None,
        )
        .map_err(|e| e.to_string())
    }

    /// A call whose context could not be built: every rule of its tool that denies or asks
    /// counts as applying.
    fn unevaluable(&self, t: &ToolPolicy, error: &str) -> Verdict {
        let mut rules: Vec<&RuleMeta> = t
            .set
            .policies()
            .map(|p| &self.meta[p.id()])
            .filter(|m| m.rule.decision != Decision::Allow)
            .collect();
        rules.sort_by_key(|m| m.order);
        self.verdict(
            rules
                .into_iter()
                .map(|m| RuleRef {
                    error: Some(error.to_string()),
                    ..m.rule.clone()
                })
                .collect(),
        )
    }

    fn verdict(&self, applied: Vec<RuleRef>) -> Verdict {
        let decision = applied.iter().map(|r| r.decision).max();
        let rule = decision.and_then(|d| applied.iter().find(|r| r.decision == d).cloned());
        let applied = match decision {
            Some(Decision::Deny) => applied
                .into_iter()
                .filter(|r| r.decision == Decision::Deny)
                .collect(),
            _ => applied,
        };
        Verdict {
            decision,
            rule,
            applied,
            digest: self.digest.clone(),
        }
    }
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

fn uid(ty: &str, id: &str) -> EntityUid {
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
    ]);
    Entity::new(uid("Plugin", name), attrs, HashSet::new())
        .map_err(|e| PolicyError::Config(format!("the grants of `{name}`: {e}")))
}

/// Whether a policy holds for every call in its action scope: no condition, and no
/// constraint on the principal or the resource.
fn unconditional(p: &cedar_policy::Policy) -> bool {
    let Ok(json) = p.to_json() else {
        return false;
    };
    let all = |scope: &str| json[scope]["op"] == "All";
    json["conditions"].as_array().is_some_and(Vec::is_empty) && all("principal") && all("resource")
}
