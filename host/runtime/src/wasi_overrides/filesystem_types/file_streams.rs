//! A per-call cap on the streams a plugin holds over files.
//!
//! Every stream a guest takes of a file holds host memory of its own: reading one starts a
//! blocking task on the host that fills a 64 KiB buffer, whatever the guest asked for. Streams
//! of one file share its descriptor, so the open-files cap counts them once: a plugin with a
//! read-only grant could take 100,000 streams of one file and hold gigabytes of host memory
//! and hundreds of the host's blocking threads. Cordon links `read-via-stream`,
//! `write-via-stream` and `append-via-stream` over wasmtime-wasi's; a call already holding
//! [`MAX_FILE_STREAMS_PER_CALL`] streams is refused another until it drops one.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{ErrorCode, Filesize, Host, HostDescriptor};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsResult};

use crate::caps::MAX_FILE_STREAMS_PER_CALL;
use crate::live_handles::Created;
use crate::wasi_overrides::{OverrideParts, OverrideView, WASI_FILESYSTEM_TYPES};

/// The file streams a call took.
#[derive(Default)]
pub(crate) struct FileStreams {
    input: Created<DynInputStream>,
    output: Created<DynOutputStream>,
    /// Whether the host log already says this call hit the cap (once per call).
    warned: bool,
}

/// Whether the call may take another stream; if not, logs it once per call.
fn has_room(parts: OverrideParts<'_>) -> bool {
    let OverrideParts {
        table, fs, plugin, ..
    } = parts;
    let streams = &mut fs.file_streams;
    let room = streams.input.recorded() + streams.output.recorded() < MAX_FILE_STREAMS_PER_CALL
        || streams.input.live(table) + streams.output.live(table) < MAX_FILE_STREAMS_PER_CALL;
    if !room && !std::mem::replace(&mut streams.warned, true) {
        tracing::warn!(
            plugin = %plugin,
            "refusing to open more file streams: the call holds {MAX_FILE_STREAMS_PER_CALL}, \
             the most one call may hold"
        );
    }
    room
}

/// Replaces wasmtime-wasi's file stream constructors in `linker`; shadowing must be allowed by
/// the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.func_wrap(
        "[method]descriptor.read-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd, offset): (Resource<Descriptor>, Filesize)| {
            let state = store.data_mut();
            if !has_room(state.overrides()) {
                return Ok((Err(ErrorCode::InsufficientMemory),));
            }
            let taken = HostDescriptor::read_via_stream(&mut state.filesystem(), fd, offset);
            Ok((record(state, taken, |s| &mut s.input)?,))
        },
    )?;
    types.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd, offset): (Resource<Descriptor>, Filesize)| {
            let state = store.data_mut();
            if !has_room(state.overrides()) {
                return Ok((Err(ErrorCode::InsufficientMemory),));
            }
            let taken = HostDescriptor::write_via_stream(&mut state.filesystem(), fd, offset);
            Ok((record(state, taken, |s| &mut s.output)?,))
        },
    )?;
    types.func_wrap(
        "[method]descriptor.append-via-stream",
        |mut store: StoreContextMut<'_, T>, (fd,): (Resource<Descriptor>,)| {
            let state = store.data_mut();
            if !has_room(state.overrides()) {
                return Ok((Err(ErrorCode::InsufficientMemory),));
            }
            let taken = HostDescriptor::append_via_stream(&mut state.filesystem(), fd);
            Ok((record(state, taken, |s| &mut s.output)?,))
        },
    )?;
    Ok(())
}

/// Counts a stream that was taken among those `kind` picks, or turns the failure into its
/// error code.
fn record<S: 'static>(
    state: &mut impl OverrideView,
    taken: FsResult<Resource<S>>,
    kind: fn(&mut FileStreams) -> &mut Created<S>,
) -> wasmtime::Result<Result<Resource<S>, ErrorCode>> {
    Ok(match taken {
        Ok(stream) => {
            kind(&mut state.overrides().fs.file_streams).record(&stream);
            Ok(stream)
        }
        Err(e) => Err(Host::convert_error_code(&mut state.filesystem(), e)?),
    })
}
