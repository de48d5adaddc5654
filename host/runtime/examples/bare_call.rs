//! The least any WebAssembly host must do to answer one tool call in a fresh process: the
//! floor that `make bench` (`tests/bench/tools.sh`) measures `cordon call` against.
//!
//! Plain wasmtime and wasmtime-wasi with their defaults, none of Cordon: no lock file, no digest
//! or tool-list checks, no argument validation, no limits (no epoch interruption, no pooling
//! allocator, no output or memory caps), one read-only preopen, read on the calling thread. It
//! loads the component's compiled code from a file (compiling it on the first run),
//! instantiates it, calls `call-tool` once and prints the result. What it costs against the
//! native program shows what starting a sandbox per call costs at all; `cordon call` against it
//! shows what Cordon adds.
//!
//!   bare_call COMPONENT.wasm COMPILED.cwasm HOST_DIR GUEST_DIR TOOL JSON

use std::path::Path;

use anyhow::{Context, Result, bail};
use wasmtime::component::{Component, Linker, ResourceTable, Val};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The compiled component: from `compiled` when it is there, else compiled now and saved.
fn load(engine: &Engine, wasm: &Path, compiled: &Path) -> Result<Component> {
    if !compiled.exists() {
        let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
        let code = engine.precompile_component(&bytes)?;
        std::fs::write(compiled, code)
            .with_context(|| format!("writing {}", compiled.display()))?;
    }
    // SAFETY: the file was written by `precompile_component` above (now or on an earlier run)
    // for this engine's configuration; wasmtime checks its header and engine compatibility.
    unsafe { Component::deserialize_file(engine, compiled) }
        .map_err(|e| anyhow::anyhow!("loading {}: {e:#}", compiled.display()))
}

async fn run(args: &[String]) -> Result<String> {
    let [wasm, compiled, host_dir, guest_dir, tool, json] = args else {
        bail!("usage: bare_call COMPONENT.wasm COMPILED.cwasm HOST_DIR GUEST_DIR TOOL JSON");
    };
    let mut config = Config::new();
    config.wasm_component_model(true);
    let engine = Engine::new(&config)?;
    let component = load(&engine, Path::new(wasm), Path::new(compiled))?;

    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    // Cordon's `types` interface has types only; a component importing it needs the instance.
    for (name, _) in component.component_type().imports(&engine) {
        if name.starts_with("cordon:tool/types@") {
            linker.instance(name)?;
        }
    }
    // File reads on the calling thread, as Cordon does, rather than a hop to tokio's blocking
    // pool for each one.
    let wasi = WasiCtx::builder()
        .preopened_dir(host_dir, guest_dir, FsPerms::ReadOnly)?
        .allow_blocking_current_thread(true)
        .build();
    let mut store = Store::new(
        &engine,
        Host {
            wasi,
            table: ResourceTable::new(),
        },
    );
    let instance = linker.instantiate_async(&mut store, &component).await?;
    let tools = component
        .component_type()
        .exports(&engine)
        .map(|(name, _)| name.to_string())
        .find(|name| name.starts_with("cordon:tool/tools@"))
        .context("the component exports no cordon:tool/tools interface")?;
    let tools = instance
        .get_export_index(&mut store, None, &tools)
        .context("tools export")?;
    let call_tool = instance
        .get_export_index(&mut store, Some(&tools), "call-tool")
        .and_then(|index| instance.get_func(&mut store, index))
        .context("the tools interface has no call-tool")?;
    let mut result = [Val::Bool(false)];
    call_tool
        .call_async(
            &mut store,
            &[Val::String(tool.clone()), Val::String(json.clone())],
            &mut result,
        )
        .await?;
    // A tool error would make the benchmark time the wrong thing: fail instead.
    match &result[0] {
        Val::Result(Ok(content)) => Ok(format!("{content:?}")),
        other => bail!("the call did not succeed: {other:?}"),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(&args))?;
    println!("{result}");
    Ok(())
}
