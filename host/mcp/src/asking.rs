//! Asking a person before an `ask` tool runs: through the MCP client with form elicitation
//! when the client can ask its user, else through an [`Approver`] (for `cordon serve`, its
//! approvals API, console and `cordon approve`), up to a timeout.
//!
//! Only the client's user or Cordon's own approvers can answer: nothing the model sends (the
//! arguments, a tool name) can approve a call or widen a grant. On protocol 2026-07-28 and
//! later the server may not send requests to the client, so the question travels in an
//! `InputRequiredResult` and the answer comes back with the retried call; its `requestState`
//! is only a random handle to a question kept here, bound to the tool, the arguments and the
//! token the call came with, good for one answer and until the timeout.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_agent::{ApprovalAnswer, ApprovalRequest, CancellationToken, GivenAnswer, async_trait};
use cordon_core::arguments_sha256;
use rmcp::model::{
    ClientCapabilities, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
};
use serde_json::{Value, json};

/// The key under which the question travels in an `InputRequiredResult`.
pub const APPROVAL_INPUT: &str = "cordon_approval";

/// Asks someone other than the MCP client's user about a call: the client cannot ask (it did
/// not declare form elicitation).
#[async_trait]
pub trait Approver: Send + Sync + 'static {
    /// Waits for an answer to `question` from `client` (authenticated with `token`, over
    /// HTTP) for at most `timeout`, or until `cancel` fires (the client cancelled the call);
    /// then refuses.
    async fn ask(
        &self,
        question: &ApprovalRequest,
        client: &str,
        token: Option<&str>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> GivenAnswer;
}

/// The approver of a server nobody else can answer for: it refuses, saying how to get the
/// call approved.
pub struct NobodyElse;

#[async_trait]
impl Approver for NobodyElse {
    async fn ask(
        &self,
        question: &ApprovalRequest,
        client: &str,
        _token: Option<&str>,
        _timeout: Duration,
        _cancel: &CancellationToken,
    ) -> GivenAnswer {
        GivenAnswer::new(
            ApprovalAnswer::Refused {
                reason: format!(
                    "`{}` needs approval because {}, and the MCP client `{client}` cannot ask its user \
                     (it does not support form elicitation). Use a client that does, or set a \
                     rule in cordon.toml ([approval.tools] \"{}.{}\" = \"auto\") if it should \
                     run without asking.",
                    question.tool, question.reason, question.plugin, question.tool
                ),
            },
            "nobody (the client cannot ask its user)",
        )
    }
}

/// The approver of `cordon mcp`: the question waits in the store, where `cordon serve`'s
/// approvals API and console and `cordon approve` see and answer it.
pub struct StoreApprover {
    store: cordon_store::Store,
}

impl StoreApprover {
    /// An approver over `store`.
    pub fn new(store: cordon_store::Store) -> Self {
        Self { store }
    }
}

