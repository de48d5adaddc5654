//! Everything Cordon changes in the WASI that wasmtime-wasi and wasmtime-wasi-http link.
//!
//! Cordon replaces some of their functions with its own, linked under the same names so that
//! guests importing any 0.2.x version get them. One file (or directory) per interface holds
//! the replacements; [`OVERRIDES`] lists every replaced function with why, and [`link`] checks
//! that each is one wasmtime defines before replacing it: a function wasmtime renamed or
//! dropped (after an upgrade) fails start-up with its name, instead of Cordon's version sitting
//! beside it under a name guests are never given.

use wasmtime::component::Linker;

use std::sync::Arc;

use crate::error::EngineError;
use crate::sandbox::HostState;

pub(crate) mod filesystem_preopens;
pub(crate) mod filesystem_types;
pub(crate) mod http_types;
pub(crate) mod sockets_tcp_create_socket;

/// The `wasi:filesystem/types` version wasmtime-wasi 48 defines (guests importing any 0.2.x
/// are served by it).
pub(crate) const WASI_FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// The `wasi:filesystem/preopens` version wasmtime-wasi 48 defines.
pub(crate) const WASI_FILESYSTEM_PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";

/// The `wasi:sockets/tcp-create-socket` version wasmtime-wasi 48 defines.
pub(crate) const WASI_SOCKETS_TCP_CREATE_SOCKET: &str = "wasi:sockets/tcp-create-socket@0.2.12";

/// The `wasi:http/types` version wasmtime-wasi-http 48 defines.
pub(crate) const WASI_HTTP_TYPES: &str = "wasi:http/types@0.2.12";

/// One function (or resource) of wasmtime's WASI that Cordon replaces.
pub(crate) struct Override {
    /// The interface, with the version wasmtime links.
    pub(crate) interface: &'static str,
    /// The name inside it.
    pub(crate) name: &'static str,
    /// The module holding the replacement, below this one.
    pub(crate) module: &'static str,
    /// What the replacement changes.
    pub(crate) why: &'static str,
}

const fn over(
    interface: &'static str,
    name: &'static str,
    module: &'static str,
    why: &'static str,
) -> Override {
    Override {
        interface,
        name,
        module,
        why,
    }
}

const LISTING: &str = "listings typed from d_type, not a stat per entry, within the listings cap";
const FILE_STREAMS: &str = "file streams within the file-streams cap";
const HTTP_CAPS: &str = "HTTP objects and their parts within the HTTP caps";

/// Every replaced function, checked in full by [`link`].
pub(crate) const OVERRIDES: &[Override] = &[
    #[cfg(unix)]
    over(
        WASI_FILESYSTEM_TYPES,
        "directory-entry-stream",
        "filesystem_types::readdir",
        LISTING,
    ),
    #[cfg(unix)]
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.read-directory",
        "filesystem_types::readdir",
        LISTING,
    ),
    #[cfg(unix)]
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]directory-entry-stream.read-directory-entry",
        "filesystem_types::readdir",
        LISTING,
    ),
    #[cfg(unix)]
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.metadata-hash-at",
        "filesystem_types::readdir",
        "the entry a listing just handed out is hashed from the listing's inode number",
    ),
    #[cfg(unix)]
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.stat-at",
        "filesystem_types::fresh_listing",
        "a name a fresh listing lacks is answered absent without a stat",
    ),
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.open-at",
        "filesystem_types::open_files",
        "opens within the open-files cap (and remembered for fresh listings)",
    ),
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.read-via-stream",
        "filesystem_types::file_streams",
        FILE_STREAMS,
    ),
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.write-via-stream",
        "filesystem_types::file_streams",
        FILE_STREAMS,
    ),
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.append-via-stream",
        "filesystem_types::file_streams",
        FILE_STREAMS,
    ),
    over(
        WASI_FILESYSTEM_PREOPENS,
        "get-directories",
        "filesystem_preopens",
        "the granted directories, opened by the host without following links",
    ),
    over(
        WASI_SOCKETS_TCP_CREATE_SOCKET,
        "create-tcp-socket",
        "sockets_tcp_create_socket",
        "sockets within the TCP-sockets cap",
    ),
    over(
        WASI_HTTP_TYPES,
        "[constructor]fields",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[static]fields.from-list",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[method]fields.clone",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[constructor]outgoing-request",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[constructor]outgoing-response",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[method]outgoing-request.set-method",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[method]outgoing-request.set-scheme",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[method]outgoing-request.set-authority",
        "http_types",
        HTTP_CAPS,
    ),
    over(
        WASI_HTTP_TYPES,
        "[method]outgoing-request.set-path-with-query",
        "http_types",
        HTTP_CAPS,
    ),
];

/// Links wasmtime-wasi's WASI (Preview 2) and wasmtime-wasi-http's `types` and
/// `outgoing-handler` into `linker`, then Cordon's replacements over them.
pub(crate) fn link(linker: &mut Linker<HostState>) -> Result<(), EngineError> {
    let failed = |e: wasmtime::Error| EngineError::Link(Arc::new(e));
    wasmtime_wasi::p2::add_to_linker_async(linker).map_err(failed)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker).map_err(failed)?;
    linker.allow_shadowing(false);
    for o in OVERRIDES {
        ensure_defined(linker, o)?;
    }
    linker.allow_shadowing(true);
    let replaced = (|| {
        filesystem_types::shadow(linker)?;
        filesystem_preopens::shadow(linker)?;
        sockets_tcp_create_socket::shadow(linker)?;
        http_types::shadow(linker)
    })();
    linker.allow_shadowing(false);
    replaced.map_err(failed)
}

/// Fails unless wasmtime already defines `o.name` in `o.interface`: defining a name that
/// exists fails while shadowing is off, so success means it is new (and this linker is then
/// discarded with the error).
fn ensure_defined(linker: &mut Linker<HostState>, o: &Override) -> Result<(), EngineError> {
    let defined = linker.instance(o.interface).and_then(|mut instance| {
        instance.func_wrap(
            o.name,
            |_: wasmtime::StoreContextMut<'_, HostState>, (): ()| Ok(()),
        )
    });
    match defined {
        Err(_) => Ok(()),
        Ok(()) => Err(EngineError::NotOverridable {
            interface: o.interface,
            name: o.name,
            module: o.module,
            why: o.why,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each listed function is one Cordon's modules define (on a linker with nothing else), so
    /// the table cannot list a function no module replaces.
    #[test]
    fn every_override_is_defined_by_its_module() {
        let engine = wasmtime::Engine::default();
        let mut linker: Linker<HostState> = Linker::new(&engine);
        filesystem_types::shadow(&mut linker).unwrap();
        filesystem_preopens::shadow(&mut linker).unwrap();
        sockets_tcp_create_socket::shadow(&mut linker).unwrap();
        http_types::shadow(&mut linker).unwrap();
        for o in OVERRIDES {
            assert!(
                ensure_defined(&mut linker, o).is_ok(),
                "{} {} is listed but not defined",
                o.interface,
                o.name
            );
        }
    }

    /// A name wasmtime does not define is refused with its name.
    #[test]
    fn an_undefined_name_is_refused() {
        let engine = wasmtime::Engine::default();
        let mut linker: Linker<HostState> = Linker::new(&engine);
        let e = ensure_defined(
            &mut linker,
            &over(
                WASI_HTTP_TYPES,
                "[method]nothing.here",
                "http_types",
                "test",
            ),
        )
        .unwrap_err();
        assert!(e.to_string().contains("`[method]nothing.here`"), "{e}");
    }
}
