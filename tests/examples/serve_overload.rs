//! `cordon serve` past what it admits, measured against itself unloaded in the same run.
//!
//! 1. **Four times the admitted load.** `[serve.limits] max_turns = --admitted` (32). First
//!    `--admitted` clients, then four times as many, each sending gateway chat completions
//!    one after the other for `--seconds` (10) against a scripted model that answers in about
//!    `--model-ms` (50). A refused client waits 50 ms and sends again (far sooner than the
//!    `Retry-After` it is given, to keep the pressure on). Reported: the p50/p99 of the
//!    answered requests in both runs and their ratio (target ≤ 2×), and the p99 of the time
//!    to a refusal (target ≤ 100 ms).
//! 2. **Followers that never read.** One turn that streams `--deltas` (400) text deltas, with
//!    no follower and then with `--followers` (300) connections following the session's
//!    events that never read a byte. Medians of `--turns` (5) turns each, and their ratio.
//! 3. **MCP sessions.** `--initializes` (15,000) MCP `initialize`s over HTTP, 64 at a time,
//!    against the default `max_mcp_sessions` (1,000): how many were answered and refused,
//!    and the host's resident memory before and after.
//!
//! `cargo run --release -p cordon-tests --example serve_overload -- [--cordon
//! target/release/cordon] [--only load|followers|sessions]`. Everything listens on 127.0.0.1; every loop is bounded in count
//! and time.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_scripted_llm::{Script, ScriptedServer, Step};
use cordon_tests::bench::{Serve, TOKEN, file_arg, number, start_serve, write_token};
use futures::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

