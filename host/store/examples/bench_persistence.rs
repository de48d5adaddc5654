//! The cost of persistence: the same turn driven by the real engine ([`Agent::drive`]) with
//! nothing recorded ([`NoJournal`]) and with every transition recorded in a session store
//! ([`SessionJournal`]), interleaved in pairs so both see the machine in the same state.
//!
//! Each turn is one user message, one model answer with two tool calls, both calls run, and a
//! text answer: the scripted model server on loopback (in this process) answers by the role of
//! the last message, and the tools are two in-memory functions that return at once, so what
//! differs between the two sides of a pair is the journal alone. A wrapping journal counts the
//! transitions (and the audit records of the tool calls, which the store also appends).
//!
//! Reported per store: medians of both sides, and p50 and p90 of the added time per transition,
//! `(store turn − memory turn) / transitions`, over the pairs, with the median of the pairs'
//! ratios. The store turn is [`Agent::drive`] alone; taking the session (lease and load,
//! [`Store::drive`]) and giving it back at the end of a turn, as `cordon serve` does per turn,
//! are reported per turn beside it. SQLite in a temporary directory always; PostgreSQL too when
//! Debian's server programs are installed (a throwaway cluster listening on 127.0.0.1, with
//! `fsync=off` as the tests run it, so its figures leave out a real server's disk flushes).
//!
//! `cargo run --release -p cordon-store --example bench_persistence [-- --sessions N
//! --turns-per-session K --no-postgres]`
//!
//! `--growth` instead drives one session of 1,000 turns in a SQLite store, in step with the
//! same conversation in memory, and reports at 10, 100 and 1,000 turns what the session's
//! transitions take in the store, the time a turn spends recording its transitions, and the
//! time a turn takes in the store and in memory (medians of the ten turns before): a
//! transition records what changed, so doubling the turns at most doubles the size, and the
//! recording time stays flat.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_agent::{
    Agent, AgentConfig, AgentEvent, ApprovalAnswer, ApprovalRequest, AuditContext,
    CancellationToken, Cause, Content, Conversation, Driven, Frontend, GivenAnswer, Journal,
    JournalError, NoJournal, ToolFailure, ToolHints, ToolHost, ToolSpec, TurnInput, TurnIo,
    TurnOutcome, async_trait,
};
use cordon_core::AuditRecord;
use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use cordon_store::{NewSession, SessionSettings, Store, StoreOptions};
use serde_json::{Value, json};

/// Two tools that answer at once: the tool run is not what is measured.
struct CheapTools;

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        tool: name.into(),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object", "properties": {"key": {"type": "string"}}}),
        output_schema: None,
        hints: ToolHints {
            read_only: true,
            ..ToolHints::default()
        },
        plugin: "bench".into(),
        grants: Vec::new(),
        can_change_anything: false,
        digest: "sha256:00".into(),
        proven: Default::default(),
        reach: Default::default(),
        exposure: Default::default(),
    }
}

#[async_trait]
impl ToolHost for CheapTools {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![spec("lookup"), spec("count")]
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        _: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure> {
        Ok(vec![Content::Text(format!("{name}: {}", arguments["key"]))])
    }
}

/// Shows nothing; never asked (both tools run without asking).
struct Quiet;

#[async_trait]
impl Frontend for Quiet {
    fn event(&mut self, _: &AgentEvent) {}

    async fn approve(&mut self, _: &ApprovalRequest) -> GivenAnswer {
        GivenAnswer::new(ApprovalAnswer::No, "the benchmark")
    }
}

/// Counts what goes through to the journal it wraps.
struct Counting<'a> {
    inner: &'a mut dyn Journal,
    transitions: usize,
    audits: usize,
    /// Time spent recording transitions.
    recording: Duration,
}

impl<'a> Counting<'a> {
    fn new(inner: &'a mut dyn Journal) -> Self {
        Self {
            inner,
            transitions: 0,
            audits: 0,
            recording: Duration::ZERO,
        }
    }
}

#[async_trait]
impl Journal for Counting<'_> {
    async fn transition(
        &mut self,
        conversation: &Conversation,
        cause: &Cause,
    ) -> Result<(), JournalError> {
        self.transitions += 1;
        let start = Instant::now();
        let recorded = self.inner.transition(conversation, cause).await;
        self.recording += start.elapsed();
        recorded
    }

    async fn audit(&mut self, record: AuditRecord) -> Result<(), JournalError> {
        self.audits += 1;
        self.inner.audit(record).await
    }

    async fn close(&mut self) -> Result<(), JournalError> {
        self.inner.close().await
    }
}

/// One driven turn: how long [`Agent::drive`] took, and what it recorded.
struct Turn {
    time: Duration,
    transitions: usize,
    audits: usize,
    /// The part of `time` spent recording its transitions.
    recording: Duration,
}

