//! The host's evaluation of rules against Cedar's, over generated calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

/// Every kind of test a rule can make, for comparing the host's evaluation with Cedar's.
const EVERY_KIND: &str = r#"
[policy]
timezone = "Europe/Berlin"
rules = [
  { id = "eq", tool = "ops.deploy", args = { env = "prod" }, decision = "ask" },
  { id = "in", tool = "ops.deploy", args = { env = { in = ["a", "b*"] } }, decision = "deny" },
  { id = "not-in", tool = "ops.deploy", args = { env = { not_in = ["staging", "prod"] } }, decision = "ask" },
  { id = "range", tool = "ops.deploy", args = { replicas = { min = 3, max = 10 } }, decision = "allow" },
  { id = "decimal", tool = "ops.deploy", args = { ratio = { min = 0.25, max = 0.75 } }, decision = "ask" },
  { id = "decimal-eq", tool = "ops.deploy", args = { ratio = 0.5 }, decision = "deny" },
  { id = "decimal-in", tool = "ops.deploy", args = { ratio = { in = [0.1, -2.00005] } }, decision = "ask" },
  { id = "prefix", tool = "ops.deploy", args = { env = { prefix = "pr" } }, decision = "allow" },
  { id = "suffix", tool = "ops.deploy", args = { env = { suffix = "-eu" } }, decision = "ask" },
  { id = "glob", tool = "ops.deploy", args = { env = { glob = 'p*d\*x*' } }, decision = "deny" },
  { id = "glob-backslash", tool = "ops.deploy", args = { env = { glob = 'a\b*' } }, decision = "ask" },
  { id = "regex", tool = "ops.deploy", args = { env = { regex = "^st.g" } }, decision = "ask" },
  { id = "regex-2", tool = "ops.deploy", args = { env = { regex = "(?i)PROD$" } }, decision = "ask" },
  { id = "regex-3", tool = "ops.deploy", args = { env = { regex = "^p", not_in = ["prod"] } }, decision = "ask" },
  { id = "nested", tool = "ops.deploy", args = { "options.force" = true }, decision = "deny" },
  { id = "present", tool = "ops.deploy", args = { options = { present = true } }, decision = "ask" },
  { id = "absent", tool = "ops.deploy", args = { replicas = { present = false } }, decision = "ask" },
  { id = "path", tool = "files.read_file", args = { path = { path = "/data/reports/**" } }, decision = "allow" },
  { id = "path-ask", tool = "files.read_file", args = { path = { path = "/data/*/x" } }, decision = "ask" },
  { id = "origin", plugin = "ops", origin = ["gateway", "mcp"], decision = "ask" },
  { id = "token", token = "intern", user = ["bob", ""], decision = "deny" },
  { id = "client", tool = ["deploy", "look"], client = "evil", decision = "deny" },
  { id = "user-origin", tool = "sql.sql_execute", user = "al", origin = ["serve", "gateway"], decision = "ask" },
  { id = "no-token", plugin = "ro", origin = "cli", token = ["", "x"], decision = "deny" },
  { id = "client-origin", client = ["zed", ""], origin = "mcp", hours = "08:00-20:00", decision = "ask" },
  { id = "reach", plugin = ["ops", "ro", "sql"], can_change = true, network = false, decision = "ask" },
  { id = "writes", writes = false, decision = "allow" },
  { id = "approved", tool = "ops.deploy", approved = "sql.sql_query", decision = "allow" },
  { id = "not-approved", tool = "ops.deploy", not_approved = "sql.sql_query", args = { env = "prod" }, decision = "deny" },
  { id = "labels", labels = ["private", "untrusted"], decision = "ask" },
  { id = "calls", tool = "ops.deploy", calls = { of = "tool", within = "1h", at_least = 3 }, decision = "ask" },
  { id = "calls-2", tool = "ops.deploy", calls = { of = "tool", within = "1h", at_least = 2 }, decision = "ask" },
  { id = "calls-100", plugin = "ops", calls = { of = "tool", within = "1h", at_least = 100 }, decision = "ask" },
  { id = "calls-plugin", plugin = ["ops", "sql"], calls = { of = "plugin", within = "session", at_least = 3 }, decision = "ask" },
  { id = "calls-robot", tool = "ops.deploy", token = "robot", calls = { of = "tool", within = "1h", at_least = 2 }, decision = "ask" },
  { id = "calls-sql", tool = "sql.sql_execute", calls = { of = "plugin", within = "session", at_least = 2 }, decision = "ask" },
  { id = "hours", hours = "22:00-06:00", decision = "ask" },
  { id = "days", days = ["sat-sun"], hours = "09:00-17:00", decision = "deny" },
  { id = "when", tool = "ops.deploy", args = { env = { prefix = "s" } }, when = 'context.input has replicas && context.input.replicas > 5', decision = "deny" },
  { id = "when-caller", plugin = "sql", when = 'context.caller.token like "ro*" || context.session.labels.contains("untrusted")', decision = "allow" },
  { id = "when-required", tool = "sql.sql_execute", when = 'context.input.sql like "drop*"', decision = "deny" },
  { id = "when-or", tool = "sql.sql_execute", when = 'context.caller.origin == "mcp" || context.input.sql like "select*"', decision = "ask" },
  { id = "when-lead", tool = "sql.sql_execute", when = 'context.caller.origin == "mcp" && context.input.sql like "drop*"', decision = "deny" },
  { id = "when-lead-set", plugin = "ops", when = '["robot", "x"].contains(context.caller.token) && "gateway" == context.caller.origin && context.input has env', decision = "ask" },
  { id = "when-lead-late", tool = "sql.sql_execute", when = 'context.input.sql like "drop*" && context.caller.token == "robot"', decision = "deny" },
  { id = "when-time", when = 'context.time.weekday == "sat" && context.time.hour >= 10 && !(context.time.minute_of_day > 1200)', decision = "ask" },
  { id = "when-set", tool = "ops.deploy", when = 'context.input has env && ["staging", "prod"].contains(context.input.env) && context.session.approved.containsAny(["sql.sql_query", "x.y"])', decision = "ask" },
  { id = "when-bool", tool = "ops.deploy", when = 'context.input has options && context.input.options has force && context.input.options.force', decision = "deny" },
  { id = "when-date", tool = "ro.look", when = 'context.time.date like "2026-12-0*"', decision = "ask" },
  { id = "when-resource", plugin = "ops", when = 'resource.can_change && context.input has env', decision = "ask" },
  { id = "when-sum", tool = "ops.deploy", when = 'context.input has replicas && context.input.replicas + 1 > 8', decision = "deny" },
]
"#;

