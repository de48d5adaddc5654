//! What the per-call policy (`[policy]`, issue #36) costs, against the per-tool decision of
//! before, in the same run.
//!
//! 1. **Decision time.** 50 tools in 10 plugins with realistic argument schemas (strings,
//!    integers, numbers, nested objects, arrays) and policies of 10, 100 and 1,000 rules spread
//!    over them as real configurations are: a few tools carry most rules (tools drawn with Zipf
//!    weights 1/k), some rules name a plugin and a few none. The mix, by share of rules:
//!    argument `equals` 12 %, `in` 10 %, `prefix`/`glob` 12 %, `regex` 10 %, `path` or `suffix`
//!    8 %, `min`/`max` 10 %, a nested argument 8 %, caller (`origin`, `token`, `client`) 10 %,
//!    `hours`/`days` 6 %, `calls` counters 6 %, a Cedar `when` 4 %, plugin-wide on grants 3 %,
//!    tool-less 1 %; about one rule in 100 (at least one) is instead a policy in a Cedar file,
//!    and every `equals` and `regex` rule carries a `match` and a `not_match` example. For each
//!    size: the time to load the policy (`Policy::load`: compile, validate against the tools'
//!    schema, run the examples), and p50/p99 of one decision — `Policy::decide` then
//!    `approval::decide(.., Some(&verdict))` — for a call of the tool with the most rules and of
//!    one with few, against today's per-tool `approval::decide(.., None)` timed in the same
//!    rounds. From the two tools' times: the fixed cost of a decision and the cost per rule.
//! 2. **A tool call's total cost.** One MCP client (rmcp) calls the `noop` fixture component
//!    through `cordon mcp` over stdio (as `mcp_bench` part 1), alternating between three
//!    servers: no policy; 1,000 rules that all name `noop.noop` (the worst case: every rule is
//!    evaluated on every call; the mix above without argument tests, since `noop` takes none,
//!    and none of them asks or denies the bench's calls: the counters' thresholds are far above
//!    the calls the bench makes, which all three servers count in their one store); and only
//!    as many as the busiest tool of part 1 carries. Medians per call and their ratios (target
//!    ≤ 1.05).
//!
//! 3. **The Rule of Two.** The cost of session labels: `approval::decide` for a call of a tool
//!    that can send data out, in a session holding both labels (held back: the reason is
//!    written) and in one holding none, against the same decision with no labels at all, and
//!    `SessionLabels::saw` for a result (target ≤ 1 µs p50 per call).
//!
//! `cargo run --release -p cordon-tests --example policy_bench -- [--cordon
//! target/release/cordon] [--noop target/fixtures/noop.wasm] [--samples 20000] [--calls 2000]
//! [--decisions-only]` (part 1 alone, for profiling) `[--hot-share 224]` (part 2 alone, with
//! this many rules as the busiest tool's share) `[--no-counters]` (part 2's policies without
//! counters, to tell the store's share of the cost from the decisions') `[--edited]` (part
//! 2's configs edited once the servers run, as a user changes a policy without a restart)
//! `[--baseline-cordon
//! OTHER]` (part 2 with another build's servers in the same rounds, each compared with its own
//! no-policy server). Part 2 also gives each server's CPU per call, which what else the
//! machine runs disturbs less than the wall time.
//! Everything runs on this machine (the MCP servers are child processes on pipes); every loop
//! is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use cordon_agent::approval::{self, Standing};
use cordon_agent::cordon_policy::{Call, Caller, CountScope, Policy, Reach, SessionFacts};
use cordon_agent::{AgentConfig, ToolSpec};
use cordon_tests::bench::{arg, cordon, file_arg, number};
mod common {
    pub mod mcp_client;
}
use common::mcp_client::{Client, calls, connect};
use serde_json::{Value, json};

/// Monday 2026-11-30 10:00 UTC (11:00 in Berlin): no `hours`/`days` rule of part 1 applies.
const MONDAY_MORNING: i64 = 1_796_032_800_000;
const PLUGINS: [&str; 10] = [
    "files", "sql", "web", "ops", "search", "crm", "billing", "git", "mail", "kb",
];

/// The argument shapes tools have; `NoArgs` is the `noop` fixture's.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Files,
    Sql,
    Http,
    Deploy,
    Search,
    NoArgs,
}

