//! The values plugins read through `wasi:config/store`, kept in the home (`config-values.toml`,
//! readable only by its owner, out of reach of every grant) and set with `cordon plugin config`.
//!
//! A value is only ever given to a call of its own plugin, and only for a key that plugin is
//! granted (`config:KEY`); what is kept here is never written to the lock file, shown, or
//! taken from the environment. Values are read when a call starts, so a value set while
//! `cordon serve` runs applies to the next call.

use std::collections::BTreeMap;
use std::path::Path;

use cordon_core::Grant;

use crate::Home;
use crate::error::HomeError;
use crate::fsutil::{HomeLock, atomic_write, io_err};
use crate::lockfile::LockFile;

/// Longest value kept: configuration, not data.
pub const MAX_CONFIG_VALUE_BYTES: usize = 64 << 10;

/// Every plugin's values: plugin → key → value.
type AllValues = BTreeMap<String, BTreeMap<String, String>>;

/// Largest `config-values.toml` read: many plugins' values, far below what would matter to hold.
const MAX_VALUES_FILE_BYTES: u64 = 16 << 20;

fn load(path: &Path) -> Result<AllValues, HomeError> {
    let bad = |reason: String| HomeError::BadConfigValues {
        path: path.to_path_buf(),
        reason,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(AllValues::new()),
        Err(e) => return Err(io_err("read", path)(e)),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_VALUES_FILE_BYTES + 1),
        &mut text,
    )
    .map_err(|e| bad(format!("it is not UTF-8 text ({})", e.kind())))?;
    if text.len() as u64 > MAX_VALUES_FILE_BYTES {
        return Err(bad(format!(
            "it is longer than the {MAX_VALUES_FILE_BYTES} bytes read"
        )));
    }
    // The parser's own message quotes the line it stopped at, which holds a secret: only
    // where, and what was expected, are said.
    toml::from_str(&text).map_err(|e: toml::de::Error| {
        let at = e.span().map_or(String::new(), |span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: ")
        });
        let what = e.message().lines().next().unwrap_or("").to_string();
        bad(format!("{at}{what}"))
    })
}

/// Refuses a key no grant can name exactly (marks, spaces, `/`): every key kept is one a
/// `config:KEY` grant can give.
pub fn check_config_key(key: &str) -> Result<(), HomeError> {
    if cordon_core::valid_config_key(key) {
        return Ok(());
    }
    Err(HomeError::BadConfigValue {
        key: key.to_string(),
        reason: format!(
            "it is not a configuration key (1 to {} letters, digits, `_`, `-` and `.`)",
            cordon_core::MAX_CONFIG_KEY_BYTES
        ),
    })
}

/// The values kept for `plugin` (all keys, granted or not: the sandbox passes on only the
/// granted ones).
pub(crate) fn values_of(path: &Path, plugin: &str) -> Result<BTreeMap<String, String>, HomeError> {
    Ok(load(path)?.remove(plugin).unwrap_or_default())
}

impl Home {
    /// Where the values are kept.
    pub fn config_values_path(&self) -> std::path::PathBuf {
        self.root.join("config-values.toml")
    }

    /// Sets (or, with `None`, removes) the value of `key` for the installed `plugin`. Returns
    /// whether the plugin is granted the key, so the caller can say a grant is still needed.
    pub fn set_config_value(
        &self,
        plugin: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<bool, HomeError> {
        check_config_key(key)?;
        let grant = Grant::Config(key.to_string(), Default::default());
        if let Some(v) = value
            && v.len() > MAX_CONFIG_VALUE_BYTES
        {
            return Err(HomeError::BadConfigValue {
                key: key.to_string(),
                reason: format!(
                    "it is {} bytes long, more than the {MAX_CONFIG_VALUE_BYTES} kept",
                    v.len()
                ),
            });
        }
        self.read()?.plugin(plugin)?;
        let _guard = HomeLock::exclusive(&self.root)?;
        let record = LockFile::load(&self.lock_path())?.plugin(plugin)?.clone();
        let path = self.config_values_path();
        let mut all = load(&path)?;
        let values = all.entry(plugin.to_string()).or_default();
        match value {
            Some(v) => {
                values.insert(key.to_string(), v.to_string());
            }
            None => {
                if values.remove(key).is_none() {
                    return Err(HomeError::BadConfigValue {
                        key: key.to_string(),
                        reason: format!("plugin `{plugin}` has no value for it"),
                    });
                }
            }
        }
        all.retain(|_, v| !v.is_empty());
        write(&path, &all)?;
        Ok(record.grants.iter().any(|g| g.same_access(&grant)))
    }

    /// Whether the values file can be read (it may have been broken by hand); the error says
    /// where, never what the line holds.
    pub fn check_config_values(&self) -> Result<(), HomeError> {
        load(&self.config_values_path()).map(|_| ())
    }

    /// The keys that have a value for `plugin` (never the values).
    pub fn config_keys(&self, plugin: &str) -> Result<Vec<String>, HomeError> {
        Ok(values_of(&self.config_values_path(), plugin)?
            .into_keys()
            .collect())
    }

    /// Forgets every value of `plugin` (when it is removed, or a plugin is first installed
    /// under its name). The caller holds the home's exclusive lock.
    pub(crate) fn forget_config_values(&self, plugin: &str) -> Result<(), HomeError> {
        let path = self.config_values_path();
        let mut all = load(&path)?;
        if all.remove(plugin).is_some() {
            write(&path, &all)?;
        }
        Ok(())
    }
}

fn write(path: &Path, all: &AllValues) -> Result<(), HomeError> {
    let text = toml::to_string(all).map_err(|e| HomeError::BadConfigValues {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let header = "# Values plugins read through wasi:config/store; set with `cordon plugin config`.\n\
                  # Only a plugin granted a key (config:KEY) is given its value.\n\n";
    // Written through a temporary file, which is created readable by its owner only.
    atomic_write(path, format!("{header}{text}").as_bytes())
}
