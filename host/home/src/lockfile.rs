//! `plugins.toml`: what is installed, pinned by digest, and what each plugin may reach.

use std::collections::BTreeMap;
use std::path::Path;

use cordon_core::{Ceiling, CompiledPin, Grants, LimitKind, Limits, ToolEdits};
use serde::{Deserialize, Serialize};

use crate::error::HomeError;
use crate::expiring::ExpiringGrant;
use crate::fsutil::{atomic_write, io_err};

/// The lock file format version this build reads and writes.
pub const LOCK_VERSION: u32 = 1;

/// How many earlier manifests of one plugin the lock remembers: a tag moved back further than
/// this many versions is no longer recognised as a rollback.
pub const MAX_MANIFEST_HISTORY: usize = 64;

const HEADER: &str = "\
# Cordon lock and grants file. Cordon rewrites it atomically; edit with care.
# Each plugin is pinned by the sha256 digest of its component and the hash of its tool list;
# a component whose bytes or tools differ from what is recorded here is refused, and compiled
# code in the cache is used only if it matches the `compiled` record kept here.
# Grants are deny-by-default: a plugin reaches only what is listed under `grants`.

";

/// The parsed lock file: every installed plugin by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// Format version, so a future Cordon can migrate or refuse old files knowingly.
    pub version: u32,
    /// Installed plugins by name, sorted.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginRecord>,
}

/// One installed plugin as recorded at install time, plus the user's grants and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRecord {
    /// `sha256:<hex>` of the component; the file is `components/<hex>.wasm`.
    pub digest: String,
    /// Where it was installed from (absolute path or URL), for the user's information.
    pub source: String,
    /// When it was installed (RFC 3339, UTC).
    pub installed_at: String,
    /// The interfaces the component imports; its capability ceiling derives from these.
    pub imports: Vec<String>,
    /// The names of its tools, in the order the plugin lists them.
    pub tools: Vec<String>,
    /// `tools_hash` of the full tool list (names, descriptions, schemas, hints).
    pub tools_hash: String,
    /// What the plugin may reach. Empty means nothing.
    #[serde(default)]
    pub grants: Grants,
    /// Grants given for a while through grant requests, each with its end; a call applies
    /// only those not yet ended (see [`crate::expiring`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expiring: Vec<ExpiringGrant>,
    /// Limit overrides by key (`memory`, `time`, `output`, `args`, `log`); the rest default.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
    /// For a plugin from a registry, the digest of the manifest it was installed from: later
    /// starts use the stored component, and `plugin update` compares the tag against this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_manifest: Option<String>,
    /// Installed from a registry without a signature check, as the user asked with
    /// `--allow-unsigned`; `plugin list` shows it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsigned: bool,
    /// The trusted key whose signature was verified at install, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<SignedBy>,
    /// When the version installed was accepted without a signature (or came from a file), the
    /// key that signed the last version that was signed: a later version signed by another
    /// key is still a change of signer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_signer: Option<SignedBy>,
    /// The registry manifests this plugin had before the one installed, oldest first, at most
    /// [`MAX_MANIFEST_HISTORY`]: a tag moved back to one of them is a rollback, which
    /// `plugin update` refuses unless asked (`--allow-rollback`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_manifests: Vec<String>,
    /// The component's compiled code in the home's cache, as the host recorded it when it
    /// compiled it: the cache entry is loaded only if it still matches. Kept here, where only
    /// the host writes, because the compiled code runs natively in the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled: Option<CompiledPin>,
    /// What the installer wrote of its tools (descriptions, hints, hidden tools), applied
    /// over the component's own list each time its tools are listed.
    #[serde(default, skip_serializing_if = "ToolEdits::is_empty")]
    pub edits: ToolEdits,
}

/// Who signed an installed component: the trusted key's name then, and its fingerprint,
/// which stays meaningful if the name is later given to another key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedBy {
    /// The name the key was trusted under.
    pub key: String,
    /// `sha256:<hex>` of the key (see `cordon trust list`).
    pub fingerprint: String,
}

impl PluginRecord {
    /// The capability ceiling of the recorded imports; lets grant changes be checked without
    /// loading the component.
    pub fn ceiling(&self) -> Ceiling {
        Ceiling::from_imports(&self.imports)
    }

    /// The effective limits: defaults with this plugin's overrides applied.
    pub fn limits(&self) -> Result<Limits, HomeError> {
        let mut limits = Limits::default();
        for (key, value) in &self.limits {
            limits.apply(&format!("{key}={value}"))?;
        }
        Ok(limits)
    }

