//! cordon-store: what a Cordon host keeps so that it loses nothing — sessions and the audit
//! log — in SQLite (one file in the Cordon home, the default) or PostgreSQL (several hosts
//! sharing one store).
//!
//! - A **session** is a conversation with a durable identity. Every transition of its state
//!   machine is appended to the session's log (its cause, the messages it added, and the rest
//!   of the conversation), in one database transaction, before the driver performs what the
//!   transition asked for; a snapshot every [`StoreOptions::snapshot_every`] transitions keeps
//!   loading fast. See [`SessionJournal`].
//! - A session is driven by one host at a time: driving takes a **lease** that the host renews
//!   while it drives and that expires if the host dies, after which another host may take the
//!   session over. Every append checks the lease and the log's sequence number in the same
//!   transaction, so a host that lost its lease can never write again.
//! - The **audit log** has one record per tool call and per change to the home; the host only
//!   ever appends to it, and the database refuses updates and deletes.
//! - **Call counts** per policy counter and minute, which per-call rules read ("at most 20
//!   writes an hour"), shared by every host on the store; see [`Store::count_calls`].
//!
//! Both backends run the same SQL (written with `$1` placeholders, which both read) through
//! sqlx, with versioned migrations applied at open.

mod ahead;
mod answers;
mod approvals;
mod audit;
mod counts;
mod error;
mod histories;
mod journal;
mod kept;
mod mcp_sessions;
mod sessions;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::Connection;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub use answers::{ANSWERS_CHANNEL, CANCELS_CHANNEL, Heard, Waited};
pub use approvals::{ApprovalWaiting, Asked, SessionCall, WAITING_APPROVALS_SESSION};
pub use audit::{AuditQuery, StoredAudit};
pub use cordon_agent::SessionSettings;
pub use counts::LONGEST_WINDOW_MINUTES;
pub use error::StoreError;
pub use journal::{AuditJournal, SessionJournal};
pub use sessions::{Lease, NewSession, SessionInfo, TransitionRecord, validate_session_id};

/// The variable naming this machine in leases (default: its host name).
pub const HOST_NAME_ENV: &str = "CORDON_HOST_NAME";

/// The file a home's store lives in, when no other store is configured.
pub const DEFAULT_SQLITE_FILE: &str = "sessions.db";

/// How a store behaves; the defaults suit one host or a few sharing a PostgreSQL server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// How long a lease on a session lasts without renewal: the time another host waits
    /// before taking over a session whose host died. The driving host renews it at every
    /// transition and every third of this while it waits.
    pub lease_ttl: Duration,
    /// A snapshot of the whole conversation after at least this many transitions, once the
    /// transitions since the last one take as much room as it does (so snapshots of a long
    /// session cost no more than its transitions).
    pub snapshot_every: u32,
    /// What kind of process drives sessions through this store (`serve`, `cli`): the first
    /// part of its name in leases, so that a host takes up only the sessions its own kind was
    /// driving when it stopped.
    pub driver: &'static str,
    /// Connections the store may hold open at once: a few for a host serving many sessions,
    /// one for a command that records one thing and exits (each connection costs its opening,
    /// and for SQLite a checkpoint when the last one closes).
    pub connections: u32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            snapshot_every: 64,
            driver: "cordon",
            connections: 8,
        }
    }
}

/// Where a store keeps its data: what no plugin may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A SQLite database file, as given.
    Sqlite(PathBuf),
    /// A PostgreSQL server's host (a name or an address) and port; for a server reached
    /// through a Unix socket, `localhost` and its port, where it may listen too.
    Postgres {
        /// The host, without brackets around an IPv6 address.
        host: String,
        /// The port.
        port: u16,
    },
}

impl StoreLocation {
    /// The files of a SQLite store: the database, and the write-ahead log, the shared-memory
    /// index and the rollback journal SQLite keeps beside it under the same name (whether they
    /// exist now or not). None for PostgreSQL.
    pub fn files(&self) -> Vec<PathBuf> {
        match self {
            StoreLocation::Sqlite(db) => std::iter::once(db.clone())
                .chain(["-wal", "-shm", "-journal"].into_iter().map(|suffix| {
                    let mut name = db.as_os_str().to_os_string();
                    name.push(suffix);
                    PathBuf::from(name)
                }))
                .collect(),
            StoreLocation::Postgres { .. } => Vec::new(),
        }
    }
}

