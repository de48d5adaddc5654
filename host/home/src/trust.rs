//! The keys the user trusts to sign plugins, kept in the home as `trust/<name>.pub` (with
//! `trust/<name>.toml` listing the repositories a key is trusted for, when it is trusted for
//! some only), and the one place that decides whether a component's signatures are good enough
//! to install it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::HomeError;
use crate::fsutil::{HomeLock, atomic_write, ensure_dir, io_err, sync_dir};
use crate::lockfile::SignedBy;
use crate::oci::Attached;
use crate::scope::RepositoryPattern;
use crate::signing::{MAX_SIGNATURE_TEXT, PublicKey, check_payload, read_key_file};
use crate::source::{Fetched, InstallSource};
use crate::{Home, validate_plugin_name};

/// A key the user trusts, by the name they gave it.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    /// The name (`trust/<name>.pub`).
    pub name: String,
    /// The key.
    pub key: PublicKey,
    /// The registry repositories its signatures count for (`trust add --for`); empty: every
    /// plugin, from a registry, a file or a URL.
    pub scope: Vec<RepositoryPattern>,
}

/// `trust/<name>.toml`: the repositories a key is trusted for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeFile {
    repositories: Vec<String>,
}

const SCOPE_HEADER: &str = "\
# The registry repositories this key is trusted to sign plugins for (cordon trust add --for).
# Remove the key and add it again to change them: without this file the key would be trusted
# for every plugin.

";

impl TrustedKey {
    fn signed_by(&self) -> SignedBy {
        SignedBy {
            key: self.name.clone(),
            fingerprint: self.key.fingerprint().to_string(),
        }
    }

    /// Whether its signatures count for the registry repository `repository`
    /// (`registry/path`).
    pub fn trusted_for(&self, repository: &str) -> bool {
        self.scope.is_empty() || self.scope.iter().any(|p| p.matches(repository))
    }

