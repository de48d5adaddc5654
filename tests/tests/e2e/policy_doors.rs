//! The per-call `[policy]` through each door that drives the model: `cordon run` (the terminal
//! commands) and `cordon serve`'s gateway, with the real `sql` plugin granted a database
//! read-write, the scripted model making the calls, and the store keeping the counters.
//! (MCP's door is tested with the MCP SDK in tests/mcp.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_scripted_llm::Step;
use serde_json::json;

use crate::model::{Model, call};
use cordon_tests::serve::{Served, eventually};
use cordon_tests::support::{grant_fs, home_with, install, sqlite};
use cordon_tests::{Run, TestHome};

const SHOP: &str = "CREATE TABLE products(sku TEXT PRIMARY KEY, name TEXT, price_cents INTEGER);
INSERT INTO products VALUES ('A1','anvil',1250),('B2','bucket',399),('C3','crowbar',2100);";

/// Inserts into `products` run unasked, once an hour; a `DROP` is denied; the gateway may
/// not write at all; everything else is left to the grant-derived default (ask).
const POLICY: &str = r#"
[policy]
rules = [
  { id = "add-products", tool = "sql.sql_execute", args = { sql = { regex = "^(?i)\\s*insert\\s+into\\s+products\\b[^;]*;?\\s*$" } }, decision = "allow", reason = "adding products is routine",
    match = [{ args = { database = "/data/shop.db", sql = "INSERT INTO products VALUES ('D4','drill',5000)" } }],
    not_match = [{ args = { database = "/data/shop.db", sql = "INSERT INTO products VALUES (1); DELETE FROM products" } }] },
  { id = "no-drop", tool = "sql.sql_execute", args = { sql = { regex = "(?i)\\bdrop\\b" } }, decision = "deny", reason = "nothing is dropped" },
  { id = "hourly", tool = "sql.sql_execute", calls = { of = "rule:add-products", within = "1h", at_least = 1 }, decision = "ask", reason = "one insert an hour runs unasked" },
  { id = "gateway-reads", origin = "gateway", tool = "sql.sql_execute", decision = "deny", reason = "gateway clients only read" },
]
"#;

/// A home with `sql` read-write on a shop database seen as /data, and the policy above in
/// `cordon.toml`.
fn shop() -> (TestHome, PathBuf, PathBuf) {
    let home = home_with(&["sql"]);
    let data = home.scratch("data");
    sqlite(&data.join("shop.db"), SHOP);
    install(&home, "sql", &[grant_fs(&data, "/data", "rw")], &[]);
    let config = home.scratch("cfg").join("cordon.toml");
    std::fs::write(&config, POLICY).unwrap();
    (home, data, config)
}

