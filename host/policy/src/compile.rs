//! `cordon.toml` rules as Cedar policies.
//!
//! Everything Cedar can say is said in Cedar: names, equality, sets, numeric ranges, `like`
//! patterns, presence, grants, callers, time, counters. Two tests Cedar has no operator for are
//! computed by the host before each call and handed to Cedar as `context.matched`: regular
//! expressions, and paths compared after normalising them (`..` resolved, `*` within one
//! segment, `**` across segments).

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobMatcher};
use regex::Regex;
use serde_json::Value;

use crate::call::{self, Arguments, CallerField};
use crate::config::{CallCount, Decision, Rule};
use crate::error::PolicyError;
use crate::native::{self, ArgCheck, Check, Cond, ReachTest, Scalar};
use crate::schema::{ArgType, PathProblem, ToolFacts};

/// A test the host computes for Cedar (a regular expression, a normalised path): the same
/// check as the rule's own, handed to Cedar's text of the rule as `context.matched`.
#[derive(Debug, Clone)]
pub(crate) struct Fact {
    /// Its name in `context.matched`.
    pub id: String,
    /// The argument it reads, a string.
    pub path: Vec<String>,
    pub check: ArgCheck,
}

impl Fact {
    /// Whether the fact holds for the arguments `input`.
    pub(crate) fn holds(&self, input: &Value) -> bool {
        call::lookup(input, &self.path)
            .filter(|v| v.is_string())
            .is_some_and(|v| {
                self.check
                    .holds(v, &ArgType::String, &mut Arguments::new(input, 0, None))
            })
    }
}

/// A rule in Cedar, with the host's tests and the counters it reads.
pub(crate) struct Compiled {
    pub text: String,
    /// The same rule for the host to evaluate.
    pub check: Check,
    pub facts: Vec<Fact>,
    /// `(name, spec)` of the counter its `calls` reads.
    pub counter: Option<(String, crate::config::CounterSpec)>,
}

/// A Cedar string literal.
pub(crate) fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A Cedar `like` pattern that matches `s` literally.
fn like_literal(s: &str) -> String {
    let escaped = lit(s);
    escaped.replace('*', "\\*")
}

/// The closest of `known` to `name`, for "did you mean".
pub(crate) fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let best = known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score > 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, k)) => format!("; did you mean `{k}`?"),
        None => String::new(),
    }
}

