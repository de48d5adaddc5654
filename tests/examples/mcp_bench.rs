//! Cordon as an MCP server, measured against a baseline in the same run.
//!
//! 1. **stdio round trip.** One MCP client (rmcp) calls a no-op tool over stdio, alternately
//!    through `cordon mcp` (the `noop` fixture component, a fresh sandbox per call, the audit
//!    log written) and through a minimal native rmcp server doing the same no-op (this program,
//!    re-run with `--native-noop-server`). Medians per call and their ratio (target ≤ 1.2×).
//!    The native server is also run on Cordon's own stdio transport (`--native-noop-server
//!    --cordon-transport`), which reads and writes pipes on the runtime's thread where rmcp's
//!    uses helper threads: the ratio to that one is what the sandbox, policy and audit cost.
//! 2. **Concurrent calls over Streamable HTTP.** `--concurrent` (1,000) no-op `tools/call`s at
//!    once against `cordon serve`'s `/mcp` (protocol 2026-07-28, one POST each): all must
//!    succeed; calls per second and the server's peak resident memory (target < 512 MiB).
//!
//! `cargo run --release -p cordon-tests --example mcp_bench -- [--cordon target/release/cordon]
//! [--noop target/fixtures/noop.wasm] [--calls 2000] [--concurrent 1000]`. Everything listens on
//! 127.0.0.1; every loop is bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common {
    pub mod mcp_client;
}
use common::mcp_client::{calls, connect};
use cordon_tests::bench::{TOKEN, cordon, file_arg, number, start_serve, status_kib, write_token};
use rmcp::model::{CallToolRequestParams, CallToolResponse, ServerCapabilities, ServerConfig};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

const NATIVE_FLAG: &str = "--native-noop-server";
const OWN_TRANSPORT_FLAG: &str = "--cordon-transport";
/// The longest the concurrent calls may take together.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// The baseline: an MCP server whose one tool does nothing, natively.
struct NativeNoop;

impl ServerHandler for NativeNoop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        let schema = serde_json::Map::from_iter([("type".to_string(), json!("object"))]);
        let tool = rmcp::model::Tool::new("noop", "Does nothing.", Arc::new(schema));
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(rmcp::model::CallToolResult::success(vec![]).into())
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// One no-op `tools/call` on protocol 2026-07-28 (stateless: one POST, the answer as an SSE
/// event or JSON).
async fn http_call(client: &reqwest::Client, url: &str, id: usize) -> Result<(), String> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "noop", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "mcp_bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    });
    let response = client
        .post(url)
        .bearer_auth(TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "noop")
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    let message = text
        .lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| !d.trim().is_empty()))
        .unwrap_or(&text);
    let value: Value = serde_json::from_str(message).map_err(|e| format!("{e}: {text}"))?;
    if value["result"]["isError"] != json!(false) {
        return Err(format!("not a successful result: {value}"));
    }
    Ok(())
}

