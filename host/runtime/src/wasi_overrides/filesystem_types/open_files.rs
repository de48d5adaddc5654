//! Cordon's `open-at`: a per-call cap on files and directories a plugin holds open, and opens
//! that cannot wait.
//!
//! Every descriptor a guest opens is a file descriptor of the host process, and wasmtime-wasi
//! sets no bound: a plugin with nothing more than a read-only grant could open (and never
//! close) until the process ran out of descriptors, so that for the rest of its time limit
//! every other call, and the host itself, failed to open anything. Cordon links `open-at` over
//! wasmtime-wasi's: a call whose opened files are still open [`MAX_OPEN_FILES_PER_CALL`] times is
//! refused another until it closes one.
//!
//! On Unix the open itself is wasmtime-wasi's, step for step (the same flags, the same
//! permission checks before the system sees the path, the same sandboxed resolution beneath
//! the directory by cap-primitives, from which wasmtime-wasi's own copy was imported), with one
//! difference: it asks the system not to wait. Opening a named pipe (FIFO) waits until the
//! other end is opened, in a system call that neither the epoch deadline nor the call's
//! timeout can interrupt; a call would hang past its time limit, holding a host thread and an
//! instance slot, and a one-shot `cordon call` would never return. So a pipe is first looked
//! for with a `stat` (then refused without being opened, so nothing waiting on its other end is
//! disturbed), and the open that follows is non-blocking (`O_NONBLOCK`) and looks at what it
//! opened: whoever can write the granted directory may swap a pipe in after the `stat`, and
//! the open then finds it without waiting and refuses it too. Files and devices are handed on
//! in blocking mode, as wasmtime-wasi's would be. One more wait this avoids: opening a file
//! another process holds a conflicting lease on (a file server's delegation or oplock) waits
//! until the lease is broken, up to the system's lease-break time (45 s by default); here it
//! answers `would-block` at once, as it would for a non-blocking native open. (Elsewhere than
//! Unix the open is wasmtime-wasi's own, after the same look for a pipe.)
//!
//! What counts is the host file, not the guest's handle to it: a stream taken from a
//! descriptor (`read-via-stream` …) shares the descriptor's file and keeps it open after the
//! descriptor is dropped, so a file counts until its last user is gone.
//!
//! An open the grant refuses (a path that leads out of its directory, a write or create under
//! a read-only grant) or that finds a pipe is noted for the call's report where it is refused,
//! with the path as the guest sees it.

use std::fs::File;
use std::sync::{Arc, Weak};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};

use crate::caps::MAX_OPEN_FILES_PER_CALL;
use crate::wasi_overrides::filesystem_preopens::locate;
use crate::wasi_overrides::{OverrideParts, OverrideView, WASI_FILESYSTEM_TYPES};

/// The host files a call opened, as long as anything (descriptor or stream) still uses them.
#[derive(Default)]
pub(crate) struct OpenFiles {
    files: Vec<Weak<File>>,
    /// Whether the host log already says this call hit the cap (once per call, so refused
    /// opens cannot flood the log).
    warned: bool,
    /// Whether the host log already says this call was refused a pipe (once per call).
    pipe_warned: bool,
}

impl OpenFiles {
    /// Whether another file may be opened, forgetting files that were closed meanwhile.
    fn has_room(&mut self) -> bool {
        if self.files.len() >= MAX_OPEN_FILES_PER_CALL {
            self.files.retain(|file| file.strong_count() > 0);
        }
        self.files.len() < MAX_OPEN_FILES_PER_CALL
    }
}

/// Why an open failed: the guest gets [`OpenError::code`]; the call's report notes the
/// refusals of the grant itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenError {
    /// Refused by the system or by the open's own rules, passed on as is.
    Code(ErrorCode),
    /// The path leads outside the directory it is opened below (`..`, an absolute path, a
    /// symbolic link that points out): `not-permitted`, as wasmtime-wasi answers.
    Escapes,
    /// A write or create below a read-only grant: `not-permitted`, before the system sees the
    /// path.
    ReadOnly,
    /// A named pipe or socket: `unsupported` (see the module documentation).
    Pipe,
}

