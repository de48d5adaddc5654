//! The process-wide engine, its epoch ticker, and loading components.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cordon_core::CompiledPin;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker, types::ComponentItem};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings;
use crate::cache::Cache;
use crate::caps::{MAX_MEMORY, MAX_WASM_STACK};
use crate::error::{EngineError, NotAComponent, NotAPlugin, RuntimeError};
use crate::plugin::{Plugin, PluginExports, PluginInner};
use crate::provided::provided;
use crate::sandbox::HostState;
use crate::typed::{Docs, TypedExports};

/// How often the ticker advances the epoch. A spinning guest yields to tokio and has its
/// wall-time deadline checked this often.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// Concurrent instances the pool holds by default; more simultaneous calls than this wait
/// for a slot.
pub const DEFAULT_MAX_INSTANCES: u32 = 64;

/// Where a [`Runtime`] keeps compiled code, and how many calls it runs at once.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory for compiled components; `None` compiles every time (tests, one-off runs).
    pub cache_dir: Option<PathBuf>,
    /// How many instances may exist at once across the process (the pooling allocator's
    /// size). A one-shot command needs a couple; a server wants more. Setting up the pool
    /// costs time in proportion, so a CLI call should not pay for a server's pool. The
    /// engine is shared by the whole process, so the first runtime created decides.
    pub max_instances: u32,
    /// Directory for what calls write of their results (`cordon:tool/result-stream`), in
    /// files that have no name and vanish with the result; `None` is the system's temporary
    /// directory. Best on a disk: a result may be as large as the output limit.
    pub spool_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            cache_dir: None,
            max_instances: DEFAULT_MAX_INSTANCES,
            spool_dir: None,
        }
    }
}

/// What [`Runtime::load`] reports so a caller can show progress for slow compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileEvent {
    /// A real compile started (the cache had no usable entry).
    Started {
        /// Size of the component being compiled.
        bytes: usize,
    },
    /// The compile finished.
    Finished {
        /// How long it took.
        elapsed: Duration,
    },
    /// Compiled code was loaded from the cache; no compile happened.
    CacheHit,
}

/// The one engine of the process, created on first use, and its ticker.
fn shared_engine(max_instances: u32) -> Result<&'static Engine, RuntimeError> {
    static ENGINE: OnceLock<Result<Engine, EngineError>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let engine = Engine::new(&engine_config(max_instances))
                .map_err(|e| EngineError::Create(Arc::new(e)))?;
            start_ticker(&engine).map_err(|e| EngineError::Ticker(Arc::new(e)))?;
            Ok(engine)
        })
        .as_ref()
        .map_err(|e| RuntimeError::Engine(e.clone()))
}

fn engine_config(max_instances: u32) -> Config {
    let max_instances = max_instances.max(1);
    let mut cfg = Config::new();
    cfg.wasm_component_model(true);
    cfg.epoch_interruption(true);
    cfg.max_wasm_stack(MAX_WASM_STACK);
    let mut pool = PoolingAllocationConfig::default();
    // Sized for a ~20 MB componentize-py component (a dozen core instances, several tables and
    // memories, a large funcref table) with room for many concurrent calls. Memory slots are
    // virtual reservations; only touched pages cost RAM.
    pool.total_component_instances(max_instances)
        .total_core_instances(max_instances * 16)
        .max_core_instances_per_component(64)
        .total_memories(max_instances * 2)
        .max_memories_per_component(8)
        .max_memories_per_module(1)
        .total_tables(max_instances * 16)
        .max_tables_per_component(64)
        .max_tables_per_module(4)
        .table_elements(100_000)
        .max_memory_size(MAX_MEMORY as usize)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        .total_stacks(max_instances)
        // Reset only the pages a call dirtied (PAGEMAP_SCAN, Linux >= 6.7) and keep them
        // resident, so the next instance in the slot does not page-fault them back in.
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(1 << 20)
        .table_keep_resident(64 << 10);
    cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    cfg
}

/// One thread per engine advances the epoch; calls never start their own timers.
fn start_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("cordon-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map(|_| ())
}

/// What the clones of a [`Runtime`] share.
struct RuntimeInner {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<Cache>,
    spool: Arc<crate::result_stream::Spool>,
}

/// Loads plugins. Cheap to clone; all clones share the engine, linker and cache.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

