//! A result too long for the model: `cordon run` with the real `sql` plugin over a table of
//! 20,000 rows; the model is sent a preview of the query's result and finds one row with the
//! built-in `read_result`, which is offered only once there is something to page.

use cordon_scripted_llm::Step;
use serde_json::json;

use crate::model::{Model, call};
use cordon_tests::support::{grant_fs, home_with, install};

/// What the model was sent of the query `q1`: a preview, well within the budget.
fn preview_of(model: &Model) -> String {
    let preview = model.result(1, "q1");
    assert!(
        preview.starts_with("[This result of `sql_query` is ") && preview.len() < 40_000,
        "{} bytes: {}",
        preview.len(),
        &preview[..preview.len().min(300)]
    );
    preview
}

#[test]
fn the_model_pages_a_long_result_to_the_row_it_needs() {
    let home = home_with(&["sql"]);
    let data = home.scratch("data");
    let script = "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n\
                  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)\n\
                  INSERT INTO items SELECT i, 'item-' || i FROM n;";
    cordon_tests::support::sqlite(&data.join("big.db"), script);
    install(
        &home,
        "sql",
        &[grant_fs(&data, "/data", "ro")],
        &["output=4MiB"],
    );
    let model = Model::new(vec![
        Step::tool_calls(vec![call(
            "q1",
            "sql_query",
            json!({"database": "/data/big.db", "sql": "SELECT id, name FROM items ORDER BY id",
                   "max_rows": 10000, "max_bytes": 4 << 20}),
        )]),
        Step::tool_calls(vec![call(
            "p1",
            "read_result",
            json!({"call_id": "q1", "pattern": "\"item-4321\""}),
        )]),
        Step::text("Item 4321 is there."),
    ]);
    let cwd = home.scratch("cwd");
    let run = home
        .cordon_at(
            Some(&cwd),
            &["run", "Is item 4321 in the table?"],
            "",
            &[
                ("CORDON_LLM_URL", &model.url()),
                ("CORDON_MODEL", "scripted"),
            ],
        )
        .ok();
    assert!(run.stdout.contains("Item 4321 is there."), "{}", run.stdout);
    let requests = model.server.requests();
    // Nothing to page yet: the pager is not offered.
    assert!(
        !requests[0]
            .tool_names()
            .contains(&"read_result".to_string())
    );
    let preview = preview_of(&model);
    assert!(!preview.contains("item-4321"), "the row was sent whole");
    assert!(
        requests[1]
            .tool_names()
            .contains(&"read_result".to_string())
    );
    let found = model.result(2, "p1");
    assert!(
        found.contains("4321") && found.contains("\"item-4321\"") && found.starts_with("offset "),
        "{found}"
    );
    // The pager's calls are audited like any call, as the built-in `cordon.read_result`.
    let paged = home.audit_of("cordon.read_result");
    assert_eq!(paged.len(), 1, "{paged:?}");
    assert_eq!(paged[0]["decision"], "auto", "{}", paged[0]);
}

/// What the store keeps apart from the conversation: (results, parts, bytes).
fn kept_in(home: &cordon_tests::TestHome) -> (u64, u64, u64) {
    let db = home.path().join("sessions.db");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
             print(*c.execute('SELECT count(DISTINCT id), count(*), coalesce(sum(length(body)),0) \
             FROM kept_results').fetchone())",
            db.to_str().unwrap(),
        ])
        .output()
        .expect("python3 reads the store");
    let text = String::from_utf8_lossy(&out.stdout);
    let n: Vec<u64> = text
        .split_whitespace()
        .map(|w| {
            w.parse()
                .unwrap_or_else(|_| panic!("{text} {}", String::from_utf8_lossy(&out.stderr)))
        })
        .collect();
    (n[0], n[1], n[2])
}

/// 50 MB of rows: the `sql` plugin writes them one at a time, the host keeps them in the
/// session's store in parts as they come (never whole in memory), and the model pages through
/// the preview to the one row it needs. The host's peak memory stays within 32 MiB of what
/// the same question over a small result takes (the result is never held whole).
#[test]
fn fifty_megabytes_of_rows_are_kept_in_the_store_and_paged_to_one_row() {
    let home = home_with(&["sql"]);
    let data = home.scratch("data");
    let script = "CREATE TABLE rows(id INTEGER PRIMARY KEY, name TEXT NOT NULL, pad TEXT NOT NULL);\n\
                  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 480000)\n\
                  INSERT INTO rows SELECT i, 'row-' || i, printf('%080d', i) FROM n;";
    cordon_tests::support::sqlite(&data.join("big.db"), script);
    // The default limits: an output limit of 64 MiB.
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    let ask = |sql: &str, then: Vec<Step>| {
        let mut steps = vec![Step::tool_calls(vec![call(
            "q1",
            "sql_query",
            json!({"database": "/data/big.db", "sql": sql,
                   "max_rows": 1_000_000, "max_bytes": 60 << 20}),
        )])];
        steps.extend(then);
        Model::new(steps)
    };
    let cwd = home.scratch("cwd");
    // A session: the result is kept in its store.
    let run = |model: &Model, session: &str| {
        home.cordon_measured(
            Some(&cwd),
            &[
                "run",
                "--session",
                session,
                "What is the pad of row 424242?",
            ],
            &[
                ("CORDON_LLM_URL", &model.url()),
                ("CORDON_MODEL", "scripted"),
            ],
        )
    };
    // The same question over one row: the host's memory without a large result.
    let small = ask(
        "SELECT id, name, pad FROM rows WHERE id = 424242",
        vec![Step::text("Found it.")],
    );
    let (done, baseline) = run(&small, "small");
    done.ok();
    let model = ask(
        "SELECT id, name, pad FROM rows ORDER BY id",
        vec![
            // Line 1 opens the object; row N is on line N + 1.
            Step::tool_calls(vec![call(
                "p1",
                "read_result",
                json!({"call_id": "q1", "from_line": 424_243, "lines": 2}),
            )]),
            Step::tool_calls(vec![call(
                "p2",
                "read_result",
                json!({"call_id": "q1", "pattern": "\"row-479999\""}),
            )]),
            Step::text("Row 424242's pad ends in 424242."),
        ],
    );
    let (done, peak) = run(&model, "large");
    let done = done.ok();
    assert!(done.stdout.contains("ends in 424242"), "{}", done.stdout);
    let preview = preview_of(&model);
    let bytes: u64 = preview["[This result of `sql_query` is ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(bytes > 50_000_000, "{preview}");
    assert!(preview.contains("480002 lines"), "{}", &preview[..300]);
    let page = model.result(2, "p1");
    assert!(
        page.starts_with("424243: [424242,\"row-424242\",\"") && page.contains("424244: [424243,"),
        "{page}"
    );
    let found = model.result(3, "p2");
    assert!(found.contains("(line 480000)"), "{found}");
    // Kept in the store, in parts, apart from the conversation.
    let (results, parts, kept) = kept_in(&home);
    assert_eq!(results, 1);
    assert!(
        parts >= 48 && kept == bytes,
        "{parts} parts, {kept} bytes of {bytes}"
    );
    // The issue asks for under 128 MiB above idle; holding the result whole even once would
    // pass 50 MiB above, so the bound is tighter than that.
    assert!(
        peak < baseline + 32 * 1024,
        "peak {peak} KiB with the 50 MB result, {baseline} KiB without"
    );
    eprintln!("peak RSS: {peak} KiB with a {bytes}-byte result, {baseline} KiB with one row");
}
