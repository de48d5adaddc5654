//! Cordon's own state, which no grant may reach.
//!
//! The home holds the lock file (every plugin's grants), the installed components and the
//! compiled code the host maps and runs natively; the config file holds the approval rules. A
//! plugin that could write any of them could widen its own grants, turn its approval off or
//! plant machine code in the host. So a directory grant may neither contain nor lie inside the
//! home, nor contain the config file in use.
//!
//! Directories are compared by identity (device and inode), along the chain of parents of each
//! side, not by path text: a bind mount, a second name through a symlink or a home moved since a
//! grant was recorded cannot hide the overlap. The check runs when a grant is given and again
//! every time a call builds its sandbox.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::GrantError;

/// What a reserved path holds, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedKind {
    /// The Cordon home directory.
    Home,
    /// The config file (`cordon.toml`) in use.
    Config,
}

impl ReservedKind {
    fn describe(self) -> &'static str {
        match self {
            ReservedKind::Home => {
                "the Cordon home (its lock file records every plugin's grants, and it holds the \
                 compiled code the host runs)"
            }
            ReservedKind::Config => "the config file in use (it holds the approval rules)",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            ReservedKind::Home => {
                "grant a directory that neither contains nor lies inside it, or move the home \
                 elsewhere (CORDON_HOME or --home)"
            }
            ReservedKind::Config => {
                "grant a directory that does not contain it, or keep the config file elsewhere \
                 (--config)"
            }
        }
    }
}

/// A file's identity on this machine: the device and inode number `stat` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// The device holding the file.
    pub device: u64,
    /// The inode number on that device.
    pub inode: u64,
}

impl FileId {
    /// The identity of what `path` names (symlinks followed).
    #[cfg(unix)]
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        std::fs::metadata(path).map(|m| FileId::from_metadata(&m))
    }

    /// The identity of an open file or directory.
    #[cfg(unix)]
    pub fn of_file(file: &std::fs::File) -> std::io::Result<FileId> {
        file.metadata().map(|m| FileId::from_metadata(&m))
    }

    /// The identity `metadata` reports.
    #[cfg(unix)]
    pub fn from_metadata(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            device: m.dev(),
            inode: m.ino(),
        }
    }

    /// Without inode numbers there is no identity to compare.
    #[cfg(not(unix))]
    pub fn of(_path: &Path) -> std::io::Result<FileId> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "file identities need Unix metadata",
        ))
    }
}

/// The paths no directory grant may overlap: the home and the config file in use.
///
/// Cheap to clone; built once per process and handed to every sandbox. Clones share how each
/// path resolved; a check reuses that only while the resolved path still names the same file
/// and is no symbolic link (one `lstat`), and resolves again otherwise (a home moved or
/// replaced by a link since), so a call pays for the chain of its granted directory only.
#[derive(Debug, Clone, Default)]
pub struct ReservedPaths {
    entries: Vec<Reserved>,
}

impl PartialEq for ReservedPaths {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for ReservedPaths {}

#[derive(Debug, Clone)]
struct Reserved {
    path: PathBuf,
    kind: ReservedKind,
    resolved: Arc<Mutex<Option<Resolved>>>,
}

impl Reserved {
    /// How the path resolves now: the last resolution while its path is still the same file
    /// and not a link, else a new one.
    fn resolved(&self) -> Resolved {
        let mut known = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = known.as_ref()
            && let Some(id) = last.id
            && is_still(&last.path, id)
        {
            return last.clone();
        }
        let fresh = Resolved::of(&self.path);
        *known = Some(fresh.clone());
        fresh
    }
}

impl ReservedPaths {
    /// Nothing reserved (tests and embedders without a home).
    pub fn none() -> ReservedPaths {
        ReservedPaths::default()
    }

    /// Reserves `path` as `kind`. A relative path is taken from the current directory now, so
    /// a later change of directory does not change what is protected.
    pub fn with(mut self, path: impl Into<PathBuf>, kind: ReservedKind) -> ReservedPaths {
        let path = path.into();
        let path = if path.is_relative() {
            std::env::current_dir()
                .map(|d| d.join(&path))
                .unwrap_or(path)
        } else {
            path
        };
        if !self
            .entries
            .iter()
            .any(|r| r.path == path && r.kind == kind)
        {
            self.entries.push(Reserved {
                path,
                kind,
                resolved: Arc::default(),
            });
        }
        self
    }

