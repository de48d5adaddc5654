//! What keeping a large result costs the host (issue #37, part 3): `cordon run --session` over
//! the real `sql` plugin, whose `sql_query` writes its rows as they come; the host keeps a
//! result larger than the model's budget in the session's store, in parts, and the scripted
//! model pages to one row. For results of one row (the baseline), 5 MB and 50 MB: the median
//! over the runs of the process's peak resident memory (`wait4`) and wall time, and each
//! size's peak above the baseline's (target: under 128 MiB for 50 MB).
//!
//! `cargo run --release -p cordon-tests --example spill_bench -- [--cordon
//! target/release/cordon] [--runs 5]`. Needs `make plugins` (target/plugins/sql.wasm).
//! Everything runs on this machine; every loop is bounded.

use std::time::Instant;

use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use cordon_tests::bench::{arg, number};
use cordon_tests::support::{grant_fs, home_with, install, sqlite};
use serde_json::json;

fn call(id: &str, name: &str, arguments: serde_json::Value) -> ScriptedCall {
    ScriptedCall::with_id(id, name, arguments)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The binary every run starts (the test harness reads CORDON_BIN).
    let bin = arg(&args, "--cordon").unwrap_or_else(|| "target/release/cordon".to_string());
    let bin = std::fs::canonicalize(&bin).unwrap_or_else(|e| panic!("{bin}: {e}; build it first"));
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("CORDON_BIN", &bin) };
    let runs = number(&args, "--runs", 5).clamp(1, 50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let home = home_with(&["sql"]);
    let data = home.scratch("data");
    sqlite(
        &data.join("big.db"),
        "CREATE TABLE rows(id INTEGER PRIMARY KEY, name TEXT NOT NULL, pad TEXT NOT NULL);\n\
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 480000)\n\
         INSERT INTO rows SELECT i, 'row-' || i, printf('%080d', i) FROM n;",
    );
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    let cwd = home.scratch("cwd");
    println!("spill_bench: `cordon run --session` over sql_query, {runs} runs each, medians");
    println!(
        "{:>10} {:>14} {:>12} {:>16}",
        "rows", "peak RSS MiB", "wall ms", "above 1 row MiB"
    );
    let mut baseline = None;
    for (label, limit) in [("1", 1), ("48,000", 48_000), ("480,000", 480_000)] {
        let (mut peaks, mut walls) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let steps = vec![
                Step::tool_calls(vec![call(
                    "q1",
                    "sql_query",
                    json!({"database": "/data/big.db",
                           "sql": format!("SELECT id, name, pad FROM rows ORDER BY id LIMIT {limit}"),
                           "max_rows": 1_000_000, "max_bytes": 60 << 20}),
                )]),
                Step::tool_calls(vec![call(
                    "p1",
                    "read_result",
                    json!({"call_id": "q1", "pattern": format!("\"row-{limit}\"")}),
                )]),
                Step::text("Found."),
            ];
            let server = rt
                .block_on(ScriptedServer::start(Script::new(steps)))
                .expect("start the scripted model");
            let session = format!("s-{limit}-{run}");
            let started = Instant::now();
            let (done, peak) = home.cordon_measured(
                Some(&cwd),
                &["run", "--session", &session, "Find the last row."],
                &[
                    ("CORDON_LLM_URL", &server.base_url()),
                    ("CORDON_MODEL", "scripted"),
                ],
            );
            walls.push(started.elapsed().as_secs_f64() * 1000.0);
            let done = done.ok();
            assert!(done.stdout.contains("Found."), "{}", done.stdout);
            peaks.push(peak as f64 / 1024.0);
        }
        let (peak, wall) = (median(peaks), median(walls));
        let base = *baseline.get_or_insert(peak);
        println!(
            "{label:>10} {peak:>14.1} {wall:>12.0} {:>16.1}",
            peak - base
        );
    }
}
