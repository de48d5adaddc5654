//! The per-call policy of a configuration, loaded for the tools installed now.
//!
//! Loading compiles and validates every rule and runs its examples, which costs far more than a
//! decision, so the policies loaded last are kept and reused while neither the `[policy]` text,
//! the Cedar files it names, nor the installed tools change: a host that reloads its config
//! (or sees a plugin installed) gets a new policy on its next turn, and a broken one is
//! reported where it is loaded.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cordon_policy::{Policy, PolicyConfig, PolicyError};
use sha2::{Digest, Sha256};

use crate::tools::ToolSpec;

/// Loads `config`'s policy for `tools`, or the one loaded last for the same inputs.
pub fn load(config: &PolicyConfig, tools: &[ToolSpec]) -> Result<Arc<Policy>, PolicyError> {
    // The newest first. Several, because gateway clients that bring their own tools make a
    // tool set of their own each, and alternating between them must not reload every turn.
    static RECENT: Mutex<Vec<(String, Arc<Policy>)>> = Mutex::new(Vec::new());
    const KEPT: usize = 16;
    let facts: Vec<_> = tools.iter().map(ToolSpec::facts).collect();
    let key = key_of(config, &facts);
    {
        let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = recent.iter().position(|(k, _)| *k == key) {
            let hit = recent.remove(at);
            let policy = hit.1.clone();
            recent.insert(0, hit);
            return Ok(policy);
        }
    }
    let policy = Arc::new(Policy::load(config, &facts)?);
    {
        let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        recent.insert(0, (key, policy.clone()));
        recent.truncate(KEPT);
    }
    LAST_GOOD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(origin(config), policy.clone());
    Ok(policy)
}

/// As [`load`], but a policy that does not load gives the last one that did (with the error
/// logged), so a host whose config or tools changed under it keeps deciding as before; with
/// none loaded yet, the error, and every call is asked (see
/// [`crate::approval::broken_policy`]).
pub fn load_or_last(config: &PolicyConfig, tools: &[ToolSpec]) -> Result<Arc<Policy>, String> {
    match load(config, tools) {
        Ok(p) => Ok(p),
        Err(e) => {
            let last = LAST_GOOD
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&origin(config))
                .cloned();
            tracing::warn!(
                "the policy does not load ({e}); {}",
                if last.is_some() {
                    "keeping the last one that did"
                } else {
                    "every call is asked until it does"
                }
            );
            last.ok_or_else(|| e.to_string())
        }
    }
}

/// The last policy that loaded, by the config file it came from (a process may serve
/// several: tests, embedders).
static LAST_GOOD: Mutex<BTreeMap<PathBuf, Arc<Policy>>> = Mutex::new(BTreeMap::new());

/// The file a `[policy]` was read from (empty when it was not read from one).
fn origin(config: &PolicyConfig) -> PathBuf {
    config
        .source
        .as_ref()
        .map(|s| s.path.clone())
        .unwrap_or_default()
}

/// The `[policy]` as its config file says now: `config` itself while the file is as it was
/// read, else the file's new `[policy]`. A file that no longer parses keeps `config` (and is
/// reported once), so a half-saved edit never drops the rules in force.
pub fn reread(config: &PolicyConfig) -> Cow<'_, PolicyConfig> {
    static SEEN: Mutex<Option<(PathBuf, String, Option<PolicyConfig>)>> = Mutex::new(None);
    let Some(source) = &config.source else {
        return Cow::Borrowed(config);
    };
    // A file whose size, modification time and inode are those it had when its text was found
    // to be `source.text` is not read again: a policy of a thousand rules is a few hundred
    // kilobytes, which every call would otherwise read and compare. Its Cedar files are
    // stamped too: once one of them changed, the config is given back as new, so that its
    // policy is loaded again (from the cache of `load` while the files stay as they are).
    static UNCHANGED: Mutex<BTreeMap<PathBuf, Unchanged>> = Mutex::new(BTreeMap::new());
    let stamp = FileStamp::of(&source.path);
    let cedar = cedar_stamps(config, &source.path);
    if let Some(stamp) = &stamp {
        let unchanged = UNCHANGED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = unchanged.get(&source.path)
            && seen.stamp == *stamp
            && Arc::ptr_eq(&seen.text, &source.text)
        {
            return if seen.cedar == cedar {
                Cow::Borrowed(config)
            } else {
                Cow::Owned(config.clone())
            };
        }
    }
    let Ok(text) = std::fs::read_to_string(&source.path) else {
        return Cow::Borrowed(config);
    };
    if *text == *source.text {
        if let Some(stamp) = stamp {
            UNCHANGED.lock().unwrap_or_else(|e| e.into_inner()).insert(
                source.path.clone(),
                Unchanged {
                    stamp,
                    text: source.text.clone(),
                    cedar,
                },
            );
        }
        return Cow::Borrowed(config);
    }
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, t, parsed)) = seen.as_ref()
        && *p == source.path
        && *t == text
    {
        return parsed.clone().map_or(Cow::Borrowed(config), Cow::Owned);
    }
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        policy: PolicyConfig,
    }
    let parsed = match toml::from_str::<File>(&text) {
        Ok(f) => {
            let mut policy = f.policy;
            policy.source = Some(cordon_policy::ConfigSource {
                path: source.path.clone(),
                text: text.as_str().into(),
            });
            tracing::info!(
                "{} changed: using its [policy] as it is now",
                source.path.display()
            );
            Some(policy)
        }
        Err(e) => {
            tracing::warn!(
                "{} changed but does not parse ({e}); keeping the policy in force",
                source.path.display()
            );
            None
        }
    };
    *seen = Some((source.path.clone(), text, parsed.clone()));
    parsed.map_or(Cow::Borrowed(config), Cow::Owned)
}