impl OpenError {
    /// What the guest is told.
    fn code(self) -> ErrorCode {
        match self {
            OpenError::Code(code) => code,
            OpenError::Escapes | OpenError::ReadOnly => ErrorCode::NotPermitted,
            OpenError::Pipe => ErrorCode::Unsupported,
        }
    }
}

impl From<ErrorCode> for OpenError {
    fn from(code: ErrorCode) -> OpenError {
        OpenError::Code(code)
    }
}

impl From<std::io::Error> for OpenError {
    fn from(e: std::io::Error) -> OpenError {
        OpenError::Code(ErrorCode::from(e))
    }
}

/// Notes a refused open of `path` below `dir` in the call's report; any other failure is the
/// guest's business.
fn note_refusal(
    parts: &mut OverrideParts<'_>,
    dir: &Resource<Descriptor>,
    path: &str,
    refused: OpenError,
) -> wasmtime::Result<()> {
    if let OpenError::Code(_) = refused {
        return Ok(());
    }
    let Descriptor::Dir(dir) = parts.table.get(dir)? else {
        return Ok(());
    };
    let at = locate(parts.fs.preopens(), dir, path);
    let line = match refused {
        OpenError::Escapes => format!("path: {}", at.grant_phrase("escapes the grant")),
        OpenError::ReadOnly => {
            if let Some(grant) = at.wanted_rw() {
                parts.refused.want(grant);
            }
            format!("write: {}", at.grant_phrase("under a read-only grant"))
        }
        OpenError::Pipe => format!("path: {} is a named pipe or socket (not opened)", at.path),
        OpenError::Code(_) => return Ok(()),
    };
    parts.refused.refuse(line);
    Ok(())
}

/// Whether `path` names a named pipe (FIFO) or socket, as far as a `stat` can tell now.
/// Opening as a directory, or creating exclusively, is not looked at: a pipe there is rare and
/// the non-blocking open still refuses it.
async fn names_a_pipe(
    state: &mut impl OverrideView,
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
    // wasmtime-wasi reports a FIFO as `unknown`, as it does a socket. Anything stat cannot
    // see is left to the open, which reports it.
    matches!(
        stat,
        Ok(stat) if matches!(stat.type_, DescriptorType::Fifo | DescriptorType::Unknown)
    )
}

