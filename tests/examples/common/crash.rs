//! `cordon serve` killed outright (SIGKILL) again and again while clients talk to it, and what
//! the sessions, the audit log and a service outside Cordon say once it is over.
//!
//! `--clients` (6) clients each drive sessions of their own through the API, one message after
//! the other (`POST /api/v1/sessions/{id}/messages`, its turn followed as events), starting a
//! new session every `--messages` (10) messages so that histories stay short. The scripted model
//! answers every message with `--calls` (6) calls of the probe fixture's `http` tool, more than
//! `max_parallel_tools` (4) runs at once, so some wait for a place, and answers with text once
//! it has their results. Each call's URL holds the call's own id, and `cordon.toml` approves
//! the tool (`auto`), so no person is asked. The calls reach a service in this process that
//! records every id it is sent (before it answers, so what it records happened whatever the
//! host does next) and answers after up to `--call-ms` (200) ms, so calls are under way when
//! the host dies. Every `--kill-ms` (2000-6000, uniform) ms after it listens, the host is
//! killed with SIGKILL and started again on the same home and store, `--kills` (20) times or
//! for at most `--seconds` (900), and the last host works as long again. Then the clients stop,
//! every session is left to settle (at most 180 s), and the example checks, from the API and
//! the service's record:
//!
//! - every message the host acknowledged (answered `200`) is in its session's history, and
//!   once (a lost one is reported with whether its `turn_started` event had come, which the
//!   host sends only once the message is recorded);
//! - no call reached the service twice, and none that is in no session's history;
//! - every call in a history has exactly one audit record, and each `ok` one reached the
//!   service;
//!
//! and counts the calls closed as `interrupted` (those the service had seen, and those that
//! never reached it) and the calls started only after a restart: answered by the model before a
//! kill, run by the next host. A broken invariant exits 1 and keeps the home, with what was
//! found in `violations.txt`.
//!
//! `cargo run -p cordon-tests --example serve_crash -- [--cordon target/debug/cordon]
//! [--store sqlite|postgres] [--clients 6] [--kills 20] [--seconds 900] [--kill-ms 2000-6000]
//! [--seed N]`. `--store postgres` starts a throwaway cluster of Debian's `postgresql`
//! package (`tests/src/postgres.rs`). Everything listens on 127.0.0.1; every loop is bounded
//! in count and time.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use cordon_tests::bench::{
    Serve, TOKEN, arg, cordon, file_arg, number, start_serve, write_token_with_scopes,
};
use futures::StreamExt;
use serde_json::{Value, json};

/// The longest one request (a whole turn followed as events) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a client waits for its session to settle before its next message.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest every session together may take to settle once the kills are over.
const FINAL_SETTLE: Duration = Duration::from_secs(180);
/// How long after a kill the service and the model are given to take what the dead host sent
/// before it died, so that it counts as the dead host's.
const AFTER_KILL: Duration = Duration::from_millis(300);

/// A small xorshift generator: the kills' spacing and the service's delays, from `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// One call the service was sent: its id, and how many kills had happened when it came.
struct Hit {
    id: String,
    epoch: usize,
}

/// The side effect Cordon's records are checked against: an HTTP service that records the id
/// in the path of every request (`/call/<id>`) as it arrives.
struct Service {
    addr: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Service {
    fn start(epoch: Arc<AtomicUsize>, max_delay_ms: u64, seed: u64) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the service");
        let addr = listener
            .local_addr()
            .expect("the service's address")
            .to_string();
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let kept = hits.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(seed | 1);
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                // The epoch when the host connected, not when its request is read.
                let at = epoch.load(Ordering::SeqCst);
                let delay = Duration::from_millis(rng.between(0, max_delay_ms));
                let hits = kept.clone();
                std::thread::spawn(move || serve_call(stream, at, delay, &hits));
            }
        });
        Service { addr, hits }
    }
}

/// Reads one request, records its id and answers it after `delay`; a request cut short by the
/// host's death is not recorded, since nothing reached the service.
fn serve_call(mut stream: TcpStream, epoch: usize, delay: Duration, hits: &Mutex<Vec<Hit>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.split_whitespace().nth(1).unwrap_or_default();
    let Some(id) = path.strip_prefix("/call/") else {
        let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
        return;
    };
    hits.lock().unwrap().push(Hit {
        id: id.to_string(),
        epoch,
    });
    std::thread::sleep(delay);
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndone",
    );
}