fn count(db: &Path) -> i64 {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys;print(sqlite3.connect(sys.argv[1]).execute('select count(*) from products').fetchone()[0])",
            db.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The calls the store counts under `counter`, all minutes.
fn counted(home: &TestHome, counter: &str) -> i64 {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys;print(sqlite3.connect(sys.argv[1]).execute('select coalesce(sum(calls),0) from call_counts where counter = ?', (sys.argv[2],)).fetchone()[0])",
            home.path().join("sessions.db").to_str().unwrap(),
            counter,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn run(home: &TestHome, model: &Model, config: &Path, message: &str) -> Run {
    let cwd = home.scratch("cwd");
    home.cordon_at(
        Some(&cwd),
        &["run", message, "--config", config.to_str().unwrap()],
        "",
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
    )
}

fn sql(id: &str, statement: &str) -> cordon_scripted_llm::ScriptedCall {
    call(
        id,
        "sql_execute",
        json!({"database": "/data/shop.db", "sql": statement}),
    )
}

#[test]
fn cordon_run_decides_each_call_by_its_statement_and_counts_in_the_store() {
    let (home, data, config) = shop();
    let model = Model::new(vec![
        Step::tool_calls(vec![
            sql("c1", "INSERT INTO products VALUES ('D4','drill',5000)"),
            sql("c2", "DROP TABLE products"),
            sql("c3", "UPDATE products SET price_cents = 1"),
        ]),
        Step::text("done"),
    ]);
    run(&home, &model, &config, "Add a drill").ok();
    assert_eq!(count(&data.join("shop.db")), 4, "the insert ran unasked");
    // Each call was reserved on the counter before it was decided; the insert that ran is
    // counted once, the denied and the asked ones were taken back.
    assert_eq!(counted(&home, "rule:add-products"), 1);
    let dropped = model.result(1, "c2");
    assert!(
        dropped.contains("policy rule `no-drop`") && dropped.contains("nothing is dropped"),
        "{dropped}"
    );
    // The update is left to the default, which asks; with no terminal nobody can answer.
    let updated = model.result(1, "c3");
    assert!(updated.contains("no one was asked"), "{updated}");
    let records = home.audit_of("sql_execute");
    let by_call = |id: &str| {
        records
            .iter()
            .find(|r| r["call_id"].as_str().is_some_and(|c| c.ends_with(id)))
            .unwrap_or_else(|| panic!("no record of {id}: {records:?}"))
            .clone()
    };
    let cfg = config.display().to_string();
    let inserted = by_call("c1");
    assert_eq!(inserted["decision"], "auto", "{inserted}");
    assert_eq!(inserted["policy_rule"], format!("add-products ({cfg}:4)"));
    let digest = inserted["policy_digest"].as_str().unwrap();
    assert!(digest.starts_with("sha256:"), "{inserted}");
    let refused = by_call("c2");
    assert_eq!(refused["decision"], "deny");
    assert_eq!(refused["policy_rule"], format!("no-drop ({cfg}:7)"));
    assert_eq!(refused["policy_digest"], digest);

    // A second process: the store still holds the hour's insert, so the next one is asked
    // (and, with no terminal, not run).
    let model = Model::new(vec![
        Step::tool_calls(vec![sql(
            "c1",
            "INSERT INTO products VALUES ('E5','easel',700)",
        )]),
        Step::text("done"),
    ]);
    run(&home, &model, &config, "Add an easel").ok();
    assert_eq!(
        count(&data.join("shop.db")),
        4,
        "the second insert ran unasked"
    );
    let asked = model.result(1, "c1");
    assert!(asked.contains("no one was asked"), "{asked}");
    assert_eq!(counted(&home, "rule:add-products"), 1);
    let hourly = format!("hourly ({cfg}:8)");
    assert!(
        home.audit_of("sql_execute")
            .iter()
            .any(|r| r["policy_rule"] == hourly.as_str() && r["decision"] == "refused"),
        "no refused call names {hourly}"
    );
}

#[test]
fn a_policy_that_does_not_load_stops_the_command_and_names_the_rule() {
    let (home, _, config) = shop();
    std::fs::write(
        &config,
        "[policy]\nrules = [{ id = \"typo\", tool = \"sql.sql_execute\", args = { sqll = \"x\" }, decision = \"deny\" }]\n",
    )
    .unwrap();
    let model = Model::new(vec![Step::text("never asked")]);
    let r = run(&home, &model, &config, "hi").code(2);
    assert!(
        r.stderr.contains("policy rule `typo`")
            && r.stderr.contains("has no argument `sqll`")
            && r.stderr.contains("did you mean `sql`"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_gateway_is_its_own_origin_and_an_edited_policy_applies_without_a_restart() {
    let (home, data, config) = shop();
    let model = Model::new(vec![
        Step::tool_calls(vec![sql(
            "g1",
            "INSERT INTO products VALUES ('D4','drill',5000)",
        )]),
        Step::text("Not allowed here."),
        Step::tool_calls(vec![sql(
            "g2",
            "INSERT INTO products VALUES ('D4','drill',5000)",
        )]),
        Step::text("Added."),
    ]);
    let served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &["--config", config.to_str().unwrap()],
    );
    let ask = |text: &str| {
        served.post(
            "/v1/chat/completions",
            json!({"model": "scripted", "messages": [{"role": "user", "content": text}]}),
        )
    };
    // The tools the console lists carry the rules that may apply to them.
    let tools = served.get("/api/v1/tools").json;
    let execute = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == "sql_execute")
        .unwrap()
        .clone();
    let ids: Vec<&str> = execute["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["add-products", "no-drop", "hourly", "gateway-reads"]);
    assert_eq!(
        execute["rules"][1]["source"],
        format!("{}:7", config.display())
    );
    let a = ask("Add a drill");
    assert_eq!(a.status, 200, "{}", a.text);
    let denied = model.result(1, "g1");
    assert!(
        denied.contains("policy rule `gateway-reads`")
            && denied.contains("gateway clients only read"),
        "{denied}"
    );
    assert_eq!(count(&data.join("shop.db")), 3);

    // The operator drops the gateway rule; the running host uses the new text at once.
    let edited: String = POLICY
        .lines()
        .filter(|l| !l.contains("gateway-reads"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&config, edited).unwrap();
    let a = ask("Add a drill");
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(count(&data.join("shop.db")), 4, "the insert ran unasked");
    drop(served);
}

#[test]
fn over_the_api_a_rule_asks_every_time_even_after_always() {
    let (home, data, config) = shop();
    let text = POLICY.replacen(
        "rules = [\n",
        "rules = [\n  { id = \"deletes\", origin = \"serve\", tool = \"sql.sql_execute\", args = { sql = { prefix = \"DELETE\" } }, decision = \"ask\", reason = \"deletes are checked every time\" },\n",
        1,
    );
    std::fs::write(&config, text).unwrap();
    let model = Model::new(vec![
        Step::tool_calls(vec![sql(
            "u1",
            "UPDATE products SET price_cents = 1 WHERE sku = 'A1'",
        )]),
        Step::tool_calls(vec![sql("d1", "DELETE FROM products WHERE sku = 'B2'")]),
        Step::text("done"),
    ]);
    let served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &["--config", config.to_str().unwrap()],
    );
    let created = served.post("/api/v1/sessions", json!({"id": "shop"}));
    assert_eq!(created.status, 201, "{}", created.text);
    let events = served.stream("/api/v1/sessions/shop/messages", json!({"text": "tidy up"}));
    // The update is asked by default; answered `always` for the tool.
    let first = served.pending("shop");
    // (sql_execute declares itself destructive, so the default asks.)
    assert!(
        !first["reason"].as_str().unwrap().contains("policy rule"),
        "{first}"
    );
    served.answer(&first, "always");
    // The delete is asked all the same, with the rule's reason.
    let second = eventually(Duration::from_secs(60), "the second question", || {
        let p = served.pending("shop");
        (p["call_id"] != first["call_id"]).then_some(p)
    });
    let reason = second["reason"].as_str().unwrap();
    assert!(
        reason.contains("policy rule `deletes`") && reason.contains("checked every time"),
        "{reason}"
    );
    served.answer(&second, "no");
    events.until("turn_finished", Duration::from_secs(60));
    assert_eq!(count(&data.join("shop.db")), 3, "the declined delete ran");
    drop(served);
}

#[test]
fn an_allow_rule_never_widens_a_grant() {
    let home = home_with(&["files"]);
    let data = home.scratch("data");
    std::fs::write(data.join("ok.txt"), "fine").unwrap();
    let outside = home.scratch("outside");
    std::fs::write(outside.join("secret.txt"), "hunter2").unwrap();
    install(&home, "files", &[grant_fs(&data, "/data", "rw")], &[]);
    let config = home.scratch("cfg").join("cordon.toml");
    std::fs::write(
        &config,
        "[policy]\nrules = [{ id = \"anything\", tool = \"files.read_file\", decision = \"allow\" }]\n",
    )
    .unwrap();
    let secret = outside.join("secret.txt").display().to_string();
    let model = Model::new(vec![
        Step::tool_calls(vec![call("r1", "read_file", json!({ "path": secret }))]),
        Step::text("done"),
    ]);
    run(&home, &model, &config, "read it").ok();
    let result = model.result(1, "r1");
    assert!(!result.contains("hunter2"), "{result}");
    assert!(result.starts_with("Error"), "{result}");
    let records = home.audit_of("read_file");
    assert_eq!(records[0]["decision"], "auto", "{records:?}");
    assert!(
        records[0]["policy_rule"]
            .as_str()
            .unwrap()
            .starts_with("anything (")
    );
}

/// Counters live in the store: two `cordon serve` hosts, each with its own home, sharing one
/// PostgreSQL store share them, so the insert one host ran unasked makes the other ask.
#[test]
fn two_hosts_on_one_postgresql_store_share_their_counters() {
    let url = cordon_tests::postgres::shared().database();
    let (home_a, data_a, config_a) = shop();
    let (home_b, data_b, config_b) = shop();
    let model = Model::new(vec![
        Step::tool_calls(vec![sql(
            "a1",
            "INSERT INTO products VALUES ('D4','drill',5000)",
        )]),
        Step::text("added"),
        Step::tool_calls(vec![sql(
            "b1",
            "INSERT INTO products VALUES ('E5','easel',700)",
        )]),
        Step::text("asked"),
    ]);
    let model_url = model.url();
    let start = |home: &TestHome, config: &Path, name: &str| {
        Served::start(
            home,
            &[
                ("CORDON_LLM_URL", &model_url),
                ("CORDON_MODEL", "scripted"),
                ("CORDON_HOST_NAME", name),
            ],
            &["--config", config.to_str().unwrap(), "--store", &url],
        )
    };
    let a = start(&home_a, &config_a, "host-a");
    let b = start(&home_b, &config_b, "host-b");

    let created = a.post("/api/v1/sessions", json!({"id": "on-a"}));
    assert_eq!(created.status, 201, "{}", created.text);
    a.stream(
        "/api/v1/sessions/on-a/messages",
        json!({"text": "add a drill"}),
    )
    .until("turn_finished", Duration::from_secs(60));
    assert_eq!(
        count(&data_a.join("shop.db")),
        4,
        "host A's insert ran unasked"
    );

    // Host B has run nothing, but the store counted host A's insert: B's is asked.
    let created = b.post("/api/v1/sessions", json!({"id": "on-b"}));
    assert_eq!(created.status, 201, "{}", created.text);
    let events = b.stream(
        "/api/v1/sessions/on-b/messages",
        json!({"text": "add an easel"}),
    );
    let asked = b.pending("on-b");
    let reason = asked["reason"].as_str().unwrap();
    assert!(
        reason.contains("policy rule `hourly`") && reason.contains("one insert an hour"),
        "{reason}"
    );
    b.answer(&asked, "no");
    events.until("turn_finished", Duration::from_secs(60));
    assert_eq!(
        count(&data_b.join("shop.db")),
        3,
        "host B's declined insert ran"
    );
    drop((a, b));
}
