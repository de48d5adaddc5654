//! The per-call policy of a configuration, loaded for the tools installed now.
//!
//! Loading compiles and validates every rule and runs its examples, which costs far more than a
//! decision, so the policies loaded last are kept and reused while neither the `[policy]` text,
//! the Cedar files it names, nor the installed tools change: a host that reloads its config
//! (or sees a plugin installed) gets a new policy on its next turn, and a broken one is
//! reported where it is loaded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cordon_policy::{Policy, PolicyConfig, PolicyError};
use sha2::{Digest, Sha256};

use crate::tools::ToolSpec;

mod watch;
use watch::Since;

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

/// The `[policy]` as its config file says now (see [`reread`]).
#[derive(Debug)]
pub enum Reread<'a> {
    /// The config as it was read.
    Unchanged(&'a PolicyConfig),
    /// The file's `[policy]` as it is now, or the config as read once a Cedar file it names
    /// changed (so that its policy is loaded again). The same `Arc` is given while none of
    /// the files changes, so a caller may keep what it made of it by the `Arc`'s address.
    Changed(Arc<PolicyConfig>),
}

impl std::ops::Deref for Reread<'_> {
    type Target = PolicyConfig;
    fn deref(&self) -> &PolicyConfig {
        match self {
            Reread::Unchanged(c) => c,
            Reread::Changed(c) => c,
        }
    }
}

/// The `[policy]` as its config file says now: `config` itself while the file is as it was
/// read, else the file's new `[policy]`. A file that no longer parses keeps `config` (and is
/// reported once), so a half-saved edit never drops the rules in force.
///
/// Called on every tool call: while a [`watch::Watch`] on the files says they are as the
/// last check found them, the answer of that check is given again without touching them.
pub fn reread(config: &PolicyConfig) -> Reread<'_> {
    /// The last answer for a config, with the watch that says whether it still stands.
    struct Gate {
        path: PathBuf,
        text: Arc<str>,
        files: Vec<String>,
        watch: Option<watch::Watch>,
        answer: Answer,
    }
    // Newest first; a process reads one config, tests and embedders a few.
    static GATES: Mutex<Vec<Gate>> = Mutex::new(Vec::new());
    const KEPT: usize = 8;
    let Some(source) = &config.source else {
        return Reread::Unchanged(config);
    };
    let same = |g: &Gate| {
        g.path == source.path && Arc::ptr_eq(&g.text, &source.text) && g.files == config.files
    };
    let (since, before, last) = {
        let mut gates = GATES.lock().unwrap_or_else(|e| e.into_inner());
        match gates.iter_mut().find(|g| same(g)) {
            Some(g) => {
                let since = g.watch.as_mut().map_or(Since::Due, watch::Watch::since);
                if since == Since::Nothing {
                    return match &g.answer {
                        None => Reread::Unchanged(config),
                        Some((a, _)) => Reread::Changed(a.clone()),
                    };
                }
                // The last answer is given again only after a quiet second under a watch:
                // without one, an edit the stamps cannot tell would keep it for good.
                let reusable = since == Since::Due && g.watch.is_some();
                let last = g.answer.clone();
                (since, last.clone().filter(|_| reusable), last)
            }
            None => (Since::Due, None, None),
        }
    };
    // The config's files and those of the last answer: an edit may name other Cedar files.
    let files_of = |c: &PolicyConfig| cedar_paths(c, &source.path);
    let mut files = vec![source.path.clone()];
    for f in files_of(config)
        .into_iter()
        .chain(last.iter().flat_map(|(a, _)| files_of(a)))
    {
        if !files.contains(&f) {
            files.push(f);
        }
    }
    // Made before the check, so that an edit during it is seen at the next call.
    let mut watch = watch::Watch::new(&files);
    let answer = check(config, source, since, before);
    // An answer naming a file not watched: the next call checks again, watching it first.
    if let Some((a, _)) = &answer
        && files_of(a).iter().any(|f| !files.contains(f))
    {
        watch = None;
    }
    let mut gates = GATES.lock().unwrap_or_else(|e| e.into_inner());
    gates.retain(|g| !same(g));
    gates.insert(
        0,
        Gate {
            path: source.path.clone(),
            text: source.text.clone(),
            files: config.files.clone(),
            watch,
            answer: answer.clone(),
        },
    );
    gates.truncate(KEPT);
    match answer {
        None => Reread::Unchanged(config),
        Some((a, _)) => Reread::Changed(a),
    }
}