#[async_trait]
impl Approver for StoreApprover {
    async fn ask(
        &self,
        question: &ApprovalRequest,
        client: &str,
        token: Option<&str>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> GivenAnswer {
        let unreachable = |e: cordon_store::StoreError| {
            GivenAnswer::new(
                ApprovalAnswer::Refused {
                    reason: format!("the question could not be put to anyone: {e}"),
                },
                "nobody (the store of questions was unreachable)",
            )
        };
        let waiting = match self
            .store
            .ask_approval(client, token, question, timeout.as_millis() as i64)
            .await
        {
            Ok(waiting) => waiting,
            Err(e) => return unreachable(e),
        };
        tracing::info!(
            "`{}` waits for approval: answer with `cordon approve`, or in cordon serve's console",
            question.tool
        );
        let deadline = tokio::time::Instant::now() + timeout;
        let waited = format!("{} s", timeout.as_secs());
        let (reason, by) = match self
            .store
            .wait_for_answer(&waiting.id, deadline, cancel)
            .await
        {
            Ok(cordon_store::Waited::Answered(answer)) => {
                cordon_core::metrics::approval_answered(answer.at_ms - waiting.asked_ms);
                return answer;
            }
            Err(e) => return unreachable(e),
            Ok(cordon_store::Waited::TimedOut) => (
                format!("nobody answered within {waited}, so it was denied"),
                format!("nobody (no answer within {waited})"),
            ),
            Ok(cordon_store::Waited::Cancelled) => (
                "the client cancelled the call".to_string(),
                format!("MCP client `{client}` (cancelled)"),
            ),
        };
        let _ = self.store.withdraw_approval(&waiting.id, &reason).await;
        // An answer that arrived just before the withdrawal still counts.
        if let Ok(Some(answer)) = self.store.approval_answer(&waiting.id).await
            && !matches!(answer.answer, ApprovalAnswer::Refused { .. })
        {
            return answer;
        }
        GivenAnswer::new(ApprovalAnswer::Refused { reason }, by)
    }
}

/// Whether a client can show its user a form.
pub fn can_elicit_form(capabilities: Option<&ClientCapabilities>) -> bool {
    // An empty `elicitation` object (2025-06-18) means forms; later revisions may list `form`
    // and `url` separately, and a client that lists only `url` cannot show a form.
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The most of the arguments a question quotes.
const QUOTED_ARGUMENTS: usize = 2000;

/// The form that asks about a call: what runs, with which grants, why Cordon asks, and the
/// three answers.
/// `always_holds` says how long an `always` answer holds.
pub fn question_form(question: &ApprovalRequest, always_holds: &str) -> ElicitRequestParams {
    // JSON text escapes control characters, so arguments cannot forge lines in the client.
    let mut arguments = question.arguments.to_string();
    if arguments.len() > QUOTED_ARGUMENTS {
        let mut cut = QUOTED_ARGUMENTS;
        while !arguments.is_char_boundary(cut) {
            cut -= 1;
        }
        arguments.truncate(cut);
        arguments.push_str(" … (cut)");
    }
    let grants = if question.grants.is_empty() {
        "none".to_string()
    } else {
        question.grants.join("; ")
    };
    if question.is_grant_request() {
        return grant_form(question, &arguments);
    }
    // A call the Rule of Two holds back is asked about every time: `always` would not hold.
    let (always, choices, names) = if question.rule_of_two {
        (
            String::new(),
            json!(["once", "deny"]),
            json!(["Run once", "Deny"]),
        )
    } else {
        (
            format!(" always: run every call of this tool {always_holds}."),
            json!(["once", "always", "deny"]),
            json!(["Run once", "Always run this tool", "Deny"]),
        )
    };
    let message = format!(
        "Cordon asks before running `{}` of plugin `{}`: {}.\nGrants: {grants}\nArguments: \
         {arguments}\nonce: run this call.{always} deny: refuse this call.",
        question.tool,
        question.plugin,
        question.reason.trim_end_matches('.'),
    );
    form(message, "Run this call?", choices, names)
}

/// The form of a grant request: what the sandbox refused, the grants that would allow it,
/// and how long to give them for.
fn grant_form(question: &ApprovalRequest, arguments: &str) -> ElicitRequestParams {
    let message = format!(
        "Cordon's sandbox refused `{}` of plugin `{}`: {}.\nArguments: {arguments}\nGrant, and \
         run the call again with: {}\nonce: for this call. session: for the rest of this \
         session. hour: for an hour. forever: for good (as `cordon grant`). deny: not now. \
         never: not in this session.",
        question.tool,
        question.plugin,
        question.reason.trim_end_matches('.'),
        question.requested_grants.join("; "),
    );
    form(
        message,
        "Grant it?",
        json!(["once", "session", "hour", "forever", "deny", "never"]),
        json!([
            "For this call",
            "For this session",
            "For an hour",
            "For good",
            "Deny",
            "Never in this session"
        ]),
    )
}

fn form(message: String, title: &str, choices: Value, names: Value) -> ElicitRequestParams {
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": {
                "type": "string",
                "title": title,
                "enum": choices,
                "enumNames": names,
            }
        },
        "required": ["answer"],
    });
    let requested_schema = match schema {
        Value::Object(map) => ElicitationSchema::from_json_schema(map)
            .unwrap_or_else(|_| ElicitationSchema::new(Default::default())),
        _ => unreachable!("the schema is an object"),
    };
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

/// What the client's user answered, with who it was.
pub fn read_answer(result: &ElicitResult, client: &str) -> GivenAnswer {
    let by = format!("the user of MCP client `{client}`");
    let answer = match result.action {
        ElicitationAction::Accept => {
            match result
                .content
                .as_ref()
                .and_then(|c| c.get("answer"))
                .and_then(Value::as_str)
            {
                Some("once") => ApprovalAnswer::Yes,
                // `session`, `hour`, `forever` and `never` are offered by grant requests only;
                // to another question the server takes them as what they say of this call.
                Some("always" | "session") => ApprovalAnswer::Always,
                Some("hour") => ApprovalAnswer::For { minutes: 60 },
                Some("forever") => ApprovalAnswer::Forever,
                Some("deny") => ApprovalAnswer::No,
                Some("never") => ApprovalAnswer::Never,
                other => ApprovalAnswer::Refused {
                    reason: format!(
                        "the client answered {}, which is not once, always or deny",
                        other.map_or_else(|| "nothing".to_string(), |a| format!("`{a}`"))
                    ),
                },
            }
        }
        ElicitationAction::Decline => ApprovalAnswer::No,
        ElicitationAction::Cancel => ApprovalAnswer::Refused {
            reason: "the user dismissed the question without answering".to_string(),
        },
        _ => ApprovalAnswer::Refused {
            reason: "the client's answer is neither accept, decline nor cancel".to_string(),
        },
    };
    GivenAnswer::new(answer, by)
}

