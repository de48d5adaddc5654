use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

mod agreement;

fn tool(plugin: &str, name: &str, schema: Value, reach: Reach) -> ToolFacts {
    ToolFacts {
        plugin: plugin.into(),
        tool: name.into(),
        input_schema: schema,
        reach,
    }
}

fn tools() -> Vec<ToolFacts> {
    let rw = Reach {
        can_change: true,
        read_write: vec!["/data".into()],
        ..Reach::default()
    };
    let sql =
        json!({"type": "object", "required": ["sql"], "properties": {"sql": {"type": "string"}}});
    vec![
        tool("sql", "sql_execute", sql.clone(), rw.clone()),
        tool("sql", "sql_query", sql, rw.clone()),
        tool(
            "files",
            "read_file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            rw,
        ),
        tool(
            "ops",
            "deploy",
            json!({"type": "object", "properties": {
                "env": {"type": "string"},
                "replicas": {"type": "integer"},
                "ratio": {"type": "number"},
                "options": {"type": "object", "properties": {"force": {"type": "boolean"}}},
            }}),
            Reach {
                can_change: true,
                network: vec!["https://deploy.example:443".into()],
                ..Reach::default()
            },
        ),
        tool(
            "ro",
            "look",
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            Reach {
                read_only: vec!["/docs".into()],
                ..Reach::default()
            },
        ),
    ]
}

/// A policy from the text of a `cordon.toml`.
fn load(toml_text: &str) -> Result<Policy, PolicyError> {
    #[derive(serde::Deserialize)]
    struct File {
        policy: PolicyConfig,
    }
    let mut config = toml::from_str::<File>(toml_text).unwrap().policy;
    config.source = Some(ConfigSource {
        path: "cordon.toml".into(),
        text: Arc::from(toml_text),
    });
    Policy::load(&config, &tools())
}

struct Ask<'a> {
    tool: &'a str,
    args: Value,
    caller: Caller,
    session: SessionFacts,
    counts: crate::Counts,
    now_ms: i64,
}

/// Monday 2026-11-30 12:00 UTC.
const MONDAY_NOON: i64 = 1_796_040_000_000;

fn call(tool: &str, args: Value) -> Ask<'_> {
    Ask {
        tool,
        args,
        caller: Caller {
            origin: "cli".into(),
            ..Caller::default()
        },
        session: SessionFacts::default(),
        counts: crate::Counts::new(),
        now_ms: MONDAY_NOON,
    }
}

impl Ask<'_> {
    fn decide(&self, p: &Policy) -> Verdict {
        p.decide(&Call {
            tool: self.tool,
            args: &self.args,
            caller: &self.caller,
            session: &self.session,
            counts: &self.counts,
            now_ms: self.now_ms,
            reach: None,
        })
    }
}

fn ids(v: &Verdict) -> Vec<String> {
    v.applied.iter().map(|r| r.id.clone()).collect()
}

fn decision(p: &Policy, ask: &Ask<'_>) -> Option<Decision> {
    ask.decide(p).decision
}

const WORKED: &str = r#"
[policy]
rules = [
  { id = "orders", tool = "sql.sql_execute", args = { sql = { regex = "^(?i)\\s*insert\\s+into\\s+orders\\b[^;]*;?\\s*$" } }, decision = "allow", reason = "adding orders is routine",
    match = [{ args = { sql = "INSERT INTO orders VALUES (1)" }, expect = "allow" }],
    not_match = [{ args = { sql = "INSERT INTO users VALUES (1)" } }, { args = { sql = "INSERT INTO orders VALUES (1); DELETE FROM orders" } }] },
  { id = "no-drop", tool = "sql.sql_execute", args = { sql = { regex = "(?i)\\bdrop\\b" } }, decision = "deny", reason = "nothing is dropped",
    match = [{ args = { sql = "drop table orders" }, expect = "deny" }] },
]
"#;

#[test]
fn the_worked_example_allows_inserts_leaves_the_rest_to_the_default_and_denies_drop() {
    let p = load(WORKED).unwrap();
    let d = |sql: &str| decision(&p, &call("sql.sql_execute", json!({ "sql": sql })));
    assert_eq!(d("INSERT INTO orders VALUES (7)"), Some(Decision::Allow));
    assert_eq!(
        d("  insert into orders (id) values (7);"),
        Some(Decision::Allow)
    );
    // Anything else is left to the grant-derived default (ask, for a read-write grant).
    assert_eq!(d("UPDATE orders SET x = 1"), None);
    assert_eq!(d("INSERT INTO orders VALUES (1); DELETE FROM orders"), None);
    assert_eq!(
        d("INSERT INTO orders VALUES (1); DROP TABLE orders"),
        Some(Decision::Deny)
    );
    let v = call("sql.sql_execute", json!({"sql": "DROP TABLE x"})).decide(&p);
    assert_eq!(
        v.rule.unwrap().describe(),
        "policy rule `no-drop` (cordon.toml:7): nothing is dropped"
    );
}

