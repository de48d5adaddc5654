//! The OpenAI Responses API on the gateway: `POST /v1/responses` (whole, or streamed as
//! Responses events) and `GET /v1/responses/{id}`. A request is one turn of a Cordon session,
//! or the rest of one, exactly as a Chat Completions request is: the same session finding,
//! parameters, client tools and reading of the turn; `input` reads the request, `events`
//! writes the response, `stored` reads a response back from its session.
//!
//! Which session a request continues, in order of precedence:
//! 1. `previous_response_id`: the session of that response, if this token created it (any
//!    other id, another token's included, is a 404 like a missing one). A new user message
//!    continues the session when the response is of its last turn; naming a response of an
//!    earlier turn continues a copy of the session cut after that turn (a fork, created by
//!    this token; its id comes back in `X-Cordon-Session`), as the API branches a
//!    conversation. `function_call_output` items go to the turn waiting on those calls.
//!    `instructions` (with any system or developer messages) must be the session's system
//!    prompt or left out: a session's system prompt is set when it starts.
//! 2. The `X-Cordon-Session` header, for the token that created the session.
//! 3. The whole conversation sent as `input`, as Chat Completions clients send theirs (see
//!    [`super::histories`]; `instructions` are part of it).
//! 4. Otherwise a new session, its system prompt the `instructions` and system messages.
//!
//! `store: false` is accepted; Cordon keeps every session (and its audit) all the same, which
//! is also how `GET /v1/responses/{id}` and `previous_response_id` work.
//!
//! A response's id names its session, turn and round (`resp_{session}_{turn}_{round}`, the
//! round counting the responses of the turn that asked for the client's tools before it), so
//! nothing but the session is kept for it and it outlives the host.

mod events;
mod input;
mod stored;

use std::fmt;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cordon_core::Requester;
use cordon_store::validate_session_id;

use super::request::{Input, Role};
use super::response::Reading;
use super::{
    CancelOnDrop, GatewayError, GatewayState, SESSION_HEADER, caller, named_session, own_session,
    read_body, wants_tool_events,
};
use crate::error::ApiError;
use events::Writer;
use input::{ResponsesRequest, renamed};

/// Which response of which turn of which session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ResponseId {
    pub(super) session: String,
    /// The turn's number, from 1.
    pub(super) turn: usize,
    /// The responses of the turn before this one (each asked for the client's tools).
    pub(super) round: usize,
}

impl ResponseId {
    pub(super) fn parse(id: &str) -> Option<Self> {
        Self::from_key(id.strip_prefix("resp_")?)
    }

    fn from_key(key: &str) -> Option<Self> {
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<usize>().ok())
                .flatten()
        };
        let mut parts = key.rsplitn(3, '_');
        let round = number(parts.next()?)?;
        let turn = number(parts.next()?)?;
        let session = parts.next()?;
        validate_session_id(session).ok()?;
        (turn >= 1).then(|| ResponseId {
            session: session.to_string(),
            turn,
            round,
        })
    }

    /// The id of the message item at `index` of this response's output.
    pub(super) fn item(&self, index: usize) -> String {
        format!("msg_{}_{}_{}_{index}", self.session, self.turn, self.round)
    }

    /// The response and output index a message item's id names.
    pub(super) fn parse_item(id: &str) -> Option<(Self, usize)> {
        let (key, index) = id.strip_prefix("msg_")?.rsplit_once('_')?;
        let index = (!index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
            .then(|| index.parse().ok())
            .flatten()?;
        Some((Self::from_key(key)?, index))
    }
}

impl fmt::Display for ResponseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resp_{}_{}_{}", self.session, self.turn, self.round)
    }
}

/// A response id this token has no response of.
pub(super) fn unknown_response(id: &str, param: &str) -> GatewayError {
    GatewayError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        code: Some("response_not_found"),
        param: Some(param.to_string()),
        message: format!(
            "no response `{id}` of this token: a response id names a response of a session \
             this token started through the gateway"
        ),
        retry_after_secs: None,
    }
}

