//! Turning grants and limits into the state of one call's `Store`.
//!
//! [`build_state`] is the only place a WASI context is built: no inherited environment,
//! arguments or stdin; preopens, variables and network access exactly as granted.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use cordon_core::{CallReport, FsMode, Grants, Limits, ReservedPaths};
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::cordon::tool::{grant_wanted, log, result_stream};
use crate::bulk_read::{BulkReadParts, BulkReadView};
use crate::caps::{MAX_HANDLES_PER_CALL, MAX_HTTP_FIELDS_BYTES, MAX_TABLE_ELEMENTS};
use crate::config_values::ConfigValues;
use crate::error::{CallError, Denial};
use crate::http_policy::HttpPolicy;
use crate::output::{CappedPipe, LogSink};
use crate::refusals::Refusals;
use crate::result_stream::ResultSpool;
use crate::wasi_overrides::filesystem_preopens::open_granted;
use crate::wasi_overrides::{
    ALLOW_BLOCKING_CURRENT_THREAD, FsOverrides, NetOverrides, OverrideParts, OverrideView,
};

/// Where the values of granted environment variables come from.
#[derive(Debug, Clone, Default)]
pub enum EnvSource {
    /// The host process environment, read at call time (an unset variable is simply absent).
    #[default]
    Host,
    /// A fixed map, for tests and for embedders that keep secrets elsewhere. Only granted
    /// names are ever passed on.
    Map(BTreeMap<String, String>),
}

impl EnvSource {
    fn get(&self, name: &str) -> Option<String> {
        match self {
            EnvSource::Host => std::env::var(name).ok(),
            EnvSource::Map(m) => m.get(name).cloned(),
        }
    }
}

/// Everything that decides what one call may reach and consume.
#[derive(Clone, Default)]
pub struct Sandbox {
    /// The capabilities given to the plugin.
    pub grants: Grants,
    /// The resource limits of the call.
    pub limits: Limits,
    /// Where granted environment variables' values come from.
    pub env: EnvSource,
    /// The plugin's `wasi:config/store` values, by key, as kept for it; only those of granted
    /// keys reach the call (see `config_store`).
    pub config: BTreeMap<String, String>,
    /// Cordon's own state, which no directory grant may overlap; checked again on every call
    /// (see [`ReservedPaths`]).
    pub reserved: ReservedPaths,
    /// Stops the call when fired: running guest code at the next epoch tick, a guest blocked in
    /// a host call (a sleep, a slow server) at once. The call then fails with
    /// [`CallError::Cancelled`](crate::CallError::Cancelled) and its report is complete, so a
    /// client's cancel never leaves a guest running unseen.
    pub cancel: CancellationToken,
}

impl std::fmt::Debug for Sandbox {
    /// Configuration values are secrets: only their keys are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("grants", &self.grants)
            .field("limits", &self.limits)
            .field("env", &self.env)
            .field("config_keys", &self.config.keys().collect::<Vec<_>>())
            .field("reserved", &self.reserved)
            .field("cancel", &self.cancel)
            .finish()
    }
}

/// Memory accounting across all memories of an instance; a denied growth traps and is
/// remembered so the call can report the memory limit instead of a bare trap.
pub(crate) struct Limiter {
    limit: u64,
    used: u64,
    pub(crate) exceeded: Option<u64>,
}

impl Limiter {
    /// The call's memory limit.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// The most linear memory the instance has held at once. What it holds now is that
    /// maximum: linear memory only grows (WebAssembly cannot shrink a memory), and none of an
    /// instance's memories is freed before its store is dropped.
    pub(crate) fn peak(&self) -> u64 {
        self.used
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow = desired.saturating_sub(current) as u64;
        if self.used.saturating_add(grow) > self.limit {
            self.exceeded = Some(self.used.saturating_add(grow));
            return Err(wasmtime::Error::msg(format!(
                "memory limit of {} exceeded",
                cordon_core::format_bytes(self.limit)
            )));
        }
        self.used += grow;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            return Err(wasmtime::Error::msg(
                "table growth beyond 1,000,000 elements refused",
            ));
        }
        Ok(true)
    }
}

/// The data of one call's `Store`, split by concern as wasmtime splits `WasiCtx`: what each
/// of Cordon's host functions touches is one group, and the borrow checker can see a WASI view
/// (context and table) apart from the rest. The WASI replacements and bulk-read reach the parts
/// they use only through the views below ([`OverrideView`], [`BulkReadView`]), which keeps them
/// free of this module; the table and the filesystem and network state are private to it.
pub(crate) struct HostState {
    /// wasmtime-wasi's context: environment, stdio, clocks, sockets policy.
    wasi: WasiCtx,
    /// Every resource the guest holds a handle to (and their children), capped in size.
    table: ResourceTable,
    fs: FsState,
    net: NetState,
    pub(crate) budget: Budget,
    pub(crate) out: CallOutput,
    /// What the call wrote of its result through `cordon:tool/result-stream`.
    pub(crate) written: ResultSpool,
    /// What the sandbox refused the call, noted where each refusal is made, for its report.
    /// (The HTTP policy, which wasmtime-wasi-http borrows alone, keeps its own.)
    refused: Refusals,
    /// The `wasi:config/store` keys granted, and their values.
    config: ConfigValues,
}

