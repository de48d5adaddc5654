//! `cordon plugin install | list | inspect | remove | push | sign | keygen | outdated | update`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use cordon_agent::ToolSpec;
use cordon_agent::approval::ApprovalConfig;
use cordon_core::LimitKind;
use cordon_home::{
    Availability, Home, HomeError, InstallRequest, InstallSource, PluginRecord, PreparedInstall,
    Provenance, SignedBy, Toolbox,
};

use crate::audit;
use crate::plugin_view::{
    print_ceiling, print_expiring, print_grants, print_imports, print_tool, print_tool_changes,
    print_unavailable, print_upgrade,
};
use crate::policy::{ConfigInUse, describe_default, grant_default};
use crate::records::Records;
use crate::term::{Stream, outln};
use crate::toolbox_host::{model_name, spec_for};
use crate::ui::{CompileSpinner, confirm, short_digest};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Install a component from a file, from a URL pinned with --sha256, or from an OCI
    /// registry (oci://…, signed by a key you trust).
    Install(InstallArgs),
    /// List installed plugins.
    List,
    /// Show a plugin's tools and schemas, imports, ceiling, grants and limits, and whether a
    /// conversation would ask before each of its tools runs.
    Inspect {
        /// The plugin name.
        name: String,
        /// The config whose approval rules apply, as for `cordon chat`/`run` (default:
        /// ./cordon.toml when it exists).
        #[arg(long, env = "CORDON_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Set the value a plugin reads for KEY through wasi:config/store: kept in the home, given
    /// only to this plugin, and only under a config:KEY grant. The value comes from stdin, or
    /// is asked for on a terminal without echo; never from the command line.
    Config(crate::plugin_config::ConfigArgs),
    /// Uninstall a plugin and forget its grants.
    Remove {
        /// The plugin name.
        name: String,
    },
    /// Publish a component file to an OCI registry as a Wasm artifact (one
    /// `application/wasm` layer). Credentials: CORDON_REGISTRY_USERNAME and
    /// CORDON_REGISTRY_PASSWORD for the registry named in CORDON_REGISTRY, else the Docker
    /// config.
    Push {
        /// The component file.
        file: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY:TAG (http only for a registry on a loopback address).
        reference: String,
    },
    /// Sign a component with your private key: an oci:// artifact gets a cosign-compatible
    /// signature stored beside it in the registry; a file gets a detached signature file
    /// (as `cosign sign-blob` writes) to publish with it.
    Sign {
        /// oci://REGISTRY/REPOSITORY:TAG (or @sha256:DIGEST), or a component file.
        target: String,
        /// The private key (PEM: PKCS#8, encrypted or not, or SEC1; readable by you only). The
        /// password of an encrypted one comes from CORDON_KEY_PASSWORD, else the terminal.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// For a file: where to write the signature (default: FILE.sig).
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Create a signing key pair: PREFIX.key (private, mode 600, encrypted with a password from
    /// CORDON_KEY_PASSWORD or asked on the terminal) and PREFIX.pub (give it to your users for
    /// `cordon trust add`).
    Keygen {
        /// The path prefix of the two files.
        prefix: PathBuf,
        /// Leave the private key unencrypted (for a key kept in a CI secret store).
        #[arg(long)]
        no_password: bool,
    },
    /// For each plugin installed from a registry tag, whether the tag now names another
    /// manifest, and what updating would change or why it would be refused. Changes nothing;
    /// an unreachable registry is reported, not fatal.
    Outdated {
        /// Only these plugins (default: all from registries).
        names: Vec<String>,
    },
    /// Update registry plugins to what their tags name now: the signature is verified, and
    /// the changes to imports, ceiling, grants and tools are shown before you confirm. A tag
    /// moved back to a manifest the plugin had before, and a version signed by another key
    /// than the installed one, are refused unless allowed.
    Update(UpdateArgs),
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The plugins to update.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    names: Vec<String>,
    /// Update every plugin installed from a registry tag.
    #[arg(long)]
    all: bool,
    /// Accept a new version without a valid signature from a trusted key (the lock records it).
    #[arg(long)]
    allow_unsigned: bool,
    #[command(flatten)]
    provenance: ProvenanceArgs,
    /// Replace without asking.
    #[arg(long, short = 'y')]
    yes: bool,
}

/// The waivers of the provenance checks of a replacement.
#[derive(Debug, Args)]
pub struct ProvenanceArgs {
    /// Accept a manifest the plugin had before (a tag moved back to an older release); the
    /// audit log records it.
    #[arg(long)]
    allow_rollback: bool,
    /// Accept a version signed by another trusted key than the one that signed the installed
    /// version; the audit log records it.
    #[arg(long)]
    allow_new_signer: bool,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// A bundled tool's name (sql, files, python), a component file (.wasm), an https:// URL
    /// (http:// only for loopback hosts), or an oci://REGISTRY/REPOSITORY:TAG (or
    /// @sha256:DIGEST) reference.
    source: String,
    /// Install a registry plugin without a valid signature from a trusted key; the lock
    /// records it and `plugin list` shows it.
    #[arg(long)]
    allow_unsigned: bool,
    /// For a file or URL: a detached signature of the component (a file or URL, as `cordon
    /// plugin sign FILE` or `cosign sign-blob` write) that a key you trust must have made.
    #[arg(long, value_name = "FILE|URL")]
    signature: Option<String>,
    /// The expected SHA-256 of the component (64 hex digits); required for URLs.
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
    /// The plugin name (default: the file name without .wasm).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    provenance: ProvenanceArgs,
    /// A capability to give: fs:<dir>[:<guest>][:ro|rw], env:NAME, net:https://host[:port],
    /// net:tcp://ip:port. Repeatable. Nothing is granted by default.
    #[arg(long = "grant", value_name = "GRANT")]
    grants: Vec<String>,
    /// A limit override such as memory=64MiB or time=5s. Repeatable.
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
    /// Descriptions, parameter descriptions, hints and hidden tools for the component's tools
    /// (TOML: `hide = ["TOOL"]`, `[tools.TOOL]` with `description`, `read_only`, …,
    /// `[tools.TOOL.params]`). Without it, NAME.tools.toml beside a NAME.wasm is read; without
    /// either, a reinstall keeps the edits it had.
    #[arg(long, value_name = "FILE")]
    describe: Option<PathBuf>,
    /// A tool not to offer to models (the component's name for it). Repeatable.
    #[arg(long = "hide", value_name = "TOOL")]
    hide: Vec<String>,
    /// A Wassette policy.yaml for the component: its permissions become grants and limits,
    /// shown before anything is recorded (and asked about, unless --yes).
    #[arg(long = "policy", value_name = "FILE")]
    wassette_policy: Option<PathBuf>,
    /// Replace an installed plugin of the same name without asking.
    #[arg(long, short = 'y')]
    yes: bool,
}

impl PluginCommand {
    /// Whether the command changes the home (and so goes to the audit log).
    pub fn changes_home(&self) -> bool {
        matches!(
            self,
            PluginCommand::Install(_)
                | PluginCommand::Remove { .. }
                | PluginCommand::Update(_)
                | PluginCommand::Config(_)
        )
    }
}

/// Runs a plugin command; `records` is where changes to the home are recorded (present for
/// the commands that change it).
pub async fn run(
    home: &Home,
    records: Option<&Records>,
    command: PluginCommand,
) -> anyhow::Result<()> {
    match command {
        PluginCommand::Install(args) => install(home, records, args).await,
        PluginCommand::List => list(home),
        PluginCommand::Push { file, reference } => {
            let reference = cordon_home::OciReference::parse(&reference)?;
            let digest = cordon_home::push_component(&file, &reference).await?;
            outln!(
                "Pushed {} to {} ({digest}).",
                file.display(),
                reference.describe()
            );
            outln!(
                "Install it pinned: cordon plugin install {}",
                reference.at_digest(&digest).describe()
            );
            Ok(())
        }
        PluginCommand::Sign {
            target,
            key,
            output,
        } => crate::trust::sign(&target, &key, output.as_deref()).await,
        PluginCommand::Keygen {
            prefix,
            no_password,
        } => crate::trust::keygen(&prefix, no_password),
        PluginCommand::Outdated { names } => outdated(home, &names).await,
        PluginCommand::Update(args) => update(home, records, args).await,
        PluginCommand::Inspect { name, config } => inspect(home, &name, config.as_deref()).await,
        PluginCommand::Config(args) => crate::plugin_config::run(home, records, args).await,
        PluginCommand::Remove { name } => {
            let record = home.remove(&name)?;
            outln!(
                "Removed plugin `{name}` ({}); its grants are gone.",
                short_digest(&record.digest)
            );
            if let Some(records) = records {
                let details = record.grants.iter().map(|g| format!("- {g}")).collect();
                audit::home_change(&records.store, "remove", &name, &record.digest, details)
                    .await?;
            }
            Ok(())
        }
    }
}

async fn install(home: &Home, records: Option<&Records>, args: InstallArgs) -> anyhow::Result<()> {
    let source = InstallSource::parse(&args.source, args.sha256.as_deref())?;
    let prepared = prepare(
        home,
        InstallRequest {
            source,
            name: args.name,
            grants: args.grants,
            limits: args.limits,
            allow_unsigned: args.allow_unsigned,
            signature: args.signature,
            allow_rollback: args.provenance.allow_rollback,
            allow_new_signer: args.provenance.allow_new_signer,
            describe: args.describe,
            hide: args.hide,
            wassette_policy: args.wassette_policy,
        },
    )
    .await?;
    describe_install(&prepared);
    confirm_and_commit(home, records, prepared, args.yes).await
}

/// [`Home::prepare_install`], with a spinner while a large component compiles.
async fn prepare(home: &Home, request: InstallRequest) -> Result<PreparedInstall, HomeError> {
    let spinner = CompileSpinner::new();
    home.prepare_install(request, &|event| spinner.observe(event))
        .await
}

/// Shows what replacing an installed plugin changes and asks (unless `yes`), then records the
/// install and its audit entry.
async fn confirm_and_commit(
    home: &Home,
    records: Option<&Records>,
    prepared: PreparedInstall,
    yes: bool,
) -> anyhow::Result<()> {
    print_provenance(prepared.name(), prepared.provenance(), true);
    if let Some(diff) = prepared.upgrade() {
        print_upgrade(prepared.name(), diff);
    }
    if let Some(diff) = prepared.edits_changed() {
        outln!();
        outln!(
            "The tool edits of `{}` change what models are told:",
            prepared.name()
        );
        print_tool_changes(diff);
    }
    if prepared.needs_confirmation() && !yes {
        let question = if prepared.upgrade().is_some() {
            format!("Replace the installed `{}`?", prepared.name())
        } else if prepared.edits_changed().is_some() {
            format!(
                "Change what models are told of `{}`'s tools?",
                prepared.name()
            )
        } else {
            format!("Install `{}` with the grants above?", prepared.name())
        };
        match confirm(&question) {
            Some(true) => {}
            Some(false) => {
                return Err(HomeError::Declined {
                    name: prepared.name().to_string(),
                }
                .into());
            }
            None if prepared.upgrade().is_some() => {
                return Err(HomeError::ConfirmationRequired {
                    name: prepared.name().to_string(),
                }
                .into());
            }
            None => {
                return Err(HomeError::InstallConfirmationRequired {
                    name: prepared.name().to_string(),
                    what: if prepared.edits_changed().is_some() {
                        "with new tool edits"
                    } else {
                        "with the grants its Wassette policy gives"
                    },
                }
                .into());
            }
        }
    }
    let provenance = prepared.provenance().clone();
    let report = prepared.commit()?;
    let verb = match &report.previous {
        None => "Installed",
        Some(_) if provenance.rollback.is_some() => "Rolled back",
        Some(old) if old.digest == report.record.digest => "Reinstalled",
        Some(_) => "Upgraded",
    };
    outln!(
        "{verb} plugin `{}` in {}.",
        report.name,
        home.root().display()
    );
    if let Some(records) = records {
        let action = match &report.previous {
            Some(_) if provenance.rollback.is_some() => "rollback",
            Some(old) if old.digest != report.record.digest => "upgrade",
            _ => "install",
        };
        // What the user allowed against the checks comes first, in capitals.
        let mut details = Vec::new();
        if let Some(r) = &provenance.rollback {
            details.push(format!(
                "ROLLBACK to manifest {}, which it had {} version(s) ago, from {} (allowed with \
                 --allow-rollback)",
                r.to, r.versions_back, r.from
            ));
        }
        if let Some(c) = &provenance.new_signer {
            details.push(format!(
                "NEW SIGNER {} instead of {} (allowed with --allow-new-signer)",
                key_words(&c.to),
                key_words(&c.from)
            ));
        }
        details.push(format!("from {}", report.record.source));
        if let Some(manifest) = &report.record.oci_manifest {
            details.push(format!("manifest {manifest}"));
        }
        details.push(signature_words(&report.record));
        if let Some(old) = &report.previous
            && old.digest != report.record.digest
        {
            details.push(format!("replaces {}", old.digest));
        }
        details.extend(report.record.grants.iter().map(|g| format!("+ {g}")));
        details.push(format!("tools: {}", report.record.tools.join(", ")));
        audit::home_change(
            &records.store,
            action,
            &report.name,
            &report.record.digest,
            details,
        )
        .await?;
    }
    Ok(())
}

/// A key as `name` (fingerprint).
fn key_words(by: &SignedBy) -> String {
    format!("`{}` ({})", by.key, by.fingerprint)
}

/// Shows a rollback or a change of signer loudly. `allowed`: the user allowed them (install,
/// update); otherwise (outdated) says what `update` needs to accept them.
fn print_provenance(name: &str, provenance: &Provenance, allowed: bool) {
    if let Some(r) = &provenance.rollback {
        outln!(
            "  !!! ROLLBACK: `{name}` goes back to manifest {}, which it had {} version(s) ago \
             (it has {} now).",
            r.to,
            r.versions_back,
            r.from
        );
        if !allowed {
            outln!("      `cordon plugin update` refuses this without --allow-rollback.");
        }
    }
    if let Some(c) = &provenance.new_signer {
        outln!(
            "  !!! NEW SIGNER: signed by {}, not by {}, who signed the version installed.",
            key_words(&c.to),
            key_words(&c.from)
        );
        if !allowed {
            outln!("      `cordon plugin update` refuses this without --allow-new-signer.");
        }
    }
}

/// Who signed the component, in words.
fn signature_words(record: &PluginRecord) -> String {
    match (&record.signed_by, record.unsigned) {
        (Some(by), _) => format!("signed by `{}` ({})", by.key, by.fingerprint),
        (None, true) => "NOT signed by a trusted key (installed with --allow-unsigned)".into(),
        (None, false) => "no signature checked (installed from a file or URL)".into(),
    }
}

async fn outdated(home: &Home, names: &[String]) -> anyhow::Result<()> {
    let plugins = home.outdated(names).await?;
    if plugins.is_empty() {
        outln!("No plugins from registries are installed.");
        return Ok(());
    }
    for p in &plugins {
        let status = match &p.availability {
            Availability::UpToDate => "up to date".to_string(),
            Availability::PinnedByDigest => "pinned by digest; nothing to follow".to_string(),
            Availability::NewManifest(now) => format!(
                "NEW: {} -> {}",
                short_digest(&p.installed_manifest),
                short_digest(now)
            ),
            Availability::PreviousManifest(now, back) => format!(
                "ROLLBACK: {} -> {}, a manifest it had {back} version(s) ago",
                short_digest(&p.installed_manifest),
                short_digest(now)
            ),
            Availability::Unknown(e) => format!("unknown: {e}"),
        };
        outln!(
            "{}  {}  {status}",
            p.name,
            Stream::Stdout.show(&p.reference.describe())
        );
        if p.has_news() {
            // What `update` would show, worked out the same way; nothing is recorded. A
            // rollback or a new signer is let through here to be shown with the rest.
            let request = InstallRequest {
                allow_rollback: true,
                allow_new_signer: true,
                ..p.update_request()
            };
            match prepare(home, request).await {
                Ok(prepared) => {
                    print_provenance(&p.name, prepared.provenance(), false);
                    match prepared.upgrade() {
                        Some(diff) => print_upgrade(&p.name, diff),
                        None => outln!("  (the same component in a new manifest)"),
                    }
                }
                Err(e) => outln!("  `cordon plugin update` would refuse it: {e}"),
            }
        }
    }
    Ok(())
}

async fn update(home: &Home, records: Option<&Records>, args: UpdateArgs) -> anyhow::Result<()> {
    let plugins = home.outdated(&args.names).await?;
    if plugins.is_empty() {
        outln!("No plugins from registries are installed.");
        return Ok(());
    }
    let mut failed = Vec::new();
    for plugin in &plugins {
        match &plugin.availability {
            Availability::UpToDate => {
                outln!("`{}` is up to date.", plugin.name);
                continue;
            }
            Availability::PinnedByDigest => {
                outln!(
                    "`{}` is pinned by digest ({}); install another reference to change it.",
                    plugin.name,
                    plugin.reference.describe()
                );
                continue;
            }
            Availability::Unknown(e) => {
                crate::term::errln!("`{}`: not updated, {e}", plugin.name);
                failed.push(plugin.name.clone());
                continue;
            }
            Availability::NewManifest(_) | Availability::PreviousManifest(..) => {}
        }
        let request = InstallRequest {
            allow_unsigned: args.allow_unsigned,
            allow_rollback: args.provenance.allow_rollback,
            allow_new_signer: args.provenance.allow_new_signer,
            ..plugin.update_request()
        };
        let result = match prepare(home, request).await {
            Ok(prepared) => {
                describe_install(&prepared);
                confirm_and_commit(home, records, prepared, args.yes).await
            }
            Err(e) => Err(e.into()),
        };
        if let Err(e) = result {
            if plugins.len() == 1 {
                return Err(e);
            }
            // The error says whether anything changed (an unrecorded audit entry follows a
            // change that was made).
            crate::term::errln!("`{}`: {}", plugin.name, crate::render_error(&e));
            failed.push(plugin.name.clone());
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("some updates failed: {}", failed.join(", "));
    }
    Ok(())
}

fn describe_install(p: &PreparedInstall) {
    let r = p.record();
    outln!("Plugin `{}` ({})", p.name(), r.digest);
    outln!("  source:  {}", r.source);
    outln!("  signed:  {}", signature_words(r));
    print_imports(&r.imports);
    print_ceiling(p.ceiling());
    outln!("  tools:   {}", r.tools.join(", "));
    crate::install_notes::print_edits(p);
    crate::install_notes::print_translation(p);
    print_unavailable(p.unavailable_functions());
    print_grants(&r.grants);
    print_expiring(&r.expiring);
    print_install_approval(p);
    for (tool, others) in p.shadowed_tools() {
        let seen: Vec<String> = others
            .iter()
            .map(String::as_str)
            .chain([p.name()])
            .map(|plugin| format!("`{}`", model_name(&format!("{plugin}.{tool}"))))
            .collect();
        outln!(
            "  note: tool `{tool}` is also offered by {}; call it as `{}.{tool}`. The model \
             now sees {}; an approval rule for `{tool}` applies to all of them, one for \
             `{}.{tool}` to this plugin's only.",
            others
                .iter()
                .map(|o| format!("`{o}`"))
                .collect::<Vec<_>>()
                .join(", "),
            p.name(),
            seen.join(", "),
            p.name()
        );
    }
}

/// The approval rules a conversation started here applies: those of `config`, else of
/// ./cordon.toml when it exists (as `cordon chat`/`run` load them), with words saying which.
fn approval_rules(config: Option<&Path>) -> anyhow::Result<(ApprovalConfig, String)> {
    let found = ConfigInUse::find(config)?;
    let words = found.rules_words();
    Ok((found.config.approval, words))
}

/// At install, tools grouped by what a conversation will do with their calls.
fn print_install_approval(p: &PreparedInstall) {
    let (rules, source) = match approval_rules(None) {
        Ok(found) => found,
        Err(e) => (
            ApprovalConfig::default(),
            format!("the built-in rules only, since ./cordon.toml cannot be used: {e:#}"),
        ),
    };
    let grants: Vec<String> = p.record().grants.iter().map(|g| g.to_string()).collect();
    let can_change = p.record().grants.can_change_anything();
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for tool in p.tools() {
        let spec = ToolSpec::from_descriptor(tool.clone(), p.name(), grants.clone(), can_change);
        let line = describe_default(&grant_default(&rules, &spec));
        match groups.iter_mut().find(|(l, _)| *l == line) {
            Some((_, tools)) => tools.push(&tool.name),
            None => groups.push((line, vec![&tool.name])),
        }
    }
    outln!("  approval (in a conversation, with {source}):");
    for (line, tools) in groups {
        outln!("    {}: {line}", tools.join(", "));
    }
}

fn list(home: &Home) -> anyhow::Result<()> {
    let lock = home.read()?;
    if lock.plugins.is_empty() {
        outln!(
            "No plugins installed in {}. Install one with `cordon plugin install <file.wasm>`.",
            home.root().display()
        );
        return Ok(());
    }
    let width = lock
        .plugins
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(4)
        .max(6);
    outln!(
        "{:width$}  {:12}  {:>5}  GRANTS",
        "PLUGIN",
        "DIGEST",
        "TOOLS"
    );
    for (name, r) in &lock.plugins {
        let grants = if r.grants.is_empty() {
            "none".to_string()
        } else {
            r.grants
                .iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let provenance = match (&r.signed_by, r.unsigned) {
            (Some(by), _) => format!("  (signed by `{}`)", by.key),
            (None, true) => "  (unsigned)".to_string(),
            (None, false) => String::new(),
        };
        outln!(
            "{name:width$}  {:12}  {:>5}  {grants}{provenance}",
            short_digest(&r.digest),
            r.tools.len()
        );
    }
    Ok(())
}

async fn inspect(home: &Home, name: &str, config: Option<&Path>) -> anyhow::Result<()> {
    let found = ConfigInUse::find(config)?;
    let source = found.rules_words();
    let lock = home.read()?;
    let record: &PluginRecord = lock.plugin(name)?;
    outln!("Plugin `{name}`");
    outln!("  digest:  {}", record.digest);
    outln!("  source:  {}", record.source);
    if let Some(manifest) = &record.oci_manifest {
        outln!("  manifest: {manifest}");
    }
    outln!("  signed:  {}", signature_words(record));
    outln!("  installed: {}", record.installed_at);
    print_imports(&record.imports);
    print_ceiling(&record.ceiling());
    print_grants(&record.grants);
    let values = home.config_keys(name)?;
    if !values.is_empty() {
        outln!(
            "  config values kept for: {} (never shown)",
            values.join(", ")
        );
    }
    print_expiring(&record.expiring);
    let limits = record.limits()?;
    let shown: Vec<String> = LimitKind::ALL
        .into_iter()
        .map(|k| {
            let mark = if record.limits.contains_key(k.key()) {
                " (set)"
            } else {
                ""
            };
            format!("{}={}{mark}", k.key(), limits.describe(k))
        })
        .collect();
    outln!("  limits:  {}", shown.join("  "));

    let toolbox = Toolbox::load_plugin(home, name)
        .await
        .context("could not load the plugin to show its tools")?;
    if let Some((_, error)) = toolbox.unavailable().next() {
        return Err(anyhow::anyhow!("{error}"))
            .with_context(|| format!("plugin `{name}` cannot be used"));
    }
    if let Some(entry) = toolbox.tools().first() {
        print_unavailable(entry.unavailable_functions());
    }
    let policy = crate::policy::for_inspect(home, &found).await;
    outln!("tools:");
    outln!("  (approval: what `cordon chat`/`run` here would do, with {source})");
    for entry in toolbox.tools() {
        let spec = spec_for(entry, model_name(&entry.call_name));
        let approval = describe_default(&grant_default(&found.config.approval, &spec));
        let rules = policy
            .as_ref()
            .map(|p| crate::policy::rules_words(p, &spec.identity()));
        print_tool(&entry.call_name, &entry.descriptor, &approval, rules);
    }
    Ok(())
}
