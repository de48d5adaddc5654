//! Everything Cordon changes in the WASI that wasmtime-wasi and wasmtime-wasi-http link.
//!
//! Cordon replaces some of their functions with its own, linked under the same names so that
//! guests importing any 0.2.x version get them. One file (or directory) per interface holds
//! the replacements; [`OVERRIDES`] lists every replaced function with why, and [`link`] checks
//! that each is one wasmtime defines before replacing it: a function wasmtime renamed or
//! dropped (after an upgrade) fails start-up with its name, instead of Cordon's version sitting
//! beside it under a name guests are never given.
//!
//! The replacements run on any store data that is an [`OverrideView`], as wasmtime-wasi's run
//! on any `WasiView`: the per-call state they keep ([`FsOverrides`], [`NetOverrides`]) is
//! defined here, and the sandbox's store data holds it and lends it out, so this layer depends
//! on nothing of the sandbox.

use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::WasiView;
use wasmtime_wasi_http::WasiHttpView;

use std::sync::Arc;

use crate::error::EngineError;
#[cfg(unix)]
use crate::live_handles::Created;
use crate::refusals::Refusals;
use filesystem_preopens::Preopen;
use filesystem_types::file_streams::FileStreams;
#[cfg(unix)]
use filesystem_types::fresh_listing::FreshListing;
use filesystem_types::lock_dirs::LockDirs;
use filesystem_types::open_files::OpenFiles;
#[cfg(unix)]
use filesystem_types::readdir::{DirEntries, ListedEntry};
use http_types::HttpObjects;
use sockets_tcp_create_socket::TcpSockets;

pub(crate) mod filesystem_preopens;
pub(crate) mod filesystem_types;
pub(crate) mod http_types;
pub(crate) mod sockets_tcp_create_socket;

/// Whether WASI's filesystem calls run on the calling thread instead of being handed to a
/// blocking pool (see where the context is built, `sandbox::build_state`). Descriptors Cordon
/// opens itself (`filesystem_preopens`, `open_files`) must be made the same way as
/// wasmtime-wasi's; defined here, in the layer that opens them, so it needs nothing of the
/// sandbox.
pub(crate) const ALLOW_BLOCKING_CURRENT_THREAD: bool = true;

/// Store data the replacements can run on, as wasmtime-wasi's functions run on a `WasiView`:
/// besides wasmtime's own views (which the replacements call into), it lends out the resource
/// table and the per-call state the replacements keep. Only the sandbox's `HostState`
/// implements it, so the generic functions below are compiled once, for it.
pub(crate) trait OverrideView: WasiView + WasiHttpView + 'static {
    /// Disjoint borrows of what the replacements touch.
    fn overrides(&mut self) -> OverrideParts<'_>;
}

/// What [`OverrideView::overrides`] lends out: borrows of separate parts of the store data, so
/// a replacement can count in its own state while it reads the table.
pub(crate) struct OverrideParts<'a> {
    /// Every resource the guest holds a handle to (and their children).
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) fs: &'a mut FsOverrides,
    pub(crate) net: &'a mut NetOverrides,
    /// The plugin's name, for the host log's warnings.
    pub(crate) plugin: &'a str,
    /// What the call was refused, for its report: a replacement that refuses the guest by its
    /// grants notes it here, where it answers with the error.
    pub(crate) refused: &'a mut Refusals,
}

/// What the `wasi:filesystem` replacements keep in one call: the granted directories it opened,
/// and what the per-call caps count of what the guest holds.
pub(crate) struct FsOverrides {
    /// The granted directories, opened for this call (`wasi:filesystem/preopens`).
    preopens: Vec<Preopen>,
    open_files: OpenFiles,
    file_streams: FileStreams,
    /// The lock directories this call made and has not removed: removed when it ends.
    pub(crate) lock_dirs: LockDirs,
    /// The directory listings this call took, and whether the log already says it hit their cap.
    #[cfg(unix)]
    listings: Created<DirEntries>,
    #[cfg(unix)]
    listings_warned: bool,
    #[cfg(unix)]
    last_listed: Option<ListedEntry>,
    /// Devices this call listed directories on, and whether listings there carry real inode
    /// numbers.
    #[cfg(unix)]
    listed_devices: Vec<(u64, bool)>,
    /// The last listing, while it may answer lookups of names it lacks.
    #[cfg(unix)]
    fresh_listing: FreshListing,
}

impl FsOverrides {
    /// The state of a call given `preopens`; `all_read_only` says whether none of them may be
    /// written (only then may listings answer lookups, see `fresh_listing`).
    #[cfg_attr(not(unix), allow(unused_variables))]
    pub(crate) fn new(preopens: Vec<Preopen>, all_read_only: bool) -> FsOverrides {
        FsOverrides {
            preopens,
            open_files: Default::default(),
            file_streams: Default::default(),
            lock_dirs: Default::default(),
            #[cfg(unix)]
            listings: Default::default(),
            #[cfg(unix)]
            listings_warned: false,
            #[cfg(unix)]
            last_listed: None,
            #[cfg(unix)]
            listed_devices: Vec::new(),
            #[cfg(unix)]
            fresh_listing: FreshListing::new(all_read_only),
        }
    }

    /// The granted directories opened for this call (also what `bulk-read` reads below).
    pub(crate) fn preopens(&self) -> &[Preopen] {
        &self.preopens
    }
}

/// What the `wasi:sockets` and `wasi:http` replacements count in one call.
#[derive(Default)]
pub(crate) struct NetOverrides {
    tcp_sockets: TcpSockets,
    http_objects: HttpObjects,
}

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
const LOCKS: &str =
    "lock directories a call made are removed when it ends (SQLite's dot-file locks)";
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
        "[method]descriptor.create-directory-at",
        "filesystem_types::lock_dirs",
        LOCKS,
    ),
    over(
        WASI_FILESYSTEM_TYPES,
        "[method]descriptor.remove-directory-at",
        "filesystem_types::lock_dirs",
        LOCKS,
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
pub(crate) fn link<T: OverrideView>(linker: &mut Linker<T>) -> Result<(), EngineError> {
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
fn ensure_defined<T: OverrideView>(
    linker: &mut Linker<T>,
    o: &Override,
) -> Result<(), EngineError> {
    let defined = linker.instance(o.interface).and_then(|mut instance| {
        instance.func_wrap(o.name, |_: wasmtime::StoreContextMut<'_, T>, (): ()| Ok(()))
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
    use crate::sandbox::HostState;

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
