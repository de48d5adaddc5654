//! The bundled tools served by a running host, against the native program doing the same job
//! (`make bench`, called by `tests/bench/tools.sh` with the data it prepared).
//!
//! This is the cost a model's tool call has in `cordon chat`/`cordon run`: the host is already
//! up and the component compiled, and every call gets a fresh instance under the plugin's
//! grants. The native side is a fresh process per call, as a native tool would run it. Runs are
//! interleaved (native, Cordon, native, …) so a machine that speeds up or slows down during the
//! run affects both sides alike; figures are medians.
//!
//!   host_calls --plugins DIR --db FILE --tree DIR --python PATH [--runs N] [--only NAME,…]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cordon_core::{Grant, Grants};
use cordon_runtime::{Plugin, Runtime, RuntimeConfig, Sandbox};

struct Args {
    plugins: PathBuf,
    db: PathBuf,
    tree: PathBuf,
    python: PathBuf,
    runs: usize,
    /// Benchmarks to run (all when empty).
    only: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut plugins, mut db, mut tree, mut python, mut runs) = (None, None, None, None, 15);
    let mut only = Vec::new();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--plugins" => plugins = Some(PathBuf::from(value)),
            "--db" => db = Some(PathBuf::from(value)),
            "--tree" => tree = Some(PathBuf::from(value)),
            "--python" => python = Some(PathBuf::from(value)),
            "--runs" => runs = value.parse().context("--runs takes a number")?,
            "--only" => only = value.split(',').map(str::to_string).collect(),
            other => bail!("unknown argument {other}"),
        }
    }
    let need = |v: Option<PathBuf>, name: &str| v.with_context(|| format!("{name} is required"));
    Ok(Args {
        plugins: need(plugins, "--plugins")?,
        db: need(db, "--db")?,
        tree: need(tree, "--tree")?,
        python: need(python, "--python")?,
        runs,
        only,
    })
}

/// One benchmark: a native command line and the Cordon tool call doing the same work.
struct Case {
    name: &'static str,
    native: Vec<String>,
    /// The bundled plugin serving the tool, loaded only if the case runs.
    plugin: &'static str,
    sandbox: Sandbox,
    tool: &'static str,
    arguments: String,
}

fn sandbox(grants: &[&str]) -> Result<Sandbox> {
    let mut all = Grants::new();
    for g in grants {
        all.add(Grant::from_str(g)?.resolve()?);
    }
    Ok(Sandbox {
        grants: all,
        ..Sandbox::default()
    })
}

fn load(rt: &Runtime, dir: &Path, name: &str) -> Result<Plugin> {
    let path = dir.join(format!("{name}.wasm"));
    let wasm = std::fs::read(&path)
        .with_context(|| format!("cannot read {} (run `make plugins`)", path.display()))?;
    Ok(rt.load(&wasm, None, &|_| {})?.named(name))
}

fn run_native(argv: &[String]) -> Result<()> {
    let status = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", argv[0]))?;
    if !status.success() {
        bail!("{} failed: {status}", argv.join(" "));
    }
    Ok(())
}

async fn run_cordon(plugin: &Plugin, case: &Case) -> Result<()> {
    plugin
        .call_tool(&case.sandbox, case.tool, &case.arguments)
        .await
        .with_context(|| format!("{} failed", case.name))?;
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let cache = tempfile::tempdir()?;
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().into()),
        ..RuntimeConfig::default()
    })?;
    let db_dir = args.db.parent().context("--db needs a directory")?;
    let db_name = args.db.file_name().context("--db names a file")?;
    let guest_db = format!("/data/{}", db_name.to_string_lossy());
    let sql_box = sandbox(&[&format!("fs:{}:/data:ro", db_dir.display())])?;
    let tree = args.tree.display().to_string();
    let db = args.db.display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    let aggregate =
        "SELECT category, count(*), avg(price) FROM items GROUP BY category ORDER BY category";
    let cases = vec![
        Case {
            name: "search_text",
            native: s(&["rg", "-n", "-F", "unsafe impl Send for", &tree]),
            plugin: "files",
            sandbox: sandbox(&[&format!("fs:{tree}:/src:ro")])?,
            tool: "search_text",
            arguments: serde_json::json!({"pattern": "unsafe impl Send for", "path": "/src",
                "literal": true, "max_matches": 5000})
            .to_string(),
        },
        Case {
            name: "sql_aggregate",
            native: s(&["sqlite3", "-readonly", &db, aggregate]),
            plugin: "sql",
            sandbox: sql_box.clone(),
            tool: "sql_query",
            arguments: serde_json::json!({"database": guest_db, "sql": aggregate}).to_string(),
        },
        Case {
            name: "sql_lookup",
            native: s(&[
                "sqlite3",
                "-readonly",
                &db,
                "SELECT * FROM items WHERE sku = 'sku-0123456'",
            ]),
            plugin: "sql",
            sandbox: sql_box,
            tool: "sql_query",
            arguments: serde_json::json!({"database": guest_db,
                "sql": "SELECT * FROM items WHERE sku = ?", "params": ["sku-0123456"]})
            .to_string(),
        },
        Case {
            name: "run_python",
            native: vec![
                args.python.display().to_string(),
                "-c".into(),
                "print(1+1)".into(),
            ],
            plugin: "python",
            sandbox: Sandbox::default(),
            tool: "run_python",
            arguments: serde_json::json!({"code": "print(1+1)"}).to_string(),
        },
    ];

    println!();
    println!("tool call in a running host (fresh instance per call) vs a native process per call");
    println!("medians of {} interleaved runs after 2 warm-ups", args.runs);
    println!(
        "{:<14} {:>12} {:>12} {:>8}",
        "benchmark", "native_ms", "cordon_ms", "ratio"
    );
    let mut loaded: HashMap<&str, Plugin> = HashMap::new();
    for case in &cases {
        if !args.only.is_empty() && !args.only.iter().any(|n| n == case.name) {
            continue;
        }
        if !loaded.contains_key(case.plugin) {
            loaded.insert(case.plugin, load(&rt, &args.plugins, case.plugin)?);
        }
        let plugin = &loaded[case.plugin];
        for _ in 0..2 {
            run_native(&case.native)?;
            run_cordon(plugin, case).await?;
        }
        let (mut native, mut cordon) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let start = Instant::now();
            run_native(&case.native)?;
            native.push(start.elapsed());
            let start = Instant::now();
            run_cordon(plugin, case).await?;
            cordon.push(start.elapsed());
        }
        let (n, c) = (median(native), median(cordon));
        println!(
            "{:<14} {:>12.1} {:>12.1} {:>8.2}",
            case.name,
            ms(n),
            ms(c),
            c.as_secs_f64() / n.as_secs_f64()
        );
    }
    Ok(())
}