/// The connection pool of one backend.
#[derive(Debug, Clone)]
enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Backend {
    /// Its name, as metrics label it.
    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }
}

/// Runs the same code on whichever pool the store holds: the SQL is written once, with `$N`
/// placeholders, which SQLite and PostgreSQL both read.
macro_rules! on_backend {
    ($store:expr, $pool:ident => $body:expr) => {{
        let started = std::time::Instant::now();
        let done = match &$store.backend {
            $crate::Backend::Sqlite($pool) => $body,
            $crate::Backend::Postgres($pool) => $body,
        };
        cordon_core::metrics::store_operation($store.backend.name(), started.elapsed());
        done
    }};
}
pub(crate) use on_backend;

/// An open session store. Cheap to clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    /// The URL with any password hidden, for messages.
    url: String,
    /// Where the data is kept.
    location: StoreLocation,
    /// This process's name in leases: host name, process id and a random part.
    holder: String,
    options: StoreOptions,
    /// The minute this handle (or a clone) last pruned old call counts; 0 before it has.
    counts_pruned: Arc<AtomicI64>,
    /// Places on policy counters this handle and its clones reserved ahead (see
    /// [`ahead`]).
    ahead: Arc<ahead::Ahead>,
    /// Answers to questions announced to this handle and its clones (PostgreSQL).
    announcements: Arc<answers::Announcements>,
}

impl Store {
    /// Opens (creating if needed) the store at `url`: `sqlite:PATH` (or a bare path) or
    /// `postgres://…`, and brings its tables to this version.
    pub async fn open(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let shown = redact(url);
        let (backend, location) =
            if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                let (pool, location) = open_postgres(url, &shown, options.connections).await?;
                (Backend::Postgres(pool), location)
            } else if let Some(path) = sqlite_path(url) {
                let pool = open_sqlite(&path, &shown, options.connections).await?;
                (Backend::Sqlite(pool), StoreLocation::Sqlite(path))
            } else {
                return Err(StoreError::BadUrl { url: shown });
            };
        let store = Store {
            backend,
            url: shown,
            location,
            holder: holder_name(options.driver),
            options,
            counts_pruned: Arc::new(AtomicI64::new(0)),
            ahead: Default::default(),
            announcements: Arc::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Opens the default store of a Cordon home: `sessions.db` in it.
    pub async fn open_in_home(home: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        let path = home.join(DEFAULT_SQLITE_FILE);
        Store::open(&format!("sqlite:{}", path.display()), options).await
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let (backend, files) = match &self.backend {
            Backend::Sqlite(_) => ("sqlite", SQLITE_MIGRATIONS),
            Backend::Postgres(_) => ("postgres", POSTGRES_MIGRATIONS),
        };
        let migrations = files
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    (*description).into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect();
        let migrator = Migrator::with_migrations(migrations);
        let result = on_backend!(self, pool => migrator.run(pool).await);
        result.map_err(|source| {
            tracing::debug!(backend, "migration failed");
            StoreError::Migrate {
                url: self.url.clone(),
                source,
            }
        })
    }

    /// The store's URL with any password hidden.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the store keeps its data.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// This process's name in the leases it takes.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The options the store was opened with.
    pub fn options(&self) -> StoreOptions {
        self.options
    }

    /// When a lease taken or renewed at `now_ms` ends; a lease too long to count (from
    /// options no config allows) ends at the end of time rather than overflowing.
    pub(crate) fn lease_until(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(i64::try_from(self.options.lease_ttl.as_millis()).unwrap_or(i64::MAX))
    }

    /// Whether the store is PostgreSQL (shared by hosts) rather than a local SQLite file.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Wraps a database error with the store's URL.
    pub(crate) fn failed(&self, source: sqlx::Error) -> StoreError {
        cordon_core::metrics::store_error(self.backend.name());
        StoreError::Database {
            url: self.url.clone(),
            source,
        }
    }

    /// Closes the pool, waiting for connections in use to be returned; places reserved ahead
    /// on policy counters are given back first.
    pub async fn close(&self) {
        self.give_back_spare().await;
        on_backend!(self, pool => pool.close().await)
    }
}

/// The migrations, in order: (version, description, SQL). A new version gets a new file;
/// a released file is never edited (sqlx checks their digests).
const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "sessions and audit",
        include_str!("../migrations/sqlite/0001_sessions_and_audit.sql"),
    ),
    (
        2,
        "approvals",
        include_str!("../migrations/sqlite/0002_approvals.sql"),
    ),
    (
        3,
        "gateway histories",
        include_str!("../migrations/sqlite/0003_gateway_histories.sql"),
    ),
    (
        4,
        "session creators",
        include_str!("../migrations/sqlite/0004_session_creators.sql"),
    ),
    (
        5,
        "call counts",
        include_str!("../migrations/sqlite/0005_call_counts.sql"),
    ),
    (
        6,
        "kept results",
        include_str!("../migrations/sqlite/0006_kept_results.sql"),
    ),
    (
        7,
        "audit requesters",
        include_str!("../migrations/sqlite/0007_audit_requesters.sql"),
    ),
    (
        8,
        "approval tokens",
        include_str!("../migrations/sqlite/0008_approval_tokens.sql"),
    ),
    (
        9,
        "session approvals",
        include_str!("../migrations/sqlite/0009_session_approvals.sql"),
    ),
    (
        10,
        "mcp sessions",
        include_str!("../migrations/sqlite/0010_mcp_sessions.sql"),
    ),
    (
        11,
        "serve hosts",
        include_str!("../migrations/sqlite/0011_serve_hosts.sql"),
    ),
];
const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "sessions and audit",
        include_str!("../migrations/postgres/0001_sessions_and_audit.sql"),
    ),
    (
        2,
        "approvals",
        include_str!("../migrations/postgres/0002_approvals.sql"),
    ),
    (
        3,
        "gateway histories",
        include_str!("../migrations/postgres/0003_gateway_histories.sql"),
    ),
    (
        4,
        "session creators",
        include_str!("../migrations/postgres/0004_session_creators.sql"),
    ),
    (
        5,
        "call counts",
        include_str!("../migrations/postgres/0005_call_counts.sql"),
    ),
    (
        6,
        "kept results",
        include_str!("../migrations/postgres/0006_kept_results.sql"),
    ),
    (
        7,
        "audit requesters",
        include_str!("../migrations/postgres/0007_audit_requesters.sql"),
    ),
    (
        8,
        "approval tokens",
        include_str!("../migrations/postgres/0008_approval_tokens.sql"),
    ),
    (
        9,
        "session approvals",
        include_str!("../migrations/postgres/0009_session_approvals.sql"),
    ),
    (
        10,
        "mcp sessions",
        include_str!("../migrations/postgres/0010_mcp_sessions.sql"),
    ),
    (
        11,
        "serve hosts",
        include_str!("../migrations/postgres/0011_serve_hosts.sql"),
    ),
];

