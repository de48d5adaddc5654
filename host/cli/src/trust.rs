//! `cordon trust add | list | remove`, and the publisher's side: `cordon plugin keygen` and
//! `cordon plugin sign`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use std::io::IsTerminal;

use cordon_home::{Home, HomeError, OciReference, PrivateKey, TrustedKey};
use zeroize::Zeroizing;

use crate::audit;
use crate::records::Records;
use crate::term::outln;

#[derive(Debug, Subcommand)]
pub enum TrustCommand {
    /// Trust a publisher's public key (PEM, ECDSA P-256, as `cordon plugin keygen` and `cosign
    /// generate-key-pair` write) to sign the plugins you install from registries.
    Add {
        /// The public key file (.pub).
        key: PathBuf,
        /// The name to know it by (default: the file name without .pub).
        #[arg(long)]
        name: Option<String>,
        /// Trust it only for the registry repositories matching REGISTRY/PATH, where `*`
        /// matches within one path segment and `**` any number of segments
        /// (ghcr.io/alice/*). Repeatable. Without it the key may sign any plugin.
        #[arg(long = "for", value_name = "REPO-PATTERN")]
        scope: Vec<String>,
    },
    /// List the trusted keys with their fingerprints and what each may sign.
    List,
    /// Stop trusting a key. Plugins it signed stay installed; their updates need another
    /// trusted signature.
    Remove {
        /// The key's name.
        name: String,
    },
}

impl TrustCommand {
    /// Whether the command changes the home (and so goes to the audit log).
    pub fn changes_home(&self) -> bool {
        !matches!(self, TrustCommand::List)
    }
}

