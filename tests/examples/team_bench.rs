//! Several `cordon serve`s on one PostgreSQL store, as a team deploys them, measured:
//!
//! 1. **An answer given on another host.** Three hosts; a turn on host A waits for approval,
//!    and the answer is sent to host B (the store takes it; A hears of it through PostgreSQL's
//!    `LISTEN/NOTIFY`) or, alternately, to host A itself (the baseline: no store in between).
//!    The time from sending the answer to the turn's `approval_given` event, `--questions`
//!    times each: medians and p90s (target ≤ 50 ms at p50 across hosts).
//! 2. **Turns per second through the load balancer.** haproxy (round-robin) in front of one
//!    host, then of three, on the same store; `--clients` clients send `--turns` Chat
//!    Completions requests (each a turn of a new session: one model request, the session and
//!    its turn recorded in the store), alternately twice each. Turns per second, and each
//!    request's median time.
//!
//! `cargo run --release -p cordon-tests --example team_bench -- [--cordon
//! target/release/cordon] [--questions 40] [--turns 400] [--clients 8]`. The hosts, the
//! scripted model, PostgreSQL and haproxy all listen on 127.0.0.1; every loop is bounded.

use std::time::{Duration, Instant};

use cordon_scripted_llm::{Script, ScriptedServer, Step};
use cordon_tests::balancer::{Balancer, free_port};
use cordon_tests::bench::{file_arg, number};
use cordon_tests::serve::Served;
use cordon_tests::support::probe_home;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn percentile(values: &mut [Duration], p: usize) -> Duration {
    values.sort();
    values[(values.len() * p / 100).min(values.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Three hosts on a fresh PostgreSQL database, answering to `public` (a balancer's port).
fn hosts(model: &str, public: u16) -> (cordon_tests::TestHome, Vec<Served>) {
    let (home, _data) = probe_home(&[]);
    let config = home.scratch("team").join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nlease_secs = 5\n\n[serve]\npublic_url = \"http://127.0.0.1:{public}\"\n\n\
             [serve.limits]\nrequests_per_second = 1000000\nrequest_burst = 1000000\n"
        ),
    )
    .expect("write the config");
    let url = cordon_tests::postgres::shared().database();
    let hosts = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|name| {
            Served::start(
                &home,
                &[
                    ("CORDON_LLM_URL", model),
                    ("CORDON_MODEL", "scripted"),
                    ("CORDON_HOST_NAME", name),
                ],
                &["--config", config.to_str().unwrap(), "--store", &url],
            )
        })
        .collect();
    (home, hosts)
}

/// Part 1: (answered on another host, answered on the driving host).
fn answers(model: &str, questions: usize) -> (Vec<Duration>, Vec<Duration>) {
    let (_home, hosts) = hosts(model, free_port());
    let (a, b) = (&hosts[0], &hosts[1]);
    let (mut across, mut here) = (Vec::new(), Vec::new());
    for i in 0..questions * 2 {
        let session = format!("q{i}");
        let created = a.post("/api/v1/sessions", json!({"id": session}));
        assert_eq!(created.status, 201, "{}", created.text);
        let events = a.stream(
            &format!("/api/v1/sessions/{session}/messages"),
            json!({"text": "write it"}),
        );
        let asked = events.until("approval_needed", WAIT);
        let call_id = asked
            .last()
            .and_then(|e| e["request"]["call_id"].as_str())
            .expect("a question")
            .to_string();
        // The answer's host: B, or A itself, in turn.
        let to = if i % 2 == 0 { b } else { a };
        let started = Instant::now();
        let answered = to.post(
            &format!("/api/v1/approvals/{session}/{call_id}"),
            json!({"answer": "yes"}),
        );
        assert_eq!(answered.status, 200, "{}", answered.text);
        let given = events.until("approval_given", WAIT);
        assert_eq!(
            given.last().map(|e| e["type"].clone()),
            Some(Value::from("approval_given")),
            "{given:?}"
        );
        let took = started.elapsed();
        if i % 2 == 0 {
            across.push(took)
        } else {
            here.push(took)
        }
        events.until("turn_finished", WAIT);
    }
    (across, here)
}

/// Part 2: turns per second and each turn's median through a balancer in front of `serving`
/// of the hosts.
fn turns(
    hosts: &[Served],
    serving: usize,
    turns: usize,
    clients: usize,
    port: u16,
) -> (f64, Duration) {
    let addrs: Vec<&str> = hosts[..serving].iter().map(|h| h.addr.as_str()).collect();
    let dir = tempfile::tempdir().expect("a directory");
    let balancer = Balancer::start(port, &addrs, dir.path());
    let token = hosts[0].token.clone();
    let each = turns / clients;
    let started = Instant::now();
    let times: Vec<Duration> = std::thread::scope(|scope| {
        let sent: Vec<_> = (0..clients)
            .map(|client| {
                let (addr, token) = (balancer.addr.clone(), token.clone());
                scope.spawn(move || {
                    let front = Served::at(&addr, &token);
                    let deadline = Instant::now() + Duration::from_secs(300);
                    let mut times = Vec::new();
                    for i in 0..each {
                        assert!(Instant::now() < deadline, "the run took over 5 minutes");
                        let start = Instant::now();
                        let answer = front.post(
                            "/v1/chat/completions",
                            json!({"model": "scripted", "messages":
                                   [{"role": "user", "content": format!("c{client} t{i}")}]}),
                        );
                        assert_eq!(answer.status, 200, "{}", answer.text);
                        times.push(start.elapsed());
                    }
                    times
                })
            })
            .collect();
        sent.into_iter()
            .flat_map(|t| t.join().expect("a client"))
            .collect()
    });
    let elapsed = started.elapsed();
    let mut times = times;
    let rate = times.len() as f64 / elapsed.as_secs_f64();
    (rate, percentile(&mut times, 50))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    // SAFETY: set before any thread starts; the harness reads it to start hosts.
    unsafe { std::env::set_var("CORDON_BIN", &bin) };
    let questions = number(&args, "--questions", 40);
    let total = number(&args, "--turns", 400);
    let clients = number(&args, "--clients", 8);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");

    let asking = rt
        .block_on(ScriptedServer::start(Script::by_role(
            Step::tool_calls(vec![cordon_scripted_llm::ScriptedCall::new(
                "fs",
                json!({"op": "append", "path": "/data/bench.txt", "content": "1"}),
            )]),
            Step::text("Written."),
        )))
        .expect("the scripted model");
    let (mut across, mut here) = answers(&asking.base_url(), questions);
    println!("## An answer given on another host reaches the waiting turn\n");
    println!("| answered through | p50 | p90 |");
    println!("| --- | --- | --- |");
    for (name, values) in [
        ("host B (store, LISTEN/NOTIFY)", &mut across),
        ("host A, which drives the turn", &mut here),
    ] {
        println!(
            "| {name} | {} | {} |",
            ms(percentile(values, 50)),
            ms(percentile(values, 90))
        );
    }

    let talking = rt
        .block_on(ScriptedServer::start(Script::by_role(
            Step::text("ok"),
            Step::text("ok"),
        )))
        .expect("the scripted model");
    let port = free_port();
    let (_home, hosts) = hosts(&talking.base_url(), port);
    println!("\n## Turns per second through haproxy ({clients} clients, {total} turns a run)\n");
    println!("| hosts behind haproxy | turns per second | p50 per turn |");
    println!("| --- | --- | --- |");
    for serving in [1, 3, 1, 3] {
        let (rate, p50) = turns(&hosts, serving, total, clients, port);
        println!("| {serving} | {rate:.0} | {} |", ms(p50));
    }
}
