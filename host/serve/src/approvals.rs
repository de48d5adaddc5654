//! The approvals API: the questions the caller may see, and answers to them.
//!
//! A question waits in the store (see `cordon_store`'s approvals), whichever host's turn or
//! MCP client asked it, so every host on the store lists it and takes an answer:
//! 1. the store takes one answer per question, by a conditional update; a second is told
//!    whose the first was;
//! 2. the host driving the turn hears of it from the store (at once, through its own memory,
//!    when the answer reached that host);
//! 3. a question kept in one host's memory alone (the store was away when it was asked) is
//!    answered there, and only there;
//! 4. who may see and answer a question is decided as for its session (rule 4 of
//!    [`crate::auth`]): another token's question is unknown.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use cordon_agent::{ApprovalAnswer, GivenAnswer};
use cordon_store::{StoreError, WAITING_APPROVALS_SESSION};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{Caller, Scopes};
use crate::body::Body;
use crate::error::ApiError;
use crate::state::{AppState, visible};

/// The questions of sessions the caller may see, each saying whether the caller may answer
/// it.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let pending: Vec<Value> = state
        .host
        .pending()
        .await
        .into_iter()
        .filter(|p| sees_question(&caller, p))
        .map(|p| {
            let may_answer = caller.may_answer(p.asked_by.as_deref());
            let mut v = json!(p);
            v["may_answer"] = json!(may_answer);
            v
        })
        .collect();
    Json(json!({"pending": pending}))
}

/// Whether `caller` may see question `p` (rule 4 of [`crate::auth`]): one of its sessions'
/// or its MCP clients', or, with `sessions:all`, any (`cordon mcp`'s on stdio only so).
fn sees_question(caller: &Caller, p: &crate::live::PendingApproval) -> bool {
    caller.sees(p.owner.as_deref())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    answer: String,
}

/// Answers a question, wherever it was asked (see the module's doc).
pub(crate) async fn answer(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path((session, call_id)): Path<(String, String)>,
    Body(body): Body<Answer>,
) -> Result<Json<Value>, ApiError> {
    // `for 30m` and `forever` answer grant requests only; the session checks which it is.
    let answer = ApprovalAnswer::parse(&body.answer, true).map_err(|e| {
        ApiError::bad_request(format!(
            "{e} (to a question about running a call: yes, no, always for this tool in the \
             session, or never)"
        ))
    })?;
    // First, so that whether a call waits is told only to those who may see the session.
    caller.require(Scopes::SESSIONS, "answer questions")?;
    let by = format!("API token `{}`", caller.name);
    if session == WAITING_APPROVALS_SESSION {
        // An MCP client's question is its token's, as a session is its creator's: another
        // token without `sessions:all` is told it does not exist.
        let store = state.host.store();
        let token = store.approval_token(&call_id).await?;
        if !caller.sees(token.as_deref()) {
            return Err(cordon_store::StoreError::UnknownApproval { id: call_id }.into());
        }
        caller.require_answer(token.as_deref())?;
        let given = GivenAnswer::new(answer.clone(), by.clone());
        store.answer_approval(&call_id, &given).await?;
        return Ok(Json(
            json!({"session": session, "call_id": call_id, "answer": answer.as_str(), "by": by}),
        ));
    }
    let given = GivenAnswer::new(answer.clone(), by.clone());
    let answered =
        json!({"session": session, "call_id": call_id, "answer": answer.as_str(), "by": by});
    let live = state.host.live_if_any(&session);
    let here = live.as_ref().and_then(|l| {
        l.pending()
            .into_iter()
            .find(|p| p.request.call_id == call_id)
    });
    // The question as the store has it, whichever host asked it; one this host keeps in
    // memory alone (the store was away when it was asked) is answered from memory.
    let stored = match &here {
        Some(p) if p.question.is_none() => None,
        _ => match state
            .host
            .store()
            .session_approval(&session, &call_id)
            .await
        {
            Ok(stored) => stored.map(crate::live::PendingApproval::from),
            // The store is away: a turn this host drives can still hear the answer (and
            // stops if it cannot record it).
            Err(e) if here.is_some() => {
                tracing::warn!("answering from memory: {e}");
                None
            }
            Err(e) => return Err(e.into()),
        },
    };
    let Some(question) = stored.clone().or(here) else {
        // Never asked: the session says so, to those who see it.
        visible(&state, &caller, &session).await?;
        return match live {
            Some(live) => live.answer(&call_id, given).map(|()| Json(answered)),
            None => Err(ApiError::not_found(format!(
                "session `{session}` has no call `{call_id}` waiting for an answer"
            ))),
        };
    };
    if !sees_question(&caller, &question) {
        return Err(cordon_store::StoreError::UnknownSession { id: session }.into());
    }
    caller.require_answer(question.asked_by.as_deref())?;
    crate::live::fits_question(&question.request, &answer, &call_id)?;
    match (stored.and_then(|s| s.question), live) {
        (Some(id), live) => {
            let asked = Asked {
                session: &session,
                call_id: &call_id,
                request: &question.request,
            };
            take_answer(&state, &caller, asked, id, &given).await?;
            if let Some(live) = live {
                live.deliver(&call_id, given);
            }
            Ok(Json(answered))
        }
        (None, Some(live)) => live.answer(&call_id, given).map(|()| Json(answered)),
        (None, None) => Err(ApiError::not_found(format!(
            "session `{session}` has no call `{call_id}` waiting for an answer"
        ))),
    }
}

