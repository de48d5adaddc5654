//! The store's test suite, run against both backends: SQLite in a temporary directory, and a
//! real PostgreSQL server (Debian's package, a throwaway cluster started by the harness).

mod approvals;
mod audit;
mod counts;
mod histories;
mod kept;
mod mcp_sessions;
mod sessions;

use std::time::Duration;

use cordon_store::{Store, StoreOptions};

/// Where a test's store lives.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty store of `backend`, with a short lease so tests of expiry are quick, and
/// its URL (to open a second store on the same data, as a second host would).
pub async fn fresh(
    backend: Backend,
    options: StoreOptions,
) -> (Store, String, Option<tempfile::TempDir>) {
    let (url, dir) = match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            (
                format!("sqlite:{}", dir.path().join("s.db").display()),
                Some(dir),
            )
        }
        Backend::Postgres => (cordon_tests::postgres::shared().database(), None),
    };
    let store = Store::open(&url, options).await.unwrap();
    (store, url, dir)
}

/// Runs one SQL statement on the store's database behind its back (as another program, or
/// a stalled host's lease running out, would); returns the rows it changed.
pub async fn raw_sql(backend: Backend, url: &str, sql: &'static str) -> Result<u64, sqlx::Error> {
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(url).await?;
            Ok(sqlx::query(sql).execute(&pool).await?.rows_affected())
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(url).await?;
            Ok(sqlx::query(sql).execute(&pool).await?.rows_affected())
        }
    }
}

/// Options with a lease of `ttl` and a snapshot every `snapshot_every` transitions.
pub fn options(ttl: Duration, snapshot_every: u32) -> StoreOptions {
    StoreOptions {
        lease_ttl: ttl,
        snapshot_every,
        ..StoreOptions::default()
    }
}

/// Runs the named async test body once per backend: `each_backend!(name, |backend| async {…})`.
#[macro_export]
macro_rules! each_backend {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                ($body)($crate::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                ($body)($crate::Backend::Postgres).await
            }
        }
    };
}

#[tokio::test]
async fn an_unreachable_or_unknown_store_is_a_clear_error() {
    // Nothing listens on this port: the error names the store and what to check, at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://cordon:secret@127.0.0.1:{port}/cordon");
    let started = std::time::Instant::now();
    let e = Store::open(&url, StoreOptions::default())
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&format!("postgres://cordon:***@127.0.0.1:{port}/cordon"))
            && text.contains("check the URL and that the server is running"),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
    assert!(e.is_unavailable());
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    let e = Store::open("mysql://x/y", StoreOptions::default())
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("give `sqlite:PATH` or `postgres://"),
        "{e}"
    );
}
