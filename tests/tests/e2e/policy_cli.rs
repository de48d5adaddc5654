//! `cordon policy test | explain` and the rules `plugin inspect` shows, with the worked example
//! of docs/examples/policy (its cordon.toml and Cedar file) against the real `sql` and `files`
//! plugins, granted a directory seen as /data read-write as the example says.

use std::path::{Path, PathBuf};

use cordon_tests::support::{grant_fs, home_with, install, json_of};
use cordon_tests::{Run, TestHome, workspace_root};
use serde_json::{Value, json};

const PLUGINS: &[&str] = &["sql", "files"];

/// A home with `sql` and `files` both granted `db` as /data read-write, and the worked
/// example copied into a `config` directory beside it (cordon.toml and team.cedar).
fn example_home() -> (TestHome, PathBuf) {
    let home = home_with(PLUGINS);
    let db = home.scratch("db");
    install(&home, "sql", &[grant_fs(&db, "/data", "rw")], &[]);
    install(&home, "files", &[grant_fs(&db, "/data", "rw")], &[]);
    let config = home.scratch("config");
    let example = workspace_root().join("docs/examples/policy");
    for file in ["cordon.toml", "team.cedar"] {
        std::fs::copy(example.join(file), config.join(file)).unwrap();
    }
    (home, config)
}

/// The line of the rule `id` in the worked example's cordon.toml, as found in the text.
fn line_of(config: &Path, id: &str) -> usize {
    line_in(&config.join("cordon.toml"), &format!("id = \"{id}\""))
}

/// The line of the first `needle` in `file`.
fn line_in(file: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("no {needle} in {}", file.display()));
    text[..at].matches('\n').count() + 1
}

/// Where the example's rule `id` is, as a policy found as ./cordon.toml names it.
fn place(config: &Path, id: &str) -> String {
    format!("cordon.toml:{}", line_of(config, id))
}

/// Where the example's Cedar policy is.
fn cedar_place(config: &Path) -> String {
    format!(
        "team.cedar:{}",
        line_in(&config.join("team.cedar"), "@id(\"gateway-sql-asks\")")
    )
}

/// `cordon policy explain` with the example's config, from the config's directory (where it
/// is found as ./cordon.toml).
fn explain(home: &TestHome, config: &Path, args: &[&str]) -> Run {
    let mut all = vec!["policy", "explain"];
    all.extend_from_slice(args);
    home.cordon_in(config, &all)
}

fn explain_json(home: &TestHome, config: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    json_of(&explain(home, config, &all).ok())
}

