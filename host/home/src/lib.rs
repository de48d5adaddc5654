//! The Cordon home: which plugins are installed, pinned by digest, what each may reach, and the
//! [`Toolbox`] that runs their tools under exactly those grants.
//!
//! Layout of a home directory (`$CORDON_HOME`, default `<user data dir>/cordon`):
//!
//! ```text
//! plugins.toml                  the lock/grants file (human-readable TOML)
//! components/<sha256>.wasm      installed components, content-addressed
//! components/<sha256>.json      the tool list each component reported at install time
//! cache/                        the runtime's compiled-code cache (disposable)
//! .lock                         advisory lock serialising changes
//! ```
//!
//! Every change is made under an exclusive lock and written atomically (temp file, fsync,
//! rename), so a crash or a failed command never leaves a half-written home: a failed install
//! leaves every file exactly as it was.

pub mod bundled;
mod config_values;
mod error;
pub mod expiring;
mod fsutil;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod install;
mod lockfile;
mod oci;
mod registry;
mod scope;
mod signing;
mod source;
mod tool_edits;
mod toolbox;
mod trust;
mod update;
mod wassette;

use std::path::{Path, PathBuf};

use cordon_core::{Grant, GrantError, Grants, Limits, ReservedKind, ReservedPaths};
use cordon_runtime::{Runtime, RuntimeConfig};

pub use config_values::{MAX_CONFIG_VALUE_BYTES, check_config_key};
pub use error::HomeError;
pub use expiring::{ExpiringGrant, MAX_GRANT_DURATION};
pub use fsutil::{HomeLock, MAX_COMPONENT_BYTES, sha256_digest};
pub use install::{
    InstallReport, InstallRequest, PreparedInstall, Provenance, Rollback, SignerChange, ToolChange,
    ToolDiff, UpgradeDiff,
};
pub use lockfile::{LOCK_VERSION, LockFile, MAX_MANIFEST_HISTORY, PluginRecord, SignedBy};
pub use oci::{OciReference, Signed, attach_signature, push_component, resolve, signature_tag};
pub use scope::RepositoryPattern;
pub use signing::{PrivateKey, PublicKey};
pub use source::{Fetched, InstallSource, normalise_digest};
pub use tool_edits::{EditsFile, SIDECAR_SUFFIX};
pub use toolbox::{ToolEntry, Toolbox};
pub use trust::TrustedKey;
pub use update::{Availability, RegistryPlugin};
pub use wassette::{Translation, WassettePolicy};

use fsutil::{io_err, sync_dir};

/// Environment variable naming the home directory.
pub const HOME_ENV: &str = "CORDON_HOME";