#[test]
fn strictest_wins_and_the_first_written_is_named() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "a", tool = "sql.sql_execute", decision = "allow" },
  { id = "b", tool = "sql_execute", decision = "ask", reason = "second" },
  { id = "c", plugin = "sql", decision = "ask", reason = "third" },
]
"#,
    )
    .unwrap();
    let v = call("sql.sql_execute", json!({"sql": "x"})).decide(&p);
    assert_eq!(v.decision, Some(Decision::Ask));
    let rule = v.rule.unwrap();
    assert_eq!(rule.id, "b");
    assert_eq!(rule.source, "cordon.toml:5");
    assert_eq!(v.applied.len(), 3);
    // Rules name tools, not model-facing names: `sql_query` is untouched by `a` and `b`.
    let v = call("sql.sql_query", json!({"sql": "x"})).decide(&p);
    assert_eq!(v.rule.unwrap().id, "c");
    assert_eq!(decision(&p, &call("files.read_file", json!({}))), None);
}

#[test]
fn argument_tests_of_every_kind() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "staging", tool = "ops.deploy", args = { env = "staging" }, decision = "allow" },
  { id = "set", tool = "ops.deploy", args = { env = { in = ["qa", "dev"] } }, decision = "allow" },
  { id = "not-set", tool = "ops.deploy", args = { env = { not_in = ["qa", "dev", "staging"] } }, decision = "ask" },
  { id = "many", tool = "ops.deploy", args = { replicas = { min = 10 } }, decision = "deny" },
  { id = "ratio", tool = "ops.deploy", args = { ratio = { max = 0.5 } }, decision = "ask" },
  { id = "forced", tool = "ops.deploy", args = { "options.force" = true }, decision = "deny" },
  { id = "noforce", tool = "ops.deploy", args = { options = { present = false } }, decision = "allow" },
  { id = "pre", tool = "sql.sql_query", args = { sql = { prefix = "SELECT *" } }, decision = "deny" },
  { id = "suf", tool = "sql.sql_query", args = { sql = { suffix = ";--" } }, decision = "deny" },
  { id = "glob", tool = "sql.sql_query", args = { sql = { glob = "EXPLAIN *" } }, decision = "ask" },
]
"#,
    )
    .unwrap();
    let d = |args: Value| decision(&p, &call("ops.deploy", args));
    assert_eq!(d(json!({"env": "staging"})), Some(Decision::Allow));
    assert_eq!(d(json!({"env": "qa"})), Some(Decision::Allow));
    assert_eq!(d(json!({"env": "prod"})), Some(Decision::Ask));
    assert_eq!(
        d(json!({"env": "qa", "replicas": 12})),
        Some(Decision::Deny)
    );
    assert_eq!(
        d(json!({"env": "qa", "replicas": 9})),
        Some(Decision::Allow)
    );
    assert_eq!(d(json!({"env": "qa", "ratio": 0.25})), Some(Decision::Ask));
    assert_eq!(
        d(json!({"env": "qa", "ratio": 0.75})),
        Some(Decision::Allow)
    );
    assert_eq!(
        d(json!({"env": "qa", "options": {"force": true}})),
        Some(Decision::Deny)
    );
    assert_eq!(
        d(json!({"env": "qa", "options": {"force": false}})),
        Some(Decision::Allow)
    );
    let q = |sql: &str| decision(&p, &call("sql.sql_query", json!({ "sql": sql })));
    // `prefix` is literal: the star is not a wildcard.
    assert_eq!(q("SELECT * FROM t"), Some(Decision::Deny));
    assert_eq!(q("SELECT a FROM t"), None);
    assert_eq!(q("SELECT a FROM t;--"), Some(Decision::Deny));
    assert_eq!(q("EXPLAIN SELECT 1"), Some(Decision::Ask));
}

