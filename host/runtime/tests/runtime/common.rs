//! Shared helpers for the runtime tests: fixture loading and short-hands for calls.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cordon_core::{CompiledPin, Content, Grant, Grants, Limits};
use cordon_runtime::{CallError, EnvSource, Plugin, Runtime, RuntimeConfig, Sandbox, ToolOutput};
use serde_json::Value;

/// Held by every test while it runs: shared by most, taken alone by a test that must be the
/// only one running in the process.
static PROCESS: RwLock<()> = RwLock::new(());

/// A test's share of the process; others may run beside it, but no `alone` test.
pub struct Shared(RwLockReadGuard<'static, ()>);

/// The whole process for one test: no other test runs while it is held.
pub struct Alone(RwLockWriteGuard<'static, ()>);

/// Takes a share of the process (a test that failed while holding it does not stop others).
pub fn shared() -> Shared {
    Shared(PROCESS.read().unwrap_or_else(PoisonError::into_inner))
}

/// Waits until no other test runs, and keeps it so until dropped.
pub fn alone() -> Alone {
    Alone(PROCESS.write().unwrap_or_else(PoisonError::into_inner))
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Makes a named pipe (FIFO) at `path`.
pub fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// The bytes of `target/fixtures/<name>.wasm`, or a panic telling how to build it.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    let path = workspace_root()
        .join("target/fixtures")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {} is missing ({e}); run `make plugins` first",
            path.display()
        )
    })
}

/// One runtime (with a cache in target/) for the whole test binary.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let cache = workspace_root().join("target/test-cache/runtime");
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache),
            ..RuntimeConfig::default()
        })
        .expect("runtime")
    })
}

/// Loads a fixture through the test cache. The pin of its compiled code is kept beside the
/// cache (a host keeps it in its lock file), so later test runs load instead of compiling.
pub fn load(name: &str) -> Plugin {
    let pin_path = workspace_root().join(format!("target/test-cache/runtime/{name}.pin.json"));
    let pin: Option<CompiledPin> = std::fs::read(&pin_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let plugin = runtime()
        .load(&fixture_bytes(name), pin.as_ref(), &|_| {})
        .unwrap_or_else(|e| panic!("load {name}: {e}"))
        .named(name);
    if let Some(now) = plugin.compiled_pin()
        && Some(now) != pin.as_ref()
    {
        let _ = std::fs::write(
            &pin_path,
            serde_json::to_vec(now).expect("a pin serialises"),
        );
    }
    plugin
}

pub fn probe() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| load("probe"))
}

pub fn runaway() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| load("runaway"))
}

pub fn grants(list: &[String]) -> Grants {
    list.iter()
        .map(|g| {
            g.parse::<Grant>()
                .unwrap_or_else(|e| panic!("{e}"))
                .resolve()
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

pub fn sandbox(list: &[String]) -> Sandbox {
    Sandbox {
        grants: grants(list),
        limits: Limits::default(),
        env: EnvSource::Host,
        config: Default::default(),
        reserved: Default::default(),
        cancel: Default::default(),
    }
}

/// The JSON content of a successful call (the probe wraps everything in `{"ok": ...}`).
pub fn json_of(out: &ToolOutput) -> Value {
    out.content
        .iter()
        .find_map(|c| match c {
            Content::Json(v) => Some(v.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no json content in {out:?}"))
}

pub async fn call(
    plugin: &Plugin,
    sb: &Sandbox,
    tool: &str,
    args: Value,
) -> Result<ToolOutput, CallError> {
    plugin.call_tool(sb, tool, &args.to_string()).await
}

/// Runs a probe fs op and returns Ok(value) or Err(message of the refusal).
pub async fn fs(sb: &Sandbox, op: &str, path: &str, target: Option<&str>) -> Result<Value, String> {
    let mut args = serde_json::json!({"op": op, "path": path});
    if let Some(t) = target {
        args["target"] = Value::String(t.to_string());
    }
    match call(probe(), sb, "fs", args).await {
        Ok(out) => Ok(json_of(&out)["ok"].clone()),
        Err(CallError::Tool(e)) => Err(e.message),
        Err(other) => panic!("fs {op} {path}: unexpected host error {other}"),
    }
}

/// A normal call must still work: the runtime survived whatever the test did.
pub async fn still_serves() {
    let out = call(
        runaway(),
        &Sandbox::default(),
        "fine",
        serde_json::json!({}),
    )
    .await
    .expect("normal call after attack");
    assert_eq!(out.content, vec![Content::Text("fine".into())]);
    let out = call(probe(), &Sandbox::default(), "noop", serde_json::json!({}))
        .await
        .expect("noop after attack");
    assert!(out.content.is_empty());
}
