//! The installed tools, verified against the lock file and ready to call under their grants.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use cordon_core::Content;
use cordon_core::{
    CallReport, CompiledPin, CompiledSchema, DigestCheck, Grant, Grants, LimitKind, Limits,
    ReservedPaths, ToolDescriptor, tools_hash, verify_file_digest,
};
use cordon_runtime::{CallError, CancellationToken, Plugin, Runtime, Sandbox, ToolOutput};
use serde_json::Value;

use crate::error::HomeError;
use crate::fsutil::HomeLock;
use crate::lockfile::{LockFile, PluginRecord};
use crate::{Home, digest_hex};

/// Compiles a tool's input schema; the error text says what is wrong with the schema.
pub(crate) fn compile_schema(schema: &Value) -> Result<CompiledSchema, String> {
    let Some(object) = schema.as_object() else {
        return Err("its input schema must be a JSON object".into());
    };
    if let Some(ty) = object.get("type")
        && ty != "object"
    {
        return Err(format!(
            "its input schema must describe a JSON object (`\"type\": \"object\"`), not {ty}"
        ));
    }
    CompiledSchema::compile(schema).map_err(|e| format!("its input schema is invalid: {e}"))
}

/// Compiles a tool's output schema (the runtime already checked it is an object schema); the
/// error text says what is wrong with it.
pub(crate) fn compile_output_schema(schema: &Value) -> Result<CompiledSchema, String> {
    CompiledSchema::compile(schema).map_err(|e| format!("its output schema is invalid: {e}"))
}

/// One callable tool with everything needed to decide about and run a call.
#[derive(Clone)]
pub struct ToolEntry {
    /// The plugin that offers it.
    pub plugin: String,
    /// `sha256:<hex>` of the plugin's component, as the lock file pins it (and as its bytes
    /// were checked to be when it was loaded): what an audit record names as the code that
    /// ran.
    pub digest: String,
    /// The name to call it by: the bare tool name when no other plugin offers one like it,
    /// else `plugin.tool`.
    pub call_name: String,
    /// What the plugin reported for it (name, description, schema, hints).
    pub descriptor: ToolDescriptor,
    /// The plugin's grants, exactly as the sandbox will apply them: its lasting grants and
    /// the expiring ones that had not ended when the tool was loaded.
    pub grants: Grants,
    /// The expiring grants among `grants`, with their ends (ms since the Unix epoch): a call
    /// that starts after an end runs without that grant, however long ago the tool loaded.
    pub ends: Vec<(Grant, i64)>,
    /// The plugin's lasting grants alone: what an expiring grant that replaced one of them
    /// (read-write over read-only at the same place) gives way to at its end.
    lasting: Grants,
    /// The plugin's effective limits.
    pub limits: Limits,
    /// Whether the plugin's effective capabilities let it change or send anything (a
    /// read-write path, any network, any environment variable). Derived from the grants the
    /// user gave, which the ceiling has already bounded — never from the plugin's own hints.
    /// Approval policies start from this.
    pub can_change_anything: bool,
    /// Compiled on first use: a one-shot call validates one tool, and compiling every schema
    /// of a plugin up front costs more than the call. The schemas were checked at install.
    schema: Arc<OnceLock<Result<CompiledSchema, String>>>,
    /// The output schema, compiled on the first result that is checked against it.
    output_schema: Arc<OnceLock<Result<CompiledSchema, String>>>,
    component: Plugin,
}

impl std::fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEntry")
            .field("plugin", &self.plugin)
            .field("digest", &self.digest)
            .field("call_name", &self.call_name)
            .field("grants", &self.grants)
            .field("can_change_anything", &self.can_change_anything)
            .finish_non_exhaustive()
    }
}

impl ToolEntry {
    /// The grants a call starting now runs with: `grants` without the expiring ones that have
    /// ended since the tool loaded, plus `extra`.
    pub fn grants_now(&self, extra: &[Grant]) -> Grants {
        let now = cordon_core::now_ms();
        let mut grants = if self.ends.iter().any(|(_, end)| now >= *end) {
            let mut grants = self.lasting.clone();
            for (g, end) in &self.ends {
                if now < *end {
                    grants.add(g.clone());
                }
            }
            grants
        } else {
            self.grants.clone()
        };
        for g in extra {
            grants.add(g.clone());
        }
        grants
    }

