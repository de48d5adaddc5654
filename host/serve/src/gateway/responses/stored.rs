//! Responses as their session holds them: what `GET /v1/responses/{id}` answers, and what an
//! `item_reference` names. Nothing is kept besides the session: a response is read back from
//! the turn its id names ([`ResponseId`]), so it outlives the host as the session does.
//!
//! A turn is split into responses where the model called the client's tools: the first
//! response of a turn runs from its user message to the first model answer that called a
//! function tool of the client (or to the turn's end), the next from there on. A call is the
//! client's when it names no tool Cordon offers the session (the gateway refuses client tools
//! named like one of Cordon's) and its arguments are a JSON object (the engine refuses other
//! calls before anyone runs them). Each model answer with text is a message item, in order.

use std::collections::HashMap;

use axum::http::StatusCode;
use cordon_agent::{Conversation, Message, TurnOutcome};
use cordon_core::Requester;
use cordon_store::SessionInfo;
use serde_json::Value;

use super::super::histories::created_by;
use super::super::request::{Role, WireCall};
use super::super::{GatewayError, GatewayState};
use super::input::Item;
use super::{ResponseId, unknown_response};
use crate::error::ApiError;
use crate::host::Host;

/// One output item of a response.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Output {
    /// A model answer's text.
    Text(String),
    /// A call of the client's tool.
    Call(WireCall),
}

impl Output {
    /// The bytes of text it holds.
    pub(super) fn len(&self) -> usize {
        match self {
            Output::Text(text) => text.len(),
            Output::Call(call) => call.id.len() + call.name.len() + call.arguments.len(),
        }
    }

    /// The item as a client sends it back.
    pub(super) fn as_input(&self) -> Item {
        match self {
            Output::Text(text) => Item::Message {
                role: Role::Assistant,
                text: text.clone(),
                parts: None,
            },
            Output::Call(call) => Item::Call(call.clone()),
        }
    }
}

/// A response read back from its session.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) info: SessionInfo,
    pub(super) output: Vec<Output>,
    /// `completed`, `in_progress`, `failed` or `cancelled`.
    pub(super) status: &'static str,
    /// Why it failed.
    pub(super) error: Option<String>,
}

/// The session and conversation of response `id`, if `requester`'s token created the session
/// and the turn exists. Any other response is unknown to this token, whether it exists or
/// not, exactly as a session named by `X-Cordon-Session` is.
pub(super) async fn load(
    host: &Host,
    id: &ResponseId,
    requester: &Requester,
    param: &str,
) -> Result<(SessionInfo, Conversation), GatewayError> {
    match host.store().load(&id.session).await {
        Ok((info, conv)) if created_by(&info, requester) && id.turn <= conv.turns.len() => {
            Ok((info, conv))
        }
        Ok(_) | Err(cordon_store::StoreError::UnknownSession { .. }) => {
            Err(unknown_response(&id.to_string(), param))
        }
        Err(e) => Err(ApiError::from(e).into()),
    }
}

/// Response `id` as its session holds it (see the module's doc).
pub(super) async fn stored(
    state: &GatewayState,
    id: &ResponseId,
    requester: &Requester,
    param: &str,
) -> Result<Stored, GatewayError> {
    let session = Session::load(state, id, requester, param).await?;
    let (output, status, error) = session.response(id, param)?;
    Ok(Stored {
        info: session.info,
        output,
        status,
        error,
    })
}

/// A session read back, to read its responses from.
pub(super) struct Session {
    info: SessionInfo,
    conv: Conversation,
    /// The names of the tools Cordon offers the session.
    ours: Vec<String>,
}

impl Session {
    async fn load(
        state: &GatewayState,
        id: &ResponseId,
        requester: &Requester,
        param: &str,
    ) -> Result<Self, GatewayError> {
        let (info, conv) = load(&state.host, id, requester, param).await?;
        let agent = state.host.agent(&info.settings).await?;
        let ours = agent
            .offered_tools(&conv)
            .into_iter()
            .map(|s| s.name)
            .collect();
        Ok(Session { info, conv, ours })
    }

    /// Response `id`'s output, status and error.
    fn response(
        &self,
        id: &ResponseId,
        param: &str,
    ) -> Result<(Vec<Output>, &'static str, Option<String>), GatewayError> {
        let conv = &self.conv;
        let Some(turn) = id.turn.checked_sub(1).and_then(|t| conv.turns.get(t)) else {
            return Err(unknown_response(&id.to_string(), param));
        };
        let end = conv
            .turns
            .get(id.turn)
            .map_or(conv.messages.len(), |t| t.first_message);
        let rounds = rounds(&conv.messages[turn.first_message..end], &self.ours);
        let Some(round) = rounds.get(id.round) else {
            return Err(unknown_response(&id.to_string(), param));
        };
        let mut output = round.clone();
        let asked = matches!(output.last(), Some(Output::Call(_)));
        let (status, error) = match (&turn.outcome, asked) {
            (_, true) => ("completed", None),
            (None, false) => ("in_progress", None),
            (Some(TurnOutcome::Cancelled), false) => ("cancelled", None),
            (Some(TurnOutcome::Failed { error, .. }), false) => ("failed", Some(error.clone())),
            (Some(TurnOutcome::NoProgress { explanation }), false) => {
                if output.is_empty() {
                    output.push(Output::Text(explanation.clone()));
                }
                ("completed", None)
            }
            (Some(_), false) => ("completed", None),
        };
        Ok((output, status, error))
    }
}

