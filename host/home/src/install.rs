//! Installing a component: fetch, verify, load, inspect, diff against what is installed, and
//! only then record — all or nothing.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::SystemTime;

use cordon_core::replace_file_stamped;
use cordon_core::{
    BUILT_IN_PLUGIN, Capability, Ceiling, Grant, Grants, Limits, ToolDescriptor, tools_hash,
};
use cordon_runtime::{CompileEvent, Plugin, Runtime, RuntimeConfig, compiled_file_name};

use crate::error::HomeError;
use crate::fsutil::{HomeLock, atomic_write, ensure_dir, io_err, sha256_digest};
use crate::lockfile::{LockFile, PluginRecord, SignedBy};
use crate::source::InstallSource;
use crate::{Home, digest_hex, validate_plugin_name, with_grants};

/// What the user asked to install.
#[derive(Debug, Clone)]
pub struct InstallRequest {
    /// Where the component comes from.
    pub source: InstallSource,
    /// The plugin name; defaults to the file or URL name without `.wasm`.
    pub name: Option<String>,
    /// Grants to give (CLI syntax), in addition to those carried over on a reinstall.
    pub grants: Vec<String>,
    /// Limit overrides (`memory=64MiB`), in addition to those carried over.
    pub limits: Vec<String>,
    /// For a registry source: install it without a valid signature from a trusted key. The
    /// lock records it.
    pub allow_unsigned: bool,
    /// For a file or URL source: a detached signature of the component (a file or URL) that
    /// a trusted key must have made.
    pub signature: Option<String>,
    /// Replace an installed plugin with a registry manifest it had before (a tag moved back).
    pub allow_rollback: bool,
    /// Replace an installed plugin with a version signed by another key than the installed
    /// one.
    pub allow_new_signer: bool,
    /// A file of descriptions, hints and hidden tools for the component's tools (see
    /// [`crate::tool_edits`]); without it, a sidecar beside a component file is read.
    pub describe: Option<PathBuf>,
    /// Tools not to offer, added to the edits that apply.
    pub hide: Vec<String>,
    /// A Wassette `policy.yaml`, translated into grants and limits added to the others.
    pub wassette_policy: Option<PathBuf>,
}

/// A return to a manifest the plugin had before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    /// The manifest installed now.
    pub from: String,
    /// The earlier manifest the source names again.
    pub to: String,
    /// How many versions ago the plugin had it (1: the one just before).
    pub versions_back: usize,
}

/// A version signed by another key than the one that signed the installed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignerChange {
    /// The key that signed the installed version (or the last signed one).
    pub from: SignedBy,
    /// The key that signed the new one.
    pub to: SignedBy,
}

/// How replacing an installed plugin changes where it comes from, beyond its component: each
/// is refused unless the request allows it, and shown loudly when it is allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The new manifest is one the plugin had before.
    pub rollback: Option<Rollback>,
    /// The new version has another signer.
    pub new_signer: Option<SignerChange>,
}

impl Provenance {
    /// What replacing `previous` with a version from `manifest`, signed by `signer`, changes.
    fn of(
        previous: Option<&PluginRecord>,
        manifest: Option<&str>,
        signer: Option<&SignedBy>,
    ) -> Provenance {
        let Some(previous) = previous else {
            return Provenance::default();
        };
        let rollback = manifest.and_then(|to| {
            let versions_back = previous.versions_back(to)?;
            Some(Rollback {
                from: previous
                    .oci_manifest
                    .clone()
                    .unwrap_or_else(|| previous.digest.clone()),
                to: to.to_string(),
                versions_back,
            })
        });
        let new_signer = match (previous.established_signer(), signer) {
            (Some(from), Some(to)) if from.fingerprint != to.fingerprint => Some(SignerChange {
                from: from.clone(),
                to: to.clone(),
            }),
            _ => None,
        };
        Provenance {
            rollback,
            new_signer,
        }
    }
}

/// `name` (fingerprint), for messages.
fn signer_words(by: &SignedBy) -> String {
    format!("`{}` ({})", by.key, by.fingerprint)
}