    /// Its patterns, for messages.
    fn scope_words(&self) -> String {
        self.scope
            .iter()
            .map(RepositoryPattern::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where the repositories the key `name` is trusted for are kept.
fn scope_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.toml"))
}

/// The repositories the key `name` is trusted for: none listed (no file) means every plugin. A
/// file that cannot be read is an error, never taken as no limit.
fn read_scope(dir: &Path, name: &str) -> Result<Vec<RepositoryPattern>, HomeError> {
    let path = scope_path(dir, name);
    let bad = |reason: String| HomeError::BadKey {
        path: path.clone(),
        reason: format!(
            "{reason}; it lists the repositories the key `{name}` is trusted for. Fix it, or \
             `cordon trust remove {name}` and add the key again"
        ),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(bad(format!("it cannot be read ({e})"))),
    };
    let file: ScopeFile =
        toml::from_str(&text).map_err(|e| bad(format!("it is not valid ({e})")))?;
    if file.repositories.is_empty() {
        return Err(bad("its `repositories` list is empty".into()));
    }
    file.repositories
        .iter()
        .map(|p| RepositoryPattern::parse(p).map_err(|e| bad(e.to_string())))
        .collect()
}

impl Home {
    /// Where trusted keys are kept.
    pub fn trust_dir(&self) -> PathBuf {
        self.root.join("trust")
    }

    /// The trusted keys, by name. A key file that no longer parses is an error, not silently
    /// skipped: the user meant to trust something.
    pub fn trusted_keys(&self) -> Result<Vec<TrustedKey>, HomeError> {
        let _guard = HomeLock::shared(&self.root)?;
        self.read_trusted_keys()
    }

    fn read_trusted_keys(&self) -> Result<Vec<TrustedKey>, HomeError> {
        let dir = self.trust_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("read", &dir)(e)),
        };
        let mut keys = Vec::new();
        for entry in entries {
            let path = entry.map_err(io_err("read", &dir))?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".pub"))
            else {
                continue;
            };
            keys.push(TrustedKey {
                name: name.to_string(),
                key: PublicKey::from_pem(&read_key_file(&path, false)?, &path)?,
                scope: read_scope(&dir, name)?,
            });
        }
        keys.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(keys)
    }

    /// Trusts the public key in file `path` under `name` (default: the file name without
    /// `.pub`), for the registry repositories matching `scope` (see [`RepositoryPattern`]), or
    /// for every plugin if it is empty. The same key under another name, or another key under
    /// this name, is refused.
    pub fn trust_add(
        &self,
        path: &Path,
        name: Option<&str>,
        scope: &[String],
    ) -> Result<TrustedKey, HomeError> {
        let mut patterns: Vec<RepositoryPattern> = Vec::new();
        for given in scope {
            let pattern = RepositoryPattern::parse(given)?;
            if !patterns.contains(&pattern) {
                patterns.push(pattern);
            }
        }
        let key = PublicKey::from_pem(&read_key_file(path, false)?, path)?;
        let name = match name {
            Some(n) => n.to_string(),
            None => {
                let stem = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .map(|n| n.strip_suffix(".pub").unwrap_or(n).replace('.', "-"))
                    .unwrap_or_default();
                if stem == "cosign" {
                    return Err(HomeError::KeyConflict {
                        reason: "`cosign` says nothing about whose key it is: name it after \
                                 its owner with --name"
                            .into(),
                    });
                }
                stem
            }
        };
        validate_plugin_name(&name).map_err(|_| HomeError::KeyConflict {
            reason: format!(
                "`{name}` cannot name a key: use lowercase letters, digits, `-` and `_`, \
                 starting with a letter (--name)"
            ),
        })?;
        ensure_dir(&self.root)?;
        let _guard = HomeLock::exclusive(&self.root)?;
        for existing in self.read_trusted_keys()? {
            if existing.key.fingerprint() == key.fingerprint() {
                return Err(HomeError::KeyConflict {
                    reason: format!(
                        "this key ({}) is already trusted as `{}`",
                        key.fingerprint(),
                        existing.name
                    ),
                });
            }
            if existing.name == name {
                return Err(HomeError::KeyConflict {
                    reason: format!(
                        "another key ({}) is trusted as `{name}`; choose another --name, or \
                         `cordon trust remove {name}` first",
                        existing.key.fingerprint()
                    ),
                });
            }
        }
        let dir = self.trust_dir();
        ensure_dir(&dir)?;
        // The scope is in place before the key is: a key is trusted from the moment its
        // `.pub` file exists, and never for more than it was given.
        let scope_file = scope_path(&dir, &name);
        if patterns.is_empty() {
            remove_if_present(&scope_file)?;
        } else {
            let body = toml::to_string(&ScopeFile {
                repositories: patterns.iter().map(|p| p.as_str().to_string()).collect(),
            })
            .expect("a list of strings serialises");
            atomic_write(&scope_file, format!("{SCOPE_HEADER}{body}").as_bytes())?;
        }
        atomic_write(&dir.join(format!("{name}.pub")), key.to_pem().as_bytes())?;
        Ok(TrustedKey {
            name,
            key,
            scope: patterns,
        })
    }

    /// Stops trusting the key `name`. Plugins it signed stay installed (their lock entries
    /// still say who signed them); updates of them will need another trusted signature.
    pub fn trust_remove(&self, name: &str) -> Result<TrustedKey, HomeError> {
        let unknown = || HomeError::UnknownKey {
            name: name.to_string(),
        };
        validate_plugin_name(name).map_err(|_| unknown())?;
        let _guard = HomeLock::exclusive(&self.root)?;
        let dir = self.trust_dir();
        let path = dir.join(format!("{name}.pub"));
        if !path.symlink_metadata().is_ok_and(|m| m.is_file()) {
            return Err(unknown());
        }
        // Read on its own, so that a broken scope file (which `trusted_keys` refuses) does
        // not stand in the way of removing the key it belongs to.
        let key = TrustedKey {
            name: name.to_string(),
            key: PublicKey::from_pem(&read_key_file(&path, false)?, &path)?,
            scope: read_scope(&dir, name).unwrap_or_default(),
        };
        std::fs::remove_file(&path).map_err(io_err("remove", &path))?;
        remove_if_present(&scope_path(&self.trust_dir(), name))?;
        sync_dir(&self.trust_dir())?;
        Ok(key)
    }

    /// The trusted keys, or the error saying none are, for `source_name`.
    pub(crate) fn keys_to_check(
        &self,
        source_name: &str,
        waiver: &str,
    ) -> Result<Vec<TrustedKey>, HomeError> {
        let keys = self.trusted_keys()?;
        if keys.is_empty() {
            return Err(HomeError::NoTrustedKeys {
                source_name: source_name.to_string(),
                waiver: waiver.to_string(),
            });
        }
        Ok(keys)
    }
}

/// Removes the file at `path` if there is one.
fn remove_if_present(path: &Path) -> Result<(), HomeError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("remove", path)(e)),
        _ => Ok(()),
    }
}