    /// The key that signed the latest signed version of this plugin, if any did: the one
    /// installed, or the one before it was replaced by a version without a signature.
    pub fn established_signer(&self) -> Option<&SignedBy> {
        self.signed_by.as_ref().or(self.previous_signer.as_ref())
    }

    /// If `manifest` is one this plugin had before the one installed, how many versions ago
    /// (1: the version just before).
    pub fn versions_back(&self, manifest: &str) -> Option<usize> {
        if self.oci_manifest.as_deref() == Some(manifest) {
            return None;
        }
        let at = self
            .previous_manifests
            .iter()
            .rposition(|m| m == manifest)?;
        Some(self.previous_manifests.len() - at)
    }

    /// The earlier manifests of the record that replaces this one with `manifest`: this one's
    /// joins them; a return to one of them (a rollback the user allowed) forgets the versions
    /// after it, so that following the tag forward again is not taken for another rollback.
    /// The oldest are forgotten past [`MAX_MANIFEST_HISTORY`].
    pub fn manifests_after(&self, manifest: Option<&str>) -> Vec<String> {
        let mut history = self.previous_manifests.clone();
        match manifest {
            Some(new) if self.versions_back(new).is_some() => {
                let at = history.iter().rposition(|m| m == new).expect("found above");
                history.truncate(at);
            }
            _ => {
                if let Some(current) = &self.oci_manifest
                    && manifest != Some(current.as_str())
                {
                    history.retain(|m| m != current);
                    history.push(current.clone());
                }
            }
        }
        let excess = history.len().saturating_sub(MAX_MANIFEST_HISTORY);
        history.drain(..excess);
        history
    }

    /// Applies `key=value` overrides, storing each in normalised form (`64MiB`, `5s`).
    pub fn set_limits<'a>(
        &mut self,
        specs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<LimitKind>, HomeError> {
        let mut limits = self.limits()?;
        let mut changed = Vec::new();
        for spec in specs {
            let kind = limits.apply(spec)?;
            self.limits
                .insert(kind.key().to_string(), limits.describe(kind));
            changed.push(kind);
        }
        Ok(changed)
    }
}

