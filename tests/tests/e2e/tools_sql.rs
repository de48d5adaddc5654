//! The bundled `sql` tools (`sql_schema`, `sql_query`, `sql_execute`) end to end through
//! `cordon call`, against SQLite databases the tests create with python3's sqlite3 module:
//! schema and filter, parameters, row and byte caps, read-only refusals (SQLite's own check
//! and the read-only grant), writes under a read-write grant, SQLite's error messages, paths
//! outside the grants, a WAL database with changes not yet checkpointed, and blobs, texts and
//! integers that must sort and group in Rust's order (SQLite in the component uses the tool's
//! own memcmp/memcpy and calls its sorter's usual comparators directly).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use cordon_tests::{Run, TestHome, file_digest};
use serde_json::{Value, json};

use cordon_tests::support::{self, grant_fs, home_with, install, json_of};

const PLUGINS: &[&str] = &["sql"];

/// A shop database: customers, orders (with a foreign key), products, an index and a view.
const SHOP: &str = "
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE products(sku TEXT PRIMARY KEY, title TEXT NOT NULL, price_cents INTEGER NOT NULL DEFAULT 0);
CREATE TABLE orders(
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  sku TEXT REFERENCES products(sku),
  quantity INTEGER NOT NULL
);
CREATE INDEX orders_by_customer ON orders(customer_id);
CREATE VIEW big_orders AS SELECT * FROM orders WHERE quantity >= 5;
INSERT INTO customers VALUES (1, 'Ada', 'London'), (2, 'Bob', 'Paris'), (3, 'Chloé', NULL);
INSERT INTO products VALUES ('A1', 'Anvil', 4999), ('B2', 'Bucket', 350);
INSERT INTO orders VALUES (1, 1, 'A1', 1), (2, 1, 'B2', 7), (3, 2, 'B2', 2), (4, 3, 'A1', 5);
";

/// A home with `sql` installed and `data` granted as `/data` in `mode`, and the shop database.
fn shop(mode: &str) -> (TestHome, PathBuf) {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    support::sqlite(&data.join("shop.db"), SHOP);
    install(&home, "sql", &[grant_fs(&data, "/data", mode)], &[]);
    (home, data)
}

/// Runs a call and checks that its output names no host path of the test.
fn call(home: &TestHome, tool: &str, args: Value) -> Run {
    let run = home.cordon(&["call", tool, &args.to_string()]);
    let host = home.path().parent().unwrap().display().to_string();
    assert!(
        !run.stdout.contains(&host) && !run.stderr.contains(&host),
        "`{}` revealed the host path {host}:\n{}\n{}",
        run.command,
        run.stdout,
        run.stderr
    );
    run
}

/// Every row `sql` returns from `database` (up to the tool's upper bounds), which must not be
/// truncated.
fn all_rows(home: &TestHome, database: &str, sql: &str) -> Vec<Value> {
    let out = json_of(
        &call(
            home,
            "sql_query",
            json!({"database": database, "sql": sql, "max_rows": 10_000, "max_bytes": 4 << 20}),
        )
        .ok(),
    );
    assert_eq!(out["truncated"], json!(false), "{sql}");
    out["rows"].as_array().unwrap().clone()
}

/// A fixed pseudo-random sequence (a 64-bit linear congruential generator's states) for test
/// data that is the same on every run.
fn pseudo_random(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state
    }
}