/// What the signature check of an install found.
#[derive(Debug, Clone, Default)]
pub(crate) struct SignatureCheck {
    /// The trusted key whose valid signature was found.
    pub signed_by: Option<SignedBy>,
    /// A registry plugin accepted without one, as the user asked.
    pub unsigned: bool,
}

/// Where a detached signature is read from: a file, or a URL (https, or http on loopback).
async fn read_detached(given: &str) -> Result<String, HomeError> {
    let bytes = match InstallSource::parse(given, Some(&"0".repeat(64)))? {
        InstallSource::Url { url, .. } => crate::source::download(&url, MAX_SIGNATURE_TEXT).await?,
        _ => {
            let path = Path::new(given);
            let meta = crate::source::metadata_of(path)?;
            if !meta.is_file() {
                return Err(HomeError::SignatureMisplaced {
                    reason: format!("{given} is not a regular file"),
                });
            }
            if meta.len() > MAX_SIGNATURE_TEXT as u64 {
                return Err(HomeError::SignatureMisplaced {
                    reason: format!(
                        "{given} is {} bytes, far too large to be a signature",
                        meta.len()
                    ),
                });
            }
            std::fs::read(path).map_err(io_err("read", path))?
        }
    };
    String::from_utf8(bytes).map_err(|_| HomeError::SignatureMisplaced {
        reason: format!("{given} is not a signature: it is not base64 text"),
    })
}

impl Home {
    /// The waiver a registry install may use instead of a signature.
    const REGISTRY_WAIVER: &str = ", or install it with --allow-unsigned to accept it unsigned \
                                   (the lock records that, and `cordon plugin list` shows it)";

    /// Before anything is downloaded: whether the signature check can be made at all.
    pub(crate) fn check_signature_possible(
        &self,
        source: &InstallSource,
        signature: Option<&str>,
        allow_unsigned: bool,
    ) -> Result<(), HomeError> {
        let name = source.describe();
        match (source, signature) {
            (InstallSource::Oci(_), Some(_)) => Err(HomeError::SignatureMisplaced {
                reason: format!(
                    "{name} comes from a registry, whose signatures are read from the registry \
                     itself; drop --signature"
                ),
            }),
            (InstallSource::Oci(_), None) if !allow_unsigned => {
                self.keys_to_check(&name, Self::REGISTRY_WAIVER).map(drop)
            }
            (_, Some(_)) => self.keys_to_check(&name, "").map(drop),
            _ => Ok(()),
        }
    }

    /// The one decision on whether a fetched component's signatures let it be installed:
    /// a registry plugin needs a valid signature of its manifest by a key trusted for its
    /// repository unless the user waived that, and a detached signature, when given, must be
    /// valid by a key trusted for every plugin. Of several valid signatures, that of the key
    /// with fingerprint `prefer` (the installed version's signer) is the one reported. The
    /// caller has made [`Home::check_signature_possible`] before fetching.
    pub(crate) async fn check_signature(
        &self,
        source: &InstallSource,
        fetched: &Fetched,
        signature: Option<&str>,
        allow_unsigned: bool,
        prefer: Option<&str>,
    ) -> Result<SignatureCheck, HomeError> {
        let name = source.describe();
        match source {
            InstallSource::Oci(reference) => {
                let manifest = fetched
                    .oci_manifest
                    .as_deref()
                    .expect("a registry fetch records its manifest");
                let keys = self.trusted_keys()?;
                let verdict = match crate::oci::attached_signatures(reference, manifest).await {
                    Err(e) => Err(e),
                    Ok(None) => Err(HomeError::Unsigned {
                        reference: name.clone(),
                        manifest: manifest.to_string(),
                        tag: crate::oci::signature_tag(manifest),
                    }),
                    Ok(Some(_)) if keys.is_empty() => Err(HomeError::NoTrustedKeys {
                        source_name: name.clone(),
                        waiver: Self::REGISTRY_WAIVER.into(),
                    }),
                    Ok(Some(attached)) => verify_attached(
                        &name,
                        &reference.repository_path(),
                        manifest,
                        &attached,
                        &keys,
                        prefer,
                    ),
                };
                match verdict {
                    Ok(signer) => Ok(SignatureCheck {
                        signed_by: Some(signer),
                        unsigned: false,
                    }),
                    Err(e) if allow_unsigned => {
                        let why = match &e {
                            HomeError::Unsigned { .. } => "it carries no signature".to_string(),
                            HomeError::NoTrustedKeys { .. } => "you trust no keys".to_string(),
                            HomeError::UntrustedSignature {
                                count, problems, ..
                            } => format!(
                                "none of its {count} signature(s) is a valid one by a key you \
                                 trust{problems}"
                            ),
                            _ => return Err(e),
                        };
                        tracing::warn!(
                            "{name}: accepted without a trusted signature, as --allow-unsigned \
                             asks: {why}"
                        );
                        Ok(SignatureCheck {
                            signed_by: None,
                            unsigned: true,
                        })
                    }
                    Err(e) => Err(e),
                }
            }
            _ => match signature {
                None => Ok(SignatureCheck::default()),
                Some(given) => {
                    let keys = self.keys_to_check(&name, "")?;
                    let text = read_detached(given).await?;
                    let signer = verify_detached(
                        &format!("{name} ({})", crate::sha256_digest(&fetched.bytes)),
                        &fetched.bytes,
                        &text,
                        &keys,
                        prefer,
                    )?;
                    Ok(SignatureCheck {
                        signed_by: Some(signer),
                        unsigned: false,
                    })
                }
            },
        }
    }
}

