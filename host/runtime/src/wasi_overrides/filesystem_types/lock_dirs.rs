//! Lock directories a call leaves behind.
//!
//! SQLite in a component locks a database with a directory beside it (`<db>.lock`: WASI has
//! no file locks, so it uses its dot-file locking), made when a write begins and removed when
//! the write ends. A call stopped in between (its time limit, a cancel, a trap, a client gone)
//! never removes it, and every later write would find the database locked for good. The host
//! knows when a call ends, so what decides, in order:
//! 1. A directory the guest created in this call is noted when its name is `<file>.lock`, a
//!    regular file `<file>` lies beside it, its path names no `.` or `..` and no control
//!    character, and its filesystem keeps birth times; its identity is its device, inode and
//!    birth time (SQLite touches the directory's times while it holds it, so its change time
//!    is no identity, and an inode may be reused). One the guest removes again is forgotten.
//! 2. When the call's store goes (however the call ended), each noted directory that is still
//!    there, still the same directory and empty is removed, by its name in its parent opened
//!    beneath the guest's descriptor: no lock outlives the call that took it, and nothing else
//!    is touched.
//! 3. Each noted directory is also written to this process's ledger in the home (see
//!    [`LockLedger`]), which the process holds an exclusive `flock` on while it runs; the next
//!    host started on the home takes the ledgers no process holds (their writers are gone,
//!    whatever PID namespace or user they ran in) and removes what they name, by rule 2.
//!
//! SQLite rolls back the interrupted write's hot journal itself the next time it opens the
//! database for writing, once the lock is gone.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{Host, HostDescriptor};

use crate::wasi_overrides::{OverrideView, WASI_FILESYSTEM_TYPES};

/// Which directory it is: a directory made since under the same name has another birth time,
/// even on a reused inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    dev: u64,
    ino: u64,
    born: (i64, u32),
}

/// What `name` in the directory `dir` is, without following a link: a directory and its
/// identity, or a regular file.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir(Option<Identity>),
    File,
    Other,
}

#[cfg(unix)]
fn entry(dir: &File, name: &str) -> Option<Entry> {
    use rustix::fs::{AtFlags, FileType, StatxFlags, statx};
    let stat = statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::BTIME,
    )
    .ok()?;
    Some(match FileType::from_raw_mode(stat.stx_mode.into()) {
        FileType::Directory => Entry::Dir((stat.stx_mask & StatxFlags::BTIME.bits() != 0).then(
            || Identity {
                dev: rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor),
                ino: stat.stx_ino,
                born: (stat.stx_btime.tv_sec, stat.stx_btime.tv_nsec),
            },
        )),
        FileType::RegularFile => Entry::File,
        _ => Entry::Other,
    })
}

#[cfg(not(unix))]
fn entry(_: &File, _: &str) -> Option<Entry> {
    None
}

/// Removes the empty directory `name` in `dir` if it is still `id`.
#[cfg(unix)]
fn remove_if_same(dir: &File, name: &str, id: Identity) -> std::io::Result<bool> {
    if entry(dir, name) != Some(Entry::Dir(Some(id))) {
        return Ok(false);
    }
    rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::REMOVEDIR)?;
    Ok(true)
}

#[cfg(not(unix))]
fn remove_if_same(_: &File, _: &str, _: Identity) -> std::io::Result<bool> {
    Ok(false)
}

/// One lock directory a call made.
struct Taken {
    /// The guest's descriptor it was made beneath, and the path it gave: what a removal by the
    /// guest names.
    parent: Arc<File>,
    path: String,
    /// Its own directory, opened beneath `parent`, and its name there.
    dir: File,
    name: String,
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

/// `path` split into the directory it lies in and its name, when it names a lock directory by
/// rule 1's words (the file beside it is checked once it is made).
fn lock_path(path: &str) -> Option<(&str, &str)> {
    if path.chars().any(char::is_control) || path.starts_with('/') {
        return None;
    }
    let (dir, name) = match path.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", path),
    };
    let ordinary = |c: &str| !c.is_empty() && c != "." && c != "..";
    let locked = name.strip_suffix(".lock")?;
    (ordinary(locked) && (dir.is_empty() || dir.split('/').all(ordinary))).then_some((dir, name))
}

