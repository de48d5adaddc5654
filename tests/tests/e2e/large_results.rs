//! A result too long for the model: `cordon run` with the real `sql` plugin over a table of
//! 20,000 rows; the model is sent a preview of the query's result and finds one row with the
//! built-in `read_result`, which is offered only once there is something to page.

use cordon_scripted_llm::Step;
use serde_json::json;

use crate::model::{Model, call};
use cordon_tests::support::{grant_fs, home_with, install};

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
    let preview = model.result(1, "q1");
    assert!(
        preview.starts_with("[This result of `sql_query` is ") && preview.len() < 40_000,
        "{} bytes: {}",
        preview.len(),
        &preview[..preview.len().min(300)]
    );
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