async fn drive(
    agent: &Agent,
    conv: &mut Conversation,
    journal: &mut dyn Journal,
    text: String,
    session: Option<&str>,
) -> Turn {
    let mut counting = Counting::new(journal);
    let cancel = CancellationToken::new();
    let mut frontend = Quiet;
    let mut io = TurnIo {
        frontend: &mut frontend,
        journal: &mut counting,
        cancel: &cancel,
        suspend: None,
        audit: AuditContext {
            session: session.map(str::to_string),
            origin: "bench".to_string(),
            keep_arguments: false,
            requested_by: None,
        },
    };
    let start = Instant::now();
    let driven = agent.drive(conv, TurnInput::Message(text), &mut io).await;
    let time = start.elapsed();
    match driven {
        Ok(Driven::Finished(TurnOutcome::Answered)) => {}
        other => panic!("the turn did not end with an answer: {other:?}"),
    }
    Turn {
        time,
        transitions: counting.transitions,
        audits: counting.audits,
        recording: counting.recording,
    }
}

/// One pair of the same turn, in memory and in the store.
struct Pair {
    memory: Duration,
    store: Duration,
    /// Taking the session before the turn and giving it back after (`Store::drive`, release).
    lease: Duration,
    transitions: usize,
    audits: usize,
}

/// Runs `sessions` × `per_session` pairs on `store`; the first `warmup` sessions are not kept.
async fn measure(
    agent: &Agent,
    store: &Store,
    sessions: usize,
    per_session: usize,
    warmup: usize,
) -> Vec<Pair> {
    let mut pairs = Vec::with_capacity(sessions * per_session);
    for s in 0..warmup + sessions {
        let mut memory = Conversation::new();
        let id = store
            .create_session(NewSession {
                id: None,
                origin: "bench".to_string(),
                parent: None,
                settings: SessionSettings::default(),
                conversation: Conversation::new(),
                created_by: None,
            })
            .await
            .expect("create a session")
            .id;
        for t in 0..per_session {
            let text = format!("question {t} of session {s}");
            let in_memory = async {
                let mut none = NoJournal;
                drive(agent, &mut memory, &mut none, text.clone(), None).await
            };
            let in_store = async {
                let start = Instant::now();
                let (mut journal, mut conv) = store.drive(&id).await.expect("take the session");
                let turn = drive(agent, &mut conv, &mut journal, text.clone(), Some(&id)).await;
                journal.release().await.expect("give the session back");
                (turn, start.elapsed())
            };
            // Alternate which side goes first, so neither always follows the other.
            let (m, (st, whole)) = if (s + t) % 2 == 0 {
                let m = in_memory.await;
                (m, in_store.await)
            } else {
                let st = in_store.await;
                (in_memory.await, st)
            };
            assert_eq!(
                (m.transitions, m.audits),
                (st.transitions, st.audits),
                "both sides of a pair make the same transitions"
            );
            if s >= warmup {
                pairs.push(Pair {
                    memory: m.time,
                    store: st.time,
                    lease: whole - st.time,
                    transitions: st.transitions,
                    audits: st.audits,
                });
            }
        }
    }
    pairs
}

/// The `p` quantile (0..=1) of `values`, nearest rank.
fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(name: &str, pairs: &[Pair], target: &str) {
    let (transitions, audits) = (pairs[0].transitions, pairs[0].audits);
    let memory: Vec<f64> = pairs.iter().map(|p| ms(p.memory)).collect();
    let store: Vec<f64> = pairs.iter().map(|p| ms(p.store)).collect();
    let added: Vec<f64> = pairs
        .iter()
        .map(|p| (ms(p.store) - ms(p.memory)) / p.transitions as f64)
        .collect();
    let ratio: Vec<f64> = pairs.iter().map(|p| ms(p.store) / ms(p.memory)).collect();
    let lease: Vec<f64> = pairs.iter().map(|p| ms(p.lease)).collect();
    println!(
        "{name}: {} pairs of turns, {transitions} transitions and {audits} audit records per turn",
        pairs.len()
    );
    println!(
        "  turn (Agent::drive), median: memory {:.3} ms, store {:.3} ms; store/memory per pair: median {:.2}x",
        quantile(&memory, 0.5),
        quantile(&store, 0.5),
        quantile(&ratio, 0.5),
    );
    println!(
        "  added per transition: p50 {:.3} ms, p90 {:.3} ms{target}",
        quantile(&added, 0.5),
        quantile(&added, 0.9),
    );
    println!(
        "  per turn besides: take the session (lease, load) and give it back: p50 {:.3} ms, p90 {:.3} ms",
        quantile(&lease, 0.5),
        quantile(&lease, 0.9),
    );
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

fn postgres_installed() -> bool {
    std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.flatten()
                .any(|d| d.path().join("bin/initdb").is_file())
        })
        .unwrap_or(false)
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}"))
        })
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--growth") {
        return growth().await;
    }
    let sessions = arg(&args, "--sessions", 40).max(1);
    let per_session = arg(&args, "--turns-per-session", 8).max(1);
    let warmup = 2;
    let with_postgres = !args.iter().any(|a| a == "--no-postgres");

    let (model, agent) = scripted_agent().await;

    println!(
        "bench_persistence: {sessions} sessions of {per_session} turns per store (+{warmup} warm-up sessions), load average {}",
        load_average()
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!(
        "sqlite:{}",
        Path::new(dir.path()).join("sessions.db").display()
    );
    let store = Store::open(&url, StoreOptions::default())
        .await
        .expect("open the SQLite store");
    let pairs = measure(&agent, &store, sessions, per_session, warmup).await;
    report("SQLite", &pairs, " (target: p50 <= 1 ms)");
    store.close().await;

    if with_postgres && postgres_installed() {
        let url = cordon_tests::postgres::shared().database();
        let store = Store::open(&url, StoreOptions::default())
            .await
            .expect("open the PostgreSQL store");
        let pairs = measure(&agent, &store, sessions, per_session, warmup).await;
        report("PostgreSQL (throwaway cluster, fsync=off)", &pairs, "");
        store.close().await;
    } else if with_postgres {
        println!("PostgreSQL: skipped (no /usr/lib/postgresql/*/bin/initdb)");
    }
    println!(
        "load average at the end {}; {} model requests served",
        load_average(),
        model.served()
    );
}

