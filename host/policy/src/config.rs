//! The `[policy]` table of `cordon.toml`: rules written one per line, Cedar files beside the
//! config, named counters and the time zone that `hours` and `days` mean.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a rule decides about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run the call without asking.
    Allow,
    /// Ask a human, showing the rule's reason.
    Ask,
    /// Refuse the call, giving the rule's reason to the model.
    Deny,
}

impl Decision {
    /// The word used in `cordon.toml` and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[policy]` in `cordon.toml`.
///
/// ```toml
/// [policy]
/// timezone = "Europe/Berlin"
/// files = ["cordon.cedar"]
/// rules = [
///   { id = "orders", tool = "sql.sql_execute", args = { sql = { glob = "INSERT INTO orders *" } }, decision = "allow" },
///   { id = "no-drop", tool = "sql.sql_execute", args = { sql = { regex = "(?i)\\bdrop\\b" } }, decision = "deny", reason = "nothing is dropped" },
/// ]
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The IANA time zone of `hours`, `days` and `context.time` (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Cedar policy files, relative to the directory of the config file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Counters Cedar policies read as `context.calls.NAME`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, CounterSpec>,
    /// The rules, in the order written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<toml::Spanned<Rule>>,
    /// Where the config was read from, so rules are named by file and line and `files` are
    /// found beside it. Set by whoever reads the file.
    #[serde(skip)]
    pub source: Option<ConfigSource>,
}

/// Where a config was read from is not part of what it says: two configs with the same
/// settings are equal wherever they came from.
impl PartialEq for PolicyConfig {
    fn eq(&self, other: &Self) -> bool {
        self.timezone == other.timezone
            && self.files == other.files
            && self.counters == other.counters
            && self.rules == other.rules
    }
}

impl PolicyConfig {
    /// Whether there is nothing to decide with: no rules, no files.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.files.is_empty()
    }
}

/// The text a config was read from.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// The file (or a name such as `--config` when it did not come from a file).
    pub path: PathBuf,
    /// Its whole text: rule spans are byte offsets into it.
    pub text: Arc<str>,
}

impl PartialEq for ConfigSource {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.text == other.text
    }
}

/// One rule: what it applies to, and what it decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name unique in the policy; audit records and `policy explain` use it.
    pub id: String,
    /// What the rule decides when it applies.
    pub decision: Decision,
    /// Shown to the human when asking, or given to the model when denying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Tools, as `plugin.tool` (one plugin's) or `tool` (that tool in every plugin).
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub tool: Names,
    /// Plugins by name.
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub plugin: Names,
    /// Tests on arguments, by path (`sql`, `options.mode`): a value to equal, or a table of
    /// tests (`equals`, `in`, `not_in`, `min`, `max`, `prefix`, `suffix`, `glob`, `regex`,
    /// `path`, `present`), all of which must hold.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, Value>,
    /// Where the call comes from: `cli`, `serve`, `mcp`, `mcp-http`, `gateway`.
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub origin: Names,
    /// The API token's name.
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub token: Names,
    /// The gateway's `user` (untrusted text the client sends).
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub user: Names,
    /// The MCP client's name (as it introduced itself: untrusted).
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub client: Names,
    /// Whether the tool's grants let it change anything (a read-write path, a network
    /// origin, an environment variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub can_change: Option<bool>,
    /// Whether the tool holds a read-write directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<bool>,
    /// Whether the tool holds a network grant (HTTP origin or TCP address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// How many earlier calls there must have been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<CallCount>,
    /// A tool (`plugin.tool`) a human approved a call of earlier in this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<String>,
    /// A tool no human has approved a call of in this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_approved: Option<String>,
    /// Labels the session must hold (all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Local time of day, `HH:MM-HH:MM` (may cross midnight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hours: Option<String>,
    /// Weekdays: `mon`…`sun`, or a range such as `mon-fri`.
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub days: Names,
    /// A further condition in Cedar, over the same `context` and `resource` as Cedar files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Calls the rule must apply to; checked when the policy loads.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<Example>,
    /// Calls the rule must not apply to; checked when the policy loads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_match: Vec<Example>,
}

/// One name or a list of names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Names {
    /// None given: the rule does not constrain this.
    #[default]
    None,
    /// One name.
    One(String),
    /// Any of several.
    Many(Vec<String>),
}

impl Names {
    /// Whether nothing was given.
    pub fn is_empty(&self) -> bool {
        match self {
            Names::None => true,
            Names::One(_) => false,
            Names::Many(v) => v.is_empty(),
        }
    }

    /// The names as a list.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Names::None => Vec::new(),
            Names::One(s) => vec![s.clone()],
            Names::Many(v) => v.clone(),
        }
    }
}

/// `calls = { of = "tool", within = "1h", at_least = 20 }`: the rule applies once there have
/// been that many calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallCount {
    /// What is counted and over which window.
    #[serde(flatten)]
    pub counter: CounterSpec,
    /// The rule applies when at least this many calls were counted before this one.
    pub at_least: u64,
}

/// What a counter counts: calls of the tool being called (`tool`), of its plugin
/// (`plugin`), or calls a rule applied to (`rule:ID`), over the last minutes or hours
/// (`30m`, `1h`, `1d`) or over the session (`session`), for everyone or per caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterSpec {
    /// `tool`, `plugin` or `rule:ID`.
    pub of: String,
    /// `session`, or a window such as `30m`, `1h`, `1d`.
    pub within: String,
    /// `all` (the default: every caller together) or `caller` (per token and user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<String>,
}

/// A call a rule's examples describe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// The tool (`plugin.tool`); may be left out when the rule names exactly one tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// The origin (default `cli`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The token name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The gateway user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The MCP client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Tools approved earlier in the session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved: Vec<String>,
    /// The session's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Counter values (by counter name, or `calls` for the rule's own count).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counts: BTreeMap<String, u64>,
    /// Local time `YYYY-MM-DDTHH:MM` in the policy's time zone (default: a Monday noon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The whole policy's decision for this call, checked too when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Decision>,
}
