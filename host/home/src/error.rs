//! Everything that can go wrong in the home, each message naming what was wrong and what to do.

use std::path::PathBuf;

use cordon_core::{CeilingError, GrantError, LimitError};
use cordon_runtime::{CallError, RuntimeError};

/// An error from a home operation. Every variant says what was wrong and, where there is one,
/// what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// A filesystem operation failed.
    #[error("could not {action} {}: {source}", .path.display())]
    Io {
        /// What was being done ("read", "create directory", ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No home directory could be determined.
    #[error("cannot find a place for the Cordon home: set CORDON_HOME or pass --home <DIR>")]
    NoHomeDir,
    /// `plugins.toml` could not be parsed; nothing is changed until it is repaired.
    #[error(
        "{} is not a valid Cordon lock file: {reason}\nFix the file by hand or restore it from a backup; Cordon will not overwrite it.",
        .path.display()
    )]
    CorruptLockFile {
        /// The lock file's path.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// The component file to install does not exist.
    #[error("no file at {}: check the path (or give an https:// URL with --sha256)", .path.display())]
    SourceNotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// A bare name (`cordon plugin install sql`) that no bundled tool has.
    #[error(
        "no bundled tool is named `{name}` (looked for {name}.wasm in {}){}; give a path to a \
         .wasm file, an https:// URL or an oci:// reference instead",
        .searched.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        list_suffix("bundled tools", .available)
    )]
    UnknownBundled {
        /// The name as given.
        name: String,
        /// The directories looked in.
        searched: Vec<PathBuf>,
        /// The bundled tools found there.
        available: Vec<String>,
    },
    /// The file to install exists but cannot be a component.
    #[error("{} cannot be installed: {reason}", .path.display())]
    NotAComponentFile {
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The file to publish cannot be a component.
    #[error("{} cannot be pushed: {reason}", .path.display())]
    NotPushable {
        /// The path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The URL to install from is not acceptable.
    #[error("cannot install from `{url}`: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why not.
        reason: String,
    },
    /// A URL install without `--sha256`.
    #[error(
        "installing from a URL needs the component's digest: add --sha256 <64 hex digits> \
         (e.g. from `sha256sum` of a copy you trust) for {url}"
    )]
    DigestRequired {
        /// The URL as given.
        url: String,
    },
    /// A `--sha256` value that is not a SHA-256 digest.
    #[error("`{given}` is not a SHA-256 digest: give 64 hex digits, optionally prefixed `sha256:`")]
    BadDigest {
        /// The value as given.
        given: String,
    },
    /// A signature must be checked, and no key is trusted to check it with.
    #[error(
        "{source_name} must carry a valid signature from a key you trust, and you trust no keys \
         yet: add the publisher's public key with `cordon trust add KEY.pub`{waiver}"
    )]
    NoTrustedKeys {
        /// What was being installed.
        source_name: String,
        /// How to install without a signature, where that is allowed.
        waiver: String,
    },
    /// A registry artifact carries no signature at all.
    #[error(
        "{reference} ({manifest}) is not signed: the registry has nothing under its signature tag \
         `{tag}`. Ask the publisher to sign it (`cordon plugin sign` or `cosign sign --key`), or \
         install it with --allow-unsigned to accept it unsigned (the lock records that). Nothing \
         was installed"
    )]
    Unsigned {
        /// The `oci://` reference.
        reference: String,
        /// The manifest digest whose signature was looked for.
        manifest: String,
        /// The tag signatures are stored under.
        tag: String,
    },
    /// Signatures exist, but none is a valid one of this artifact by a trusted key.
    #[error(
        "{source_name} has {count} signature(s), but none is a valid signature of it by a key you \
         trust (trusted: {trusted}){problems}. Nothing was installed"
    )]
    UntrustedSignature {
        /// What was being installed, with its digest.
        source_name: String,
        /// How many signatures were found.
        count: usize,
        /// The names of the trusted keys tried.
        trusted: String,
        /// Why particular signatures were rejected, if anything more specific than "no
        /// trusted key verifies it" is known.
        problems: String,
    },
    /// `plugin update` was asked for a plugin that did not come from a registry.
    #[error(
        "`{name}` was installed from {source_name}, not from a registry, so it has no tag to \
         follow; install the new version with `cordon plugin install`"
    )]
    NotFromRegistry {
        /// The plugin name.
        name: String,
        /// Where it came from.
        source_name: String,
    },
    /// A tag now names a manifest the plugin had before: a rollback, refused unless asked for.
    #[error(
        "`{name}`: {source_name} now names {to}, a manifest this plugin had {versions_back} \
         version(s) ago (it has {from} now). A tag moved back to an older release can bring back \
         a flaw fixed since. Nothing was changed; to go back to it anyway, run this again with \
         --allow-rollback"
    )]
    Rollback {
        /// The plugin name.
        name: String,
        /// Where the new version comes from.
        source_name: String,
        /// The manifest installed now.
        from: String,
        /// The earlier manifest the tag names again.
        to: String,
        /// How many versions ago the plugin had it (1: the one before the current).
        versions_back: usize,
    },
    /// The new version is signed by another key than the installed one: refused unless asked
    /// for, since a key trusted for some plugins is not thereby the publisher of this one.
    #[error(
        "`{name}`: {source_name} is signed by {new_signer}, not by {old_signer}, who signed the \
         version installed. A key you trust for other plugins is not the publisher of this one \
         unless you say so. Nothing was changed; if {new_signer} now publishes `{name}`, run \
         this again with --allow-new-signer"
    )]
    NewSigner {
        /// The plugin name.
        name: String,
        /// Where the new version comes from.
        source_name: String,
        /// The key that signed the installed version: `name` (fingerprint).
        old_signer: String,
        /// The key that signed the new one, likewise.
        new_signer: String,
    },
    /// A `trust add --for` pattern that cannot be used.
    #[error(
        "`{pattern}` is not a repository pattern: {reason}. Write REGISTRY/PATH, where `*` \
         matches within one path segment and `**` any number of them (ghcr.io/alice/*)"
    )]
    BadRepositoryPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key file cannot be used.
    #[error("{} is not a usable key: {reason}", .path.display())]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// No trusted key has this name.
    #[error("no trusted key is named `{name}`; `cordon trust list` shows them")]
    UnknownKey {
        /// The name given.
        name: String,
    },
    /// The key is trusted already, or the name is taken.
    #[error("{reason}")]
    KeyConflict {
        /// What clashes, and what to do.
        reason: String,
    },
    /// A signature was given where none can be checked.
    #[error("{reason}")]
    SignatureMisplaced {
        /// Why, and what to do.
        reason: String,
    },
    /// An environment variable Cordon reads has a value it cannot use.
    #[error("{name}=`{value}` cannot be used: {reason}")]
    BadSetting {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// Why not, and what to give instead.
        reason: String,
    },
    /// A registry could not be reached or refused a request.
    #[error("registry error for {reference}: {reason}")]
    Registry {
        /// The `oci://` reference.
        reference: String,
        /// What went wrong.
        reason: String,
    },
    /// The artifact is not a Wasm component as Cordon reads them.
    #[error("{reference} is not a Wasm component artifact: {reason}. Nothing was installed")]
    NotAWasmArtifact {
        /// The `oci://` reference.
        reference: String,
        /// What it is instead.
        reason: String,
    },
    /// The download failed.
    #[error("could not download {url}: {reason}")]
    Download {
        /// The URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The bytes do not have the pinned digest; nothing was installed.
    #[error(
        "digest mismatch for {source_name}: expected {expected}, got {actual}. Nothing was \
         installed; check that the --sha256 value and the source are the ones you trust"
    )]
    DigestMismatch {
        /// The file or URL.
        source_name: String,
        /// The pinned digest.
        expected: String,
        /// The digest of what was received.
        actual: String,
    },
    /// The runtime refused the component (not a component, unsupported imports, ...).
    #[error("{source_name} is not a usable Cordon plugin: {source}")]
    Load {
        /// The file, URL or plugin name.
        source_name: String,
        /// The runtime's reason.
        #[source]
        source: RuntimeError,
    },
    /// The sandbox runtime itself could not start.
    #[error("cannot start the sandbox runtime: {0}")]
    Runtime(#[source] RuntimeError),
    /// The component's `list-tools` failed.
    #[error("{source_name}: listing its tools failed: {source}")]
    ListTools {
        /// The file, URL or plugin name.
        source_name: String,
        /// The call's error.
        #[source]
        source: CallError,
    },
    /// The component's tool list breaks the contract in `wit/tool.wit`.
    #[error("{source_name} offers an invalid tool list: {reason}")]
    BadToolList {
        /// The file, URL or plugin name.
        source_name: String,
        /// What is wrong (bad name, duplicate, invalid schema ...).
        reason: String,
    },
    /// The home's `config-values.toml` cannot be used.
    #[error(
        "the configuration values in {} cannot be read: {reason}; fix or remove the file \
         (values are set again with `cordon plugin config`)",
        path.display()
    )]
    BadConfigValues {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A value cannot be set or removed.
    #[error("cannot set configuration key `{key}`: {reason}")]
    BadConfigValue {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A Wassette policy cannot be read or translated.
    #[error("cannot use the Wassette policy {}: {reason}", path.display())]
    WassettePolicy {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry.
        reason: String,
    },
    /// An edits file (`--describe`, or a sidecar `NAME.tools.toml`) cannot be used.
    #[error(
        "cannot use the tool descriptions in {}: {reason}; write TOML with `hide = [\"TOOL\"]` \
         and `[tools.TOOL]` tables of `description`, `params`, `read_only`, `destructive`, \
         `idempotent`, `open_world`",
        path.display()
    )]
    BadEditsFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The tool edits of an install do not fit the component's tools.
    #[error("{source_name}: the tool edits {from} do not fit its tools: {source}")]
    ToolEdits {
        /// The file, URL or plugin name.
        source_name: String,
        /// Where the edits came from (`in FILE`, `given with --hide`, `kept from the installed plugin`).
        from: String,
        /// What does not fit.
        source: cordon_core::ToolEditError,
    },
    /// Every tool of the component would be hidden.
    #[error("{source_name}: every tool would be hidden ({hidden}); leave at least one")]
    AllToolsHidden {
        /// The file, URL or plugin name.
        source_name: String,
        /// The hidden tools, comma-separated.
        hidden: String,
    },
    /// An invalid plugin name.
    #[error(
        "`{name}` is not a valid plugin name: {reason}. Use lowercase letters, digits, `-` and \
         `_`, starting with a letter (pass --name to choose one)"
    )]
    BadPluginName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No plugin of that name is installed.
    #[error("no plugin named `{name}` is installed{}", list_suffix("installed plugins", .installed))]
    UnknownPlugin {
        /// The name as given.
        name: String,
        /// What is installed.
        installed: Vec<String>,
    },
    /// A grant could not be parsed or its directory cannot be granted.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// A grant the component could never use.
    #[error(transparent)]
    Ceiling(#[from] CeilingError),
    /// A limit override could not be parsed.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// A recorded grant reaches Cordon's own state: a host does not start with it.
    #[error(
        "plugin `{plugin}`'s grant `{grant}` cannot be used: {source}. Nothing was started; \
         revoke it (`cordon revoke {plugin} {revoke}`) or keep that state elsewhere"
    )]
    ReservedGrant {
        /// The plugin.
        plugin: String,
        /// The grant as recorded.
        grant: String,
        /// What to pass to `cordon revoke`.
        revoke: String,
        /// What it reaches.
        #[source]
        source: Box<GrantError>,
    },
    /// Revoking something that was not granted.
    #[error("plugin `{plugin}` has no grant matching `{grant}`{}", list_suffix("its grants", .granted))]
    NotGranted {
        /// The plugin.
        plugin: String,
        /// The pattern as given.
        grant: String,
        /// What it does have.
        granted: Vec<String>,
    },
    /// An upgrade needs confirmation but there is nobody to ask.
    #[error(
        "plugin `{name}` is already installed with a different component; re-run with --yes to \
         replace it (review the differences above first)"
    )]
    ConfirmationRequired {
        /// The plugin.
        name: String,
    },
    /// An install that changes what was shown above (a Wassette policy's grants, new tool
    /// edits) needs confirmation but there is nobody to ask.
    #[error(
        "installing `{name}` {what} needs your confirmation; re-run with --yes (review the \
         changes above first)"
    )]
    InstallConfirmationRequired {
        /// The plugin.
        name: String,
        /// What needs it: `with the grants its Wassette policy gives`, `with new tool edits`.
        what: &'static str,
    },
    /// The user answered no.
    #[error("kept the installed `{name}`; nothing was changed")]
    Declined {
        /// The plugin.
        name: String,
    },
    /// An installed component is missing or its bytes changed since install.
    #[error(
        "plugin `{plugin}`: {reason}. Refusing to run it; reinstall it with \
         `cordon plugin install <file> --name {plugin}`"
    )]
    Tampered {
        /// The plugin.
        plugin: String,
        /// What differs.
        reason: String,
    },
    /// No tool by that name.
    #[error("no tool named `{name}`{}", list_suffix("available tools", .available))]
    UnknownTool {
        /// The name as given.
        name: String,
        /// Every callable name.
        available: Vec<String>,
    },
    /// A bare tool name offered by several plugins.
    #[error(
        "several plugins offer a tool named `{name}`; call it as one of: {}",
        .candidates.join(", ")
    )]
    AmbiguousTool {
        /// The name as given.
        name: String,
        /// The qualified names.
        candidates: Vec<String>,
    },
    /// The arguments are not JSON (or not an object).
    #[error("arguments for `{tool}` are not valid: {reason}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong with them, e.g. the schema rule broken and where.
        reason: String,
    },
    /// The arguments do not satisfy the tool's input schema.
    #[error(
        "arguments for `{tool}` do not match its input schema:\n  {}\n(see `cordon plugin inspect {plugin}` for the schema)",
        .errors.join("\n  ")
    )]
    SchemaViolation {
        /// The tool.
        tool: String,
        /// Its plugin.
        plugin: String,
        /// One line per violation, with the JSON pointer of the offending value.
        errors: Vec<String>,
    },
    /// The tool's plugin is installed but could not be loaded.
    #[error(transparent)]
    Unavailable(std::sync::Arc<HomeError>),
    /// The call itself failed (tool error, limit, trap).
    #[error("`{tool}` failed: {source}")]
    Call {
        /// The tool.
        tool: String,
        /// The sandbox's error for the call.
        #[source]
        source: CallError,
    },
}