/// Where a shape's rules look: a top-level string, another string (perhaps nested), an
/// integer, a number, and a nested test.
struct Fields {
    main: &'static str,
    second: &'static str,
    int: &'static str,
    num: &'static str,
    /// A nested argument and the test on it (TOML).
    nested: (&'static str, &'static str),
}

impl Shape {
    fn of(i: usize) -> Shape {
        [
            Shape::Files,
            Shape::Sql,
            Shape::Http,
            Shape::Deploy,
            Shape::Search,
        ][i % 5]
    }

    fn stem(self) -> &'static str {
        match self {
            Shape::Files => "file",
            Shape::Sql => "query",
            Shape::Http => "fetch",
            Shape::Deploy => "deploy",
            Shape::Search => "search",
            Shape::NoArgs => "noop",
        }
    }

    fn schema(self) -> Value {
        let props = match self {
            Shape::Files => json!({
                "path": {"type": "string"},
                "mode": {"type": "string", "enum": ["read", "write", "append"]},
                "max_bytes": {"type": "integer"},
                "ratio": {"type": "number"},
                "options": {"type": "object", "properties": {
                    "recursive": {"type": "boolean"}, "depth": {"type": "integer"},
                    "follow_links": {"type": "boolean"}}},
            }),
            Shape::Sql => json!({
                "sql": {"type": "string"},
                "database": {"type": "string"},
                "limit": {"type": "integer"},
                "timeout": {"type": "number"},
                "params": {"type": "array", "items": {"type": "string"}},
                "options": {"type": "object", "properties": {
                    "readonly": {"type": "boolean"}, "max_rows": {"type": "integer"}}},
            }),
            Shape::Http => json!({
                "url": {"type": "string"},
                "method": {"type": "string"},
                "retries": {"type": "integer"},
                "timeout": {"type": "number"},
                "headers": {"type": "object", "properties": {
                    "accept": {"type": "string"}, "authorization": {"type": "string"}}},
            }),
            Shape::Deploy => json!({
                "env": {"type": "string"},
                "replicas": {"type": "integer"},
                "ratio": {"type": "number"},
                "options": {"type": "object", "properties": {
                    "force": {"type": "boolean"}, "strategy": {"type": "string"},
                    "window": {"type": "object", "properties": {
                        "start": {"type": "string"}, "minutes": {"type": "integer"}}}}},
            }),
            Shape::Search => json!({
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "filters": {"type": "object", "properties": {
                    "lang": {"type": "string"}, "since": {"type": "string"},
                    "score": {"type": "number"}}},
            }),
            Shape::NoArgs => json!({}),
        };
        let mut schema = json!({"type": "object", "properties": props});
        if self != Shape::NoArgs {
            schema["required"] = json!([self.fields().main]);
        }
        schema
    }

    fn fields(self) -> Fields {
        match self {
            Shape::Files => Fields {
                main: "path",
                second: "mode",
                int: "max_bytes",
                num: "ratio",
                nested: ("options.depth", "{ max = 8 }"),
            },
            Shape::Sql => Fields {
                main: "sql",
                second: "database",
                int: "limit",
                num: "timeout",
                nested: ("options.readonly", "false"),
            },
            Shape::Http => Fields {
                main: "url",
                second: "headers.authorization",
                int: "retries",
                num: "timeout",
                nested: ("headers.accept", "{ in = [\"application/octet-stream\"] }"),
            },
            Shape::Deploy => Fields {
                main: "env",
                second: "options.strategy",
                int: "replicas",
                num: "ratio",
                nested: ("options.window.minutes", "{ min = 120 }"),
            },
            Shape::Search | Shape::NoArgs => Fields {
                main: "query",
                second: "filters.lang",
                int: "limit",
                num: "filters.score",
                nested: ("filters.since", "{ prefix = \"19\" }"),
            },
        }
    }

    /// The arguments of the benchmark's call: ordinary ones, which most rules leave alone.
    fn call_args(self) -> Value {
        match self {
            Shape::Files => json!({"path": "/data/reports/2026/11/summary.csv", "mode": "read",
                "max_bytes": 1_048_576, "ratio": 0.5,
                "options": {"recursive": false, "depth": 2, "follow_links": false}}),
            Shape::Sql => {
                json!({"sql": "SELECT id, total FROM orders WHERE day = '2026-11-27' LIMIT 50",
                "database": "shop", "limit": 50, "timeout": 2.5, "params": ["2026-11-27"],
                "options": {"readonly": true, "max_rows": 500}})
            }
            Shape::Http => {
                json!({"url": "https://api.example.com/v1/orders?page=2", "method": "GET",
                "retries": 2, "timeout": 10.0,
                "headers": {"accept": "application/json", "authorization": "Bearer abc"}})
            }
            Shape::Deploy => json!({"env": "staging", "replicas": 3, "ratio": 0.25,
                "options": {"force": false, "strategy": "rolling",
                    "window": {"start": "10:00", "minutes": 30}}}),
            Shape::Search => json!({"query": "quarterly revenue by region", "limit": 20,
                "filters": {"lang": "en", "since": "2026-01-01", "score": 0.7}}),
            Shape::NoArgs => json!({}),
        }
    }
}