#[test]
fn paths_are_compared_normalised_and_unplaceable_paths_never_slip_past_ask() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "reports", tool = "files.read_file", args = { path = { path = "/data/reports/**" } }, decision = "allow" },
  { id = "hr", tool = "files.read_file", args = { path = { path = "/data/hr/**" } }, decision = "ask" },
  { id = "one-level", tool = "files.read_file", args = { path = { path = "/data/*/index" } }, decision = "deny" },
]
"#,
    )
    .unwrap();
    let r = |path: &str| decision(&p, &call("files.read_file", json!({ "path": path })));
    assert_eq!(r("/data/reports/2026/q3.csv"), Some(Decision::Allow));
    assert_eq!(r("/data/reports/../hr/salaries.csv"), Some(Decision::Ask));
    assert_eq!(r("//data/./reports//q3.csv"), Some(Decision::Allow));
    assert_eq!(r("/data/x/index"), Some(Decision::Deny));
    assert_eq!(r("/data/x/y/index"), None);
    // A relative path cannot be placed: no allow rule matches it, every deny or ask rule does.
    assert_eq!(r("reports/q3.csv"), Some(Decision::Deny));
    assert_eq!(r("/.."), Some(Decision::Deny));
}

#[test]
fn callers_grants_sessions_and_time() {
    let p = load(
        r#"
[policy]
timezone = "Europe/Berlin"
rules = [
  { id = "ci-staging", tool = "ops.deploy", token = "ci", args = { env = "staging" }, decision = "allow" },
  { id = "gateway", origin = "gateway", plugin = "ops", decision = "ask" },
  { id = "bob", user = "bob", decision = "deny" },
  { id = "inspector", client = "Inspector", decision = "deny" },
  { id = "readers", can_change = false, decision = "allow" },
  { id = "writers", writes = true, origin = "mcp", decision = "ask" },
  { id = "net", network = true, origin = "mcp-http", decision = "deny" },
  { id = "tests-first", tool = "ops.deploy", not_approved = "sql.sql_query", origin = "serve", decision = "deny", reason = "run the checks first" },
  { id = "labelled", labels = ["private", "untrusted"], network = true, decision = "deny" },
  { id = "office", tool = "ops.deploy", hours = "09:00-17:00", days = "mon-fri", origin = "cli", decision = "allow" },
  { id = "night", tool = "ops.deploy", hours = "22:00-06:00", decision = "deny" },
]
"#,
    )
    .unwrap();
    let mut c = call("ops.deploy", json!({"env": "staging"}));
    c.caller = Caller {
        origin: "serve".into(),
        token: "ci".into(),
        ..Caller::default()
    };
    // Not approved yet: the approval-before-action rule denies.
    assert_eq!(c.decide(&p).rule.unwrap().id, "tests-first");
    c.session.approved.insert("sql.sql_query".into());
    assert_eq!(decision(&p, &c), Some(Decision::Allow));
    c.caller.origin = "gateway".into();
    assert_eq!(decision(&p, &c), Some(Decision::Ask));
    c.caller.user = "bob".into();
    assert_eq!(decision(&p, &c), Some(Decision::Deny));
    c.caller = Caller {
        origin: "mcp-http".into(),
        client: "Inspector".into(),
        ..Caller::default()
    };
    assert_eq!(c.decide(&p).rule.unwrap().id, "inspector");
    c.caller.client = "Claude".into();
    assert_eq!(c.decide(&p).rule.unwrap().id, "net");
    // Grants: the read-only tool is allowed, a writer asked over MCP.
    assert_eq!(
        decision(&p, &call("ro.look", json!({}))),
        Some(Decision::Allow)
    );
    let mut w = call("files.read_file", json!({}));
    w.caller.origin = "mcp".into();
    assert_eq!(w.decide(&p).rule.unwrap().id, "writers");
    // Labels: the hook the session-safety rules use.
    let mut l = call("ops.deploy", json!({}));
    l.session.labels.insert("private".into());
    assert_ne!(
        l.decide(&p).rule.map(|r| r.id),
        Some("labelled".to_string())
    );
    l.session.labels.insert("untrusted".into());
    assert_eq!(l.decide(&p).rule.unwrap().id, "labelled");
    // Time, in Berlin: noon UTC is 13:00 there on a Monday; 23:30 UTC on Monday is 00:30
    // on Tuesday.
    let mut t = call("ops.deploy", json!({}));
    assert_eq!(t.decide(&p).rule.unwrap().id, "office");
    t.now_ms = MONDAY_NOON + (11 * 60 + 30) * 60_000;
    assert_eq!(t.decide(&p).rule.unwrap().id, "night");
    t.now_ms = MONDAY_NOON + 5 * 24 * 3_600_000;
    assert_eq!(decision(&p, &t), None, "Saturday noon");
}

