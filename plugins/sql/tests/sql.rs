//! The `sql` tools run natively against databases the tests create, through the same
//! `Plugin::call` entry point the component exports.

use cordon_plugin_sql::plugin;
use cordon_sdk::{Content, ToolError};
use rusqlite::Connection;
use serde_json::{Value, json};
use tempfile::TempDir;

fn call(tool: &str, args: Value) -> Result<Value, ToolError> {
    let out = plugin().call(tool, &args.to_string())?;
    let [Content::Json(text)] = out.as_slice() else {
        panic!("expected one JSON piece, got {out:?}")
    };
    Ok(serde_json::from_str(text).unwrap())
}

/// A shop database: customers (3), orders (250, indexed), a view, and a blob column.
fn shop(dir: &TempDir) -> String {
    let path = dir.path().join("shop.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE, avatar BLOB);
         CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                              total REAL DEFAULT 0, note TEXT);
         CREATE INDEX orders_by_customer ON orders(customer_id);
         CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 100;
         INSERT INTO customers VALUES (1, 'Ada', 'ada@example.com', x'00ff10'),
                                      (2, 'Grace', 'grace@example.com', NULL),
                                      (3, 'Linus', NULL, NULL);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 250)
         INSERT INTO orders (customer_id, total, note) SELECT i % 3 + 1, i * 1.5, 'order ' || i FROM n;",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn err_of(r: Result<Value, ToolError>) -> ToolError {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e,
    }
}

#[test]
fn plugin_is_well_formed_and_hints_are_truthful() {
    let p = plugin();
    p.check().unwrap();
    let d = p.descriptors();
    let by = |n: &str| d.iter().find(|t| t.name == n).unwrap().clone();
    assert!(by("sql_schema").hints.read_only && by("sql_query").hints.read_only);
    let exec = by("sql_execute");
    assert!(!exec.hints.read_only && exec.hints.destructive);
    let schema: Value = serde_json::from_str(&by("sql_query").input_schema).unwrap();
    assert_eq!(schema["required"], json!(["database", "sql"]));
    for field in ["database", "sql", "params", "max_rows"] {
        assert!(
            schema["properties"][field]["description"].is_string(),
            "{field}: {schema}"
        );
    }
}

#[test]
fn schema_lists_tables_columns_indexes_and_counts() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let s = call("sql_schema", json!({ "database": db })).unwrap();
    assert_eq!(s["tables_total"], 3);
    let tables = s["tables"].as_array().unwrap();
    let orders = tables.iter().find(|t| t["name"] == "orders").unwrap();
    assert_eq!(orders["rows"], 250);
    assert_eq!(
        orders["columns"][2],
        json!({"name": "total", "type": "REAL", "default": "0"})
    );
    assert_eq!(orders["indexes"][0]["name"], "orders_by_customer");
    assert_eq!(orders["indexes"][0]["columns"], json!(["customer_id"]));
    assert_eq!(orders["foreign_keys"][0]["references_table"], "customers");
    let customers = tables.iter().find(|t| t["name"] == "customers").unwrap();
    assert_eq!(customers["rows"], 3);
    assert_eq!(customers["columns"][0]["primary_key"], true);
    assert_eq!(customers["columns"][1]["not_null"], true);
    let view = tables.iter().find(|t| t["name"] == "big_orders").unwrap();
    assert_eq!(view["type"], "view");
    assert!(view.get("rows").is_none());
}

#[test]
fn schema_filter_matches_table_and_column_names() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let s = call("sql_schema", json!({ "database": db, "filter": "EMAIL" })).unwrap();
    let names: Vec<&str> = s["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["customers"]);
    let s = call(
        "sql_schema",
        json!({ "database": db, "filter": "big, nothing" }),
    )
    .unwrap();
    assert_eq!(s["tables"].as_array().unwrap().len(), 1);
    let s = call("sql_schema", json!({ "database": db, "filter": "zzz" })).unwrap();
    assert!(s["note"].as_str().unwrap().contains("without `filter`"));
}

#[test]
fn query_returns_columns_rows_and_json_types() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT id, name, email, avatar, 2.5 AS x FROM customers ORDER BY id" }),
    )
    .unwrap();
    assert_eq!(r["columns"], json!(["id", "name", "email", "avatar", "x"]));
    assert_eq!(
        r["rows"][0],
        json!([1, "Ada", "ada@example.com", {"blob_hex": "00ff10", "bytes": 3}, 2.5])
    );
    assert_eq!(r["rows"][2], json!([3, "Linus", null, null, 2.5]));
    assert_eq!(r["row_count"], 3);
    assert_eq!(r["truncated"], false);
}

#[test]
fn query_binds_positional_and_named_params() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT name FROM customers WHERE id = ? OR name = ?", "params": [2, "Linus"] }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([["Grace"], ["Linus"]]));
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT count(*) FROM orders WHERE customer_id = :c AND total > @min",
                "params": { "c": 1, "@min": 300 } }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[17]]));
    // An injection attempt through a parameter is just a string.
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT count(*) FROM customers WHERE name = ?", "params": ["x' OR '1'='1"] }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[0]]));
}