/// `POST /v1/responses`.
pub(crate) async fn create(State(state): State<GatewayState>, request: Request) -> Response {
    match respond(state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/responses/{id}`.
pub(crate) async fn retrieve(
    State(state): State<GatewayState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    // Read before the answer is looked up: the request's body cannot be held across it.
    let token = caller(&request);
    let found = async {
        let requester = Requester::token(token?);
        let response =
            ResponseId::parse(&id).ok_or_else(|| unknown_response(&id, "response_id"))?;
        let stored = stored::stored(&state, &response, &requester, "response_id").await?;
        let config = &state.host.options.config;
        // The model as the client named it: the first name the gateway offers it under.
        let upstream = stored
            .info
            .settings
            .model
            .clone()
            .unwrap_or_else(|| config.llm.model.clone());
        let model = config
            .gateway
            .offered(&config.llm.model)
            .into_iter()
            .find(|(_, u)| *u == upstream)
            .map_or(upstream, |(name, _)| name);
        let error = stored
            .error
            .map(|message| serde_json::json!({"code": "server_error", "message": message}));
        let echo = match &stored.info.settings.system_prompt {
            Some(prompt) => [("instructions".to_string(), serde_json::json!(prompt))]
                .into_iter()
                .collect(),
            None => Default::default(),
        };
        Ok::<_, GatewayError>(events::object(
            &response.to_string(),
            &model,
            stored.info.updated_ms / 1000,
            stored.status,
            events::items(&response, &stored.output),
            None,
            error,
            &echo,
        ))
    };
    match found.await {
        Ok(object) => Json(object).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Where a request's turn goes.
struct Found {
    /// The session; `None`: a new one.
    session: Option<String>,
    /// The turn's number, when the request continues a running turn.
    turn: Option<usize>,
    /// The round of the response (see [`ResponseId`]).
    round: usize,
}

async fn respond(state: GatewayState, request: Request) -> Result<Response, GatewayError> {
    let named = named_session(request.headers())?;
    let token = caller(&request)?;
    let tool_events = wants_tool_events(request.headers());
    let headers = request.headers().clone();
    let body = read_body(request).await?;
    let host = state.host.clone();
    let config = &host.options.config;
    let offered = config.gateway.offered(&config.llm.model);
    let mut parsed = input::parse(&body, &offered, &config.gateway.parameters)?;
    let requester = Requester {
        token,
        user: parsed.user.clone(),
    };
    parsed.items = stored::resolve(&state, &requester, std::mem::take(&mut parsed.items)).await?;
    let request = input::request(parsed)?;
    let found = find(&state, &request, named, &requester).await?;
    // The results of the client's tools go to the turn waiting for them, on whichever host.
    if let (Input::ToolResults(_), Some(session)) = (&request.chat.input, &found.session)
        && !state.client_calls.waits(session)
        && let Some(url) = crate::forward::driving_host(&host, session, &headers).await
    {
        return super::pass_on(&host, &url, "/v1/responses", &headers, body).await;
    }
    let (session, events) =
        super::turn::begin_turn(&state, &request.chat, &requester, found.session)
            .await
            .map_err(|e| renamed(e, ".function.", "."))?;
    let guard = CancelOnDrop {
        host: host.clone(),
        session: session.clone(),
        armed: true,
    };
    let ResponsesRequest {
        chat,
        previous,
        echo,
        ..
    } = request;
    let stream = chat.stream;
    let mut reading = Reading::new(
        &state,
        chat,
        events,
        guard,
        String::new(),
        tool_events,
        requester,
    );
    // The writer remembers the history in the form a Responses client sends it.
    reading.record_history = false;
    let writer = Writer::new(
        session.clone(),
        found.turn,
        found.round,
        echo,
        previous.is_none(),
    );
    let mut response = if stream {
        events::stream(reading, writer).await?
    } else {
        events::whole(reading, writer).await?
    };
    if let Ok(value) = HeaderValue::from_str(&session) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// The session a request's turn goes to (see the module's doc).
async fn find(
    state: &GatewayState,
    request: &ResponsesRequest,
    named: Option<String>,
    requester: &Requester,
) -> Result<Found, GatewayError> {
    let host = &state.host;
    let results = matches!(request.chat.input, Input::ToolResults(_));
    let no_waiting_turn = |message: String| GatewayError {
        status: StatusCode::CONFLICT,
        kind: "invalid_request_error",
        code: Some("no_waiting_turn"),
        param: Some("input".into()),
        message,
        retry_after_secs: None,
    };
    if let Some(previous) = &request.previous {
        let (info, conv) = stored::load(host, previous, requester, "previous_response_id").await?;
        if named.as_ref().is_some_and(|n| *n != previous.session) {
            return Err(GatewayError::invalid(
                SESSION_HEADER,
                "X-Cordon-Session names another session than `previous_response_id`; send one \
                 of them",
            ));
        }
        if request.system.is_some() && request.system != info.settings.system_prompt {
            return Err(GatewayError::invalid(
                "instructions",
                "`instructions` (and system or developer messages) differ from the system \
                 prompt of the session `previous_response_id` continues, which is set when \
                 the session starts: leave them out, or send the whole conversation as \
                 `input` without `previous_response_id` to start a session with these",
            ));
        }
        let last = conv.turns.len();
        if results {
            if previous.turn != last || conv.is_idle() {
                return Err(no_waiting_turn(format!(
                    "no turn waits for function call outputs after `{previous}`: its turn is \
                     over; send the next user message instead"
                )));
            }
            // Each earlier round of the turn ended with an answer that called the client's
            // tools: a round past those is no response of this turn.
            let first = conv.turns.last().map_or(0, |t| t.first_message);
            let asked = conv.messages[first.min(conv.messages.len())..]
                .iter()
                .filter(|m| {
                    matches!(m, cordon_agent::Message::Assistant { tool_calls, .. } if !tool_calls.is_empty())
                })
                .count();
            if previous.round >= asked {
                return Err(unknown_response(
                    &previous.to_string(),
                    "previous_response_id",
                ));
            }
            return Ok(Found {
                session: Some(info.id),
                turn: Some(last),
                round: previous.round + 1,
            });
        }
        if previous.turn == last {
            return Ok(Found {
                session: Some(info.id),
                turn: None,
                round: 0,
            });
        }
        let copy = host
            .store()
            .fork(
                &info.id,
                Some(previous.turn),
                None,
                Some(requester.token.clone()),
            )
            .await
            .map_err(ApiError::from)?;
        return Ok(Found {
            session: Some(copy.id),
            turn: None,
            round: 0,
        });
    }
    let known = match named {
        Some(id) => Some(own_session(host, &id, requester).await?),
        None => state.histories.find(host, requester, &request.chat).await,
    };
    if !results {
        return Ok(Found {
            session: known,
            turn: None,
            round: 0,
        });
    }
    let Some(session) = known else {
        return Err(no_waiting_turn(
            "no turn waits for these function call outputs: the input does not continue a \
             response of this host that asked for them; name that response in \
             `previous_response_id`, or send the next user message"
                .into(),
        ));
    };
    let info = host
        .store()
        .session(&session)
        .await
        .map_err(ApiError::from)?;
    // Each response of this turn that asked for the client's tools is a call message since
    // the turn's user message.
    let history = &request.chat.history;
    let since = history
        .iter()
        .rposition(|s| s.role == Role::User)
        .map_or(0, |i| i + 1);
    let round = history[since..]
        .iter()
        .filter(|s| s.role == Role::Assistant && !s.tool_calls.is_empty())
        .count();
    Ok(Found {
        session: Some(session),
        turn: usize::try_from(info.turns).ok(),
        round,
    })
}

/// A Responses request body as the gateway reads it, its references looked up.
#[cfg(feature = "fuzzing")]
pub(super) fn read_request(
    data: &[u8],
    offered: &[(String, String)],
    bounds: &cordon_agent::GatewayParameters,
) {
    if let Ok(parsed) = input::parse(data, offered, bounds) {
        let _ = input::request(parsed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_session_turn_and_round() {
        let id = ResponseId {
            session: "s-0a_b".into(),
            turn: 3,
            round: 1,
        };
        assert_eq!(id.to_string(), "resp_s-0a_b_3_1");
        assert_eq!(ResponseId::parse("resp_s-0a_b_3_1"), Some(id.clone()));
        assert_eq!(id.item(2), "msg_s-0a_b_3_1_2");
        assert_eq!(ResponseId::parse_item("msg_s-0a_b_3_1_2"), Some((id, 2)));
        for bad in [
            "resp_s_0_0",
            "resp_s_1",
            "resp__1_0",
            "resp_s_+1_0",
            "chatcmpl-1",
            "resp_a/b_1_0",
        ] {
            assert_eq!(ResponseId::parse(bad), None, "{bad}");
        }
        assert_eq!(ResponseId::parse_item("msg_s_1_0"), None);
    }
}
