//! Cordon runtime benchmark (`make bench`): medians of compile, load from cache, instantiate,
//! and a warm no-op call with a fresh instance per call, for the smallest SDK plugin (the
//! `noop` fixture), for one importing every WASI interface (`probe`) and for a component
//! without Cordon's contract called through its typed exports (`typed`), compared in the same
//! run with the same no-op served by a minimal native MCP server (rmcp, stdio transport, child
//! process — this example re-executes itself as that server).
//!
//! Targets: no-op call ≤ 25 µs and ≥ 10× faster than MCP stdio; load from cache ≤ 5 ms; the
//! typed-exports no-op ≤ 1.5× the contract's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cordon_core::Limits;
use cordon_runtime::{Runtime, RuntimeConfig, Sandbox};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

const SERVER_FLAG: &str = "--mcp-noop-server";

/// The minimal native MCP server: one tool, `noop`, that returns an empty result.
#[derive(Clone)]
struct NoopServer;

impl ServerHandler for NoopServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({"type": "object"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "noop",
            "Does nothing.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![]).into())
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

fn fixture(name: &str) -> Result<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/fixtures")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .with_context(|| format!("reading {}; run `make plugins` first", path.display()))
}

async fn mcp_server() -> Result<()> {
    let service = NoopServer.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

async fn mcp_roundtrips(iterations: usize) -> Result<Duration> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg(SERVER_FLAG);
    let transport = rmcp::transport::TokioChildProcess::new(cmd)?;
    let client = ().serve(transport).await?;
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations + 50 {
        let start = Instant::now();
        client.call_tool(CallToolRequestParams::new("noop")).await?;
        if i >= 50 {
            times.push(start.elapsed());
        }
    }
    client.cancel().await?;
    Ok(median(times))
}

/// The closest MCP equivalent of Cordon's fresh instance per call: a new server process for
/// every call (spawn, initialize, call, shut down).
async fn mcp_fresh_process(iterations: usize) -> Result<Duration> {
    let exe = std::env::current_exe()?;
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg(SERVER_FLAG);
        let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd)?).await?;
        client.call_tool(CallToolRequestParams::new("noop")).await?;
        client.cancel().await?;
        times.push(start.elapsed());
    }
    Ok(median(times))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    if std::env::args().any(|a| a == SERVER_FLAG) {
        return mcp_server().await;
    }
    // The smallest plugin an author would write with the SDK: one tool, only the imports Rust's
    // standard library always brings.
    let wasm = fixture("noop")?;
    println!(
        "cordon runtime benchmark (noop fixture: one SDK tool, {} KiB)",
        wasm.len() / 1024
    );

    // Compile: no cache, every load compiles.
    let rt_nocache = Runtime::new(RuntimeConfig::default())?;
    let mut compile = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        rt_nocache.load(&wasm, None, &|_| {})?;
        compile.push(start.elapsed());
    }

    // Load from cache: a warm cache directory, each load reads, verifies and deserializes.
    let cache = tempfile::tempdir()?;
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().into()),
        ..RuntimeConfig::default()
    })?;
    // The first load compiles; later ones find the entry its pin describes.
    let pin = rt.load(&wasm, None, &|_| {})?.compiled_pin().cloned();
    let mut cached = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let p = rt.load(&wasm, pin.as_ref(), &|_| {})?;
        cached.push(start.elapsed());
        drop(p);
    }

    let plugin = rt.load(&wasm, pin.as_ref(), &|_| {})?.named("noop");
    let limits = Limits::default();
    let sandbox = Sandbox::default();
    let n = 5000;
    // Instantiate only (fresh store + WASI context + instance).
    let mut inst = Vec::with_capacity(n);
    for i in 0..n + 200 {
        let start = Instant::now();
        plugin.check_instantiate(&limits).await?;
        if i >= 200 {
            inst.push(start.elapsed());
        }
    }
    // Warm no-op: fresh instance per call, through the whole call path.
    let mut noop = Vec::with_capacity(n);
    for i in 0..n + 200 {
        let start = Instant::now();
        plugin.call_tool(&sandbox, "noop", "{}").await?;
        if i >= 200 {
            noop.push(start.elapsed());
        }
    }
    // The same no-op in the probe fixture, which imports every WASI interface (filesystem,
    // HTTP, sockets, clocks): instantiation links each import, used or not.
    // Interleaved with it, the same no-op with one read-only directory grant and a home to
    // keep it clear of, as a call from a home makes it: what opening the granted directory by
    // identity and checking it against Cordon's own state cost per call.
    let probe = rt.load(&fixture("probe")?, None, &|_| {})?.named("probe");
    let granted_dir = tempfile::tempdir()?;
    let home_dir = tempfile::tempdir()?;
    std::fs::create_dir(home_dir.path().join("cordon"))?;
    let granted = Sandbox {
        grants: [format!("fs:{}:/data:ro", granted_dir.path().display())
            .parse::<cordon_core::Grant>()?
            .resolve()?]
        .into_iter()
        .collect(),
        reserved: cordon_core::ReservedPaths::none().with(
            home_dir.path().join("cordon"),
            cordon_core::ReservedKind::Home,
        ),
        ..Sandbox::default()
    };
    let mut probe_noop = Vec::with_capacity(n);
    let mut probe_granted = Vec::with_capacity(n);
    for i in 0..n + 200 {
        let start = Instant::now();
        probe.call_tool(&sandbox, "noop", "{}").await?;
        let between = Instant::now();
        probe.call_tool(&granted, "noop", "{}").await?;
        if i >= 200 {
            probe_noop.push(between - start);
            probe_granted.push(between.elapsed());
        }
    }
    // A component without Cordon's contract: its `calc.noop` function (no parameters, no
    // result) and `calc.add` (two s32 in, one out) through the dynamic API, interleaved with
    // the contract's no-op (the noop fixture) so the ratio comes from one loop.
    let typed = rt.load(&fixture("typed")?, None, &|_| {})?.named("typed");
    let (mut contract_noop, mut typed_noop, mut typed_add) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for i in 0..n + 200 {
        let start = Instant::now();
        plugin.call_tool(&sandbox, "noop", "{}").await?;
        let contract_done = Instant::now();
        typed.call_tool(&sandbox, "calc_noop", "{}").await?;
        let noop_done = Instant::now();
        typed
            .call_tool(&sandbox, "calc_add", r#"{"a": 40, "b": 2}"#)
            .await?;
        if i >= 200 {
            contract_noop.push(contract_done - start);
            typed_noop.push(noop_done - contract_done);
            typed_add.push(noop_done.elapsed());
        }
    }
    let (contract_noop, typed_noop, typed_add) =
        (median(contract_noop), median(typed_noop), median(typed_add));
    let probe_noop = median(probe_noop);
    let probe_granted = median(probe_granted);
    let compile = median(compile);
    let cached = median(cached);
    let inst = median(inst);
    let noop = median(noop);
    let mcp = mcp_roundtrips(2000).await?;
    let mcp_fresh = mcp_fresh_process(20).await?;

    println!("compile (no cache)            {:>10}", fmt(compile));
    println!(
        "load from cache               {:>10}   (target ≤ 5 ms)",
        fmt(cached)
    );
    println!("instantiate (fresh store)     {:>10}", fmt(inst));
    println!(
        "no-op call, fresh instance    {:>10}   (target ≤ 25 µs)",
        fmt(noop)
    );
    println!(
        "no-op, probe fixture          {:>10}   (imports every WASI interface)",
        fmt(probe_noop)
    );
    println!(
        "no-op, probe, one fs grant    {:>10}   (+{} for the grant: opened by identity, kept off the home)",
        fmt(probe_granted),
        fmt(probe_granted.saturating_sub(probe_noop))
    );
    println!(
        "no-op, typed exports          {:>10}   ({:.2}× the cordon:tool no-op's {} in the same loop; target ≤ 1.5×)",
        fmt(typed_noop),
        typed_noop.as_secs_f64() / contract_noop.as_secs_f64(),
        fmt(contract_noop)
    );
    println!(
        "add(s32, s32), typed exports  {:>10}   (JSON arguments converted, result back)",
        fmt(typed_add)
    );
    println!(
        "no-op via MCP stdio (rmcp)    {:>10}   (warm server process)",
        fmt(mcp)
    );
    println!(
        "MCP, fresh process per call   {:>10}   (spawn + initialize + call)",
        fmt(mcp_fresh)
    );
    println!(
        "MCP stdio / cordon no-op      {:>9.1}×   (target ≥ 10×)",
        mcp.as_secs_f64() / noop.as_secs_f64()
    );
    println!(
        "MCP stdio / probe no-op       {:>9.1}×",
        mcp.as_secs_f64() / probe_noop.as_secs_f64()
    );
    println!(
        "MCP fresh process / cordon    {:>9.0}×",
        mcp_fresh.as_secs_f64() / noop.as_secs_f64()
    );
    bundled_loads(&cache)?;
    Ok(())
}

