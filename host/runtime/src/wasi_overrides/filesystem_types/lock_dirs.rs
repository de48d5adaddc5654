//! Lock directories a call leaves behind.
//!
//! SQLite in a component locks a database with a directory beside it (`<db>.lock`: WASI has
//! no file locks, so it uses its dot-file locking), made when a write begins and removed when
//! the write ends. A call stopped in between (its time limit, a cancel, a trap, a client gone)
//! never removes it, and every later write would find the database locked for good. The host
//! knows when a call ends, so what decides, in order:
//! 1. A directory whose name ends in `.lock` that the guest created in this call is noted,
//!    with its identity (device, inode and birth time: SQLite touches the directory's times
//!    while it holds it, so its change time is no identity); one it removed again is
//!    forgotten.
//! 2. When the call's store goes (however the call ended), each noted directory that is still
//!    there, still the same directory and empty is removed: no lock outlives the call that took
//!    it. Nothing else is touched; a directory someone made since under the same name has
//!    another identity.
//! 3. Each noted directory is also written to this process's ledger in the home (see
//!    [`LockLedger`]), so that when the host is killed mid-call, the next host started on the
//!    home removes what the dead process's calls held, by the same rule.
//!
//! SQLite rolls back the interrupted write's hot journal itself the next time it opens the
//! database for writing, once the lock is gone.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{Host, HostDescriptor};

use crate::wasi_overrides::{OverrideView, WASI_FILESYSTEM_TYPES};

/// Which directory it is: a directory made since under the same name differs in one of these
/// (its inode may be the old one's, reused; its birth time is later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    /// Seconds and nanoseconds of its birth, where the filesystem keeps it.
    born: Option<(i64, u32)>,
}

impl Identity {
    /// The identity of the directory at `path` below `parent`, without following a final link;
    /// `None` when it is no directory.
    #[cfg(unix)]
    fn at(parent: &File, path: &Path) -> Option<Identity> {
        use rustix::fs::{AtFlags, FileType, StatxFlags, statx};
        let stat = statx(
            parent,
            path,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::TYPE | StatxFlags::INO | StatxFlags::BTIME,
        )
        .ok()?;
        if FileType::from_raw_mode(stat.stx_mode.into()) != FileType::Directory {
            return None;
        }
        let born = (stat.stx_mask & StatxFlags::BTIME.bits() != 0)
            .then_some((stat.stx_btime.tv_sec, stat.stx_btime.tv_nsec));
        Some(Identity {
            dev: rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor),
            ino: stat.stx_ino,
            born,
        })
    }

    #[cfg(not(unix))]
    fn at(_: &File, _: &Path) -> Option<Identity> {
        None
    }

    /// As a ledger line's first fields: `dev ino born_secs born_nanos` (`-` for no birth time).
    fn to_fields(self) -> String {
        match self.born {
            Some((s, n)) => format!("{} {} {s} {n}", self.dev, self.ino),
            None => format!("{} {} - -", self.dev, self.ino),
        }
    }

    fn from_fields(dev: &str, ino: &str, secs: &str, nanos: &str) -> Option<Identity> {
        let born = match (secs, nanos) {
            ("-", "-") => None,
            (s, n) => Some((s.parse().ok()?, n.parse().ok()?)),
        };
        Some(Identity {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            born,
        })
    }
}

/// One lock directory a call made.
struct Taken {
    /// The directory it was made in (the guest's descriptor's).
    parent: Arc<File>,
    /// Its path below `parent`, as the guest gave it.
    path: String,
    id: Identity,
    /// Its line in the ledger, when it has one.
    line: Option<String>,
}

impl Taken {
    /// Lets go of it in the ledger.
    fn let_go(&self) {
        if let (Some(ledger), Some(line)) = (LEDGER.get(), &self.line) {
            ledger.let_go(line);
        }
    }
}

/// The lock directories one call made and did not remove; removed when the call ends.
#[derive(Default)]
pub(crate) struct LockDirs {
    taken: Vec<Taken>,
}

/// The most lock directories one call's record keeps (SQLite takes one per database).
const MAX_TAKEN: usize = 64;

fn is_lock_name(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.len() > ".lock".len() && name.ends_with(".lock"))
}

