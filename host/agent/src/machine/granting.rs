//! The machine's side of grant requests (see [`crate::grant_requests`] for what decides): a
//! finished call is held for a grant request, and a person's answer to one settles it.

use super::transitions::{Given, after_approval};
use super::{Action, AgentEvent, Env, ToolOutcome};
use crate::approval::ApprovalAnswer;
use crate::conversation::{CallStatus, Conversation, PlannedCall};
use crate::grant_requests::GrantRequest;

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
    if outcome.is_error && !outcome.wanted.is_empty() {
        let plugin = env
            .catalog
            .spec(&p.call.name)
            .map(|s| s.plugin.clone())
            .unwrap_or_default();
        let askable = conv.grants.askable(&plugin, &outcome.wanted);
        // A grant that would let the tool send out what this session holds is not asked for:
        // the Rule of Two would hold its calls back anyway, and a person asked in the middle
        // of such a session is the one the injected content aims at.
        let sends = env.catalog.spec(&p.call.name).and_then(|s| {
            cordon_core::rule_of_two(&conv.labels, &s.identity(), &s.widened(&askable).exposure)
        });
        if !askable.is_empty() && !plugin.is_empty() {
            let blocked = match sends {
                Some(_) => Some(
                    "this conversation holds private data and untrusted content, and the grant \
                     would let the tool send data out (Rule of Two)"
                        .to_string(),
                ),
                None => conv.grants.limit_reached(conv.progress.grant_requests),
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
    }
    p.status = CallStatus::Done {
        content,
        is_error: outcome.is_error,
    };
}

/// AwaitingApproval, `ApprovalGiven` for a call held for a grant request (rule 4): the grants
/// are given (to the call, the conversation, or the lock) and the call runs again, or the model
/// gets the refused call's error.
pub(super) fn answer_grant(
    conv: &mut Conversation,
    mut batch: Vec<PlannedCall>,
    call_id: String,
    answer: ApprovalAnswer,
    given: Given,
    env: Env<'_>,
    out: &mut Vec<Action>,
) {
    let by = if given.by.is_empty() {
        "the user".to_string()
    } else {
        given.by
    };
    out.push(Action::Emit(AgentEvent::ApprovalGiven {
        call_id: call_id.clone(),
        answer: answer.clone(),
    }));
    let Some(p) = batch.iter_mut().find(|p| p.id == call_id) else {
        return after_approval(conv, batch, env, out);
    };
    let Some(request) = p.grant_request.take() else {
        return after_approval(conv, batch, env, out);
    };
    let plugin = env
        .catalog
        .spec(&p.call.name)
        .map(|s| s.plugin.clone())
        .unwrap_or_default();
    let refused = |note: Option<String>| {
        let mut content = request.result.clone();
        if let Some(note) = note {
            content.push_str(&format!("\n({note})"));
        }
        CallStatus::Done {
            content,
            is_error: true,
        }
    };
    p.status = match &answer {
        ApprovalAnswer::Yes => CallStatus::Approved,
        ApprovalAnswer::Always => {
            conv.grants.give(&plugin, &request.grants, &by, given.at_ms);
            CallStatus::Approved
        }
        ApprovalAnswer::For { .. } | ApprovalAnswer::Forever => {
            out.push(Action::GiveGrants {
                call_id: call_id.clone(),
                tool: p.call.name.clone(),
                grants: request.grants.clone(),
                minutes: match answer {
                    ApprovalAnswer::For { minutes } => {
                        Some(minutes.clamp(1, crate::grant_requests::MAX_MINUTES))
                    }
                    _ => None,
                },
                by: by.clone(),
            });
            CallStatus::Approved
        }
        ApprovalAnswer::No => refused(Some(format!(
            "{by} did not grant {}",
            request.grants.join(", ")
        ))),
        ApprovalAnswer::Never => {
            conv.grants.refuse(&plugin, &request.grants);
            refused(Some(format!(
                "{by} did not grant {}, and will not be asked again in this conversation",
                request.grants.join(", ")
            )))
        }
        ApprovalAnswer::Refused { reason } => refused(Some(format!(
            "nobody was asked to grant {}: {reason}",
            request.grants.join(", ")
        ))),
    };
    if p.status == CallStatus::Approved {
        p.granted = request.grants.clone();
    }
    // An answer for the conversation (`always`, `never`) also settles the other calls of the
    // plugin held for the same grants: they run with them, or get their own refusal.
    for other in batch.iter_mut().filter(|o| o.id != call_id) {
        let Some(held) = &other.grant_request else {
            continue;
        };
        let same_plugin = env
            .catalog
            .spec(&other.call.name)
            .map(|s| s.plugin.as_str())
            == Some(plugin.as_str());
        if !same_plugin || !conv.grants.askable(&plugin, &held.grants).is_empty() {
            continue;
        }
        let held = other.grant_request.take().expect("held");
        let given = conv.grants.of(&plugin);
        other.status = if held.grants.iter().all(|g| given.contains(g)) {
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
            }
        };
    }
    after_approval(conv, batch, env, out);
}
