//! What the audit log records: one [`AuditRecord`] per tool call, wherever it ran (`cordon
//! call`, a conversation, a served session), and one per change to the home (install, upgrade,
//! grant, revoke, limit, remove).
//!
//! Plain data, shared by the runtime (which measures a call: [`CallReport`]), the conversation
//! engine (which knows who approved a call), the home and the session store (which keeps the
//! records append-only). Arguments are recorded by their sha256 unless the host is configured
//! to keep them, since they may hold what the user would not want in a log.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What the sandbox measured and refused during one call. Filled in whether the call
/// succeeded or not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallReport {
    /// Wall-clock time of the call, from the sandbox being set up to the result, in
    /// milliseconds.
    pub duration_ms: f64,
    /// The largest amount of linear memory the instance held at once, in bytes.
    pub peak_memory: u64,
    /// What the sandbox refused the plugin, one line each (a path outside its grants, a write
    /// under a read-only grant, a host or address it was not granted), at most
    /// [`MAX_REFUSALS_RECORDED`]; `refusals_dropped` counts the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// Refusals beyond the first [`MAX_REFUSALS_RECORDED`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refusals_dropped: u64,
    /// The narrowest grants that would have allowed what was refused (`net:https://api.example`,
    /// `fs:/data/out:rw`), in grant syntax, at most [`MAX_GRANTS_WANTED`]: what a grant
    /// request may offer a person. Only refusals a grant can lift are here (not a path that
    /// escapes its grant through `..` or a link, nor a reserved address).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wanted: Vec<String>,
}

/// How a refusal line of a call's report begins when the plugin itself said which grant it
/// lacked (`cordon:tool/grant-wanted`), rather than the sandbox refusing something it saw.
pub const SAID_LACKED: &str = "the plugin says it lacked";

/// How many wanted grants one call's report keeps.
pub const MAX_GRANTS_WANTED: usize = 8;

/// How many refusals one call's report keeps: a plugin probing thousands of paths must not
/// make its audit record grow with them.
pub const MAX_REFUSALS_RECORDED: usize = 32;

impl CallReport {
    /// Notes one refusal, keeping at most [`MAX_REFUSALS_RECORDED`] lines (a line already kept
    /// is not kept twice); refusals past the cap are only counted.
    pub fn refuse(&mut self, what: impl Into<String>) {
        let what = what.into();
        if self.refused.contains(&what) {
            return;
        }
        if self.refused.len() < MAX_REFUSALS_RECORDED {
            self.refused.push(what);
        } else {
            self.refusals_dropped += 1;
        }
    }

    /// Notes a grant that would have allowed a refused access (see [`CallReport::wanted`]);
    /// kept once, at most [`MAX_GRANTS_WANTED`].
    pub fn want(&mut self, grant: impl Into<String>) {
        let grant = grant.into();
        if !self.wanted.contains(&grant) && self.wanted.len() < MAX_GRANTS_WANTED {
            self.wanted.push(grant);
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Which door it came through: `call`, `chat`, `run`, `serve`, `cli` (home changes).
    pub origin: String,
    /// The tool call or the change.
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// What an audit record is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditEntry {
    /// A tool call a model (or a user with `cordon call`) asked for, run or not.
    ToolCall(Box<ToolCallAudit>),
    /// A change to the home.
    HomeChange(HomeChangeAudit),
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallAudit {
    /// The session it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The turn of the session (0-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// Cordon's id of the call in its conversation (`c3`), or the client's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The client that asked for the call, as it named itself (an MCP client's name and
    /// version); absent for Cordon's own doors. Untrusted text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Who asked for the turn the call belongs to: the token a served request carried, and
    /// the end user an OpenAI client named. Absent for a user at the terminal (`origin` says
    /// which door) and for records written before requesters were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Requester>,
    /// The tool's own name (not the name the model saw).
    pub tool: String,
    /// The plugin that offers it; empty when the model named no installed tool.
    pub plugin: String,
    /// The sha256 of the plugin's component (`sha256:…`), empty when unknown.
    pub digest: String,
    /// sha256 of the arguments as the model sent them (hex).
    pub arguments_sha256: String,
    /// The arguments themselves, only when the host is configured to keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The grants in force for the call, as written on the command line.
    pub grants: Vec<String>,
    /// The approval decision: `auto`, `yes`, `always`, `no`, `never`, `refused`, `deny`, or
    /// `invalid` for a call refused before any decision (unknown tool, bad arguments).
    pub decision: String,
    /// Who or what made it: the policy and its reason, the user at the terminal, an API
    /// token's name.
    pub decided_by: String,
    /// The per-call policy rule that decided or asked, as `id (file:line)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_rule: Option<String>,
    /// The digest (`sha256:…`) of the per-call policy in force, when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// The labels the session held when the call was decided (`private`, `untrusted`; see
    /// [`crate::labels`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// What the sandbox measured and refused; absent for a call that never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<CallReport>,
}

/// How a call ended, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    /// It ran and returned a result.
    Ok,
    /// It ran (or was refused by the sandbox) and failed.
    Error {
        /// The category (`invalid_arguments`, `not_found`, `denied`, `failed`, `cancelled`,
        /// `limit`, `interrupted`).
        kind: String,
        /// The message.
        message: String,
    },
    /// It did not run: denied by policy or by a person, or invalid.
    NotRun {
        /// Why.
        reason: String,
    },
}

impl CallOutcome {
    /// A short word for tables and filters: `ok`, the error kind, or `not_run`.
    pub fn label(&self) -> &str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Error { kind, .. } => kind,
            CallOutcome::NotRun { .. } => "not_run",
        }
    }
}