impl LockDirs {
    fn note(&mut self, parent: Arc<File>, path: &str) {
        if self.taken.len() >= MAX_TAKEN {
            return;
        }
        let Some(id) = Identity::at(&parent, Path::new(path)) else {
            return;
        };
        let mut taken = Taken {
            parent,
            path: path.to_string(),
            id,
            line: None,
        };
        if let Some(ledger) = LEDGER.get() {
            taken.line = LockLedger::line(&taken);
            if let Some(line) = &taken.line {
                ledger.take(line);
            }
        }
        self.taken.push(taken);
    }

    fn forget(&mut self, parent: &Arc<File>, path: &str) {
        self.taken.retain(|t| {
            let gone = Arc::ptr_eq(&t.parent, parent) && t.path == path;
            if gone {
                t.let_go();
            }
            !gone
        });
    }
}

impl Drop for LockDirs {
    fn drop(&mut self) {
        for t in self.taken.drain(..) {
            // Removed first, then let go of in the ledger: a host killed in between leaves a
            // line that names nothing, never a lock without its line.
            if Identity::at(&t.parent, Path::new(&t.path)) != Some(t.id) {
                t.let_go();
                continue;
            }
            let removed = cap_primitives::fs::remove_dir(&t.parent, Path::new(&t.path));
            t.let_go();
            match removed {
                Ok(()) => tracing::info!(
                    target: "cordon::sandbox",
                    path = %t.path,
                    "removed the lock directory a stopped call left behind"
                ),
                Err(e) => tracing::warn!(
                    target: "cordon::sandbox",
                    path = %t.path,
                    "cannot remove the lock directory a stopped call left behind: {e}"
                ),
            }
        }
    }
}

/// Replaces wasmtime-wasi's `create-directory-at` and `remove-directory-at` in `linker` (which
/// still do the work) to note lock directories; shadowing must be allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: StoreContextMut<'_, T>, (dir, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                let base = Resource::<Descriptor>::new_borrow(dir.rep());
                let made = HostDescriptor::create_directory_at(
                    &mut state.filesystem(),
                    base,
                    path.clone(),
                )
                .await;
                if let Err(e) = made {
                    return Ok((Err(Host::convert_error_code(&mut state.filesystem(), e)?),));
                }
                if is_lock_name(&path) {
                    let parts = state.overrides();
                    if let Descriptor::Dir(parent) = parts.table.get(&dir)? {
                        let parent = parent.dir.clone();
                        parts.fs.lock_dirs.note(parent, &path);
                    }
                }
                Ok((Ok(()),))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.remove-directory-at",
        |mut store: StoreContextMut<'_, T>, (dir, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                let base = Resource::<Descriptor>::new_borrow(dir.rep());
                let removed = HostDescriptor::remove_directory_at(
                    &mut state.filesystem(),
                    base,
                    path.clone(),
                )
                .await;
                if let Err(e) = removed {
                    return Ok((Err(Host::convert_error_code(&mut state.filesystem(), e)?),));
                }
                if is_lock_name(&path) {
                    let parts = state.overrides();
                    if let Descriptor::Dir(parent) = parts.table.get(&dir)? {
                        let parent = parent.dir.clone();
                        parts.fs.lock_dirs.forget(&parent, &path);
                    }
                }
                Ok((Ok(()),))
            })
        },
    )?;
    Ok(())
}

/// Where this process writes the lock directories its calls hold (rule 3): one file per
/// process in a directory of the home, named by the process id and its start time, so that a
/// later process can tell whether the writer is still running. The file holds exactly the
/// directories held now (rewritten, by rename, whenever one is taken or let go), so it stays
/// as small as the number of locks held at once.
pub struct LockLedger {
    /// The ledger file.
    path: PathBuf,
    /// Its lines: one per lock directory a running call holds.
    held: Mutex<Vec<String>>,
}

static LEDGER: OnceLock<LockLedger> = OnceLock::new();

impl LockLedger {
    /// Makes `dir` this process's ledger directory (the first call wins) and removes the lock
    /// directories that processes no longer running left there; returns how many it removed.
    /// Errors are logged, never fatal: without a ledger, only a host killed mid-call leaves
    /// locks behind.
    pub fn install(dir: &Path) -> usize {
        let removed = recover(dir);
        if LEDGER.get().is_none() {
            match std::fs::create_dir_all(dir) {
                Ok(()) => {
                    let _ = LEDGER.set(LockLedger {
                        path: dir.join(own_name()),
                        held: Mutex::new(Vec::new()),
                    });
                }
                Err(e) => tracing::warn!(
                    "cannot keep a ledger of lock directories in {}: {e}",
                    dir.display()
                ),
            }
        }
        removed
    }