#[test]
fn places_held_ahead_on_a_key_are_sized_by_the_least_threshold_of_its_kind() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "few", tool = "sql.sql_execute", calls = { of = "tool", within = "1h", at_least = 20 }, decision = "ask" },
  { id = "many", tool = "files.read_file", calls = { of = "tool", within = "1d", at_least = 100000 }, decision = "ask" },
  { id = "capped", plugin = "sql", calls = { of = "plugin", within = "session", at_least = 3200 }, decision = "deny" },
  { id = "writes", tool = "sql.sql_execute", calls = { of = "plugin", within = "1h", at_least = 48 }, decision = "ask" },
  { id = "read", tool = "ops.deploy", calls = { of = "plugin", within = "1h", per = "caller", at_least = 10000 }, when = 'context.calls["rule:read"] > 5', decision = "ask" },
]
"#,
    )
    .unwrap();
    let scope = CountScope {
        session: "s1",
        caller: ("ci", ""),
    };
    let ahead = |tool: &str| {
        p.reservable(tool, scope)
            .into_iter()
            .map(|r| (r.key, r.most_ahead))
            .collect::<Vec<_>>()
    };
    // Every tool reserves on its plugin's keys and its own, each sized by the least threshold
    // of its kind over the whole policy:
    // - of the plugin, per caller: read by a `when` on ops.deploy, so not sized;
    // - of the plugin: 48 / 16 (`writes`, a rule on sql.sql_execute only);
    // - of the plugin, in the session: 3,200 / 16, at most 64;
    // - of the tool: 20 / 16 (`few`), also for files.read_file, whose own rule asks at
    //   100,000.
    // So also for sql.sql_query, none of whose rules reads a key it counts on.
    for (plugin, tool) in [
        ("sql", "sql.sql_execute"),
        ("sql", "sql.sql_query"),
        ("files", "files.read_file"),
    ] {
        assert_eq!(
            ahead(tool),
            [
                (format!("caller:ci/|plugin:{plugin}"), None),
                (format!("plugin:{plugin}"), Some(3)),
                (format!("session:s1|plugin:{plugin}"), Some(64)),
                (format!("tool:{tool}"), Some(1)),
            ],
            "{tool}"
        );
    }
    assert_eq!(
        (
            places_ahead(0),
            places_ahead(15),
            places_ahead(16),
            places_ahead(u64::MAX)
        ),
        (0, 0, 1, 64)
    );
}

#[test]
fn counters_are_asked_for_and_tallied_by_rule() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "writes", tool = "sql.sql_execute", args = { sql = { regex = "(?i)^\\s*(insert|update|delete)" } }, decision = "allow" },
  { id = "too-many", tool = "sql.sql_execute", calls = { of = "rule:writes", within = "1h", at_least = 20 }, decision = "ask", reason = "more than 20 writes an hour",
    match = [{ args = { sql = "x" }, counts = { calls = 20 } }], not_match = [{ args = { sql = "x" }, counts = { calls = 19 } }] },
  { id = "session-cap", plugin = "sql", calls = { of = "plugin", within = "session", per = "caller", at_least = 100 }, decision = "deny" },
]
"#,
    )
    .unwrap();
    let scope = CountScope {
        session: "s1",
        caller: ("ci", ""),
    };
    let q = p.counters_for("sql.sql_execute", scope, MONDAY_NOON);
    assert_eq!(q.len(), 2);
    assert_eq!(
        q[0].names.iter().map(|n| &**n).collect::<Vec<_>>(),
        ["rule:too-many"]
    );
    assert_eq!(&*q[0].key, "rule:writes");
    assert_eq!(q[0].since_minute, MONDAY_NOON / 60_000 - 59);
    assert_eq!(&*q[1].key, "session:s1|caller:ci/|plugin:sql");
    assert_eq!(q[1].since_minute, 0);
    let mut c = call(
        "sql.sql_execute",
        json!({"sql": "insert into t values (1)"}),
    );
    let v = c.decide(&p);
    assert_eq!(v.decision, Some(Decision::Allow));
    assert_eq!(
        p.tally("sql.sql_execute", &ids(&v), scope),
        ["rule:writes", "session:s1|caller:ci/|plugin:sql"]
    );
    c.counts.insert("rule:too-many".into(), 20);
    let v = c.decide(&p);
    assert_eq!(
        v.rule.unwrap().reason.as_deref(),
        Some("more than 20 writes an hour")
    );
    // A read is no write: the writes counter does not count it.
    let r = call("sql.sql_execute", json!({"sql": "select 1"}));
    let v = r.decide(&p);
    assert_eq!(
        p.tally("sql.sql_execute", &ids(&v), scope),
        ["session:s1|caller:ci/|plugin:sql"]
    );
}

