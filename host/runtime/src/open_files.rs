//! A per-call cap on files and directories a plugin holds open.
//!
//! Every descriptor a guest opens is a file descriptor of the host process, and wasmtime-wasi
//! sets no bound: a plugin with nothing more than a read-only grant could open (and never
//! close) until the process ran out of descriptors, so that for the rest of its time limit
//! every other call, and the host itself, failed to open anything. Cordon links `open-at` over
//! wasmtime-wasi's: the open itself is still wasmtime-wasi's (sandboxed path resolution,
//! permissions), but a call whose opened files are still open [`MAX_OPEN_PER_CALL`] times is
//! refused another until it closes one.
//!
//! What counts is the host file, not the guest's handle to it: a stream taken from a
//! descriptor (`read-via-stream` …) shares the descriptor's file and keeps it open after the
//! descriptor is dropped, so a file counts until its last user is gone.

use std::fs::File;
use std::sync::{Arc, Weak};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Host, HostDescriptor, OpenFlags, PathFlags,
};

use crate::engine::WASI_FILESYSTEM_TYPES;
use crate::sandbox::HostState;

/// Files one call may hold open at once (its preopens not counted). With the default pool of
/// 64 concurrent calls that is 16,384 at most, within a typical 20k–1M process limit.
pub(crate) const MAX_OPEN_PER_CALL: usize = 256;

/// The host files a call opened, as long as anything (descriptor or stream) still uses them.
#[derive(Default)]
pub(crate) struct OpenFiles {
    files: Vec<Weak<File>>,
    /// Whether the host log already says this call hit the cap (once per call, so refused
    /// opens cannot flood the log).
    warned: bool,
}

impl OpenFiles {
    /// Whether another file may be opened, forgetting files that were closed meanwhile.
    fn has_room(&mut self) -> bool {
        if self.files.len() >= MAX_OPEN_PER_CALL {
            self.files.retain(|file| file.strong_count() > 0);
        }
        self.files.len() < MAX_OPEN_PER_CALL
    }
}

/// Whether `path` names a named pipe (FIFO) that `open-at` would open. Opening one blocks the
/// opening thread until a writer (or reader) shows up, in a system call that neither the
/// epoch deadline nor the call's timeout can interrupt: the call would hang past its time
/// limit, holding a host thread and an instance slot, and a one-shot `cordon call` would
/// never return. wasmtime-wasi opens without `O_NONBLOCK`, so the host looks first. Opening
/// as a directory, or creating exclusively, fails on a FIFO without blocking.
async fn opens_a_fifo(
    state: &mut HostState,
    dir: &Resource<Descriptor>,
    path_flags: PathFlags,
    path: &str,
    open_flags: OpenFlags,
) -> bool {
    if open_flags.contains(OpenFlags::DIRECTORY)
        || open_flags.contains(OpenFlags::CREATE | OpenFlags::EXCLUSIVE)
    {
        return false;
    }
    let base = Resource::<Descriptor>::new_borrow(dir.rep());
    let stat =
        HostDescriptor::stat_at(&mut state.filesystem(), base, path_flags, path.to_string()).await;
    // wasmtime-wasi reports a FIFO as `unknown`, as it does a socket (which no open reaches).
    // Anything stat cannot see is left to the open, which reports it.
    matches!(
        stat,
        Ok(stat) if matches!(stat.type_, DescriptorType::Fifo | DescriptorType::Unknown)
    )
}

/// Replaces wasmtime-wasi's `open-at` in `linker`; shadowing must be allowed by the caller.
pub(crate) fn shadow(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
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
                if !state.open_files.has_room() {
                    if !std::mem::replace(&mut state.open_files.warned, true) {
                        tracing::warn!(
                            plugin = %state.log.plugin,
                            "refusing to open more files: the call holds {MAX_OPEN_PER_CALL} \
                             open files and directories, the most one call may hold"
                        );
                    }
                    return Ok((Err(ErrorCode::InsufficientMemory),));
                }
                #[cfg(unix)]
                if let Some(answer) =
                    crate::fresh_listing::before_open(state, &dir, &path, open_flags, flags)?
                {
                    return Ok((Err(answer),));
                }
                if opens_a_fifo(state, &dir, path_flags, &path, open_flags).await {
                    tracing::warn!(
                        plugin = %state.log.plugin,
                        %path,
                        "refusing to open a named pipe: opening one waits for the other end, \
                         where no time limit can stop it"
                    );
                    return Ok((Err(ErrorCode::Unsupported),));
                }
                // Where an opened directory came from, if its listing may answer lookups.
                #[cfg(unix)]
                let origin = state
                    .fresh_listing
                    .wants(&path)
                    .then(|| (Resource::<Descriptor>::new_borrow(dir.rep()), path.clone()));
                let mut fs = state.filesystem();
                let opened =
                    HostDescriptor::open_at(&mut fs, dir, path_flags, path, open_flags, flags)
                        .await;
                let result = match opened {
                    Ok(fd) => {
                        #[cfg(unix)]
                        if let Some((base, path)) = &origin {
                            crate::fresh_listing::after_open(state, base, path, &fd)?;
                        }
                        let file = match state.table.get(&fd)? {
                            Descriptor::File(f) => Arc::downgrade(&f.file),
                            Descriptor::Dir(d) => Arc::downgrade(&d.dir),
                        };
                        state.open_files.files.push(file);
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