/// A tool of the benchmark's catalog.
struct BenchTool {
    plugin: String,
    tool: String,
    shape: Shape,
}

impl BenchTool {
    fn identity(&self) -> String {
        format!("{}.{}", self.plugin, self.tool)
    }

    fn spec(&self, plugin_index: usize) -> ToolSpec {
        let writes = plugin_index.is_multiple_of(2);
        let reach = Reach {
            can_change: writes,
            read_write: if writes { vec!["/data".into()] } else { vec![] },
            read_only: vec!["/docs".into()],
            network: if plugin_index == 2 {
                vec!["https://api.example.com:443".into()]
            } else {
                vec![]
            },
            env: vec![],
            config: vec![],
        };
        ToolSpec {
            name: format!("{}__{}", self.plugin, self.tool),
            tool: self.tool.clone(),
            description: format!("{} things", self.tool),
            input_schema: self.shape.schema(),
            output_schema: None,
            hints: Default::default(),
            plugin: self.plugin.clone(),
            grants: vec!["read /docs".into()],
            can_change_anything: writes,
            digest: String::new(),
            proven: Default::default(),
            reach,
            exposure: Default::default(),
        }
    }
}

/// A small deterministic generator (64-bit LCG), so every run draws the same policy.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Rule kinds with their share in percent (see the doc comment).
const MIX: [(Kind, u64); 13] = [
    (Kind::Equals, 12),
    (Kind::In, 10),
    (Kind::Prefix, 12),
    (Kind::Regex, 10),
    (Kind::Path, 8),
    (Kind::MinMax, 10),
    (Kind::Nested, 8),
    (Kind::Caller, 10),
    (Kind::Time, 6),
    (Kind::Calls, 6),
    (Kind::When, 4),
    (Kind::Plugin, 3),
    (Kind::Global, 1),
];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Equals,
    In,
    Prefix,
    Regex,
    Path,
    MinMax,
    Nested,
    Caller,
    Time,
    Calls,
    When,
    Plugin,
    Global,
}