impl LockDirs {
    fn note(&mut self, parent: Arc<File>, path: &str) {
        if self.taken.len() >= MAX_TAKEN {
            return;
        }
        let Some((dir_part, name)) = lock_path(path) else {
            return;
        };
        let dir = if dir_part.is_empty() {
            parent.try_clone().ok()
        } else {
            cap_primitives::fs::open_dir(&parent, Path::new(dir_part)).ok()
        };
        let Some(dir) = dir else { return };
        let locked = name.strip_suffix(".lock").unwrap_or_default();
        let (Some(Entry::Dir(Some(id))), Some(Entry::File)) =
            (entry(&dir, name), entry(&dir, locked))
        else {
            return;
        };
        let mut taken = Taken {
            parent,
            path: path.to_string(),
            dir,
            name: name.to_string(),
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
            let removed = remove_if_same(&t.dir, &t.name, t.id);
            t.let_go();
            match removed {
                Ok(true) => tracing::info!(
                    target: "cordon::sandbox",
                    path = %t.path,
                    "removed the lock directory a stopped call left behind"
                ),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    target: "cordon::sandbox",
                    path = %t.path,
                    "cannot remove the lock directory a stopped call left behind: {e}"
                ),
            }
        }
    }
}

/// After the guest made or removed `path` below `dir`: `f` with the call's lock directories and
/// the descriptor's directory, when `path` names a lock directory (rule 1).
fn on_lock<T: OverrideView>(
    state: &mut T,
    dir: &Resource<Descriptor>,
    path: &str,
    f: impl FnOnce(&mut LockDirs, Arc<File>),
) -> wasmtime::Result<()> {
    if lock_path(path).is_none() {
        return Ok(());
    }
    let parts = state.overrides();
    if let Descriptor::Dir(parent) = parts.table.get(dir)? {
        let parent = parent.dir.clone();
        f(&mut parts.fs.lock_dirs, parent);
    }
    Ok(())
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
                on_lock(state, &dir, &path, |locks, parent| {
                    locks.note(parent, &path)
                })?;
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
                on_lock(state, &dir, &path, |locks, parent| {
                    locks.forget(&parent, &path)
                })?;
                Ok((Ok(()),))
            })
        },
    )?;
    Ok(())
}

/// Where this process writes the lock directories its calls hold (rule 3): one file per
/// process in a directory of the home, which the process holds an exclusive `flock` on while it
/// runs. The file holds exactly the directories held now (one JSON line each, rewritten in
/// place whenever one is taken or let go), so it stays as small as the locks held at once.
pub struct LockLedger {
    /// The directory of the ledgers.
    dir: PathBuf,
    /// This process's ledger file, locked for as long as this process runs; made when the
    /// first lock is taken, so a process that takes none leaves nothing in the home.
    file: Mutex<Option<File>>,
    /// Its lines: one per lock directory a running call holds.
    held: Mutex<Vec<String>>,
}

static LEDGER: OnceLock<LockLedger> = OnceLock::new();

/// One ledger line.
#[derive(Serialize, Deserialize)]
struct Line {
    /// The host path of the directory the lock lies in, as the system named its descriptor.
    dir: PathBuf,
    name: String,
    id: Identity,
}

impl LockLedger {
    /// Makes `dir` this process's ledger directory (the first call wins) and removes the lock
    /// directories that processes no longer running left there; returns how many it removed.
    /// Errors are logged, never fatal: without a ledger, only a host killed mid-call leaves
    /// locks behind.
    pub fn install(dir: &Path) -> usize {
        let removed = recover(dir);
        let _ = LEDGER.set(LockLedger {
            dir: dir.to_path_buf(),
            file: Mutex::new(None),
            held: Mutex::new(Vec::new()),
        });
        removed
    }

    /// The line of a lock directory, when its host path can be known.
    fn line(taken: &Taken) -> Option<String> {
        let line = Line {
            dir: host_path(&taken.dir)?,
            name: taken.name.clone(),
            id: taken.id,
        };
        serde_json::to_string(&line).ok()
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
        use std::io::{Seek, Write};
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut held);
        let mut text = held.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if file.is_none() {
            if held.is_empty() {
                return;
            }
            match own_ledger(&self.dir) {
                Ok(made) => *file = Some(made),
                Err(e) => {
                    tracing::warn!(
                        "cannot keep a ledger of lock directories in {}: {e}",
                        self.dir.display()
                    );
                    return;
                }
            }
        }
        let Some(file) = file.as_mut() else { return };
        let result = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(text.as_bytes()));
        if let Err(e) = result {
            tracing::warn!("cannot update the ledger of lock directories: {e}");
        }
    }
}

