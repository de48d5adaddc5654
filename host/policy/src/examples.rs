//! Each rule's `match` and `not_match` examples, run when the policy loads
//! ([`Policy::load`]): a policy whose rules do not do what their authors wrote they do is
//! refused, naming the rule.

use serde_json::{Value, json};

use crate::call::{Call, Caller, SessionFacts};
use crate::config::{Example, PolicyConfig, Rule};
use crate::engine::Policy;
use crate::error::PolicyError;
use crate::schema::ToolFacts;

impl Policy {
    /// Loads `config` against the installed `tools`: compiles the rules, reads the Cedar
    /// files, validates everything against the tools' schema and runs every rule's
    /// examples. Any failure names the rule and what to write instead.
    pub fn load(config: &PolicyConfig, tools: &[ToolFacts]) -> Result<Policy, PolicyError> {
        let (policy, sources) = Policy::compile(config, tools)?;
        check(&policy, config, &sources)?;
        Ok(policy)
    }
}

/// Runs every example of every rule of `config` against `policy`.
fn check(policy: &Policy, config: &PolicyConfig, sources: &[String]) -> Result<(), PolicyError> {
    for (rule, source) in config.rules.iter().zip(sources) {
        let rule = rule.get_ref();
        let fail = |example: String, message: String| PolicyError::Example {
            id: rule.id.clone(),
            at: source.clone(),
            example,
            message,
        };
        for (kind, examples, must) in [
            ("match", &rule.matches, true),
            ("not_match", &rule.not_match, false),
        ] {
            for (i, ex) in examples.iter().enumerate() {
                let name = format!("{kind}[{i}]");
                let tool = example_tool(rule, ex).map_err(|m| fail(name.clone(), m))?;
                let args = ex.args.clone().unwrap_or_else(|| json!({}));
                let caller = Caller {
                    origin: ex.origin.clone().unwrap_or_else(|| "cli".to_string()),
                    token: ex.token.clone().unwrap_or_default(),
                    user: ex.user.clone().unwrap_or_default(),
                    client: ex.client.clone().unwrap_or_default(),
                };
                let session = SessionFacts {
                    approved: ex.approved.iter().cloned().collect(),
                    labels: ex.labels.iter().cloned().collect(),
                };
                let counts = counts_of(policy, rule, ex).map_err(|m| fail(name.clone(), m))?;
                let now_ms = time_of(policy, ex).map_err(|m| fail(name.clone(), m))?;
                let call = Call {
                    tool: &tool,
                    args: &args,
                    caller: &caller,
                    session: &session,
                    counts: &counts,
                    now_ms,
                    reach: None,
                };
                let applies = policy
                    .rule_applies(&rule.id, &call)
                    .map_err(|m| fail(name.clone(), m))?;
                if applies != must {
                    return Err(fail(
                        name,
                        format!(
                            "({}) {} the rule, but the rule {}",
                            describe(&tool, &args),
                            if must { "must match" } else { "must not match" },
                            if applies { "applies" } else { "does not apply" }
                        ),
                    ));
                }
                if let Some(expected) = ex.expect {
                    let verdict = policy.decide(&call);
                    if verdict.decision != Some(expected) {
                        let got = match (&verdict.decision, &verdict.rule) {
                            (Some(d), Some(r)) => format!("`{d}` by rule `{}`", r.id),
                            _ => "no rule (the grant-derived default)".to_string(),
                        };
                        return Err(fail(
                            name,
                            format!(
                                "({}) expects `{expected}`, but the policy decides {got}",
                                describe(&tool, &args)
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn describe(tool: &str, args: &Value) -> String {
    let mut text = args.to_string();
    if text.len() > 120 {
        let mut cut = 117;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    format!("{tool} {text}")
}

/// The example's tool, or the rule's when it names exactly one qualified tool.
fn example_tool(rule: &Rule, ex: &Example) -> Result<String, String> {
    if let Some(t) = &ex.tool {
        return Ok(t.clone());
    }
    match rule.tool.to_vec().as_slice() {
        [one] if one.contains('.') => Ok(one.clone()),
        _ => Err(
            "needs `tool = \"plugin.tool\"`: the rule does not name exactly one `plugin.tool`"
                .to_string(),
        ),
    }
}

fn counts_of(policy: &Policy, rule: &Rule, ex: &Example) -> Result<crate::Counts, String> {
    let known: Vec<&str> = policy.counter_names().collect();
    let mut out = crate::Counts::new();
    for (name, n) in &ex.counts {
        let full = if name == "calls" {
            format!("rule:{}", rule.id)
        } else {
            name.clone()
        };
        if !known.contains(&full.as_str()) {
            return Err(format!(
                "counts `{name}`, which is no counter (`calls` is the rule's own; named counters: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
        out.insert(full.into(), *n);
    }
    Ok(out)
}

/// The example's local time, by default a Monday at noon.
fn time_of(policy: &Policy, ex: &Example) -> Result<i64, String> {
    let text = ex.at.as_deref().unwrap_or("2026-11-30T12:00");
    policy.local_time(text).map_err(|e| format!("`at`: {e}"))
}