#[test]
fn param_mistakes_are_invalid_arguments() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT ? + ?", "params": [1] }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("2 placeholder")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT ?" }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("no `params`")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT :a", "params": {"b": 1} }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("`b`") && m.contains(":a")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT :a, :b", "params": {"a": 1} }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains(":b")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT 1", "max_rows": 0 }),
    ));
    assert!(matches!(e, ToolError::InvalidArguments(_)));
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT 1", "max_rows": 2_000_000 }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("1000000")),
        "{e:?}"
    );
}

#[test]
fn row_cap_truncates_and_says_so() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT id FROM orders ORDER BY id", "max_rows": 10 }),
    )
    .unwrap();
    assert_eq!(r["row_count"], 10);
    assert_eq!(r["rows"][9], json!([10]));
    assert_eq!(r["truncated"], true);
    assert_eq!(r["truncated_by"], "max_rows");
    // Exactly at the cap is not truncated.
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT id FROM customers", "max_rows": 3 }),
    )
    .unwrap();
    assert_eq!(r["truncated"], false);
    // Default cap is 200.
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT id FROM orders" }),
    )
    .unwrap();
    assert_eq!(r["row_count"], 200);
    assert_eq!(r["truncated"], true);
}

#[test]
fn byte_cap_truncates_and_says_so() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT note FROM orders", "max_rows": 1000, "max_bytes": 200 }),
    )
    .unwrap();
    let text = r["rows"].to_string();
    assert!(text.len() <= 200, "{text}");
    assert!(r["row_count"].as_u64().unwrap() >= 5);
    assert_eq!(r["truncated_by"], "max_bytes");
}

#[test]
fn writes_are_refused_by_sqlite_in_sql_query() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let before = std::fs::read(&db).unwrap();
    for sql in [
        "INSERT INTO customers (name) VALUES ('Mallory')",
        "DELETE FROM orders",
        "PRAGMA user_version = 7",
        "CREATE TEMP TABLE t (x)",
        "DROP TABLE orders",
        // Writes hidden in a CTE or behind a comment are still writes to SQLite.
        "/* SELECT */ UPDATE customers SET name = 'x'",
        "WITH x AS (SELECT 1) DELETE FROM orders",
    ] {
        let e = err_of(call("sql_query", json!({ "database": db, "sql": sql })));
        assert!(
            matches!(&e, ToolError::Denied(m) if m.contains("sql_execute")),
            "{sql}: {e:?}"
        );
    }
    // Reads that merely look like writes pass.
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT 'DELETE FROM orders' AS s" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([["DELETE FROM orders"]]));
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "PRAGMA user_version" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[0]]));
    assert_eq!(before, std::fs::read(&db).unwrap());
    // ATTACH would reach another file: disabled.
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "ATTACH 'other.db' AS o" }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("too many attached")),
        "{e:?}"
    );
}

#[test]
fn sqlite_errors_keep_sqlites_message() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELEC 1" }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("syntax error")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT * FROM nope" }),
    ));
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("no such table: nope")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT nope FROM orders" }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("no such column: nope")),
        "{e:?}"
    );
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT 1; SELECT 2" }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("more than one statement")),
        "{e:?}"
    );
    let e = err_of(call("sql_query", json!({ "database": db, "sql": "  " })));
    assert!(matches!(e, ToolError::InvalidArguments(_)));
}

#[test]
fn bad_database_paths_are_clear() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("missing.db");
    let e = err_of(call(
        "sql_query",
        json!({ "database": missing, "sql": "SELECT 1" }),
    ));
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("missing.db")),
        "{e:?}"
    );
    assert!(!missing.exists(), "a read must never create the file");
    let e = err_of(call("sql_schema", json!({ "database": dir.path() })));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("directory")),
        "{e:?}"
    );
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just some text that is long enough to look odd",
    )
    .unwrap();
    let e = err_of(call("sql_schema", json!({ "database": text })));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("not a")),
        "{e:?}"
    );
    let e = err_of(call("sql_schema", json!({ "database": "" })));
    assert!(matches!(e, ToolError::InvalidArguments(_)));
    let e = err_of(call("sql_schema", json!({ "db": "x" })));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("db")),
        "{e:?}"
    );
}

#[test]
fn odd_characters_in_the_path_are_not_uri_syntax() {
    let dir = TempDir::new().unwrap();
    let sub = dir.path().join("a?b#c%20d");
    std::fs::create_dir(&sub).unwrap();
    let db = sub.join("x.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (42);")
        .unwrap();
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT x FROM t" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[42]]));
}