/// Asks the user of the client behind `context` with `form` (an elicitation over its
/// session), for at most `timeout` or until the client cancels the call.
pub async fn elicit(
    context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    form: rmcp::model::ElicitRequestParams,
    client: &str,
    timeout: Duration,
) -> GivenAnswer {
    let asked = context
        .peer
        .create_elicitation_with_timeout(form, Some(timeout));
    tokio::select! {
        answer = asked => match answer {
            Ok(result) => read_answer(&result, client),
            Err(e) => GivenAnswer::new(
                ApprovalAnswer::Refused {
                    reason: format!("the client did not answer the question ({e})"),
                },
                format!("nobody (MCP client `{client}` did not answer)"),
            ),
        },
        () = context.ct.cancelled() => GivenAnswer::new(
            ApprovalAnswer::Refused { reason: "the client cancelled the call".to_string() },
            format!("MCP client `{client}` (cancelled)"),
        ),
    }
}

/// A question sent in an `InputRequiredResult`, waiting for the retried call.
struct Asked {
    /// The token the asking call authenticated with (none on stdio): only a call with the same
    /// one may answer.
    token: Option<String>,
    tool: String,
    arguments_sha256: String,
    expires: Instant,
}

/// Questions sent in `InputRequiredResult`s, by their random handle.
#[derive(Default)]
pub struct Outstanding {
    asked: Mutex<HashMap<String, Asked>>,
}

/// What the retried call's answer turned out to be.
#[derive(Debug, PartialEq)]
pub enum Redeemed {
    /// The answer to the question the handle names.
    Answer(GivenAnswer),
    /// The handle names no question of this call (unknown, used, expired, another call's, or
    /// asked of another token).
    Stale(String),
}

/// What a handle that names no question of the caller's is told.
const UNKNOWN_HANDLE: &str = "the approval this call answers is unknown, already used or \
                              expired; call the tool again to be asked anew";

/// How many questions may wait at once: each is small, but a client must not grow the map
/// without bound by never answering.
const MAX_OUTSTANDING: usize = 10_000;

impl Outstanding {
    /// Keeps a question about `tool` with `arguments`, asked of a call that came with `token`,
    /// for `timeout`; returns its handle.
    pub fn ask(
        &self,
        token: Option<&str>,
        tool: &str,
        arguments: &Value,
        timeout: Duration,
    ) -> String {
        let handle = hex::encode(rand::random::<[u8; 16]>());
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        asked.retain(|_, a| a.expires > now);
        if asked.len() >= MAX_OUTSTANDING
            && let Some(oldest) = asked
                .iter()
                .min_by_key(|(_, a)| a.expires)
                .map(|(k, _)| k.clone())
        {
            asked.remove(&oldest);
        }
        asked.insert(
            handle.clone(),
            Asked {
                token: token.map(str::to_string),
                tool: tool.to_string(),
                arguments_sha256: arguments_sha256(arguments),
                expires: now + timeout,
            },
        );
        handle
    }