/// Opens `path` beneath `dir` for the guest: a new descriptor in the call's table, or why
/// not. `Ok(Err(_))` is the guest's answer; `Err` traps.
async fn open(
    state: &mut impl OverrideView,
    dir: &Resource<Descriptor>,
    path_flags: PathFlags,
    path: &str,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<Result<Resource<Descriptor>, OpenError>> {
    if !names_a_pipe(state, dir, path_flags, path, open_flags).await {
        #[cfg(unix)]
        {
            let parent = match state.overrides().table.get(dir)? {
                Descriptor::Dir(parent) => parent.clone(),
                Descriptor::File(_) => return Ok(Err(ErrorCode::NotDirectory.into())),
            };
            match nonblocking::open(&parent, path_flags, path, open_flags, flags) {
                Ok(nonblocking::Opened::Descriptor(opened)) => {
                    return Ok(Ok(state.overrides().table.push(opened)?));
                }
                // Swapped in since the look.
                Ok(nonblocking::Opened::Pipe) => {}
                Err(code) => return Ok(Err(code)),
            }
        }
        // Elsewhere the open is wasmtime-wasi's own.
        #[cfg(not(unix))]
        {
            use wasmtime_wasi::p2::bindings::filesystem::types::Host;
            let read_only = match state.overrides().table.get(dir)? {
                Descriptor::Dir(parent) => parent.perms.write_not_permitted(),
                Descriptor::File(_) => false,
            };
            let base = Resource::<Descriptor>::new_borrow(dir.rep());
            let opened = HostDescriptor::open_at(
                &mut state.filesystem(),
                base,
                path_flags,
                path.to_string(),
                open_flags,
                flags,
            )
            .await;
            let code = match opened {
                Ok(fd) => return Ok(Ok(fd)),
                Err(e) => Host::convert_error_code(&mut state.filesystem(), e)?,
            };
            // wasmtime-wasi answers both of the grant's refusals with `not-permitted`: a write
            // under a read-only grant before the system sees the path, else a path that leaves
            // the directory (the system's own `EPERM` is rare for an open, and then taken for
            // one).
            let writes = open_flags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
                || flags.contains(DescriptorFlags::WRITE);
            return Ok(Err(match code {
                ErrorCode::NotPermitted if read_only && writes => OpenError::ReadOnly,
                ErrorCode::NotPermitted => OpenError::Escapes,
                code => OpenError::Code(code),
            }));
        }
    }
    let OverrideParts { fs, plugin, .. } = state.overrides();
    if !std::mem::replace(&mut fs.open_files.pipe_warned, true) {
        tracing::warn!(
            plugin = %plugin,
            %path,
            "refusing to open a named pipe or socket: opening or reading one waits for the \
             other end, where no time limit can stop it"
        );
    }
    Ok(Err(OpenError::Pipe))
}

/// Replaces wasmtime-wasi's `open-at` in `linker`; shadowing must be allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, T>,
         (dir, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                let OverrideParts { fs, plugin, .. } = state.overrides();
                if !fs.open_files.has_room() {
                    if !std::mem::replace(&mut fs.open_files.warned, true) {
                        tracing::warn!(
                            plugin = %plugin,
                            "refusing to open more files: the call holds {MAX_OPEN_FILES_PER_CALL} \
                             open files and directories, the most one call may hold"
                        );
                    }
                    return Ok((Err(ErrorCode::InsufficientMemory),));
                }
                #[cfg(unix)]
                if let Some(answer) =
                    crate::wasi_overrides::filesystem_types::fresh_listing::before_open(
                        &mut state.overrides(),
                        &dir,
                        &path,
                        open_flags,
                        flags,
                    )?
                {
                    return Ok((Err(answer),));
                }
                let fd = match open(state, &dir, path_flags, &path, open_flags, flags).await? {
                    Ok(fd) => fd,
                    Err(failed) => {
                        note_refusal(&mut state.overrides(), &dir, &path, failed)?;
                        return Ok((Err(failed.code()),));
                    }
                };
                let mut parts = state.overrides();
                let file = match parts.table.get(&fd)? {
                    Descriptor::File(f) => Arc::downgrade(&f.file),
                    Descriptor::Dir(d) => Arc::downgrade(&d.dir),
                };
                // Where an opened directory came from, if its listing may answer lookups.
                #[cfg(unix)]
                if parts.fs.fresh_listing.wants(&path) {
                    let base = Resource::<Descriptor>::new_borrow(dir.rep());
                    crate::wasi_overrides::filesystem_types::fresh_listing::after_open(
                        &mut parts, &base, &path, &fd,
                    )?;
                }
                parts.fs.open_files.files.push(file);
                Ok((Ok(fd),))
            })
        },
    )?;
    Ok(())
}

/// The open without waiting (see the module documentation).
#[cfg(unix)]
mod nonblocking {
    use std::os::unix::fs::FileTypeExt;
    use std::path::Path;

    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
    use cap_primitives::fs::{OpenOptions, OpenOptionsExt};
    use rustix::fs::OFlags;
    use rustix::io::Errno;
    use wasmtime_wasi::OpenMode;
    use wasmtime_wasi::filesystem::{Descriptor, Dir, File};
    use wasmtime_wasi::p2::bindings::filesystem::types::{
        DescriptorFlags, ErrorCode, OpenFlags, PathFlags,
    };

    use super::OpenError;
    use crate::wasi_overrides::ALLOW_BLOCKING_CURRENT_THREAD;

    /// What an open found.
    pub(super) enum Opened {
        Descriptor(Descriptor),
        /// A named pipe or a socket, closed again: nothing a tool reads as a file.
        Pipe,
    }