fn names(tables: &Value) -> Vec<&str> {
    tables
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

#[test]
fn schema_lists_tables_views_keys_and_counts_and_filter_narrows_it() {
    let (home, _) = shop("ro");
    let schema = json_of(&call(&home, "sql_schema", json!({"database": "/data/shop.db"})).ok());
    assert_eq!(schema["database"], json!("/data/shop.db"));
    assert_eq!(schema["tables_total"], json!(4), "{schema:#}");
    assert_eq!(
        names(&schema["tables"]),
        ["customers", "orders", "products", "big_orders"],
        "{schema:#}"
    );
    let tables = schema["tables"].as_array().unwrap();
    let orders = &tables[1];
    assert_eq!(orders["rows"], json!(4), "{orders:#}");
    assert_eq!(orders["type"], json!("table"));
    // SQLite lists foreign keys in its own order (newest first); compare as a set.
    let mut keys = orders["foreign_keys"]
        .as_array()
        .expect("foreign_keys")
        .clone();
    keys.sort_by_key(|k| k["column"].to_string());
    assert_eq!(
        keys,
        [
            json!({"column": "customer_id", "references_table": "customers", "references_column": "id"}),
            json!({"column": "sku", "references_table": "products", "references_column": "sku"})
        ],
        "{orders:#}"
    );
    assert_eq!(
        orders["indexes"][0]["name"],
        json!("orders_by_customer"),
        "{orders:#}"
    );
    assert_eq!(
        orders["indexes"][0]["columns"],
        json!(["customer_id"]),
        "{orders:#}"
    );
    assert_eq!(
        tables[2]["columns"][2],
        json!({"name": "price_cents", "type": "INTEGER", "not_null": true, "default": "0"}),
        "{:#}",
        tables[2]
    );
    assert_eq!(tables[0]["rows"], json!(3));
    assert_eq!(tables[3]["type"], json!("view"));

    // Words match table and column names, case-insensitively.
    let filtered = json_of(
        &call(
            &home,
            "sql_schema",
            json!({"database": "/data/shop.db", "filter": "PRICE"}),
        )
        .ok(),
    );
    assert_eq!(names(&filtered["tables"]), ["products"], "{filtered:#}");
    assert_eq!(filtered["tables_total"], json!(4));
    let filtered = json_of(
        &call(
            &home,
            "sql_schema",
            json!({"database": "/data/shop.db", "filter": "city quantity"}),
        )
        .ok(),
    );
    assert_eq!(
        names(&filtered["tables"]),
        ["customers", "orders", "big_orders"],
        "{filtered:#}"
    );
    let none = json_of(
        &call(
            &home,
            "sql_schema",
            json!({"database": "/data/shop.db", "filter": "zebra"}),
        )
        .ok(),
    );
    assert_eq!(none["tables"], json!([]));
    assert!(
        none["note"].as_str().unwrap().contains("filter"),
        "{none:#}"
    );
}

#[test]
fn query_binds_params_and_returns_columns_and_rows() {
    let (home, _) = shop("ro");
    let q = |sql: &str, params: Value| {
        json_of(
            &call(
                &home,
                "sql_query",
                json!({"database": "/data/shop.db", "sql": sql, "params": params}),
            )
            .ok(),
        )
    };
    let out = q(
        "SELECT c.name, sum(o.quantity * p.price_cents) AS spent FROM orders o \
         JOIN customers c ON c.id = o.customer_id JOIN products p ON p.sku = o.sku \
         WHERE o.quantity >= ? GROUP BY c.name ORDER BY c.name",
        json!([2]),
    );
    assert_eq!(out["columns"], json!(["name", "spent"]), "{out:#}");
    assert_eq!(
        out["rows"],
        json!([["Ada", 2450], ["Bob", 700], ["Chloé", 24995]]),
        "{out:#}"
    );
    assert_eq!(out["row_count"], json!(3));
    assert_eq!(out["truncated"], json!(false));

    // Named parameters, with or without the prefix; a quote in a value is just data.
    let out = q(
        "SELECT id, city FROM customers WHERE name = :name OR name = @other ORDER BY id",
        json!({"name": "Bob", "@other": "x' OR '1'='1"}),
    );
    assert_eq!(out["rows"], json!([[2, "Paris"]]), "{out:#}");
    let out = q("SELECT city FROM customers WHERE id = ?", json!([3]));
    assert_eq!(out["rows"], json!([[null]]), "{out:#}");

    // A wrong number of values is the caller's mistake, said plainly.
    call(
        &home,
        "sql_query",
        json!({"database": "/data/shop.db", "sql": "SELECT ?, ?", "params": [1]}),
    )
    .code(1)
    .stderr_has(&["2 placeholder(s)", "1 value(s)"]);
}

/// Sorts larger than SQLite keeps in one run spill to temp files, and a sandbox under a
/// read-only grant has nowhere on disk to put them: they must still work, exactly.
#[test]
fn large_sorts_work_in_the_sandbox_under_a_read_only_grant() {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    support::sqlite(
        &data.join("big.db"),
        "CREATE TABLE items (id INTEGER PRIMARY KEY, category TEXT, pad TEXT);
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 79999)
         INSERT INTO items SELECT i, 'cat' || (i % 23), hex(randomblob(24)) FROM n;",
    );
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    let out = json_of(
        &call(
            &home,
            "sql_query",
            json!({"database": "/data/big.db", "max_rows": 100,
                   "sql": "SELECT category, count(*), length(max(pad)) FROM items \
                           GROUP BY category ORDER BY count(*) DESC, category"}),
        )
        .ok(),
    );
    let rows = out["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 23, "{out:#}");
    // 80,000 rows over 23 categories: cat0..cat5 have one row more than the rest.
    assert_eq!(rows[0], json!(["cat0", 3479, 48]), "{out:#}");
    assert_eq!(rows[22], json!(["cat9", 3478, 48]), "{out:#}");
    let total: i64 = rows.iter().map(|r| r[1].as_i64().unwrap()).sum();
    assert_eq!(total, 80_000);
    // Nothing was written next to the database.
    let names: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["big.db"]);
}

/// SQLite in the component compares and moves keys with the `sql` tool's own `memcmp` and
/// `memcpy` (inlined at SQLite's call sites, with separate paths for 1-3, 4-7, 8-16 and
/// longer lengths). Blobs of every length up to 40 bytes, sharing long prefixes and using
/// bytes with the high bit set, must sort and group exactly as Rust orders byte strings (which
/// is SQLite's blob order: bytes compared unsigned, then the shorter first).
#[test]
fn sorting_and_grouping_blobs_of_every_length_match_byte_order() {
    // A fixed pseudo-random sequence: keys drawn from few byte values share prefixes, so
    // comparisons reach every position of the longer keys.
    let mut random = pseudo_random(0x9e37_79b9_7f4a_7c15);
    let mut next = move || (random() >> 33) as usize;
    let alphabet = [0x00u8, 0x01, 0x61, 0x7f, 0x80, 0xfe, 0xff];
    let mut keys: Vec<Vec<u8>> = (0..3000)
        .map(|i| {
            let len = i % 41;
            (0..len)
                .map(|at| {
                    // Mostly one byte per position, so keys agree for long stretches.
                    if next() % 5 == 0 {
                        alphabet[next() % alphabet.len()]
                    } else {
                        alphabet[at % alphabet.len()]
                    }
                })
                .collect()
        })
        .collect();
    let hex = |key: &[u8]| key.iter().map(|b| format!("{b:02X}")).collect::<String>();
    let inserts: String = keys
        .iter()
        .map(|key| format!("INSERT INTO keys VALUES (x'{}');\n", hex(key)))
        .collect();
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    support::sqlite(
        &data.join("keys.db"),
        &format!("CREATE TABLE keys(k BLOB);\n{inserts}"),
    );
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    let query = |sql: &str| all_rows(&home, "/data/keys.db", sql);

    keys.sort();
    let sorted: Vec<String> = query("SELECT hex(k) FROM keys ORDER BY k")
        .iter()
        .map(|row| row[0].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = keys.iter().map(|key| hex(key)).collect();
    assert_eq!(sorted.len(), expected.len());
    if let Some(at) = sorted.iter().zip(&expected).position(|(a, b)| a != b) {
        panic!(
            "ORDER BY differs from byte order at row {at}: {} where {} belongs",
            sorted[at], expected[at]
        );
    }

    let mut counts: Vec<(String, i64)> = Vec::new();
    for key in &expected {
        match counts.last_mut() {
            Some((last, n)) if last == key => *n += 1,
            _ => counts.push((key.clone(), 1)),
        }
    }
    let grouped: Vec<(String, i64)> =
        query("SELECT hex(k), count(*) FROM keys GROUP BY k ORDER BY k DESC")
            .iter()
            .map(|row| {
                (
                    row[0].as_str().unwrap().to_string(),
                    row[1].as_i64().unwrap(),
                )
            })
            .collect();
    counts.reverse();
    assert_eq!(grouped, counts);
}

/// SQLite in the component calls the sorter's text and integer comparators directly, inlined
/// where the sorter merges (`c/sqlite_sorter.h`); every other key goes through its function
/// pointer. Sorts of single-column text and integer keys, ascending and descending, and of a
/// text key with a second column (ties in the first field go on to the rest of the record),
/// large enough to spill into several sorted runs and merge them, must group and order exactly
/// as Rust orders the same values: text by its UTF-8 bytes, integers of every stored width.
#[test]
fn grouping_text_and_integer_keys_in_large_sorts_matches_rust_order() {
    let mut random = pseudo_random(0x2545_f491_4f6c_dd1d);
    let mut next = move || random() >> 11;
    // Texts of 1 to 40 bytes from a few characters (one of them two bytes in UTF-8), so keys
    // share long prefixes and reach every length class of the tool's memcmp.
    let alphabet = ['a', 'b', 'z', 'A', '0', '~', 'é'];
    let texts: Vec<String> = (0..1500)
        .map(|i| {
            (0..1 + i % 40)
                .map(|at| {
                    if next() % 6 == 0 {
                        alphabet[next() as usize % alphabet.len()]
                    } else {
                        alphabet[at % 3]
                    }
                })
                .collect()
        })
        .collect();
    // Integers stored in each of SQLite's widths (the constants 0 and 1, 1 to 8 bytes), both
    // signs, and the extremes.
    let mut integers: Vec<i64> = vec![
        0,
        1,
        -1,
        i64::MAX,
        i64::MIN,
        127,
        -128,
        128,
        32_767,
        -32_768,
    ];
    integers.extend((0..1200).map(|_| {
        let random = (next() << 11) ^ next();
        let value = (random >> (next() % 64)) as i64;
        if next() % 2 == 0 {
            value
        } else {
            value.wrapping_neg()
        }
    }));
    let rows: Vec<(&str, i64, i64)> = (0..100_000)
        .map(|n| {
            let text = &texts[next() as usize % texts.len()];
            (text.as_str(), integers[next() as usize % integers.len()], n)
        })
        .collect();
    let mut script = String::from("CREATE TABLE s(t TEXT, i INTEGER, n INTEGER);\n");
    for chunk in rows.chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|(t, i, n)| format!("('{t}', {i}, {n})"))
            .collect();
        script += &format!("INSERT INTO s VALUES {};\n", values.join(","));
    }
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    support::sqlite(&data.join("sort.db"), &script);
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    let query = |sql: &str| all_rows(&home, "/data/sort.db", sql);
    // Compares the first rows that differ, so a failure shows where the order broke.
    let check = |sql: &str, expected: Vec<Value>| {
        let got = query(sql);
        if let Some(at) = got.iter().zip(&expected).position(|(a, b)| a != b) {
            panic!(
                "{sql}: row {at} is {} where {} belongs",
                got[at], expected[at]
            );
        }
        assert_eq!(got.len(), expected.len(), "{sql}");
    };

    let mut by_text: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    let mut by_integer: BTreeMap<i64, i64> = BTreeMap::new();
    let mut by_text_and_rest: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    for &(t, i, n) in &rows {
        let group = by_text.entry(t).or_default();
        group.0 += 1;
        group.1 += n;
        *by_integer.entry(i).or_default() += 1;
        *by_text_and_rest.entry((t, n % 3)).or_default() += 1;
    }
    let text_rows: Vec<Value> = by_text.iter().map(|(t, (c, s))| json!([t, c, s])).collect();
    check(
        "SELECT t, count(*), sum(n) FROM s GROUP BY t ORDER BY t",
        text_rows.clone(),
    );
    check(
        "SELECT t, count(*), sum(n) FROM s GROUP BY t ORDER BY t DESC",
        text_rows.into_iter().rev().collect(),
    );
    let integer_rows: Vec<Value> = by_integer.iter().map(|(i, c)| json!([i, c])).collect();
    check(
        "SELECT i, count(*) FROM s GROUP BY i ORDER BY i",
        integer_rows.clone(),
    );
    check(
        "SELECT i, count(*) FROM s GROUP BY i ORDER BY i DESC",
        integer_rows.into_iter().rev().collect(),
    );
    check(
        "SELECT t, n % 3, count(*) FROM s GROUP BY t, n % 3 ORDER BY t, n % 3",
        by_text_and_rest
            .iter()
            .map(|((t, r), c)| json!([t, r, c]))
            .collect(),
    );
}

