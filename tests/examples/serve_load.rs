//! Many sessions at once on one `cordon serve`: starts the built binary on a temporary home
//! (listening on 127.0.0.1 only, sessions in the home's SQLite store), with the scripted model
//! in this process answering by role (two calls of the `noop` fixture to a user's message, text
//! after the tool results), creates `--sessions` sessions over the HTTP API and runs
//! `--turns` turns in each, all sessions at once (`"stream": false`: one JSON answer per turn).
//! Every turn must end answered; the serve process's peak resident memory (VmHWM) and the turns
//! per second are reported.
//!
//! `cargo run --release -p cordon-tests --example serve_load -- [--cordon target/release/cordon]
//! [--noop target/fixtures/noop.wasm] [--sessions 200] [--turns 10]`. Without the fixture the
//! model answers with text only (no tool call).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use cordon_tests::bench::{TOKEN, arg, cordon, number, start_serve, status_kib, write_token};
use serde_json::{Value, json};

/// The longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest the turns of all sessions may take together.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// CPU time (user and system) a process used so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are the 12th and 13th, in clock ticks.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / per_second
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

#[derive(Default)]
struct Tally {
    turns: usize,
    errors: Vec<String>,
    latencies: Vec<Duration>,
}

/// Creates a session; its id, or what went wrong.
async fn create_session(client: reqwest::Client, base: Arc<String>) -> Result<String, String> {
    let r = client
        .post(format!("{base}/api/v1/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .map_err(|e| format!("create: {e}"))?;
    if r.status() != 201 {
        let status = r.status();
        return Err(format!(
            "create: {status} {}",
            r.text().await.unwrap_or_default()
        ));
    }
    let v: Value = r.json().await.map_err(|e| format!("create: {e}"))?;
    Ok(v["id"].as_str().unwrap_or_default().to_string())
}

/// Runs `turns` turns in session `id`, one after the other.
async fn run_turns(
    client: reqwest::Client,
    base: Arc<String>,
    id: String,
    turns: usize,
    with_tools: bool,
) -> Tally {
    let mut tally = Tally::default();
    for t in 0..turns {
        let start = Instant::now();
        let sent = client
            .post(format!("{base}/api/v1/sessions/{id}/messages"))
            .bearer_auth(TOKEN)
            .json(&json!({"text": format!("question {t}"), "stream": false}))
            .send()
            .await;
        let answer: Result<Value, String> = match sent {
            Ok(r) if r.status() == 200 => r.json().await.map_err(|e| e.to_string()),
            Ok(r) => Err(format!(
                "{} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            )),
            Err(e) => Err(e.to_string()),
        };
        match answer {
            Ok(v) if v["outcome"]["kind"] == "answered" => {
                let calls = v["events"]
                    .as_array()
                    .map(|events| {
                        events
                            .iter()
                            .filter(|e| e["type"] == "tool_result" && e["is_error"] == false)
                            .count()
                    })
                    .unwrap_or(0);
                if with_tools && calls != 2 {
                    tally.errors.push(format!(
                        "session {id} turn {t}: {calls} tool calls succeeded, not 2: {v}"
                    ));
                } else {
                    tally.turns += 1;
                    tally.latencies.push(start.elapsed());
                }
            }
            Ok(v) => tally
                .errors
                .push(format!("session {id} turn {t}: not answered: {v}")),
            Err(e) => tally.errors.push(format!("session {id} turn {t}: {e}")),
        }
    }
    tally
}

fn quantile(values: &mut [Duration], p: f64) -> Duration {
    values.sort();
    values[((values.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sessions = number(&args, "--sessions", 200).max(1);
    let turns = number(&args, "--turns", 10).max(1);
    let bin = PathBuf::from(
        arg(&args, "--cordon")
            .or_else(|| std::env::var("CORDON_BIN").ok())
            .unwrap_or_else(|| "target/release/cordon".to_string()),
    );
    assert!(
        bin.is_file(),
        "no cordon binary at {} (cargo build --release -p cordon)",
        bin.display()
    );
    // Commands run in the home, so relative paths are made absolute first.
    let bin = std::fs::canonicalize(&bin).expect("the cordon binary's path");
    let noop = PathBuf::from(
        arg(&args, "--noop").unwrap_or_else(|| "target/fixtures/noop.wasm".to_string()),
    );
    let with_tools = noop.is_file();
    let noop = std::fs::canonicalize(&noop).unwrap_or(noop);

    let home = tempfile::Builder::new()
        .prefix("cordon-serve-load-")
        .tempdir()
        .expect("a temporary home");
    std::fs::create_dir_all(home.path()).unwrap();
    write_token(home.path());
    let script = if with_tools {
        cordon(
            &bin,
            home.path(),
            &["plugin", "install", noop.to_str().unwrap(), "--yes"],
        );
        Script::by_role(
            Step::tool_calls(vec![
                ScriptedCall::new("noop", json!({})),
                ScriptedCall::new("noop", json!({})),
            ]),
            Step::text("Both calls came back empty, as expected."),
        )
    } else {
        eprintln!(
            "serve_load: no fixture at {} (make plugins): turns without tool calls",
            noop.display()
        );
        Script::by_role(Step::text("An answer."), Step::text("An answer."))
    };
    let model = ScriptedServer::start(script)
        .await
        .expect("start the scripted model");

    let model_url = model.base_url();
    let (serve, base) = start_serve(
        &bin,
        home.path(),
        &["--llm-url", &model_url, "--model", "scripted"],
    );
    let pid = serve.0.id();
    let started_kib = status_kib(pid, "VmHWM:").unwrap_or(0);
    // reqwest is built without a TLS provider of its own; none is used here (plain HTTP on
    // loopback), but building a client wants one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(sessions)
        .build()
        .expect("an HTTP client");
    let base = Arc::new(base);
    println!(
        "serve_load: {sessions} sessions x {turns} turns ({} per turn) on one cordon serve, load average {}",
        if with_tools {
            "two noop tool calls"
        } else {
            "no tool call"
        },
        load_average()
    );

    let mut total = Tally::default();
    let created = Instant::now();
    let creating: Vec<_> = (0..sessions)
        .map(|_| tokio::spawn(create_session(client.clone(), base.clone())))
        .collect();
    let mut ids = Vec::with_capacity(sessions);
    for task in creating {
        match task.await.expect("a session task") {
            Ok(id) => ids.push(id),
            Err(e) => total.errors.push(e),
        }
    }
    let created = created.elapsed();
    let cpu_before = cpu_seconds(pid);
    let start = Instant::now();
    let running: Vec<_> = ids
        .into_iter()
        .map(|id| {
            tokio::spawn(run_turns(
                client.clone(),
                base.clone(),
                id,
                turns,
                with_tools,
            ))
        })
        .collect();
    let joined = tokio::time::timeout(RUN_TIMEOUT, futures::future::join_all(running)).await;
    match joined {
        Ok(tallies) => {
            for tally in tallies {
                let tally = tally.expect("a session task");
                total.turns += tally.turns;
                total.errors.extend(tally.errors);
                total.latencies.extend(tally.latencies);
            }
        }
        Err(_) => total.errors.push(format!(
            "the turns did not all end within {} s",
            RUN_TIMEOUT.as_secs()
        )),
    }
    let wall = start.elapsed();
    let cpu = cpu_seconds(pid) - cpu_before;
    let peak_kib = status_kib(pid, "VmHWM:").unwrap_or(0);
    let rss_kib = status_kib(pid, "VmRSS:").unwrap_or(0);
    drop(serve);
    // Removed now: `process::exit` below would skip its destructor.
    drop(home);

    let expected = sessions * turns;
    println!(
        "  {sessions} sessions created in {:.2} s; during the turns cordon serve used {cpu:.2} s of CPU, {:.2} ms per turn",
        created.as_secs_f64(),
        cpu * 1e3 / total.turns.max(1) as f64
    );
    println!(
        "  {} of {expected} turns answered in {:.2} s: {:.1} turns/s; turn latency p50 {:.0} ms, p90 {:.0} ms",
        total.turns,
        wall.as_secs_f64(),
        total.turns as f64 / wall.as_secs_f64(),
        if total.latencies.is_empty() {
            0.0
        } else {
            quantile(&mut total.latencies, 0.5).as_secs_f64() * 1e3
        },
        if total.latencies.is_empty() {
            0.0
        } else {
            quantile(&mut total.latencies, 0.9).as_secs_f64() * 1e3
        },
    );
    println!(
        "  cordon serve peak RSS (VmHWM) {:.1} MiB (target < 512 MiB; {:.1} MiB after start, {:.1} MiB at the end); {} model requests; load average {}",
        peak_kib as f64 / 1024.0,
        started_kib as f64 / 1024.0,
        rss_kib as f64 / 1024.0,
        model.served(),
        load_average()
    );
    if !total.errors.is_empty() {
        for e in total.errors.iter().take(10) {
            eprintln!("  error: {e}");
        }
        eprintln!("serve_load: {} errors", total.errors.len());
        std::process::exit(1);
    }
    assert_eq!(total.turns, expected);
}