/// Set by `--edited`: part 2's configs are edited once the servers run, before the calls
/// timed.
static EDITED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set by `--no-counters`: part 2's policies have caller rules where they had counters, so
/// the store is neither read nor written for them.
static NO_COUNTERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One rule as a line of `[policy] rules`: `j` makes its literals its own. `no_args` (the
/// `noop` tool) turns argument tests into caller tests, and guards time tests by origin, as
/// the real clock of part 2 may fall in any hour.
fn rule_line(j: usize, kind: Kind, t: &BenchTool, no_args: bool) -> String {
    let id = format!("r{j}");
    let tool = t.identity();
    let f = t.shape.fields();
    let kind = match kind {
        Kind::Calls if NO_COUNTERS.load(std::sync::atomic::Ordering::Relaxed) => Kind::Caller,
        Kind::Equals
        | Kind::In
        | Kind::Prefix
        | Kind::Regex
        | Kind::Path
        | Kind::MinMax
        | Kind::Nested
            if no_args =>
        {
            Kind::Caller
        }
        k => k,
    };
    let guard = if no_args {
        ", origin = \"gateway\""
    } else {
        ""
    };
    let main = f.main;
    match kind {
        Kind::Equals => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ {main} = \"forbidden-{j}\" }}, decision = \"deny\", reason = \"value {j} is off limits\", \
             match = [{{ args = {{ {main} = \"forbidden-{j}\" }} }}], not_match = [{{ args = {{ {main} = \"fine\" }} }}] }}"
        ),
        Kind::In => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ \"{}\" = {{ in = [\"a{j}\", \"b{j}\", \"c{j}\"] }} }}, decision = \"ask\", reason = \"set {j}\" }}",
            f.second
        ),
        Kind::Prefix if j.is_multiple_of(2) => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ {main} = {{ prefix = \"/scratch/{j}/\" }} }}, decision = \"allow\" }}"
        ),
        Kind::Prefix => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ {main} = {{ glob = \"*tmp{j}*\" }} }}, decision = \"ask\", reason = \"temporary {j}\" }}"
        ),
        Kind::Regex => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ {main} = {{ regex = '(?i)\\bdrop\\s+table\\s+t{j}\\b' }} }}, decision = \"deny\", reason = \"no drop of t{j}\", \
             match = [{{ args = {{ {main} = \"DROP TABLE t{j}\" }} }}], not_match = [{{ args = {{ {main} = \"select * from t{j}\" }} }}] }}"
        ),
        Kind::Path if t.shape == Shape::Files => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ path = {{ path = \"/data/area{j}/**\" }} }}, decision = \"allow\" }}"
        ),
        Kind::Path => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ {main} = {{ suffix = \".{j}.bak\" }} }}, decision = \"ask\" }}"
        ),
        Kind::MinMax if j.is_multiple_of(2) => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ {} = {{ min = {} }} }}, decision = \"ask\", reason = \"large\" }}",
            f.int,
            10_000 + j
        ),
        Kind::MinMax => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ \"{}\" = {{ max = -{}.5 }} }}, decision = \"deny\" }}",
            f.num, j
        ),
        Kind::Nested => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", args = {{ \"{}\" = {}, {main} = {{ prefix = \"n{j}\" }} }}, decision = \"deny\" }}",
            f.nested.0, f.nested.1
        ),
        Kind::Caller => match j % 3 {
            0 => format!(
                "{{ id = \"{id}\", tool = \"{tool}\", origin = [\"gateway\", \"mcp-http\"], token = \"guest-{j}\", decision = \"deny\" }}"
            ),
            1 => format!(
                "{{ id = \"{id}\", tool = \"{tool}\", token = [\"intern-{j}\", \"trial-{j}\"], decision = \"ask\", reason = \"trainees ask\" }}"
            ),
            _ => format!(
                "{{ id = \"{id}\", tool = \"{tool}\", client = \"unknown-client-{j}\", decision = \"deny\" }}"
            ),
        },
        Kind::Time if j.is_multiple_of(2) => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", hours = \"22:00-06:00\"{guard}, decision = \"ask\", reason = \"out of hours\" }}"
        ),
        Kind::Time => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", days = \"sat-sun\"{guard}, decision = \"ask\", reason = \"weekend\" }}"
        ),
        Kind::Calls => {
            let (of, within, per) = match j % 3 {
                0 => ("tool", "1h", ""),
                1 => ("plugin", "1d", ", per = \"caller\""),
                _ => ("tool", "session", ""),
            };
            format!(
                "{{ id = \"{id}\", tool = \"{tool}\", calls = {{ of = \"{of}\", within = \"{within}\"{per}, at_least = {} }}, decision = \"ask\", reason = \"many calls\" }}",
                1_000_000 + j
            )
        }
        Kind::When if no_args => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", when = 'context.caller.origin == \"gateway\" && context.time.hour < 6', decision = \"deny\" }}"
        ),
        Kind::When => format!(
            "{{ id = \"{id}\", tool = \"{tool}\", when = 'context.caller.origin == \"gateway\" && context.input.{main} like \"*w{j}*\"', decision = \"deny\" }}"
        ),
        Kind::Plugin if j.is_multiple_of(2) => format!(
            "{{ id = \"{id}\", plugin = \"{}\", can_change = true, origin = \"gateway\", decision = \"ask\" }}",
            t.plugin
        ),
        Kind::Plugin => format!(
            "{{ id = \"{id}\", plugin = \"{}\", writes = false, network = false, token = \"robot-{j}\", decision = \"allow\" }}",
            t.plugin
        ),
        Kind::Global => format!(
            "{{ id = \"{id}\", origin = \"gateway\", user = \"blocked-{j}\", decision = \"deny\", reason = \"blocked user\" }}"
        ),
    }
}

/// One policy in a Cedar file, on tool `t`.
fn cedar_policy(j: usize, t: &BenchTool) -> String {
    let tool = t.identity();
    let condition = if t.shape == Shape::NoArgs {
        format!("context.caller.origin == \"gateway\" && context.caller.user == \"u{j}\"")
    } else {
        format!(
            "context.caller.origin != \"cli\" && context.input.{} like \"*secret-{j}*\"",
            t.shape.fields().main
        )
    };
    format!(
        "@id(\"cedar{j}\")\n@reason(\"secrets stay put\")\nforbid(principal, action == Action::\"{tool}\", resource)\nwhen {{ {condition} }};\n\n"
    )
}