/// What [`check`] found: `None` while the config is as read, else the config to use instead
/// with its Cedar files' stamps when it was made.
type Answer = Option<(Arc<PolicyConfig>, Vec<Option<FileStamp>>)>;

/// What the files say of `config` now. After a `Change` seen by the watch, the config file is
/// read and a config with Cedar files is given as new, for its policy to be looked up again by
/// their content: the stamps may not tell an edit within the filesystem's clock tick. Else
/// the files are read only when their stamps changed, and `before` is given again while its
/// config and Cedar stamps are the same, so that its `Arc` stands for the same inputs.
fn check(
    config: &PolicyConfig,
    source: &cordon_policy::ConfigSource,
    since: Since,
    before: Answer,
) -> Answer {
    // The last `[policy]` parsed from a changed file, by the file and its text.
    static SEEN: Mutex<Option<(PathBuf, String, Option<PolicyConfig>)>> = Mutex::new(None);
    // A file whose size, modification time and inode are those it had when its text was found
    // to be `source.text` is not read again: a policy of a thousand rules is a few hundred
    // kilobytes. Its Cedar files are stamped too: once one of them changed, the config is
    // given back as new, so that its policy is loaded again (from the cache of `load` while
    // the files stay as they are).
    static UNCHANGED: Mutex<BTreeMap<PathBuf, Unchanged>> = Mutex::new(BTreeMap::new());
    let changed = since == Since::Change;
    let answer = |now: PolicyConfig| {
        let stamps = cedar_stamps(&now, &source.path);
        match before {
            Some((b, then)) if !changed && b.source == now.source && then == stamps => {
                Some((b, then))
            }
            _ => Some((Arc::new(now), stamps)),
        }
    };
    let stamp = FileStamp::of(&source.path);
    let cedar = cedar_stamps(config, &source.path);
    if let (Some(stamp), false) = (&stamp, changed) {
        let unchanged = UNCHANGED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = unchanged.get(&source.path)
            && seen.stamp == *stamp
            && Arc::ptr_eq(&seen.text, &source.text)
        {
            return if seen.cedar == cedar {
                None
            } else {
                answer(config.clone())
            };
        }
    }
    let Ok(text) = std::fs::read_to_string(&source.path) else {
        return None;
    };
    if *text == *source.text {
        if let Some(stamp) = stamp {
            let mut unchanged = UNCHANGED.lock().unwrap_or_else(|e| e.into_inner());
            // Stamps of the Cedar files as the config was first found: an edit of one since
            // is a change however often the config file is found unchanged.
            let first = unchanged
                .get(&source.path)
                .filter(|u| Arc::ptr_eq(&u.text, &source.text))
                .map_or(cedar, |u| u.cedar.clone());
            unchanged.insert(
                source.path.clone(),
                Unchanged {
                    stamp,
                    text: source.text.clone(),
                    cedar: first,
                },
            );
        }
        return if changed && !config.files.is_empty() {
            answer(config.clone())
        } else {
            None
        };
    }
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, t, parsed)) = seen.as_ref()
        && *p == source.path
        && *t == text
    {
        return parsed.clone().and_then(answer);
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
    parsed.and_then(answer)
}

/// A config file found unchanged: its stamp then, its text, and its Cedar files' stamps then.
struct Unchanged {
    stamp: FileStamp,
    text: Arc<str>,
    cedar: Vec<Option<FileStamp>>,
}

/// The stamps of the Cedar files `config` names (beside `path`, its file).
fn cedar_stamps(config: &PolicyConfig, path: &std::path::Path) -> Vec<Option<FileStamp>> {
    cedar_paths(config, path)
        .iter()
        .map(|f| FileStamp::of(f))
        .collect()
}