    /// The plugin's exported functions that are not tools (a component without Cordon's
    /// contract), and why.
    pub fn unavailable_functions(&self) -> &[cordon_runtime::Unavailable] {
        self.component.unavailable()
    }

    /// Checks arguments against the tool's input schema, listing every violation with the JSON
    /// pointer of the offending value.
    pub fn validate(&self, arguments: &Value) -> Result<(), HomeError> {
        if !arguments.is_object() {
            return Err(HomeError::InvalidArguments {
                tool: self.call_name.clone(),
                reason: format!(
                    "expected a JSON object such as {{\"name\": \"value\"}}, got {}",
                    json_kind(arguments)
                ),
            });
        }
        let schema = self
            .schema
            .get_or_init(|| compile_schema(&self.descriptor.input_schema))
            .as_ref()
            .map_err(|reason| HomeError::BadToolList {
                source_name: format!("plugin `{}`", self.plugin),
                reason: format!("tool `{}`: {reason}", self.descriptor.name),
            })?;
        schema
            .check(arguments)
            .map_err(|e| HomeError::SchemaViolation {
                tool: self.call_name.clone(),
                plugin: self.plugin.clone(),
                errors: e.violations().to_vec(),
            })
    }
}

/// The largest written JSON result checked against its tool's output schema: what a plugin may
/// return at once, and the most MCP sends whole as structured content (so whatever is sent
/// as structured content was checked); a larger one is checked for being JSON only.
const MAX_WRITTEN_CHECKED: u64 = 16 << 20;