/// How one tool differs between the installed and the new component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChange {
    /// Only in the new component.
    Added(String),
    /// Only in the installed component.
    Removed(String),
    /// In both, with different description, schemas or hints (each flag says which).
    Changed {
        /// The tool name.
        name: String,
        /// The description before and after, when it differs: the text a model reads to decide
        /// what the tool does, so the user sees both.
        description: Option<(String, String)>,
        /// The input schema differs.
        schema: bool,
        /// The output schema differs (added, removed or changed).
        output_schema: bool,
        /// The behaviour hints differ.
        hints: bool,
    },
}

/// The tool differences of an upgrade. `exact` is false when the installed component's tool
/// list was not available and only names could be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDiff {
    /// One entry per added, removed or changed tool.
    pub changes: Vec<ToolChange>,
    /// Whether descriptions and schemas were compared, not just names.
    pub exact: bool,
}

/// What replacing an installed plugin with a different component would change. Shown to the
/// user before they confirm, because a new component can want more than the old one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeDiff {
    /// The installed component's digest.
    pub old_digest: String,
    /// The new component's digest.
    pub new_digest: String,
    /// Interfaces (without version) the new component imports that the old one did not.
    pub imports_added: Vec<String>,
    /// Interfaces (without version) the old component imported that the new one does not.
    pub imports_removed: Vec<String>,
    /// Capability classes the new component can use that the old one could not. Shown loudly:
    /// this is how a trusted plugin turns into one that can, say, reach the network.
    pub capabilities_added: Vec<Capability>,
    /// Tool differences.
    pub tools: ToolDiff,
    /// Grants that carry over to the new component.
    pub grants_kept: Vec<Grant>,
    /// Grants dropped because the new component's ceiling no longer permits them.
    pub grants_dropped: Vec<Grant>,
}

impl UpgradeDiff {
    /// Whether anything beyond the digest differs.
    pub fn is_empty(&self) -> bool {
        self.imports_added.is_empty()
            && self.imports_removed.is_empty()
            && self.tools.changes.is_empty()
            && self.grants_dropped.is_empty()
    }
}

