//! Where a command keeps what it must not lose: the store of sessions and the audit log
//! (`--store`/`$CORDON_STORE`, else `[store] url` of the config in use, else `sessions.db` in
//! the home), and whether audit records keep arguments.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use cordon_agent::{AgentConfig, AuditConfig, StoreConfig};
use cordon_core::ReservedKind;
use cordon_home::Home;
use cordon_store::{Store, StoreLocation, StoreOptions};

/// The store of a command, and what its audit records keep.
pub struct Records {
    /// The store.
    pub store: Store,
    /// Whether audit records keep each call's arguments.
    pub keep_arguments: bool,
}

/// The `[store]` and `[audit]` settings of the config in use (`config`, else
/// `$CORDON_CONFIG`, else `./cordon.toml` when it exists).
pub fn settings(config: Option<&Path>) -> anyhow::Result<(StoreConfig, AuditConfig)> {
    let from_env = std::env::var_os("CORDON_CONFIG")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let explicit = config.map(Path::to_path_buf).or(from_env);
    Ok(match crate::chat::config_in_use(explicit.as_deref()) {
        Some(path) => {
            let config = AgentConfig::load(&path, true)?;
            (config.store, config.audit)
        }
        None => Default::default(),
    })
}

/// What kind of command opens the store: how it drives sessions, and how many connections it
/// needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// A command that records a change or a call and exits: one connection.
    OneShot,
    /// A conversation at the terminal (`chat`, `run`, `sessions resume | replay`).
    Conversation,
    /// `cordon serve`, driving many sessions at once.
    Serve,
    /// `cordon mcp`: records the calls one MCP client makes, some at once.
    Mcp,
}

/// Opens the store a command records into, and keeps every grant `home` gives or runs clear
/// of it.
pub async fn open(
    home: &mut Home,
    explicit: Option<&str>,
    config: Option<&Path>,
    opener: Opener,
) -> anyhow::Result<Records> {
    let (driver, connections) = match opener {
        Opener::OneShot => ("cli", 1),
        // A turn's records and the lease's renewals may overlap.
        Opener::Conversation => ("cli", 2),
        Opener::Serve => ("serve", 16),
        Opener::Mcp => ("mcp", 4),
    };
    let (store, audit) = settings(config)?;
    let options = StoreOptions {
        lease_ttl: Duration::from_secs(store.lease_secs),
        driver,
        connections,
        ..StoreOptions::default()
    };
    let store = match explicit.map(String::from).or(store.url) {
        Some(url) => Store::open(&url, options).await?,
        None => Store::open_in_home(home.root(), options).await?,
    };
    *home = protecting_store(home.clone(), &store).await?;
    Ok(Records {
        store,
        keep_arguments: audit.keep_arguments,
    })
}

/// `home`, also keeping every grant clear of `store`: the files of a SQLite store, the
/// addresses of a PostgreSQL server. A plugin that reached either could read every transcript
/// and erase the audit log.
async fn protecting_store(mut home: Home, store: &Store) -> anyhow::Result<Home> {
    match store.location() {
        location @ StoreLocation::Sqlite(_) => {
            for file in location.files() {
                home = home.protecting(file, ReservedKind::Store);
            }
        }
        StoreLocation::Postgres { host, port } => {
            let addresses = tokio::net::lookup_host((host.as_str(), *port))
                .await
                .with_context(|| {
                    format!(
                        "cannot find the addresses of the store's host `{host}`, which no \
                         grant may reach"
                    )
                })?;
            for addr in addresses {
                home = home.protecting_address(addr, store.url());
            }
        }
    }
    Ok(home)
}
