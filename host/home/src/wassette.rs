//! A Wassette `policy.yaml` (the policy-mcp format, version 1.x) translated into Cordon grants
//! and limits, so moving a component from Wassette is one command (`cordon plugin install
//! COMPONENT --policy policy.yaml`). The translation is shown before anything is recorded.
//!
//! Cordon's grants are narrower than the format in places, and a translation never grants
//! more than the policy says. In order:
//! 1. What cannot be granted as narrowly as written is refused, naming the entry: a storage
//!    `deny` inside or above an allowed directory (links resolved), `write` without `read`, a
//!    host pattern (`*.example.com`), a host both allowed and denied, a CIDR range, the
//!    `defaults` host list, a file rather than a directory. So is anything that would carry a
//!    mark (`:public`, `:trusted`): only a person marks a grant.
//! 2. Each storage `allow` becomes a directory grant at the same path (`read` → `ro`, any
//!    `write` → `rw`); a trailing `/**` or `/*` names the directory itself; a relative URI is
//!    taken from the policy file's directory.
//! 3. Each network host becomes `net:https://HOST`: Cordon grants origins, and plain HTTP is
//!    not granted unless asked for separately.
//! 4. Each environment key becomes `config:KEY` for a component that imports
//!    `wasi:config/store` (it was built to read its settings there; the environment import of
//!    Rust and JavaScript components comes with their runtimes), its value then set with
//!    `cordon plugin config` and never taken from the environment; else `env:KEY` for one that
//!    reads its environment; else nothing.
//! 5. `resources.memory` (MB) becomes the memory limit. What has no Cordon meaning (CPU and IO
//!    shares, `runtime`, `ipc`, deny entries outside every allowed directory, which deny by
//!    default already covers) is listed as not translated.

use std::path::{Path, PathBuf};

use cordon_core::{Capability, Ceiling};
use serde::Deserialize;

use crate::error::HomeError;

/// Largest policy file read.
const MAX_POLICY_BYTES: u64 = 256 << 10;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    version: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(rename = "$schema", default)]
    #[allow(dead_code)]
    schema: Option<String>,
    permissions: Permissions,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Permissions {
    #[serde(default)]
    storage: Option<Lists<Storage>>,
    #[serde(default)]
    network: Option<Lists<Network>>,
    #[serde(default)]
    environment: Option<Lists<Environment>>,
    #[serde(default)]
    resources: Option<Resources>,
    #[serde(default)]
    runtime: Option<serde_json::Value>,
    #[serde(default)]
    ipc: Option<serde_json::Value>,
}

/// An `allow` and a `deny` list, either of which may be absent or `null`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lists<T> {
    #[serde(default = "Option::default")]
    allow: Option<Vec<T>>,
    #[serde(default = "Option::default")]
    deny: Option<Vec<T>>,
}

impl<T> Lists<T> {
    fn allowed(&self) -> &[T] {
        self.allow.as_deref().unwrap_or_default()
    }