fn quantile(values: &mut [Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

#[derive(Default)]
struct Tally {
    answered: Vec<Duration>,
    refused: Vec<Duration>,
    errors: Vec<String>,
}

/// One client: chat completions one after the other until `until`.
async fn client_loop(client: reqwest::Client, base: Arc<String>, until: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut n = 0;
    while Instant::now() < until && tally.errors.len() < 10 {
        n += 1;
        let start = Instant::now();
        let sent = client
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(TOKEN)
            .json(&json!({
                "model": "scripted",
                "messages": [{"role": "user", "content": format!("question {n}")}],
            }))
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == 200 => {
                let _ = r.bytes().await;
                tally.answered.push(start.elapsed());
            }
            Ok(r) if r.status() == 503 || r.status() == 429 => {
                let has_retry_after = r.headers().contains_key("retry-after");
                let _ = r.bytes().await;
                tally.refused.push(start.elapsed());
                if !has_retry_after {
                    tally.errors.push("a refusal without Retry-After".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(r) => tally.errors.push(format!(
                "{} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            )),
            Err(e) => tally.errors.push(e.to_string()),
        }
    }
    tally
}

async fn load(base: &Arc<String>, clients: usize, seconds: u64) -> Tally {
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(clients)
        .build()
        .expect("an HTTP client");
    let until = Instant::now() + Duration::from_secs(seconds);
    let running: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(client_loop(client.clone(), base.clone(), until)))
        .collect();
    let mut total = Tally::default();
    for task in running {
        let t = task.await.expect("a client task");
        total.answered.extend(t.answered);
        total.refused.extend(t.refused);
        total.errors.extend(t.errors);
    }
    total
}

/// A session's turn: `POST …/messages` with `stream: false`, timed to its answer.
async fn one_turn(client: &reqwest::Client, base: &str, id: &str) -> Duration {
    let start = Instant::now();
    let r = client
        .post(format!("{base}/api/v1/sessions/{id}/messages"))
        .bearer_auth(TOKEN)
        .json(&json!({"text": "stream a long answer", "stream": false}))
        .send()
        .await
        .expect("a turn");
    assert_eq!(r.status(), 200, "a turn was refused");
    let _ = r.bytes().await;
    start.elapsed()
}

/// Connections following session `id`'s events that never read what they are sent.
async fn deaf_followers(base: &str, id: &str, n: usize) -> Vec<tokio::net::TcpStream> {
    let addr = base.trim_start_matches("http://").to_string();
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("a follower connects");
        let request = format!(
            "GET /api/v1/sessions/{id}/events HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\n\r\n"
        );
        tcp.write_all(request.as_bytes())
            .await
            .expect("a follow request");
        held.push(tcp);
    }
    held
}

/// `cordon serve` on `home` with `config`, in front of a scripted model that answers every
/// request with `answer`.
async fn serve_answering(
    bin: &Path,
    home: &Path,
    config: &Path,
    answer: Step,
) -> (Serve, String, ScriptedServer) {
    let model = ScriptedServer::start(Script::by_role(answer.clone(), answer))
        .await
        .expect("start the scripted model");
    let (serve, base) = start_serve(
        bin,
        home,
        &[
            "--config",
            config.to_str().expect("a UTF-8 path"),
            "--llm-url",
            &model.base_url(),
            "--model",
            "scripted",
        ],
    );
    (serve, base, model)
}

/// Part 1: the admitted load, then four times as much; whether the targets were met.
async fn overload(base: &Arc<String>, admitted: usize, seconds: u64) -> bool {
    let mut ok = true;
    let mut unloaded = load(base, admitted, seconds).await;
    let mut overloaded = load(base, admitted * 4, seconds).await;
    for (name, t) in [("unloaded", &unloaded), ("4x", &overloaded)] {
        if !t.errors.is_empty() {
            ok = false;
            eprintln!("  {name}: {} errors, e.g. {}", t.errors.len(), t.errors[0]);
        }
    }
    let p99_unloaded = quantile(&mut unloaded.answered, 0.99);
    let p99_loaded = quantile(&mut overloaded.answered, 0.99);
    let ratio = p99_loaded.as_secs_f64() / p99_unloaded.as_secs_f64().max(1e-9);
    let refused_p99 = quantile(&mut overloaded.refused, 0.99);
    println!(
        "  {admitted} clients: {} answered, {} refused; p50 {}, p99 {}",
        unloaded.answered.len(),
        unloaded.refused.len(),
        ms(quantile(&mut unloaded.answered, 0.5)),
        ms(p99_unloaded)
    );
    println!(
        "  {} clients: {} answered, p50 {}, p99 {} ({ratio:.2}x the unloaded p99; target <= 2x); {} refused (429/503), p50 {}, p99 {} (target <= 100 ms)",
        admitted * 4,
        overloaded.answered.len(),
        ms(quantile(&mut overloaded.answered, 0.5)),
        ms(p99_loaded),
        overloaded.refused.len(),
        ms(quantile(&mut overloaded.refused, 0.5)),
        ms(refused_p99),
    );
    if ratio > 2.0 || refused_p99 > Duration::from_millis(100) || overloaded.refused.is_empty() {
        ok = false;
    }
    ok
}

fn home_for_sessions() -> tempfile::TempDir {
    let home = tempfile::Builder::new()
        .prefix("cordon-sessions-")
        .tempdir()
        .expect("a temporary home");
    write_token(home.path());
    home
}

/// The resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Part 3: `n` MCP `initialize`s against the default session bounds (its own host, with the
/// default `[serve.limits]` but the rate).
async fn sessions(bin: &Path, home: &Path, n: usize) {
    let config = home.join("sessions.toml");
    std::fs::write(
        &config,
        "[serve.limits]\nrequests_per_second = 1000000\nrequest_burst = 1000000\n",
    )
    .unwrap();
    let (serve, base) = start_serve(bin, home, &["--config", config.to_str().unwrap()]);
    let pid = serve.0.id();
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client");
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "serve_overload", "version": "1"}}
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_mib(pid);
    let started = Instant::now();
    let statuses: Vec<u16> = futures::stream::iter(0..n)
        .map(|_| {
            let client = client.clone();
            let initialize = initialize.clone();
            let url = format!("{base}/mcp");
            async move {
                client
                    .post(url)
                    .bearer_auth(TOKEN)
                    .header("accept", "application/json, text/event-stream")
                    .json(&initialize)
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let took = started.elapsed();
    let after = rss_mib(pid);
    let answered = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 503).count();
    println!(
        "  {n} MCP initializes in {:.1} s: {answered} answered, {refused} refused (503), {} other; \
         resident memory {before:.0} MiB before, {after:.0} MiB after (+{:.0} MiB)",
        took.as_secs_f64(),
        n - answered - refused,
        after - before
    );
    drop(serve);
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let admitted = number(&args, "--admitted", 32).max(1);
    let seconds = number(&args, "--seconds", 10).clamp(1, 120) as u64;
    let model_ms = number(&args, "--model-ms", 50) as u64;
    let followers = number(&args, "--followers", 300).min(900);
    let deltas = number(&args, "--deltas", 400).max(1);
    let turns = number(&args, "--turns", 5).max(1);
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    assert!(
        matches!(only, None | Some("load" | "followers" | "sessions")),
        "--only takes `load`, `followers` or `sessions`"
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    if only == Some("sessions") {
        let initializes = number(&args, "--initializes", 15_000).min(100_000);
        sessions(&bin, home_for_sessions().path(), initializes).await;
        return;
    }

    let home = tempfile::Builder::new()
        .prefix("cordon-overload-")
        .tempdir()
        .expect("a temporary home");
    write_token(home.path());
    let config = home.path().join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[serve.limits]\nmax_turns = {admitted}\nmax_turns_per_token = {admitted}\n\
             requests_per_second = 100000\nrequest_burst = 100000\n"
        ),
    )
    .unwrap();
    // A model that takes about `model_ms` for its answer: 5 deltas, `model_ms / 5` apart.
    let text = "An answer that takes the model a while.";
    let answer = Step::Text {
        text: text.into(),
        chunk: Some(text.len().div_ceil(5)),
        delay_ms: Some(model_ms / 5),
        usage: None,
    };
    let (serve, base, _model) = serve_answering(&bin, home.path(), &config, answer).await;
    let base = Arc::new(base);
    println!(
        "serve_overload: max_turns = {admitted}; a model answer takes about {model_ms} ms; {seconds} s per run"
    );
    let mut failed = false;

    if only != Some("followers") {
        failed |= !overload(&base, admitted, seconds).await;
    }
    if only == Some("load") {
        drop(serve);
        std::process::exit(i32::from(failed));
    }

    // Followers that never read.
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client");
    let r = client
        .post(format!("{base}/api/v1/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"id": "followed"}))
        .send()
        .await
        .expect("create a session");
    assert_eq!(r.status(), 201);
    drop(serve);
    // A model that streams `deltas` deltas as fast as it can.
    let long: String = "word ".repeat(deltas);
    let streamed = Step::Text {
        text: long,
        chunk: Some(5),
        delay_ms: None,
        usage: None,
    };
    let (serve, base, _model) = serve_answering(&bin, home.path(), &config, streamed).await;
    let mut alone = Vec::new();
    let mut followed = Vec::new();
    for _ in 0..turns {
        alone.push(one_turn(&client, &base, "followed").await);
    }
    let held = deaf_followers(&base, "followed", followers).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..turns {
        followed.push(one_turn(&client, &base, "followed").await);
    }
    drop(held);
    let alone_p50 = quantile(&mut alone, 0.5);
    let followed_p50 = quantile(&mut followed, 0.5);
    println!(
        "  a turn of {deltas} deltas: {} alone, {} with {followers} followers that never read ({:.2}x)",
        ms(alone_p50),
        ms(followed_p50),
        followed_p50.as_secs_f64() / alone_p50.as_secs_f64().max(1e-9)
    );
    drop(serve);
    drop(home);
    if only.is_none() {
        let initializes = number(&args, "--initializes", 15_000).min(100_000);
        sessions(&bin, home_for_sessions().path(), initializes).await;
    }
    if failed {
        eprintln!("serve_overload: a target was missed");
        std::process::exit(1);
    }
}
