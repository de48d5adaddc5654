//! The Cordon sandbox: loads tool plugins (WASI Preview 2 components) and runs each call in a
//! fresh, capability-restricted instance under per-call resource limits.
//!
//! Design in brief:
//! - One wasmtime [`Engine`](wasmtime::Engine) per process (shared by every [`Runtime`]), with
//!   epoch interruption driven by one ticker thread and the pooling allocator, so a call costs
//!   tens of microseconds rather than milliseconds.
//! - Compiled code is cached on disk keyed by the component's sha256 and the engine's
//!   compatibility hash, so only the first start pays for compilation; an entry is loaded only
//!   when it matches the [`CompiledPin`] its caller recorded where only the host writes.
//! - Every call gets a new `Store` built from the cached `InstancePre`; nothing survives a call,
//!   and a trapped instance is simply dropped.
//! - The only way a call reaches the outside is through the grants in its [`Sandbox`], turned
//!   into a WASI context by one function (`sandbox::build_state`), after the plugin's
//!   [`Ceiling`] has been checked.

mod bindings;
mod bulk_read;
mod bulk_read_bindings;
mod cache;
mod caps;
mod config_store;
mod config_values;
mod engine;
mod error;
mod http_policy;
mod http_send;
mod live_handles;
mod output;
mod plugin;
mod provided;
mod refusals;
mod result_stream;
mod sandbox;
mod typed;

/// Entry points for the fuzz targets in `tests/fuzz`.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::typed::{Fuzzed, fuzz_docs as component_docs};
}
mod wasi_overrides;

pub use cache::compiled_file_name;
pub use cordon_core::{
    CallReport, Ceiling, CompiledPin, Content, Grants, LimitKind, Limits, ReservedPaths,
    ToolDescriptor, ToolError,
};
pub use engine::{
    CompileEvent, DEFAULT_MAX_INSTANCES, Runtime, RuntimeConfig, check_component_header,
};
pub use error::{CallError, Denial, EngineError, NotAComponent, NotAPlugin, RuntimeError};
pub use plugin::{Plugin, ToolOutput};
pub use sandbox::{EnvSource, Sandbox};
/// What fires [`Sandbox::cancel`].
pub use tokio_util::sync::CancellationToken;
pub use typed::{NO_DOC_COMMENT, Unavailable};
pub use wasi_overrides::filesystem_types::lock_dirs::LockLedger;

/// How many lookups of names a directory listing had just shown absent were answered from
/// that listing instead of the filesystem, in this process (see `wasi_overrides::filesystem_types::fresh_listing`). For tests
/// and diagnostics.
#[cfg(unix)]
pub fn lookups_answered_from_listings() -> u64 {
    wasi_overrides::filesystem_types::fresh_listing::answered()
}