pub async fn run(
    home: &Home,
    records: Option<&Records>,
    command: TrustCommand,
) -> anyhow::Result<()> {
    match command {
        TrustCommand::Add { key, name, scope } => {
            let added = home.trust_add(&key, name.as_deref(), &scope)?;
            outln!(
                "Trusting key `{}` ({}) to sign {}.",
                added.name,
                added.key.fingerprint(),
                scope_words(&added)
            );
            if let Some(records) = records {
                let mut details = vec![format!("from {}", key.display())];
                details.extend(added.scope.iter().map(|p| format!("for {p}")));
                audit::home_change(
                    &records.store,
                    "trust",
                    &added.name,
                    added.key.fingerprint(),
                    details,
                )
                .await?;
            }
        }
        TrustCommand::List => {
            let keys = home.trusted_keys()?;
            if keys.is_empty() {
                outln!(
                    "No trusted keys. Add a publisher's public key with `cordon trust add KEY.pub`."
                );
            }
            for k in keys {
                outln!("{}  {}  {}", k.name, k.key.fingerprint(), scope_words(&k));
            }
        }
        TrustCommand::Remove { name } => {
            let lock = home.read()?;
            let removed = home.trust_remove(&name)?;
            let signed: Vec<String> = lock
                .plugins
                .into_iter()
                .filter(|(_, r)| {
                    r.signed_by
                        .as_ref()
                        .is_some_and(|s| s.fingerprint == removed.key.fingerprint())
                })
                .map(|(n, _)| n)
                .collect();
            outln!(
                "No longer trusting key `{name}` ({}).",
                removed.key.fingerprint()
            );
            if !signed.is_empty() {
                outln!(
                    "Installed plugins it signed stay installed: {}. Their updates will need \
                     a signature by a key you still trust.",
                    signed.join(", ")
                );
            }
            if let Some(records) = records {
                audit::home_change(
                    &records.store,
                    "distrust",
                    &name,
                    removed.key.fingerprint(),
                    Vec::new(),
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// What a trusted key may sign, in words.
fn scope_words(key: &TrustedKey) -> String {
    if key.scope.is_empty() {
        return "any plugin".to_string();
    }
    let patterns: Vec<&str> = key.scope.iter().map(|p| p.as_str()).collect();
    format!("plugins from {} only", patterns.join(", "))
}

/// The environment variable holding the password of a signing key.
const KEY_PASSWORD_ENV: &str = "CORDON_KEY_PASSWORD";

/// The password of a signing key: `CORDON_KEY_PASSWORD`, else asked on the terminal without
/// echo (twice for a new key), else an error saying how to give it.
fn key_password(purpose: &str, new: bool) -> Result<Zeroizing<String>, HomeError> {
    if let Ok(password) = std::env::var(KEY_PASSWORD_ENV) {
        return Ok(Zeroizing::new(password));
    }
    let refused = |reason: &str| HomeError::BadKey {
        path: PathBuf::from(purpose),
        reason: reason.to_string(),
    };
    if !std::io::stdin().is_terminal() {
        return Err(refused(&format!(
            "its password is needed: set {KEY_PASSWORD_ENV}, or run this on a terminal"
        )));
    }
    let ask = |question: &str| {
        rpassword::prompt_password(question)
            .map(Zeroizing::new)
            .map_err(|e| refused(&format!("the password could not be read: {e}")))
    };
    let password = ask(&format!("Password for {purpose}: "))?;
    if new {
        if password.is_empty() {
            return Err(refused(
                "an empty password protects nothing; use --no-password to mean it",
            ));
        }
        if *ask("The same password again: ")? != *password {
            return Err(refused("the two passwords differ"));
        }
    }
    Ok(password)
}

/// `cordon plugin keygen PREFIX`: writes PREFIX.key (mode 600, encrypted with a password unless
/// `no_password`) and PREFIX.pub, refusing to overwrite either.
pub fn keygen(prefix: &Path, no_password: bool) -> anyhow::Result<()> {
    let (private_path, public_path) = (with_suffix(prefix, ".key"), with_suffix(prefix, ".pub"));
    let password = match no_password {
        true => Zeroizing::new(String::new()),
        false => key_password(&private_path.display().to_string(), true)?,
    };
    let key = PrivateKey::generate();
    let create = |path: &Path, mode: u32| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        options.open(path).with_context(|| {
            format!(
                "cannot create {} (an existing key is never overwritten)",
                path.display()
            )
        })
    };
    if public_path.symlink_metadata().is_ok() {
        anyhow::bail!(
            "{} exists already (an existing key is never overwritten)",
            public_path.display()
        );
    }
    let mut private = create(&private_path, 0o600)?;
    let written = private
        .write_all(key.to_pem(&password).as_bytes())
        .and_then(|()| private.sync_all())
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            let mut public = create(&public_path, 0o644)?;
            public.write_all(key.public().to_pem().as_bytes())?;
            Ok(public.sync_all()?)
        });
    if let Err(e) = written {
        // Half a key pair is of no use; the private half must not linger either.
        let _ = std::fs::remove_file(&private_path);
        return Err(e);
    }
    outln!(
        "Wrote {} (private{}: keep it to yourself) and {} (public: your users trust it with \
         `cordon trust add`).",
        private_path.display(),
        if password.is_empty() {
            ", not encrypted"
        } else {
            ", encrypted with your password"
        },
        public_path.display()
    );
    outln!("Fingerprint: {}", key.public().fingerprint());
    Ok(())
}

/// `cordon plugin sign TARGET --key KEY`.
pub async fn sign(target: &str, key: &Path, output: Option<&Path>) -> anyhow::Result<()> {
    let key = PrivateKey::load(key, || key_password(&key.display().to_string(), false))?;
    if target.starts_with("oci://") {
        let reference = OciReference::parse(target)?;
        let signed = cordon_home::attach_signature(&reference, &key).await?;
        let pinned = reference.at_digest(&signed.manifest);
        if signed.new {
            outln!(
                "Signed {} ({}) with key {}; the signature is stored under the tag {}.",
                reference.describe(),
                signed.manifest,
                key.public().fingerprint(),
                cordon_home::signature_tag(&signed.manifest)
            );
        } else {
            outln!(
                "{} ({}) already carries a signature by key {}.",
                reference.describe(),
                signed.manifest,
                key.public().fingerprint()
            );
        }
        // A tag names whatever the registry says now: the publisher compares this with the
        // digest of the file they pushed (`sha256sum`).
        outln!(
            "The signed manifest holds the component {}.",
            signed.component
        );
        outln!(
            "Install it pinned: cordon plugin install {}",
            pinned.describe()
        );
        return Ok(());
    }
    let file = Path::new(target);
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    if let Err(why) = cordon_runtime::check_component_header(&bytes) {
        anyhow::bail!(
            "{} is not a WebAssembly component ({why}); sign the component file you publish",
            file.display()
        );
    }
    let output = output
        .map(Path::to_path_buf)
        .unwrap_or_else(|| with_suffix(file, ".sig"));
    // Replaced whole, never written through a link that happens to be there.
    let dir = output
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    writeln!(temp, "{}", key.sign(&bytes))?;
    temp.persist(&output)
        .with_context(|| format!("cannot write {}", output.display()))?;
    let digest = cordon_home::sha256_digest(&bytes);
    outln!(
        "Wrote the signature of {} ({digest}) to {}. Users install it with: cordon plugin \
         install <URL or file> --sha256 {} --signature <its URL or file>",
        file.display(),
        output.display(),
        digest.strip_prefix("sha256:").unwrap_or_default()
    );
    Ok(())
}

/// `path` with `suffix` appended to its file name (`alice` → `alice.key`, `p.wasm` →
/// `p.wasm.sig`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