impl ToolEntry {
    /// Checks a successful result against the tool's output schema, when it has one: the
    /// plugin promised exactly one JSON piece, an object the schema accepts, and clients (MCP's
    /// `structuredContent`) rely on that. Text pieces beside it are allowed. A result that
    /// breaks the promise is the plugin's fault, reported as a malformed result.
    fn check_result(&self, output: &ToolOutput) -> Result<(), CallError> {
        let Some(schema) = &self.descriptor.output_schema else {
            return Ok(());
        };
        let broken = |what: String| {
            CallError::Malformed(format!(
                "the result of tool `{}` does not match the output schema it declared: {what}",
                self.descriptor.name
            ))
        };
        let is_json = |p: &&Content| match p {
            Content::Json(_) => true,
            Content::Written(w) => w.is_json(),
            Content::Text(_) => false,
        };
        let mut json = output.content.iter().filter(is_json);
        let (Some(piece), None) = (json.next(), json.next()) else {
            let count = output.content.iter().filter(is_json).count();
            return Err(broken(format!(
                "it holds {count} JSON pieces, where exactly one is promised"
            )));
        };
        let read;
        let document = match piece {
            Content::Json(v) => v,
            // A written document is checked against the schema up to a size that is cheap to
            // hold parsed; a larger one only for being JSON (the runtime read it through).
            Content::Written(w) if w.len() <= MAX_WRITTEN_CHECKED => {
                read = w
                    .to_text()
                    .ok()
                    .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                    .ok_or_else(|| broken("its written JSON could not be read back".into()))?;
                &read
            }
            _ => return Ok(()),
        };
        let compiled = self
            .output_schema
            .get_or_init(|| compile_output_schema(schema))
            .as_ref()
            .map_err(|reason| broken(reason.clone()))?;
        compiled
            .check(document)
            .map_err(|violations| broken(violations.to_string()))
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The installed tools, loaded and verified: each component's bytes must match the digest in
/// the lock file and its tool list must match the recorded hash. A plugin that fails either
/// check is kept out, and calling one of its tools says why and to reinstall it.
pub struct Toolbox {
    tools: Vec<ToolEntry>,
    by_name: BTreeMap<String, usize>,
    unavailable: BTreeMap<String, Arc<HomeError>>,
    lock: LockFile,
    /// What no grant may overlap, checked again by every call.
    reserved: ReservedPaths,
    /// Where plugins' `wasi:config/store` values are kept, read as a call starts.
    config_values: std::path::PathBuf,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("tools", &self.tools)
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

impl Toolbox {
    /// Loads every installed plugin.
    pub async fn load(home: &Home) -> Result<Toolbox, HomeError> {
        Self::load_plugins(home, None).await
    }

    /// Loads only the plugin offering `tool` (a bare or `plugin.tool` name), so that one call
    /// does not pay for loading every plugin. Resolution errors (unknown, ambiguous) come from
    /// the lock file and list what exists.
    pub async fn load_for_tool(home: &Home, tool: &str) -> Result<Toolbox, HomeError> {
        let lock = home.read()?;
        let (plugin, _) = lock.resolve_tool(tool)?;
        Self::load_plugins(home, Some(&plugin)).await
    }

    /// Loads one installed plugin by name; an unknown name lists what is installed.
    pub async fn load_plugin(home: &Home, plugin: &str) -> Result<Toolbox, HomeError> {
        home.read()?.plugin(plugin)?;
        Self::load_plugins(home, Some(plugin)).await
    }

    async fn load_plugins(home: &Home, only: Option<&str>) -> Result<Toolbox, HomeError> {
        let guard = HomeLock::shared(home.root())?;
        let lock = LockFile::load(&home.lock_path())?;
        let runtime = home.runtime()?;
        let mut tools = Vec::new();
        let mut unavailable = BTreeMap::new();
        let mut compiled = Vec::new();
        for (name, record) in &lock.plugins {
            if only.is_some_and(|o| o != name) {
                continue;
            }
            match load_plugin(home, &runtime, &lock, name, record).await {
                Ok((mut entries, pin)) => {
                    tools.append(&mut entries);
                    if let Some(pin) = pin
                        && record.compiled.as_ref() != Some(&pin)
                    {
                        compiled.push((name.clone(), record.digest.clone(), pin));
                    }
                }
                Err(e) => {
                    tracing::warn!(plugin = %name, "plugin unavailable: {e}");
                    unavailable.insert(name.clone(), Arc::new(e));
                }
            }
        }
        drop(guard);
        if !compiled.is_empty() {
            record_compiled(home, compiled);
        }
        let by_name = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.call_name.clone(), i))
            .chain(
                tools
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("{}.{}", t.plugin, t.descriptor.name), i)),
            )
            .collect();
        Ok(Toolbox {
            tools,
            by_name,
            unavailable,
            lock,
            reserved: home.reserved().clone(),
            config_values: home.config_values_path(),
        })
    }

    /// Every tool that can be called, in plugin then tool order.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// Installed plugins that could not be loaded, with the reason (missing or changed
    /// component, changed tool list, ...).
    pub fn unavailable(&self) -> impl Iterator<Item = (&str, &HomeError)> {
        self.unavailable
            .iter()
            .map(|(n, e)| (n.as_str(), e.as_ref()))
    }

    /// Finds a tool by its call name or `plugin.tool`.
    pub fn resolve(&self, name: &str) -> Result<&ToolEntry, HomeError> {
        if let Some(&i) = self.by_name.get(name) {
            return Ok(&self.tools[i]);
        }
        // Not loaded: say why if the lock file knows it, else list what exists.
        match self.lock.resolve_tool(name) {
            Ok((plugin, _)) => match self.unavailable.get(&plugin) {
                Some(e) => Err(HomeError::Unavailable(e.clone())),
                None => Err(HomeError::UnknownTool {
                    name: name.to_string(),
                    available: self.tools.iter().map(|t| t.call_name.clone()).collect(),
                }),
            },
            Err(e @ HomeError::AmbiguousTool { .. }) => Err(e),
            Err(_) => Err(HomeError::UnknownTool {
                name: name.to_string(),
                available: self.lock.callable_names(),
            }),
        }
    }

    /// Parses `arguments` as JSON and calls the tool (see [`Toolbox::call_value`]).
    pub async fn call(&self, name: &str, arguments: &str) -> Result<ToolOutput, HomeError> {
        self.call_reported(name, arguments).await.0
    }

    /// [`Toolbox::call`], with the sandbox's report of the call (see
    /// [`Toolbox::call_value_reported`]); `None` also for arguments refused before they are
    /// parsed (too large, or not JSON).
    pub async fn call_reported(
        &self,
        name: &str,
        arguments: &str,
    ) -> (Result<ToolOutput, HomeError>, Option<CallReport>) {
        let parsed = self.resolve(name).and_then(|tool| {
            // Refuse oversized arguments before parsing them, not only before the sandbox runs.
            if arguments.len() as u64 > tool.limits.args {
                return Err(HomeError::Call {
                    tool: tool.call_name.clone(),
                    source: CallError::LimitExceeded {
                        limit: LimitKind::Args,
                        detail: format!(
                            "the arguments are {} bytes; the args limit is {}",
                            arguments.len(),
                            tool.limits.describe(LimitKind::Args)
                        ),
                    },
                });
            }
            serde_json::from_str::<Value>(arguments).map_err(|e| HomeError::InvalidArguments {
                tool: tool.call_name.clone(),
                reason: format!("not valid JSON ({e})"),
            })
        });
        match parsed {
            Ok(value) => {
                self.call_value_reported(name, &value, &CancellationToken::new())
                    .await
            }
            Err(e) => (Err(e), None),
        }
    }

    /// Validates the arguments against the tool's schema, then runs the tool in a fresh
    /// sandbox with its plugin's grants and limits.
    pub async fn call_value(&self, name: &str, arguments: &Value) -> Result<ToolOutput, HomeError> {
        self.call_value_reported(name, arguments, &CancellationToken::new())
            .await
            .0
    }

    /// [`Toolbox::call_value`], with what the sandbox measured and refused during the call
    /// (its duration, peak memory and refusals, see
    /// [`Plugin::call_tool_reported`](cordon_runtime::Plugin::call_tool_reported)) for an
    /// audit log. The report is `None` when the call never reached the sandbox: an unknown or
    /// unavailable tool, or arguments its schema refuses.
    ///
    /// `cancel` stops the call while it runs (see
    /// [`Sandbox::cancel`](cordon_runtime::Sandbox::cancel)).
    pub async fn call_value_reported(
        &self,
        name: &str,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> (Result<ToolOutput, HomeError>, Option<CallReport>) {
        self.call_value_granted(name, arguments, &[], cancel).await
    }

    /// [`Toolbox::call_value_reported`] with `extra` grants for this call only: what a person
    /// gave through a grant request for this call or this session. The caller checked them
    /// ([`Home::requestable`]); reserved state is refused by the sandbox whatever they say.
    pub async fn call_value_granted(
        &self,
        name: &str,
        arguments: &Value,
        extra: &[Grant],
        cancel: &CancellationToken,
    ) -> (Result<ToolOutput, HomeError>, Option<CallReport>) {
        let tool = match self.resolve(name).and_then(|tool| {
            tool.validate(arguments)?;
            Ok(tool)
        }) {
            Ok(tool) => tool,
            Err(e) => return (Err(e), None),
        };
        let grants = tool.grants_now(extra);
        // Read only for a plugin granted a key, so that a value set a moment ago applies.
        let config = if grants.config_keys().next().is_some() {
            match crate::config_values::values_of(&self.config_values, &tool.plugin) {
                Ok(values) => values,
                Err(e) => return (Err(e), None),
            }
        } else {
            Default::default()
        };
        let sandbox = Sandbox {
            grants,
            limits: tool.limits,
            env: Default::default(),
            config,
            reserved: self.reserved.clone(),
            cancel: cancel.clone(),
        };
        let (result, report) = tool
            .component
            .call_tool_reported(&sandbox, &tool.descriptor.name, &arguments.to_string())
            .await;
        let result = result
            .and_then(|output| tool.check_result(&output).map(|()| output))
            .map_err(|source| HomeError::Call {
                tool: tool.call_name.clone(),
                source,
            });
        (result, Some(report))
    }
}