async fn native_server(cordon_transport: bool) {
    let service = if cordon_transport {
        NativeNoop.serve(cordon_mcp::StdioTransport::new()).await
    } else {
        NativeNoop.serve(rmcp::transport::stdio()).await
    }
    .expect("serve stdio");
    let _ = service.waiting().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == NATIVE_FLAG) {
        native_server(args.iter().any(|a| a == OWN_TRANSPORT_FLAG)).await;
        return;
    }
    // Children run in the home: their paths must not depend on this directory.
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    let noop = file_arg(&args, "--noop", "target/fixtures/noop.wasm");
    let n = number(&args, "--calls", 2000).max(10);
    let concurrent = number(&args, "--concurrent", 1000).max(1);
    let dir = tempfile::tempdir().expect("temporary home");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home directory");
    cordon(
        &bin,
        &home,
        &["plugin", "install", noop.to_str().expect("path")],
    );
    write_token(&home);

    // 1. stdio: the same client, alternating rounds, so drift affects both alike.
    let mut cordon_cmd = tokio::process::Command::new(&bin);
    cordon_cmd
        .arg("--home")
        .arg(&home)
        .arg("mcp")
        .current_dir(&home);
    cordon_cmd
        .env_remove("CORDON_CONFIG")
        .env_remove("CORDON_STORE");
    let through_cordon = connect(cordon_cmd).await;
    // The same, sending a span of every call to an OTLP/HTTP receiver (`[telemetry]`).
    let collector = cordon_tests::otlp::Collector::start();
    let mut traced_cmd = tokio::process::Command::new(&bin);
    traced_cmd
        .arg("--home")
        .arg(&home)
        .arg("mcp")
        .current_dir(&home)
        .env_remove("CORDON_CONFIG")
        .env_remove("CORDON_STORE")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint);
    let traced = connect(traced_cmd).await;
    // And with every trace sampled out: the spans made, none sent.
    let sampled_out = home.join("sampled-out.toml");
    std::fs::write(
        &sampled_out,
        format!(
            "[telemetry]\notlp_endpoint = \"{}\"\nsample_ratio = 0.0\n",
            collector.endpoint
        ),
    )
    .expect("write a config");
    let mut unsampled_cmd = tokio::process::Command::new(&bin);
    unsampled_cmd
        .arg("--home")
        .arg(&home)
        .arg("mcp")
        .arg("--config")
        .arg(&sampled_out)
        .current_dir(&home)
        .env_remove("CORDON_CONFIG")
        .env_remove("CORDON_STORE");
    let unsampled = connect(unsampled_cmd).await;
    let mut native_cmd = tokio::process::Command::new(std::env::current_exe().expect("exe"));
    native_cmd.arg(NATIVE_FLAG);
    let native = connect(native_cmd).await;
    let mut own_cmd = tokio::process::Command::new(std::env::current_exe().expect("exe"));
    own_cmd.arg(NATIVE_FLAG).arg(OWN_TRANSPORT_FLAG);
    let native_own = connect(own_cmd).await;
    for client in [&through_cordon, &native, &native_own, &traced, &unsampled] {
        calls(client, 100).await;
    }
    let mut unsampled_times = Vec::new();
    let (mut cordon_times, mut native_times, mut own_times) = (Vec::new(), Vec::new(), Vec::new());
    let mut traced_times = Vec::new();
    let rounds = 5;
    for _ in 0..rounds {
        native_times.extend(calls(&native, n / rounds).await);
        own_times.extend(calls(&native_own, n / rounds).await);
        cordon_times.extend(calls(&through_cordon, n / rounds).await);
        traced_times.extend(calls(&traced, n / rounds).await);
        unsampled_times.extend(calls(&unsampled, n / rounds).await);
    }
    // The traced server sends a batch every 5 s (and when 512 are waiting).
    let traced_calls = 100 + n / rounds * rounds;
    let deadline = Instant::now() + Duration::from_secs(10);
    while collector.spans().len() < traced_calls && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = collector.spans().len();
    for client in [through_cordon, native, native_own, traced, unsampled] {
        let _ = client.cancel().await;
    }
    let (c, b, o) = (
        median(cordon_times),
        median(native_times),
        median(own_times),
    );
    let t = median(traced_times);
    let u = median(unsampled_times);
    println!("MCP over stdio, no-op tools/call round trip ({n} calls each, same rmcp client):");
    println!(
        "  native rmcp server (no sandbox)                  {:>10}",
        micros(b)
    );
    println!(
        "  native rmcp server on cordon's stdio transport   {:>10}",
        micros(o)
    );
    println!(
        "  cordon mcp (fresh sandbox, audit log)            {:>10}",
        micros(c)
    );
    println!(
        "  ratio cordon / native                            {:>9.2}×   (target ≤ 1.2×)",
        c.as_secs_f64() / b.as_secs_f64()
    );
    println!(
        "  ratio cordon / native on the same transport      {:>9.2}×   (sandbox, policy, audit)",
        c.as_secs_f64() / o.as_secs_f64()
    );
    println!(
        "  cordon mcp sending a span per call over OTLP     {:>10}   ({sent} spans received)",
        micros(t)
    );
    println!(
        "  ratio traced / untraced                          {:>9.2}×",
        t.as_secs_f64() / c.as_secs_f64()
    );
    println!(
        "  cordon mcp with every trace sampled out          {:>10}   ({:.2}× untraced)",
        micros(u),
        u.as_secs_f64() / c.as_secs_f64()
    );

    // 2. Streamable HTTP: all calls at once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (serve, base) = start_serve(&bin, &home, &[]);
    let url = format!("{base}/mcp");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("HTTP client");
    http_call(&client, &url, 0).await.expect("a first call");
    let pid = serve.0.id();
    let started = Instant::now();
    let tasks: Vec<_> = (1..=concurrent)
        .map(|id| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { http_call(&client, &url, id).await })
        })
        .collect();
    let results = tokio::time::timeout(RUN_TIMEOUT, futures::future::join_all(tasks))
        .await
        .expect("the concurrent calls took longer than the run's timeout");
    let took = started.elapsed();
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(e.to_string()),
        })
        .collect();
    let peak = status_kib(pid, "VmHWM:").unwrap_or(0);
    drop(serve);
    println!(
        "MCP over Streamable HTTP, {concurrent} no-op tools/calls at once (cordon serve /mcp):"
    );
    println!(
        "  {} succeeded, {} failed in {:.2} s: {:.0} calls/s",
        concurrent - failed.len(),
        failed.len(),
        took.as_secs_f64(),
        concurrent as f64 / took.as_secs_f64()
    );
    println!(
        "  cordon serve peak RSS (VmHWM) {:.1} MiB (target < 512 MiB)",
        peak as f64 / 1024.0
    );
    if let Some(first) = failed.first() {
        panic!("{} calls failed; the first: {first}", failed.len());
    }
}