/// How often an answer follows its question to the host that asks it again.
const FOLLOW_QUESTION: usize = 3;

/// The question a person answered, as they were shown it.
struct Asked<'a> {
    session: &'a str,
    call_id: &'a str,
    request: &'a cordon_agent::ApprovalRequest,
}

/// The store takes the answer to question `id` once, whoever gives it. A question withdrawn
/// at that moment because its call was asked about again (its host died, another took the
/// session up) passes the answer on to the question asked now, only if that asks about the
/// very call the person was shown (the same request) and the person may answer it too;
/// otherwise the person is told the question changed.
async fn take_answer(
    state: &AppState,
    caller: &Caller,
    asked: Asked<'_>,
    mut id: String,
    given: &GivenAnswer,
) -> Result<(), ApiError> {
    let Asked {
        session,
        call_id,
        request,
    } = asked;
    let store = state.host.store();
    for _ in 0..FOLLOW_QUESTION {
        match store.answer_approval(&id, given).await {
            Ok(()) => return Ok(()),
            Err(StoreError::ApprovalAnswered { earlier, .. }) => {
                let already = || {
                    ApiError::conflict(format!(
                        "call `{call_id}` of session `{session}` was already answered \
                         ({earlier})"
                    ))
                };
                if !store.asked_again(&id).await? {
                    return Err(already());
                }
                let newer = store
                    .session_approval(session, call_id)
                    .await?
                    .filter(|newer| newer.id != id)
                    .map(crate::live::PendingApproval::from);
                match newer {
                    Some(newer)
                        if newer.request == *request
                            && sees_question(caller, &newer)
                            && caller.may_answer(newer.asked_by.as_deref()) =>
                    {
                        id = newer.question.unwrap_or_default();
                    }
                    Some(_) => {
                        return Err(ApiError::conflict(format!(
                            "call `{call_id}` of session `{session}` was asked about again, \
                             differently; look at the question again and answer it"
                        )));
                    }
                    None => return Err(already()),
                }
            }
            Err(StoreError::ApprovalExpired { .. }) => {
                return Err(ApiError::conflict(format!(
                    "call `{call_id}` of session `{session}` is no longer waiting: nobody \
                     answered in time, so it was denied"
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::conflict(format!(
        "call `{call_id}` of session `{session}` was asked about again while the answer was \
         given; answer it again"
    )))
}