    fn denied(&self) -> &[T] {
        self.deny.as_deref().unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Storage {
    uri: String,
    access: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Network {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    cidr: Option<String>,
    #[serde(default)]
    defaults: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Environment {
    key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resources {
    #[serde(default)]
    cpu: Option<f64>,
    #[serde(default)]
    memory: Option<u64>,
    #[serde(default)]
    io: Option<u64>,
}

/// A Wassette policy read from a file, to be translated once the component's imports are known.
#[derive(Debug)]
pub struct WassettePolicy {
    path: PathBuf,
    policy: PolicyFile,
}

/// What a policy became: one line per entry translated, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translation {
    /// The policy file.
    pub path: PathBuf,
    /// `(entry as written, grant or limit it became)`.
    pub translated: Vec<(String, String)>,
    /// Grants, in Cordon's syntax.
    pub grants: Vec<String>,
    /// Limits (`memory=512MB`).
    pub limits: Vec<String>,
    /// Entries with no Cordon meaning, each with why.
    pub left_out: Vec<String>,
}

impl WassettePolicy {
    /// Reads and parses `path`; a file that is not a 1.x policy is refused with what is wrong.
    pub fn read(path: &Path) -> Result<WassettePolicy, HomeError> {
        let bad = |reason: String| HomeError::WassettePolicy {
            path: path.to_path_buf(),
            reason,
        };
        // Relative storage URIs are taken from the policy's directory: name it in full.
        let path =
            &std::fs::canonicalize(path).map_err(|e| bad(format!("it cannot be read ({e})")))?;
        let meta = std::fs::metadata(path).map_err(|e| bad(format!("it cannot be read ({e})")))?;
        if meta.len() > MAX_POLICY_BYTES {
            return Err(bad(format!(
                "it is {} bytes long, more than the {MAX_POLICY_BYTES} accepted",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("it cannot be read as UTF-8 text ({e})")))?;
        let policy: PolicyFile = serde_saphyr::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if !policy.version.starts_with("1.") && policy.version != "1" {
            return Err(bad(format!(
                "its version is `{}`; Cordon reads version 1.x policies",
                policy.version
            )));
        }
        Ok(WassettePolicy {
            path: path.to_path_buf(),
            policy,
        })
    }

    /// The grants and limits the policy gives a component of `ceiling` (see the module doc).
    pub fn translate(&self, ceiling: &Ceiling) -> Result<Translation, HomeError> {
        let bad = |reason: String| HomeError::WassettePolicy {
            path: self.path.clone(),
            reason,
        };
        let base = self.path.parent().unwrap_or(Path::new("."));
        let mut t = Translation {
            path: self.path.clone(),
            ..Translation::default()
        };
        let p = &self.policy.permissions;
        let mut allowed_dirs = Vec::new();
        if let Some(storage) = &p.storage {
            for entry in storage.allowed() {
                let dir = storage_dir(&entry.uri, base).map_err(&bad)?;
                let read = entry.access.iter().any(|a| a == "read");
                let write = entry.access.iter().any(|a| a == "write");
                if let Some(other) = entry.access.iter().find(|a| *a != "read" && *a != "write") {
                    return Err(bad(format!(
                        "storage `{}` has access `{other}`; only `read` and `write` exist",
                        entry.uri
                    )));
                }
                if !read {
                    return Err(bad(format!(
                        "storage `{}` does not allow `read`; Cordon cannot grant a directory \
                         without reading it, so it would grant more than the policy says",
                        entry.uri
                    )));
                }
                let meta = std::fs::metadata(&dir);
                if meta.as_ref().is_ok_and(|m| !m.is_dir()) {
                    return Err(bad(format!(
                        "storage `{}` is a file; Cordon grants directories, so grant the \
                         directory that holds it (a narrower one if it holds more)",
                        entry.uri
                    )));
                }
                let shown = dir.display();
                let grant = format!("fs:{shown}:{shown}:{}", if write { "rw" } else { "ro" });
                t.translated.push((
                    format!("storage {} [{}]", entry.uri, entry.access.join(", ")),
                    grant.clone(),
                ));
                t.grants.push(grant);
                allowed_dirs.push(resolved(&dir));
            }
            for entry in storage.denied() {
                let dir = resolved(&storage_dir(&entry.uri, base).map_err(&bad)?);
                if allowed_dirs
                    .iter()
                    .any(|a| dir.starts_with(a) || a.starts_with(&dir))
                {
                    return Err(bad(format!(
                        "storage deny `{}` lies inside or above a directory it allows; Cordon \
                         grants whole directories, so allow narrower ones instead",
                        entry.uri
                    )));
                }
                t.left_out.push(format!(
                    "storage deny {}: nothing outside the grants is reachable anyway",
                    entry.uri
                ));
            }
        }
        if let Some(network) = &p.network {
            for entry in network.allowed() {
                match (&entry.host, &entry.cidr, entry.defaults) {
                    (Some(host), None, None) => {
                        if host.contains('*') {
                            return Err(bad(format!(
                                "network host `{host}` is a pattern; Cordon grants origins one \
                                 by one, so name each host"
                            )));
                        }
                        if host.is_empty()
                            || host.starts_with(['.', '-'])
                            || !host
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
                        {
                            return Err(bad(format!(
                                "network host `{host}` is not a host name (letters, digits, `.` \
                                 and `-`)"
                            )));
                        }
                        if network.denied().iter().any(|d| {
                            d.host
                                .as_deref()
                                .is_some_and(|h| h.eq_ignore_ascii_case(host))
                        }) {
                            return Err(bad(format!(
                                "network host `{host}` is both allowed and denied"
                            )));
                        }
                        let grant = format!("net:https://{host}");
                        t.translated
                            .push((format!("network host {host}"), grant.clone()));
                        t.grants.push(grant);
                    }
                    (None, Some(cidr), None) => {
                        return Err(bad(format!(
                            "network cidr `{cidr}` is a range; Cordon grants HTTPS origins and \
                             TCP addresses one by one (net:tcp://IP:PORT)"
                        )));
                    }
                    (None, None, Some(_)) => {
                        return Err(bad(
                            "network `defaults` stands for a list of many hosts; name the hosts \
                             the component needs"
                                .into(),
                        ));
                    }
                    _ => {
                        return Err(bad(
                            "a network entry must have exactly one of `host`, `cidr`, `defaults`"
                                .into(),
                        ));
                    }
                }
            }
            if !network.denied().is_empty() {
                t.left_out.push(format!(
                    "network deny ({} entries): every other host is denied anyway",
                    network.denied().len()
                ));
            }
        }
        if let Some(environment) = &p.environment {
            let env = ceiling.allows(Capability::Environment);
            let config = ceiling.allows(Capability::Config);
            for entry in environment.allowed() {
                let plain = entry
                    .key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if entry.key.is_empty() || !plain {
                    return Err(bad(format!(
                        "environment key `{}` is not a plain name (letters, digits, `_`, `-` \
                         and `.`)",
                        entry.key
                    )));
                }
                let grant = if config {
                    format!("config:{}", entry.key)
                } else if env {
                    format!("env:{}", entry.key)
                } else {
                    t.left_out.push(format!(
                        "environment {}: the component reads neither its environment nor \
                         wasi:config/store",
                        entry.key
                    ));
                    continue;
                };
                t.translated
                    .push((format!("environment {}", entry.key), grant.clone()));
                t.grants.push(grant);
            }
        }
        if let Some(resources) = &p.resources {
            if let Some(mb) = resources.memory {
                // Exactly what the policy says (MB), however Cordon then shows it.
                let limit = format!("memory={mb}MB");
                let above = mb.saturating_mul(1_000_000) > cordon_core::Limits::default().memory;
                t.translated.push((
                    format!("resources memory {mb} (MB)"),
                    if above {
                        format!("{limit} (above Cordon's default)")
                    } else {
                        limit.clone()
                    },
                ));
                t.limits.push(limit);
            }
            if resources.cpu.is_some() || resources.io.is_some() {
                t.left_out.push(
                    "resources cpu and io: Cordon limits each call's time, memory and output \
                     instead"
                        .into(),
                );
            }
        }
        if p.runtime.is_some() {
            t.left_out.push(
                "runtime: Cordon runs every component in wasmtime, with nothing inherited".into(),
            );
        }
        if p.ipc.is_some() {
            t.left_out
                .push("ipc: a component can reach nothing but what it is granted".into());
        }
        // Whatever the entries said, a translated grant is plain: no marks (only a person
        // marks a grant), and exactly the text built above.
        for grant in &t.grants {
            let parsed: cordon_core::Grant = grant
                .parse()
                .map_err(|e: cordon_core::GrantError| bad(e.to_string()))?;
            if parsed.marks() != cordon_core::Marks::default() {
                return Err(bad(format!(
                    "`{grant}` would carry marks; only a person marks a grant"
                )));
            }
        }
        Ok(t)
    }
}

/// `path` with its links resolved when it exists, else as written.
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The directory a storage URI names: `fs:///abs/dir/**` → `/abs/dir`; relative ones from
/// `base`.
fn storage_dir(uri: &str, base: &Path) -> Result<PathBuf, String> {
    let Some(path) = uri.strip_prefix("fs://") else {
        return Err(format!(
            "storage `{uri}` is not an fs:// URI, the only kind Cordon can grant"
        ));
    };
    let path = path
        .strip_suffix("/**")
        .or_else(|| path.strip_suffix("/*"))
        .unwrap_or(path);
    if path.contains('*') {
        return Err(format!(
            "storage `{uri}` is a pattern; Cordon grants whole directories, so name them"
        ));
    }
    let path = Path::new(path);
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path, text: &str) -> Result<WassettePolicy, HomeError> {
        let path = dir.join("policy.yaml");
        std::fs::write(&path, text).unwrap();
        WassettePolicy::read(&path)
    }

    fn ceiling(imports: &[&str]) -> Ceiling {
        Ceiling::from_imports(&imports.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn each_kind_of_entry_becomes_the_narrowest_grant() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/cache")).unwrap();
        let data = dir.path().join("data");
        let text = format!(
            "version: \"1.0\"\ndescription: test\npermissions:\n  storage:\n    allow:\n\
             \x20   - uri: \"fs://{}/**\"\n      access: [\"read\"]\n\
             \x20   - uri: \"fs://data/cache\"\n      access: [\"read\", \"write\"]\n\
             \x20 network:\n    allow:\n    - host: \"api.openweathermap.org\"\n    deny:\n    - cidr: \"0.0.0.0/0\"\n\
             \x20 environment:\n    allow:\n    - key: \"OPENWEATHER_API_KEY\"\n\
             \x20 resources:\n    memory: 512\n    cpu: 50.0\n",
            data.display()
        );
        let p = policy(dir.path(), &text).unwrap();
        let t = p
            .translate(&ceiling(&[
                "wasi:config/store@0.2.0-draft",
                "wasi:cli/environment@0.2.6",
                "wasi:filesystem/types@0.2.6",
            ]))
            .unwrap();
        let cache = dir.path().join("data/cache");
        assert_eq!(
            t.grants,
            [
                format!("fs:{0}:{0}:ro", data.display()),
                format!("fs:{0}:{0}:rw", cache.display()),
                "net:https://api.openweathermap.org".to_string(),
                "config:OPENWEATHER_API_KEY".to_string(),
            ]
        );
        assert_eq!(t.limits, ["memory=512MB"]);
        assert_eq!(t.left_out.len(), 2, "{:?}", t.left_out);
        // The same key, for a component that reads its environment.
        let t = p
            .translate(&ceiling(&["wasi:cli/environment@0.2.6"]))
            .unwrap();
        assert!(t.grants.contains(&"env:OPENWEATHER_API_KEY".to_string()));
    }

    #[test]
    fn what_cannot_be_granted_as_narrowly_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ceiling(&["wasi:filesystem/types@0.2.6"]);
        let refused = |body: &str| {
            let text = format!("version: \"1.0\"\npermissions:\n{body}");
            match policy(dir.path(), &text) {
                Ok(p) => p.translate(&c).unwrap_err().to_string(),
                Err(e) => e.to_string(),
            }
        };
        let d = dir.path().display();
        let e = refused(&format!(
            "  storage:\n    allow:\n    - uri: \"fs://{d}\"\n      access: [read]\n    deny:\n    - uri: \"fs://{d}/secret\"\n      access: [read]\n"
        ));
        assert!(e.contains("inside or above a directory it allows"), "{e}");
        let e = refused("  network:\n    allow:\n    - host: \"*.example.com\"\n");
        assert!(e.contains("is a pattern"), "{e}");
        let e = refused("  network:\n    allow:\n    - cidr: \"10.0.0.0/8\"\n");
        assert!(e.contains("is a range"), "{e}");
        let e = refused("  network:\n    allow:\n    - defaults: true\n");
        assert!(e.contains("name the hosts"), "{e}");
        let e = refused("  storage:\n    allow:\n    - uri: \"https://x\"\n      access: [read]\n");
        assert!(e.contains("not an fs:// URI"), "{e}");
        let e = refused(&format!(
            "  storage:\n    allow:\n    - uri: \"fs://{d}\"\n      access: [write]\n"
        ));
        assert!(e.contains("does not allow `read`"), "{e}");
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        let e = refused(&format!(
            "  storage:\n    allow:\n    - uri: \"fs://{d}/sub\"\n      access: [read]\n    deny:\n    - uri: \"fs://{d}\"\n      access: [read]\n"
        ));
        assert!(e.contains("inside or above"), "{e}");
        let e = refused("  network:\n    allow:\n    - host: \"api.example.com:trusted\"\n");
        assert!(e.contains("not a host name"), "{e}");
        let e = refused(
            "  network:\n    allow:\n    - host: \"a.example\"\n    deny:\n    - host: \"A.example\"\n",
        );
        assert!(e.contains("both allowed and denied"), "{e}");
        let e = refused("  environment:\n    allow:\n    - key: \"TOKEN:public\"\n");
        assert!(e.contains("not a plain name"), "{e}");
        let e = refused("  filesystem: {}\n");
        assert!(e.contains("filesystem"), "{e}");
        std::fs::write(dir.path().join("f.txt"), "x").unwrap();
        let e = refused(&format!(
            "  storage:\n    allow:\n    - uri: \"fs://{d}/f.txt\"\n      access: [read]\n"
        ));
        assert!(e.contains("is a file"), "{e}");
        let e = match policy(dir.path(), "version: \"2.0\"\npermissions: {}\n") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("version 2 accepted"),
        };
        assert!(e.contains("version 1.x"), "{e}");
    }
}
