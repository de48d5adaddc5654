//! Cordon's `open-at`: a per-call cap on files and directories a plugin holds open, and opens
//! that cannot wait.
//!
//! Every descriptor a guest opens is a file descriptor of the host process, and wasmtime-wasi
//! sets no bound: a plugin with nothing more than a read-only grant could open (and never
//! close) until the process ran out of descriptors, so that for the rest of its time limit
//! every other call, and the host itself, failed to open anything. Cordon links `open-at` over
//! wasmtime-wasi's: a call whose opened files are still open [`MAX_OPEN_PER_CALL`] times is
//! refused another until it closes one.
//!
//! The open itself is wasmtime-wasi's, step for step (the same flags, the same permission
//! checks before the system sees the path, the same sandboxed resolution beneath the directory
//! by cap-primitives), with one difference: it asks the system not to wait. Opening a named
//! pipe (FIFO) waits until the other end is opened, in a system call that neither the epoch
//! deadline nor the call's timeout can interrupt; so does opening a file another process holds
//! a lease on, until the lease is broken. A call would hang past its time limit, holding a host
//! thread and an instance slot, and a one-shot `cordon call` would never return. Looking first
//! (a `stat`, then wasmtime-wasi's open) left a window in which whoever can write the granted
//! directory could put a pipe where the file was; opening with `O_NONBLOCK` and looking at what
//! was opened leaves none. Pipes and sockets are refused; files and devices are handed on
//! in blocking mode, as wasmtime-wasi's would be.
//!
//! What counts is the host file, not the guest's handle to it: a stream taken from a
//! descriptor (`read-via-stream` …) shares the descriptor's file and keeps it open after the
//! descriptor is dropped, so a file counts until its last user is gone.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Weak};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_primitives::fs::OpenOptions;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::OpenMode;
use wasmtime_wasi::filesystem::{Descriptor, Dir};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, OpenFlags, PathFlags,
};

use crate::engine::WASI_FILESYSTEM_TYPES;
use crate::sandbox::{ALLOW_BLOCKING_CURRENT_THREAD, HostState};

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

/// What an open found.
enum Opened {
    Descriptor(Descriptor),
    /// A named pipe or a socket, closed again: nothing a tool reads as a file.
    Pipe,
}

/// Opens `path` beneath `parent` as wasmtime-wasi's `open-at` does (see the module
/// documentation), without waiting for anything.
fn open_without_waiting(
    parent: &Dir,
    path_flags: PathFlags,
    path: &str,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> Result<Opened, ErrorCode> {
    let mut options = OpenOptions::new();
    let mut mode = OpenMode::empty();
    let creates = open_flags.contains(OpenFlags::CREATE);
    if creates {
        if open_flags.contains(OpenFlags::EXCLUSIVE) {
            options.create_new(true);
        } else {
            options.create(true);
        }
        options.write(true);
        mode |= OpenMode::WRITE;
    }
    if open_flags.contains(OpenFlags::TRUNCATE) {
        options.truncate(true).write(true);
        mode |= OpenMode::WRITE;
    }
    if flags.contains(DescriptorFlags::READ) {
        options.read(true);
        mode |= OpenMode::READ;
    }
    if flags.contains(DescriptorFlags::WRITE) {
        options.write(true);
        mode |= OpenMode::WRITE;
    } else {
        // Opened for reading even when neither was asked for, as wasmtime-wasi does: the
        // system lets it open, and the descriptor's mode refuses what was not asked for.
        options.read(true);
        mode |= OpenMode::READ;
    }
    options.follow(if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
        FollowSymlinks::Yes
    } else {
        FollowSymlinks::No
    });
    if flags.intersects(
        DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC,
    ) {
        return Err(ErrorCode::Unsupported);
    }
    if open_flags.contains(OpenFlags::DIRECTORY)
        && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
    {
        return Err(ErrorCode::Invalid);
    }
    // The grant's permissions before the system sees the path.
    if parent.perms.write_not_permitted() && (creates || mode.contains(OpenMode::WRITE)) {
        return Err(ErrorCode::NotPermitted);
    }
    #[cfg(unix)]
    {
        use cap_primitives::fs::OpenOptionsExt;
        // Nothing to wait for; and a terminal must not become the host's controlling one.
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        options.custom_flags(flags.bits() as i32);
    }
    let file = cap_primitives::fs::open(&parent.dir, Path::new(path), &options).map_err(|e| {
        // A pipe opened for writing that nobody reads (or a socket, or a device without its
        // hardware): what the system says, where wasmtime-wasi's table has only "i/o error".
        #[cfg(unix)]
        if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) {
            return ErrorCode::NoSuchDevice;
        }
        ErrorCode::from(e)
    })?;
    let kind = file.metadata()?.file_type();
    if kind.is_dir() {
        let dir = Dir::new(file, parent.perms, mode, ALLOW_BLOCKING_CURRENT_THREAD);
        return Ok(Opened::Descriptor(Descriptor::Dir(dir)));
    }
    if open_flags.contains(OpenFlags::DIRECTORY) {
        return Err(ErrorCode::NotDirectory);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() || kind.is_socket() {
            return Ok(Opened::Pipe);
        }
        // Back in blocking mode, so that reads and writes behave as after wasmtime-wasi's
        // open (devices and some network filesystems look at the flag on every read).
        let status = rustix::fs::fcntl_getfl(&file).map_err(std::io::Error::from)?;
        rustix::fs::fcntl_setfl(&file, status - rustix::fs::OFlags::NONBLOCK)
            .map_err(std::io::Error::from)?;
    }
    let file = wasmtime_wasi::filesystem::File::new(
        file,
        parent.perms,
        mode,
        ALLOW_BLOCKING_CURRENT_THREAD,
    );
    Ok(Opened::Descriptor(Descriptor::File(file)))
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
                let parent = match state.table.get(&dir)? {
                    Descriptor::Dir(parent) => parent.clone(),
                    Descriptor::File(_) => return Ok((Err(ErrorCode::NotDirectory),)),
                };
                let opened =
                    match open_without_waiting(&parent, path_flags, &path, open_flags, flags) {
                        Ok(Opened::Descriptor(opened)) => opened,
                        Ok(Opened::Pipe) => {
                            tracing::warn!(
                                plugin = %state.log.plugin,
                                %path,
                                "refusing to open a named pipe or socket: reading one waits for \
                                 the other end, where no time limit can stop it"
                            );
                            return Ok((Err(ErrorCode::Unsupported),));
                        }
                        Err(code) => return Ok((Err(code),)),
                    };
                let file = match &opened {
                    Descriptor::File(f) => Arc::downgrade(&f.file),
                    Descriptor::Dir(d) => Arc::downgrade(&d.dir),
                };
                let fd = state.table.push(opened)?;
                // Where an opened directory came from, if its listing may answer lookups.
                #[cfg(unix)]
                if state.fresh_listing.wants(&path) {
                    let base = Resource::<Descriptor>::new_borrow(dir.rep());
                    crate::fresh_listing::after_open(state, &base, &path, &fd)?;
                }
                state.open_files.files.push(file);
                Ok((Ok(fd),))
            })
        },
    )?;
    Ok(())
}