    /// Opens `path` beneath `parent` as wasmtime-wasi's `open-at` does, without waiting for
    /// anything.
    pub(super) fn open(
        parent: &Dir,
        path_flags: PathFlags,
        path: &str,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> Result<Opened, OpenError> {
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
            return Err(ErrorCode::Unsupported.into());
        }
        if open_flags.contains(OpenFlags::DIRECTORY)
            && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
        {
            return Err(ErrorCode::Invalid.into());
        }
        // The grant's permissions before the system sees the path.
        if parent.perms.write_not_permitted() && (creates || mode.contains(OpenMode::WRITE)) {
            return Err(OpenError::ReadOnly);
        }
        // Nothing to wait for; and a terminal must not become the host's controlling one.
        options.custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32);
        let file =
            cap_primitives::fs::open(&parent.dir, Path::new(path), &options).map_err(|e| {
                match e.raw_os_error().map(Errno::from_raw_os_error) {
                    // A pipe opened for writing that nobody reads (or a socket, or a device without
                    // its hardware): what the system says, where wasmtime-wasi's table has only
                    // "i/o error".
                    Some(Errno::NXIO) => ErrorCode::NoSuchDevice.into(),
                    // A conflicting lease (see the module documentation).
                    Some(Errno::AGAIN) => ErrorCode::WouldBlock.into(),
                    // cap-primitives' refusal of a path that leaves the directory (its own
                    // resolution's, or the kernel's `EXDEV` from `RESOLVE_BENEATH` turned into
                    // it): a permission error no system call returned.
                    None if e.kind() == std::io::ErrorKind::PermissionDenied => OpenError::Escapes,
                    _ => e.into(),
                }
            })?;
        let kind = file.metadata()?.file_type();
        if kind.is_dir() {
            let dir = Dir::new(file, parent.perms, mode, ALLOW_BLOCKING_CURRENT_THREAD);
            return Ok(Opened::Descriptor(Descriptor::Dir(dir)));
        }
        if open_flags.contains(OpenFlags::DIRECTORY) {
            return Err(ErrorCode::NotDirectory.into());
        }
        if kind.is_fifo() || kind.is_socket() {
            return Ok(Opened::Pipe);
        }
        // Back in blocking mode, so that reads and writes behave as after wasmtime-wasi's
        // open (devices and some network filesystems look at the flag on every read).
        let status = rustix::fs::fcntl_getfl(&file).map_err(std::io::Error::from)?;
        rustix::fs::fcntl_setfl(&file, status - OFlags::NONBLOCK).map_err(std::io::Error::from)?;
        let file = File::new(file, parent.perms, mode, ALLOW_BLOCKING_CURRENT_THREAD);
        Ok(Opened::Descriptor(Descriptor::File(file)))
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use wasmtime_wasi::FsPerms;

        fn granted(dir: &Path, perms: FsPerms) -> Dir {
            let handle = std::fs::File::open(dir).unwrap();
            Dir::new(handle, perms, OpenMode::READ, ALLOW_BLOCKING_CURRENT_THREAD)
        }

        /// The open, with the error code the guest gets.
        fn open_at(
            dir: &Dir,
            path: &str,
            open: OpenFlags,
            flags: DescriptorFlags,
        ) -> Result<Opened, ErrorCode> {
            refused_open_at(dir, path, open, flags).map_err(OpenError::code)
        }

        /// The open, with why it failed.
        fn refused_open_at(
            dir: &Dir,
            path: &str,
            open: OpenFlags,
            flags: DescriptorFlags,
        ) -> Result<Opened, OpenError> {
            super::open(dir, PathFlags::SYMLINK_FOLLOW, path, open, flags)
        }

        fn mkfifo(path: &Path) {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap();
        }

