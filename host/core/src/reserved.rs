//! Cordon's own state, which no grant may reach.
//!
//! The home holds the lock file (every plugin's grants), the installed components, the trusted
//! keys and the compiled code the host maps and runs natively; the config file holds the
//! approval rules; the store holds every conversation and the audit log; `cordon serve`'s token
//! file holds the keys to its API. A plugin that could write the first ones could widen its own
//! grants, turn its approval off or plant machine code in the host; one that could read the
//! store or the token file could read every transcript or drive the host as its user, and one
//! that could write the store could erase the audit log. So a directory grant may neither
//! contain nor lie inside the home, nor contain any of those files; and a `net:tcp` grant may
//! not reach a PostgreSQL store.
//!
//! Directories are compared by identity (device and inode), along the chain of parents of each
//! side, not by path text: a bind mount, a second name through a symlink or a home moved since a
//! grant was recorded cannot hide the overlap. The parents of a reserved path as it was given
//! count as well as those of where it resolves: who can replace a symbolic link on the way can
//! point the path at files of their own. The check runs when a grant is given, when a host
//! starts, and again every time a call builds its sandbox.

use std::ffi::OsString;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
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
    /// A file of the SQLite store of sessions and the audit log (the database, or the `-wal`,
    /// `-shm` or `-journal` file SQLite keeps beside it).
    Store,
    /// The file of bearer tokens `cordon serve` accepts.
    TokenFile,
}

impl ReservedKind {
    fn describe(self) -> &'static str {
        match self {
            ReservedKind::Home => {
                "the Cordon home (its lock file records every plugin's grants, and it holds the \
                 compiled code the host runs)"
            }
            ReservedKind::Config => "the config file in use (it holds the approval rules)",
            ReservedKind::Store => {
                "the store of sessions and the audit log (every conversation, and a log that \
                 must only grow)"
            }
            ReservedKind::TokenFile => "the token file of `cordon serve` (the keys to its API)",
        }
    }

    /// What a plugin that reached it could do.
    fn danger(self) -> &'static str {
        match self {
            ReservedKind::Home | ReservedKind::Config => {
                "a plugin that can reach it could change its own grants and approval or plant \
                 code that runs in the host"
            }
            ReservedKind::Store => {
                "a plugin that can reach it could read every transcript or erase the audit log"
            }
            ReservedKind::TokenFile => {
                "a plugin that can read it could use the host's API as you: read every session \
                 and answer approvals"
            }
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
            ReservedKind::Store => {
                "grant a directory that does not contain it, or keep the store elsewhere \
                 (--store, CORDON_STORE or [store] url)"
            }
            ReservedKind::TokenFile => {
                "grant a directory that does not contain it, or keep the token file elsewhere \
                 (--token-file)"
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

/// What no grant may reach: the paths of Cordon's own state (the home, the config file, the
/// SQLite store and its companions, the token file), and the address of a PostgreSQL store.
///
/// Cheap to clone; built once per process and handed to every sandbox. Clones share how each
/// path resolved; a check reuses that only while the resolved path still names the same file
/// and is no symbolic link (one `lstat`; for a path not created yet, one more showing its first
/// missing part still missing), and resolves again otherwise (a home moved or replaced by a
/// link since), so a call pays for the chain of its granted directory only.
#[derive(Debug, Clone, Default)]
pub struct ReservedPaths {
    entries: Vec<Reserved>,
    addresses: Vec<ReservedAddress>,
}

impl PartialEq for ReservedPaths {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter()) && self.addresses == other.addresses
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
    /// How the path resolves now: the last resolution while it still holds, else a new one.
    fn resolved(&self) -> Resolved {
        let mut known = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = known.as_ref()
            && last.still_holds()
        {
            return last.clone();
        }
        let fresh = Resolved::of(&self.path);
        *known = Some(fresh.clone());
        fresh
    }
}

/// The address of a PostgreSQL store, which no `net:tcp` grant may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReservedAddress {
    addr: SocketAddr,
    /// The store's URL, password hidden, for messages.
    shown: String,
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

    /// Reserves `addr`, where the PostgreSQL store `shown` (its URL, password hidden) listens:
    /// no `net:tcp` grant may connect there.
    pub fn with_address(mut self, addr: SocketAddr, shown: impl Into<String>) -> ReservedPaths {
        let reserved = ReservedAddress {
            addr,
            shown: shown.into(),
        };
        if !self.addresses.contains(&reserved) {
            self.addresses.push(reserved);
        }
        self
    }

    /// The reserved paths, as given.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, ReservedKind)> {
        self.entries.iter().map(|r| (r.path.as_path(), r.kind))
    }

    /// Checks a `net:tcp` grant: refused when it would reach a reserved address. Any loopback
    /// or unspecified address counts as the same as another on the same port, since a server
    /// listening on all of this machine's addresses answers on each of them.
    pub fn check_tcp(&self, addr: SocketAddr) -> Result<(), GrantError> {
        match self.addresses.iter().find(|r| same_listener(addr, r.addr)) {
            Some(r) => Err(GrantError::ReservedAddress(ReservedAddressOverlap {
                granted: addr,
                reserved: r.addr,
                store: r.shown.clone(),
            })),
            None => Ok(()),
        }
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
            let (relation, shown) = if found.id == Some(id) {
                (Relation::Is, &found.path)
            } else if found.ancestors.contains(&id) {
                (Relation::Contains, &found.path)
            } else if found.spelled.contains(&id) {
                // It holds a link the reserved path goes through: name the path as given.
                (Relation::Contains, &reserved.path)
            } else if *kind == ReservedKind::Home
                && found.id.is_some_and(|home| granted_chain.contains(&home))
            {
                // Only a directory has insides; the other reserved paths are files.
                (Relation::Inside, &found.path)
            } else {
                continue;
            };
            return Err(GrantError::Reserved(ReservedOverlap {
                granted: dir.to_path_buf(),
                reserved: shown.clone(),
                kind: *kind,
                relation,
            }));
        }
        Ok(())
    }
}

