//! The tools a client is offered, as MCP describes them: reloaded when the installed tools
//! change, with annotations Cordon derives from each tool's grants (never the plugin's own
//! claims), and a digest of the whole list so a change can be announced.

use std::collections::BTreeMap;
use std::sync::Arc;

use cordon_agent::approval::{Standing, decide};
use cordon_agent::cordon_policy::PolicyConfig;
use cordon_agent::{ApprovalConfig, Policy, ToolHost, ToolSource, ToolSpec};
use cordon_core::CompiledSchema;
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, watch};

/// One tool a client may call.
pub struct Offered {
    /// What the engine knows of it (identity, grants, proven hints).
    pub spec: ToolSpec,
    /// Its input schema, compiled, so arguments are checked before anyone is asked or the
    /// sandbox starts.
    pub schema: CompiledSchema,
}

/// The tools of one load of the tool source.
pub struct Catalog {
    /// The source's stamp when loaded.
    pub stamp: String,
    /// Runs the calls.
    pub host: Arc<dyn ToolHost>,
    /// The per-call policy for these tools, or why it does not load.
    pub policy: Result<Arc<cordon_agent::cordon_policy::Policy>, String>,
    /// By the name clients call them.
    pub offered: BTreeMap<String, Offered>,
    /// What `tools/list` returns.
    pub listed: Arc<Vec<Tool>>,
    /// The sha256 of `listed`: changes exactly when what clients see changes.
    pub digest: String,
    /// Tools left out, with why (a schema that does not compile).
    pub left_out: Vec<String>,
}

impl Catalog {
    /// The catalog of `host`'s tools that `approval` and `policy` do not deny.
    pub fn new(
        stamp: String,
        host: Arc<dyn ToolHost>,
        approval: &ApprovalConfig,
        policy: &PolicyConfig,
    ) -> Self {
        let mut offered = BTreeMap::new();
        let mut listed = Vec::new();
        let mut left_out = Vec::new();
        let specs = host.tools();
        let policy = cordon_agent::policy::load_or_last(policy, &specs);
        if let Err(e) = &policy {
            left_out.push(format!(
                "the [policy] does not load, so every call is asked: {e}"
            ));
        }
        for spec in specs {
            // Policy decides with no answers given: a tool cordon.toml denies is not offered,
            // nor one a policy rule denies whatever its arguments.
            let none = Standing {
                answers: &BTreeMap::new(),
                requester: None,
                labels: &cordon_core::labels::NO_LABELS,
            };
            let always_denied = policy
                .as_ref()
                .ok()
                .and_then(|p| p.denies_every_call(&spec.identity()));
            if decide(approval, none, &spec, None).policy == Policy::Deny || always_denied.is_some()
            {
                continue;
            }
            let schema = match CompiledSchema::compile(&spec.input_schema) {
                Ok(schema) => schema,
                Err(e) => {
                    left_out.push(format!(
                        "tool `{}` of plugin `{}` is not offered: its input schema is not valid JSON Schema ({e})",
                        spec.tool, spec.plugin
                    ));
                    continue;
                }
            };
            listed.push(describe(&spec));
            offered.insert(spec.name.clone(), Offered { spec, schema });
        }
        let digest = hex::encode(Sha256::digest(
            serde_json::to_vec(&listed).unwrap_or_default(),
        ));
        Self {
            stamp,
            host,
            policy,
            offered,
            listed: Arc::new(listed),
            digest,
            left_out,
        }
    }

