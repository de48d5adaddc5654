//! Lookups that the listing of a directory taken a moment ago already answers.
//!
//! A walker that honours ignore files (the `ignore` crate, as `rg` does) lists a directory and
//! then asks for `.git`, `.ignore`, `.gitignore` and `.git/info/exclude` in it, which nearly
//! never exist. Natively each question is a failed `open`; from a component each is a host call
//! that resolves the whole path beneath the preopen again: four of every ~14 system calls per
//! directory of a search, a quarter of its time. When a guest asks about a name in the
//! directory it listed last, on the same path from the same directory, and the listing has no
//! such name, the host answers "no entry" as the system call would.
//!
//! Only where that answer is the one the system call would give:
//! - the call's preopens are all read-only, so the guest itself cannot have created the name
//!   since (anyone else doing so is a race the guest could lose natively too); the directory
//!   was listed within [`WINDOW`] of being opened (so the path still led to it, unless renamed
//!   in that moment) and the listing answers for at most [`WINDOW`] after;
//! - the listing could be taken, so the directory is searchable (listing reopens it as `.`):
//!   where a lookup would fail for permission (`EACCES`), no listing is kept;
//! - the listing was read whole without errors, names only ASCII, on a filesystem whose
//!   listings are the truth (the set [`super::readdir`] trusts for inode numbers); the name
//!   asked for is ASCII and no listed name equals it ignoring ASCII case (xfs `ascii-ci`, and
//!   casefolded directories on ext4, f2fs and tmpfs, whose folding maps an ASCII name only to
//!   names equal to it ignoring ASCII case);
//! - the path is the listed one plus `/name…` where `name` is an ordinary component short
//!   enough not to fail for its length, and the request cannot fail for another reason first
//!   (no create, truncate or write; those go to wasmtime-wasi, which checks them before it
//!   looks anything up).
//!
//! Everything else goes to wasmtime-wasi unchanged; a name the listing has is always looked up
//! for real.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DirectoryEntry, ErrorCode, Host, HostDescriptor, OpenFlags, PathFlags,
};

use crate::caps::MAX_FRESH_LISTING_ENTRIES;
use crate::wasi_overrides::{OverrideParts, OverrideView, WASI_FILESYSTEM_TYPES};

/// How long after it was taken a listing may answer lookups. A walker asks right after
/// listing (microseconds); this only bounds how stale an answer can be if a guest waits.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);

/// Lookups answered from a listing in this process (lets tests see it in use).
static ANSWERED: AtomicU64 = AtomicU64::new(0);

/// How many lookups listings answered in this process so far.
pub fn answered() -> u64 {
    ANSWERED.load(Ordering::Relaxed)
}

/// Directories recently opened through `open-at`, to know where a listed one came from.
const REMEMBERED_OPENS: usize = 8;

/// The longest name and path a lookup may have to be answered here: longer ones fail with
/// "name too long" before the kernel looks for them.
const MAX_NAME: usize = 255;
const MAX_PATH: usize = 4095;

/// A call's most recent listing and the directories it opened lately.
#[derive(Default)]
pub(crate) struct FreshListing {
    /// Whether listings may answer lookups at all: only when every preopen is read-only.
    enabled: bool,
    opened: VecDeque<OpenedDir>,
    last: Option<Listed>,
}

/// A directory the guest opened: from which directory, by which path.
struct OpenedDir {
    dir: Weak<File>,
    base: Weak<File>,
    path: String,
    at: Instant,
}

/// The names of the directory listed last, and how the guest reached it.
struct Listed {
    base: Weak<File>,
    path: String,
    /// Names, ASCII-lowercased.
    names: HashSet<Box<[u8]>>,
    at: Instant,
}

impl FreshListing {
    /// Listings answer lookups only for a call that cannot change any directory.
    pub(crate) fn new(all_read_only: bool) -> FreshListing {
        FreshListing {
            enabled: all_read_only,
            ..FreshListing::default()
        }
    }

    /// Whether a directory opened by `path` could have its listing answer lookups (the path is
    /// kept only then).
    pub(crate) fn wants(&self, path: &str) -> bool {
        self.enabled && path.len() <= MAX_PATH
    }

