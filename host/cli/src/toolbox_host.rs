//! The conversation engine's view of the installed plugins: [`ToolHost`] over the home's
//! [`Toolbox`], so every tool a model asks for runs in the same sandbox, under the same grants
//! and limits, as `cordon call`.

use std::collections::BTreeMap;

use std::sync::Arc;

use cordon_agent::{
    CancellationToken, Content, ToolFailure, ToolFailureKind, ToolHost, ToolSource, ToolSpec,
    async_trait,
};
use cordon_core::CallReport;
use cordon_home::{Home, HomeError, ToolEntry, Toolbox};
use cordon_runtime::CallError;
use serde_json::Value;

use crate::term::errln;

/// Installed tools offered to a model.
pub struct ToolboxHost {
    toolbox: Toolbox,
    /// The name the model sees for each tool of the toolbox, in the same order; `None` for a
    /// tool that is not offered because its name could not be told apart from another's.
    names: Vec<Option<String>>,
    /// Model-facing name → the tool's identity `plugin.tool`, which the toolbox resolves to
    /// exactly that plugin's tool whatever the tool is called elsewhere.
    call_names: BTreeMap<String, String>,
    /// What the user should know about the names (collisions, renames, tools left out).
    notices: Vec<String>,
    /// The home the toolbox came from, where grant requests are checked and grants given for
    /// a while or for good are recorded; `None` for a host that cannot give grants.
    home: Option<Home>,
    /// Expiring grants dropped from the lock when the toolbox loaded, not yet in the audit log.
    expired: std::sync::Mutex<Vec<(String, cordon_home::ExpiringGrant)>>,
}

impl ToolboxHost {
    /// Wraps a loaded toolbox; tools whose plugin failed its checks are simply not offered
    /// (the CLI reports them separately).
    pub fn new(toolbox: Toolbox) -> Self {
        let tools: Vec<ToolName> = toolbox
            .tools()
            .iter()
            .map(|entry| ToolName {
                plugin: entry.plugin.clone(),
                tool: entry.descriptor.name.clone(),
                call_name: entry.call_name.clone(),
            })
            .collect();
        let (names, notices) = model_names(&tools);
        let call_names = names
            .iter()
            .zip(&tools)
            .filter_map(|(name, t)| Some((name.clone()?, format!("{}.{}", t.plugin, t.tool))))
            .collect();
        Self {
            toolbox,
            names,
            call_names,
            notices,
            home: None,
            expired: Default::default(),
        }
    }

    /// This host, able to answer grant requests in `home`; expiring grants whose end has
    /// passed are dropped from its lock now, for the audit log (see [`ToolHost::take_expired`]).
    pub fn with_home(mut self, home: Home) -> Self {
        match home.prune_expired() {
            Ok(gone) => self.expired = std::sync::Mutex::new(gone),
            Err(e) => tracing::warn!("cannot drop ended grants from the lock: {e}"),
        }
        self.home = Some(home);
        self
    }

    /// The plugin of the tool the model calls `name`.
    fn plugin_of(&self, name: &str) -> Option<&str> {
        self.call_names
            .get(name)
            .and_then(|identity| identity.split_once('.'))
            .map(|(plugin, _)| plugin)
    }

    /// Plugins that were installed but could not be loaded, with the reason.
    pub fn unavailable(&self) -> Vec<(String, String)> {
        self.toolbox
            .unavailable()
            .map(|(plugin, error)| (plugin.to_string(), error.to_string()))
            .collect()
    }

    /// What the user should know about the names the model sees: tools several plugins
    /// offer (and the qualified names the model gets for them, which approval rules do not
    /// need), and tools renamed or left out because their names would collide.
    pub fn notices(&self) -> &[String] {
        &self.notices
    }
}

/// The engine's view of one toolbox entry, for approval decisions: `name` is the name the model
/// sees, `tool` and `plugin` the identity rules bind to.
pub fn spec_for(entry: &ToolEntry, name: String) -> ToolSpec {
    let mut spec = ToolSpec::from_descriptor(
        entry.descriptor.clone(),
        entry.plugin.clone(),
        entry.grants.iter().map(|g| g.to_string()).collect(),
        entry.can_change_anything,
    );
    spec.name = name;
    spec.digest = entry.digest.clone();
    spec.proven = cordon_core::ProvenHints::derive(&entry.grants, &entry.descriptor.hints);
    spec.reach = reach_of(&entry.grants, entry.can_change_anything);
    spec.exposure = cordon_core::Exposure::of(&entry.grants);
    spec
}

pub use cordon_agent::reach_of;

/// A name the chat APIs accept for a toolbox call name (`plugin.tool` → `plugin__tool`).
pub fn model_name(call_name: &str) -> String {
    call_name.replace('.', "__")
}