    /// The names clients can call, for messages.
    pub fn names(&self) -> String {
        if self.offered.is_empty() {
            return "none (install one with `cordon plugin install`)".to_string();
        }
        self.offered.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// How a tool is described to MCP clients. The annotations are what Cordon can prove from
/// the tool's effective grants ([`cordon_core::ProvenHints`]); all four are always stated,
/// since MCP reads a missing `destructiveHint` as `true` and a missing `openWorldHint` as
/// `true`, and they never contradict each other (read-only is never destructive): clients
/// approve calls on them without asking. What the plugin's author claimed is in `_meta`
/// (`cordon/declaredHints`), for people to compare, never in the annotations. A tool that
/// declared an output schema has it as `outputSchema`.
pub fn describe(spec: &ToolSpec) -> Tool {
    let schema: JsonObject = match &spec.input_schema {
        Value::Object(map) => map.clone(),
        // Plugins' schemas are objects (checked at install); anything else takes any object.
        _ => serde_json::Map::from_iter([("type".to_string(), json!("object"))]),
    };
    let title = format!("{} ({})", spec.tool, spec.plugin);
    let mut annotations = ToolAnnotations::default();
    annotations.title = Some(title.clone());
    annotations.read_only_hint = Some(spec.proven.read_only);
    annotations.destructive_hint = Some(spec.proven.destructive);
    annotations.idempotent_hint = Some(spec.proven.idempotent);
    annotations.open_world_hint = Some(spec.proven.open_world);
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    );
    tool.title = Some(title);
    tool.annotations = Some(annotations);
    if let Some(Value::Object(output)) = &spec.output_schema {
        tool.output_schema = Some(Arc::new(output.clone()));
    }
    let mut meta = serde_json::Map::new();
    meta.insert("cordon/plugin".into(), json!(spec.plugin));
    meta.insert("cordon/grants".into(), json!(spec.grants));
    meta.insert(
        "cordon/declaredHints".into(),
        json!({
            "readOnlyHint": spec.hints.read_only,
            "destructiveHint": spec.hints.destructive,
            "idempotentHint": spec.hints.idempotent,
            "openWorldHint": spec.hints.open_world,
        }),
    );
    if !spec.digest.is_empty() {
        meta.insert("cordon/digest".into(), json!(spec.digest));
    }
    tool.meta = Some(MetaObject(meta));
    tool
}

/// The current catalog of a tool source, reloaded when the source's stamp changes.
pub struct Catalogs {
    source: Arc<dyn ToolSource>,
    approval: ApprovalConfig,
    policy: PolicyConfig,
    current: Mutex<Option<Arc<Catalog>>>,
    /// The digest of the list last loaded; changes whenever a load finds the list different
    /// from the one before, whoever made it load (a client's request or the watcher), so no
    /// change a client may have seen goes unannounced.
    listed: watch::Sender<String>,
}

impl Catalogs {
    /// Catalogs of `source` under the approval rules `approval`.
    pub fn new(
        source: Arc<dyn ToolSource>,
        approval: ApprovalConfig,
        policy: PolicyConfig,
    ) -> Self {
        Self {
            source,
            approval,
            policy,
            current: Mutex::new(None),
            listed: watch::Sender::new(String::new()),
        }
    }

    /// Follows changes to the tool list from now on.
    pub fn subscribe(&self) -> watch::Receiver<String> {
        let mut changes = self.listed.subscribe();
        changes.mark_unchanged();
        changes
    }

    /// The catalog for the tools installed now; loads them again only when they changed.
    pub async fn current(&self) -> Result<Arc<Catalog>, String> {
        let stamp = self.source.stamp();
        let mut current = self.current.lock().await;
        if let Some(catalog) = current.as_ref()
            && catalog.stamp == stamp
        {
            return Ok(catalog.clone());
        }
        let host = self.source.load().await?;
        let catalog = Arc::new(Catalog::new(stamp, host, &self.approval, &self.policy));
        for line in &catalog.left_out {
            tracing::warn!("{line}");
        }
        let first = current.is_none();
        *current = Some(catalog.clone());
        drop(current);
        self.listed.send_if_modified(|listed| {
            let changed = !first && *listed != catalog.digest;
            listed.clone_from(&catalog.digest);
            changed
        });
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_core::ProvenHints;

    fn spec(name: &str, proven: ProvenHints) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            tool: name.into(),
            description: format!("{name} things"),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            output_schema: None,
            hints: cordon_core::ToolHints {
                destructive: true,
                ..Default::default()
            },
            plugin: "p".into(),
            grants: vec!["read /data".into()],
            can_change_anything: !proven.read_only,
            digest: "sha256:ab".into(),
            proven,
            reach: Default::default(),
            exposure: Default::default(),
        }
    }

    #[test]
    fn every_annotation_is_stated_from_what_cordon_proves() {
        let ro = describe(&spec(
            "look",
            ProvenHints {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: false,
            },
        ));
        let v = serde_json::to_value(&ro).unwrap();
        assert_eq!(
            v["annotations"],
            json!({"title": "look (p)", "readOnlyHint": true, "destructiveHint": false,
                   "idempotentHint": true, "openWorldHint": false})
        );
        assert_eq!(v["inputSchema"]["properties"]["q"]["type"], "string");
        assert_eq!(v["_meta"]["cordon/grants"], json!(["read /data"]));
        assert_eq!(
            v["_meta"]["cordon/declaredHints"],
            json!({"readOnlyHint": false, "destructiveHint": true,
                   "idempotentHint": false, "openWorldHint": false})
        );
        // Nothing proven: not read-only, and the rest as proven (false is stated, not left out).
        let rw = serde_json::to_value(describe(&spec("w", ProvenHints::default()))).unwrap();
        assert_eq!(rw["annotations"]["readOnlyHint"], false);
        assert_eq!(rw["annotations"]["destructiveHint"], false);
        assert_eq!(rw["annotations"]["openWorldHint"], false);
    }
}