/// The names of the keys that `counts`, for messages.
fn names(keys: &[TrustedKey], counts: impl Fn(&TrustedKey) -> bool) -> String {
    let names: Vec<&str> = keys
        .iter()
        .filter(|k| counts(k))
        .map(|k| k.name.as_str())
        .collect();
    if names.is_empty() {
        "none for this plugin".to_string()
    } else {
        names.join(", ")
    }
}

/// `problems` as the tail of an error message.
fn problem_words(problems: &[String]) -> String {
    if problems.is_empty() {
        String::new()
    } else {
        format!("; {}", problems.join("; "))
    }
}

/// Of the keys whose signatures counted, the one with fingerprint `prefer` if it is there,
/// else the first.
fn preferred(valid: &[&TrustedKey], prefer: Option<&str>) -> Option<SignedBy> {
    valid
        .iter()
        .find(|k| Some(k.key.fingerprint()) == prefer)
        .or(valid.first())
        .map(|k| k.signed_by())
}

/// Which trusted key signed the registry manifest `manifest_digest` of `repository`, going
/// through its attached signatures: a signature counts only if a key trusted for this
/// repository verifies it and its payload names this very manifest in this repository. Of
/// several, the key with fingerprint `prefer` is the one returned.
pub(crate) fn verify_attached(
    source_name: &str,
    repository: &str,
    manifest_digest: &str,
    attached: &Attached,
    keys: &[TrustedKey],
    prefer: Option<&str>,
) -> Result<SignedBy, HomeError> {
    let signatures = &attached.signatures;
    let mut problems = attached.unreadable.clone();
    let mut valid: Vec<&TrustedKey> = Vec::new();
    for attached in signatures {
        let Some(signer) = keys
            .iter()
            .find(|k| k.key.verifies(&attached.payload, &attached.signature))
        else {
            continue;
        };
        // A trusted key's valid signature of some other manifest, copied here, proves nothing
        // about this one.
        if let Err(problem) = check_payload(&attached.payload, repository, manifest_digest) {
            problems.push(format!("`{}`'s signature: {problem}", signer.name));
        } else if !signer.trusted_for(repository) {
            // A key trusted for its owner's plugins does not thereby publish anyone else's.
            problems.push(format!(
                "`{}` signed it, but is trusted only for {}, not for {repository}",
                signer.name,
                signer.scope_words()
            ));
        } else if !valid.iter().any(|k| k.name == signer.name) {
            valid.push(signer);
        }
    }
    preferred(&valid, prefer).ok_or_else(|| HomeError::UntrustedSignature {
        source_name: format!("{source_name} ({manifest_digest})"),
        count: signatures.len() + attached.unreadable.len(),
        trusted: names(keys, |k| k.trusted_for(repository)),
        problems: problem_words(&problems),
    })
}