/// This process's ledger file in `dir`, created and locked.
fn own_ledger(dir: &Path) -> std::io::Result<File> {
    std::fs::create_dir_all(dir)?;
    let name = format!(
        "{}-{:016x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    );
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(dir.join(name))?;
    if !try_lock(&file) {
        return Err(std::io::Error::other("cannot lock a new ledger file"));
    }
    Ok(file)
}

/// Takes an exclusive `flock` on `file` if nobody holds one.
#[cfg(unix)]
fn try_lock(file: &File) -> bool {
    rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
}

#[cfg(not(unix))]
fn try_lock(_: &File) -> bool {
    false
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

/// Removes what the ledgers in `dir` that no running process holds name (by rule 2), and those
/// ledgers; returns how many directories it removed.
fn recover(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(file) = File::open(entry.path()) else {
            continue;
        };
        if !try_lock(&file) {
            continue; // Its process runs: its calls may hold their locks.
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(line) = serde_json::from_str::<Line>(line) else {
                continue;
            };
            let Some((_, name)) = lock_path(&line.name).filter(|(d, _)| d.is_empty()) else {
                continue;
            };
            let Ok(parent) = File::open(&line.dir) else {
                continue;
            };
            if remove_if_same(&parent, name, line.id).unwrap_or(false) {
                removed += 1;
            }
        }
        let _ = std::fs::remove_file(entry.path());
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_are_what_sqlite_makes() {
        assert_eq!(lock_path("shop.db.lock"), Some(("", "shop.db.lock")));
        assert_eq!(lock_path("sub/shop.db.lock"), Some(("sub", "shop.db.lock")));
        for not in [
            ".lock",
            "sub/.lock",
            "locks",
            "../x.lock",
            "a/../x.lock",
            "/x.lock",
            "a\nb.lock",
            "./x.lock",
        ] {
            assert_eq!(lock_path(not), None, "{not:?}");
        }
    }

    #[test]
    fn ledgers_nobody_holds_remove_only_the_same_empty_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let ledgers = root.join("ledgers");
        std::fs::create_dir_all(&ledgers).unwrap();
        let parent = File::open(root).unwrap();
        for d in ["a.db.lock", "b.db.lock", "c.db.lock"] {
            std::fs::create_dir(root.join(d)).unwrap();
        }
        std::fs::write(root.join("c.db.lock/x"), "x").unwrap();
        let Some(Entry::Dir(Some(a))) = entry(&parent, "a.db.lock") else {
            // A filesystem without birth times: nothing is ever noted there.
            return;
        };
        let Some(Entry::Dir(Some(mut b))) = entry(&parent, "b.db.lock") else {
            unreachable!()
        };
        let Some(Entry::Dir(Some(c))) = entry(&parent, "c.db.lock") else {
            unreachable!()
        };
        // `b` was made again since: its recorded identity is not its own.
        b.born.1 = b.born.1.wrapping_add(1);
        let line = |name: &str, id: Identity| {
            serde_json::to_string(&Line {
                dir: root.to_path_buf(),
                name: name.into(),
                id,
            })
            .unwrap()
        };
        let dead = [
            line("a.db.lock", a),
            line("b.db.lock", b),
            line("c.db.lock", c),
        ]
        .join("\n");
        std::fs::write(ledgers.join("gone"), dead).unwrap();
        // A ledger whose process runs (held here): left alone, and what it names too.
        let live = own_ledger(&ledgers).unwrap();
        let live_text = line("a.db.lock", a);
        std::fs::write(ledgers.join("held"), &live_text).unwrap();
        let held = File::open(ledgers.join("held")).unwrap();
        assert!(try_lock(&held));
        assert_eq!(recover(&ledgers), 1);
        assert!(!root.join("a.db.lock").exists());
        assert!(root.join("b.db.lock").exists() && root.join("c.db.lock").exists());
        assert!(!ledgers.join("gone").exists());
        assert!(ledgers.join("held").exists());
        drop(live);
    }
}