    /// Notes that `path` opened from `base` at `now` is the directory `dir`.
    fn opened(&mut self, base: &Arc<File>, path: &str, dir: &Arc<File>, now: Instant) {
        if !self.wants(path) {
            return;
        }
        if self.opened.len() == REMEMBERED_OPENS {
            self.opened.pop_front();
        }
        self.opened.push_back(OpenedDir {
            dir: Arc::downgrade(dir),
            base: Arc::downgrade(base),
            path: path.to_owned(),
            at: now,
        });
    }

    /// Keeps the listing of `dir` if it may answer lookups (see the module docs); `trusted`
    /// says whether its filesystem's listings are the truth.
    pub(crate) fn listed<'a, I>(&mut self, dir: &Arc<File>, entries: I, trusted: bool, now: Instant)
    where
        I: ExactSizeIterator<Item = Result<&'a DirectoryEntry, ()>>,
    {
        self.last = None;
        if !self.enabled || !trusted || entries.len() > MAX_FRESH_LISTING_ENTRIES {
            return;
        }
        let Some(origin) = self
            .opened
            .iter()
            .rev()
            .find(|o| std::ptr::eq(o.dir.as_ptr(), Arc::as_ptr(dir)))
        else {
            return;
        };
        if now.saturating_duration_since(origin.at) > WINDOW {
            return;
        }
        let mut names = HashSet::with_capacity(entries.len());
        for entry in entries {
            match entry {
                Ok(entry) if entry.name.is_ascii() => {
                    names.insert(
                        entry
                            .name
                            .to_ascii_lowercase()
                            .into_bytes()
                            .into_boxed_slice(),
                    );
                }
                _ => return,
            }
        }
        self.last = Some(Listed {
            base: origin.base.clone(),
            path: origin.path.clone(),
            names,
            at: now,
        });
    }

    /// Whether `path` from `base` names something the last listing shows absent.
    fn absent(&self, base: &Arc<File>, path: &str, now: Instant) -> bool {
        let Some(listed) = &self.last else {
            return false;
        };
        let Some(rest) = path
            .strip_prefix(listed.path.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            return false;
        };
        let name = rest.split('/').next().unwrap_or_default();
        std::ptr::eq(listed.base.as_ptr(), Arc::as_ptr(base))
            && now.saturating_duration_since(listed.at) <= WINDOW
            && path.len() <= MAX_PATH
            && !matches!(name, "" | "." | "..")
            && rest.split('/').all(|c| c.len() <= MAX_NAME)
            && path.is_ascii()
            && !path.contains('\0')
            && !listed.names.contains(name.to_ascii_lowercase().as_bytes())
    }
}

/// Whether an `open-at` with these flags fails with "no entry" when the name is missing,
/// before anything else could fail.
fn open_only_looks_up(open_flags: OpenFlags, flags: DescriptorFlags) -> bool {
    OpenFlags::DIRECTORY.contains(open_flags) && DescriptorFlags::READ.contains(flags)
}

/// The host directory a guest descriptor is, if it is one.
fn dir_file(
    table: &ResourceTable,
    fd: &Resource<Descriptor>,
) -> wasmtime::Result<Option<Arc<File>>> {
    Ok(match table.get(fd)? {
        Descriptor::Dir(dir) => Some(dir.dir.clone()),
        Descriptor::File(_) => None,
    })
}