/// What names one tool: its plugin, its own name and the toolbox's call name (the bare name,
/// or `plugin.tool` when several plugins offer the tool).
#[derive(Debug, Clone)]
struct ToolName {
    plugin: String,
    tool: String,
    call_name: String,
}

/// The name the model sees for each tool, and notes for the user. `plugin.tool` becomes
/// `plugin__tool`, which is not one-to-one by itself: a tool may be called `files__read_file`
/// outright, and plugin and tool names may both contain `__`. So the names are made unique:
/// a bare name that another tool's qualified name also gives yields and is qualified in turn
/// (`evil__files__read_file`), and tools whose names still coincide are not offered at all, so
/// a call can never reach a tool other than the one the model was told about.
fn model_names(tools: &[ToolName]) -> (Vec<Option<String>>, Vec<String>) {
    let mut notices = Vec::new();
    let mut names: Vec<String> = tools.iter().map(|t| model_name(&t.call_name)).collect();
    let holders = |names: &[String], name: &str| names.iter().filter(|n| *n == name).count();
    let shared: Vec<usize> = (0..tools.len())
        .filter(|&i| holders(&names, &names[i]) > 1)
        .collect();
    for i in shared {
        let t = &tools[i];
        if t.call_name.contains('.') {
            continue;
        }
        let qualified = model_name(&format!("{}.{}", t.plugin, t.tool));
        notices.push(format!(
            "tool `{}` of plugin `{}` would be called `{}` by the model, like another plugin's \
             tool; the model sees it as `{qualified}`",
            t.tool, t.plugin, names[i]
        ));
        names[i] = qualified;
    }
    let mut offered: Vec<Option<String>> = names.iter().cloned().map(Some).collect();
    let mut refused: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        if holders(&names, name) > 1 {
            offered[i] = None;
            refused
                .entry(name)
                .or_default()
                .push(format!("`{}.{}`", tools[i].plugin, tools[i].tool));
        }
    }
    for (name, which) in refused {
        notices.push(format!(
            "the tools {} would all be called `{name}` by the model, so none of them is offered; \
             reinstall one of their plugins under another name (cordon plugin install <file> --name <new>)",
            which.join(", ")
        ));
    }
    // Tools several plugins offer: say what the model sees and how rules name them.
    let mut by_tool: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for (t, name) in tools.iter().zip(&offered) {
        if let Some(name) = name
            && t.call_name.contains('.')
        {
            by_tool.entry(&t.tool).or_default().push((&t.plugin, name));
        }
    }
    for (tool, offers) in by_tool {
        let plugins: Vec<String> = offers.iter().map(|(p, _)| format!("`{p}`")).collect();
        let seen: Vec<String> = offers.iter().map(|(_, n)| format!("`{n}`")).collect();
        notices.push(format!(
            "tool `{tool}` is offered by the plugins {}; the model sees it as {}. An approval \
             rule for `{tool}` applies to all of them, one for `{}.{tool}` to one plugin.",
            plugins.join(", "),
            seen.join(", "),
            offers[0].0
        ));
    }
    (offered, notices)
}