#[test]
fn counts_answered_for_one_policy_decide_alike_under_a_reloaded_one() {
    // The same two rules in either order: their counters are numbered the other way round.
    let text =
        |first: &str, second: &str| format!("[policy]\nrules = [\n  {first},\n  {second},\n]\n");
    let few = r#"{ id = "few", tool = "files.read_file", calls = { of = "tool", within = "1h", at_least = 3 }, decision = "ask" }"#;
    let many = r#"{ id = "many", tool = "files.read_file", calls = { of = "plugin", within = "session", at_least = 10 }, decision = "deny" }"#;
    // And a `when` reading a rule's counter (the host's evaluation of `context.calls`).
    let busy = r#"{ id = "busy", tool = "files.read_file", when = 'context.calls["rule:few"] >= 5', decision = "deny" }"#;
    let first = load(&text(few, &format!("{many},\n  {busy}"))).unwrap();
    let reloaded = load(&text(many, &format!("{few},\n  {busy}"))).unwrap();
    let scope = CountScope {
        session: "s1",
        caller: ("ci", ""),
    };
    let queries = first.counters_for("files.read_file", scope, MONDAY_NOON);
    assert_eq!(queries.len(), 2);
    for (few_n, many_n, expected) in [
        (3, 0, Some(Decision::Ask)),
        (0, 10, Some(Decision::Deny)),
        (2, 9, None),
        (5, 0, Some(Decision::Deny)),
    ] {
        let found: Vec<u64> = queries
            .iter()
            .map(|q| match &*q.names[0] {
                "rule:few" => few_n,
                _ => many_n,
            })
            .collect();
        let mut c = call("files.read_file", json!({"path": "/data/x"}));
        c.counts = crate::counts_of(&queries, &found);
        assert_eq!(decision(&first, &c), expected, "{few_n}/{many_n}");
        assert_eq!(
            decision(&reloaded, &c),
            expected,
            "{few_n}/{many_n}, decided by the policy loaded since"
        );
    }
}

#[test]
fn a_counter_name_taken_twice_is_refused() {
    let e = load(
        r#"
[policy]
counters = { "rule:few" = { of = "tool", within = "1h" } }
rules = [
  { id = "few", tool = "files.read_file", calls = { of = "tool", within = "1h", at_least = 3 }, decision = "ask" },
]
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("counters.\"rule:few\"") && e.contains("rule `few`'s own counter"),
        "{e}"
    );
}

#[test]
fn a_tool_is_asked_only_the_counters_its_own_rules_read() {
    let p = load(
        r#"
[policy]
counters = { reads = { of = "tool", within = "1h" } }
rules = [
  { id = "busy", tool = "sql.sql_execute", calls = { of = "tool", within = "1h", at_least = 5 }, decision = "ask" },
  { id = "many-reads", tool = "files.read_file", when = "context.calls.reads >= 3", decision = "deny" },
  { id = "look", tool = "ro.look", decision = "allow" },
]
"#,
    )
    .unwrap();
    let scope = CountScope {
        session: "s1",
        caller: ("ci", ""),
    };
    let names = |tool: &str| -> Vec<String> {
        p.counters_for(tool, scope, MONDAY_NOON)
            .into_iter()
            .flat_map(|q| q.names.to_vec())
            .map(|n| n.to_string())
            .collect()
    };
    assert_eq!(names("sql.sql_execute"), ["rule:busy"]);
    assert_eq!(names("files.read_file"), ["reads"]);
    assert!(names("ro.look").is_empty());
    // The named counter still decides the tool whose rule reads it, and is counted.
    let mut c = call("files.read_file", json!({"path": "/data/x"}));
    c.counts.insert("reads".into(), 3);
    assert_eq!(decision(&p, &c), Some(Decision::Deny));
    c.counts.insert("reads".into(), 2);
    assert_eq!(decision(&p, &c), None);
    assert_eq!(
        p.tally("ro.look", &[], scope),
        ["tool:ro.look"],
        "every call is counted, whichever rules read the counter"
    );
}