    /// The reserved paths, as given.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, ReservedKind)> {
        self.entries.iter().map(|r| (r.path.as_path(), r.kind))
    }

    /// Checks a directory about to be granted, by its path (resolved now).
    pub fn check_dir(&self, dir: &Path) -> Result<(), GrantError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let unresolvable = |e: std::io::Error| GrantError::HostPath {
            path: dir.to_path_buf(),
            reason: format!("it cannot be inspected ({e})"),
        };
        let canonical = std::fs::canonicalize(dir).map_err(unresolvable)?;
        let id = FileId::of(&canonical).map_err(unresolvable)?;
        self.check_opened_dir(&canonical, id)
    }

    /// Checks a granted directory already opened, whose identity is `id` and canonical path
    /// `dir`: refused when it is, contains or lies inside a reserved path.
    pub fn check_opened_dir(&self, dir: &Path, id: FileId) -> Result<(), GrantError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        // Every directory above the granted one.
        let granted_chain = ancestors_ids(dir.parent());
        for reserved in &self.entries {
            let kind = &reserved.kind;
            let found = reserved.resolved();
            let relation = if found.id == Some(id) {
                Relation::Is
            } else if found.ancestors.contains(&id) {
                Relation::Contains
            } else if *kind == ReservedKind::Home
                && found.id.is_some_and(|home| granted_chain.contains(&home))
            {
                // Only a directory has insides; the config file is a file.
                Relation::Inside
            } else {
                continue;
            };
            return Err(GrantError::Reserved(ReservedOverlap {
                granted: dir.to_path_buf(),
                reserved: found.path,
                kind: *kind,
                relation,
            }));
        }
        Ok(())
    }
}

/// How a granted directory overlaps a reserved path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The granted directory is the reserved path.
    Is,
    /// The reserved path lies inside the granted directory.
    Contains,
    /// The granted directory lies inside the reserved one.
    Inside,
}

/// A grant refused because it overlaps Cordon's own state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedOverlap {
    /// The granted directory.
    pub granted: PathBuf,
    /// The reserved path, resolved.
    pub reserved: PathBuf,
    /// What the reserved path holds.
    pub kind: ReservedKind,
    /// How they overlap.
    pub relation: Relation,
}

impl fmt::Display for ReservedOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let relation = match self.relation {
            Relation::Is => "is",
            Relation::Contains => "contains",
            Relation::Inside => "lies inside",
        };
        write!(
            f,
            "it {relation} {} at {}; a plugin that can reach it could change its own grants \
             and approval or plant code that runs in the host, so no grant may overlap it: {}",
            self.kind.describe(),
            self.reserved.display(),
            self.kind.remedy()
        )
    }
}

/// Whether `path` still names the file `id` itself, not through a final symbolic link.
#[cfg(unix)]
fn is_still(path: &Path, id: FileId) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| !m.file_type().is_symlink() && FileId::from_metadata(&m) == id)
}

#[cfg(not(unix))]
fn is_still(_path: &Path, _id: FileId) -> bool {
    false
}

/// A reserved path resolved as far as it exists: a home not created yet is protected by its
/// future parents.
#[derive(Debug, Clone)]
struct Resolved {
    /// The canonical path of its deepest existing part, with the missing rest appended.
    path: PathBuf,
    /// Its own identity, when it exists.
    id: Option<FileId>,
    /// The identities of the existing directories above it.
    ancestors: Vec<FileId>,
}

impl Resolved {
    fn of(path: &Path) -> Resolved {
        let mut existing = path;
        let mut missing = Vec::new();
        loop {
            if let Ok(canonical) = std::fs::canonicalize(existing) {
                let mut full = canonical.clone();
                full.extend(missing.iter().rev());
                let own = FileId::of(&canonical).ok();
                let (id, ancestors) = if missing.is_empty() {
                    (own, ancestors_ids(canonical.parent()))
                } else {
                    (
                        None,
                        own.into_iter()
                            .chain(ancestors_ids(canonical.parent()))
                            .collect(),
                    )
                };
                return Resolved {
                    path: full,
                    id,
                    ancestors,
                };
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name.to_os_string());
                    existing = parent;
                }
                _ => {
                    return Resolved {
                        path: path.to_path_buf(),
                        id: None,
                        ancestors: Vec::new(),
                    };
                }
            }
        }
    }
}