#[async_trait]
impl ToolHost for ToolboxHost {
    fn tools(&self) -> Vec<ToolSpec> {
        self.toolbox
            .tools()
            .iter()
            .zip(&self.names)
            .filter_map(|(entry, name)| Some(spec_for(entry, name.clone()?)))
            .collect()
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure> {
        self.call_reported(name, arguments, cancel).await.0
    }

    async fn call_reported(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> (Result<Vec<Content>, ToolFailure>, Option<CallReport>) {
        self.call_granted(name, arguments, &[], cancel).await
    }

    fn requestable(&self, name: &str, wanted: &[String]) -> Vec<String> {
        let (Some(home), Some(plugin)) = (&self.home, self.plugin_of(name)) else {
            return Vec::new();
        };
        wanted
            .iter()
            .filter_map(|w| match home.requestable(plugin, w) {
                Ok(grant) => Some(grant.to_string()),
                Err(e) => {
                    tracing::info!(%plugin, grant = %w, "not offered as a grant request: {e}");
                    None
                }
            })
            .collect()
    }

    async fn grant_for(
        &self,
        name: &str,
        grants: &[String],
        minutes: Option<u64>,
        by: &str,
    ) -> Result<Vec<String>, String> {
        let (Some(home), Some(plugin)) = (&self.home, self.plugin_of(name)) else {
            return Err("this host cannot record grants".to_string());
        };
        let duration = minutes.map(|m| std::time::Duration::from_secs(m.saturating_mul(60)));
        let mut lines = Vec::new();
        for g in grants {
            let change = home
                .grant_for(plugin, g, duration, by)
                .map_err(|e| e.to_string())?;
            lines.push(match minutes {
                Some(m) => format!("{} for {m} minutes", change.granted),
                None => change.granted.to_string(),
            });
        }
        Ok(lines)
    }

    fn lock_grants(&self, name: &str) -> Option<Vec<String>> {
        let (home, plugin) = (self.home.as_ref()?, self.plugin_of(name)?);
        let lock = match home.read() {
            Ok(lock) => lock,
            Err(e) => {
                tracing::warn!(%plugin, "cannot read the lock to check grants given through grant requests: {e}");
                return None;
            }
        };
        // A plugin no longer installed holds nothing.
        let Ok(record) = lock.plugin(plugin) else {
            return Some(Vec::new());
        };
        let now = cordon_core::now_ms();
        Some(
            record
                .grants
                .iter()
                .map(ToString::to_string)
                .chain(
                    record
                        .expiring
                        .iter()
                        .filter(|e| e.applies_at(now))
                        .map(|e| e.grant.to_string()),
                )
                .collect(),
        )
    }

    fn take_expired(&self) -> Vec<(String, String)> {
        let taken = std::mem::take(
            &mut *self
                .expired
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        taken
            .into_iter()
            .map(|(plugin, e)| {
                (
                    plugin,
                    format!("- {} (given by {} until {})", e.grant, e.by, e.until),
                )
            })
            .collect()
    }

    async fn call_granted(
        &self,
        name: &str,
        arguments: Value,
        grants: &[String],
        cancel: CancellationToken,
    ) -> (Result<Vec<Content>, ToolFailure>, Option<CallReport>) {
        let Some(identity) = self.call_names.get(name) else {
            let failure = ToolFailure::new(
                ToolFailureKind::NotFound,
                format!(
                    "there is no tool `{name}`; the tools are: {}",
                    self.call_names
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            return (Err(failure), None);
        };
        let mut given = Vec::new();
        for g in grants {
            // Checked again at every call, as when it was asked for: still within the ceiling
            // and clear of Cordon's own state, and still naming the directory the person saw
            // (a link put in its path since makes it fail, never follow).
            let checked = match (&self.home, self.plugin_of(name)) {
                (Some(home), Some(plugin)) => {
                    home.requestable(plugin, g).map_err(|e| e.to_string())
                }
                _ => Err("this host cannot give a call grants of its own".to_string()),
            };
            let as_given = g.parse::<cordon_core::Grant>();
            match (checked, as_given) {
                (Ok(resolved), Ok(parsed)) if resolved.same_access(&parsed) => given.push(resolved),
                (Ok(resolved), Ok(_)) => {
                    let failure = ToolFailure::new(
                        ToolFailureKind::Denied,
                        format!(
                            "the grant `{g}` given to this call now resolves to `{resolved}`; \
                             it was not used"
                        ),
                    );
                    return (Err(failure), None);
                }
                (Err(e), _) => {
                    let failure = ToolFailure::new(
                        ToolFailureKind::Denied,
                        format!("the grant `{g}` given to this call cannot be used: {e}"),
                    );
                    return (Err(failure), None);
                }
                (_, Err(e)) => {
                    let failure = ToolFailure::new(
                        ToolFailureKind::Denied,
                        format!("the grant `{g}` given to this call is not a grant: {e}"),
                    );
                    return (Err(failure), None);
                }
            }
        }
        // The sandbox stops the guest itself when `cancel` fires, and still reports the call.
        let (result, report) = self
            .toolbox
            .call_value_granted(identity, &arguments, &given, &cancel)
            .await;
        let result = match result {
            Err(HomeError::Call {
                source: CallError::Cancelled,
                ..
            }) => Err(ToolFailure::new(
                ToolFailureKind::Cancelled,
                format!("the call to `{name}` was cancelled while it ran"),
            )),
            other => other.map(|output| output.content).map_err(|e| failure(&e)),
        };
        (result, report)
    }
}

/// Turns a sandbox error into what the model reads: the category it can act on and a message
/// that names the limit, grant or argument involved.
pub fn failure(error: &HomeError) -> ToolFailure {
    let kind = match error {
        HomeError::Call { source, .. } => match source {
            CallError::Tool(tool_error) => return ToolFailure::from(tool_error.clone()),
            CallError::Denied(_) => ToolFailureKind::Denied,
            CallError::Cancelled => ToolFailureKind::Cancelled,
            CallError::LimitExceeded { .. }
            | CallError::Trapped(_)
            | CallError::Malformed(_)
            | CallError::NotKept(_) => ToolFailureKind::Failed,
        },
        HomeError::InvalidArguments { .. } => ToolFailureKind::InvalidArguments,
        HomeError::UnknownTool { .. } | HomeError::AmbiguousTool { .. } => {
            ToolFailureKind::NotFound
        }
        _ => ToolFailureKind::Failed,
    };
    ToolFailure::new(kind, error.to_string())
}

/// The home's installed plugins, reloaded when the lock file changes.
pub struct HomeTools {
    home: Home,
}

impl HomeTools {
    /// The installed plugins of `home`.
    pub fn new(home: Home) -> Self {
        Self { home }
    }
}

#[async_trait]
impl ToolSource for HomeTools {
    fn stamp(&self) -> String {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(self.home.lock_path()) {
            #[cfg(unix)]
            Ok(m) => format!(
                "{}:{}:{}:{}.{}",
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec()
            ),
            #[cfg(not(unix))]
            Ok(m) => format!("{}:{:?}", m.len(), m.modified().ok()),
            Err(_) => "absent".to_string(),
        }
    }

    async fn load(&self) -> Result<Arc<dyn ToolHost>, String> {
        let toolbox = Toolbox::load(&self.home).await.map_err(|e| e.to_string())?;
        let tools = ToolboxHost::new(toolbox).with_home(self.home.clone());
        for (plugin, reason) in tools.unavailable() {
            errln!("warning: plugin `{plugin}` is not offered: {reason}");
        }
        Ok(Arc::new(tools))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_become_function_names() {
        assert_eq!(model_name("sql_query"), "sql_query");
        assert_eq!(model_name("db.sql_query"), "db__sql_query");
    }

    fn named(plugin: &str, tool: &str, qualified: bool) -> ToolName {
        ToolName {
            plugin: plugin.into(),
            tool: tool.into(),
            call_name: if qualified {
                format!("{plugin}.{tool}")
            } else {
                tool.into()
            },
        }
    }

    #[test]
    fn a_shared_tool_name_is_reported_with_the_names_the_model_sees() {
        let (names, notices) = model_names(&[
            named("files", "read_file", true),
            named("files2", "read_file", true),
            named("sql", "sql_query", false),
        ]);
        assert_eq!(
            names,
            vec![
                Some("files__read_file".to_string()),
                Some("files2__read_file".to_string()),
                Some("sql_query".to_string())
            ]
        );
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].contains("`files__read_file`, `files2__read_file`")
                && notices[0].contains("rule for `read_file` applies to all of them"),
            "{}",
            notices[0]
        );
    }

    #[test]
    fn a_tool_named_like_another_plugins_qualified_tool_is_renamed() {
        // `evil` offers a tool literally called `files__read_file`.
        let (names, notices) = model_names(&[
            named("evil", "files__read_file", false),
            named("files", "read_file", true),
            named("files2", "read_file", true),
        ]);
        assert_eq!(
            names,
            vec![
                Some("evil__files__read_file".to_string()),
                Some("files__read_file".to_string()),
                Some("files2__read_file".to_string())
            ]
        );
        assert!(
            notices[0].contains("plugin `evil`") && notices[0].contains("`evil__files__read_file`"),
            "{notices:?}"
        );
    }

    #[test]
    fn names_that_still_coincide_are_not_offered() {
        // `a.b__c` and `a__b.c` both read `a__b__c`.
        let (names, notices) = model_names(&[
            named("a", "b__c", true),
            named("x", "b__c", true),
            named("a__b", "c", true),
            named("y", "c", true),
        ]);
        assert_eq!(
            names,
            vec![
                None,
                Some("x__b__c".to_string()),
                None,
                Some("y__c".to_string())
            ]
        );
        assert!(
            notices
                .iter()
                .any(|n| n.contains("`a.b__c`, `a__b.c`") && n.contains("none of them is offered")),
            "{notices:?}"
        );
        let unique: std::collections::BTreeSet<_> = names.iter().flatten().collect();
        assert_eq!(unique.len(), names.iter().flatten().count());
    }

    #[test]
    fn sandbox_errors_keep_their_category() {
        let denied = failure(&HomeError::Call {
            tool: "read_file".into(),
            source: CallError::Denied(cordon_runtime::Denial::Directory {
                dir: "/data".into(),
                reason: "is outside every grant".into(),
            }),
        });
        assert_eq!(denied.kind, ToolFailureKind::Denied);
        assert!(
            denied.message.contains("outside every grant"),
            "{}",
            denied.message
        );

        let limit = failure(&HomeError::Call {
            tool: "run_python".into(),
            source: CallError::Trapped("wasm trap: unreachable".into()),
        });
        assert_eq!(limit.kind, ToolFailureKind::Failed);
        assert!(limit.message.contains("unreachable"), "{}", limit.message);
    }
}