pub(crate) const ORIGINS: [&str; 5] = ["cli", "serve", "mcp", "mcp-http", "gateway"];
const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// Compiles rule `index` (named `source` in messages) against the installed tools.
pub(crate) fn compile(
    rule: &Rule,
    source: &str,
    tools: &[(ToolFacts, ArgType)],
    rule_ids: &[&str],
) -> Result<Compiled, PolicyError> {
    let bad = |message: String| PolicyError::Rule {
        id: rule.id.clone(),
        at: source.to_string(),
        message,
    };
    if rule.id.is_empty() || rule.id.contains(char::is_whitespace) {
        return Err(bad(
            "a rule's `id` must be a non-empty name without spaces".into()
        ));
    }
    let mut conditions: Vec<String> = Vec::new();
    let mut conds: Vec<Cond> = Vec::new();
    let mut reach = Vec::new();
    let mut facts = Vec::new();

    // What is called: the tools it may apply to, for typing its argument tests.
    let mut scope: Vec<String> = Vec::new();
    let mut targets: Vec<&(ToolFacts, ArgType)> = Vec::new();
    for name in rule.tool.to_vec() {
        let found: Vec<_> = if name.contains('.') {
            tools.iter().filter(|(t, _)| t.identity() == name).collect()
        } else {
            tools.iter().filter(|(t, _)| t.tool == name).collect()
        };
        if found.is_empty() {
            let known = tools
                .iter()
                .map(|(t, _)| {
                    if name.contains('.') {
                        t.identity()
                    } else {
                        t.tool.clone()
                    }
                })
                .collect::<Vec<_>>();
            return Err(bad(format!(
                "no installed tool is named `{name}`{}",
                did_you_mean(&name, known.iter().map(String::as_str))
            )));
        }
        scope.push(if name.contains('.') {
            format!("Action::{}", lit(&name))
        } else {
            format!("Action::{}", lit(&format!("tool:{name}")))
        });
        targets.extend(found);
    }
    let plugins = rule.plugin.to_vec();
    for p in &plugins {
        if !tools.iter().any(|(t, _)| &t.plugin == p) {
            return Err(bad(format!(
                "no installed plugin is named `{p}`{}",
                did_you_mean(p, tools.iter().map(|(t, _)| t.plugin.as_str()))
            )));
        }
    }
    let plugin_scope: Vec<String> = plugins
        .iter()
        .map(|p| format!("Action::{}", lit(&format!("plugin:{p}"))))
        .collect();
    if scope.is_empty() {
        scope = plugin_scope;
        targets = tools
            .iter()
            .filter(|(t, _)| plugins.is_empty() || plugins.contains(&t.plugin))
            .collect();
    } else if !plugin_scope.is_empty() {
        targets.retain(|(t, _)| plugins.contains(&t.plugin));
        conditions.push(format!("action in [{}]", plugin_scope.join(", ")));
    }
    targets.dedup_by(|a, b| a.0.identity() == b.0.identity());
    if !rule.args.is_empty() && targets.is_empty() {
        return Err(bad(
            "argument tests need `tool` or `plugin` to say whose arguments".into(),
        ));
    }

    // Arguments.
    for (index, (path, test)) in rule.args.iter().enumerate() {
        let parts: Vec<&str> = path.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad(format!(
                "`{path}` is not an argument path (`name` or `outer.inner`)"
            )));
        }
        let mut ty: Option<&ArgType> = None;
        for (tool, input) in &targets {
            let t = input.at(&parts).map_err(|p| {
                bad(match p {
                    PathProblem::Missing { at, known } => format!(
                        "`{}` has no argument `{at}` (it has: {}){}",
                        tool.identity(),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        },
                        did_you_mean(
                            parts.last().unwrap_or(&""),
                            known.iter().map(String::as_str)
                        )
                    ),
                    PathProblem::NotAnObject(at) => {
                        format!("`{at}` of `{}` is not an object", tool.identity())
                    }
                })
            })?;
            match ty {
                Some(prev) if prev != t => {
                    return Err(bad(format!(
                        "`{path}` is a {} in one tool the rule names and a {} in another; name one tool",
                        prev.word(),
                        t.word()
                    )));
                }
                _ => ty = Some(t),
            }
        }
        let ty = ty.expect("targets are not empty");
        let mut access = "context.input".to_string();
        let mut guards = Vec::new();
        for part in &parts {
            guards.push(format!("{access} has {}", lit(part)));
            access = format!("{access}[{}]", lit(part));
        }
        let guard = guards.join(" && ");
        let fact_id = |kind: &str| format!("{}#{index}{kind}", rule.id);
        let tests = arg_tests(test, ty, &access, path).map_err(&bad)?;
        let mut clause = Vec::new();
        let mut checks = Vec::new();
        let mut present: Option<bool> = None;
        for t in tests {
            let (kind, check) = match t {
                ArgTest::Cedar(c, check) => {
                    clause.push(c);
                    checks.push(check);
                    continue;
                }
                ArgTest::Present(p) => {
                    present = Some(p);
                    continue;
                }
                ArgTest::Regex(re) => ("regex", ArgCheck::Regex(re, usize::MAX)),
                // A path that cannot be placed matches a rule that denies or asks, so it
                // never slips past one, and never one that allows.
                ArgTest::Path(glob) => (
                    "path",
                    ArgCheck::Path(glob, rule.decision != Decision::Allow),
                ),
            };
            let id = fact_id(kind);
            clause.push(format!("context.matched.contains({})", lit(&id)));
            checks.push(check.clone());
            facts.push(Fact {
                id,
                path: parts.iter().map(|s| s.to_string()).collect(),
                check,
            });
        }
        match present {
            Some(false) => {
                if !clause.is_empty() {
                    return Err(bad(format!(
                        "`{path}`: `present = false` cannot be combined with tests on its value"
                    )));
                }
                conditions.push(format!("!({guard})"));
                conds.push(Cond::Absent {
                    path: call::ArgPath {
                        names: parts.iter().map(|s| s.to_string()).collect(),
                        number: usize::MAX,
                    },
                    ty: ty.clone(),
                });
            }
            _ => {
                clause.insert(0, guard);
                conditions.push(clause.join(" && "));
                conds.push(Cond::Arg {
                    path: call::ArgPath {
                        names: parts.iter().map(|s| s.to_string()).collect(),
                        number: usize::MAX,
                    },
                    ty: ty.clone(),
                    tests: checks,
                });
            }
        }
    }

    // Who asks.
    for (field, names) in [
        ("origin", &rule.origin),
        ("token", &rule.token),
        ("user", &rule.user),
        ("client", &rule.client),
    ] {
        let names = names.to_vec();
        if names.is_empty() {
            continue;
        }
        if field == "origin" {
            for n in &names {
                if !ORIGINS.contains(&n.as_str()) {
                    return Err(bad(format!(
                        "`{n}` is not an origin (one of {}){}",
                        ORIGINS.join(", "),
                        did_you_mean(n, ORIGINS)
                    )));
                }
            }
        }
        conditions.push(format!(
            "{}.contains(context.caller.{field})",
            set_of(&names)
        ));
        let field = match field {
            "origin" => CallerField::Origin,
            "token" => CallerField::Token,
            "user" => CallerField::User,
            _ => CallerField::Client,
        };
        conds.push(Cond::Caller { field, names });
    }

    // What the tool could do.
    if let Some(b) = rule.can_change {
        conditions.push(format!("resource.can_change == {b}"));
        reach.push((ReachTest::CanChange, b));
    }
    for (flag, attr, test) in [
        (rule.writes, "read_write", ReachTest::Writes),
        (rule.network, "network", ReachTest::Network),
    ] {
        if let Some(b) = flag {
            let not = if b { "!" } else { "" };
            conditions.push(format!("{not}resource.{attr}.isEmpty()"));
            reach.push((test, b));
        }
    }

    // Where in the session.
    let mut counter = None;
    if let Some(CallCount {
        counter: spec,
        at_least,
    }) = &rule.calls
    {
        check_counter(spec, rule_ids).map_err(&bad)?;
        let name = format!("rule:{}", rule.id);
        conditions.push(format!("context.calls[{}] >= {at_least}", lit(&name)));
        conds.push(Cond::Calls {
            counter: crate::counts::CounterRef::new(name.clone()),
            at_least: *at_least,
        });
        counter = Some((name, spec.clone()));
    }
    for (tool, negate) in [(&rule.approved, false), (&rule.not_approved, true)] {
        if let Some(tool) = tool {
            if !tools.iter().any(|(t, _)| &t.identity() == tool) {
                let known: Vec<String> = tools.iter().map(|(t, _)| t.identity()).collect();
                return Err(bad(format!(
                    "no installed tool is named `{tool}` (write `plugin.tool`){}",
                    did_you_mean(tool, known.iter().map(String::as_str))
                )));
            }
            let not = if negate { "!" } else { "" };
            conditions.push(format!(
                "{not}context.session.approved.contains({})",
                lit(tool)
            ));
            conds.push(Cond::Approved {
                tool: tool.clone(),
                wanted: !negate,
            });
        }
    }
    if !rule.labels.is_empty() {
        // The labels a session can hold (cordon_core::labels); any other never matches.
        const LABELS: [&str; 2] = ["private", "untrusted"];
        if let Some(unknown) = rule.labels.iter().find(|l| !LABELS.contains(&l.as_str())) {
            return Err(bad(format!(
                "`{unknown}` is not a session label (they are `private` and `untrusted`){}",
                did_you_mean(unknown, LABELS)
            )));
        }
        conditions.push(format!(
            "context.session.labels.containsAll({})",
            set_of(&rule.labels)
        ));
        conds.push(Cond::Labels(rule.labels.clone()));
    }

    // When.
    if let Some(hours) = &rule.hours {
        let (from, to) = parse_hours(hours).map_err(&bad)?;
        let m = "context.time.minute_of_day";
        conditions.push(if from <= to {
            format!("{m} >= {from} && {m} < {to}")
        } else {
            format!("({m} >= {from} || {m} < {to})")
        });
        conds.push(Cond::Hours { from, to });
    }
    let days = rule.days.to_vec();
    if !days.is_empty() {
        let days = parse_days(&days).map_err(&bad)?;
        conditions.push(format!("{}.contains(context.time.weekday)", set_of(&days)));
        conds.push(Cond::Days(native::day_bits(&days)));
    }
    let (mut when_only, mut lowered) = (None, None);
    if let Some(when) = &rule.when {
        conditions.push(format!("({when})"));
        let invalid =
            |e: &dyn std::fmt::Display| bad(format!("its `when` is not valid Cedar: {e}"));
        let alone = cedar_policy::Policy::parse(
            None,
            format!("permit(principal, action, resource) when {{ ({when}) }};"),
        )
        .map_err(|e| invalid(&e))?;
        let inputs: Vec<&ArgType> = targets.iter().map(|(_, t)| t).collect();
        lowered = alone
            .to_json()
            .ok()
            .and_then(|j| crate::subset::lower_policy(&j, &inputs))
            .flatten();
        if lowered.is_none() {
            let expr: cedar_policy::Expression =
                format!("({when})").parse().map_err(|e| invalid(&e))?;
            when_only = Some(native::When {
                text: when.clone(),
                expr,
            });
        }
    }

    let effect = if rule.decision == Decision::Deny {
        "forbid"
    } else {
        "permit"
    };
    let mut text = format!("@id({}) @source({})", lit(&rule.id), lit(source));
    if let Some(reason) = &rule.reason {
        text.push_str(&format!(" @reason({})", lit(reason)));
    }
    if rule.decision == Decision::Ask {
        text.push_str(" @ask(\"\")");
    }
    let action = match scope.len() {
        0 => "action".to_string(),
        _ => format!("action in [{}]", scope.join(", ")),
    };
    text.push_str(&format!("\n{effect}(principal, {action}, resource)"));
    if !conditions.is_empty() {
        text.push_str(&format!("\nwhen {{ {} }}", conditions.join(" && ")));
    }
    text.push_str(";\n");
    Ok(Compiled {
        text,
        check: Check {
            reach,
            conds,
            when: when_only,
            expr: lowered,
        },
        facts,
        counter,
    })
}