/// Cordon's side of `wasi:filesystem` and `cordon:tool/bulk-read` in one call: the granted
/// directories it opened, and what the per-call caps count of what the guest holds.
struct FsState {
    /// What the `wasi:filesystem` replacements keep: the preopens, and what the caps count.
    overrides: FsOverrides,
    /// What `bulk-read` readers of this call hold.
    bulk_read: crate::bulk_read::CallBudget,
}

/// The network side of one call: what the caps count of its sockets and HTTP objects, and
/// wasmtime-wasi-http's context with Cordon's policy (allowed origins, pinned addresses).
struct NetState {
    /// What the `wasi:sockets` and `wasi:http` replacements count.
    overrides: NetOverrides,
    http: WasiHttpCtx,
    hooks: HttpPolicy,
}

/// The call's resource limits as it runs: memory counted across its memories, and the
/// wall-clock deadline the epoch callback checks; each remembers having stopped the call, so
/// the error names the limit instead of a bare trap.
pub(crate) struct Budget {
    pub(crate) limiter: Limiter,
    pub(crate) deadline: Instant,
    pub(crate) timed_out: bool,
    pub(crate) cancel: CancellationToken,
    pub(crate) cancelled: bool,
}

/// Where the guest's output goes: stdout and stderr into one capped pipe, `cordon:tool/log`
/// records into the host log within the same log limit.
pub(crate) struct CallOutput {
    pub(crate) pipe: CappedPipe,
    pub(crate) log: LogSink,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.net.http,
            table: &mut self.table,
            hooks: &mut self.net.hooks,
        }
    }
}

impl OverrideView for HostState {
    #[inline]
    fn overrides(&mut self) -> OverrideParts<'_> {
        OverrideParts {
            table: &mut self.table,
            fs: &mut self.fs.overrides,
            net: &mut self.net.overrides,
            plugin: &self.out.log.plugin,
            refused: &mut self.refused,
        }
    }
}

impl BulkReadView for HostState {
    #[inline]
    fn bulk_read(&mut self) -> BulkReadParts<'_> {
        BulkReadParts {
            table: &mut self.table,
            budget: &mut self.fs.bulk_read,
            preopens: self.fs.overrides.preopens(),
            memory_limit: self.budget.limiter.limit(),
            deadline: self.budget.deadline,
            refused: &mut self.refused,
        }
    }
}

impl HostState {
    /// What `wasi:config/store` answers from.
    pub(crate) fn config(&self) -> &ConfigValues {
        &self.config
    }

    /// Where host functions outside this module note what they refused.
    pub(crate) fn refused_mut(&mut self) -> &mut Refusals {
        &mut self.refused
    }

    /// Puts what the sandbox measured and refused so far into `report`: the peak of linear
    /// memory, and every refusal noted (which is moved, so a second call adds nothing twice).
    pub(crate) fn report_into(&mut self, report: &mut CallReport) {
        report.peak_memory = self.budget.limiter.peak();
        self.refused.drain_into(report);
        self.net.hooks.refused.drain_into(report);
    }
}

impl log::Host for HostState {
    fn write(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let level = match level {
            log::Level::Trace => tracing::Level::TRACE,
            log::Level::Debug => tracing::Level::DEBUG,
            log::Level::Info => tracing::Level::INFO,
            log::Level::Warn => tracing::Level::WARN,
            log::Level::Error => tracing::Level::ERROR,
        };
        self.out.log.write(level, &message, &fields);
    }
}

impl crate::bindings::cordon::tool::types::Host for HostState {}

impl result_stream::Host for HostState {
    fn write(&mut self, kind: result_stream::PieceKind, chunk: String) -> Result<(), String> {
        self.written.write(kind, &chunk)
    }
}

impl grant_wanted::Host for HostState {
    fn want(&mut self, grant: String) -> Result<(), String> {
        self.refused.said_wanted(&grant)
    }
}

/// A deadline that never comes in practice, for a time limit too long to add to now (30 years,
/// as tokio's timers do).
fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400 * 365 * 30)
}