/// The Cedar files `config` names, beside `path` (its file).
fn cedar_paths(config: &PolicyConfig, path: &std::path::Path) -> Vec<PathBuf> {
    let dir = path.parent().unwrap_or(std::path::Path::new(""));
    config.files.iter().map(|f| dir.join(f)).collect()
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
        assert!(matches!(reread(&config), Reread::Unchanged(_)));
        let loaded = load_or_last(&reread(&config), &tools).unwrap();
        assert_eq!(loaded.rules_for("p.t")[0].id, "a");

        // A good edit is used at once.
        std::fs::write(&path, first.replace("\"a\"", "\"b\"")).unwrap();
        let edited = reread(&config);
        assert!(matches!(edited, Reread::Changed(_)));
        let loaded = load_or_last(&edited, &tools).unwrap();
        assert_eq!(loaded.rules_for("p.t")[0].id, "b");

        // An edit that does not parse keeps the config as read.
        std::fs::write(&path, "[policy\nrules = ").unwrap();
        assert!(matches!(reread(&config), Reread::Unchanged(_)));

        // One that parses but does not load (a tool that is not installed) keeps the last
        // policy that loaded.
        std::fs::write(&path, first.replace("p.t", "p.gone")).unwrap();
        let broken = reread(&config);
        assert!(load(&broken, &tools).is_err());
        let kept = load_or_last(&broken, &tools).unwrap();
        assert_eq!(kept.rules_for("p.t")[0].id, "b");
    }

    #[test]
    fn an_edit_is_one_config_until_one_of_its_files_changes_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cordon.toml");
        let cedar = dir.path().join("rules.cedar");
        let forbid = |id: &str| {
            format!("@id(\"{id}\")\nforbid(principal, action == Action::\"p.t\", resource);\n")
        };
        std::fs::write(&cedar, forbid("c1")).unwrap();
        let first = "[policy]\nfiles = [\"rules.cedar\"]\nrules = [{ id = \"a\", tool = \"p.t\", decision = \"ask\" }]\n";
        std::fs::write(&path, first).unwrap();
        let config = AgentConfig::load(&path, true).unwrap().policy;
        let tools = [tool("t")];
        assert!(matches!(reread(&config), Reread::Unchanged(_)));

        std::fs::write(&path, first.replace("\"a\"", "\"b\"")).unwrap();
        let Reread::Changed(edited) = reread(&config) else {
            panic!("the edit is not seen")
        };
        // The same config while nothing changes, so that callers may keep what they made of it.
        let Reread::Changed(again) = reread(&config) else {
            panic!("the edit is forgotten")
        };
        assert!(Arc::ptr_eq(&edited, &again));
        let ids = |c: &PolicyConfig| {
            let p = load(c, &tools).unwrap();
            p.rules_for("p.t")
                .iter()
                .map(|r| r.id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&edited), ["b", "c1"]);

        // The Cedar file edited (same length, so the config's stamp alone cannot tell): a new
        // config, whose policy reads the new file.
        std::fs::write(&cedar, forbid("c2")).unwrap();
        let Reread::Changed(cedar_edited) = reread(&config) else {
            panic!("the Cedar edit is not seen")
        };
        assert!(!Arc::ptr_eq(&edited, &cedar_edited));
        assert_eq!(ids(&cedar_edited), ["b", "c2"]);

        // An edit naming another Cedar file: that file is watched from then on.
        let other = dir.path().join("other.cedar");
        std::fs::write(&other, forbid("o1")).unwrap();
        std::fs::write(
            &path,
            first
                .replace("\"a\"", "\"b\"")
                .replace("rules.cedar", "other.cedar"),
        )
        .unwrap();
        let Reread::Changed(renamed) = reread(&config) else {
            panic!("the edit is not seen")
        };
        assert_eq!(ids(&renamed), ["b", "o1"]);
        let _ = reread(&config);
        std::fs::write(&other, forbid("o2")).unwrap();
        let Reread::Changed(other_edited) = reread(&config) else {
            panic!("the edit is forgotten")
        };
        // A new config, so that what a caller made of the last one is not used again.
        assert!(!Arc::ptr_eq(&renamed, &other_edited));
        assert_eq!(ids(&other_edited), ["b", "o2"]);
    }
}