    /// The answer the client returned for the question `handle` names, if that question was
    /// about this very call; the question is used up either way. To a call with another token
    /// than the asking one's the handle is unknown, and it stays for the asking one.
    pub fn redeem(
        &self,
        handle: &str,
        token: Option<&str>,
        call: (&str, &Value),
        response: Option<&Value>,
        client: &str,
    ) -> Redeemed {
        let (tool, arguments) = call;
        let asked = {
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            match asked.get(handle) {
                Some(a) if a.token.as_deref() == token => asked.remove(handle),
                _ => None,
            }
        };
        let Some(asked) = asked else {
            return Redeemed::Stale(UNKNOWN_HANDLE.to_string());
        };
        if asked.expires <= Instant::now() {
            return Redeemed::Stale(
                "the approval this call answers expired; call the tool again to be asked anew"
                    .to_string(),
            );
        }
        if asked.tool != tool || asked.arguments_sha256 != arguments_sha256(arguments) {
            return Redeemed::Stale(
                "the approval was given for another call (a different tool or different \
                 arguments); call the tool again to be asked about this one"
                    .to_string(),
            );
        }
        let Some(response) = response else {
            return Redeemed::Answer(GivenAnswer::new(
                ApprovalAnswer::Refused {
                    reason: "the client retried the call without the user's answer".to_string(),
                },
                format!("MCP client `{client}` (no answer returned)"),
            ));
        };
        match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(result) => Redeemed::Answer(read_answer(&result, client)),
            Err(e) => Redeemed::Answer(GivenAnswer::new(
                ApprovalAnswer::Refused {
                    reason: format!("the client's answer is not an elicitation result ({e})"),
                },
                format!("MCP client `{client}` (malformed answer)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> ApprovalRequest {
        ApprovalRequest {
            call_id: "7".into(),
            tool: "write_file".into(),
            plugin: "files".into(),
            arguments: json!({"path": "/data/x\n\u{1b}[31mred", "text": "é".repeat(3000)}),
            grants: vec!["read-write /data".into()],
            reason: "its grants allow changing something".into(),
            rule_of_two: false,
            requested_grants: vec![],
        }
    }

    #[test]
    fn the_form_says_what_runs_and_offers_three_answers() {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = question_form(&question(), "until the client disconnects")
        else {
            panic!("not a form")
        };
        assert!(
            message.contains("`write_file` of plugin `files`"),
            "{message}"
        );
        assert!(message.contains("Grants: read-write /data"), "{message}");
        // Control characters arrive escaped, and long arguments are cut on a char boundary.
        assert!(!message.contains('\u{1b}'), "{message}");
        assert!(message.contains("\\u001b[31mred"), "{message}");
        assert!(message.contains("… (cut)"), "{message}");
        let schema = serde_json::to_value(requested_schema).unwrap();
        assert_eq!(
            schema["properties"]["answer"]["enum"],
            json!(["once", "always", "deny"])
        );
    }

    #[test]
    fn answers_are_read_strictly() {
        let accept = |v: Value| {
            let mut r = ElicitResult::new(ElicitationAction::Accept);
            r.content = Some(v);
            read_answer(&r, "c").answer
        };
        assert_eq!(accept(json!({"answer": "once"})), ApprovalAnswer::Yes);
        assert_eq!(accept(json!({"answer": "always"})), ApprovalAnswer::Always);
        assert_eq!(accept(json!({"answer": "deny"})), ApprovalAnswer::No);
        assert!(matches!(
            accept(json!({"answer": "yes please"})),
            ApprovalAnswer::Refused { .. }
        ));
        let decline = read_answer(&ElicitResult::new(ElicitationAction::Decline), "c");
        assert_eq!(decline.answer, ApprovalAnswer::No);
        assert!(decline.by.contains("`c`"));
    }

    #[test]
    fn a_handle_answers_only_its_own_call_and_only_once() {
        let out = Outstanding::default();
        let args = json!({"q": 1});
        let yes = json!({"action": "accept", "content": {"answer": "once"}});
        let h = out.ask(None, "t", &args, Duration::from_secs(60));
        assert!(matches!(
            out.redeem(&h, None, ("t", &json!({"q": 2})), Some(&yes), "c"),
            Redeemed::Stale(_)
        ));
        // Used up by the mismatched try.
        assert!(matches!(
            out.redeem(&h, None, ("t", &args), Some(&yes), "c"),
            Redeemed::Stale(_)
        ));
        let h = out.ask(None, "t", &args, Duration::from_secs(60));
        assert_eq!(
            out.redeem(&h, None, ("t", &args), Some(&yes), "c"),
            Redeemed::Answer(GivenAnswer::new(
                ApprovalAnswer::Yes,
                "the user of MCP client `c`"
            ))
        );
        let h = out.ask(None, "t", &args, Duration::ZERO);
        assert!(matches!(
            out.redeem(&h, None, ("t", &args), Some(&yes), "c"),
            Redeemed::Stale(m) if m.contains("expired") || m.contains("unknown")
        ));
        assert!(matches!(
            out.redeem("forged", None, ("t", &args), Some(&yes), "c"),
            Redeemed::Stale(_)
        ));
    }

    #[test]
    fn a_handle_is_unknown_to_another_token() {
        let out = Outstanding::default();
        let args = json!({"q": 1});
        let yes = json!({"action": "accept", "content": {"answer": "once"}});
        let h = out.ask(Some("alice"), "t", &args, Duration::from_secs(60));
        for other in [Some("bob"), None] {
            assert_eq!(
                out.redeem(&h, other, ("t", &args), Some(&yes), "c"),
                Redeemed::Stale(UNKNOWN_HANDLE.to_string())
            );
        }
        // Not used up by the other tokens' tries.
        assert!(matches!(
            out.redeem(&h, Some("alice"), ("t", &args), Some(&yes), "c"),
            Redeemed::Answer(GivenAnswer {
                answer: ApprovalAnswer::Yes,
                ..
            })
        ));
    }
}