/// Before `open-at`: the answer if the last listing already has it.
pub(crate) fn before_open(
    parts: &mut OverrideParts<'_>,
    base: &Resource<Descriptor>,
    path: &str,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<Option<ErrorCode>> {
    let answer = open_only_looks_up(open_flags, flags) && absent_at(parts, base, path)?;
    Ok(answer.then_some(ErrorCode::NoEntry))
}

/// After a successful `open-at` of a path the listing [`wants`](FreshListing::wants):
/// remembers where an opened directory came from.
pub(crate) fn after_open(
    parts: &mut OverrideParts<'_>,
    base: &Resource<Descriptor>,
    path: &str,
    opened: &Resource<Descriptor>,
) -> wasmtime::Result<()> {
    if let (Some(base), Some(dir)) = (dir_file(parts.table, base)?, dir_file(parts.table, opened)?)
    {
        parts
            .fs
            .fresh_listing
            .opened(&base, path, &dir, Instant::now());
    }
    Ok(())
}

/// Before a lookup that fails only for a missing name (`stat-at`, `metadata-hash-at`): whether
/// the last listing shows `path` from `base` absent.
pub(crate) fn absent_at(
    parts: &mut OverrideParts<'_>,
    base: &Resource<Descriptor>,
    path: &str,
) -> wasmtime::Result<bool> {
    if parts.fs.fresh_listing.last.is_none() {
        return Ok(false);
    }
    let Some(base) = dir_file(parts.table, base)? else {
        return Ok(false);
    };
    let absent = parts.fs.fresh_listing.absent(&base, path, Instant::now());
    if absent {
        ANSWERED.fetch_add(1, Ordering::Relaxed);
    }
    Ok(absent)
}

/// Replaces wasmtime-wasi's `stat-at` in `linker`; shadowing must be allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.stat-at",
        |mut store: StoreContextMut<'_, T>,
         (dir, path_flags, path): (Resource<Descriptor>, PathFlags, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if absent_at(&mut state.overrides(), &dir, &path)? {
                    return Ok((Err(ErrorCode::NoEntry),));
                }
                let mut fs = state.filesystem();
                let result = match HostDescriptor::stat_at(&mut fs, dir, path_flags, path).await {
                    Ok(stat) => Ok(stat),
                    Err(e) => Err(Host::convert_error_code(&mut state.filesystem(), e)?),
                };
                Ok((result,))
            })
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime_wasi::p2::bindings::filesystem::types::DescriptorType;

    fn entry(name: &str) -> DirectoryEntry {
        DirectoryEntry {
            type_: DescriptorType::RegularFile,
            name: name.into(),
        }
    }

    fn file() -> Arc<File> {
        Arc::new(File::open("/").unwrap())
    }

    /// A listing of `names` in `path`, opened from `base`.
    fn listing(base: &Arc<File>, path: &str, names: &[&str], at: Instant) -> FreshListing {
        let mut fresh = FreshListing::new(true);
        let dir = file();
        fresh.opened(base, path, &dir, at);
        let entries: Vec<DirectoryEntry> = names.iter().map(|n| entry(n)).collect();
        fresh.listed(&dir, entries.iter().map(Ok), true, at);
        fresh
    }

    #[test]
    fn a_name_the_listing_lacks_is_absent_and_one_it_has_is_looked_up() {
        let base = file();
        let now = Instant::now();
        let fresh = listing(&base, "a/b", &["src", "Cargo.toml", ".gitignore"], now);
        assert!(fresh.absent(&base, "a/b/.git", now));
        assert!(fresh.absent(&base, "a/b/.git/info/exclude", now));
        assert!(fresh.absent(&base, "a/b/.ignore/", now));
        assert!(!fresh.absent(&base, "a/b/.gitignore", now));
        assert!(
            !fresh.absent(&base, "a/b/src/.git", now),
            "src exists: a real lookup"
        );
        // Differing only in ASCII case: a case-insensitive filesystem could find it.
        assert!(!fresh.absent(&base, "a/b/CARGO.TOML", now));
        assert!(!fresh.absent(&base, "a/b/.GITIGNORE", now));
        // Still usable after present names were looked up.
        assert!(fresh.absent(&base, "a/b/.ignore", now));
    }

    #[test]
    fn only_ordinary_short_ascii_names_in_the_listed_directory_are_answered() {
        let base = file();
        let now = Instant::now();
        for path in [
            "a/b/.",
            "a/b/..",
            "a/b/../b/.git",
            "a/b/./.git",
            "a/b//.git",
            "a/b/",
            "a/b/\u{212A}config",
            "a/b/x\0y",
        ] {
            let fresh = listing(&base, "a/b", &["src"], now);
            assert!(!fresh.absent(&base, path, now), "{path:?}");
        }
        let long = "n".repeat(256);
        let fresh = listing(&base, "a/b", &["src"], now);
        assert!(!fresh.absent(&base, &format!("a/b/{long}"), now));
        assert!(!fresh.absent(&base, &format!("a/b/x/{long}"), now));
        let deep = format!("a/b/x{}", "/y".repeat(2100));
        let fresh = listing(&base, "a/b", &["src"], now);
        assert!(!fresh.absent(&base, &deep, now));
    }

    #[test]
    fn another_base_another_directory_or_a_late_question_gets_a_real_lookup() {
        let base = file();
        let now = Instant::now();
        let fresh = listing(&base, "a/b", &["src"], now);
        assert!(!fresh.absent(&file(), "a/b/.git", now), "other base");
        assert!(
            !fresh.absent(&base, "a/bc/.git", now),
            "a sibling sharing the prefix"
        );
        assert!(!fresh.absent(&base, "a/b", now), "the directory itself");
        assert!(!fresh.absent(&base, "b/.git", now), "another directory");
        assert!(!fresh.absent(&base, "a/b/.git", now + WINDOW + Duration::from_millis(1)));
        assert!(
            fresh.absent(&base, "a/b/.git", now + WINDOW),
            "none of them ended its use"
        );
    }

    #[test]
    fn listings_that_cannot_be_trusted_are_not_kept() {
        let base = file();
        let now = Instant::now();
        let dir = file();
        let names = [entry("src")];

        let mut writable = FreshListing::new(false);
        writable.opened(&base, "a", &dir, now);
        writable.listed(&dir, names.iter().map(Ok), true, now);
        assert!(!writable.absent(&base, "a/.git", now), "a writable call");

        let mut fresh = FreshListing::new(true);
        fresh.opened(&base, "a", &dir, now);
        fresh.listed(&dir, names.iter().map(Ok), false, now);
        assert!(!fresh.absent(&base, "a/.git", now), "untrusted filesystem");

        let mut fresh = FreshListing::new(true);
        fresh.opened(&base, "a", &dir, now);
        let with_error = [Ok(&names[0]), Err(())];
        fresh.listed(&dir, with_error.into_iter(), true, now);
        assert!(!fresh.absent(&base, "a/.git", now), "listing with an error");

        let mut fresh = FreshListing::new(true);
        fresh.opened(&base, "a", &dir, now);
        let unicode = [entry("caf\u{e9}")];
        fresh.listed(&dir, unicode.iter().map(Ok), true, now);
        assert!(!fresh.absent(&base, "a/.git", now), "a non-ASCII name");

        let mut fresh = FreshListing::new(true);
        fresh.listed(&dir, names.iter().map(Ok), true, now);
        assert!(
            !fresh.absent(&base, "a/.git", now),
            "not opened through open-at"
        );

        let mut fresh = FreshListing::new(true);
        fresh.opened(&base, "a", &dir, now);
        let many: Vec<DirectoryEntry> = (0..=MAX_FRESH_LISTING_ENTRIES)
            .map(|i| entry(&i.to_string()))
            .collect();
        fresh.listed(&dir, many.iter().map(Ok), true, now);
        assert!(!fresh.absent(&base, "a/.git", now), "too many entries");

        // Listed long after it was opened: the path may lead elsewhere by now.
        let mut fresh = FreshListing::new(true);
        fresh.opened(&base, "a", &dir, now);
        let later = now + WINDOW + Duration::from_millis(1);
        fresh.listed(&dir, names.iter().map(Ok), true, later);
        assert!(!fresh.absent(&base, "a/.git", later), "listed late");
        fresh.opened(&base, "a", &dir, later);
        fresh.listed(&dir, names.iter().map(Ok), true, later);
        assert!(
            fresh.absent(&base, "a/.git", later),
            "listed right after opening"
        );
    }

    #[test]
    fn paths_too_long_to_answer_for_are_not_kept() {
        let long = "d/".repeat(MAX_PATH / 2 + 1);
        let fresh = FreshListing::new(true);
        assert!(fresh.wants("a/b"));
        assert!(!fresh.wants(&long));
        assert!(!FreshListing::new(false).wants("a/b"));
        let mut fresh = FreshListing::new(true);
        fresh.opened(&file(), &long, &file(), Instant::now());
        assert!(fresh.opened.is_empty());
    }

    #[test]
    fn only_opens_that_just_look_a_name_up_are_answered() {
        assert!(open_only_looks_up(
            OpenFlags::empty(),
            DescriptorFlags::READ
        ));
        assert!(open_only_looks_up(
            OpenFlags::DIRECTORY,
            DescriptorFlags::empty()
        ));
        assert!(!open_only_looks_up(
            OpenFlags::CREATE,
            DescriptorFlags::READ
        ));
        assert!(!open_only_looks_up(
            OpenFlags::TRUNCATE,
            DescriptorFlags::READ
        ));
        assert!(!open_only_looks_up(
            OpenFlags::empty(),
            DescriptorFlags::WRITE
        ));
        assert!(!open_only_looks_up(
            OpenFlags::empty(),
            DescriptorFlags::READ | DescriptorFlags::FILE_INTEGRITY_SYNC
        ));
    }
}