/// Whether a connection to `granted` may reach a server listening at `reserved`.
fn same_listener(granted: SocketAddr, reserved: SocketAddr) -> bool {
    let local = |ip: IpAddr| ip.is_loopback() || ip.is_unspecified();
    let (g, r) = (granted.ip().to_canonical(), reserved.ip().to_canonical());
    granted.port() == reserved.port() && (g == r || (local(g) && local(r)))
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
    /// The reserved path, resolved (as given when the granted directory holds a symbolic link
    /// it goes through).
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
            "it {relation} {} at {}; {}, so no grant may overlap it: {}",
            self.kind.describe(),
            self.reserved.display(),
            self.kind.danger(),
            self.kind.remedy()
        )
    }
}

/// A `net:tcp` grant refused because it reaches the PostgreSQL store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedAddressOverlap {
    /// The granted address.
    pub granted: SocketAddr,
    /// The store's address it reaches.
    pub reserved: SocketAddr,
    /// The store's URL, password hidden.
    pub store: String,
}

impl fmt::Display for ReservedAddressOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "it reaches {}, where the PostgreSQL store {} listens (every conversation and the \
             audit log); a plugin that can connect there could read transcripts or erase the \
             audit log, so no grant may reach it: grant another address, or keep the store on a \
             server no plugin is granted",
            self.reserved, self.store
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

