//! The machine's side of grant requests (see [`crate::grant_requests`] for what decides): a
//! finished call is held for a grant request, and a person's answer to one settles it.

use super::{Action, AgentEvent, Env, ToolOutcome};
use serde_json::Value;

use crate::approval::ApprovalAnswer;
use crate::conversation::{CallApproval, CallStatus, Conversation, PlannedCall};
use crate::grant_requests::{Applying, GrantRequest, GrantSpan, MAX_MINUTES};

/// Who answered a question, and when.
pub(super) struct Given {
    pub(super) by: String,
    pub(super) at_ms: i64,
}

impl Given {
    /// Emits the answer to `call_id` for the user interface; returns who gave it (`the user`
    /// when the door did not say).
    pub(super) fn announce(
        self,
        call_id: &str,
        answer: &ApprovalAnswer,
        out: &mut Vec<Action>,
    ) -> String {
        out.push(Action::Emit(AgentEvent::ApprovalGiven {
            call_id: call_id.to_string(),
            answer: answer.clone(),
        }));
        if self.by.is_empty() {
            "the user".to_string()
        } else {
            self.by
        }
    }
}

/// The calls of the tool the model calls `name`, in this turn, that session grants may apply
/// to; `None` for a tool no longer in the catalog.
fn applying<'a>(conv: &'a Conversation, env: Env<'a>, name: &str) -> Option<Applying<'a>> {
    env.catalog.spec(name).map(|s| Applying {
        plugin: &s.plugin,
        digest: &s.digest,
        requester: conv.requester(),
        now_ms: env.inputs.now_ms,
    })
}

/// Settles a finished call: `Done` with its outcome, or `Pending` with a grant request when
/// the sandbox refused it something a grant allows and a request may be made (rules 2 and 3).
/// Past the limits the model's result says why nobody was asked.
pub(super) fn settle(
    conv: &mut Conversation,
    p: &mut PlannedCall,
    outcome: ToolOutcome,
    env: Env<'_>,
) {
    let mut content = outcome.content;
    let spec = env.catalog.spec(&p.call.name);
    let askable = match (spec, applying(conv, env, &p.call.name)) {
        (Some(_), Some(to)) if outcome.is_error => conv.grants.askable(to, &outcome.wanted),
        _ => Vec::new(),
    };
    if let (Some(spec), false) = (spec, askable.is_empty()) {
        // A grant that would let the tool send out what this session holds is not asked for:
        // the Rule of Two would hold the call back anyway, and a person asked in the middle of
        // such a session is the one the injected content aims at.
        // The tool as it would run: with the grants it has for the conversation and these.
        let mut with = applying(conv, env, &p.call.name)
            .map(|to| conv.grants.of(to))
            .unwrap_or_default();
        with.extend(askable.iter().cloned());
        let widened = spec.widened(&with);
        let no_args = Value::Object(Default::default());
        let denied = || {
            env.catalog.denies_widened(
                &widened,
                p.arguments.as_ref().unwrap_or(&no_args),
                conv.standing(),
                &conv.approved_tools,
                env.inputs,
            )
        };
        let blocked =
            match cordon_core::rule_of_two(&conv.labels, &spec.identity(), &widened.exposure) {
                Some(_) => Some(
                    "this conversation holds private data and untrusted content, and the grant \
                     would let the tool send data out (Rule of Two)"
                        .to_string(),
                ),
                // The policy decides on what the tool could reach with the grant: a rule
                // that denies such a call is not overruled by a person's answer.
                None => match denied() {
                    Some(reason) => {
                        Some(format!("the policy would deny the call with it: {reason}"))
                    }
                    None => conv.grants.limit_reached(conv.progress.grant_requests),
                },
            };
        match blocked {
            None => {
                conv.grants.asked += 1;
                conv.progress.grant_requests += 1;
                p.grant_request = Some(Box::new(GrantRequest {
                    grants: askable,
                    refused: outcome.refused,
                    result: content,
                }));
                p.status = CallStatus::Pending;
                return;
            }
            Some(why) => content.push_str(&format!(
                "\n(Nobody was asked to grant {}: {why}.)",
                askable.join(", ")
            )),
        }
    }
    p.status = CallStatus::Done {
        content,
        is_error: outcome.is_error,
        kept: outcome.kept,
    };
}

/// Whether `call_id` waits on a grant request rather than on approval to run.
pub(super) fn is_grant_request(batch: &[PlannedCall], call_id: &str) -> bool {
    batch
        .iter()
        .any(|p| p.id == call_id && p.grant_request.is_some())
}