/// Each rule of a JSON explanation as (id, applies).
fn applied(out: &Value) -> Vec<(String, bool)> {
    out["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["applies"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn sql(statement: &str) -> String {
    json!({"database": "/data/shop.db", "sql": statement}).to_string()
}

#[test]
fn policy_test_runs_the_examples_and_lists_every_rule_with_its_place_and_the_digest() {
    let (home, config) = example_home();
    let file = config.join("cordon.toml");
    let run = home
        .cordon(&["policy", "test", "--config", file.to_str().unwrap()])
        .ok()
        .stdout_has(&[
            "4 rules, 11 examples, all pass",
            &format!("orders ({}:{})", file.display(), line_of(&config, "orders")),
            "allow: adding orders is routine",
            "examples: 2 match, 3 not_match: pass",
            &format!(
                "no-drop ({}:{})",
                file.display(),
                line_of(&config, "no-drop")
            ),
            "deny: nothing is dropped here",
            &format!(
                "reports ({}:{})",
                file.display(),
                line_of(&config, "reports")
            ),
            "tools: files.read_file",
            &format!("gateway-sql-asks ({})", cedar_place(&config)),
            "ask: SQL changes through the gateway are confirmed by a human",
            "examples: none (a Cedar policy has none",
            "digest: sha256:",
        ]);
    // Found as ./cordon.toml too, with the same rules and digest, also as JSON.
    let out = json_of(&home.cordon_in(&config, &["policy", "test", "--json"]).ok());
    let ids: Vec<&str> = out["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["orders", "no-drop", "reports", "gateway-sql-asks"]);
    assert_eq!(out["config"], json!("./cordon.toml"));
    assert_eq!(out["rules"][0]["tools"], json!(["sql.sql_execute"]));
    assert_eq!(
        out["rules"][0]["examples"],
        json!({"match": 2, "not_match": 3})
    );
    assert_eq!(out["rules"][3]["decision"], json!("ask"));
    let digest = out["digest"].as_str().unwrap();
    assert!(
        run.stdout.contains(&format!("digest: {digest}")),
        "{digest}"
    );
    assert_eq!(out["tools"], json!(7), "{out}");
}

#[test]
fn a_broken_example_and_a_misspelled_argument_fail_naming_the_rule_and_its_line() {
    let (home, config) = example_home();
    let file = config.join("cordon.toml");
    let original = std::fs::read_to_string(&file).unwrap();

    // Without the anchors, `orders` also matches `INSERT INTO orders_archive`, which its first
    // not_match example says it must not.
    let unanchored = original.replace(
        r"'^(?i)\s*insert\s+into\s+orders\b[^;]*;?\s*$'",
        r"'^(?i)\s*insert\s+into\s+orders'",
    );
    assert_ne!(unanchored, original);
    std::fs::write(&file, &unanchored).unwrap();
    home.cordon_in(&config, &["policy", "test"])
        .code(2)
        .stderr_has(&[
            &format!("policy rule `orders` ({})", place(&config, "orders")),
            "example not_match[0]",
            "INSERT INTO orders_archive",
            "the rule applies",
        ]);
    // explain refuses a broken policy the same way.
    explain(&home, &config, &["sql_execute", &sql("SELECT 1")])
        .code(2)
        .stderr_has(&["policy rule `orders`", "not_match[0]"]);
    // plugin inspect still inspects, and says why no rules are shown.
    home.cordon_in(&config, &["plugin", "inspect", "sql"])
        .ok()
        .stdout_has(&["sql_execute", "approval: ask"])
        .stderr_has(&["warning: no policy rules are shown", "policy rule `orders`"]);

    let misspelled = original.replace(
        "args = { path = { path = \"/data/reports/**\" } }",
        "args = { pth = { path = \"/data/reports/**\" } }",
    );
    assert_ne!(misspelled, original);
    std::fs::write(&file, &misspelled).unwrap();
    home.cordon_in(&config, &["policy", "test"])
        .code(2)
        .stderr_has(&[
            &format!("policy rule `reports` ({})", place(&config, "reports")),
            "has no argument `pth`",
            "did you mean `path`",
        ]);

    // A Cedar policy naming an argument the tool lacks: the file and line of the policy.
    std::fs::write(&file, &original).unwrap();
    let cedar = config.join("team.cedar");
    let team = std::fs::read_to_string(&cedar).unwrap();
    std::fs::write(
        &cedar,
        team.replace(
            "context.caller.origin == \"gateway\"",
            "context.input.databse == \"x\"",
        ),
    )
    .unwrap();
    home.cordon_in(&config, &["policy", "test"])
        .code(2)
        .stderr_has(&["gateway-sql-asks", &cedar_place(&config), "databse"]);
}

#[test]
fn explain_gives_allow_deny_and_the_default_for_sql_and_names_the_deciding_rule() {
    let (home, config) = example_home();
    let orders = place(&config, "orders");
    let no_drop = place(&config, "no-drop");

    let insert = sql("INSERT INTO orders (region, cents) VALUES ('east', 1200)");
    explain(&home, &config, &["sql.sql_execute", &insert])
        .ok()
        .stdout_has(&[
            &format!("decision: allow, by rule `orders` ({orders}): adding orders is routine"),
            &format!("applies  allow  `orders` ({orders})"),
            &format!("-        deny   `no-drop` ({no_drop})"),
            &format!("-        ask    `gateway-sql-asks` ({})", cedar_place(&config)),
            "grant-derived default: ask (asks before each call): the tool declares itself destructive",
            "digest: sha256:",
        ]);
    let out = explain_json(&home, &config, &["sql_execute", &insert]);
    assert_eq!(out["tool"], json!("sql.sql_execute"));
    assert_eq!(out["decision"], json!("allow"));
    assert_eq!(out["decided_by"], json!("rule"));
    assert_eq!(out["rule"]["id"], json!("orders"));
    assert_eq!(out["rule"]["source"], json!(orders));
    assert_eq!(out["default"]["decision"], json!("ask"));
    assert_eq!(
        applied(&out),
        [
            ("orders".to_string(), true),
            ("no-drop".to_string(), false),
            ("gateway-sql-asks".to_string(), false)
        ]
    );
    let test = json_of(&home.cordon_in(&config, &["policy", "test", "--json"]).ok());
    assert_eq!(out["digest"], test["digest"]);

    // Any DROP is denied, even behind an INSERT.
    let drop = sql("INSERT INTO orders VALUES (1, 'east', 5); DROP TABLE orders");
    explain(&home, &config, &["sql_execute", &drop])
        .ok()
        .stdout_has(&[&format!(
            "decision: deny, by rule `no-drop` ({no_drop}): nothing is dropped here"
        )]);
    let out = explain_json(&home, &config, &["sql_execute", &drop]);
    assert_eq!(out["decision"], json!("deny"));
    assert_eq!(out["rule"]["id"], json!("no-drop"));
    assert_eq!(
        applied(&out)
            .into_iter()
            .filter(|(_, a)| *a)
            .collect::<Vec<_>>(),
        [("no-drop".to_string(), true)]
    );

    // Anything else: no rule applies, and the grant-derived default asks.
    let update = sql("UPDATE orders SET cents = 0");
    explain(&home, &config, &["sql_execute", &update])
        .ok()
        .stdout_has(&["decision: ask (no rule applies: the grant-derived default decides)"]);
    let out = explain_json(&home, &config, &["sql_execute", &update]);
    assert_eq!(out["decision"], json!("ask"));
    assert_eq!(out["decided_by"], json!("default"));
    assert_eq!(out["rule"], Value::Null);
    assert!(applied(&out).iter().all(|(_, a)| !a), "{out}");

    // The same INSERT through the gateway: the team's Cedar rule asks, and ask beats allow.
    let out = explain_json(
        &home,
        &config,
        &[
            "sql_execute",
            &insert,
            "--origin",
            "gateway",
            "--user",
            "bob",
        ],
    );
    assert_eq!(out["decision"], json!("ask"));
    assert_eq!(out["rule"]["id"], json!("gateway-sql-asks"));
    assert_eq!(out["rule"]["source"], json!(cedar_place(&config)));
    assert_eq!(out["caller"]["user"], json!("bob"));
    assert_eq!(
        applied(&out),
        [
            ("orders".to_string(), true),
            ("no-drop".to_string(), false),
            ("gateway-sql-asks".to_string(), true)
        ]
    );
}

#[test]
fn explain_allows_reports_and_leaves_other_paths_and_climbs_out_of_reports_to_the_default() {
    let (home, config) = example_home();
    let reports = place(&config, "reports");
    let read = |path: &str| json!({ "path": path }).to_string();

    explain(
        &home,
        &config,
        &["read_file", &read("/data/reports/2026/q3.csv")],
    )
    .ok()
    .stdout_has(&[&format!(
        "decision: allow, by rule `reports` ({reports}): reports are meant to be read"
    )]);
    for path in ["/data/hr/salaries.csv", "/data/reports/../hr/x.csv"] {
        explain(&home, &config, &["files.read_file", &read(path)])
            .ok()
            .stdout_has(&[
                "decision: ask (no rule applies: the grant-derived default decides)",
                &format!("-        allow  `reports` ({reports})"),
                "grant-derived default: ask (asks before each call): its grants allow changing something",
            ]);
        let out = explain_json(&home, &config, &["read_file", &read(path)]);
        assert_eq!(out["decision"], json!("ask"), "{path}");
        assert_eq!(out["decided_by"], json!("default"), "{path}");
        assert_eq!(applied(&out), [("reports".to_string(), false)], "{path}");
    }
    let out = explain_json(
        &home,
        &config,
        &["read_file", &read("//data/./reports//q3.csv")],
    );
    assert_eq!(out["decision"], json!("allow"));
    assert_eq!(out["tool"], json!("files.read_file"));

    // plugin inspect shows, per tool, the rules that may apply to it.
    let run = home
        .cordon_in(&config, &["plugin", "inspect", "files"])
        .ok();
    let read_file = run.stdout.split("  read_file\n").nth(1).unwrap();
    assert!(
        read_file.contains(&format!(
            "allow `reports` ({reports}): reports are meant to be read"
        )),
        "{}",
        run.stdout
    );
    let list_dir = run.stdout.split("  list_dir\n").nth(1).unwrap();
    let list_dir = list_dir.split("input schema").next().unwrap();
    assert!(
        list_dir.contains("policy: no rule may apply"),
        "{}",
        run.stdout
    );
}

#[test]
fn explain_names_what_is_wrong_with_the_tool_the_arguments_and_the_options() {
    let (home, config) = example_home();
    let fails = |args: &[&str], needles: &[&str]| {
        explain(&home, &config, args).code(2).stderr_has(needles);
    };
    fails(
        &["sql_execute", "{\"sql\": DROP}"],
        &["the arguments are not JSON", "single quotes"],
    );
    fails(
        &["sql_execute", "[1]"],
        &["the arguments must be a JSON object"],
    );
    fails(
        &[
            "sql_execute",
            r#"{"database": "/data/shop.db", "sqll": "x"}"#,
        ],
        &["do not fit the input schema of `sql.sql_execute`"],
    );
    fails(
        &["sql_exec", "{}"],
        &["no installed tool is named `sql_exec`", "sql.sql_execute"],
    );
    fails(
        &[
            "read_file",
            &json!({"path": "/data/x"}).to_string(),
            "--approved",
            "sql.sql_exec",
        ],
        &["--approved `sql.sql_exec`"],
    );
    fails(
        &[
            "read_file",
            &json!({"path": "/data/x"}).to_string(),
            "--count",
            "calls=3",
        ],
        &["the policy has no counter `calls`", "its counters: none"],
    );
    fails(
        &[
            "read_file",
            &json!({"path": "/data/x"}).to_string(),
            "--at",
            "noon",
        ],
        &["--at: `noon` is not a local time"],
    );
    // A tool name two plugins share must be named with its plugin.
    let wasm = cordon_tests::support::plugin_wasm("files");
    home.cordon(&[
        "plugin",
        "install",
        wasm.to_str().unwrap(),
        "--name",
        "files2",
        "--yes",
    ])
    .ok();
    fails(
        &["read_file", &json!({"path": "/data/x"}).to_string()],
        &[
            "`read_file` is a tool of several plugins",
            "files.read_file",
            "files2.read_file",
        ],
    );
    explain(
        &home,
        &config,
        &[
            "files2.read_file",
            &json!({"path": "/data/reports/a"}).to_string(),
        ],
    )
    .ok()
    .stdout_has(&[
        "rules of files2.read_file: none",
        "grant-derived default: allow",
    ]);
}

#[test]
fn explain_takes_counts_times_and_callers_from_the_command_line() {
    let (home, _) = example_home();
    let config = home.scratch("counted");
    std::fs::write(
        config.join("cordon.toml"),
        r#"[policy]
timezone = "Europe/Berlin"
rules = [
  { id = "too-many", tool = "sql.sql_execute", calls = { of = "tool", within = "1h", at_least = 20 }, decision = "ask", reason = "more than 20 writes an hour" },
  { id = "office", tool = "sql.sql_query", hours = "09:00-17:00", days = "mon-fri", decision = "allow" },
  { id = "ci", tool = "sql.sql_query", token = "ci", not_approved = "sql.sql_schema", decision = "deny", reason = "look at the schema first" },
]
"#,
    )
    .unwrap();
    let query = sql("SELECT 1");
    let write = sql("DELETE FROM orders");
    let decided = |args: &[&str]| {
        let out = explain_json(&home, &config, args);
        (
            out["decision"].as_str().unwrap().to_string(),
            out["rule"]["id"].as_str().map(str::to_string),
        )
    };
    let by = |d: &str, rule: Option<&str>| (d.to_string(), rule.map(str::to_string));
    assert_eq!(
        decided(&["sql_execute", &write, "--count", "rule:too-many=20"]),
        by("ask", Some("too-many"))
    );
    assert_eq!(
        decided(&["sql_execute", &write, "--count", "rule:too-many=19"]),
        by("ask", None),
        "below the count, the default (ask) decides"
    );
    // The count of another tool's rule is not one this tool's rules read.
    explain(
        &home,
        &config,
        &["sql_query", &query, "--count", "rule:too-many=3"],
    )
    .code(2)
    .stderr_has(&["no counter `rule:too-many`"]);
    // 08:30 and 10:00 in Berlin on a Monday; 10:00 on a Saturday.
    assert_eq!(
        decided(&["sql_query", &query, "--at", "2026-11-30T08:30"]),
        by("ask", None)
    );
    assert_eq!(
        decided(&["sql_query", &query, "--at", "2026-11-30T10:00"]),
        by("allow", Some("office"))
    );
    assert_eq!(
        decided(&["sql_query", &query, "--at", "2026-12-05T10:00"]),
        by("ask", None)
    );
    let monday = ["--at", "2026-11-30T10:00"];
    let mut as_ci = vec!["sql_query", query.as_str(), "--as", "ci"];
    as_ci.extend(monday);
    assert_eq!(decided(&as_ci), by("deny", Some("ci")));
    as_ci.extend(["--approved", "sql.sql_schema"]);
    assert_eq!(decided(&as_ci), by("allow", Some("office")));
    explain(&home, &config, &as_ci).ok().stdout_has(&[
        "from cli, token `ci`, approved earlier: sql.sql_schema, at 2026-11-30T10:00 Europe/Berlin",
    ]);
}