#[test]
fn row_and_byte_caps_truncate_and_say_so() {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    // 500 rows of 1000-character text.
    support::sqlite(
        &data.join("big.db"),
        "CREATE TABLE t(n INTEGER, pad TEXT);
         WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 500)
         INSERT INTO t SELECT n, printf('%.1000c', 'x') FROM c;",
    );
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    let q = |args: Value| {
        let mut all = json!({"database": "/data/big.db"});
        all.as_object_mut()
            .unwrap()
            .extend(args.as_object().unwrap().clone());
        json_of(&call(&home, "sql_query", all).ok())
    };

    let out = q(json!({"sql": "SELECT n FROM t ORDER BY n", "max_rows": 10}));
    assert_eq!(out["row_count"], json!(10), "{out:#}");
    assert_eq!(out["rows"][9], json!([10]));
    assert_eq!(out["truncated"], json!(true));
    assert_eq!(out["truncated_by"], json!("max_rows"));
    assert!(
        out["note"].as_str().unwrap().contains("LIMIT/OFFSET"),
        "{out:#}"
    );
    // Exactly as many rows as the cap is not truncation.
    let out = q(json!({"sql": "SELECT n FROM t LIMIT 10", "max_rows": 10}));
    assert_eq!(
        (out["row_count"].clone(), out["truncated"].clone()),
        (json!(10), json!(false))
    );
    // The default cap is 200 rows.
    let out = q(json!({"sql": "SELECT n FROM t"}));
    assert_eq!(out["row_count"], json!(200), "{}", out["row_count"]);
    assert_eq!(out["truncated_by"], json!("max_rows"));

    // Each row is about 1010 bytes of JSON: 5000 bytes hold 4 rows.
    let out = q(json!({"sql": "SELECT n, pad FROM t ORDER BY n", "max_bytes": 5000}));
    assert_eq!(out["row_count"], json!(4), "{}", out["row_count"]);
    assert_eq!(out["truncated"], json!(true));
    assert_eq!(out["truncated_by"], json!("max_bytes"));
    assert_eq!(out["rows"][3][1].as_str().unwrap().len(), 1000);

    call(
        &home,
        "sql_query",
        json!({"database": "/data/big.db", "sql": "SELECT 1", "max_rows": 2_000_000}),
    )
    .code(2)
    .stderr_has(&["max_rows"]);
}