/// One change to the home.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HomeChangeAudit {
    /// `install`, `upgrade`, `grant`, `revoke`, `limit` or `remove`.
    pub action: String,
    /// The plugin changed.
    pub plugin: String,
    /// Its component's digest after the change (before it, for `remove`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// What changed, one line each (grants added or removed, limits set, tools added).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// Who made it (the operating-system user running the command).
    pub by: String,
}

/// The sha256 (hex) of a call's arguments, over their compact JSON text, so the same
/// arguments always hash the same whatever whitespace the model used.
pub fn arguments_sha256(arguments: &Value) -> String {
    // Canonical, so equal arguments have one digest whatever order their keys came in.
    let mut text = String::new();
    crate::tool::canonical_json(arguments, &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Who runs this process, for records of what a person did at a terminal: the login name from
/// the environment, else `a local user`.
pub fn local_user() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .map(|u| format!("user `{u}`"))
        .unwrap_or_else(|| "a local user".to_string())
}

/// Who asked for a turn or a call through a served door: the name of the bearer token the
/// request carried, and the end user a gateway client named in its `user` field. The token is
/// authenticated; the user is the client's word, kept to tell its users apart, never trusted
/// for anything else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requester {
    /// The token's name (`default` for an unnamed token).
    pub token: String,
    /// The client's `user` field, when it sent one. Untrusted text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl Requester {
    /// A request made with the token named `token`.
    pub fn token(token: impl Into<String>) -> Self {
        Requester {
            token: token.into(),
            user: None,
        }
    }
}

impl std::fmt::Display for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "token `{}`", self.token)?;
        if let Some(user) = &self.user {
            write!(f, " (user {user:?})")?;
        }
        Ok(())
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_arguments_digest_does_not_depend_on_key_order() {
        let a: Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": "s"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": "s", "b": [1, {"x": 1, "y": 2}]}"#).unwrap();
        assert_eq!(arguments_sha256(&a), arguments_sha256(&b));
        assert_ne!(
            arguments_sha256(&a),
            arguments_sha256(&serde_json::json!({"a": "t"}))
        );
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_are_capped_and_deduplicated() {
        let mut r = CallReport::default();
        for i in 0..(MAX_REFUSALS_RECORDED + 5) {
            r.refuse(format!("path /x/{i}"));
            r.refuse(format!("path /x/{i}"));
        }
        assert_eq!(r.refused.len(), MAX_REFUSALS_RECORDED);
        assert_eq!(r.refused[1], "path /x/1");
        // Each refusal past the cap counts, repeated or not.
        assert_eq!(r.refusals_dropped, 10);
    }

    #[test]
    fn argument_digests_ignore_whitespace() {
        let a: Value = serde_json::from_str(r#"{ "sql" :  "SELECT 1" }"#).unwrap();
        assert_eq!(
            arguments_sha256(&a),
            arguments_sha256(&json!({"sql": "SELECT 1"}))
        );
        assert_eq!(arguments_sha256(&a).len(), 64);
    }

    #[test]
    fn records_round_trip_through_json_with_their_kind() {
        let record = AuditRecord {
            at_ms: 1,
            origin: "chat".into(),
            entry: AuditEntry::ToolCall(Box::new(ToolCallAudit {
                session: Some("s1".into()),
                turn: Some(0),
                call_id: Some("c1".into()),
                client: None,
                requested_by: None,
                tool: "sql_query".into(),
                plugin: "sql".into(),
                digest: "sha256:ab".into(),
                arguments_sha256: "00".into(),
                arguments: None,
                grants: vec!["fs:/data:/data:ro".into()],
                decision: "auto".into(),
                decided_by: "policy: its grants cannot change anything".into(),
                policy_rule: None,
                policy_digest: None,
                labels: Vec::new(),
                outcome: CallOutcome::Error {
                    kind: "denied".into(),
                    message: "no".into(),
                },
                report: Some(CallReport::default()),
            })),
        };
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains(r#""kind":"tool_call""#), "{text}");
        assert!(text.contains(r#""status":"error""#), "{text}");
        let back: AuditRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
    }
}