/// Builds the store data for one call from the sandbox. Refuses (as `Denied`) a directory grant
/// whose host directory vanished, now resolves elsewhere (e.g. replaced by a symlink) or
/// overlaps Cordon's own state (see `wasi_overrides::filesystem_preopens::open_granted`), and a
/// `net:tcp` grant that reaches the PostgreSQL store.
/// What the call writes of its result is kept in `spool`.
pub(crate) fn build_state(
    sandbox: &Sandbox,
    plugin: Arc<str>,
    spool: &Arc<crate::result_stream::Spool>,
) -> Result<HostState, CallError> {
    let limits = &sandbox.limits;
    let mut b = WasiCtxBuilder::new();
    // Run filesystem calls on the calling thread instead of tokio's blocking pool: a directory
    // walk makes hundreds of thousands of them, and the hand-off per call made the files tool's
    // searches about five times slower. Each call is short, and the epoch deadline still bounds
    // how long a guest holds the thread.
    b.allow_blocking_current_thread(ALLOW_BLOCKING_CURRENT_THREAD);
    let output = CappedPipe::new(
        usize::try_from(limits.log).unwrap_or(usize::MAX),
        plugin.clone(),
    );
    // Nothing is inherited: no stdin, args or environment. stdout and stderr are captured.
    b.stdout(output.clone()).stderr(output.clone());

    let mut all_read_only = true;
    let mut preopens = Vec::new();
    for fs in sandbox.grants.fs() {
        all_read_only &= fs.mode == FsMode::ReadOnly;
        preopens.push(open_granted(fs, &sandbox.reserved)?);
    }

    for name in sandbox.grants.env_names() {
        if let Some(value) = sandbox.env.get(name) {
            b.env(name, value);
        }
    }

    let tcp: HashSet<SocketAddr> = sandbox.grants.tcp_addrs().collect();
    // A grant recorded before the store moved to a server it names (or by hand) runs nothing.
    for addr in &tcp {
        sandbox
            .reserved
            .check_tcp(*addr)
            .map_err(|e| CallError::Denied(Denial::Reserved(e)))?;
    }
    let mut refused = Refusals::default();
    b.allow_udp(false).allow_ip_name_lookup(false);
    // Sockets are created whatever the grants (a component that does not import them cannot
    // ask): what a socket may reach is decided when it binds or connects, so a connect to an
    // address not granted is refused there, with the address, which a grant request can name.
    {
        let tcp = Arc::new(tcp);
        let plugin_name = plugin.clone();
        // wasmtime-wasi calls the check from a connect it runs without the store.
        let refusals = refused.shared();
        b.allow_tcp(true).socket_addr_check(move |addr, use_| {
            let allowed = match use_ {
                SocketAddrUse::TcpConnect => tcp.contains(&addr),
                // `connect` binds implicitly first, to the unspecified address and port 0.
                SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                _ => false,
            };
            if !allowed {
                tracing::warn!(target: "cordon::sandbox", plugin = %plugin_name, %addr, ?use_, "refused socket address");
                refusals.refuse(match use_ {
                    SocketAddrUse::TcpConnect => {
                        refusals.want(cordon_core::Grant::Tcp(addr, Default::default()).to_string());
                        format!("tcp: {addr} (not granted)")
                    }
                    SocketAddrUse::TcpBind => format!("tcp: binding {addr} (not granted)"),
                    SocketAddrUse::TcpListen => format!("tcp: listening on {addr} (not granted)"),
                    other => format!("tcp: {other:?} {addr} (not granted)"),
                });
            }
            Box::pin(async move { allowed })
        });
    }

    Ok(HostState {
        wasi: b.build(),
        table: {
            let mut table = ResourceTable::new();
            // The host's table also holds entries the guest has no handle to (a connection's
            // streams are its children): room for as many again.
            table.set_max_capacity(2 * MAX_HANDLES_PER_CALL);
            table
        },
        fs: FsState {
            overrides: FsOverrides::new(preopens, all_read_only),
            bulk_read: Default::default(),
        },
        net: NetState {
            overrides: NetOverrides::default(),
            http: {
                let mut http = WasiHttpCtx::new();
                http.set_field_size_limit(MAX_HTTP_FIELDS_BYTES);
                http
            },
            hooks: HttpPolicy::new(
                sandbox.grants.http_origins().cloned().collect(),
                plugin.clone(),
                crate::http_send::system_resolver(),
            ),
        },
        budget: Budget {
            limiter: Limiter {
                limit: limits.memory,
                used: 0,
                exceeded: None,
            },
            // A time limit read from a hand-edited lock file may be centuries long.
            deadline: Instant::now()
                .checked_add(limits.time)
                .unwrap_or_else(far_future),
            timed_out: false,
            cancel: sandbox.cancel.clone(),
            cancelled: false,
        },
        out: CallOutput {
            pipe: output,
            log: LogSink::new(usize::try_from(limits.log).unwrap_or(usize::MAX), plugin),
        },
        written: ResultSpool::new(spool.clone(), limits.output),
        refused,
        config: ConfigValues::granted(sandbox.grants.config_keys(), &sandbox.config),
    })
}