    /// The line of a lock directory, when its host path can be known.
    fn line(taken: &Taken) -> Option<String> {
        let parent = host_path(&taken.parent)?;
        Some(format!(
            "{} {}",
            taken.id.to_fields(),
            parent.join(&taken.path).display()
        ))
    }

    fn take(&self, line: &str) {
        self.change(|held| held.push(line.to_string()));
    }

    fn let_go(&self, line: &str) {
        self.change(|held| {
            if let Some(at) = held.iter().position(|l| l == line) {
                held.remove(at);
            }
        });
    }

    fn change(&self, f: impl FnOnce(&mut Vec<String>)) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut held);
        let result = if held.is_empty() {
            std::fs::remove_file(&self.path).or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(e)
                }
            })
        } else {
            let tmp = self.path.with_extension("new");
            let mut text = held.join("\n");
            text.push('\n');
            std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.path))
        };
        if let Err(e) = result {
            tracing::warn!("cannot update the ledger of lock directories: {e}");
        }
    }
}

/// This process's ledger file name: its id and start time.
fn own_name() -> String {
    let pid = std::process::id();
    format!("{pid}-{}", start_time(pid).unwrap_or_default())
}

/// A process's start time (clock ticks since boot), from `/proc`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces; the fields after it are plain.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(19)?.parse().ok()
}

/// The host path of an open directory.
fn host_path(dir: &File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        None
    }
}

/// Removes what the ledgers in `dir` of processes no longer running name (when still the same
/// empty directory), and those ledgers; returns how many directories it removed.
fn recover(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, started)) = name.split_once('-') else {
            continue;
        };
        let (Ok(pid), Ok(started)) = (pid.parse::<u32>(), started.parse::<u64>()) else {
            continue;
        };
        if start_time(pid) == Some(started) {
            continue; // Still running: its calls may hold their locks.
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in text.lines() {
            let fields: Vec<&str> = line.splitn(5, ' ').collect();
            let [dev, ino, secs, nanos, path] = fields[..] else {
                continue;
            };
            let Some(id) = Identity::from_fields(dev, ino, secs, nanos) else {
                continue;
            };
            if remove_if_same(Path::new(path), id) {
                removed += 1;
            }
        }
        let _ = std::fs::remove_file(entry.path());
    }
    removed
}

/// Removes the directory at `path` if it is still `id` (and empty).
fn remove_if_same(path: &Path, id: Identity) -> bool {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let Ok(parent) = File::open(parent) else {
        return false;
    };
    Identity::at(&parent, Path::new(name)) == Some(id)
        && cap_primitives::fs::remove_dir(&parent, Path::new(name)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_are_what_sqlite_makes() {
        assert!(is_lock_name("shop.db.lock"));
        assert!(is_lock_name("sub/shop.db.lock"));
        assert!(!is_lock_name(".lock"));
        assert!(!is_lock_name("sub/.lock"));
        assert!(!is_lock_name("locks"));
    }

    #[test]
    fn a_dead_process_ledger_removes_only_the_same_empty_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let ledger = root.join("ledger");
        std::fs::create_dir_all(&ledger).unwrap();
        let same = root.join("a.db.lock");
        let other = root.join("b.db.lock");
        let full = root.join("c.db.lock");
        for d in [&same, &other, &full] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(full.join("x"), "x").unwrap();
        let line = |p: &Path| {
            let parent = File::open(p.parent().unwrap()).unwrap();
            let id = Identity::at(&parent, Path::new(p.file_name().unwrap())).unwrap();
            format!("{} {}\n", id.to_fields(), p.display())
        };
        let mut text = line(&same) + &line(&full);
        // `other` was made again since: its recorded identity is not its own.
        let parent = File::open(root).unwrap();
        let mut was = Identity::at(&parent, Path::new("b.db.lock")).unwrap();
        was.ino += 1;
        text.push_str(&format!("{} {}\n", was.to_fields(), other.display()));
        // A process that cannot be running: pid 1 never started at tick 1.
        std::fs::write(ledger.join("1-1"), &text).unwrap();
        // And one of this process, still running: kept.
        std::fs::write(ledger.join(own_name()), line(&other)).unwrap();
        assert_eq!(recover(&ledger), 1);
        assert!(!same.exists());
        assert!(other.exists() && full.exists());
        assert!(!ledger.join("1-1").exists());
        assert!(ledger.join(own_name()).exists());
    }
}