/// Checks a counter's `of`, `within` and `per`.
pub(crate) fn check_counter(
    spec: &crate::config::CounterSpec,
    rule_ids: &[&str],
) -> Result<(), String> {
    match spec.of.as_str() {
        "tool" | "plugin" => {}
        of => match of.strip_prefix("rule:") {
            Some(id) if rule_ids.contains(&id) => {}
            Some(id) => {
                return Err(format!(
                    "`of = \"{of}\"` names no rule{}",
                    did_you_mean(id, rule_ids.iter().copied())
                ));
            }
            None => {
                return Err(format!(
                    "`of = \"{of}\"`: count `tool`, `plugin` or `rule:ID`"
                ));
            }
        },
    }
    crate::counts::Window::parse(&spec.within)?;
    match spec.per.as_deref() {
        None | Some("all") | Some("caller") => Ok(()),
        Some(p) => Err(format!(
            "`per = \"{p}\"`: count per `all` (the default) or `caller`"
        )),
    }
}

fn set_of(names: &[String]) -> String {
    let items: Vec<String> = names.iter().map(|n| lit(n)).collect();
    format!("[{}]", items.join(", "))
}

/// What one argument test becomes.
enum ArgTest {
    /// A test in Cedar and the same for the host.
    Cedar(String, ArgCheck),
    Present(bool),
    Regex(Regex),
    Path(GlobMatcher),
}

