//! Whether a config file and the Cedar files it names may have changed since they were last
//! checked, without a `stat` of each on every call.
//!
//! [`super::reread`] runs on every tool call of `cordon mcp`; checking the files' stamps cost
//! two `stat`s a call, a few per cent of a no-op call's time. A [`Watch`] answers instead from
//! inotify: the kernel queues an event while the write, rename or delete that causes it is
//! still in progress, so an edit made before a call reaches the host is seen by a
//! non-blocking read at that call, without a race.
//!
//! When the files count as unchanged:
//!
//! 1. Never without a watch: where inotify cannot be had (not Linux, no watches left, a
//!    directory missing), every call checks the stamps.
//! 2. Never once a watched directory had an event on one of the files' names (as given, and
//!    as their symlinks resolve), or on itself, or the kernel's queue overflowed: the stamps
//!    are checked and the watch made again.
//! 3. Never when the last check is more than [`RECHECK`] old, for what inotify does not see:
//!    an edit on another machine's side of a network filesystem, a parent directory's symlink
//!    swapped.
//! 4. Otherwise they are as the last check found them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long an answer from a watch stands without a check of the stamps.
pub(super) const RECHECK: Duration = Duration::from_secs(1);

/// Watches on the directories of a set of files.
pub(super) struct Watch {
    #[cfg(target_os = "linux")]
    inotify: rustix::fd::OwnedFd,
    /// The names whose events count, by watch descriptor.
    #[cfg(target_os = "linux")]
    names: Vec<(i32, std::ffi::OsString)>,
    checked: Instant,
    /// Whether a change was seen: it stays seen (the event is read once, and another call
    /// may ask before the watch is made again).
    changed: bool,
}

impl Watch {
    /// Watches the directories of `files`, before their stamps are checked (so that a change
    /// made during the check is seen at the next one); `None` where that cannot be done.
    pub(super) fn new(files: &[PathBuf]) -> Option<Watch> {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
            let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
            let flags = WatchFlags::MODIFY
                | WatchFlags::ATTRIB
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::MOVED_FROM
                | WatchFlags::MOVED_TO
                | WatchFlags::CREATE
                | WatchFlags::DELETE
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF
                | WatchFlags::ONLYDIR;
            let mut names = Vec::new();
            for file in files {
                let resolved = std::fs::canonicalize(file).ok();
                for path in std::iter::once(file.as_path()).chain(resolved.as_deref()) {
                    let (dir, name) = split(path)?;
                    let wd = inotify::add_watch(&fd, dir, flags).ok()?;
                    if !names.iter().any(|(w, n)| *w == wd && n == name) {
                        names.push((wd, name.to_os_string()));
                    }
                }
            }
            Some(Watch {
                inotify: fd,
                names,
                checked: Instant::now(),
                changed: false,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = files;
            None
        }
    }

    /// What happened to the files since the watch was made (see the module's list).
    pub(super) fn since(&mut self) -> Since {
        if self.changed {
            return Since::Change;
        }
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{ReadFlags, Reader};
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut events = Reader::new(&self.inotify, &mut buf);
            loop {
                match events.next() {
                    Err(rustix::io::Errno::WOULDBLOCK) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => {
                        self.changed = true;
                        return Since::Change;
                    }
                    Ok(event) => {
                        let counts = match event.file_name().filter(|n| !n.is_empty()) {
                            // Another file of the directory (a store, a log) does not.
                            Some(name) => self.names.iter().any(|(wd, n)| {
                                *wd == event.wd() && n.as_encoded_bytes() == name.to_bytes()
                            }),
                            // The directory itself, a dropped watch, an overflow.
                            None => true,
                        };
                        if counts
                            || event
                                .events()
                                .intersects(ReadFlags::QUEUE_OVERFLOW | ReadFlags::IGNORED)
                        {
                            self.changed = true;
                            return Since::Change;
                        }
                    }
                }
            }
        }
        if cfg!(not(target_os = "linux")) {
            Since::Change
        } else if self.checked.elapsed() > RECHECK {
            Since::Due
        } else {
            Since::Nothing
        }
    }
}

/// What a [`Watch`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Since {
    /// Nothing: the files are as the last check found them.
    Nothing,
    /// Nothing, but the last check is older than [`RECHECK`].
    Due,
    /// A change to one of the files (or to what inotify can tell of them).
    Change,
}

/// A path's directory (`.` for a bare name) and file name.
#[cfg(target_os = "linux")]
fn split(path: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some((dir, name))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_write_rename_or_delete_is_seen_at_once_and_other_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cordon.toml");
        let cedar = dir.path().join("rules.cedar");
        std::fs::write(&config, "a").unwrap();
        std::fs::write(&cedar, "b").unwrap();
        let files = [config.clone(), cedar.clone()];
        let mut watch = Watch::new(&files).unwrap();
        assert_eq!(watch.since(), Since::Nothing);

        // Other files of the directory, as a store beside the config writes.
        std::fs::write(dir.path().join("store.db"), "x").unwrap();
        std::fs::write(dir.path().join("store.db"), "y").unwrap();
        assert_eq!(watch.since(), Since::Nothing);

        // In place; seen by every later call until the watch is made again.
        std::fs::write(&config, "a2").unwrap();
        assert_eq!(watch.since(), Since::Change);
        assert_eq!(watch.since(), Since::Change);
        let mut watch = Watch::new(&files).unwrap();
        // Renamed over, as editors save.
        std::fs::write(dir.path().join(".rules.cedar.tmp"), "b2").unwrap();
        assert_eq!(watch.since(), Since::Nothing);
        std::fs::rename(dir.path().join(".rules.cedar.tmp"), &cedar).unwrap();
        assert_eq!(watch.since(), Since::Change);
        let mut watch = Watch::new(&files).unwrap();
        std::fs::remove_file(&cedar).unwrap();
        assert_eq!(watch.since(), Since::Change);
    }

    #[test]
    fn a_file_reached_through_a_symlink_is_watched_where_it_lives() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let real = elsewhere.path().join("real.toml");
        std::fs::write(&real, "a").unwrap();
        let link = dir.path().join("cordon.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut watch = Watch::new(&[link]).unwrap();
        assert_eq!(watch.since(), Since::Nothing);
        std::fs::write(&real, "b").unwrap();
        assert_eq!(watch.since(), Since::Change);
    }

    #[test]
    fn a_watch_stands_no_longer_than_recheck_and_a_missing_directory_gives_none() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cordon.toml");
        std::fs::write(&config, "a").unwrap();
        let mut watch = Watch::new(std::slice::from_ref(&config)).unwrap();
        assert_eq!(watch.since(), Since::Nothing);
        watch.checked = Instant::now() - RECHECK - Duration::from_millis(1);
        assert_eq!(watch.since(), Since::Due);
        std::fs::write(&config, "b").unwrap();
        assert_eq!(watch.since(), Since::Change);
        assert!(Watch::new(&[dir.path().join("gone/rules.cedar")]).is_none());
    }
}