impl LockFile {
    /// Reads the lock file; a missing file is an empty home.
    pub fn load(path: &Path) -> Result<LockFile, HomeError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LockFile {
                    version: LOCK_VERSION,
                    plugins: BTreeMap::new(),
                });
            }
            Err(e) => return Err(io_err("read", path)(e)),
        };
        let lock: LockFile = toml::from_str(&text).map_err(|e| HomeError::CorruptLockFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if lock.version != LOCK_VERSION {
            return Err(HomeError::CorruptLockFile {
                path: path.to_path_buf(),
                reason: format!(
                    "it has format version {}, this Cordon reads version {LOCK_VERSION}",
                    lock.version
                ),
            });
        }
        for (name, record) in &lock.plugins {
            crate::validate_plugin_name(name).map_err(|e| HomeError::CorruptLockFile {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
            record.limits().map_err(|e| HomeError::CorruptLockFile {
                path: path.to_path_buf(),
                reason: format!("plugin `{name}`: {e}"),
            })?;
        }
        Ok(lock)
    }

    /// Writes the lock file atomically.
    pub fn save(&self, path: &Path) -> Result<(), HomeError> {
        let body = toml::to_string_pretty(self).map_err(|e| HomeError::CorruptLockFile {
            path: path.to_path_buf(),
            reason: format!("could not serialise the lock file: {e}"),
        })?;
        atomic_write(path, format!("{HEADER}{body}").as_bytes())
    }

    /// The record of `name`, or an error listing what is installed.
    pub fn plugin(&self, name: &str) -> Result<&PluginRecord, HomeError> {
        self.plugins
            .get(name)
            .ok_or_else(|| self.unknown_plugin(name))
    }

    /// Mutable access to the record of `name`, or an error listing what is installed.
    pub fn plugin_mut(&mut self, name: &str) -> Result<&mut PluginRecord, HomeError> {
        if !self.plugins.contains_key(name) {
            return Err(self.unknown_plugin(name));
        }
        Ok(self.plugins.get_mut(name).expect("checked above"))
    }

    fn unknown_plugin(&self, name: &str) -> HomeError {
        HomeError::UnknownPlugin {
            name: name.to_string(),
            installed: self.plugins.keys().cloned().collect(),
        }
    }

    /// Resolves a tool name to `(plugin, tool)` from the recorded tool names: a bare name
    /// that exactly one plugin offers, or `plugin.tool`.
    pub fn resolve_tool(&self, name: &str) -> Result<(String, String), HomeError> {
        if let Some((plugin, tool)) = name.split_once('.')
            && let Some(record) = self.plugins.get(plugin)
            && record.tools.iter().any(|t| t == tool)
        {
            return Ok((plugin.to_string(), tool.to_string()));
        }
        let owners: Vec<&String> = self
            .plugins
            .iter()
            .filter(|(_, r)| r.tools.iter().any(|t| t == name))
            .map(|(p, _)| p)
            .collect();
        match owners.as_slice() {
            [one] => Ok(((*one).clone(), name.to_string())),
            [] => Err(HomeError::UnknownTool {
                name: name.to_string(),
                available: self.callable_names(),
            }),
            many => Err(HomeError::AmbiguousTool {
                name: name.to_string(),
                candidates: many.iter().map(|p| format!("{p}.{name}")).collect(),
            }),
        }
    }

    /// How many installed plugins offer a tool with this bare name.
    pub fn owners_of(&self, tool: &str) -> Vec<String> {
        self.plugins
            .iter()
            .filter(|(_, r)| r.tools.iter().any(|t| t == tool))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Every name a tool can be called by: the bare name when unique, else `plugin.tool`.
    pub fn callable_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (plugin, record) in &self.plugins {
            for tool in &record.tools {
                if self.owners_of(tool).len() == 1 {
                    names.push(tool.clone());
                } else {
                    names.push(format!("{plugin}.{tool}"));
                }
            }
        }
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tools: &[&str]) -> PluginRecord {
        PluginRecord {
            digest: format!("sha256:{}", "a".repeat(64)),
            source: "/x.wasm".into(),
            installed_at: "2026-01-01T00:00:00Z".into(),
            imports: vec!["wasi:filesystem/types@0.2.6".into()],
            tools: tools.iter().map(|s| s.to_string()).collect(),
            tools_hash: "sha256:00".into(),
            grants: Grants::new(),
            expiring: Vec::new(),
            limits: BTreeMap::new(),
            oci_manifest: None,
            unsigned: false,
            signed_by: None,
            previous_signer: None,
            previous_manifests: Vec::new(),
            compiled: None,
            edits: ToolEdits::default(),
        }
    }

    #[test]
    fn round_trips_through_toml_with_grants_and_limits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugins.toml");
        let mut lock = LockFile {
            version: LOCK_VERSION,
            ..Default::default()
        };
        let mut rec = record(&["read"]);
        rec.grants.add("env:HOME".parse().unwrap());
        rec.set_limits(["memory=64MiB", "time=5s"]).unwrap();
        lock.plugins.insert("probe".into(), rec);
        lock.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Cordon lock"), "{text}");
        assert!(text.contains("memory = \"64MiB\""), "{text}");
        let back = LockFile::load(&path).unwrap();
        assert_eq!(back, lock);
        let limits = back.plugins["probe"].limits().unwrap();
        assert_eq!(limits.memory, 64 * 1024 * 1024);
        assert_eq!(limits.time, std::time::Duration::from_secs(5));
    }

    #[test]
    fn missing_file_is_empty_and_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugins.toml");
        assert!(LockFile::load(&path).unwrap().plugins.is_empty());
        std::fs::write(&path, "version = 1\n[plugins.x]\ndigest = 3\n").unwrap();
        let err = LockFile::load(&path).unwrap_err();
        assert!(matches!(err, HomeError::CorruptLockFile { .. }), "{err}");
        std::fs::write(&path, "version = 99\n").unwrap();
        assert!(
            LockFile::load(&path)
                .unwrap_err()
                .to_string()
                .contains("version 99")
        );
    }

    fn manifest(n: u32) -> String {
        format!("sha256:{n:064x}")
    }

    /// The record after installing the manifests `ids` in turn.
    fn installed(ids: &[u32]) -> PluginRecord {
        let mut rec = record(&["read"]);
        for &id in ids {
            rec.previous_manifests = rec.manifests_after(Some(&manifest(id)));
            rec.oci_manifest = Some(manifest(id));
        }
        rec
    }

    #[test]
    fn the_manifests_a_plugin_had_are_remembered_and_a_return_to_one_is_a_rollback() {
        let rec = installed(&[1, 2, 3]);
        assert_eq!(rec.previous_manifests, [manifest(1), manifest(2)]);
        assert_eq!(rec.versions_back(&manifest(2)), Some(1));
        assert_eq!(rec.versions_back(&manifest(1)), Some(2));
        assert_eq!(rec.versions_back(&manifest(3)), None, "the one installed");
        assert_eq!(rec.versions_back(&manifest(4)), None, "a new one");
        // Reinstalling the same manifest changes nothing.
        assert_eq!(
            rec.manifests_after(Some(&manifest(3))),
            rec.previous_manifests
        );
        // Going back to 1 (allowed) forgets 2 and 3: the tag moving forward to them again is
        // not another rollback, and going back to 1 again from there is one.
        let back = installed(&[1, 2, 3, 1]);
        assert!(back.previous_manifests.is_empty(), "{back:?}");
        assert_eq!(back.versions_back(&manifest(3)), None);
        let forward = installed(&[1, 2, 3, 1, 3]);
        assert_eq!(forward.versions_back(&manifest(1)), Some(1));
        // A file installed over it keeps what came before.
        let mut file = installed(&[1, 2]);
        file.previous_manifests = file.manifests_after(None);
        file.oci_manifest = None;
        assert_eq!(file.versions_back(&manifest(1)), Some(2));
        assert_eq!(file.versions_back(&manifest(2)), Some(1));
    }

    #[test]
    fn the_history_is_bounded_to_the_latest_manifests() {
        let ids: Vec<u32> = (0..(MAX_MANIFEST_HISTORY as u32 + 10)).collect();
        let rec = installed(&ids);
        assert_eq!(rec.previous_manifests.len(), MAX_MANIFEST_HISTORY);
        let last = *ids.last().unwrap();
        assert_eq!(rec.versions_back(&manifest(last - 1)), Some(1));
        assert_eq!(
            rec.versions_back(&manifest(last - MAX_MANIFEST_HISTORY as u32)),
            Some(MAX_MANIFEST_HISTORY)
        );
        assert_eq!(rec.versions_back(&manifest(0)), None, "forgotten");
    }

    #[test]
    fn a_lock_written_before_the_history_existed_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugins.toml");
        let old = format!(
            r#"version = 1

[plugins.greeter]
digest = "sha256:{a}"
source = "oci://127.0.0.1:5000/plugins/greeter:1"
installed_at = "2026-01-01T00:00:00Z"
imports = []
tools = ["greet"]
tools_hash = "sha256:00"
oci_manifest = "{m}"

[plugins.greeter.signed_by]
key = "alice"
fingerprint = "sha256:ff"
"#,
            a = "a".repeat(64),
            m = manifest(1)
        );
        std::fs::write(&path, old).unwrap();
        let lock = LockFile::load(&path).unwrap();
        let rec = &lock.plugins["greeter"];
        assert!(rec.previous_manifests.is_empty());
        assert_eq!(rec.previous_signer, None);
        assert_eq!(rec.established_signer().unwrap().key, "alice");
        // And what is new round-trips.
        let mut lock = lock;
        let rec = lock.plugin_mut("greeter").unwrap();
        rec.previous_manifests = rec.manifests_after(Some(&manifest(2)));
        rec.oci_manifest = Some(manifest(2));
        rec.previous_signer = rec.signed_by.take();
        lock.save(&path).unwrap();
        let back = LockFile::load(&path).unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.plugins["greeter"].versions_back(&manifest(1)), Some(1));
        assert_eq!(
            back.plugins["greeter"].established_signer().unwrap().key,
            "alice"
        );
    }

    #[test]
    fn resolves_unique_qualified_and_ambiguous_names() {
        let mut lock = LockFile::default();
        lock.plugins.insert("a".into(), record(&["read", "only_a"]));
        lock.plugins.insert("b".into(), record(&["read"]));
        assert_eq!(
            lock.resolve_tool("only_a").unwrap(),
            ("a".to_string(), "only_a".to_string())
        );
        assert_eq!(
            lock.resolve_tool("b.read").unwrap(),
            ("b".to_string(), "read".to_string())
        );
        match lock.resolve_tool("read").unwrap_err() {
            HomeError::AmbiguousTool { candidates, .. } => {
                assert_eq!(candidates, vec!["a.read", "b.read"])
            }
            other => panic!("unexpected {other}"),
        }
        match lock.resolve_tool("nope").unwrap_err() {
            HomeError::UnknownTool { available, .. } => {
                assert_eq!(available, vec!["a.read", "b.read", "only_a"])
            }
            other => panic!("unexpected {other}"),
        }
    }
}