/// The file of a `sqlite:` URL (`sqlite:PATH`, `sqlite://PATH`) or of a bare path.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let rest = rest.split('?').next().unwrap_or(rest);
        return (!rest.is_empty()).then(|| PathBuf::from(rest));
    }
    (!url.contains("://") && !url.is_empty()).then(|| PathBuf::from(url))
}

async fn open_sqlite(path: &Path, shown: &str, connections: u32) -> Result<SqlitePool, StoreError> {
    let create = |source| StoreError::Create {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(create)?;
    }
    // Conversations and the audit log are nobody else's business: the file (and the WAL files
    // SQLite makes beside it with the same mode) is readable by its owner only.
    #[cfg(unix)]
    if !path.exists() {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Ok(std::fs::File::open(path)?),
                _ => Err(e),
            })
            .map_err(create)?;
    }
    let options = SqliteConnectOptions::from_str("sqlite:")
        .map_err(|source| StoreError::Open {
            url: shown.to_string(),
            source,
        })?
        .filename(path)
        .create_if_missing(true)
        // WAL: readers never wait for the writer. NORMAL: a commit survives the process being
        // killed at any moment (what `kill -9` tests); only a power loss may take the last
        // commits, which FULL would keep at the price of an fsync per transition.
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30))
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .max_connections(connections.max(1))
        // A connection to a local file does not go stale the way a network connection does:
        // pinging it before each use (sqlx's default) doubled every statement's round trip
        // through the connection's worker thread (a counter's read, 96 → 52 µs p50).
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .map_err(|source| StoreError::Open {
            url: shown.to_string(),
            source,
        })
}