        #[test]
        fn files_come_back_in_blocking_mode_with_the_grants_permissions() {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join("file"), "x").unwrap();
            let dir = granted(tmp.path(), FsPerms::ReadOnly);
            let Ok(Opened::Descriptor(Descriptor::File(file))) =
                open_at(&dir, "file", OpenFlags::empty(), DescriptorFlags::READ)
            else {
                panic!("not opened as a file");
            };
            let status = rustix::fs::fcntl_getfl(&*file.file).unwrap();
            assert!(!status.contains(OFlags::NONBLOCK), "{status:?}");
            assert_eq!(file.perms, FsPerms::ReadOnly);
            assert_eq!(file.open_mode, OpenMode::READ);
        }

        #[test]
        fn a_read_only_grant_refuses_writes_before_the_system_sees_the_path() {
            let tmp = tempfile::tempdir().unwrap();
            let dir = granted(tmp.path(), FsPerms::ReadOnly);
            for (open, flags) in [
                (OpenFlags::CREATE, DescriptorFlags::READ),
                (OpenFlags::TRUNCATE, DescriptorFlags::READ),
                (OpenFlags::empty(), DescriptorFlags::WRITE),
            ] {
                let refused = open_at(&dir, "new", open, flags).err();
                assert_eq!(refused, Some(ErrorCode::NotPermitted), "{open:?} {flags:?}");
                let why = refused_open_at(&dir, "new", open, flags).err();
                assert_eq!(why, Some(OpenError::ReadOnly), "{open:?} {flags:?}");
            }
            assert!(!tmp.path().join("new").exists());
        }

        #[test]
        fn pipes_are_found_without_waiting_and_not_kept() {
            let tmp = tempfile::tempdir().unwrap();
            mkfifo(&tmp.path().join("pipe"));
            let dir = granted(tmp.path(), FsPerms::ReadWrite);
            // Read: the open succeeds at once and finds a pipe.
            let read = open_at(&dir, "pipe", OpenFlags::empty(), DescriptorFlags::READ);
            assert!(matches!(read, Ok(Opened::Pipe)));
            // Write, nobody reading: the system refuses at once.
            let write = open_at(&dir, "pipe", OpenFlags::empty(), DescriptorFlags::WRITE).err();
            assert_eq!(write, Some(ErrorCode::NoSuchDevice));
            // As a directory: not one.
            let as_dir = open_at(&dir, "pipe", OpenFlags::DIRECTORY, DescriptorFlags::READ).err();
            assert_eq!(as_dir, Some(ErrorCode::NotDirectory));
        }

        /// A lease another process holds (as a file server's delegation is) would make a
        /// blocking open wait for it to be broken; this one answers at once.
        #[cfg(target_os = "linux")]
        #[test]
        fn a_leased_file_answers_would_block_instead_of_waiting() {
            use std::io::BufRead;
            let tmp = tempfile::tempdir().unwrap();
            let leased = tmp.path().join("leased");
            std::fs::write(&leased, "x").unwrap();
            // A read lease, broken by any open for writing; the holder ignores the notice.
            let mut holder = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import fcntl, os, signal, sys, time\n\
                     signal.signal(signal.SIGIO, signal.SIG_IGN)\n\
                     fd = os.open(sys.argv[1], os.O_RDONLY)\n\
                     fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n\
                     print('held', flush=True)\n\
                     time.sleep(30)",
                ])
                .arg(&leased)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3 holds the lease");
            let mut line = String::new();
            std::io::BufReader::new(holder.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line.trim(), "held");
            let dir = granted(tmp.path(), FsPerms::ReadWrite);
            let started = std::time::Instant::now();
            let opened = open_at(&dir, "leased", OpenFlags::empty(), DescriptorFlags::WRITE);
            let waited = started.elapsed();
            holder.kill().unwrap();
            holder.wait().unwrap();
            assert_eq!(opened.err(), Some(ErrorCode::WouldBlock));
            assert!(
                waited < std::time::Duration::from_secs(5),
                "waited {waited:?}"
            );
        }

        #[test]
        fn escapes_are_refused() {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::create_dir(tmp.path().join("granted")).unwrap();
            std::fs::write(tmp.path().join("outside"), "secret").unwrap();
            std::os::unix::fs::symlink("../outside", tmp.path().join("granted/link")).unwrap();
            let dir = granted(&tmp.path().join("granted"), FsPerms::ReadOnly);
            for path in ["../outside", "link", "/etc/passwd"] {
                let opened = open_at(&dir, path, OpenFlags::empty(), DescriptorFlags::READ);
                assert!(opened.is_err(), "{path} was opened");
                let why = refused_open_at(&dir, path, OpenFlags::empty(), DescriptorFlags::READ);
                assert_eq!(why.err(), Some(OpenError::Escapes), "{path}");
                assert_eq!(OpenError::Escapes.code(), ErrorCode::NotPermitted);
            }
            // A name that is not there is the system's answer, not the grant's.
            let missing =
                refused_open_at(&dir, "nothing", OpenFlags::empty(), DescriptorFlags::READ);
            assert_eq!(missing.err(), Some(OpenError::Code(ErrorCode::NoEntry)));
        }
    }
}
