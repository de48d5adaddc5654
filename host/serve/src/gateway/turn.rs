//! Starting what a request adds to its session, whichever API it came through: a new turn
//! (in the session found for it, or in a new one), or the results of the client's own tools
//! that a running turn waits for.

use std::sync::Arc;

use axum::http::StatusCode;
use cordon_agent::{TurnInput, TurnRequest};
use cordon_core::Requester;
use tokio::sync::broadcast;

use super::client_tools::with_client_tools;
use super::request::{ChatRequest, Input};
use super::{GatewayError, GatewayState, check_tools, check_tools_for, new_session};
use crate::live::Published;

/// Starts `chat`'s turn in session `known` (a new session, created by `requester`'s token,
/// when `None`), or hands its tool results to the turn of `known` that waits for them.
/// Returns the session and a follower of its events from before the turn (or its rest)
/// started, so nothing of it is missed.
pub(super) async fn begin_turn(
    state: &GatewayState,
    chat: &ChatRequest,
    requester: &Requester,
    known: Option<String>,
) -> Result<(String, broadcast::Receiver<Arc<Published>>), GatewayError> {
    let host = &state.host;
    match &chat.input {
        Input::Message { text, parts } => {
            let input = TurnInput::Request(Box::new(TurnRequest {
                text: text.clone(),
                parts: parts.clone(),
                parameters: chat.parameters.clone(),
            }));
            match known {
                Some(session) => {
                    check_tools(host, &session, chat).await?;
                    let tools = with_client_tools(state, &session, &chat.client_tools);
                    let events = host
                        .start_turn_with(&session, input, tools, Some(requester.clone()), "gateway")
                        .await?;
                    Ok((session, events))
                }
                None => {
                    let new = new_session(chat, requester);
                    let id = new.id.clone().unwrap_or_default();
                    check_tools_for(host, &new.settings, chat).await?;
                    let tools = with_client_tools(state, &id, &chat.client_tools);
                    Ok(host
                        .start_new_turn(new, input, tools, Some(requester.clone()), "gateway")
                        .await?)
                }
            }
        }
        Input::ToolResults(results) => {
            let Some(session) = known else {
                return Err(GatewayError {
                    status: StatusCode::CONFLICT,
                    kind: "invalid_request_error",
                    code: Some("no_waiting_turn"),
                    param: Some("messages".into()),
                    message: "no turn waits for these tool results: the history does not \
                              continue a response of this host that asked for them; send the \
                              X-Cordon-Session header of that response, or the next user \
                              message"
                        .into(),
                    retry_after_secs: None,
                });
            };
            // Follow before the results go in, so no event of the rest of the turn is missed.
            let events = host.follow(&session);
            state
                .client_calls
                .supply(&session, results)
                .map_err(|message| GatewayError {
                    status: StatusCode::CONFLICT,
                    kind: "invalid_request_error",
                    code: Some("no_waiting_turn"),
                    param: Some("messages".into()),
                    message,
                    retry_after_secs: None,
                })?;
            Ok((session, events))
        }
    }
}