#[test]
fn load_errors_name_the_rule_its_line_and_what_to_write() {
    let err = |text: &str| load(text).unwrap_err().to_string();
    let e = err(
        "[policy]\nrules = [\n  { id = \"x\", tool = \"sql.sql_exec\", decision = \"ask\" },\n]\n",
    );
    assert!(
        e.contains("rule `x` (cordon.toml:3)") && e.contains("did you mean `sql.sql_execute`"),
        "{e}"
    );
    let e = err(
        "[policy]\nrules = [{ id = \"x\", tool = \"sql.sql_execute\", args = { sqll = \"a\" }, decision = \"ask\" }]\n",
    );
    assert!(
        e.contains("has no argument `sqll`") && e.contains("did you mean `sql`"),
        "{e}"
    );
    let e = err(
        "[policy]\nrules = [{ id = \"x\", tool = \"sql.sql_execute\", args = { sql = { prefx = \"a\" } }, decision = \"ask\" }]\n",
    );
    assert!(e.contains("did you mean `prefix`"), "{e}");
    let e = err(
        "[policy]\nrules = [{ id = \"x\", tool = \"ops.deploy\", args = { replicas = \"three\" }, decision = \"ask\" }]\n",
    );
    assert!(
        e.contains("`replicas` is a integer")
            || e.contains("`replicas` is an integer")
            || e.contains("replicas` is a"),
        "{e}"
    );
    let e = err("[policy]\nrules = [{ id = \"x\", origin = \"gatway\", decision = \"ask\" }]\n");
    assert!(e.contains("did you mean `gateway`"), "{e}");
    let e = err("[policy]\nrules = [{ id = \"x\", plugin = \"sq\", decision = \"ask\" }]\n");
    assert!(e.contains("no installed plugin is named `sq`"), "{e}");
    let e = err(
        "[policy]\nrules = [{ id = \"x\", decision = \"ask\" }, { id = \"x\", decision = \"deny\" }]\n",
    );
    assert!(e.contains("already used"), "{e}");
    let e = err(
        "[policy]\nrules = [{ id = \"x\", tool = \"sql.sql_execute\", when = \"context.input.sqll == 1\", decision = \"ask\" }]\n",
    );
    assert!(e.contains("rule `x`") && e.contains("sqll"), "{e}");
    let e = err("[policy]\ntimezone = \"Mars/Olympus\"\n");
    assert!(e.contains("Mars/Olympus"), "{e}");
    let e = err(
        "[policy]\nrules = [{ id = \"x\", plugin = \"sql\", calls = { of = \"rule:nope\", within = \"1h\", at_least = 1 }, decision = \"ask\" }]\n",
    );
    assert!(e.contains("names no rule"), "{e}");
}

#[test]
fn a_failing_example_refuses_the_policy_and_names_the_rule() {
    let e = load(
        r#"
[policy]
rules = [
  { id = "orders", tool = "sql.sql_execute", args = { sql = { prefix = "INSERT INTO orders" } }, decision = "allow",
    not_match = [{ args = { sql = "INSERT INTO orders_archive VALUES (1)" } }] },
]
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("rule `orders` (cordon.toml:4)")
            && e.contains("not_match[0]")
            && e.contains("the rule applies"),
        "{e}"
    );
    let e = load(
        r#"
[policy]
rules = [
  { id = "a", tool = "sql.sql_execute", decision = "allow", match = [{ args = { sql = "x" }, expect = "allow" }] },
  { id = "b", plugin = "sql", decision = "ask" },
]
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("expects `allow`, but the policy decides `ask` by rule `b`"),
        "{e}"
    );
}