/// A policy of `n` rules over `tools` (drawn with Zipf weights): `cordon.toml`'s `[policy]`
/// text and the Cedar file's.
fn policy_text(n: usize, tools: &[BenchTool], no_args: bool, approval: &str) -> (String, String) {
    let weights: Vec<f64> = (1..=tools.len()).map(|k| 1.0 / k as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = Lcg(0x5eed + n as u64);
    let pick_tool = |rng: &mut Lcg| {
        let mut x = rng.below(1_000_000) as f64 / 1_000_000.0 * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        tools.len() - 1
    };
    let cedar_every = 100.min(n);
    let mut rules = String::new();
    let mut cedar = String::new();
    for j in 0..n {
        let t = &tools[pick_tool(&mut rng)];
        if j % cedar_every == cedar_every / 2 {
            cedar.push_str(&cedar_policy(j, t));
            continue;
        }
        let mut r = rng.below(100);
        let kind = MIX
            .iter()
            .find(|(_, share)| {
                if r < *share {
                    true
                } else {
                    r -= share;
                    false
                }
            })
            .map(|(k, _)| *k)
            .expect("the shares add up to 100");
        let _ = writeln!(rules, "  {},", rule_line(j, kind, t, no_args));
    }
    let toml = format!(
        "{approval}[policy]\ntimezone = \"Europe/Berlin\"\nfiles = [\"bench.cedar\"]\nrules = [\n{rules}]\n"
    );
    (toml, cedar)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

/// Times `f` `n` times, one by one.
fn time_each(n: usize, mut f: impl FnMut(), out: &mut Vec<Duration>) {
    for _ in 0..n {
        let start = Instant::now();
        f();
        out.push(start.elapsed());
    }
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
    }
}

/// A call of one tool, ready to decide.
struct Bench<'a> {
    tool: &'a BenchTool,
    spec: ToolSpec,
    args: Value,
    counts: cordon_agent::cordon_policy::Counts,
}