/// The tests of `spec` (a value to equal, or a table of tests) on the argument `access` of
/// type `ty`.
fn arg_tests(spec: &Value, ty: &ArgType, access: &str, path: &str) -> Result<Vec<ArgTest>, String> {
    let table = match spec {
        Value::Object(t) => t.clone(),
        other => serde_json::Map::from_iter([("equals".to_string(), other.clone())]),
    };
    if table.is_empty() {
        return Err(format!("`{path}` has an empty table of tests"));
    }
    let mut out = Vec::new();
    for (key, value) in &table {
        let wrong = |what: &str| format!("`{path}`: `{key}` needs {what}");
        let on_strings = || -> Result<&str, String> {
            if *ty != ArgType::String {
                return Err(format!(
                    "`{path}` is a {}; `{key}` tests strings",
                    ty.word()
                ));
            }
            value.as_str().ok_or_else(|| wrong("a string"))
        };
        match key.as_str() {
            "equals" => {
                let (text, native) = scalar(value, ty, path)?;
                out.push(ArgTest::Cedar(
                    format!("{access} == {text}"),
                    ArgCheck::Equals(native),
                ));
            }
            "in" | "not_in" => {
                let items = value.as_array().ok_or_else(|| wrong("a list"))?;
                let (texts, natives): (Vec<String>, Vec<Scalar>) = items
                    .iter()
                    .map(|v| scalar(v, ty, path))
                    .collect::<Result<Vec<_>, String>>()?
                    .into_iter()
                    .unzip();
                let (not, check) = if key == "not_in" {
                    ("!", ArgCheck::NotIn(natives))
                } else {
                    ("", ArgCheck::In(natives))
                };
                out.push(ArgTest::Cedar(
                    format!("{not}[{}].contains({access})", texts.join(", ")),
                    check,
                ));
            }
            "min" | "max" => {
                let (bound, native) = scalar(value, ty, path)?;
                let c = match (ty, key.as_str()) {
                    (ArgType::Long, "min") => format!("{access} >= {bound}"),
                    (ArgType::Long, "max") => format!("{access} <= {bound}"),
                    (ArgType::Decimal, "min") => format!("{access}.greaterThanOrEqual({bound})"),
                    (ArgType::Decimal, "max") => format!("{access}.lessThanOrEqual({bound})"),
                    _ => {
                        return Err(format!(
                            "`{path}` is a {}; `{key}` tests numbers",
                            ty.word()
                        ));
                    }
                };
                let check = if key == "min" {
                    ArgCheck::Min(native)
                } else {
                    ArgCheck::Max(native)
                };
                out.push(ArgTest::Cedar(c, check));
            }
            "prefix" => {
                let p = on_strings()?;
                out.push(ArgTest::Cedar(
                    format!(
                        "{access} like {}",
                        like_pattern(&like_literal(p), false, true)
                    ),
                    ArgCheck::Prefix(p.to_string()),
                ));
            }
            "suffix" => {
                let p = on_strings()?;
                out.push(ArgTest::Cedar(
                    format!(
                        "{access} like {}",
                        like_pattern(&like_literal(p), true, false)
                    ),
                    ArgCheck::Suffix(p.to_string()),
                ));
            }
            "glob" => {
                // `*` is the only wildcard, as in Cedar's `like`; `\*` is a literal star.
                let g = on_strings()?;
                let pattern = lit(g).replace("\\\\*", "\\*");
                out.push(ArgTest::Cedar(
                    format!("{access} like {pattern}"),
                    ArgCheck::Like(call::Like::new(call::like_pieces(g))),
                ));
            }
            "regex" => {
                let re = Regex::new(on_strings()?)
                    .map_err(|e| format!("`{path}`: the regex does not compile: {e}"))?;
                out.push(ArgTest::Regex(re));
            }
            "path" => {
                let g = on_strings()?;
                if !g.starts_with('/') {
                    return Err(format!(
                        "`{path}`: a `path` pattern is absolute (`/data/reports/**`)"
                    ));
                }
                let glob = GlobBuilder::new(g)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| format!("`{path}`: the path pattern is not valid: {e}"))?
                    .compile_matcher();
                out.push(ArgTest::Path(glob));
            }
            "present" => out.push(ArgTest::Present(
                value.as_bool().ok_or_else(|| wrong("true or false"))?,
            )),
            other => {
                let known = [
                    "equals", "in", "not_in", "min", "max", "prefix", "suffix", "glob", "regex",
                    "path", "present",
                ];
                return Err(format!(
                    "`{path}`: `{other}` is not a test (one of {}){}",
                    known.join(", "),
                    did_you_mean(other, known)
                ));
            }
        }
    }
    Ok(out)
}