/// What the clients share with the loop that kills the host: where it listens now, and when
/// to stop.
struct Shared {
    base: RwLock<String>,
    stop: AtomicBool,
    acknowledged: AtomicUsize,
}

impl Shared {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.read().unwrap())
    }
}

/// What one client sent and was told.
#[derive(Default)]
struct Tally {
    sessions: Vec<String>,
    /// Messages answered `200`, by session, and whether their `turn_started` event came.
    acknowledged: Vec<(String, String, bool)>,
    /// Messages whose request broke before an answer (the host died).
    unacknowledged: Vec<(String, String)>,
    /// Messages refused (`409`, `429`, `503`): not taken.
    refused: usize,
    errors: Vec<String>,
}

/// `GET` a JSON document; `None` when the host is down or answers otherwise.
async fn get_json(http: &reqwest::Client, shared: &Shared, path: &str) -> Option<Value> {
    let r = http
        .get(shared.url(path))
        .bearer_auth(TOKEN)
        .send()
        .await
        .ok()?;
    if r.status() != 200 {
        return None;
    }
    r.json().await.ok()
}

/// Whether the session holds no turn: recorded idle (or failed), and no host drives it.
fn settled(session: &Value) -> bool {
    matches!(
        session["session"]["state"].as_str(),
        Some("idle" | "failed")
    ) && session["running"] == false
}

