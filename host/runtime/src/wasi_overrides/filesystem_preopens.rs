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
    /// The grant it was opened for: what a grant request widens.
    pub(crate) grant: FsGrant,
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
        grant: grant.clone(),
    })
}

/// Where a path the guest named below a directory descriptor lies, as the guest sees it: for
/// the lines of a call's report.
pub(crate) struct Located<'p> {
    /// The path from the guest's root (`/data/sub/../x`), or as the guest gave it when the
    /// directory's place is unknown.
    pub(crate) path: String,
    /// The guest path of the grant the directory lies in, when known.
    pub(crate) grant: Option<&'p str>,
    /// The grant the directory lies in, when known.
    pub(crate) granted: Option<&'p FsGrant>,
}

impl Located<'_> {
    /// `<path> … at <grant>`, or the path alone when the grant is unknown: for the lines of a
    /// call's report (`escapes the grant at /data`, `under a read-only grant at /data`).
    pub(crate) fn grant_phrase(&self, what: &str) -> String {
        match self.grant {
            Some(grant) => format!("{} {what} at {grant}", self.path),
            None => format!("{} (below a directory the plugin opened) {what}", self.path),
        }
    }

    /// The narrowest grant that would let the guest write this path, for a write refused under
    /// a read-only grant: its directory read-write, as the guest sees it, when that directory
    /// lies below the grant and exists on the host as a directory that is no link; else the
    /// whole granted directory read-write. The grant's marks are kept. `None` when the grant
    /// is unknown.
    pub(crate) fn wanted_rw(&self) -> Option<String> {
        let granted = self.granted?;
        let guest_root = granted.guest_path();
        let parent = match self.path.rfind('/') {
            Some(0) => "/".to_string(),
            Some(i) => self.path[..i].to_string(),
            None => guest_root.clone(),
        };
        let below = parent
            .strip_prefix(guest_root.trim_end_matches('/'))
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .map(|rest| rest.trim_start_matches('/'));
        let narrow = below.and_then(|rest| {
            if rest.is_empty()
                || rest
                    .split('/')
                    .any(|c| c == ".." || c == "." || c.is_empty())
            {
                return None;
            }
            let host = granted.host.join(rest);
            let canonical = std::fs::canonicalize(&host).ok()?;
            (canonical == host && canonical.is_dir()).then_some((host, parent.clone()))
        });
        let (host, guest) = narrow.unwrap_or_else(|| (granted.host.clone(), guest_root.clone()));
        let same = host.to_str() == Some(guest.as_str());
        Some(
            cordon_core::Grant::Fs(FsGrant {
                host,
                guest: (!same).then_some(guest),
                mode: FsMode::ReadWrite,
                marks: granted.marks,
            })
            .to_string(),
        )
    }
}

/// Finds where `path`, opened below `dir`, lies among the call's granted directories: `dir` is
/// one of them itself, or (on Linux) lies below one, found by the path the system gives its
/// descriptor. Costs system calls: for refusals only, never on the way of an open.
pub(crate) fn locate<'p>(preopens: &'p [Preopen], dir: &Dir, path: &str) -> Located<'p> {
    let (grant, below) = match preopens
        .iter()
        .find(|p| std::sync::Arc::ptr_eq(&p.dir.dir, &dir.dir))
    {
        Some(p) => (Some(p), String::new()),
        None => match below_a_preopen(preopens, dir) {
            Some((p, below)) => (Some(p), below),
            None => (None, String::new()),
        },
    };
    let Some(grant) = grant else {
        return Located {
            path: path.to_string(),
            grant: None,
            granted: None,
        };
    };
    let guest = if path.starts_with('/') {
        path.to_string()
    } else {
        join(&join(&grant.guest_path, &below), path)
    };
    Located {
        path: guest,
        grant: Some(&grant.guest_path),
        granted: Some(&grant.grant),
    }
}

/// `base/rest`, with one slash between them.
fn join(base: &str, rest: &str) -> String {
    if rest.is_empty() {
        base.to_string()
    } else if base.ends_with('/') {
        format!("{base}{rest}")
    } else {
        format!("{base}/{rest}")
    }
}