/// Puts `*` around an escaped literal for `like`.
fn like_pattern(escaped: &str, star_before: bool, star_after: bool) -> String {
    let inner = &escaped[1..escaped.len() - 1];
    format!(
        "\"{}{inner}{}\"",
        if star_before { "*" } else { "" },
        if star_after { "*" } else { "" }
    )
}

/// A value of type `ty` as a Cedar literal and as the host compares it.
fn scalar(v: &Value, ty: &ArgType, path: &str) -> Result<(String, Scalar), String> {
    let wrong = || format!("`{path}` is a {}; `{v}` is not one", ty.word());
    match ty {
        ArgType::String => v
            .as_str()
            .map(|s| (lit(s), Scalar::Str(s.to_string())))
            .ok_or_else(wrong),
        ArgType::Long => v
            .as_i64()
            .map(|n| (n.to_string(), Scalar::Long(n)))
            .ok_or_else(wrong),
        ArgType::Bool => v
            .as_bool()
            .map(|b| (b.to_string(), Scalar::Bool(b)))
            .ok_or_else(wrong),
        ArgType::Decimal => {
            let n = v.as_number().ok_or_else(wrong)?;
            let f = n.as_f64().ok_or_else(wrong)?;
            let units = crate::schema::decimal_units(n).ok_or_else(|| {
                format!("`{path}`: `{v}` is beyond the numbers a rule can compare (±922337203685477, four decimal places)")
            })?;
            Ok((format!("decimal(\"{f:.4}\")"), Scalar::Dec(units)))
        }
        _ => Err(format!(
            "`{path}` is a {}; compare it in a `when` condition",
            ty.word()
        )),
    }
}