/// A WAL database with changes only in the -wal file: reading it immutable would silently
/// miss them, so the tool must say so; after a checkpoint it answers with current data.
#[test]
fn wal_with_uncheckpointed_changes_is_reported() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let writer = Connection::open(&db).unwrap();
    let mode: String = writer
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    writer
        .execute_batch(
            "PRAGMA wal_autocheckpoint = 0; INSERT INTO customers (name) VALUES ('Wally');",
        )
        .unwrap();
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT count(*) FROM customers" }),
    ));
    assert!(
        matches!(&e, ToolError::Failed(m) if m.contains("WAL") && m.contains("wal_checkpoint")),
        "{e:?}"
    );
    let e = err_of(call("sql_schema", json!({ "database": db })));
    assert!(matches!(e, ToolError::Failed(_)));
    // A passive checkpoint copies everything back but keeps the -wal file: now current.
    writer
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .unwrap();
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT count(*) FROM customers" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[4]]));
    // New un-checkpointed changes are caught again.
    writer
        .execute("INSERT INTO customers (name) VALUES ('Wendy')", [])
        .unwrap();
    assert!(matches!(
        call("sql_query", json!({ "database": db, "sql": "SELECT 1" })),
        Err(ToolError::Failed(_))
    ));
    writer
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT count(*) FROM customers" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[5]]));
    // Writing a WAL database needs shared memory the sandbox lacks: refused clearly.
    let e = err_of(call(
        "sql_execute",
        json!({ "database": db, "sql": "DELETE FROM orders" }),
    ));
    assert!(
        matches!(&e, ToolError::Failed(m) if m.contains("journal_mode=DELETE")),
        "{e:?}"
    );
}

#[test]
fn hot_rollback_journal_is_reported() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    std::fs::write(format!("{db}-journal"), vec![1u8; 512]).unwrap();
    let e = err_of(call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT 1" }),
    ));
    assert!(
        matches!(&e, ToolError::Failed(m) if m.contains("journal")),
        "{e:?}"
    );
}

#[test]
fn execute_writes_with_params_and_reports_changes() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let r = call(
        "sql_execute",
        json!({ "database": db, "sql": "INSERT INTO customers (name, email) VALUES (?, ?)", "params": ["Hedy", "hedy@example.com"] }),
    )
    .unwrap();
    assert_eq!(r["changes"], 1);
    assert_eq!(r["last_insert_rowid"], 4);
    let r = call("sql_execute", json!({ "database": db, "sql": "UPDATE orders SET note = NULL WHERE customer_id = :c", "params": {"c": 2} })).unwrap();
    assert_eq!(r["changes"], 84);
    let r = call(
        "sql_execute",
        json!({ "database": db, "sql": "DELETE FROM customers WHERE id = 4 RETURNING name" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([["Hedy"]]));
    assert_eq!(r["changes"], 1);
    let n: i64 = Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM orders WHERE note IS NULL", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(n, 84);
}

#[test]
fn execute_script_is_all_or_nothing() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let r = call(
        "sql_execute",
        json!({ "database": db, "sql": "CREATE TABLE tags (name TEXT); INSERT INTO tags VALUES ('a'), ('b'); -- done" }),
    )
    .unwrap();
    assert_eq!(r["statements"], 2);
    assert_eq!(r["changes"], 2);
    let e = err_of(call(
        "sql_execute",
        json!({ "database": db, "sql": "INSERT INTO tags VALUES ('c'); INSERT INTO nope VALUES (1)" }),
    ));
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("no such table: nope")),
        "{e:?}"
    );
    let n: i64 = Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM tags", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2, "the failed script must leave nothing behind");
    let e = err_of(call(
        "sql_execute",
        json!({ "database": db, "sql": "INSERT INTO tags VALUES (?)" }),
    ));
    assert!(matches!(e, ToolError::InvalidArguments(_)));
    let e = err_of(call(
        "sql_execute",
        json!({ "database": db, "sql": "-- nothing" }),
    ));
    assert!(matches!(e, ToolError::InvalidArguments(_)));
}

#[test]
fn execute_creates_only_when_asked() {
    let dir = TempDir::new().unwrap();
    let db = dir.path().join("new.db");
    let e = err_of(call(
        "sql_execute",
        json!({ "database": db, "sql": "CREATE TABLE t (x)" }),
    ));
    assert!(matches!(e, ToolError::NotFound(_)), "{e:?}");
    assert!(!db.exists());
    call("sql_execute", json!({ "database": db, "sql": "CREATE TABLE t (x); INSERT INTO t VALUES (1)", "create": true })).unwrap();
    let r = call(
        "sql_query",
        json!({ "database": db, "sql": "SELECT x FROM t" }),
    )
    .unwrap();
    assert_eq!(r["rows"], json!([[1]]));
}

#[test]
fn sqlite_constraint_errors_come_back_with_the_message() {
    let dir = TempDir::new().unwrap();
    let db = shop(&dir);
    let e = err_of(call(
        "sql_execute",
        json!({ "database": db, "sql": "INSERT INTO customers (id, name) VALUES (1, 'dup')" }),
    ));
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("UNIQUE constraint failed")),
        "{e:?}"
    );
}