#[test]
fn cedar_files_load_beside_the_config_and_are_named_by_line() {
    let dir = std::env::temp_dir().join(format!("cordon-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("team.cedar"),
        "// the team's rules\n\n@id(\"prod-needs-ask\") @ask @reason(\"production\")\npermit(principal, action == Action::\"ops.deploy\", resource)\nwhen { context.input has env && context.input.env == \"prod\" };\n\nforbid(principal, action in Action::\"plugin:sql\", resource)\nwhen { context.caller.token == \"intern\" };\n",
    )
    .unwrap();
    let text = "[policy]\nfiles = [\"team.cedar\"]\n";
    #[derive(serde::Deserialize)]
    struct File {
        policy: PolicyConfig,
    }
    let mut config = toml::from_str::<File>(text).unwrap().policy;
    config.source = Some(ConfigSource {
        path: dir.join("cordon.toml"),
        text: Arc::from(text),
    });
    let p = Policy::load(&config, &tools()).unwrap();
    let v = call("ops.deploy", json!({"env": "prod"})).decide(&p);
    let rule = v.rule.unwrap();
    assert_eq!(
        (rule.id.as_str(), rule.source.as_str()),
        ("prod-needs-ask", "team.cedar:3")
    );
    assert_eq!(rule.decision, Decision::Ask);
    let mut c = call("sql.sql_query", json!({"sql": "x"}));
    c.caller.token = "intern".into();
    let rule = c.decide(&p).rule.unwrap();
    assert_eq!(
        (rule.id.as_str(), rule.source.as_str()),
        ("team.cedar#2", "team.cedar:7")
    );
    // A Cedar policy naming an argument the tool lacks is refused with the policy's place.
    std::fs::write(
        dir.join("team.cedar"),
        "permit(principal, action == Action::\"ops.deploy\", resource) when { context.input.envv == \"x\" };\n",
    )
    .unwrap();
    let e = Policy::load(&config, &tools()).unwrap_err().to_string();
    assert!(
        e.contains("team.cedar#1") && e.contains("team.cedar:1"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_digest_follows_the_text_and_explain_lists_every_rule() {
    let a = load(WORKED).unwrap();
    let b = load(&WORKED.replace("nothing is dropped", "no drops")).unwrap();
    assert_ne!(a.digest(), b.digest());
    assert_eq!(a.digest(), load(WORKED).unwrap().digest());
    let args = json!({"sql": "DROP TABLE orders"});
    let caller = Caller::default();
    let session = SessionFacts::default();
    let counts = crate::Counts::new();
    let (v, each) = a.explain(&Call {
        tool: "sql.sql_execute",
        args: &args,
        caller: &caller,
        session: &session,
        counts: &counts,
        now_ms: MONDAY_NOON,
        reach: None,
    });
    assert_eq!(v.decision, Some(Decision::Deny));
    let applied: Vec<(&str, bool)> = each.iter().map(|(r, a)| (r.id.as_str(), *a)).collect();
    assert_eq!(applied, [("orders", false), ("no-drop", true)]);
    assert_eq!(a.rules_for("files.read_file").len(), 0);
    assert!(a.denies_every_call("sql.sql_execute").is_none());
}

#[test]
fn an_unconditional_deny_hides_the_tool() {
    let p =
        load("[policy]\nrules = [{ id = \"off\", tool = \"ops.deploy\", decision = \"deny\" }]\n")
            .unwrap();
    assert_eq!(p.denies_every_call("ops.deploy").unwrap().id, "off");
    assert!(p.denies_every_call("sql.sql_query").is_none());
}

#[test]
fn rules_are_listed_in_the_order_written_and_local_times_read_in_the_policy_zone() {
    let p = load(WORKED).unwrap();
    let ids: Vec<String> = p.rules().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["orders", "no-drop"]);
    assert_eq!(p.local_time("2026-11-30T12:00"), Ok(MONDAY_NOON));
    assert_eq!(p.show_time(MONDAY_NOON), "2026-11-30T12:00 UTC");
    let berlin = load("[policy]\ntimezone = \"Europe/Berlin\"\n").unwrap();
    assert_eq!(
        berlin.local_time("2026-11-30T13:00"),
        Ok(MONDAY_NOON),
        "13:00 in Berlin is noon UTC in winter"
    );
    assert_eq!(
        berlin.show_time(MONDAY_NOON),
        "2026-11-30T13:00 Europe/Berlin"
    );
    let e = p.local_time("noon").unwrap_err();
    assert!(e.contains("`noon` is not a local time"), "{e}");
}

#[test]
fn the_digest_does_not_depend_on_how_the_config_path_is_spelled_but_on_each_rules_line() {
    let at = |path: &str, text: &str| {
        #[derive(serde::Deserialize)]
        struct File {
            policy: PolicyConfig,
        }
        let mut config = toml::from_str::<File>(text).unwrap().policy;
        config.source = Some(ConfigSource {
            path: path.into(),
            text: Arc::from(text),
        });
        let p = Policy::load(&config, &tools()).unwrap();
        (p.digest().to_string(), p.rules()[0].source.clone())
    };
    let (a, source) = at("cordon.toml", WORKED);
    let (b, other) = at("/etc/cordon/cordon.toml", WORKED);
    assert_eq!(
        (source.as_str(), other.as_str()),
        ("cordon.toml:4", "/etc/cordon/cordon.toml:4")
    );
    assert_eq!(a, b, "the same text read from another path");
    let (moved, _) = at("cordon.toml", &format!("\n{WORKED}"));
    assert_ne!(a, moved, "a rule on another line is named differently");
}

#[test]
fn a_when_that_cannot_be_evaluated_counts_as_applying_only_when_it_denies_or_asks() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "grow-allow", tool = "ops.deploy", when = 'context.input has replicas && context.input.replicas * 4611686018427387904 > 0', decision = "allow" },
  { id = "grow-ask", tool = "ops.deploy", when = 'context.input has replicas && context.input.replicas * 4611686018427387904 > 0', decision = "ask", reason = "many replicas" },
]
"#,
    )
    .unwrap();
    // 1 × 2^62 fits; 4 × 2^62 overflows.
    let fits = call("ops.deploy", json!({"replicas": 1})).decide(&p);
    assert_eq!(fits.decision, Some(Decision::Ask));
    assert_eq!(ids(&fits), ["grow-allow", "grow-ask"]);
    assert!(fits.applied.iter().all(|r| r.error.is_none()));
    let overflows = call("ops.deploy", json!({"replicas": 4})).decide(&p);
    assert_eq!(overflows.decision, Some(Decision::Ask));
    assert_eq!(ids(&overflows), ["grow-ask"]);
    let error = overflows.applied[0].error.as_deref().unwrap();
    assert!(error.contains("overflow"), "{error}");
    assert!(
        overflows.applied[0]
            .describe()
            .contains("could not be evaluated"),
        "{:?}",
        overflows.applied[0]
    );
}