/// A turn's messages (its user message first) as the outputs of its responses.
fn rounds(messages: &[Message], ours: &[String]) -> Vec<Vec<Output>> {
    let mut rounds = vec![Vec::new()];
    for message in messages.iter().skip(1) {
        let Message::Assistant {
            content,
            tool_calls,
            ..
        } = message
        else {
            continue;
        };
        let current = rounds.last_mut().expect("never empty");
        if !content.is_empty() {
            current.push(Output::Text(content.clone()));
        }
        let theirs: Vec<Output> = tool_calls
            .iter()
            .filter(|c| !ours.contains(&c.name))
            .filter(|c| serde_json::from_str::<Value>(&c.arguments).is_ok_and(|v| v.is_object()))
            .map(|c| {
                Output::Call(WireCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
            })
            .collect();
        if !theirs.is_empty() {
            current.extend(theirs);
            rounds.push(Vec::new());
        }
    }
    rounds
}

/// The most sessions one request's `item_reference`s may name: a conversation is one
/// session, and each named session is read from the store.
const MAX_REFERENCED_SESSIONS: usize = 8;

/// The most `item_reference`s one request may hold: each stands for a whole stored item.
const MAX_REFERENCES: usize = 256;

/// The most text the references of one request may stand for, as for a body sent whole: a
/// small body must not make Cordon hold (and store) far more than a large one may.
const MAX_REFERENCED_BYTES: usize = super::super::MAX_BODY;

/// `items` with each `item_reference` replaced by the item it names (a message or function
/// call of an earlier response of `requester`'s token).
pub(super) async fn resolve(
    state: &GatewayState,
    requester: &Requester,
    items: Vec<(usize, Item)>,
) -> Result<Vec<(usize, Item)>, GatewayError> {
    let references = items
        .iter()
        .filter(|(_, item)| matches!(item, Item::Reference(_)))
        .count();
    if references > MAX_REFERENCES {
        return Err(GatewayError::invalid(
            "input",
            format!(
                "{references} `item_reference`s: one request takes at most {MAX_REFERENCES}; \
                 continue with `previous_response_id` instead"
            ),
        ));
    }
    let mut read: HashMap<String, Session> = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    let mut bytes = 0usize;
    for (i, item) in items {
        let Item::Reference(reference) = &item else {
            out.push((i, item));
            continue;
        };
        let param = format!("input[{i}].id");
        let missing = || GatewayError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: Some("item_not_found"),
            param: Some(param.clone()),
            message: format!(
                "no item `{reference}` of this token: an `item_reference` names a message of a \
                 response this token created; send the item itself instead"
            ),
            retry_after_secs: None,
        };
        // Function calls are named by their call ids, which do not say their response.
        let (response, index) = ResponseId::parse_item(reference).ok_or_else(missing)?;
        if !read.contains_key(&response.session) {
            if read.len() == MAX_REFERENCED_SESSIONS {
                return Err(GatewayError::invalid(
                    param,
                    format!(
                        "the `item_reference`s of one request name at most \
                         {MAX_REFERENCED_SESSIONS} sessions; send the items themselves"
                    ),
                ));
            }
            let session = match Session::load(state, &response, requester, &param).await {
                Ok(session) => session,
                Err(e) if e.status == StatusCode::NOT_FOUND => return Err(missing()),
                Err(e) => return Err(e),
            };
            read.insert(response.session.clone(), session);
        }
        let output = match read[&response.session].response(&response, &param) {
            Ok((output, ..)) => output,
            Err(e) if e.status == StatusCode::NOT_FOUND => return Err(missing()),
            Err(e) => return Err(e),
        };
        let found = output.get(index).ok_or_else(missing)?;
        bytes = bytes.saturating_add(found.len());
        if bytes > MAX_REFERENCED_BYTES {
            return Err(GatewayError::invalid(
                param,
                format!(
                    "the `item_reference`s of this request stand for more than \
                     {MAX_REFERENCED_BYTES} bytes; continue with `previous_response_id` instead"
                ),
            ));
        }
        out.push((i, found.as_input()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_agent::ToolCall;

    fn called(name: &str, id: &str, arguments: &str) -> Message {
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: arguments.into(),
            }],
            partial: false,
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: String::new(),
            content: "r".into(),
            is_error: false,
            kept: None,
        }
    }

    #[test]
    fn a_turn_splits_where_the_model_called_the_clients_tools() {
        let messages = [
            Message::user("q"),
            Message::assistant("Let me query."),
            called("sql_query", "1", "{}"),
            result("1"),
            called("get_weather", "2", r#"{"city":"Oslo"}"#),
            result("2"),
            // Arguments that are not an object were refused by the engine.
            called("get_weather", "3", "nonsense"),
            result("3"),
            Message::assistant("Sunny, and 42 orders."),
        ];
        let rounds = rounds(&messages, &["sql_query".to_string()]);
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0][0], Output::Text("Let me query.".into()));
        let Output::Call(call) = &rounds[0][1] else {
            panic!("a call")
        };
        assert_eq!((call.id.as_str(), call.name.as_str()), ("2", "get_weather"));
        assert_eq!(rounds[1], [Output::Text("Sunny, and 42 orders.".into())]);
    }
}
