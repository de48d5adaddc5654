//! Small filesystem primitives that make every change to a home all-or-nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::HomeError;

/// The largest component Cordon will download or read: far above the ~20 MB a CPython
/// component needs, low enough that a hostile server cannot exhaust memory.
pub const MAX_COMPONENT_BYTES: usize = 256 * 1024 * 1024;

/// The `sha256:<hex>` form used everywhere in Cordon for component digests.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Wraps an I/O error with what was being done and to which path.
pub(crate) fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> HomeError {
    let path = path.to_path_buf();
    move |source| HomeError::Io {
        action,
        path,
        source,
    }
}

/// Writes `bytes` to `path` so that readers see either the old file or the complete new one:
/// write a temp file in the same directory, fsync it, rename it over the target, fsync the
/// directory so the rename itself survives a crash.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), HomeError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(io_err("create a temporary file in", dir))?;
    tmp.write_all(bytes)
        .map_err(io_err("write a temporary file in", dir))?;
    tmp.as_file()
        .sync_all()
        .map_err(io_err("flush a temporary file in", dir))?;
    tmp.persist(path)
        .map_err(|e| io_err("replace", path)(e.error))?;
    sync_dir(dir)
}

/// Flushes a directory's entries (new names, renames, removals) to disk.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), HomeError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("flush directory", dir))
}

/// Creates `dir` (and parents) if missing.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), HomeError> {
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))
}

/// An advisory lock on the home, released when dropped.
///
/// Writers hold it exclusively for the whole read-modify-write of a command, so two `cordon`
/// processes never interleave their changes; readers that must see components and the lock
/// file agree (the toolbox) hold it shared.
#[derive(Debug)]
pub struct HomeLock {
    _file: File,
    path: PathBuf,
}

impl HomeLock {
    /// Takes the exclusive lock, creating the home directory and its lock file if needed.
    pub(crate) fn exclusive(home: &Path) -> Result<HomeLock, HomeError> {
        ensure_dir(home)?;
        let path = home.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open the home lock", &path))?;
        file.lock().map_err(io_err("lock", &path))?;
        Ok(HomeLock { _file: file, path })
    }

    /// Takes a shared lock if the home exists; a home that does not exist yet has nothing to
    /// protect, and reading it must not create it.
    pub(crate) fn shared(home: &Path) -> Result<Option<HomeLock>, HomeError> {
        let path = home.join(".lock");
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("open the home lock", &path)(e)),
        };
        file.lock_shared().map_err(io_err("lock", &path))?;
        Ok(Some(HomeLock { _file: file, path }))
    }

    /// Where the lock file lives, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.toml");
        atomic_write(&path, b"first version, longer").unwrap();
        atomic_write(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f.toml")]);
    }

    #[test]
    fn shared_lock_on_missing_home_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        assert!(HomeLock::shared(&home).unwrap().is_none());
        assert!(!home.exists());
    }

    #[test]
    fn digest_has_prefix_and_known_value() {
        assert_eq!(
            sha256_digest(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
