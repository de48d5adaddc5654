//! A per-call cap on files and directories a plugin holds open.
//!
//! Every descriptor a guest opens is a file descriptor of the host process, and wasmtime-wasi
//! sets no bound: a plugin with nothing more than a read-only grant could open (and never
//! close) until the process ran out of descriptors, so that for the rest of its time limit
//! every other call, and the host itself, failed to open anything. Cordon links `open-at` and
//! the `descriptor` resource over wasmtime-wasi's: the open itself is still wasmtime-wasi's
//! (sandboxed path resolution, permissions), but a call holding [`MAX_OPEN_PER_CALL`]
//! descriptors is refused another until it closes one.

use std::collections::HashSet;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, Host, HostDescriptor, OpenFlags, PathFlags,
};

use crate::engine::WASI_FILESYSTEM_TYPES;
use crate::sandbox::HostState;

/// Descriptors one call may hold open at once (its preopens not counted). With the default
/// pool of 64 concurrent calls that is 16,384 at most, within a typical 20k–1M process limit.
pub(crate) const MAX_OPEN_PER_CALL: usize = 256;

/// The descriptors a call opened and has not closed yet, by resource handle.
#[derive(Default)]
pub(crate) struct OpenFiles(HashSet<u32>);

/// Replaces wasmtime-wasi's `open-at` and the `descriptor` resource (its destructor) in
/// `linker`; shadowing must be allowed by the caller.
pub(crate) fn shadow(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.resource(
        "descriptor",
        ResourceType::host::<Descriptor>(),
        |mut store, rep| {
            let state = store.data_mut();
            state.open_files.0.remove(&rep);
            // Dropping the descriptor closes the file, as in wasmtime-wasi.
            state.table.delete(Resource::<Descriptor>::new_own(rep))?;
            Ok(())
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, HostState>,
         (dir, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if state.open_files.0.len() >= MAX_OPEN_PER_CALL {
                    tracing::warn!(
                        plugin = %state.log.plugin,
                        "refused to open {path:?}: the call already holds {MAX_OPEN_PER_CALL} \
                         open files and directories, the most one call may hold"
                    );
                    return Ok((Err(ErrorCode::InsufficientMemory),));
                }
                let mut fs = state.filesystem();
                let opened =
                    HostDescriptor::open_at(&mut fs, dir, path_flags, path, open_flags, flags)
                        .await;
                let result = match opened {
                    Ok(fd) => {
                        state.open_files.0.insert(fd.rep());
                        Ok(fd)
                    }
                    Err(e) => Err(Host::convert_error_code(&mut state.filesystem(), e)?),
                };
                Ok((result,))
            })
        },
    )?;
    Ok(())
}