/// Which trusted key made `signature` (a detached signature, as `cosign sign-blob` and `cordon
/// plugin sign FILE` write, read with its size bounded) of the component `bytes`. Only a key
/// trusted for every plugin counts: a file or URL is in no repository a scope could name.
pub(crate) fn verify_detached(
    source_name: &str,
    bytes: &[u8],
    signature: &str,
    keys: &[TrustedKey],
    prefer: Option<&str>,
) -> Result<SignedBy, HomeError> {
    let verifying: Vec<&TrustedKey> = keys
        .iter()
        .filter(|k| k.key.verifies(bytes, signature))
        .collect();
    let (valid, scoped): (Vec<&TrustedKey>, Vec<&TrustedKey>) =
        verifying.into_iter().partition(|k| k.scope.is_empty());
    let problems: Vec<String> = scoped
        .iter()
        .map(|k| {
            format!(
                "`{}` made it, but is trusted only for registry repositories ({}), not for \
                 files or URLs",
                k.name,
                k.scope_words()
            )
        })
        .collect();
    preferred(&valid, prefer).ok_or_else(|| HomeError::UntrustedSignature {
        source_name: source_name.to_string(),
        count: 1,
        trusted: names(keys, |k| k.scope.is_empty()),
        problems: problem_words(&problems),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::{AttachedSignature, PrivateKey, simple_signing_payload};

    fn trusted(name: &str, key: &PrivateKey) -> TrustedKey {
        TrustedKey {
            name: name.into(),
            key: key.public(),
            scope: Vec::new(),
        }
    }

    #[test]
    fn an_attached_signature_counts_only_for_the_manifest_it_names() {
        let alice = PrivateKey::generate();
        let mallory = PrivateKey::generate();
        let this = format!("sha256:{}", "1".repeat(64));
        let other = format!("sha256:{}", "2".repeat(64));
        let sign = |key: &PrivateKey, repository: &str, digest: &str| {
            let payload = simple_signing_payload(repository, digest);
            AttachedSignature {
                signature: key.sign(&payload),
                payload,
            }
        };
        let keys = [trusted("alice", &alice)];
        let check = |signatures: Vec<AttachedSignature>| {
            let attached = Attached {
                signatures,
                unreadable: Vec::new(),
            };
            verify_attached("p", "r.example/p", &this, &attached, &keys, None)
        };
        let ok = check(vec![
            sign(&mallory, "r.example/p", &this),
            sign(&alice, "r.example/p", &this),
        ])
        .unwrap();
        assert_eq!(ok.key, "alice");
        assert_eq!(ok.fingerprint, alice.public().fingerprint());

        let e = check(vec![sign(&mallory, "r.example/p", &this)]).unwrap_err();
        assert!(e.to_string().contains("1 signature(s), but none"), "{e}");
        // Alice's real signature of another manifest, replayed.
        let e = check(vec![sign(&alice, "r.example/p", &other)]).unwrap_err();
        assert!(
            e.to_string().contains("it signs manifest sha256:222"),
            "{e}"
        );
        // Alice's real signature of this manifest as another plugin of hers: served under
        // this name, it must not pass for this one.
        let e = check(vec![sign(&alice, "r.example/q", &this)]).unwrap_err();
        assert!(e.to_string().contains("made for the repository"), "{e}");
        // A payload edited after signing.
        let mut edited = sign(&alice, "r.example/p", &other);
        edited.payload = simple_signing_payload("r.example/p", &this);
        assert!(check(vec![edited]).is_err());
        // An unreadable signature layer is named and does not hide a good one.
        let attached = Attached {
            signatures: vec![sign(&alice, "r.example/p", &this)],
            unreadable: vec!["layer sha256:9 has no signature annotation".into()],
        };
        assert!(verify_attached("p", "r.example/p", &this, &attached, &keys, None).is_ok());
    }

    #[test]
    fn a_scoped_key_counts_only_for_its_repositories_and_the_installed_signer_is_preferred() {
        let alice = PrivateKey::generate();
        let bob = PrivateKey::generate();
        let this = format!("sha256:{}", "1".repeat(64));
        let sign = |key: &PrivateKey, repository: &str| {
            let payload = simple_signing_payload(repository, &this);
            AttachedSignature {
                signature: key.sign(&payload),
                payload,
            }
        };
        let mut scoped_bob = trusted("bob", &bob);
        scoped_bob.scope = vec![RepositoryPattern::parse("r.example/bob/*").unwrap()];
        let keys = [trusted("alice", &alice), scoped_bob];
        let check = |repository: &str, signatures: Vec<AttachedSignature>, prefer: Option<&str>| {
            let attached = Attached {
                signatures,
                unreadable: Vec::new(),
            };
            verify_attached("p", repository, &this, &attached, &keys, prefer)
        };
        // Bob's valid signature of this very manifest of Alice's repository does not count.
        let e = check(
            "r.example/alice/p",
            vec![sign(&bob, "r.example/alice/p")],
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("(trusted: alice)"), "{e}");
        assert!(
            e.contains("`bob` signed it, but is trusted only for r.example/bob/*, not for r.example/alice/p"),
            "{e}"
        );
        // In his own repositories it does.
        let ok = check("r.example/bob/q", vec![sign(&bob, "r.example/bob/q")], None).unwrap();
        assert_eq!(ok.key, "bob");
        // Signed by both: the signer asked for is the one reported, whatever the order.
        let both = || {
            vec![
                sign(&alice, "r.example/bob/q"),
                sign(&bob, "r.example/bob/q"),
            ]
        };
        let fingerprint = |k: &PrivateKey| k.public().fingerprint().to_string();
        let by = |prefer: Option<&str>| check("r.example/bob/q", both(), prefer).unwrap().key;
        assert_eq!(by(Some(&fingerprint(&bob))), "bob");
        assert_eq!(by(Some(&fingerprint(&alice))), "alice");
        assert_eq!(by(None), "alice");

        // A detached signature is in no repository: only unscoped keys count.
        let bytes = b"component";
        let e = verify_detached("f.wasm", bytes, &bob.sign(bytes), &keys, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("trusted only for registry repositories"), "{e}");
        let ok = verify_detached("f.wasm", bytes, &alice.sign(bytes), &keys, None).unwrap();
        assert_eq!(ok.key, "alice");
    }

    #[test]
    fn a_scope_is_kept_beside_the_key_and_a_broken_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        let file = dir.path().join("bob.pub");
        std::fs::write(&file, PrivateKey::generate().public().to_pem()).unwrap();
        let e = home
            .trust_add(&file, None, &["*/bob/*".into()])
            .unwrap_err();
        assert!(matches!(e, HomeError::BadRepositoryPattern { .. }), "{e}");
        assert!(home.trusted_keys().unwrap().is_empty(), "nothing added");
        let patterns = ["oci://r.example/bob/*".to_string(), "r.example/x/y".into()];
        home.trust_add(&file, None, &patterns).unwrap();
        let keys = home.trusted_keys().unwrap();
        let shown: Vec<&str> = keys[0].scope.iter().map(|p| p.as_str()).collect();
        assert_eq!(shown, ["r.example/bob/*", "r.example/x/y"]);
        assert!(keys[0].trusted_for("r.example/bob/tool"));
        assert!(!keys[0].trusted_for("r.example/alice/tool"));

        // A scope file that cannot be read never means "trusted for everything".
        let scope = home.trust_dir().join("bob.toml");
        std::fs::write(&scope, "repositories = []\n").unwrap();
        let e = home.trusted_keys().unwrap_err().to_string();
        assert!(e.contains("`repositories` list is empty"), "{e}");
        std::fs::write(&scope, "repositories = [\"*/x\"]\n").unwrap();
        assert!(home.trusted_keys().is_err());

        // Removing the key removes its scope; added again without one, it is trusted for all.
        home.trust_remove("bob").unwrap();
        assert!(!scope.exists());
        std::fs::write(&scope, "repositories = [\"r.example/stale\"]\n").unwrap();
        let again = home.trust_add(&file, None, &[]).unwrap();
        assert!(again.scope.is_empty());
        assert!(!scope.exists(), "a stale scope is not picked up");
        assert!(home.trusted_keys().unwrap()[0].trusted_for("r.example/alice/tool"));
    }

    #[test]
    fn keys_are_added_listed_and_removed_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        let alice = PrivateKey::generate();
        let file = dir.path().join("alice.pub");
        std::fs::write(&file, alice.public().to_pem()).unwrap();
        assert!(home.trusted_keys().unwrap().is_empty());
        let added = home.trust_add(&file, None, &[]).unwrap();
        assert_eq!(added.name, "alice");
        let e = home.trust_add(&file, Some("again"), &[]).unwrap_err();
        assert!(e.to_string().contains("already trusted as `alice`"), "{e}");
        let bob = dir.path().join("bob.pub");
        std::fs::write(&bob, PrivateKey::generate().public().to_pem()).unwrap();
        let e = home.trust_add(&bob, Some("alice"), &[]).unwrap_err();
        assert!(e.to_string().contains("another key"), "{e}");
        home.trust_add(&bob, None, &[]).unwrap();
        let names: Vec<String> = home
            .trusted_keys()
            .unwrap()
            .into_iter()
            .map(|k| k.name)
            .collect();
        assert_eq!(names, ["alice", "bob"]);
        home.trust_remove("alice").unwrap();
        assert!(matches!(
            home.trust_remove("alice"),
            Err(HomeError::UnknownKey { .. })
        ));
        assert_eq!(home.trusted_keys().unwrap().len(), 1);
    }
}