/// Checks a plugin name: lowercase ASCII letters, digits, `-` and `_`, starting with a letter,
/// at most 64 characters. No `.`, because `plugin.tool` is how clashing tool names are told
/// apart, and nothing that could be a path.
pub fn validate_plugin_name(name: &str) -> Result<(), HomeError> {
    let bad = |reason: &str| {
        Err(HomeError::BadPluginName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 64 {
        return bad("it is longer than 64 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return bad("it must start with a lowercase letter");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        return bad(&format!("it contains `{c}`"));
    }
    Ok(())
}

/// The hex part of a `sha256:<hex>` digest (a bare hex digest is returned as is).
pub(crate) fn digest_hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// One Cordon home directory.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
    max_instances: u32,
    /// What no grant may reach: this home, the config file in use if any, the store and the
    /// token file.
    reserved: ReservedPaths,
}

/// What `grant` changed, so the CLI can say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantChange {
    /// The grant as now recorded (resolved: canonical host path, guest path filled in).
    pub granted: Grant,
    /// A grant it replaced (the same one, or another mode at the same guest path).
    pub replaced: Option<Grant>,
}

impl Home {
    /// A home at `root`. Nothing is created until something is installed.
    pub fn at(root: impl Into<PathBuf>) -> Home {
        let root = root.into();
        Home {
            reserved: ReservedPaths::none().with(&root, ReservedKind::Home),
            root,
            max_instances: cordon_runtime::DEFAULT_MAX_INSTANCES,
        }
    }

    /// The same home, also keeping every grant clear of the config file at `path` (the
    /// `cordon.toml` in use): its approval rules must not be writable by a plugin either.
    pub fn protecting_config(mut self, path: impl Into<PathBuf>) -> Home {
        self.reserved = self.reserved.with(path, ReservedKind::Config);
        self
    }

    /// The same home, also keeping every grant clear of the file at `path`, where this process
    /// keeps state or secrets of the `kind` given (the store, the token file).
    pub fn protecting(mut self, path: impl Into<PathBuf>, kind: ReservedKind) -> Home {
        self.reserved = self.reserved.with(path, kind);
        self
    }

    /// The same home, also refusing `net:tcp` grants that reach `addr`, where the PostgreSQL
    /// store `shown` (its URL, password hidden) listens.
    pub fn protecting_address(mut self, addr: std::net::SocketAddr, shown: &str) -> Home {
        self.reserved = self.reserved.with_address(addr, shown);
        self
    }

    /// Refuses a host's start while a recorded grant reaches Cordon's own state (one given
    /// before a store or token file was put inside it, or written into the lock file by
    /// hand): names the plugin, the grant and what it reaches. A granted directory that is
    /// missing is left to the call, which says so.
    pub fn check_recorded_grants(&self) -> Result<(), HomeError> {
        let lock = self.read()?;
        for (plugin, record) in &lock.plugins {
            let expiring = record.expiring.iter().map(|e| &e.grant);
            for grant in record.grants.iter().chain(expiring) {
                let (checked, revoke) = match grant {
                    Grant::Fs(fs) => (
                        self.reserved.check_dir(&fs.host),
                        format!("fs:{}", fs.host.display()),
                    ),
                    Grant::Tcp(addr, _) => (self.reserved.check_tcp(*addr), grant.to_string()),
                    _ => continue,
                };
                if let Err(source @ (GrantError::Reserved(_) | GrantError::ReservedAddress(_))) =
                    checked
                {
                    return Err(HomeError::ReservedGrant {
                        plugin: plugin.clone(),
                        grant: grant.to_string(),
                        revoke,
                        source: Box::new(source),
                    });
                }
            }
        }
        Ok(())
    }

    /// The paths no directory grant may overlap (see [`ReservedPaths`]): checked when a grant
    /// is given and again by every call.
    pub fn reserved(&self) -> &ReservedPaths {
        &self.reserved
    }

    /// The same home, with runtimes sized for at most `n` instances at once: a one-shot
    /// command runs one call and need not set up a server's pool (see
    /// [`RuntimeConfig::max_instances`]).
    pub fn with_max_instances(mut self, n: u32) -> Home {
        self.max_instances = n.max(1);
        self
    }

    /// The home to use: `explicit` (from `--home` or `$CORDON_HOME`), else
    /// `<user data dir>/cordon` (e.g. `~/.local/share/cordon`).
    pub fn locate(explicit: Option<PathBuf>) -> Result<Home, HomeError> {
        if let Some(root) = explicit.filter(|p| !p.as_os_str().is_empty()) {
            return Ok(Home::at(root));
        }
        if let Some(root) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
            return Ok(Home::at(PathBuf::from(root)));
        }
        dirs::data_dir()
            .map(|d| Home::at(d.join("cordon")))
            .ok_or(HomeError::NoHomeDir)
    }

    /// The home directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `plugins.toml`.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("plugins.toml")
    }

    /// What `cordon chat` keeps of the lines typed on a terminal, for its arrows and Ctrl-R.
    /// In the home, which no grant may reach, since people type secrets too.
    pub fn chat_history_path(&self) -> PathBuf {
        self.root.join("chat-history")
    }

    /// The runtime's compile cache.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// Where the component with this `sha256:<hex>` digest is stored.
    pub fn component_path(&self, digest: &str) -> PathBuf {
        let hex = digest_hex(digest);
        self.root.join("components").join(format!("{hex}.wasm"))
    }

    /// Where the tool list reported at install time is stored, beside the component.
    pub fn tool_list_path(&self, digest: &str) -> PathBuf {
        self.component_path(digest).with_extension("json")
    }

    /// The record of when the component with this digest was last verified (a file stamp);
    /// disposable like the rest of the cache.
    pub fn verified_record_path(&self, digest: &str) -> PathBuf {
        let hex = digest_hex(digest);
        self.cache_dir().join(format!("{hex}.verified"))
    }

    /// A runtime whose compile cache is this home's `cache/`. Its calls' lock directories are
    /// written to the home's ledger (`locks/`), and those a host killed mid-call left are
    /// removed now (see [`cordon_runtime::LockLedger`]).
    pub fn runtime(&self) -> Result<Runtime, HomeError> {
        if self.root.exists() {
            let removed = cordon_runtime::LockLedger::install(&self.root.join("locks"));
            if removed > 0 {
                tracing::info!(
                    "removed {removed} lock directories that calls of a stopped host left behind"
                );
            }
        }
        // What calls write of their results is kept in the home (no grant reaches it), on its
        // disk, in files without names; without a home, in the system's temporary directory.
        // The directory is made on the first write, so a call that writes nothing leaves the
        // home as it was.
        let spool_dir = self.root.exists().then(|| self.root.join("spool"));
        Runtime::new(RuntimeConfig {
            cache_dir: Some(self.cache_dir()),
            max_instances: self.max_instances,
            spool_dir,
        })
        .map_err(HomeError::Runtime)
    }

    /// Reads the lock file as it is now (a missing home reads as empty).
    pub fn read(&self) -> Result<LockFile, HomeError> {
        let _guard = HomeLock::shared(&self.root)?;
        LockFile::load(&self.lock_path())
    }

    /// Runs `change` on the lock file under the exclusive lock and saves the result only if
    /// `change` succeeded. On a home that does not exist yet, `change` is first tried on an
    /// empty lock file so that a command that fails creates nothing.
    fn update<T>(
        &self,
        mut change: impl FnMut(&mut LockFile) -> Result<T, HomeError>,
    ) -> Result<T, HomeError> {
        if !self.root.exists() {
            change(&mut LockFile::load(&self.lock_path())?)?;
        }
        let _guard = HomeLock::exclusive(&self.root)?;
        let path = self.lock_path();
        let mut lock = LockFile::load(&path)?;
        let before = lock.clone();
        let out = change(&mut lock)?;
        if lock != before {
            lock.save(&path)?;
        }
        Ok(out)
    }

    /// Gives `plugin` more capabilities. Each grant is parsed, its directory checked and made
    /// canonical, and checked against the plugin's ceiling; if any is refused none is added.
    pub fn grant(&self, plugin: &str, grants: &[String]) -> Result<Vec<GrantChange>, HomeError> {
        let parsed = self.parse_grants(grants)?;
        self.update(|lock| {
            let record = lock.plugin_mut(plugin)?;
            record
                .ceiling()
                .permit_all(&parsed)
                .map_err(|e| e.for_plugin(plugin))?;
            // Given for good now: an end it had no longer applies.
            record
                .expiring
                .retain(|e| !parsed.iter().any(|g| g.same_access(&e.grant)));
            Ok(parsed
                .iter()
                .map(|g| GrantChange {
                    granted: g.clone(),
                    replaced: record.grants.add(g.clone()).filter(|old| old != g),
                })
                .collect())
        })
    }

    /// Takes capabilities away. `fs:` patterns match on the path whatever the mode (see
    /// [`Grant::matches_revoke`]); a pattern that matches nothing is an error and nothing is
    /// revoked, so a typo never looks like success.
    pub fn revoke(&self, plugin: &str, patterns: &[String]) -> Result<Vec<Grant>, HomeError> {
        let parsed: Vec<Grant> = patterns
            .iter()
            .map(|p| p.parse::<Grant>().map_err(HomeError::from))
            .collect::<Result<_, _>>()?;
        self.update(|lock| {
            let record = lock.plugin_mut(plugin)?;
            let mut removed = Vec::new();
            for (pattern, text) in parsed.iter().zip(patterns) {
                let mut gone = record.grants.revoke(pattern);
                let (ended, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut record.expiring)
                    .into_iter()
                    .partition(|e| e.grant.matches_revoke(pattern));
                record.expiring = kept;
                gone.extend(ended.into_iter().map(|e| e.grant));
                if gone.is_empty() {
                    return Err(HomeError::NotGranted {
                        plugin: plugin.to_string(),
                        grant: text.clone(),
                        granted: record.grants.iter().map(|g| g.to_string()).collect(),
                    });
                }
                removed.extend(gone);
            }
            Ok(removed)
        })
    }

    /// Overrides limits of `plugin` (`memory=64MiB`, `time=5s`, ...) and returns the effective
    /// limits.
    pub fn set_limits(&self, plugin: &str, specs: &[String]) -> Result<Limits, HomeError> {
        self.update(|lock| {
            let record = lock.plugin_mut(plugin)?;
            record.set_limits(specs.iter().map(String::as_str))?;
            record.limits()
        })
    }

    /// Uninstalls `plugin`: its record goes, and its component file too unless another
    /// installed plugin uses the same component.
    pub fn remove(&self, plugin: &str) -> Result<PluginRecord, HomeError> {
        let record = self.update(|lock| {
            lock.plugin(plugin)?;
            // Its values go with it, before its record: another plugin installed under the
            // name later is not given what was kept for this one.
            self.forget_config_values(plugin)?;
            Ok(lock.plugins.remove(plugin).expect("checked above"))
        })?;
        let _guard = HomeLock::exclusive(&self.root)?;
        let lock = LockFile::load(&self.lock_path())?;
        if !lock.plugins.values().any(|r| r.digest == record.digest) {
            for path in [
                self.component_path(&record.digest),
                self.tool_list_path(&record.digest),
            ] {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err("remove", &path)(e)),
                }
            }
            sync_dir(&self.root.join("components"))?;
        }
        Ok(record)
    }
}