fn decision_times(samples: usize) -> usize {
    let tools: Vec<BenchTool> = (0..50)
        .map(|i| {
            let plugin = i / 5;
            let shape = Shape::of(i + plugin);
            BenchTool {
                plugin: PLUGINS[plugin].to_string(),
                tool: format!("{}_{}", shape.stem(), i % 5),
                shape,
            }
        })
        .collect();
    let specs: Vec<ToolSpec> = tools
        .iter()
        .enumerate()
        .map(|(i, t)| t.spec(i / 5))
        .collect();
    let facts: Vec<_> = specs.iter().map(ToolSpec::facts).collect();
    // Today's per-tool rules: a few `[approval]` entries, none of which denies the tools timed.
    let approval = "[approval.tools]\nquery_3 = \"auto\"\n\"web.fetch_2\" = \"ask\"\n\"ops.deploy_1\" = \"ask\"\nsearch_4 = \"auto\"\n\
                    [approval.plugins]\nkb = \"ask\"\nmail = \"ask\"\n\n";
    let caller = Caller {
        origin: "serve".into(),
        token: "ops".into(),
        user: String::new(),
        client: String::new(),
    };
    let session = SessionFacts {
        approved: BTreeSet::from(["sql.query_1".to_string()]),
        labels: BTreeSet::new(),
    };
    let answers = BTreeMap::new();
    let standing = Standing {
        answers: &answers,
        requester: None,
        labels: &Default::default(),
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    println!(
        "Per-call policy decision (50 tools, rules drawn with Zipf weights over them; {samples} decisions per row, rounds alternated):"
    );
    println!(
        "  {:>6} {:>10}  {:<16} {:>6}  {:>10} {:>10}  {:>10} {:>10}  {:>7}",
        "rules", "load", "tool", "rules", "p50", "p99", "today p50", "today p99", "p50 ×"
    );
    let mut hot_share = 0;
    for n in [10, 100, 1_000] {
        let (toml, cedar) = policy_text(n, &tools, false, approval);
        let path = dir.path().join(format!("cordon-{n}.toml"));
        std::fs::write(&path, &toml).expect("write the config");
        std::fs::write(dir.path().join("bench.cedar"), &cedar).expect("write the Cedar file");
        let config = AgentConfig::load(&path, true).expect("the generated config parses");
        let mut loads = Vec::new();
        let mut policy = None;
        for _ in 0..5 {
            let start = Instant::now();
            let p = Policy::load(&config.policy, &facts)
                .unwrap_or_else(|e| panic!("the {n}-rule policy loads: {e}"));
            loads.push(start.elapsed());
            policy = Some(p);
        }
        let policy = policy.expect("loaded");
        loads.sort();
        let load = loads[loads.len() / 2];
        assert_eq!(policy.len(), n, "every rule and Cedar policy is counted");

        // The tool with the most rules and the one with the fewest.
        let by_rules: Vec<(usize, &BenchTool)> = tools
            .iter()
            .map(|t| (policy.rules_for(&t.identity()).len(), t))
            .collect();
        let hot = by_rules.iter().max_by_key(|(c, _)| *c).expect("tools");
        let cold = by_rules.iter().min_by_key(|(c, _)| *c).expect("tools");
        if n == 1_000 {
            hot_share = hot.0;
        }
        let scope = CountScope {
            session: "s1",
            caller: ("ops", ""),
        };
        let mut cases: Vec<(usize, Bench<'_>)> = [hot, cold]
            .iter()
            .map(|(count, t)| {
                let i = tools
                    .iter()
                    .position(|x| x.identity() == t.identity())
                    .expect("a tool");
                let counts = policy
                    .counters_for(&t.identity(), scope, MONDAY_MORNING)
                    .into_iter()
                    .flat_map(|q| q.names.to_vec())
                    .map(|name| (name, 3))
                    .collect();
                (
                    *count,
                    Bench {
                        tool: t,
                        spec: specs[i].clone(),
                        args: t.shape.call_args(),
                        counts,
                    },
                )
            })
            .collect();

        let decide = |b: &Bench<'_>| {
            let identity = b.tool.identity();
            let verdict = policy.decide(&Call {
                tool: &identity,
                args: &b.args,
                caller: &caller,
                session: &session,
                counts: &b.counts,
                now_ms: MONDAY_MORNING,
                reach: None,
            });
            std::hint::black_box(approval::decide(
                &config.approval,
                standing,
                &b.spec,
                Some(&verdict),
            ))
        };
        let today = |b: &Bench<'_>| {
            std::hint::black_box(approval::decide(&config.approval, standing, &b.spec, None))
        };
        for (_, b) in &cases {
            for _ in 0..1_000 {
                decide(b);
                today(b);
            }
        }
        let rounds = 10;
        let per_round = (samples / rounds).max(1);
        let mut times: Vec<(Vec<Duration>, Vec<Duration>)> =
            cases.iter().map(|_| (Vec::new(), Vec::new())).collect();
        for _ in 0..rounds {
            for ((_, b), (with, without)) in cases.iter().zip(times.iter_mut()) {
                time_each(per_round, || drop(today(b)), without);
                time_each(per_round, || drop(decide(b)), with);
            }
        }
        let mut measured = Vec::new();
        for ((count, b), (with, without)) in cases.drain(..).zip(times) {
            let (w, o) = (stats(with), stats(without));
            println!(
                "  {:>6} {:>10}  {:<16} {:>6}  {:>10} {:>10}  {:>10} {:>10}  {:>6.1}×",
                n,
                format!("{:.1} ms", load.as_secs_f64() * 1e3),
                b.tool.identity(),
                count,
                micros(w.p50),
                micros(w.p99),
                micros(o.p50),
                micros(o.p99),
                w.p50.as_secs_f64() / o.p50.as_secs_f64()
            );
            measured.push((count, w.p50));
        }
        let [(hot_n, hot_t), (cold_n, cold_t)] = [measured[0], measured[1]];
        if hot_n > cold_n {
            let per_rule = (hot_t.as_secs_f64() - cold_t.as_secs_f64()) / (hot_n - cold_n) as f64;
            let fixed = cold_t.as_secs_f64() - per_rule * cold_n as f64;
            println!(
                "  {:>6} from these two: about {:.2} µs a decision plus {:.0} ns a rule of the tool's (p50)",
                "",
                fixed * 1e6,
                per_rule * 1e9
            );
        }
    }
    println!("  target: ≤ 10 µs p50 with 1,000 rules");
    hot_share
}