#[test]
fn writes_are_refused_by_sql_query_and_under_a_read_only_grant() {
    let (home, data) = shop("ro");
    let db = data.join("shop.db");
    let before = file_digest(&db);
    for sql in [
        "DELETE FROM orders",
        "INSERT INTO customers(name) VALUES ('Mallory')",
        "UPDATE products SET price_cents = 0",
        "DROP TABLE orders",
        "PRAGMA user_version = 7",
        "CREATE TABLE evil(x)",
    ] {
        call(
            &home,
            "sql_query",
            json!({"database": "/data/shop.db", "sql": sql}),
        )
        .code(1)
        .stderr_has(&[
            "`sql_query` failed",
            "denied",
            "SQLite reports that this statement writes",
            "sql_execute",
        ]);
    }
    // More than one statement cannot smuggle a write behind a read.
    call(
        &home,
        "sql_query",
        json!({"database": "/data/shop.db", "sql": "SELECT 1; DELETE FROM orders"}),
    )
    .code(1)
    .stderr_has(&["more than one statement"]);

    // Writing to an existing database and creating a new one are both denied.
    for args in [
        json!({"database": "/data/shop.db", "sql": "DELETE FROM orders"}),
        json!({"database": "/data/new.db", "sql": "CREATE TABLE t(x)", "create": true}),
    ] {
        call(&home, "sql_execute", args).code(1).stderr_has(&[
            "`sql_execute` failed",
            "denied",
            "read-only",
            "read-write grant",
        ]);
    }

    assert_eq!(
        file_digest(&db),
        before,
        "the database changed under a read-only grant"
    );
    assert_eq!(host_count(&db, "orders"), 4);
    let mut left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["shop.db"], "files appeared beside the database");
}