/// An install that has been fully checked and is ready to be recorded. It holds the home's
/// exclusive lock until it is committed or dropped; dropping it changes nothing.
pub struct PreparedInstall {
    home: Home,
    _lock: HomeLock,
    lock: LockFile,
    name: String,
    record: PluginRecord,
    previous: Option<PluginRecord>,
    upgrade: Option<UpgradeDiff>,
    provenance: Provenance,
    /// The component's own tool list, saved beside it and pinned by the lock's hash.
    component_tools: Vec<ToolDescriptor>,
    /// The tools as offered: the component's with the installer's edits applied.
    tools: Vec<ToolDescriptor>,
    edits_file: Option<crate::tool_edits::EditsFile>,
    translation: Option<crate::wassette::Translation>,
    /// For a reinstall of the same component with other edits: what they change.
    edits_changed: Option<ToolDiff>,
    bytes: Vec<u8>,
    ceiling: Ceiling,
    shadowed: Vec<(String, Vec<String>)>,
    unavailable: Vec<cordon_runtime::Unavailable>,
    staging: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for PreparedInstall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedInstall")
            .field("name", &self.name)
            .field("record", &self.record)
            .field("upgrade", &self.upgrade)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// What an install did.
#[derive(Debug, Clone)]
pub struct InstallReport {
    /// The plugin name.
    pub name: String,
    /// What is now recorded.
    pub record: PluginRecord,
    /// What was recorded before, if the name was already installed.
    pub previous: Option<PluginRecord>,
}

impl Home {
    /// Fetches, verifies, loads and inspects a component, then takes the home's lock and works
    /// out what installing it would change. Nothing in the home is written: call
    /// [`PreparedInstall::commit`] to record it. `progress` hears about a real compile so a UI
    /// can show a spinner.
    pub async fn prepare_install(
        &self,
        request: InstallRequest,
        progress: &dyn Fn(CompileEvent),
    ) -> Result<PreparedInstall, HomeError> {
        let source_name = request.source.describe();
        let name = match &request.name {
            Some(n) => n.clone(),
            None => request
                .source
                .default_name()
                .ok_or_else(|| HomeError::BadPluginName {
                    name: source_name.clone(),
                    reason: "no plugin name can be derived from it".into(),
                })?,
        };
        validate_plugin_name(&name)?;
        if name == BUILT_IN_PLUGIN {
            // Approval rules, the policy and the audit log would not tell its tools from the
            // built-in ones (`cordon.read_result`).
            return Err(HomeError::BadPluginName {
                name,
                reason: "it is the name of Cordon's own built-in tools; give another with --name"
                    .into(),
            });
        }
        // Cheap checks of the user's input first, before downloading or compiling anything.
        let new_grants = self.parse_grants(&request.grants)?;
        Limits::default().with_overrides(request.limits.iter().map(String::as_str))?;
        let edits_file =
            crate::tool_edits::edits_file(request.describe.as_deref(), &request.source)?;
        let wassette = request
            .wassette_policy
            .as_deref()
            .map(crate::wassette::WassettePolicy::read)
            .transpose()?;

        self.check_signature_possible(
            &request.source,
            request.signature.as_deref(),
            request.allow_unsigned,
        )?;
        let fetched = request.source.fetch().await?;
        // Of several valid signatures, the installed version's signer is the one to compare
        // with (read again under the lock below; this only picks which to report).
        let installed_signer = LockFile::load(&self.lock_path()).ok().and_then(|l| {
            l.plugins
                .get(&name)
                .and_then(|r| r.established_signer().map(|s| s.fingerprint.clone()))
        });
        // Checked before the component is compiled: an untrusted component is not even
        // handed to the compiler.
        let signature = self
            .check_signature(
                &request.source,
                &fetched,
                request.signature.as_deref(),
                request.allow_unsigned,
                installed_signer.as_deref(),
            )
            .await?;
        let bytes = fetched.bytes;
        let digest = sha256_digest(&bytes);

        // A component already installed is compiled in the home's cache; anything new is
        // compiled into a private cache that joins the home's only on commit, so a failed
        // install leaves the home untouched.
        let known_pin = LockFile::load(&self.lock_path()).ok().and_then(|l| {
            l.plugins
                .into_values()
                .find(|r| r.digest == digest)
                .map(|r| r.compiled)
        });
        let (runtime, staging) = if known_pin.is_some() {
            (self.runtime()?, None)
        } else {
            let staging = tempfile::Builder::new()
                .prefix("cordon-install-")
                .tempdir()
                .map_err(io_err(
                    "create a staging directory in",
                    &std::env::temp_dir(),
                ))?;
            let runtime = Runtime::new(RuntimeConfig {
                cache_dir: Some(staging.path().join("cache")),
                ..RuntimeConfig::default()
            })
            .map_err(HomeError::Runtime)?;
            (runtime, Some(staging))
        };
        let plugin = runtime
            .load(&bytes, known_pin.flatten().as_ref(), progress)
            .map_err(|source| HomeError::Load {
                source_name: source_name.clone(),
                source,
            })?
            .named(&name);
        let limits = Limits::default();
        let tools = plugin
            .list_tools(&limits)
            .await
            .map_err(|source| HomeError::ListTools {
                source_name: source_name.clone(),
                source,
            })?;
        check_tool_list(&source_name, &tools)?;
        let ceiling = plugin.ceiling();
        // A Wassette policy's grants depend on what the component imports (an environment key
        // is a variable for one that reads its environment, a config key otherwise).
        let translation = wassette.map(|p| p.translate(&ceiling)).transpose()?;
        let mut new_grants = new_grants;
        let mut limits = request.limits.clone();
        if let Some(t) = &translation {
            new_grants.extend(self.parse_grants(&t.grants).map_err(|e| {
                HomeError::WassettePolicy {
                    path: t.path.clone(),
                    reason: e.to_string(),
                }
            })?);
            limits.extend(t.limits.iter().cloned());
        }
        ceiling
            .permit_all(&new_grants)
            .map_err(|e| e.for_plugin(&name))?;

        let guard = HomeLock::exclusive(&self.root)?;
        let lock = LockFile::load(&self.lock_path())?;
        let previous = lock.plugins.get(&name).cloned();
        let provenance = Provenance::of(
            previous.as_ref(),
            fetched.oci_manifest.as_deref(),
            signature.signed_by.as_ref(),
        );
        if let Some(rollback) = &provenance.rollback
            && !request.allow_rollback
        {
            return Err(HomeError::Rollback {
                name,
                source_name,
                from: rollback.from.clone(),
                to: rollback.to.clone(),
                versions_back: rollback.versions_back,
            });
        }
        if let Some(change) = &provenance.new_signer
            && !request.allow_new_signer
        {
            return Err(HomeError::NewSigner {
                name,
                source_name,
                old_signer: signer_words(&change.from),
                new_signer: signer_words(&change.to),
            });
        }

        // A file states all the edits; without one the installed plugin's are kept, for the
        // tools that are still there. `--hide` adds to either.
        let (mut edits, from) = match &edits_file {
            Some(f) => (f.edits.clone(), format!("in {}", f.path.display())),
            None => (
                previous
                    .as_ref()
                    .map(|old| old.edits.kept_for(&tools))
                    .unwrap_or_default(),
                "kept from the installed plugin".to_string(),
            ),
        };
        if !request.hide.is_empty() {
            edits.hide.extend(request.hide.iter().cloned());
        }
        edits.check(&tools).map_err(|source| HomeError::ToolEdits {
            source_name: source_name.clone(),
            from: if request.hide.is_empty() {
                from
            } else {
                format!("{from} or given with --hide")
            },
            source,
        })?;
        let shown = edits.apply(tools.clone());
        if shown.is_empty() {
            return Err(HomeError::AllToolsHidden {
                source_name,
                hidden: edits.hide.iter().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        check_tool_list(&source_name, &shown)?;

        // The same component with other edits changes what a model is told without a new
        // digest: shown tool by tool and asked about, as an upgrade is.
        let edits_changed = match &previous {
            Some(old) if old.digest == digest && old.edits != edits => {
                Some(self.tool_diff(old, &shown))
            }
            _ => None,
        };

        let (base_grants, base_limits, upgrade) = match &previous {
            None => (Grants::new(), Default::default(), None),
            Some(old) if old.digest == digest => (old.grants.clone(), old.limits.clone(), None),
            Some(old) => {
                let diff = self.diff(old, &plugin, &ceiling, &shown);
                let kept: Grants = diff.grants_kept.iter().cloned().collect();
                (kept, old.limits.clone(), Some(diff))
            }
        };
        let mut record = PluginRecord {
            digest: digest.clone(),
            source: source_name,
            installed_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            imports: plugin.imports().to_vec(),
            tools: shown.iter().map(|t| t.name.clone()).collect(),
            tools_hash: tools_hash(&tools),
            grants: with_grants(base_grants, &new_grants),
            // Kept while the same component stays; an upgrade starts without them, so what
            // was given for a while to one component is asked for again by the next.
            expiring: match &previous {
                Some(old) if old.digest == digest => old.expiring.clone(),
                _ => Vec::new(),
            },
            limits: base_limits,
            compiled: plugin.compiled_pin().cloned(),
            previous_manifests: previous
                .as_ref()
                .map(|old| old.manifests_after(fetched.oci_manifest.as_deref()))
                .unwrap_or_default(),
            previous_signer: match &signature.signed_by {
                Some(_) => None,
                None => previous
                    .as_ref()
                    .and_then(|old| old.established_signer().cloned()),
            },
            oci_manifest: fetched.oci_manifest,
            unsigned: signature.unsigned,
            signed_by: signature.signed_by,
            edits,
        };
        record.set_limits(limits.iter().map(String::as_str))?;

        let shadowed = shown
            .iter()
            .filter_map(|t| {
                let others: Vec<String> = lock
                    .owners_of(&t.name)
                    .into_iter()
                    .filter(|p| p != &name)
                    .collect();
                (!others.is_empty()).then(|| (t.name.clone(), others))
            })
            .collect();

        Ok(PreparedInstall {
            home: self.clone(),
            _lock: guard,
            lock,
            name,
            record,
            previous,
            upgrade,
            provenance,
            component_tools: tools,
            tools: shown,
            edits_file,
            edits_changed,
            translation,
            bytes,
            ceiling,
            shadowed,
            unavailable: plugin.unavailable().to_vec(),
            staging,
        })
    }

    fn diff(
        &self,
        old: &PluginRecord,
        new: &Plugin,
        ceiling: &Ceiling,
        tools: &[ToolDescriptor],
    ) -> UpgradeDiff {
        // Compare interfaces without their versions: a WASI patch-version bump is not a new
        // capability, and listing every re-versioned import would bury the real changes.
        let unversioned = |s: &String| s.split('@').next().unwrap_or(s).to_string();
        let old_imports: BTreeSet<String> = old.imports.iter().map(unversioned).collect();
        let new_imports: BTreeSet<String> = new.imports().iter().map(unversioned).collect();
        let old_caps = old.ceiling().capabilities();
        let (grants_kept, grants_dropped) = ceiling.partition(old.grants.iter());
        UpgradeDiff {
            old_digest: old.digest.clone(),
            new_digest: new.digest().to_string(),
            imports_added: new_imports.difference(&old_imports).cloned().collect(),
            imports_removed: old_imports.difference(&new_imports).cloned().collect(),
            capabilities_added: ceiling
                .capabilities()
                .into_iter()
                .filter(|c| !old_caps.contains(c))
                .collect(),
            tools: self.tool_diff(old, tools),
            grants_kept,
            grants_dropped,
        }
    }

    fn tool_diff(&self, old: &PluginRecord, new: &[ToolDescriptor]) -> ToolDiff {
        // The tool list recorded beside the old component gives a full comparison, provided it
        // still matches the hash in the lock file; otherwise compare names only. Both sides
        // are compared as offered, with their edits applied.
        let old_tools: Option<Vec<ToolDescriptor>> =
            std::fs::read(self.tool_list_path(&old.digest))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .filter(|t: &Vec<ToolDescriptor>| tools_hash(t) == old.tools_hash)
                .map(|t| old.edits.apply(t));
        let mut changes = Vec::new();
        let new_names: BTreeSet<&str> = new.iter().map(|t| t.name.as_str()).collect();
        for name in &old.tools {
            if !new_names.contains(name.as_str()) {
                changes.push(ToolChange::Removed(name.clone()));
            }
        }
        for tool in new {
            if !old.tools.contains(&tool.name) {
                changes.push(ToolChange::Added(tool.name.clone()));
            } else if let Some(before) = old_tools
                .as_ref()
                .and_then(|ts| ts.iter().find(|t| t.name == tool.name))
            {
                let (description, schema, output_schema, hints) = (
                    (before.description != tool.description)
                        .then(|| (before.description.clone(), tool.description.clone())),
                    before.input_schema != tool.input_schema,
                    before.output_schema != tool.output_schema,
                    before.hints != tool.hints,
                );
                if description.is_some() || schema || output_schema || hints {
                    changes.push(ToolChange::Changed {
                        name: tool.name.clone(),
                        description,
                        schema,
                        output_schema,
                        hints,
                    });
                }
            }
        }
        ToolDiff {
            changes,
            exact: old_tools.is_some(),
        }
    }
}

/// Checks the tool list against the contract in `wit/tool.wit`: valid, unique names, input
/// and output schemas that are valid JSON Schemas describing an object, and descriptions and
/// schemas of a size a model can be sent on every request.
fn check_tool_list(source_name: &str, tools: &[ToolDescriptor]) -> Result<(), HomeError> {
    let bad = |reason: String| HomeError::BadToolList {
        source_name: source_name.to_string(),
        reason,
    };
    if tools.is_empty() {
        return Err(bad("it offers no tools at all".into()));
    }
    let mut seen = BTreeSet::new();
    for tool in tools {
        ToolDescriptor::check_name(&tool.name).map_err(bad)?;
        tool.check_sizes().map_err(bad)?;
        if !seen.insert(tool.name.as_str()) {
            return Err(bad(format!("the tool name `{}` appears twice", tool.name)));
        }
        crate::toolbox::compile_schema(&tool.input_schema)
            .map_err(|e| bad(format!("tool `{}`: {e}", tool.name)))?;
        if let Some(schema) = &tool.output_schema {
            crate::toolbox::compile_output_schema(schema)
                .map_err(|e| bad(format!("tool `{}`: {e}", tool.name)))?;
        }
    }
    Ok(())
}

impl PreparedInstall {
    /// The plugin name being installed.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The record that commit will write (digest, imports, tools, grants, limits).
    pub fn record(&self) -> &PluginRecord {
        &self.record
    }

    /// The tools as they will be offered: the component's, with the installer's edits.
    pub fn tools(&self) -> &[ToolDescriptor] {
        &self.tools
    }

    /// The component's tools as it reported them (what the lock's hash pins).
    pub fn component_tools(&self) -> &[ToolDescriptor] {
        &self.component_tools
    }

    /// The file the install's tool edits were read from, if one was.
    pub fn edits_file(&self) -> Option<&crate::tool_edits::EditsFile> {
        self.edits_file.as_ref()
    }

    /// What the component's imports allow it to use at most.
    pub fn ceiling(&self) -> &Ceiling {
        &self.ceiling
    }

    /// The record being replaced, if the name is installed.
    pub fn previous(&self) -> Option<&PluginRecord> {
        self.previous.as_ref()
    }

    /// The differences to confirm when the name is installed with a different component.
    pub fn upgrade(&self) -> Option<&UpgradeDiff> {
        self.upgrade.as_ref()
    }

    /// How the plugin's provenance changes (a rollback, a new signer), as the request allowed.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// Tools whose bare name other installed plugins also offer, with those plugins: they must
    /// be called as `plugin.tool`.
    pub fn shadowed_tools(&self) -> &[(String, Vec<String>)] {
        &self.shadowed
    }

    /// For a component without Cordon's contract, its exported functions that are not
    /// offered as tools, and why (shown so the user knows what they are not getting).
    pub fn unavailable_functions(&self) -> &[cordon_runtime::Unavailable] {
        &self.unavailable
    }

    /// Whether committing needs the user's confirmation (a different component under an
    /// installed name).
    pub fn needs_confirmation(&self) -> bool {
        self.upgrade.is_some() || self.translation.is_some() || self.edits_changed.is_some()
    }

    /// For a reinstall of the same component with other tool edits: how the tools a model is
    /// told of change.
    pub fn edits_changed(&self) -> Option<&ToolDiff> {
        self.edits_changed.as_ref()
    }

    /// What a Wassette policy given with the install became.
    pub fn translation(&self) -> Option<&crate::wassette::Translation> {
        self.translation.as_ref()
    }

    /// Records the install: component file, its tool list, compiled code, then the lock file
    /// last — the rename of `plugins.toml` is the moment the install happens. On an error
    /// before that, files this commit created are removed again.
    pub fn commit(mut self) -> Result<InstallReport, HomeError> {
        let home = self.home.clone();
        ensure_dir(&home.root.join("components"))?;
        let component = home.component_path(&self.record.digest);
        let tool_list = home.tool_list_path(&self.record.digest);
        let mut created: Vec<PathBuf> = Vec::new();
        let result = (|| {
            let intact = std::fs::read(&component)
                .map(|b| sha256_digest(&b) == self.record.digest)
                .unwrap_or(false);
            if !intact {
                if !component.exists() {
                    created.push(component.clone());
                }
                atomic_write(&component, &self.bytes)?;
            }
            let list =
                serde_json::to_vec_pretty(&self.component_tools).map_err(|e| HomeError::Io {
                    action: "serialise the tool list for",
                    path: tool_list.clone(),
                    source: std::io::Error::other(e),
                })?;
            if !tool_list.exists() {
                created.push(tool_list.clone());
            }
            atomic_write(&tool_list, &list)?;
            if let (Some(staging), Some(pin)) = (&self.staging, self.record.compiled.as_mut()) {
                // The compiled code moves from the install's private cache into the home's,
                // replacing whatever is there, and is recorded with the stamp it has there.
                let name = compiled_file_name(digest_hex(&self.record.digest), pin);
                let from = staging.path().join("cache").join(&name);
                let to = home.cache_dir().join(&name);
                let bytes = std::fs::read(&from).map_err(io_err("read", &from))?;
                ensure_dir(&home.cache_dir())?;
                if !to.exists() {
                    created.push(to.clone());
                }
                pin.stamp = replace_file_stamped(&to, &bytes).map_err(io_err("write", &to))?;
            }
            // A first install under a name is not given values kept for an earlier plugin of
            // that name (one removed by hand from the lock file).
            if self.previous.is_none() {
                home.forget_config_values(&self.name)?;
            }
            self.lock
                .plugins
                .insert(self.name.clone(), self.record.clone());
            self.lock.save(&home.lock_path())
        })();
        if let Err(e) = result {
            for path in created {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        // The replaced component is no longer needed unless another plugin uses it.
        if let Some(old) = &self.previous
            && old.digest != self.record.digest
            && !self.lock.plugins.values().any(|r| r.digest == old.digest)
        {
            let _ = std::fs::remove_file(home.component_path(&old.digest));
            let _ = std::fs::remove_file(home.tool_list_path(&old.digest));
        }
        Ok(InstallReport {
            name: std::mem::take(&mut self.name),
            record: self.record.clone(),
            previous: self.previous.take(),
        })
    }
}