/// `cordon mcp` on `home` with `config`, as a connected client.
async fn connect_cordon(bin: &Path, home: &Path, config: &Path) -> Client {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("--home")
        .arg(home)
        .arg("mcp")
        .arg("--config")
        .arg(config)
        .current_dir(home)
        .env_remove("CORDON_CONFIG")
        .env_remove("CORDON_STORE");
    connect(cmd).await
}

async fn call_cost(bin: &Path, noop: &Path, n: usize, hot_share: usize, baseline: Option<&Path>) {
    let dir = tempfile::tempdir().expect("temporary home");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home directory");
    cordon(
        bin,
        &home,
        &["plugin", "install", noop.to_str().expect("path")],
    );
    let noop_tool = [BenchTool {
        plugin: "noop".into(),
        tool: "noop".into(),
        shape: Shape::NoArgs,
    }];
    let none = home.join("none.toml");
    std::fs::write(&none, "").expect("write the config");
    let mut configs = vec![("no policy".to_string(), none)];
    for rules in [1_000, hot_share] {
        let sub = home.join(format!("policy-{rules}"));
        std::fs::create_dir_all(&sub).expect("a directory");
        let (toml, cedar) = policy_text(rules, &noop_tool, true, "");
        std::fs::write(sub.join("cordon.toml"), toml).expect("write the config");
        std::fs::write(sub.join("bench.cedar"), cedar).expect("write the Cedar file");
        configs.push((
            format!("{rules} rules, all on noop.noop"),
            sub.join("cordon.toml"),
        ));
    }
    let mut clients = Vec::new();
    let mut pids = Vec::new();
    for (_, config) in &configs {
        let before = child_pids();
        clients.push(connect_cordon(bin, &home, config).await);
        pids.push(child_pids().difference(&before).next().copied());
    }
    // Another build of cordon on the same home and configs, interleaved in the same rounds:
    // what a change costs every call, measured against the code before it.
    if let Some(other) = baseline {
        for i in 0..configs.len() {
            let (name, config) = configs[i].clone();
            let before = child_pids();
            clients.push(connect_cordon(other, &home, &config).await);
            pids.push(child_pids().difference(&before).next().copied());
            configs.push((format!("{name}, baseline build"), config));
        }
    }
    for client in &clients {
        calls(client, 100).await;
    }
    if EDITED.load(std::sync::atomic::Ordering::Relaxed) {
        // As a user edits cordon.toml while the servers run: each picks up the file's new
        // text on its next call and decides with it from then on.
        for (_, config) in &configs {
            let mut text = std::fs::read_to_string(config).expect("read the config");
            text.push_str("\n# edited while the server runs\n");
            std::fs::write(config, text).expect("edit the config");
        }
        for client in &clients {
            calls(client, 100).await;
        }
    }
    let cpu_before: Vec<Option<Duration>> = pids.iter().map(|p| p.and_then(cpu_of)).collect();
    let mut times: Vec<Vec<Duration>> = clients.iter().map(|_| Vec::new()).collect();
    // Short rounds (of 100 calls, and at least 10 rounds): the machine's drift over seconds
    // falls on every server alike.
    let rounds = (n / 100).max(10).min(n.max(1));
    for _ in 0..rounds {
        for (client, t) in clients.iter().zip(times.iter_mut()) {
            t.extend(calls(client, n / rounds).await);
        }
    }
    // Each server's CPU per call: less disturbed than the wall time by whatever else the
    // machine runs.
    let cpu: Vec<Option<Duration>> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| Some((p.and_then(cpu_of)? - (*before)?) / (n / rounds * rounds) as u32))
        .collect();
    for client in clients {
        let _ = client.cancel().await;
    }
    println!(
        "A tool call's total cost: MCP over stdio, no-op tools/call through cordon mcp ({n} calls each, rounds alternated; median wall time, and the server's CPU per call):"
    );
    let medians: Vec<Duration> = times
        .into_iter()
        .map(|v| {
            let s = stats(v);
            s.p50
        })
        .collect();
    // The baseline build's servers are compared with its own no-policy server.
    let own = configs.len() / if baseline.is_some() { 2 } else { 1 };
    for (i, (((name, _), m), c)) in configs.iter().zip(&medians).zip(&cpu).enumerate() {
        let base = if i < own { 0 } else { own };
        let cpu = match (c, cpu[base]) {
            (Some(c), Some(base)) => format!(
                "   CPU {:>10}   {:.3}×",
                micros(*c),
                c.as_secs_f64() / base.as_secs_f64()
            ),
            _ => String::new(),
        };
        println!(
            "  {:<46} {:>12}   {:.3}× no policy{cpu}",
            name,
            micros(*m),
            m.as_secs_f64() / medians[base].as_secs_f64()
        );
    }
    println!("  target: ≤ 1.05× with 1,000 rules");
}