#[test]
fn sql_execute_changes_data_under_a_read_write_grant() {
    let (home, data) = shop("rw");
    let db = data.join("shop.db");
    let out = json_of(
        &call(
            &home,
            "sql_execute",
            json!({"database": "/data/shop.db",
                   "sql": "INSERT INTO customers(name, city) VALUES (?, ?)",
                   "params": ["Dmitri", "Oslo"]}),
        )
        .ok(),
    );
    assert_eq!(
        out,
        json!({"statements": 1, "changes": 1, "last_insert_rowid": 4})
    );
    assert_eq!(
        host_query(&db, "SELECT city FROM customers WHERE name = 'Dmitri'"),
        "[['Oslo']]"
    );

    // A script runs in one transaction and reports what it did.
    let out = json_of(
        &call(
            &home,
            "sql_execute",
            json!({"database": "/data/shop.db",
                   "sql": "UPDATE products SET price_cents = price_cents + 1; DELETE FROM orders WHERE quantity < 5"}),
        )
        .ok(),
    );
    assert_eq!(out["statements"], json!(2), "{out:#}");
    assert_eq!(out["changes"], json!(4), "{out:#}");
    assert_eq!(
        host_query(&db, "SELECT sum(price_cents) FROM products"),
        "[[5351]]"
    );
    assert_eq!(host_count(&db, "orders"), 2);

    // A failing statement rolls the whole script back.
    call(
        &home,
        "sql_execute",
        json!({"database": "/data/shop.db",
               "sql": "DELETE FROM orders; INSERT INTO nowhere VALUES (1)"}),
    )
    .code(1)
    .stderr_has(&["no such table: nowhere"]);
    assert_eq!(
        host_count(&db, "orders"),
        2,
        "the first statement was not rolled back"
    );
    call(
        &home,
        "sql_execute",
        json!({"database": "/data/shop.db",
               "sql": "INSERT INTO customers(id, name) VALUES (1, 'Duplicate')"}),
    )
    .code(1)
    .stderr_has(&["UNIQUE constraint failed: customers.id"]);

    // `create` makes a new database; without it a missing file is not found.
    call(
        &home,
        "sql_execute",
        json!({"database": "/data/fresh.db", "sql": "CREATE TABLE t(x); INSERT INTO t VALUES (42)"}),
    )
    .code(1)
    .stderr_has(&["not found", "/data/fresh.db"]);
    assert!(!data.join("fresh.db").exists());
    call(
        &home,
        "sql_execute",
        json!({"database": "/data/fresh.db", "sql": "CREATE TABLE t(x); INSERT INTO t VALUES (42)", "create": true}),
    )
    .ok();
    assert_eq!(
        host_query(&data.join("fresh.db"), "SELECT x FROM t"),
        "[[42]]"
    );
    // The sandboxed SQLite's lock directory is gone after each call.
    assert!(!data.join("shop.db.lock").exists() && !data.join("fresh.db.lock").exists());
}