/// Whether nothing, not even a dangling link, is at `path`.
fn is_absent(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// A reserved path resolved as far as it exists: a home not created yet is protected by its
/// future parents, a store's `-wal` file by the directory it will appear in.
#[derive(Debug, Clone)]
struct Resolved {
    /// The canonical path of its deepest existing part, with the missing rest appended.
    path: PathBuf,
    /// Its own identity, when it exists.
    id: Option<FileId>,
    /// The identities of the existing directories above it.
    ancestors: Vec<FileId>,
    /// The identities of the other directories above the path as given (those holding a
    /// symbolic link it goes through).
    spelled: Vec<FileId>,
    /// The deepest existing part (canonical) with its identity, and the first missing part
    /// below it: the resolution holds while the one is unchanged and the other still absent.
    anchor: Option<(PathBuf, FileId, Option<PathBuf>)>,
}

impl Resolved {
    fn still_holds(&self) -> bool {
        self.anchor.as_ref().is_some_and(|(existing, id, missing)| {
            is_still(existing, *id) && missing.as_deref().is_none_or(is_absent)
        })
    }

    fn of(path: &Path) -> Resolved {
        let mut existing = path;
        let mut missing: Vec<OsString> = Vec::new();
        loop {
            if let Ok(canonical) = std::fs::canonicalize(existing) {
                let mut full = canonical.clone();
                full.extend(missing.iter().rev());
                let own = FileId::of(&canonical).ok();
                let mut ancestors = ancestors_ids(canonical.parent());
                let (id, first_missing) = match missing.last() {
                    None => (own, None),
                    Some(name) => {
                        ancestors.extend(own);
                        (None, Some(canonical.join(name)))
                    }
                };
                let spelled = ancestors_ids(path.parent())
                    .into_iter()
                    .filter(|d| !ancestors.contains(d) && Some(*d) != id)
                    .collect();
                return Resolved {
                    path: full,
                    id,
                    ancestors,
                    spelled,
                    anchor: own.map(|own| (canonical, own, first_missing)),
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
                        spelled: Vec::new(),
                        anchor: None,
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
    fn the_store_its_companions_and_the_token_file_may_not_be_inside_a_grant() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, beside, elsewhere) = (root.join("state"), root.join("beside"), root.join("e"));
        for d in [&state, &beside, &elsewhere] {
            std::fs::create_dir_all(d).unwrap();
        }
        let db = state.join("x.db");
        std::fs::write(&db, "").unwrap();
        // The token file is a link to a file elsewhere, which is what gets read.
        std::fs::write(elsewhere.join("tokens"), "").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("tokens"), beside.join("tokens")).unwrap();
        let r = ReservedPaths::none()
            .with(&db, ReservedKind::Store)
            .with(state.join("x.db-wal"), ReservedKind::Store)
            .with(state.join("x.db-shm"), ReservedKind::Store)
            .with(beside.join("tokens"), ReservedKind::TokenFile);
        let o = refusal(&r, &state);
        assert_eq!(
            (o.relation, o.kind),
            (Relation::Contains, ReservedKind::Store)
        );
        assert_eq!(o.reserved, db);
        let text = o.to_string();
        assert!(
            text.contains("store of sessions and the audit log") && text.contains("--store"),
            "{text}"
        );
        let token = refusal(&r, &elsewhere);
        assert_eq!(token.kind, ReservedKind::TokenFile);
        assert_eq!(token.reserved, elsewhere.join("tokens"));
        assert!(token.to_string().contains("--token-file"), "{token}");
        // So is the directory holding the link, which could be pointed elsewhere.
        assert_eq!(refusal(&r, &beside).kind, ReservedKind::TokenFile);
        assert_eq!(refusal(&r, &root).relation, Relation::Contains);
        std::fs::create_dir_all(state.join("sub")).unwrap();
        r.check_dir(&state.join("sub")).unwrap();
        // The -wal and -shm files are protected before they exist, by where they will be.
        let only_wal = ReservedPaths::none().with(state.join("x.db-wal"), ReservedKind::Store);
        assert_eq!(refusal(&only_wal, &state).reserved, state.join("x.db-wal"));
    }

    #[test]
    fn a_missing_file_created_later_as_a_link_is_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, data) = (root.join("state"), root.join("data"));
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let shm = state.join("x.db-shm");
        let r = ReservedPaths::none().with(&shm, ReservedKind::Store);
        r.check_dir(&data).unwrap();
        r.check_dir(&data).unwrap();
        std::fs::write(data.join("shm"), "").unwrap();
        std::os::unix::fs::symlink(data.join("shm"), &shm).unwrap();
        assert_eq!(refusal(&r, &data).relation, Relation::Contains);
    }

    #[test]
    fn the_directory_holding_a_link_on_the_way_is_reserved_too() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("x.db"), "").unwrap();
        std::os::unix::fs::symlink(&b, a.join("link")).unwrap();
        let given = a.join("link/x.db");
        let r = ReservedPaths::none().with(&given, ReservedKind::Store);
        // Who can replace the link can point the store at a file of their own.
        let o = refusal(&r, &a);
        assert_eq!((o.relation, o.reserved), (Relation::Contains, given));
        assert_eq!(refusal(&r, &b).reserved, b.join("x.db"));
    }

    #[test]
    fn tcp_grants_may_not_reach_the_postgres_store() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let r = ReservedPaths::none().with_address(addr("127.0.0.1:5432"), "postgres://db");
        for reaching in [
            "127.0.0.1:5432",
            "127.0.0.2:5432",
            "0.0.0.0:5432",
            "[::1]:5432",
            "[::]:5432",
            "[::ffff:127.0.0.1]:5432",
        ] {
            match r.check_tcp(addr(reaching)) {
                Err(GrantError::ReservedAddress(o)) => {
                    assert_eq!(o.reserved, addr("127.0.0.1:5432"));
                    let text = GrantError::ReservedAddress(o).to_string();
                    assert!(
                        text.contains(reaching) && text.contains("postgres://db"),
                        "{text}"
                    );
                }
                other => panic!("{reaching} was not refused: {other:?}"),
            }
        }
        for apart in ["127.0.0.1:5433", "10.0.0.1:5432", "[::2]:5432"] {
            r.check_tcp(addr(apart)).unwrap();
        }
        let remote = ReservedPaths::none().with_address(addr("10.1.2.3:5432"), "postgres://db");
        assert!(remote.check_tcp(addr("10.1.2.3:5432")).is_err());
        remote.check_tcp(addr("127.0.0.1:5432")).unwrap();
        ReservedPaths::none()
            .check_tcp(addr("127.0.0.1:5432"))
            .unwrap();
    }

    #[test]
    fn nothing_reserved_allows_everything() {
        ReservedPaths::none().check_dir(Path::new("/")).unwrap();
    }
}