/// Records in the lock file the compiled code plugins were just compiled into (or found under a
/// new stamp), so the next start loads it. Under the exclusive lock, and only for records that
/// still pin the same component; failing costs only a recompile next time.
fn record_compiled(home: &Home, compiled: Vec<(String, String, CompiledPin)>) {
    let result = home.update(|lock| {
        for (name, digest, pin) in &compiled {
            if let Some(record) = lock.plugins.get_mut(name)
                && record.digest == *digest
            {
                record.compiled = Some(pin.clone());
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        tracing::warn!(
            "cannot record compiled code in the lock file (it will be compiled again next time): {e}"
        );
    }
}

/// Loads one plugin's tools; also returns the pin of its compiled code as it is now.
async fn load_plugin(
    home: &Home,
    runtime: &Runtime,
    lock: &LockFile,
    name: &str,
    record: &PluginRecord,
) -> Result<(Vec<ToolEntry>, Option<CompiledPin>), HomeError> {
    let tampered = |reason: String| HomeError::Tampered {
        plugin: name.to_string(),
        reason,
    };
    // The component must still be the one the lock file pins. Its bytes are hashed only when
    // its stat differs from the last time they were (see `cordon_core::FileStamp`), and are
    // not read at all when the compile cache already holds code for that digest.
    let path = home.component_path(&record.digest);
    let hex = digest_hex(&record.digest);
    match verify_file_digest(&path, &home.verified_record_path(&record.digest), hex) {
        Ok(DigestCheck::Matches) => {}
        Ok(DigestCheck::Differs { actual }) => {
            return Err(tampered(format!(
                "its component file changed since install (expected {}, found sha256:{actual})",
                record.digest
            )));
        }
        Err(e) => {
            return Err(tampered(format!(
                "its component {} cannot be read ({e})",
                path.display()
            )));
        }
    }
    let component = runtime
        .load_digest(
            hex,
            record.compiled.as_ref(),
            &|| std::fs::read(&path),
            &|_| {},
        )
        .map_err(|source| HomeError::Load {
            source_name: format!("plugin `{name}`"),
            source,
        })?
        .named(name);
    let limits = record.limits()?;
    let descriptors = match recorded_tool_list(home, record) {
        Some(tools) => tools,
        None => {
            let tools =
                component
                    .list_tools(&limits)
                    .await
                    .map_err(|source| HomeError::ListTools {
                        source_name: format!("plugin `{name}`"),
                        source,
                    })?;
            let hash = tools_hash(&tools);
            if hash != record.tools_hash {
                return Err(tampered(format!(
                    "its tool list differs from the one recorded at install (hash {hash}, recorded {})",
                    record.tools_hash
                )));
            }
            tools
        }
    };
    let mut descriptors = record.edits.apply(descriptors);
    // A list recorded by an older Cordon may name a function no longer offered as a tool (a
    // toolchain's own export): it cannot be called, so it is not offered either.
    descriptors.retain(|d| component.offers_tool(&d.name) != Some(false));
    let now = cordon_core::now_ms();
    let ends: Vec<(Grant, i64)> = record
        .expiring
        .iter()
        .filter(|e| e.applies_at(now))
        .map(|e| (e.grant.clone(), e.until_ms()))
        .collect();
    let grants = crate::with_grants(
        record.grants.clone(),
        &ends.iter().map(|(g, _)| g.clone()).collect::<Vec<_>>(),
    );
    let can_change_anything = grants.can_change_anything();
    let pin = component.compiled_pin().cloned();
    let entries = descriptors
        .into_iter()
        .map(|descriptor| {
            let call_name = if lock.owners_of(&descriptor.name).len() > 1 {
                format!("{name}.{}", descriptor.name)
            } else {
                descriptor.name.clone()
            };
            ToolEntry {
                plugin: name.to_string(),
                digest: record.digest.clone(),
                call_name,
                descriptor,
                grants: grants.clone(),
                ends: ends.clone(),
                lasting: record.grants.clone(),
                limits,
                can_change_anything,
                schema: Arc::new(OnceLock::new()),
                output_schema: Arc::new(OnceLock::new()),
                component: component.clone(),
            }
        })
        .collect();
    Ok((entries, pin))
}

/// The tool list saved beside the component at install, if it is still there and still the
/// one the lock file's hash pins. The host always offers this list — a component cannot
/// change what the model is told about its tools after the user approved them — so asking the
/// component again is only needed when the saved copy is gone.
fn recorded_tool_list(home: &Home, record: &PluginRecord) -> Option<Vec<ToolDescriptor>> {
    let bytes = std::fs::read(home.tool_list_path(&record.digest)).ok()?;
    let tools: Vec<ToolDescriptor> = serde_json::from_slice(&bytes).ok()?;
    (tools_hash(&tools) == record.tools_hash).then_some(tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_must_be_valid_object_schemas() {
        compile_schema(&json!({"type": "object", "properties": {"p": {"type": "string"}}}))
            .unwrap();
        compile_schema(&json!({"properties": {}})).unwrap();
        assert!(compile_schema(&json!(true)).is_err());
        assert!(compile_schema(&json!({"type": "string"})).is_err());
        let e = compile_schema(&json!({"type": "object", "properties": {"p": {"type": 7}}}))
            .unwrap_err();
        assert!(e.contains("invalid"), "{e}");
    }
}