/// A tool given more through a grant request (for a call, a session or a while) is decided by
/// what it reaches then: a rule denying tools that reach the network applies once it does, and
/// an allow for tools that write nothing stops applying once they can.
#[test]
fn rules_on_reach_decide_by_what_grants_given_since_make_the_tool_reach() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "offline", tool = "ro.look", network = true, decision = "deny", reason = "look stays offline" },
  { id = "reads", tool = "ro.look", writes = false, decision = "allow" },
]
"#,
    )
    .unwrap();
    let ask = call("ro.look", json!({"q": "x"}));
    let decide = |reach: Option<&Reach>| {
        p.decide(&Call {
            tool: ask.tool,
            args: &ask.args,
            caller: &ask.caller,
            session: &ask.session,
            counts: &ask.counts,
            now_ms: ask.now_ms,
            reach,
        })
    };
    // As installed (read-only, no network), and with a reach that is the same.
    assert_eq!(ids(&decide(None)), ["reads"]);
    let installed = Reach {
        read_only: vec!["/docs".into()],
        ..Reach::default()
    };
    assert_eq!(ids(&decide(Some(&installed))), ["reads"]);
    // Given an origin: denied.
    let online = Reach {
        can_change: true,
        network: vec!["https://a.example:443".into()],
        ..installed.clone()
    };
    let v = decide(Some(&online));
    assert_eq!(v.decision, Some(Decision::Deny), "{:?}", ids(&v));
    assert!(ids(&v).contains(&"offline".to_string()));
    // Given a read-write directory: the allow for tools that write nothing is gone.
    let writes = Reach {
        can_change: true,
        read_write: vec!["/out".into()],
        ..installed
    };
    assert!(ids(&decide(Some(&writes))).is_empty());
}

#[test]
fn a_time_that_cannot_be_read_makes_deny_rules_apply_whoever_they_are_for() {
    let p = load(
        r#"
[policy]
rules = [
  { id = "t", tool = "ro.look", token = "alice", hours = "08:00-20:00", decision = "deny" },
]
"#,
    )
    .unwrap();
    let mut c = call("ro.look", json!({"q": "x"}));
    c.caller.token = "bob".into();
    // Read, the time leaves bob's call to the rules for bob: none.
    assert_eq!(decision(&p, &c), None);
    c.now_ms = i64::MAX;
    let v = c.decide(&p);
    assert_eq!(v.decision, Some(Decision::Deny));
    assert!(
        v.applied[0]
            .error
            .as_deref()
            .unwrap()
            .contains("out of range")
    );
}