/// The granted directory `dir` lies below and its path from there, by the paths the system
/// gives their descriptors now.
#[cfg(target_os = "linux")]
fn below_a_preopen<'p>(preopens: &'p [Preopen], dir: &Dir) -> Option<(&'p Preopen, String)> {
    use std::os::fd::AsRawFd;
    let host_path =
        |file: &File| std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok();
    let here = host_path(&dir.dir)?;
    preopens
        .iter()
        .filter_map(|p| {
            let root = host_path(&p.dir.dir)?;
            let below = here.strip_prefix(&root).ok()?;
            Some((
                p,
                root.as_os_str().len(),
                below.to_string_lossy().into_owned(),
            ))
        })
        .max_by_key(|(_, root_len, _)| *root_len)
        .map(|(p, _, below)| (p, below))
}

#[cfg(not(target_os = "linux"))]
fn below_a_preopen<'p>(_: &'p [Preopen], _: &Dir) -> Option<(&'p Preopen, String)> {
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    fn preopen(dir: &Path, guest: &str) -> Preopen {
        let grant: cordon_core::Grant = format!("fs:{}:{guest}:ro", dir.display()).parse().unwrap();
        let cordon_core::Grant::Fs(grant) = grant.resolve().unwrap() else {
            unreachable!()
        };
        open_granted(&grant, &ReservedPaths::none()).unwrap()
    }

    fn dir(path: &Path) -> Dir {
        let file = File::open(path).unwrap();
        Dir::new(
            file,
            FsPerms::ReadOnly,
            OpenMode::READ,
            ALLOW_BLOCKING_CURRENT_THREAD,
        )
    }

    #[test]
    fn a_write_under_a_read_only_grant_wants_its_own_directory_read_write() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(root.join("data/out")).unwrap();
        std::os::unix::fs::symlink(root.join("data/out"), root.join("data/link")).unwrap();
        let preopens = [preopen(&root.join("data"), "/data")];
        let host = root.join("data").display().to_string();
        let want = |path: &str| locate(&preopens, &preopens[0].dir, path).wanted_rw();
        // That file's directory, seen where the guest sees it.
        assert_eq!(
            want("out/report.csv").unwrap(),
            format!("fs:{host}/out:/data/out:rw")
        );
        // A directory that does not exist, a link, or `..`: the whole grant, never wider.
        for path in [
            "new/report.csv",
            "link/report.csv",
            "out/../x",
            "report.csv",
        ] {
            assert_eq!(want(path).unwrap(), format!("fs:{host}:/data:rw"), "{path}");
        }
    }

    #[test]
    fn refused_paths_are_named_as_the_guest_sees_them() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        for d in ["data/sub", "other", "elsewhere"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let preopens = [
            preopen(&root.join("data"), "/data"),
            preopen(&root.join("other"), "/"),
        ];

        // Opened from a granted directory itself.
        let at = locate(&preopens, &preopens[0].dir, "../x");
        assert_eq!((at.path.as_str(), at.grant), ("/data/../x", Some("/data")));
        assert_eq!(
            at.grant_phrase("escapes the grant"),
            "/data/../x escapes the grant at /data"
        );
        let at = locate(&preopens, &preopens[1].dir, "../x");
        assert_eq!((at.path.as_str(), at.grant), ("/../x", Some("/")));
        // An absolute path is the guest's own.
        let at = locate(&preopens, &preopens[0].dir, "/etc/passwd");
        assert_eq!((at.path.as_str(), at.grant), ("/etc/passwd", Some("/data")));

        // Opened from a directory below one: found by its path on Linux.
        let at = locate(&preopens, &dir(&root.join("data/sub")), "../../x");
        #[cfg(target_os = "linux")]
        assert_eq!(
            (at.path.as_str(), at.grant),
            ("/data/sub/../../x", Some("/data"))
        );
        #[cfg(not(target_os = "linux"))]
        assert_eq!((at.path.as_str(), at.grant), ("../../x", None));

        // A directory in no grant: the path as given.
        let at = locate(&preopens, &dir(&root.join("elsewhere")), "x");
        assert_eq!((at.path.as_str(), at.grant), ("x", None));
        assert_eq!(
            at.grant_phrase("escapes the grant"),
            "x (below a directory the plugin opened) escapes the grant"
        );
    }
}