/// A small deterministic generator, so a failure names a call that can be replayed.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }

    fn pick(&mut self, values: &[Value]) -> Value {
        values[self.below(values.len())].clone()
    }
}

/// Cedar files beside [`EVERY_KIND`]: their policies read a few arguments by name, one reads
/// `context["input"]` whole, and the others the caller, the session, the time and counters.
const EVERY_KIND_CEDAR: &str = r#"
@id("file-ratio") @ask("")
permit(principal, action == Action::"ops.deploy", resource)
when { context.input has ratio && context.input.ratio.greaterThan(decimal("0.3")) };

@id("file-whole")
forbid(principal, action in Action::"plugin:files", resource)
when { context["input"] has path && context.caller.origin == "gateway" };

@id("file-options")
forbid(principal, action == Action::"ops.deploy", resource)
when { context.input has "options" && context.input.options has force && context.input.options.force && context.session.labels.contains("untrusted") };

@id("file-time") @ask("")
permit(principal, action, resource)
when { context.time.weekday == "sun" && context.calls["rule:calls"] > 2 };
"#;

#[test]
fn the_host_decides_every_kind_of_rule_as_its_cedar_text_does() {
    let dir = std::env::temp_dir().join(format!("cordon-policy-every-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("every.cedar"), EVERY_KIND_CEDAR).unwrap();
    let text = EVERY_KIND.replacen("[policy]\n", "[policy]\nfiles = [\"every.cedar\"]\n", 1);
    #[derive(serde::Deserialize)]
    struct File {
        policy: PolicyConfig,
    }
    let mut config = toml::from_str::<File>(&text).unwrap().policy;
    config.source = Some(ConfigSource {
        path: dir.join("cordon.toml"),
        text: Arc::from(text.as_str()),
    });
    let p = Policy::load(&config, &tools()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut draw = Draw(7);
    let absent = json!("<absent>");
    let envs = [
        json!("prod"),
        json!("staging"),
        json!("a"),
        json!("b*"),
        json!("b"),
        json!("pr"),
        json!("prx"),
        json!("st-eu"),
        json!("stag"),
        json!("p-d*x-y"),
        json!("pd*x"),
        json!("pdxx"),
        json!("a\\bc"),
        json!(""),
        json!("PROD"),
        json!("sx"),
        json!(5),
        Value::Null,
        absent.clone(),
    ];
    let replicas = [
        json!(0),
        json!(3),
        json!(10),
        json!(11),
        json!(-1),
        json!(2.5),
        json!("3"),
        json!(i64::MAX),
        json!(1e20),
        absent.clone(),
    ];
    let ratios = [
        json!(0.25),
        json!(0.5),
        json!(0.75),
        json!(0.74999),
        json!(0.75004),
        json!(0.750051),
        json!(0.1),
        json!(-2.00005),
        json!(1e300),
        json!(-0.0),
        json!(3),
        json!("x"),
        absent.clone(),
    ];
    let options = [
        json!({}),
        json!({"force": true}),
        json!({"force": false}),
        json!({"force": "yes"}),
        json!([]),
        json!("x"),
        absent.clone(),
    ];
    let paths = [
        json!("/data/reports/a"),
        json!("/data/reports/../hr/x"),
        json!("/data/x/x"),
        json!("/data/x/y/x"),
        json!("data/x"),
        json!("/data/reports"),
        json!("/.."),
        json!("/data/reports/a/b"),
        json!(5),
        absent.clone(),
    ];
    let texts = [
        json!("select 1"),
        json!("drop"),
        json!("drop table t"),
        json!(1),
        absent.clone(),
    ];
    let words = |d: &mut Draw, from: &[&str]| from[d.below(from.len())].to_string();
    let tools = tools();
    let mut applied_seen = BTreeMap::<String, usize>::new();
    for round in 0..3_500 {
        let t = &tools[draw.below(tools.len())];
        let identity = t.identity();
        let mut args = serde_json::Map::new();
        let mut put = |name: &str, v: Value| {
            if v != absent {
                args.insert(name.to_string(), v);
            }
        };
        match t.tool.as_str() {
            "deploy" => {
                put("env", draw.pick(&envs));
                put("replicas", draw.pick(&replicas));
                put("ratio", draw.pick(&ratios));
                put("options", draw.pick(&options));
            }
            "read_file" => put("path", draw.pick(&paths)),
            "look" => put("q", draw.pick(&texts)),
            _ => put("sql", draw.pick(&texts)),
        }
        let args = Value::Object(args);
        let caller = Caller {
            origin: words(&mut draw, &["cli", "serve", "mcp", "mcp-http", "gateway"]),
            token: words(&mut draw, &["", "intern", "robot", "x"]),
            user: words(&mut draw, &["", "bob", "al"]),
            client: words(&mut draw, &["", "evil", "zed"]),
        };
        let mut session = SessionFacts::default();
        if draw.below(2) == 0 {
            session.approved.insert("sql.sql_query".into());
        }
        for label in ["private", "untrusted"] {
            if draw.below(2) == 0 {
                session.labels.insert(label.into());
            }
        }
        // Any minute of a week from Monday noon.
        let now_ms = MONDAY_NOON + draw.below(7 * 24 * 60) as i64 * 60_000;
        let some_count = |d: &mut Draw| [0, 2, 3, 100][d.below(4)];
        // As the store answers the tool's queries (counters reading one count alike), or
        // another tool's (`calls-plugin` is read by both SQL tools, `calls-sql` by one), or
        // by name, each counter its own.
        let counts: crate::Counts = if draw.below(2) == 0 {
            let scope = CountScope {
                session: "s1",
                caller: (&caller.token, &caller.user),
            };
            let asked = match draw.below(4) {
                0 => tools[draw.below(tools.len())].identity(),
                _ => identity.clone(),
            };
            let queries = p.counters_for(&asked, scope, now_ms);
            let found: Vec<u64> = queries.iter().map(|_| some_count(&mut draw)).collect();
            crate::counts_of(&queries, &found)
        } else {
            [
                "calls",
                "calls-2",
                "calls-100",
                "calls-plugin",
                "calls-robot",
                "calls-sql",
            ]
            .into_iter()
            .map(|id| (format!("rule:{id}").into(), some_count(&mut draw)))
            .collect()
        };
        let call = Call {
            tool: &identity,
            args: &args,
            caller: &caller,
            session: &session,
            counts: &counts,
            now_ms,
            // Sometimes as when the session's grants widened the tool to what it reaches
            // anyway: decided by the rules bound to a reach, here the same as installed.
            reach: (draw.below(4) == 0).then_some(&t.reach),
        };
        // What Cedar says of each rule alone: the rules that apply, in the order written,
        // then those it could not evaluate that deny or ask.
        let (mut applies, mut failed) = (Vec::new(), Vec::new());
        for rule in p.rules() {
            // The host's evaluation of the rule alone agrees with Cedar's (an error there).
            let alone = p.rule_applies(&rule.id, &call);
            let alone = alone.unwrap_or_else(|e| {
                panic!("round {round}, rule `{}`, {identity} {args}: {e}", rule.id)
            });
            let outcome = p.cedar_outcome(&rule.id, &call);
            assert_eq!(
                alone,
                outcome == Ok(true),
                "round {round}, rule `{}`",
                rule.id
            );
            match outcome {
                Ok(true) => applies.push(rule),
                Ok(false) => {}
                Err(_) if rule.decision != Decision::Allow => failed.push(rule),
                Err(_) => {}
            }
        }
        applies.extend(failed.iter().cloned());
        let verdict = p.decide(&call);
        let strictest = applies.iter().map(|r| r.decision).max();
        assert_eq!(
            verdict.decision, strictest,
            "round {round}: {identity} {args}"
        );
        let expected: Vec<(String, bool)> = applies
            .iter()
            .filter(|r| strictest != Some(Decision::Deny) || r.decision == Decision::Deny)
            .map(|r| (r.id.clone(), failed.iter().any(|f| f.id == r.id)))
            .collect();
        let got: Vec<(String, bool)> = verdict
            .applied
            .iter()
            .map(|r| (r.id.clone(), r.error.is_some()))
            .collect();
        assert_eq!(got, expected, "round {round}: {identity} {args}");
        for (id, error) in expected {
            *applied_seen
                .entry(format!("{id}{}", if error { " (error)" } else { "" }))
                .or_default() += 1;
        }
    }
    // Every rule applied to some call, so none was compared only on calls it ignores; and
    // conditions failed to evaluate in both the host's part of Cedar and the rest.
    let never: Vec<String> = p
        .rules()
        .into_iter()
        .map(|r| r.id)
        .chain(
            [
                "when-required (error)",
                "when-sum (error)",
                "when-lead (error)",
                "when-lead-late (error)",
            ]
            .map(String::from),
        )
        .filter(|id| !applied_seen.contains_key(id))
        .collect();
    assert!(never.is_empty(), "rules that never applied: {never:?}");
}