/// Load from cache of the bundled tools the way `cordon call` loads them: the component's
/// digest is already vouched for (a `stat` against its stamp), so the compiled code is mapped
/// from the cache without reading the component. The first load of each compiles it; the
/// second start must not.
fn bundled_loads(cache: &tempfile::TempDir) -> Result<()> {
    use sha2::Digest;
    let plugins = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins");
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().into()),
        ..RuntimeConfig::default()
    })?;
    for name in ["sql", "files", "python"] {
        let path = plugins.join(format!("{name}.wasm"));
        let Ok(bytes) = std::fs::read(&path) else {
            println!("load {name:<6} from cache      not built (run `make plugins`)");
            continue;
        };
        let sha = hex::encode(sha2::Sha256::digest(&bytes));
        let read = || Ok(bytes.clone());
        let pin = rt
            .load_digest(&sha, None, &read, &|_| {})?
            .compiled_pin()
            .cloned();
        let compiled_again = std::cell::Cell::new(false);
        let mut loads = Vec::new();
        for _ in 0..20 {
            let start = Instant::now();
            let plugin = rt.load_digest(&sha, pin.as_ref(), &read, &|e| {
                if !matches!(e, cordon_runtime::CompileEvent::CacheHit) {
                    compiled_again.set(true);
                }
            })?;
            loads.push(start.elapsed());
            drop(plugin);
        }
        println!(
            "load {name:<6} from cache     {:>10}   ({:.1} MB component{})",
            fmt(median(loads)),
            bytes.len() as f64 / 1e6,
            if compiled_again.get() {
                "; RECOMPILED on a second start"
            } else {
                ", no recompile"
            }
        );
    }
    Ok(())
}