fn list_suffix(what: &str, items: &[String]) -> String {
    if items.is_empty() {
        format!(" ({what}: none)")
    } else {
        format!(" ({what}: {})", items.join(", "))
    }
}

impl HomeError {
    /// Whether the error is the user's input rather than a failure of Cordon or a plugin; the
    /// CLI exits with status 2 for these and 1 otherwise.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            HomeError::SourceNotFound { .. }
                | HomeError::UnknownBundled { .. }
                | HomeError::BadUrl { .. }
                | HomeError::DigestRequired { .. }
                | HomeError::BadDigest { .. }
                | HomeError::NoTrustedKeys { .. }
                | HomeError::BadKey { .. }
                | HomeError::NotFromRegistry { .. }
                | HomeError::Rollback { .. }
                | HomeError::NewSigner { .. }
                | HomeError::BadRepositoryPattern { .. }
                | HomeError::UnknownKey { .. }
                | HomeError::KeyConflict { .. }
                | HomeError::SignatureMisplaced { .. }
                | HomeError::NotPushable { .. }
                | HomeError::BadSetting { .. }
                | HomeError::BadPluginName { .. }
                | HomeError::BadEditsFile { .. }
                | HomeError::WassettePolicy { .. }
                | HomeError::BadConfigValue { .. }
                | HomeError::ToolEdits { .. }
                | HomeError::AllToolsHidden { .. }
                | HomeError::UnknownPlugin { .. }
                | HomeError::Grant(_)
                | HomeError::ReservedGrant { .. }
                | HomeError::Ceiling(_)
                | HomeError::Limit(_)
                | HomeError::NotGranted { .. }
                | HomeError::ConfirmationRequired { .. }
                | HomeError::InstallConfirmationRequired { .. }
                | HomeError::UnknownTool { .. }
                | HomeError::AmbiguousTool { .. }
                | HomeError::InvalidArguments { .. }
                | HomeError::SchemaViolation { .. }
        )
    }
}