impl Runtime {
    /// Creates a runtime on the process-wide engine, with its cache in `config.cache_dir`
    /// (created if missing).
    pub fn new(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let engine = shared_engine(config.max_instances)?.clone();
        let mut linker: Linker<HostState> = Linker::new(&engine);
        crate::wasi_overrides::link(&mut linker).map_err(RuntimeError::Engine)?;
        let link = |e: wasmtime::Error| RuntimeError::Engine(EngineError::Link(Arc::new(e)));
        // The world's interfaces, as `bindings::Plugin::add_to_linker` links them, except that
        // bulk-read runs on the part of the store data it is lent (see `bulk_read_bindings`).
        use bindings::cordon::tool::{grant_wanted, log, result_stream, types};
        use wasmtime::component::HasSelf;
        types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s).map_err(link)?;
        log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s).map_err(link)?;
        result_stream::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(link)?;
        grant_wanted::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(link)?;
        crate::bulk_read_bindings::add_to_linker(&mut linker).map_err(link)?;
        crate::config_store::add_to_linker(&mut linker).map_err(link)?;
        let cache = config.cache_dir.map(|dir| Cache::new(dir, &engine));
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                cache,
                spool: Arc::new(crate::result_stream::Spool::new(
                    config.spool_dir.unwrap_or_else(std::env::temp_dir),
                )),
            }),
        })
    }

    /// Validates a component, checks its imports, compiles it (or loads the compiled code from
    /// the cache) and prepares it for instantiation. `progress` hears about real compiles so a
    /// CLI can show a spinner for large components.
    ///
    /// Compiled code in the cache is used only when it matches `pin`, what the caller recorded
    /// of it (see [`Plugin::compiled_pin`]); without a pin the component is compiled.
    pub fn load(
        &self,
        wasm: &[u8],
        pin: Option<&CompiledPin>,
        progress: &dyn Fn(CompileEvent),
    ) -> Result<Plugin, RuntimeError> {
        check_component_header(wasm)?;
        let sha = hex::encode(Sha256::digest(wasm));
        self.load_or_compile(sha, pin, || Ok(Cow::Borrowed(wasm)), progress)
    }

    /// Like [`Runtime::load`] for a caller that already knows the component's sha256 (lower-case
    /// hex), typically because it checked the stored file against a lock file. When the cache
    /// holds compiled code for that digest matching `pin` the component's bytes are never read;
    /// otherwise `read` supplies them, and they must have that digest.
    pub fn load_digest(
        &self,
        sha256_hex: &str,
        pin: Option<&CompiledPin>,
        read: &dyn Fn() -> std::io::Result<Vec<u8>>,
        progress: &dyn Fn(CompileEvent),
    ) -> Result<Plugin, RuntimeError> {
        let sha = sha256_hex.to_ascii_lowercase();
        let bytes = || {
            let wasm = read().map_err(RuntimeError::Unreadable)?;
            check_component_header(&wasm)?;
            let actual = hex::encode(Sha256::digest(&wasm));
            if actual != sha {
                return Err(RuntimeError::DigestMismatch {
                    actual,
                    expected: sha.clone(),
                });
            }
            Ok(Cow::Owned(wasm))
        };
        self.load_or_compile(sha.clone(), pin, bytes, progress)
    }

    /// Takes the compiled code for `sha` from the cache, or compiles the bytes `wasm` supplies
    /// (asked for only on a miss), then checks and links the component.
    fn load_or_compile<'a>(
        &self,
        sha: String,
        pin: Option<&CompiledPin>,
        wasm: impl FnOnce() -> Result<Cow<'a, [u8]>, RuntimeError>,
        progress: &dyn Fn(CompileEvent),
    ) -> Result<Plugin, RuntimeError> {
        let cached = match (&self.inner.cache, pin) {
            (Some(cache), Some(pin)) => cache.get(&self.inner.engine, &sha, pin),
            _ => None,
        };
        // A component without the contract is described from its WIT's doc comments, which
        // only its bytes hold: they are read even when its code came from the cache. `None`
        // for a component with the contract.
        let engine = &self.inner.engine;
        let (component, pin, docs) = match cached {
            Some((component, pin)) => {
                progress(CompileEvent::CacheHit);
                let docs = match exports_contract(&component, engine) {
                    true => None,
                    false => Some(Docs::read(&wasm()?)),
                };
                (component, Some(pin), docs)
            }
            None => {
                let wasm = wasm()?;
                let (component, pin) = self.compile(&sha, &wasm, progress)?;
                let docs = (!exports_contract(&component, engine)).then(|| Docs::read(&wasm));
                (component, pin, docs)
            }
        };
        self.prepare(component, sha, pin, docs)
    }

    /// Compiles a component and stores it in the cache, if there is one; returns the pin of
    /// what was stored.
    fn compile(
        &self,
        sha: &str,
        wasm: &[u8],
        progress: &dyn Fn(CompileEvent),
    ) -> Result<(Component, Option<CompiledPin>), RuntimeError> {
        progress(CompileEvent::Started { bytes: wasm.len() });
        let start = Instant::now();
        let component = Component::new(&self.inner.engine, wasm).map_err(RuntimeError::Invalid)?;
        let elapsed = start.elapsed();
        progress(CompileEvent::Finished { elapsed });
        tracing::debug!(bytes = wasm.len(), ?elapsed, "compiled component");
        let pin = self
            .inner
            .cache
            .as_ref()
            .and_then(|cache| cache.put(sha, &component));
        Ok((component, pin))
    }

    /// Checks the imports and exports of a compiled component and links it.
    fn prepare(
        &self,
        component: Component,
        sha: String,
        compiled: Option<CompiledPin>,
        docs: Option<Docs>,
    ) -> Result<Plugin, RuntimeError> {
        let engine = &self.inner.engine;
        let ty = component.component_type();
        let mut imports = Vec::new();
        for (name, item) in ty.imports(engine) {
            if !matches!(item.ty, ComponentItem::ComponentInstance(_)) {
                return Err(RuntimeError::UnsupportedImports {
                    imports: vec![format!(
                        "{name} (a bare function or type import, not an interface)"
                    )],
                });
            }
            imports.push(name.to_string());
        }
        let unsupported: Vec<String> = imports.iter().filter(|i| !provided(i)).cloned().collect();
        if !unsupported.is_empty() {
            return Err(RuntimeError::UnsupportedImports {
                imports: unsupported,
            });
        }
        let pre = self.inner.linker.instantiate_pre(&component).map_err(|e| {
            RuntimeError::UnsupportedImports {
                imports: vec![format!("{e:#}")],
            }
        })?;
        if let Some(docs) = docs {
            let typed = TypedExports::discover(&component, engine, &docs);
            if typed.functions.is_empty() {
                return Err(RuntimeError::NotAPlugin(NotAPlugin::NoTools {
                    unavailable: typed
                        .unavailable
                        .iter()
                        .map(|u| format!("{}: {}", u.function, u.reason))
                        .collect(),
                }));
            }
            return Ok(Plugin::new(PluginInner {
                pre,
                exports: PluginExports::Typed(Arc::new(typed)),
                digest: format!("sha256:{sha}"),
                imports,
                compiled,
                spool: self.inner.spool.clone(),
            }));
        }
        // Optional (WIT 0.1.3): a component without the export has no output schemas.
        let outputs = bindings::outputs::tool_outputs::GuestIndices::new(&pre).ok();
        let tools = bindings::PluginIndices::new(&pre)
            .map_err(|e| RuntimeError::NotAPlugin(NotAPlugin::Exports(e)))?;
        Ok(Plugin::new(PluginInner {
            pre,
            exports: PluginExports::Contract { tools, outputs },
            digest: format!("sha256:{sha}"),
            imports,
            compiled,
            spool: self.inner.spool.clone(),
        }))
    }
}

/// Whether the component offers its tools through Cordon's contract (`cordon:tool/tools`);
/// any other component offers its exported functions.
fn exports_contract(component: &Component, engine: &Engine) -> bool {
    component
        .component_type()
        .exports(engine)
        .any(|(name, _)| name.starts_with("cordon:tool/tools@"))
}

/// Tells a core module, a non-wasm file and a component apart from its first eight bytes,
/// without compiling, so the error says what the file actually is: before a component is
/// compiled, and before it is published or signed.
pub fn check_component_header(wasm: &[u8]) -> Result<(), NotAComponent> {
    match wasm.first_chunk::<8>() {
        Some([b'\0', b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00]) => Ok(()),
        Some([b'\0', b'a', b's', b'm', 0x01, 0x00, 0x00, 0x00]) => Err(NotAComponent::CoreModule),
        Some([b'\0', b'a', b's', b'm', a, b, c, d]) => {
            Err(NotAComponent::UnknownLayer([*a, *b, *c, *d]))
        }
        _ => Err(NotAComponent::NoMagic),
    }
}