/// The identities of `dir` and every directory above it, up to the root.
fn ancestors_ids(dir: Option<&Path>) -> Vec<FileId> {
    dir.into_iter()
        .flat_map(Path::ancestors)
        .filter_map(|d| FileId::of(d).ok())
        .collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn reserved_home(home: &Path) -> ReservedPaths {
        ReservedPaths::none().with(home, ReservedKind::Home)
    }

    fn refusal(r: &ReservedPaths, dir: &Path) -> ReservedOverlap {
        match r.check_dir(dir) {
            Err(GrantError::Reserved(o)) => o,
            other => panic!("{} was not refused: {other:?}", dir.display()),
        }
    }

    #[test]
    fn a_grant_may_not_contain_be_or_lie_inside_the_home() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("user/.local/share/cordon");
        std::fs::create_dir_all(home.join("cache")).unwrap();
        std::fs::create_dir_all(root.join("user/data")).unwrap();
        let r = reserved_home(&home);

        let above = refusal(&r, &root.join("user"));
        assert_eq!(above.relation, Relation::Contains);
        assert_eq!(above.reserved, home);
        let text = above.to_string();
        assert!(
            text.contains("Cordon home") && text.contains("CORDON_HOME"),
            "{text}"
        );
        assert_eq!(refusal(&r, &home).relation, Relation::Is);
        assert_eq!(refusal(&r, &home.join("cache")).relation, Relation::Inside);
        assert_eq!(refusal(&r, Path::new("/")).relation, Relation::Contains);
        r.check_dir(&root.join("user/data")).unwrap();
        // A path spelled with `..` is resolved first.
        let o = refusal(&r, &root.join("user/data/../.local/share/cordon/cache"));
        assert_eq!(o.relation, Relation::Inside);
    }

    #[test]
    fn identity_not_path_text_decides() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let home = root.join("h");
        std::fs::create_dir_all(home.join("components")).unwrap();
        // The home reached through a symlink is still the home.
        std::os::unix::fs::symlink(&home, root.join("alias")).unwrap();
        let through_link = ReservedPaths::none().with(root.join("alias"), ReservedKind::Home);
        assert_eq!(
            refusal(&through_link, &home.join("components")).relation,
            Relation::Inside
        );
        // A grant opened earlier and checked by identity: the handle's directory counts, not
        // what its path names now.
        let dir = std::fs::File::open(home.join("components")).unwrap();
        let id = FileId::of_file(&dir).unwrap();
        let r = reserved_home(&home);
        assert!(r.check_opened_dir(&home.join("components"), id).is_err());
    }

    #[test]
    fn a_home_not_created_yet_is_protected_by_its_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        let r = reserved_home(&root.join("share/cordon"));
        let o = refusal(&r, &root);
        assert_eq!(o.relation, Relation::Contains);
        assert_eq!(o.reserved, root.join("share/cordon"));
        r.check_dir(&root.join("data")).unwrap();
    }

    #[test]
    fn the_config_file_may_not_be_inside_a_grant() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(root.join("project/src")).unwrap();
        std::fs::write(root.join("project/cordon.toml"), "").unwrap();
        let r = ReservedPaths::none().with(root.join("project/cordon.toml"), ReservedKind::Config);
        let o = refusal(&r, &root.join("project"));
        assert_eq!(o.relation, Relation::Contains);
        assert!(o.to_string().contains("config file"), "{o}");
        // Beside the config file, not containing it: allowed.
        r.check_dir(&root.join("project/src")).unwrap();
    }

    #[test]
    fn a_home_moved_since_the_last_check_is_found_again() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (home, data) = (root.join("home"), root.join("data"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let r = reserved_home(&home);
        r.check_dir(&data).unwrap();
        // The home moves under the granted directory, and a link takes its old place.
        std::fs::rename(&home, data.join("home")).unwrap();
        std::os::unix::fs::symlink(data.join("home"), &home).unwrap();
        assert_eq!(refusal(&r.clone(), &data).relation, Relation::Contains);
    }

    #[test]
    fn nothing_reserved_allows_everything() {
        ReservedPaths::none().check_dir(Path::new("/")).unwrap();
    }
}