/// Waits until session `id` settles (or `stop` is set, if `until_stop`), at most `within`.
async fn wait_settled(
    http: &reqwest::Client,
    shared: &Shared,
    id: &str,
    within: Duration,
    until_stop: bool,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && !(until_stop && shared.stop.load(Ordering::SeqCst)) {
        if let Some(session) = get_json(http, shared, &format!("/api/v1/sessions/{id}")).await
            && settled(&session)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Creates session `id`, again and again while the host is down; whether it exists.
async fn create(http: &reqwest::Client, shared: &Shared, id: &str) -> bool {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while Instant::now() < deadline && !shared.stop.load(Ordering::SeqCst) {
        let sent = http
            .post(shared.url("/api/v1/sessions"))
            .bearer_auth(TOKEN)
            .json(&json!({"id": id}))
            .send()
            .await;
        // 409: an earlier request created it, and the host died before answering.
        if let Ok(r) = sent
            && (r.status() == 201 || r.status() == 409)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Reads a turn's events until it ends or the connection breaks; whether its `turn_started`
/// event came (the host sends it once the message is recorded).
async fn follow(response: reqwest::Response) -> bool {
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let mut started = false;
    while let Some(Ok(chunk)) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        started |= seen.contains("\"turn_started\"");
        if seen.contains("\"turn_finished\"") || seen.contains("\"turn_stopped\"") {
            break;
        }
        // Only the start and the end matter; what came between need not be kept.
        if seen.len() > 4096 {
            seen.drain(..seen.len() - 64);
        }
    }
    started
}

/// One client: sessions of `per_session` messages each, one message at a time, until told to
/// stop.
async fn client(n: usize, per_session: usize, http: reqwest::Client, shared: Arc<Shared>) -> Tally {
    let mut tally = Tally::default();
    let mut message = 0;
    'sessions: for s in 0.. {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let id = format!("crash-{n}-{s}");
        if !create(&http, &shared, &id).await {
            break;
        }
        tally.sessions.push(id.clone());
        for _ in 0..per_session {
            if !wait_settled(&http, &shared, &id, SETTLE_TIMEOUT, true).await {
                if !shared.stop.load(Ordering::SeqCst) {
                    tally.errors.push(format!(
                        "session {id} did not settle within {} s",
                        SETTLE_TIMEOUT.as_secs()
                    ));
                }
                break 'sessions;
            }
            if shared.stop.load(Ordering::SeqCst) {
                break 'sessions;
            }
            message += 1;
            let text = format!("client {n}, message {message}");
            let sent = http
                .post(shared.url(&format!("/api/v1/sessions/{id}/messages")))
                .bearer_auth(TOKEN)
                .json(&json!({"text": text}))
                .send()
                .await;
            match sent {
                Ok(r) if r.status() == 200 => {
                    shared.acknowledged.fetch_add(1, Ordering::SeqCst);
                    let started = follow(r).await;
                    tally.acknowledged.push((id.clone(), text, started));
                }
                Ok(r) if [409, 429, 503].contains(&r.status().as_u16()) => {
                    tally.refused += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(r) => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    tally.errors.push(format!("{id}: {status} {body}"));
                }
                Err(_) => {
                    tally.unacknowledged.push((id.clone(), text));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    tally
}

/// `cordon serve` on the crash home: the same arguments every time it is started again.
struct Host {
    bin: PathBuf,
    home: PathBuf,
    args: Vec<String>,
}

impl Host {
    fn start(&self) -> (Serve, String) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        tokio::task::block_in_place(|| start_serve(&self.bin, &self.home, &args))
    }
}

/// The home: the probe installed with one grant, the service's address (trusted, so that no
/// result labels the session and the Rule of Two never asks), its `http` tool approved by
/// `cordon.toml`, short leases, arguments kept in the audit log (they name each call), and a
/// token that reads every session and record.
fn prepare_home(bin: &Path, home: &Path, probe: &Path, service: &str) -> PathBuf {
    write_token_with_scopes(home, Some("sessions:all,audit:all"));
    let grant = format!("net:http://{service}:trusted");
    cordon(
        bin,
        home,
        &[
            "plugin",
            "install",
            probe.to_str().expect("a UTF-8 path"),
            "--grant",
            &grant,
            "--yes",
        ],
    );
    let config = home.join("crash.toml");
    std::fs::write(
        &config,
        "[store]\nlease_secs = 2\n\n[audit]\nkeep_arguments = true\n\n\
         [approval.tools]\n\"probe.http\" = \"auto\"\n\n\
         [serve.limits]\nrequests_per_second = 100000\nrequest_burst = 100000\n",
    )
    .expect("write the config");
    config
}

/// The ids of the calls named in `text` (`/call/<id>`).
fn call_ids(text: &str) -> Vec<String> {
    text.match_indices("/call/")
        .map(|(at, m)| {
            text[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|id| !id.is_empty())
        .collect()
}

/// The number of the model's answer that made call `call_<n>_<i>`.
fn answer_number(id: &str) -> Option<usize> {
    id.strip_prefix("call_")?.split('_').next()?.parse().ok()
}

/// How an audit record says its call ended: `ok`, the error's kind, or `not_run`.
fn outcome(record: &Value) -> String {
    let outcome = &record["outcome"];
    match outcome["status"].as_str() {
        Some("error") => outcome["kind"].as_str().unwrap_or("error").to_string(),
        Some(status) => status.to_string(),
        None => "unknown".to_string(),
    }
}

/// One audit record of a call, as the checks need it.
struct Record {
    session: String,
    call_id: String,
    outcome: String,
}

/// What the sessions and the audit log hold once everything settled.
#[derive(Default)]
struct Found {
    /// Each acknowledged message's count in its session's history, and whether its
    /// `turn_started` event came.
    acknowledged: Vec<(String, String, usize, bool)>,
    /// Unacknowledged messages the history holds anyway.
    unacknowledged_kept: usize,
    /// Calls in the histories, with their session.
    recorded: BTreeMap<String, String>,
    /// Audit records by call (the id in its URL).
    records: BTreeMap<String, Vec<Record>>,
    /// Sessions left `failed`.
    failed: Vec<String>,
}

async fn read_back(http: &reqwest::Client, shared: &Shared, tallies: &[Tally]) -> Found {
    let mut found = Found::default();
    for tally in tallies {
        for id in &tally.sessions {
            let Some(session) = get_json(http, shared, &format!("/api/v1/sessions/{id}")).await
            else {
                found.failed.push(format!("{id} (unreadable)"));
                continue;
            };
            if session["session"]["state"] == "failed" {
                found.failed.push(id.clone());
            }
            let messages = session["messages"].as_array().cloned().unwrap_or_default();
            let users: Vec<&str> = messages
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .collect();
            for (s, text, started) in &tally.acknowledged {
                if s == id {
                    let n = users.iter().filter(|u| **u == text).count();
                    found
                        .acknowledged
                        .push((id.clone(), text.clone(), n, *started));
                }
            }
            found.unacknowledged_kept += tally
                .unacknowledged
                .iter()
                .filter(|(s, text)| s == id && users.contains(&text.as_str()))
                .count();
            for m in messages.iter().filter(|m| m["role"] == "assistant") {
                for call in call_ids(&m.to_string()) {
                    found.recorded.insert(call, id.clone());
                }
            }
            let path = format!("/api/v1/audit?session={id}&kind=tool_call&limit=10000");
            let audit = get_json(http, shared, &path).await.unwrap_or_default();
            for record in audit["records"].as_array().into_iter().flatten() {
                let named = record["arguments"]["url"]
                    .as_str()
                    .map(call_ids)
                    .unwrap_or_default();
                let call = named
                    .first()
                    .cloned()
                    .unwrap_or_else(|| format!("(no id: {record})"));
                found.records.entry(call).or_default().push(Record {
                    session: id.clone(),
                    call_id: record["call_id"].as_str().unwrap_or("?").to_string(),
                    outcome: outcome(record),
                });
            }
        }
    }
    found
}

/// The figures, and every broken invariant with the ids to find it by.
struct Report {
    lines: Vec<(String, String)>,
    violations: Vec<String>,
}

fn check(found: &Found, hits: &[Hit], served_at_kill: &[usize], tallies: &[Tally]) -> Report {
    let mut violations = Vec::new();
    let mut executions: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for hit in hits {
        executions.entry(&hit.id).or_default().push(hit.epoch);
    }
    let acknowledged = found.acknowledged.len();
    let lost: Vec<_> = found.acknowledged.iter().filter(|a| a.2 == 0).collect();
    let twice: Vec<_> = found.acknowledged.iter().filter(|a| a.2 > 1).collect();
    for (session, text, _, started) in &lost {
        let event = if *started {
            "after its turn_started event"
        } else {
            "before any event of its turn"
        };
        violations.push(format!(
            "acknowledged message lost: session {session}, {text:?} (the client had the 200 and \
             then the connection broke {event})"
        ));
    }
    let lost_started = lost.iter().filter(|a| a.3).count();
    for (session, text, n, _) in &twice {
        violations.push(format!(
            "acknowledged message {n} times in the history: session {session}, {text:?}"
        ));
    }
    let run_twice: Vec<_> = executions.iter().filter(|(_, e)| e.len() > 1).collect();
    for (id, epochs) in &run_twice {
        let session = found.recorded.get(**id).map_or("?", String::as_str);
        violations.push(format!(
            "call {id} (session {session}) reached the service {} times, after kills {epochs:?}",
            epochs.len()
        ));
    }
    let unrecorded: Vec<_> = executions
        .keys()
        .filter(|id| !found.recorded.contains_key(**id))
        .collect();
    for id in &unrecorded {
        violations.push(format!(
            "call {id} reached the service but is in no history"
        ));
    }
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut double = 0;
    for (id, records) in &found.records {
        for r in records {
            *outcomes.entry(r.outcome.as_str()).or_default() += 1;
        }
        if records.len() > 1 {
            double += 1;
            let all: Vec<String> = records
                .iter()
                .map(|r| format!("{}/{} {}", r.session, r.call_id, r.outcome))
                .collect();
            violations.push(format!(
                "call {id} has {} audit records: {all:?}",
                all.len()
            ));
        }
        if records.iter().any(|r| r.outcome == "ok") && !executions.contains_key(id.as_str()) {
            violations.push(format!(
                "call {id} ({}/{}) is recorded ok but never reached the service",
                records[0].session, records[0].call_id
            ));
        }
    }
    let without: Vec<_> = found
        .recorded
        .iter()
        .filter(|(id, _)| !found.records.contains_key(*id))
        .collect();
    for (id, session) in &without {
        let reached = if executions.contains_key(id.as_str()) {
            "reached the service"
        } else {
            "never reached the service"
        };
        violations.push(format!(
            "call {id} (session {session}) has no audit record; it {reached}"
        ));
    }
    let interrupted: Vec<&String> = found
        .records
        .iter()
        .filter(|(_, r)| r.iter().any(|r| r.outcome == "interrupted"))
        .map(|(id, _)| id)
        .collect();
    let interrupted_reached = interrupted
        .iter()
        .filter(|id| executions.contains_key(id.as_str()))
        .count();
    // A call is the next host's when the model made it before a kill and it reached the
    // service after one.
    let answered_in =
        |id: &str| answer_number(id).map(|n| served_at_kill.iter().filter(|&&k| k < n).count());
    let after_restart = executions
        .iter()
        .filter(|(id, epochs)| answered_in(id).is_some_and(|e| epochs[0] > e))
        .count();
    let unacknowledged: usize = tallies.iter().map(|t| t.unacknowledged.len()).sum();
    let refused: usize = tallies.iter().map(|t| t.refused).sum();
    let sessions: usize = tallies.iter().map(|t| t.sessions.len()).sum();
    let records: usize = found.records.values().map(Vec::len).sum();
    let outcomes: Vec<String> = outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let lines = vec![
        ("sessions".into(), sessions.to_string()),
        (
            "messages acknowledged".into(),
            format!(
                "{acknowledged}: lost {} ({lost_started} of them after their turn_started \
                 event), in the history twice {}",
                lost.len(),
                twice.len()
            ),
        ),
        (
            "messages not acknowledged (the host died first) / refused".into(),
            format!(
                "{unacknowledged} (in the history anyway: {}) / {refused}",
                found.unacknowledged_kept
            ),
        ),
        (
            "calls in the histories".into(),
            found.recorded.len().to_string(),
        ),
        (
            "executions the service saw".into(),
            format!(
                "{}: run twice {}, in no history {}",
                hits.len(),
                run_twice.len(),
                unrecorded.len()
            ),
        ),
        (
            "audit records".into(),
            format!(
                "{records} ({}): calls with more than one {double}, calls without one {}",
                outcomes.join(", "),
                without.len()
            ),
        ),
        (
            "closed as interrupted".into(),
            format!(
                "{}: {interrupted_reached} had reached the service, {} never had",
                interrupted.len(),
                interrupted.len() - interrupted_reached
            ),
        ),
        (
            "started only after a restart".into(),
            after_restart.to_string(),
        ),
    ];
    Report { lines, violations }
}

/// `--kill-ms MIN-MAX` (or one number).
fn kill_range(args: &[String]) -> (u64, u64) {
    let text = arg(args, "--kill-ms").unwrap_or_else(|| "2000-6000".to_string());
    let (low, high) = text.split_once('-').unwrap_or((&text, &text));
    let parse = |v: &str| -> u64 {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("--kill-ms takes MIN-MAX in ms, not {text:?}"))
    };
    let (low, high) = (
        parse(low).clamp(100, 600_000),
        parse(high).clamp(100, 600_000),
    );
    (low.min(high), low.max(high))
}

/// The soak the module docs describe, with `args` as its command line: whether every
/// invariant held (a broken one keeps the home, with what was found in `violations.txt`).
pub async fn run(args: &[String]) -> bool {
    let args = args.to_vec();
    let clients = number(&args, "--clients", 6).clamp(1, 64);
    let kills = number(&args, "--kills", 20).min(1000);
    let seconds = number(&args, "--seconds", 900).clamp(1, 7200) as u64;
    let per_session = number(&args, "--messages", 10).max(1);
    let calls = number(&args, "--calls", 6).clamp(1, 32);
    let call_ms = number(&args, "--call-ms", 200).min(10_000) as u64;
    let (kill_low, kill_high) = kill_range(&args);
    let seed = arg(&args, "--seed")
        .map(|s| s.parse().expect("--seed takes a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let store = arg(&args, "--store").unwrap_or_else(|| "sqlite".to_string());
    assert!(
        store == "sqlite" || store == "postgres",
        "--store takes sqlite or postgres"
    );
    let bin = file_arg(&args, "--cordon", "target/debug/cordon");
    let probe = file_arg(&args, "--probe", "target/fixtures/probe.wasm");
    let _ = rustls::crypto::ring::default_provider().install_default();

    let home = tempfile::Builder::new()
        .prefix("cordon-crash-")
        .tempdir()
        .expect("a temporary home");
    let epoch = Arc::new(AtomicUsize::new(0));
    let service = Service::start(epoch.clone(), call_ms, seed);
    let config = prepare_home(&bin, home.path(), &probe, &service.addr);
    let url = format!("http://{}/call/{{call_id}}", service.addr);
    let model = ScriptedServer::start(Script::by_role(
        Step::tool_calls(
            (0..calls)
                .map(|_| ScriptedCall::new("http", json!({ "url": url })))
                .collect(),
        ),
        Step::text("Every call is settled."),
    ))
    .await
    .expect("start the scripted model");
    let cluster = (store == "postgres").then(cordon_tests::postgres::PgCluster::start);
    let mut host_args = vec![
        "--config".to_string(),
        config.to_str().expect("a UTF-8 home").to_string(),
        "--llm-url".to_string(),
        model.base_url(),
        "--model".to_string(),
        "scripted".to_string(),
    ];
    if let Some(cluster) = &cluster {
        host_args.extend(["--store".to_string(), cluster.database()]);
    }
    let host = Host {
        bin,
        home: home.path().to_path_buf(),
        args: host_args,
    };
    println!(
        "serve_crash: {store}, {clients} clients, up to {kills} kills (one every {:.1}-{:.1} s \
         after the host listens) within {seconds} s, {calls} calls a message, seed {seed}",
        kill_low as f64 / 1e3,
        kill_high as f64 / 1e3
    );

    let started = Instant::now();
    let (mut serve, base) = host.start();
    let shared = Arc::new(Shared {
        base: RwLock::new(base),
        stop: AtomicBool::new(false),
        acknowledged: AtomicUsize::new(0),
    });
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client");
    let running: Vec<_> = (0..clients)
        .map(|n| tokio::spawn(client(n, per_session, http.clone(), shared.clone())))
        .collect();

    let mut rng = Rng(seed.rotate_left(17) | 1);
    let mut served_at_kill = Vec::new();
    let budget = Duration::from_secs(seconds);
    while served_at_kill.len() < kills && started.elapsed() < budget {
        let up = Duration::from_millis(rng.between(kill_low, kill_high));
        tokio::time::sleep(up.min(budget.saturating_sub(started.elapsed()))).await;
        if started.elapsed() >= budget {
            break;
        }
        serve.kill9();
        tokio::time::sleep(AFTER_KILL).await;
        served_at_kill.push(model.served());
        // Every request's body would be kept otherwise, well over a gigabyte in a run of a
        // hundred kills.
        model.forget_requests();
        epoch.store(served_at_kill.len(), Ordering::SeqCst);
        let (next, base) = host.start();
        serve = next;
        *shared.base.write().unwrap() = base;
        println!(
            "  kill {} at {:.1} s, after {:.1} s up: {} messages acknowledged so far",
            served_at_kill.len(),
            started.elapsed().as_secs_f64(),
            up.as_secs_f64(),
            shared.acknowledged.load(Ordering::SeqCst)
        );
    }
    // The last host works under the same load for as long as the others before the clients
    // stop.
    let last = Duration::from_millis(rng.between(kill_low, kill_high));
    tokio::time::sleep(last.min(budget.saturating_sub(started.elapsed()))).await;
    let killing = started.elapsed();
    shared.stop.store(true, Ordering::SeqCst);
    let mut tallies = Vec::new();
    let mut errors = Vec::new();
    for task in running {
        match tokio::time::timeout(REQUEST_TIMEOUT * 2, task).await {
            Ok(Ok(tally)) => tallies.push(tally),
            _ => errors.push("a client did not stop".to_string()),
        }
    }
    let settle_start = Instant::now();
    for tally in &tallies {
        for id in &tally.sessions {
            let left = FINAL_SETTLE.saturating_sub(settle_start.elapsed());
            if !wait_settled(&http, &shared, id, left, false).await {
                errors.push(format!("session {id} did not settle after the last kill"));
            }
        }
    }
    let found = read_back(&http, &shared, &tallies).await;
    let hits = std::mem::take(&mut *service.hits.lock().unwrap());
    let mut report = check(&found, &hits, &served_at_kill, &tallies);
    drop(serve);
    drop(cluster);
    errors.extend(tallies.iter().flat_map(|t| t.errors.iter().cloned()));
    report.violations.extend(errors);

    println!(
        "  {} kills in {:.0} s; settled {:.0} s later; {} model requests",
        served_at_kill.len(),
        killing.as_secs_f64(),
        settle_start.elapsed().as_secs_f64(),
        model.served()
    );
    println!("| {store} | |\n| --- | --- |");
    println!("| kills | {} |", served_at_kill.len());
    for (what, figure) in &report.lines {
        println!("| {what} | {figure} |");
    }
    if !found.failed.is_empty() {
        println!("  sessions left failed: {:?}", found.failed);
    }
    if report.violations.is_empty() {
        return true;
    }
    let kept = home.keep();
    let mut all = report.violations.join("\n");
    all.push('\n');
    let hits_log: String = hits
        .iter()
        .map(|h| format!("{} after kill {}\n", h.id, h.epoch))
        .collect();
    let _ = std::fs::write(kept.join("violations.txt"), &all);
    let _ = std::fs::write(kept.join("service.log"), hits_log);
    for v in report.violations.iter().take(20) {
        eprintln!("  broken: {v}");
    }
    eprintln!(
        "serve_crash: {} invariants broken; the home, violations.txt and the service's record \
         (service.log) are kept in {}",
        report.violations.len(),
        kept.display()
    );
    false
}