/// AwaitingApproval, `ApprovalGiven` for a call held for a grant request (rule 4): the grants
/// are given (to the call, the conversation, or the lock) and the call is approved to run
/// again, or it gets the refused call's error. The caller goes on as after any answer.
pub(super) fn answer_grant(
    conv: &mut Conversation,
    batch: &mut [PlannedCall],
    call_id: String,
    answer: ApprovalAnswer,
    given: Given,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    let at_ms = if given.at_ms > 0 {
        given.at_ms
    } else {
        env.inputs.now_ms
    };
    let by = given.announce(&call_id, &answer, out);
    let Some(p) = batch.iter_mut().find(|p| p.id == call_id) else {
        return;
    };
    let Some(request) = p.grant_request.take() else {
        return;
    };
    let Some(spec) = env.catalog.spec(&p.call.name) else {
        // The tool is gone: nothing to give a grant to.
        p.status = CallStatus::Done {
            content: request.result,
            is_error: true,
            kept: None,
        };
        return;
    };
    let plugin = spec.plugin.clone();
    let requester = conv.requester().cloned();
    let to = Applying {
        plugin: &spec.plugin,
        digest: &spec.digest,
        requester: requester.as_ref(),
        now_ms: env.inputs.now_ms,
    };
    let refused = |note: String| CallStatus::Done {
        content: format!("{}\n({note})", request.result),
        is_error: true,
        kept: None,
    };
    let span = match answer {
        ApprovalAnswer::Yes => Some(GrantSpan::Call),
        ApprovalAnswer::Always => Some(GrantSpan::Session),
        ApprovalAnswer::For { minutes } => Some(GrantSpan::Minutes(minutes.clamp(1, MAX_MINUTES))),
        ApprovalAnswer::Forever => Some(GrantSpan::Forever),
        ApprovalAnswer::No | ApprovalAnswer::Never | ApprovalAnswer::Refused { .. } => None,
    };
    let grants = request.grants.join(", ");
    p.status = match (&answer, span) {
        (_, Some(span)) => {
            // Given beyond this call: kept for the conversation too, so a host that does not
            // reload the lock (a chat) applies it to the plugin's later calls until its end.
            let until = match span {
                GrantSpan::Call => None,
                GrantSpan::Session | GrantSpan::Forever => Some(None),
                GrantSpan::Minutes(m) => {
                    Some((at_ms > 0).then(|| at_ms.saturating_add((m * 60_000) as i64)))
                }
            };
            if let Some(until) = until {
                let in_lock = matches!(span, GrantSpan::Minutes(_) | GrantSpan::Forever);
                conv.grants
                    .give(to, &request.grants, &by, at_ms, until, in_lock);
            }
            out.push(Action::GiveGrants {
                call_id: call_id.clone(),
                tool: p.call.name.clone(),
                grants: request.grants.clone(),
                span,
                by: by.clone(),
            });
            p.granted = request.grants.clone();
            p.approval = Some(CallApproval {
                decision: answer.as_str().to_string(),
                by: format!("{by}, to a grant request for {grants}"),
            });
            CallStatus::Approved
        }
        (ApprovalAnswer::Never, None) => {
            conv.grants.refuse(&plugin, &request.grants);
            refused(format!(
                "{by} did not grant {grants}, and will not be asked again in this conversation"
            ))
        }
        (ApprovalAnswer::Refused { reason }, None) => {
            refused(format!("nobody was asked to grant {grants}: {reason}"))
        }
        (_, None) => refused(format!("{by} did not grant {grants}")),
    };
    // An answer for the conversation (`always`, `never`) also settles the other calls of the
    // plugin held for the same grants: they run with them (when every grant they wait for was
    // given), or get their own refusal (when one was refused for good).
    for other in batch.iter_mut().filter(|o| o.id != call_id) {
        let Some(held) = &other.grant_request else {
            continue;
        };
        let same_plugin = env
            .catalog
            .spec(&other.call.name)
            .map(|s| s.plugin.as_str())
            == Some(plugin.as_str());
        if !same_plugin || !conv.grants.askable(to, &held.grants).is_empty() {
            continue;
        }
        let held = other.grant_request.take().expect("held");
        let given = conv.grants.of(to);
        other.status = if held.grants.iter().all(|g| given.contains(g)) {
            other.approval = Some(CallApproval {
                decision: "always".to_string(),
                by: format!("{by}, to a grant request for {}", held.grants.join(", ")),
            });
            other.granted = held.grants;
            CallStatus::Approved
        } else {
            CallStatus::Done {
                content: format!(
                    "{}\n({by} did not grant {}, and will not be asked again in this conversation)",
                    held.result,
                    held.grants.join(", ")
                ),
                is_error: true,
                kept: None,
            }
        };
    }
}