/// A config file found unchanged: its stamp then, its text, and its Cedar files' stamps then.
struct Unchanged {
    stamp: FileStamp,
    text: Arc<str>,
    cedar: Vec<Option<FileStamp>>,
}

/// The stamps of the Cedar files `config` names (beside `path`, its file).
fn cedar_stamps(config: &PolicyConfig, path: &std::path::Path) -> Vec<Option<FileStamp>> {
    let dir = path.parent().unwrap_or(std::path::Path::new(""));
    config
        .files
        .iter()
        .map(|f| FileStamp::of(&dir.join(f)))
        .collect()
}

/// What says a file changed without reading it: its size, modification time and inode (an
/// editor that writes a new file and renames it over the old one changes the inode).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl FileStamp {
    fn of(path: &std::path::Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        })
    }
}

/// What a loaded policy depends on: the `[policy]` table with the text it was read from (for
/// line numbers), the Cedar files' contents and the tools' facts.
fn key_of(config: &PolicyConfig, facts: &[cordon_policy::ToolFacts]) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(config).unwrap_or_default());
    if let Some(source) = &config.source {
        h.update(source.path.to_string_lossy().as_bytes());
        h.update(source.text.as_bytes());
        let dir = source
            .path
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default();
        for file in &config.files {
            h.update(std::fs::read(dir.join(file)).unwrap_or_default());
        }
    }
    for f in facts {
        h.update(f.identity().as_bytes());
        h.update(f.input_schema.to_string().as_bytes());
        h.update(serde_json::to_vec(&f.reach).unwrap_or_default());
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentConfig;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec::from_descriptor(
            cordon_core::ToolDescriptor {
                name: name.into(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
                hints: Default::default(),
                output_schema: None,
            },
            "p",
            vec![],
            true,
        )
    }

    #[test]
    fn an_edited_policy_is_used_and_a_broken_edit_keeps_the_rules_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cordon.toml");
        let first = "[policy]\nrules = [{ id = \"a\", tool = \"p.t\", decision = \"deny\" }]\n";
        std::fs::write(&path, first).unwrap();
        let config = AgentConfig::load(&path, true).unwrap().policy;
        let tools = [tool("t")];
        assert!(matches!(reread(&config), Cow::Borrowed(_)));
        let loaded = load_or_last(&reread(&config), &tools).unwrap();
        assert_eq!(loaded.rules_for("p.t")[0].id, "a");

        // A good edit is used at once.
        std::fs::write(&path, first.replace("\"a\"", "\"b\"")).unwrap();
        let edited = reread(&config);
        assert!(matches!(edited, Cow::Owned(_)));
        let loaded = load_or_last(&edited, &tools).unwrap();
        assert_eq!(loaded.rules_for("p.t")[0].id, "b");

        // An edit that does not parse keeps the config as read.
        std::fs::write(&path, "[policy\nrules = ").unwrap();
        assert!(matches!(reread(&config), Cow::Borrowed(_)));

        // One that parses but does not load (a tool that is not installed) keeps the last
        // policy that loaded.
        std::fs::write(&path, first.replace("p.t", "p.gone")).unwrap();
        let broken = reread(&config);
        assert!(load(&broken, &tools).is_err());
        let kept = load_or_last(&broken, &tools).unwrap();
        assert_eq!(kept.rules_for("p.t")[0].id, "b");
    }
}