/// The scripted model (answering by the role of the last message: two tool calls, then a
/// text) and an engine that asks it, with the cheap tools.
async fn scripted_agent() -> (ScriptedServer, Agent) {
    let model = ScriptedServer::start(Script::by_role(
        Step::tool_calls(vec![
            ScriptedCall::new("lookup", json!({"key": "region"})),
            ScriptedCall::new("count", json!({"key": "orders"})),
        ]),
        Step::text("The north region sold most last month: 1,204 orders."),
    ))
    .await
    .expect("start the scripted model");
    let mut config = AgentConfig::default();
    config.llm.url = model.base_url();
    config.llm.model = "scripted".to_string();
    let agent = Agent::new(config, Arc::new(CheapTools)).expect("make the engine");
    (model, agent)
}

/// `--growth`: one long session, in the store and in memory in step.
async fn growth() {
    let (_model, agent) = scripted_agent().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("sessions.db").display());
    let store = Store::open(&url, StoreOptions::default())
        .await
        .expect("open the SQLite store");
    let id = store
        .create_session(NewSession {
            id: Some("long".to_string()),
            origin: "bench".to_string(),
            parent: None,
            settings: SessionSettings::default(),
            conversation: Conversation::new(),
            created_by: None,
        })
        .await
        .expect("create a session")
        .id;
    let (mut journal, mut conv) = store.drive(&id).await.expect("take the session");
    let mut memory = Conversation::new();
    let (mut recording, mut stored, mut in_memory) = (Vec::new(), Vec::new(), Vec::new());
    println!("bench_persistence --growth: one SQLite session, turns recorded as they run");
    println!(
        "  turns   transitions' bytes   bytes per turn   recording p50   turn p50 store / memory (last 10)"
    );
    let mut last_bytes = 0usize;
    for t in 1..=1000usize {
        let text = format!("question {t}");
        let mut none = NoJournal;
        let (m, st) = if t % 2 == 0 {
            let m = drive(&agent, &mut memory, &mut none, text.clone(), None).await;
            (
                m,
                drive(&agent, &mut conv, &mut journal, text, Some(&id)).await,
            )
        } else {
            let st = drive(&agent, &mut conv, &mut journal, text.clone(), Some(&id)).await;
            (drive(&agent, &mut memory, &mut none, text, None).await, st)
        };
        recording.push(st.recording.as_secs_f64());
        stored.push(st.time.as_secs_f64());
        in_memory.push(m.time.as_secs_f64());
        if [10, 100, 1000].contains(&t) {
            let log = store.transitions(&id, 0).await.expect("the transitions");
            let bytes: usize = log
                .iter()
                .map(|r| r.tail_bytes + serde_json::to_string(&r.messages).map_or(0, |s| s.len()))
                .sum();
            let p50 = |v: &[f64]| quantile(&v[v.len() - 10..], 0.5) * 1e3;
            println!(
                "  {t:>5}   {bytes:>18}   {:>14}   {:>10.3} ms   {:>8.3} / {:.3} ms{}",
                bytes / t,
                p50(&recording),
                p50(&stored),
                p50(&in_memory),
                if last_bytes > 0 {
                    format!(
                        "   ({:.2}× the bytes of a tenth of the turns)",
                        bytes as f64 / last_bytes as f64
                    )
                } else {
                    String::new()
                }
            );
            last_bytes = bytes;
        }
    }
    journal.release().await.expect("give the session back");
    store.close().await;
}