/// This process's children (the MCP servers it started), from `/proc`.
fn child_pids() -> BTreeSet<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // After the command's name in parentheses: state, then the parent's id.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(me)
            })
        })
        .collect()
}

/// The CPU time `pid` used so far, all its threads, from the scheduler's nanosecond counts.
fn cpu_of(pid: u32) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns = 0u64;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    let noop = file_arg(&args, "--noop", "target/fixtures/noop.wasm");
    let samples = number(&args, "--samples", 20_000).max(100);
    let n = number(&args, "--calls", 2_000).max(10);
    if args.iter().any(|a| a == "--no-counters") {
        NO_COUNTERS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if args.iter().any(|a| a == "--edited") {
        EDITED.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    if args.iter().any(|a| a == "--labels-only") {
        rule_of_two_costs(samples);
        return;
    }
    // `--hot-share N` skips part 1, taking N for the busiest tool's share of its rules.
    let hot_share = match arg(&args, "--hot-share").and_then(|n| n.parse().ok()) {
        Some(n) => n,
        None => tokio::task::spawn_blocking(move || decision_times(samples))
            .await
            .expect("the decision benchmark"),
    };
    if !args.iter().any(|a| a == "--decisions-only") {
        let baseline = arg(&args, "--baseline-cordon").map(std::path::PathBuf::from);
        call_cost(&bin, &noop, n, hot_share, baseline.as_deref()).await;
    }
    rule_of_two_costs(samples);
}

/// Part 3: what the session labels add to a decision, and what recording a result's labels
/// costs.
fn rule_of_two_costs(samples: usize) {
    use cordon_core::{Exposure, Grants, SessionLabels};
    let grants = |list: &[&str]| -> Grants { list.iter().map(|g| g.parse().unwrap()).collect() };
    let config = AgentConfig::default();
    let mut fetch = BenchTool {
        plugin: "web".into(),
        tool: "fetch".into(),
        shape: Shape::Http,
    }
    .spec(0);
    fetch.exposure = Exposure::of(&grants(&["net:https://example.com", "env:TOKEN"]));
    let read = Exposure::of(&grants(&[
        "fs:/home/ann/docs:/docs:ro",
        "fs:/srv:/srv:ro:public",
    ]));
    let mut both = SessionLabels::default();
    both.saw("web.fetch", &fetch.exposure);
    both.saw("files.read_file", &read);
    let mut one = SessionLabels::default();
    one.saw("web.fetch", &fetch.exposure);
    let answers = BTreeMap::new();
    let decide = |labels: &SessionLabels| {
        let standing = Standing {
            answers: &answers,
            requester: None,
            labels,
        };
        std::hint::black_box(approval::decide(&config.approval, standing, &fetch, None))
    };
    let baseline = cordon_core::labels::NO_LABELS.clone();
    let rounds = 10;
    let per_round = (samples / rounds).max(1);
    let (mut held, mut clean, mut plain, mut saw) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        time_each(per_round, || drop(decide(&baseline)), &mut plain);
        time_each(per_round, || drop(decide(&one)), &mut clean);
        time_each(per_round, || drop(decide(&both)), &mut held);
        let mut session = both.clone();
        time_each(
            per_round,
            || session.saw("files.read_file", std::hint::black_box(&read)),
            &mut saw,
        );
    }
    let (plain, clean, held, saw) = (stats(plain), stats(clean), stats(held), stats(saw));
    println!("The Rule of Two ({samples} of each, rounds alternated):");
    println!(
        "  decision, no labels (the baseline)        p50 {:>9}  p99 {:>9}",
        micros(plain.p50),
        micros(plain.p99)
    );
    println!(
        "  decision, a session with one label        p50 {:>9}  p99 {:>9}",
        micros(clean.p50),
        micros(clean.p99)
    );
    println!(
        "  decision, held back by both labels        p50 {:>9}  p99 {:>9}",
        micros(held.p50),
        micros(held.p99)
    );
    println!(
        "  recording a result's labels               p50 {:>9}  p99 {:>9}",
        micros(saw.p50),
        micros(saw.p99)
    );
    println!("  target: ≤ 1 µs p50 per call");
}