async fn open_postgres(
    url: &str,
    shown: &str,
    connections: u32,
) -> Result<(PgPool, StoreLocation), StoreError> {
    let open = |source| StoreError::Open {
        url: shown.to_string(),
        source,
    };
    let options = PgConnectOptions::from_str(url).map_err(open)?;
    let location = StoreLocation::Postgres {
        host: match options.get_socket() {
            Some(_) => "localhost".to_string(),
            None => options
                .get_host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        },
        port: options.get_port(),
    };
    // One connection first: an unreachable server fails at once with its own error (refused,
    // unknown host, bad password) instead of a pool timing out.
    PgConnection::connect_with(&options)
        .await
        .map_err(open)?
        .close()
        .await
        .map_err(open)?;
    let pool = PgPoolOptions::new()
        .max_connections(connections.max(1))
        // A store that goes away mid-turn fails the turn after this, rather than hanging it.
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(options);
    Ok((pool, location))
}

/// The URL with the password of its user-info part replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// A name for this process in leases: which machine and process drives a session, with a
/// random part so a restarted process with a recycled pid is someone else.
fn holder_name(driver: &str) -> String {
    format!(
        "{driver}@{}:{}:{:06x}",
        host_name(),
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

/// This machine's name in leases: `$CORDON_HOST_NAME` (for hosts whose system name is not
/// stable, such as containers), else the system's host name.
fn host_name() -> String {
    std::env::var(HOST_NAME_ENV)
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The kind of process a lease holder is (`serve`, `cli`; see [`StoreOptions::driver`]).
pub fn holder_driver(holder: &str) -> &str {
    holder.split_once('@').map_or("", |(driver, _)| driver)
}

/// Whether a lease holder is a process of this machine that no longer runs: its lease need
/// not be waited out (a killed `cordon chat`, a host restarted after a crash). A holder on
/// another machine, or whose process id is in use, is taken to be alive.
pub(crate) fn holder_is_gone(holder: &str) -> bool {
    let mut parts = holder.rsplitn(3, ':');
    let (Some(_random), Some(pid), Some(place)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let host = place.split_once('@').map_or(place, |(_, host)| host);
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    host == host_name()
        && pid != std::process::id()
        && cfg!(target_os = "linux")
        && !Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_here_whose_process_ended_is_gone() {
        let me = holder_name("cli");
        assert!(!holder_is_gone(&me), "{me}");
        assert_eq!(holder_driver(&me), "cli");
        // A child that has exited and been reaped leaves its pid unused (for a while).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(holder_is_gone(&format!(
            "serve@{}:{pid}:abcdef",
            host_name()
        )));
        assert!(!holder_is_gone(&format!(
            "serve@elsewhere.example:{pid}:abcdef"
        )));
        assert!(!holder_is_gone("nonsense"));
    }

    #[test]
    fn both_backends_have_the_same_migrations_in_order() {
        let versions = |files: &[(i64, &'static str, &str)]| {
            files
                .iter()
                .map(|(version, description, _)| (*version, *description))
                .collect::<Vec<_>>()
        };
        assert_eq!(versions(SQLITE_MIGRATIONS), versions(POSTGRES_MIGRATIONS));
        for (i, (version, _, _)) in SQLITE_MIGRATIONS.iter().enumerate() {
            assert_eq!(*version, i as i64 + 1);
        }
    }

    #[test]
    fn passwords_are_hidden_in_messages() {
        assert_eq!(
            redact("postgres://ann:secret@db.example/cordon"),
            "postgres://ann:***@db.example/cordon"
        );
        assert_eq!(
            redact("postgres://ann@db.example/cordon"),
            "postgres://ann@db.example/cordon"
        );
        assert_eq!(redact("sqlite:/x/y.db"), "sqlite:/x/y.db");
    }

    #[test]
    fn a_sqlite_store_keeps_its_companions_beside_it() {
        assert_eq!(
            StoreLocation::Sqlite("/d/x.db".into()).files(),
            ["/d/x.db", "/d/x.db-wal", "/d/x.db-shm", "/d/x.db-journal"]
                .map(PathBuf::from)
                .to_vec()
        );
        let pg = StoreLocation::Postgres {
            host: "db".into(),
            port: 5432,
        };
        assert!(pg.files().is_empty());
    }

    #[test]
    fn sqlite_urls_and_paths() {
        assert_eq!(
            sqlite_path("sqlite:/a/b.db"),
            Some(PathBuf::from("/a/b.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:///a/b.db"),
            Some(PathBuf::from("/a/b.db"))
        );
        assert_eq!(sqlite_path("/a/b.db"), Some(PathBuf::from("/a/b.db")));
        assert_eq!(sqlite_path("mysql://x"), None);
        assert_eq!(sqlite_path("sqlite:"), None);
    }
}