#[test]
fn sqlite_errors_come_back_as_tool_errors_with_sqlites_message() {
    let (home, data) = shop("ro");
    std::fs::write(
        data.join("notes.db"),
        "this is a text file, not a database\n".repeat(50),
    )
    .unwrap();
    let cases: [(&str, &str, &[&str]); 5] = [
        (
            "shop.db",
            "SELEC name FROM customers",
            &["invalid arguments", "near \"SELEC\": syntax error"],
        ),
        (
            "shop.db",
            "SELECT * FROM nope",
            &["not found", "no such table: nope", "sql_schema"],
        ),
        (
            "shop.db",
            "SELECT shoe_size FROM customers",
            &["no such column: shoe_size"],
        ),
        (
            "notes.db",
            "SELECT 1",
            &["/data/notes.db", "not a SQLite database"],
        ),
        (
            "absent.db",
            "SELECT 1",
            &["not found", "/data/absent.db does not exist"],
        ),
    ];
    for (file, sql, needles) in cases {
        let run = call(
            &home,
            "sql_query",
            json!({"database": format!("/data/{file}"), "sql": sql}),
        )
        .code(1)
        .stderr_has(&["error: `sql_query` failed"])
        .stderr_has(needles);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
}

#[test]
fn databases_outside_the_grants_are_refused() {
    let (home, data) = shop("ro");
    let outside = home.scratch("outside");
    support::sqlite(
        &outside.join("secret.db"),
        "CREATE TABLE s(v TEXT); INSERT INTO s VALUES ('top-secret-value');",
    );
    std::os::unix::fs::symlink(outside.join("secret.db"), data.join("link.db")).unwrap();
    let host_path = outside.join("secret.db").display().to_string();
    for database in [
        "/outside/secret.db",
        "/data/../outside/secret.db",
        "../outside/secret.db",
        "/data/link.db",
        "/etc/passwd",
    ] {
        let run = home
            .cordon(&[
                "call",
                "sql_query",
                &json!({"database": database, "sql": "SELECT v FROM s"}).to_string(),
            ])
            .code(1);
        assert!(
            !run.stdout.contains("top-secret-value"),
            "{database}: {}",
            run.stdout
        );
        assert!(
            run.stderr.contains("denied") || run.stderr.contains("not found"),
            "{database}: {}",
            run.stderr
        );
    }
    // A host path is refused and named only as given; no other host layout leaks.
    let run = home
        .cordon(&[
            "call",
            "sql_query",
            &json!({"database": host_path, "sql": "SELECT v FROM s"}).to_string(),
        ])
        .code(1)
        .stderr_has(&["denied", "outside the directories granted", "(/data)"]);
    assert!(!run.stdout.contains("top-secret-value"));
    call(
        &home,
        "sql_schema",
        json!({"database": "/data/../outside/secret.db"}),
    )
    .code(1)
    .stderr_has(&["denied", "/outside/secret.db is outside"]);
}

#[test]
fn wal_changes_not_yet_checkpointed_are_reported_not_answered_stale() {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    let db = data.join("log.db");
    support::sqlite(
        &db,
        "PRAGMA journal_mode = WAL;
         CREATE TABLE events(id INTEGER PRIMARY KEY, what TEXT);
         INSERT INTO events(what) VALUES ('one'), ('two'), ('three');",
    );
    install(&home, "sql", &[grant_fs(&data, "/data", "rw")], &[]);
    let count = json!({"database": "/data/log.db", "sql": "SELECT count(*) FROM events"});
    // Closed cleanly: checkpointed, so it reads fine although it is in WAL mode.
    let out = json_of(&call(&home, "sql_query", count.clone()).ok());
    assert_eq!(out["rows"], json!([[3]]), "{out:#}");

    // A writer on the host commits two rows into the WAL and keeps the database open.
    let writer = Writer::start(&db);
    assert!(std::fs::metadata(data.join("log.db-wal")).unwrap().len() > 0);
    let run = call(&home, "sql_query", count.clone())
        .code(1)
        .stderr_has(&[
            "/data/log.db is in WAL mode",
            "not yet checkpointed",
            "wal_checkpoint(TRUNCATE)",
        ]);
    assert!(
        !run.stdout.contains('3'),
        "answered from stale data: {}",
        run.stdout
    );
    call(&home, "sql_schema", json!({"database": "/data/log.db"}))
        .code(1)
        .stderr_has(&["not yet checkpointed"]);

    // Once the writer closes (SQLite checkpoints then), the new rows are there.
    writer.close();
    let out = json_of(&call(&home, "sql_query", count).ok());
    assert_eq!(out["rows"], json!([[5]]), "{out:#}");
    // Writing a WAL database is refused with what to do, and changes nothing.
    let before = file_digest(&db);
    call(
        &home,
        "sql_execute",
        json!({"database": "/data/log.db", "sql": "DELETE FROM events"}),
    )
    .code(1)
    .stderr_has(&["WAL journal mode", "journal_mode=DELETE"]);
    assert_eq!(file_digest(&db), before);
}

/// A python3 process holding a WAL database open with committed, un-checkpointed rows.
struct Writer {
    child: Child,
    lines: BufReader<std::process::ChildStdout>,
}

impl Writer {
    fn start(db: &Path) -> Writer {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                 c.execute('PRAGMA wal_autocheckpoint = 0')\n\
                 c.execute(\"INSERT INTO events(what) VALUES ('four'), ('five')\")\n\
                 print('ready', flush=True)\n\
                 sys.stdin.readline()\n\
                 c.close()\n\
                 print('closed', flush=True)",
                db.to_str().unwrap(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed for the WAL test");
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "the WAL writer did not start");
        Writer { child, lines }
    }

    fn close(mut self) {
        self.child
            .stdin
            .take()
            .unwrap()
            .write_all(b"close\n")
            .unwrap();
        let mut line = String::new();
        self.lines.read_line(&mut line).unwrap();
        assert_eq!(line, "closed\n");
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Only reached without close() when a test fails: do not leave the process behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rows of `sql` as Python's repr, read by the host's SQLite, for independent checks.
fn host_query(db: &Path, sql: &str) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             print([list(r) for r in c.execute(sys.argv[2])])",
            db.to_str().unwrap(),
            sql,
        ])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn host_count(db: &Path, table: &str) -> i64 {
    let text = host_query(db, &format!("SELECT count(*) FROM {table}"));
    text.trim_matches(['[', ']']).parse().unwrap()
}

/// A home with `sql` granted `data` read-write under `limit`, a database `big.db` of 200,000
/// rows in it, and a script that doubles its table eight times in one transaction (a write
/// that takes seconds).
fn big_db(limit: &str) -> (TestHome, PathBuf, PathBuf, String) {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    let db = data.join("big.db");
    support::sqlite(
        &db,
        "CREATE TABLE t(x INTEGER, pad TEXT);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
         INSERT INTO t SELECT i, hex(randomblob(16)) FROM n;",
    );
    install(&home, "sql", &[grant_fs(&data, "/data", "rw")], &[limit]);
    let grow = "INSERT INTO t SELECT x, pad FROM t; ".repeat(8);
    (home, data, db, grow)
}

/// A write stopped by its time limit leaves nothing behind: no lock directory, no journal
/// that blocks readers, and the database exactly as before the interrupted statement; the next
/// write and read work.
#[test]
fn a_write_stopped_by_its_time_limit_leaves_the_database_usable_and_as_before() {
    // Doubling the table again and again in one transaction cannot finish in a second.
    let (home, data, db, grow) = big_db("time=1s");
    let run = call(
        &home,
        "sql_execute",
        json!({"database": "/data/big.db", "sql": grow}),
    );
    assert_ne!(run.code, 0, "the write finished:\n{}", run.stdout);
    assert!(
        run.stderr.contains("time") || run.stdout.contains("time"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        !data.join("big.db.lock").exists(),
        "the lock outlived its call"
    );
    // A read first: it reports the interrupted write's journal rather than answer from it
    // (it cannot tell it from a native writer's live one), and changes nothing.
    let refused = call(
        &home,
        "sql_query",
        json!({"database": "/data/big.db", "sql": "SELECT count(*) AS n FROM t"}),
    );
    assert!(
        refused.stdout.contains("rollback journal") || refused.stderr.contains("rollback journal"),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    // The next write works, and rolls the interrupted one back.
    let out = json_of(
        &call(
            &home,
            "sql_execute",
            json!({"database": "/data/big.db", "sql": "INSERT INTO t VALUES (-1, 'after')"}),
        )
        .ok(),
    );
    assert_eq!(out["changes"], 1, "{out}");
    let counted = json_of(
        &call(
            &home,
            "sql_query",
            json!({"database": "/data/big.db", "sql": "SELECT count(*) AS n FROM t"}),
        )
        .ok(),
    );
    assert_eq!(counted["rows"], json!([[200001]]), "{counted}");
    assert_eq!(host_count(&db, "t"), 200_001);
}

/// A host killed while a write holds its lock: the next host started on the home removes the
/// lock the dead process's call held (from the home's ledger), and the write after it rolls
/// the interrupted one back.
#[test]
fn a_host_killed_mid_write_leaves_no_lock_for_the_next_host() {
    let (home, data, db, grow) = big_db("time=120s");
    let args = json!({"database": "/data/big.db", "sql": grow}).to_string();
    let mut child = home
        .cordon_command(&["call", "sql_execute", &args])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start cordon call");
    let lock = data.join("big.db.lock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !lock.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the write never took its lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Well into the write, then killed.
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().expect("kill cordon call");
    child.wait().expect("reap cordon call");
    assert!(
        lock.exists(),
        "the killed call's lock is there until a host starts"
    );
    let out = json_of(
        &call(
            &home,
            "sql_execute",
            json!({"database": "/data/big.db", "sql": "INSERT INTO t VALUES (-1, 'after')"}),
        )
        .ok(),
    );
    assert_eq!(out["changes"], 1, "{out}");
    assert!(!lock.exists());
    assert_eq!(host_count(&db, "t"), 200_001);
}