/// `HH:MM-HH:MM` as minutes of the day.
fn parse_hours(text: &str) -> Result<(u32, u32), String> {
    let wrong = || format!("`hours = \"{text}\"`: write `HH:MM-HH:MM`, e.g. `09:00-17:30`");
    let (a, b) = text.split_once('-').ok_or_else(wrong)?;
    let minutes = |t: &str| -> Result<u32, String> {
        let (h, m) = t.trim().split_once(':').ok_or_else(wrong)?;
        let (h, m): (u32, u32) = (
            h.parse().map_err(|_| wrong())?,
            m.parse().map_err(|_| wrong())?,
        );
        if h > 24 || m > 59 || (h == 24 && m > 0) {
            return Err(wrong());
        }
        Ok(h * 60 + m)
    };
    Ok((minutes(a)?, minutes(b)?))
}

/// Weekday names and ranges as the three-letter names `context.time.weekday` uses.
fn parse_days(days: &[String]) -> Result<Vec<String>, String> {
    let index = |d: &str| -> Result<usize, String> {
        let d = d.trim().to_ascii_lowercase();
        DAYS.iter()
            .position(|x| d.starts_with(x))
            .ok_or_else(|| format!("`{d}` is not a weekday (mon, tue, wed, thu, fri, sat, sun)"))
    };
    let mut out = Vec::new();
    for d in days {
        match d.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (index(a)?, index(b)?);
                let mut i = a;
                loop {
                    out.push(DAYS[i].to_string());
                    if i == b {
                        break;
                    }
                    i = (i + 1) % 7;
                }
            }
            None => out.push(DAYS[index(d)?].to_string()),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The rule ids of `rules`, checking they are unique.
pub(crate) fn unique_ids<'a>(
    rules: impl IntoIterator<Item = (&'a str, String)>,
) -> Result<Vec<&'a str>, PolicyError> {
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    for (id, source) in rules {
        if let Some(first) = seen.get(id) {
            return Err(PolicyError::Rule {
                id: id.to_string(),
                at: source,
                message: format!("the id is already used by the rule at {first}"),
            });
        }
        seen.insert(id, source);
    }
    Ok(seen.into_keys().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_and_days_parse() {
        assert_eq!(parse_hours("09:00-17:30").unwrap(), (540, 1050));
        assert_eq!(parse_hours("22:00-06:00").unwrap(), (1320, 360));
        assert!(parse_hours("9-5").is_err());
        assert_eq!(
            parse_days(&["fri-mon".into()]).unwrap(),
            ["fri", "mon", "sat", "sun"]
        );
        assert!(parse_days(&["funday".into()]).is_err());
    }

    #[test]
    fn literals_escape_quotes_and_stars_in_like() {
        assert_eq!(lit("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(like_literal("a*b"), r#""a\*b""#);
    }
}
