//! Cordon's `get-directories`: each granted directory opened once, by the host, without
//! following symbolic links, and checked by identity before the guest gets it.
//!
//! wasmtime-wasi's preopens are opened by path when the context is built. A grant's path was
//! resolved when it was granted and is resolved again per call, but between that resolution and
//! an open by path, whoever can write a parent of the directory can swap in a symbolic link, and
//! sandboxed plugins racing each other through a shared grant do win that race. Here the
//! directory is opened with no symbolic link allowed anywhere in its (canonical) path (`openat2`
//! with `RESOLVE_NO_SYMLINKS`, else one `O_NOFOLLOW` step per component), so resolving the path
//! and opening it are one step; the handle's device and inode are what the check against
//! Cordon's own state (the home, the config file) is made on, and that same handle is what the
//! guest's descriptor wraps; nothing opens the path again.

use std::fs::File;
use std::path::Path;

use cordon_core::{FileId, FsGrant, FsMode, ReservedPaths};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, Dir};
use wasmtime_wasi::{FsPerms, OpenMode};

use crate::error::{CallError, Denial};
use crate::wasi_overrides::{
    ALLOW_BLOCKING_CURRENT_THREAD, OverrideParts, OverrideView, WASI_FILESYSTEM_PREOPENS,
};

/// One granted directory of a call, opened.
#[derive(Clone)]
pub(crate) struct Preopen {
    /// The opened directory, with the grant's permissions.
    pub(crate) dir: Dir,
    /// Where the guest sees it.
    pub(crate) guest_path: String,
}

/// Opens the directory of `grant` for one call; refuses (as `Denied`) one that vanished, now
/// resolves elsewhere (a symbolic link put in its path since it was granted), or overlaps
/// Cordon's own state.
pub(crate) fn open_granted(
    grant: &FsGrant,
    reserved: &ReservedPaths,
) -> Result<Preopen, CallError> {
    let host = &grant.host;
    let denied = |reason: String| {
        CallError::Denied(Denial::Directory {
            dir: host.clone(),
            reason,
        })
    };
    // The grant's path is canonical, so opening it with no link allowed anywhere is its
    // resolution and its open in one step: what opens is what the path names at that instant.
    let file = open_dir_without_links(host).map_err(|e| match std::fs::canonicalize(host) {
        Ok(now) if now != *host => denied(format!(
            "now resolves to `{}`; it was changed after the grant, re-grant it if that is intended",
            now.display()
        )),
        _ if is_link_refusal(&e) => denied(
            "had a symbolic link in its path while the call started; it was not opened".to_string(),
        ),
        _ => denied(format!(
            "cannot be opened ({e}); re-grant an existing directory"
        )),
    })?;
    let opened =
        FileId::of_file(&file).map_err(|e| denied(format!("cannot be inspected ({e})")))?;
    reserved
        .check_opened_dir(host, opened)
        .map_err(|e| match e {
            cordon_core::GrantError::Reserved(overlap) => denied(format!(
                "cannot be used: {overlap}. The call was refused; revoke this grant"
            )),
            other => CallError::Denied(Denial::Reserved(other)),
        })?;
    let (perms, mode) = match grant.mode {
        FsMode::ReadOnly => (FsPerms::ReadOnly, OpenMode::READ),
        FsMode::ReadWrite => (FsPerms::ReadWrite, OpenMode::READ | OpenMode::WRITE),
    };
    Ok(Preopen {
        dir: Dir::new(file, perms, mode, ALLOW_BLOCKING_CURRENT_THREAD),
        guest_path: grant.guest_path(),
    })
}

/// Opens the directory at the absolute path `path` as wasmtime-wasi opens a preopen (a path
/// handle, `O_PATH`), failing if any component of the path is a symbolic link.
#[cfg(target_os = "linux")]
fn open_dir_without_links(path: &Path) -> std::io::Result<File> {
    use rustix::fs::{CWD, FileType, Mode, OFlags, ResolveFlags, fstat, openat, openat2};
    use rustix::io::Errno;
    use std::path::Component;
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match openat2(
        CWD,
        path,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => return Ok(File::from(fd)),
        // Kernels before 5.6, and sandboxes whose seccomp filter predates openat2: one
        // `openat` per component, none following a link.
        Err(Errno::NOSYS | Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let mut dir = openat(CWD, "/", flags, Mode::empty())?;
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(name) => {
                dir = openat(&dir, name, flags | OFlags::NOFOLLOW, Mode::empty())?;
                // `O_PATH | O_NOFOLLOW` opens a symbolic link itself instead of failing.
                if FileType::from_raw_mode(fstat(&dir)?.st_mode) != FileType::Directory {
                    return Err(Errno::LOOP.into());
                }
            }
            _ => return Err(Errno::INVAL.into()),
        }
    }
    Ok(File::from(dir))
}

/// Whether opening failed on a symbolic link in the path.
#[cfg(target_os = "linux")]
fn is_link_refusal(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// Elsewhere the directory is opened by path after checking that the path still resolves to
/// itself (a check, then an open: not free of races as on Linux).
#[cfg(not(target_os = "linux"))]
fn open_dir_without_links(path: &Path) -> std::io::Result<File> {
    if std::fs::canonicalize(path)? != path {
        return Err(std::io::Error::other(
            "the path resolves through a symbolic link",
        ));
    }
    File::open(path)
}

#[cfg(not(target_os = "linux"))]
fn is_link_refusal(_: &std::io::Error) -> bool {
    false
}

/// Replaces wasmtime-wasi's `get-directories` in `linker`: the guest gets the directories this
/// call opened. Shadowing must be allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut preopens = linker.instance(WASI_FILESYSTEM_PREOPENS)?;
    preopens.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let OverrideParts { table, fs, .. } = store.data_mut().overrides();
            let mut out: Vec<(Resource<Descriptor>, String)> =
                Vec::with_capacity(fs.preopens.len());
            for p in &fs.preopens {
                let fd = table.push(Descriptor::Dir(p.dir.clone()))?;
                out.push((fd, p.guest_path.clone()));
            }
            Ok((out,))
        },
    )
}