impl Home {
    /// Parses and resolves grants given on the command line; a directory that overlaps
    /// Cordon's own state is refused.
    pub(crate) fn parse_grants(&self, grants: &[String]) -> Result<Vec<Grant>, HomeError> {
        grants
            .iter()
            .map(|g| {
                let grant = g.parse::<Grant>()?.resolve()?;
                match &grant {
                    Grant::Fs(fs) => self.reserved.check_dir(&fs.host)?,
                    Grant::Tcp(addr, _) => self.reserved.check_tcp(*addr)?,
                    Grant::Env(..) | Grant::Http(..) | Grant::Config(..) => {}
                }
                Ok(grant)
            })
            .collect()
    }
}

/// The grants of a record after adding `extra`, for callers that build records.
pub(crate) fn with_grants(mut grants: Grants, extra: &[Grant]) -> Grants {
    for g in extra {
        grants.add(g.clone());
    }
    grants
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names() {
        for ok in ["probe", "a", "my-tool_2"] {
            validate_plugin_name(ok).unwrap();
        }
        for bad in ["", "Probe", "1x", "a.b", "a/b", "..", &"x".repeat(65)] {
            assert!(validate_plugin_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn commands_on_a_missing_home_fail_without_creating_it() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("h"));
        assert!(matches!(
            home.grant("x", &["env:HOME".into()]),
            Err(HomeError::UnknownPlugin { .. })
        ));
        assert!(matches!(
            home.remove("x"),
            Err(HomeError::UnknownPlugin { .. })
        ));
        assert!(!home.root().exists());
        assert!(home.read().unwrap().plugins.is_empty());
    }
}
