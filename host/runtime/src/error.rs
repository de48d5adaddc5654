//! Errors of loading a plugin and of running one call.

use std::path::PathBuf;
use std::sync::Arc;

use cordon_core::{CeilingError, GrantError, LimitKind, ToolError};

/// Why a component could not be loaded. Messages name the problem and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The wasmtime engine could not be created (should not happen on a supported host).
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(#[source] EngineError),
    /// The bytes are not a WebAssembly component.
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(#[from] NotAComponent),
    /// The component is well-formed but failed validation or compilation.
    #[error("the component is invalid: {0:#}")]
    Invalid(#[source] wasmtime::Error),
    /// The component imports interfaces Cordon does not provide.
    #[error(
        "the component imports {} that Cordon does not provide: {}; Cordon provides {}",
        if .imports.len() == 1 { "an interface" } else { "interfaces" },
        .imports.join(", "),
        crate::provided::provided_list()
    )]
    UnsupportedImports {
        /// The offending import names, e.g. `evil:thing/backdoor`.
        imports: Vec<String>,
    },
    /// The component's bytes could not be read.
    #[error("cannot read the component ({0})")]
    Unreadable(#[source] std::io::Error),
    /// The component's bytes were not the ones expected.
    #[error(
        "the component's bytes have digest sha256:{actual}, not the expected sha256:{expected}"
    )]
    DigestMismatch {
        /// The digest of the bytes read (lower-case hex).
        actual: String,
        /// The digest the caller expected.
        expected: String,
    },
    /// The component does not implement the plugin contract.
    #[error(
        "the component is not a Cordon tool plugin: {0}; build it against wit/tool.wit (world `cordon:tool/plugin`)"
    )]
    NotAPlugin(#[source] NotAPlugin),
}

/// Why the engine or its host interfaces could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the engine's configuration. Shared: the process keeps the outcome of
    /// its one attempt and every runtime reports it.
    #[error("{0:#}")]
    Create(#[source] Arc<wasmtime::Error>),
    /// The thread that advances the epoch could not be started.
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(#[source] Arc<std::io::Error>),
    /// wasmtime-wasi, wasmtime-wasi-http or Cordon's own interfaces could not be linked.
    #[error("cannot set up host interfaces: {0:#}")]
    Link(#[source] Arc<wasmtime::Error>),
    /// A WASI function Cordon replaces is not one wasmtime defines (see `wasi_overrides`).
    #[error(
        "wasmtime does not define `{name}` in {interface}, which Cordon replaces ({module}: \
         {why}); set the version in wasi_overrides/mod.rs to the one it links"
    )]
    NotOverridable {
        /// The interface, with the version Cordon links under.
        interface: &'static str,
        /// The function or resource.
        name: &'static str,
        /// Cordon's module that replaces it.
        module: &'static str,
        /// What the replacement changes.
        why: &'static str,
    },
}

/// What a file that is not a component is instead, judged from its first eight bytes.
#[derive(Debug, thiserror::Error)]
pub enum NotAComponent {
    /// No WebAssembly magic bytes.
    #[error("the file does not start with the WebAssembly magic bytes; is it a .wasm file?")]
    NoMagic,
    /// A core module, not a component.
    #[error(
        "this is a core WebAssembly module, not a component; build for the wasm32-wasip2 target \
         or wrap it with `wasm-tools component new`"
    )]
    CoreModule,
    /// A version/layer Cordon does not know.
    #[error("unknown WebAssembly version/layer {0:02x?}; Cordon runs WASI Preview 2 components")]
    UnknownLayer([u8; 4]),
}

/// How a component breaks the plugin contract.
#[derive(Debug, thiserror::Error)]
pub enum NotAPlugin {
    /// It exports neither Cordon's contract nor any function that can be a tool.
    #[error(
        "it exports neither `cordon:tool/tools` nor a function that can be a tool{}",
        if unavailable.is_empty() {
            String::new()
        } else {
            format!(":\n  {}", unavailable.join("\n  "))
        }
    )]
    NoTools {
        /// Each exported function that cannot be a tool, and why.
        unavailable: Vec<String>,
    },
    /// Its exports do not have the contract's types.
    #[error("{0:#}")]
    Exports(#[source] wasmtime::Error),
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The tool ran and reported an error; its message is meant for the user and the model.
    #[error("tool error ({0})")]
    Tool(ToolError),
    /// The call was stopped because it exceeded a limit.
    #[error("the call exceeded its {limit} limit: {detail}")]
    LimitExceeded {
        /// Which limit.
        limit: LimitKind,
        /// The limit's value and what was attempted, e.g. "memory limit is 64MiB".
        detail: String,
    },
    /// The plugin crashed (a trap or a panic); the instance was discarded.
    #[error("the plugin crashed: {0}")]
    Trapped(String),
    /// A grant could not be honoured (refused by the plugin's ceiling, or its directory changed).
    #[error("denied: {0}")]
    Denied(#[source] Denial),
    /// The plugin returned something that breaks the contract (JSON content that is not JSON,
    /// an invalid tool list).
    #[error("the plugin returned a malformed result: {0}")]
    Malformed(String),
    /// The call was stopped because its [`Sandbox::cancel`](crate::Sandbox::cancel) fired.
    #[error("the call was cancelled while it ran; whatever it did before stopping stays done")]
    Cancelled,
    /// The host could not keep what the call wrote of its result (`result-stream`): its
    /// spool directory is gone or its disk is full. Not the plugin's fault.
    #[error("the host could not keep the call's result: {0}")]
    NotKept(String),
}

/// Why a call's grants could not be honoured.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Denial {
    /// The plugin's ceiling does not permit a grant.
    #[error(transparent)]
    Ceiling(#[from] CeilingError),
    /// A granted directory cannot be used for this call (it vanished, now resolves elsewhere,
    /// or overlaps Cordon's own state).
    #[error("the granted directory `{}` {reason}", dir.display())]
    Directory {
        /// The granted host directory.
        dir: PathBuf,
        /// What is wrong with it now, and what to do.
        reason: String,
    },
    /// The check of a granted directory against Cordon's own state failed.
    #[error("{0}; the call was refused")]
    Reserved(#[source] GrantError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message lists what the linker provides, generated from its table.
    #[test]
    fn unsupported_imports_name_what_cordon_provides() {
        let e = RuntimeError::UnsupportedImports {
            imports: vec!["evil:thing/backdoor@1.0.0".into()],
        };
        assert_eq!(
            e.to_string(),
            "the component imports an interface that Cordon does not provide: \
             evil:thing/backdoor@1.0.0; Cordon provides wasi:cli, wasi:clocks, wasi:filesystem, \
             wasi:io, wasi:random, wasi:sockets, wasi:http (types, outgoing-handler), \
             cordon:tool/log, cordon:tool/bulk-read (0.1.2: sifting readers), \
             cordon:tool/result-stream, cordon:tool/grant-wanted and wasi:config/store \
             (0.2.0-draft, 0.2.0-rc.1)"
        );
    }
}
