//! A response reading its turn's events: the model's text as it streams, the end of the
//! turn (or the client's tool calls it waits for), as one `chat.completion` or as
//! `chat.completion.chunk`s.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cordon_agent::{AgentEvent, TurnOutcome};
use cordon_core::Requester;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::request::{ChatRequest, Role, Said, WireCall, history_digest};
use super::{CancelOnDrop, GatewayError, GatewayState, error_body};
use crate::error::ApiError;
use crate::live::{HostEvent, Published, SessionEvent};

/// How a response ends.
pub(super) enum Ending {
    /// An answer (`finish_reason: "stop"`).
    Answer(String),
    /// An answer the model stopped at its length limit (`finish_reason: "length"`).
    Truncated(String),
    /// The model called the client's tools (`finish_reason: "tool_calls"`); the turn waits
    /// for their results. With what the model said before calling.
    ClientCalls(String, Vec<WireCall>),
    /// No answer: the error to report.
    Error(GatewayError),
}

/// What a response reads from its turn's events.
pub(super) enum Read {
    /// Text the model streamed.
    Text(String),
    /// The model called Cordon's tools: the turn goes on (runs them, may ask about them).
    CordonCalls,
    /// Tool activity the client asked to see: an engine event as JSON.
    Activity(Value),
    /// The end of the response.
    End(Ending),
}

/// A response reading its turn.
pub(super) struct Reading {
    pub(super) state: GatewayState,
    pub(super) chat: ChatRequest,
    pub(super) events: broadcast::Receiver<Arc<Published>>,
    pub(super) guard: CancelOnDrop,
    pub(super) id: String,
    pub(super) client_names: Vec<String>,
    pub(super) usage: cordon_agent::Usage,
    /// What the model said in its current answer.
    pub(super) said: String,
    /// Whether the client asked for Cordon's tool activity ([`TOOL_EVENTS_HEADER`]).
    pub(super) tool_events: bool,
    /// Who sent the request: the history it ends with is theirs only.
    pub(super) requester: Requester,
    /// The index of the turn this response started, once its start was read.
    pub(super) turn: Option<usize>,
    /// Whether the history the request sent, and the answer, are remembered as the end of
    /// the session (not when the request sent only what follows a response it named).
    pub(super) record_history: bool,
    /// The store's record of the history the response ends with, while it is written.
    pub(super) recording: Option<tokio::task::JoinHandle<()>>,
}

impl Reading {
    pub(super) fn new(
        state: &GatewayState,
        chat: ChatRequest,
        events: broadcast::Receiver<Arc<Published>>,
        guard: CancelOnDrop,
        id: String,
        tool_events: bool,
        requester: Requester,
    ) -> Self {
        Reading {
            state: state.clone(),
            id,
            client_names: chat.client_tools.iter().map(|t| t.name.clone()).collect(),
            chat,
            events,
            guard,
            usage: cordon_agent::Usage::default(),
            said: String::new(),
            tool_events,
            requester,
            turn: None,
            record_history: true,
            recording: None,
        }
    }

    /// The next thing the response shows; events it does not show are skipped. Its end
    /// comes once the store holds the history it ends with.
    pub(super) async fn next(&mut self) -> Read {
        let read = self.next_event().await;
        if matches!(read, Read::End(_)) {
            recorded(&mut self.recording).await;
        }
        read
    }

    async fn next_event(&mut self) -> Read {
        loop {
            let event = match self.events.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => {
                    return self.end(Ending::Error(GatewayError::from(ApiError::internal(
                        "the turn's events ended before the turn did",
                    ))));
                }
            };
            match &event.event {
                SessionEvent::Agent(AgentEvent::TurnStarted { turn, .. }) => {
                    self.turn = Some(*turn)
                }
                SessionEvent::Agent(AgentEvent::ModelRequest { .. }) => self.said.clear(),
                SessionEvent::Agent(AgentEvent::TextDelta { text }) if !text.is_empty() => {
                    self.said.push_str(text);
                    return Read::Text(text.clone());
                }
                SessionEvent::Agent(AgentEvent::Usage { usage }) => self.usage.add(*usage),
                SessionEvent::Agent(
                    e @ (AgentEvent::ToolStarted { .. }
                    | AgentEvent::ToolResult { .. }
                    | AgentEvent::ToolCallRejected { .. }
                    | AgentEvent::ApprovalNeeded { .. }
                    | AgentEvent::ApprovalGiven { .. }),
                ) if self.tool_events => return Read::Activity(json!(e)),
                SessionEvent::Agent(AgentEvent::ToolCallsRequested { calls }) => {
                    let theirs: Vec<WireCall> = calls
                        .iter()
                        .filter(|c| self.client_names.contains(&c.call.name))
                        // A call whose arguments are not a JSON object is refused by the
                        // engine; the model hears why and tries again.
                        .filter(|c| {
                            serde_json::from_str::<Value>(&c.call.arguments)
                                .is_ok_and(|v| v.is_object())
                        })
                        .map(|c| WireCall {
                            id: c.call.id.clone(),
                            name: c.call.name.clone(),
                            arguments: c.call.arguments.clone(),
                        })
                        .collect();
                    if !theirs.is_empty() {
                        self.state.client_calls.expect(&self.guard.session, &theirs);
                        let said = std::mem::take(&mut self.said);
                        return self.end(Ending::ClientCalls(said, theirs));
                    }
                    return Read::CordonCalls;
                }
                _ => {}
            }
            if let Some(end) = ending(&event.event) {
                self.state.client_calls.forget(&self.guard.session);
                return self.end(end);
            }
        }
    }

    /// The response ends: the turn goes on without it (a client's tool calls) or has ended,
    /// so the client leaving no longer cancels it; the history the client will send next is
    /// the session's.
    pub(super) fn end(&mut self, ending: Ending) -> Read {
        self.guard.armed = false;
        let mut history = self.chat.sent.clone();
        match &ending {
            Ending::Answer(answer) | Ending::Truncated(answer) => {
                history.push(Said::new(Role::Assistant, answer.clone()))
            }
            Ending::ClientCalls(said, calls) => history.push(Said {
                tool_calls: calls.clone(),
                ..Said::new(Role::Assistant, said.clone())
            }),
            Ending::Error(_) => return Read::End(ending),
        }
        if !self.record_history {
            return Read::End(ending);
        }
        self.recording = Some(self.state.histories.record(
            &self.state.host,
            history_digest(&self.requester, &self.chat.model, &history),
            self.guard.session.clone(),
        ));
        Read::End(ending)
    }
}

/// Waits until the store's record of a history, if one is being written, is written (or
/// failed, which is only logged: the client's next request then starts a new session).
pub(super) async fn recorded(recording: &mut Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = recording.take() {
        let _ = task.await;
    }
}

pub(super) fn ending(event: &SessionEvent) -> Option<Ending> {
    match event {
        SessionEvent::Agent(AgentEvent::TurnFinished {
            outcome,
            answer,
            truncated,
            ..
        }) => Some(match outcome {
            TurnOutcome::Answered | TurnOutcome::FinalAnswerAfterLimit if *truncated => {
                Ending::Truncated(answer.clone())
            }
            TurnOutcome::Answered | TurnOutcome::FinalAnswerAfterLimit => {
                Ending::Answer(answer.clone())
            }
            TurnOutcome::NoProgress { explanation } => Ending::Answer(if answer.is_empty() {
                explanation.clone()
            } else {
                answer.clone()
            }),
            TurnOutcome::Cancelled => Ending::Error(GatewayError {
                status: StatusCode::CONFLICT,
                kind: "cancelled",
                code: Some("turn_cancelled"),
                param: None,
                message: "the turn was cancelled (through the API or the console) before it \
                          answered"
                    .into(),
                retry_after_secs: None,
            }),
            TurnOutcome::Failed {
                error,
                upstream_status,
                retry_after_ms,
            } => {
                // As the model server would report it: a 429 as a 429 (with its Retry-After)
                // and a 5xx as that 5xx, after Cordon's own retries; anything else (a refused
                // request, no answer at all) is the gateway's upstream failing.
                let (status, kind) =
                    match upstream_status.and_then(|s| StatusCode::from_u16(s).ok()) {
                        Some(StatusCode::TOO_MANY_REQUESTS) => {
                            (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
                        }
                        Some(s) if s.is_server_error() => (s, "server_error"),
                        _ => (StatusCode::BAD_GATEWAY, "upstream_error"),
                    };
                Ending::Error(GatewayError {
                    status,
                    kind,
                    code: Some("upstream_failed"),
                    param: None,
                    message: format!("the turn failed: {error}"),
                    retry_after_secs: retry_after_ms.map(|ms| ms.div_ceil(1000)),
                })
            }
        }),
        SessionEvent::Host(HostEvent::TurnStopped { reason }) => {
            Some(Ending::Error(GatewayError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "service_unavailable",
                code: Some("turn_stopped"),
                param: None,
                message: format!("the turn stopped before it answered: {reason}"),
                retry_after_secs: None,
            }))
        }
        _ => None,
    }
}

pub(super) fn usage_json(usage: &cordon_agent::Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

pub(super) fn created() -> i64 {
    cordon_core::now_ms() / 1000
}

pub(super) async fn whole_response(mut reading: Reading) -> Result<Response, GatewayError> {
    let mut activity = Vec::new();
    let (message, finish) = loop {
        match reading.next().await {
            Read::Text(_) | Read::CordonCalls => {}
            Read::Activity(event) => activity.push(event),
            Read::End(Ending::Answer(answer)) => {
                break (json!({"role": "assistant", "content": answer}), "stop");
            }
            Read::End(Ending::Truncated(answer)) => {
                break (json!({"role": "assistant", "content": answer}), "length");
            }
            Read::End(Ending::ClientCalls(said, calls)) => {
                let calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut call = c.to_json(i);
                        call.as_object_mut().map(|o| o.remove("index"));
                        call
                    })
                    .collect();
                let content = if said.is_empty() {
                    Value::Null
                } else {
                    json!(said)
                };
                break (
                    json!({"role": "assistant", "content": content, "tool_calls": calls}),
                    "tool_calls",
                );
            }
            Read::End(Ending::Error(e)) => return Err(e),
        }
    };
    let mut completion = json!({
        "id": reading.id,
        "object": "chat.completion",
        "created": created(),
        "model": reading.chat.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage_json(&reading.usage),
    });
    if reading.tool_events {
        completion["cordon"] = json!({"events": activity});
    }
    Ok(Json(completion).into_response())
}

/// One `chat.completion.chunk` with the answer's one choice.
pub(super) fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> SseEvent {
    let mut choice = Map::new();
    choice.insert("index".into(), json!(0));
    choice.insert("delta".into(), delta);
    choice.insert("finish_reason".into(), json!(finish));
    envelope(id, model, json!([Value::Object(choice)]), None)
}

/// A `chat.completion.chunk` with no choice, carrying `field` (the usage, or Cordon's tool
/// activity) instead.
fn choiceless_chunk(id: &str, model: &str, field: &str, value: Value) -> SseEvent {
    envelope(id, model, json!([]), Some((field, value)))
}

fn envelope(id: &str, model: &str, choices: Value, extra: Option<(&str, Value)>) -> SseEvent {
    let mut chunk = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created(),
        "model": model,
        "choices": choices,
    });
    if let Some((field, value)) = extra {
        chunk[field] = value;
    }
    SseEvent::default().data(chunk.to_string())
}

/// The chunks that show `read`; true when the stream ends with them.
pub(super) fn chunks_of(read: Read, reading: &Reading, queued: &mut VecDeque<SseEvent>) -> bool {
    let (id, model) = (&reading.id, &reading.chat.model);
    let end = match read {
        Read::Text(text) => {
            queued.push_back(chunk(id, model, json!({"content": text}), None));
            return false;
        }
        Read::CordonCalls => return false,
        Read::Activity(event) => {
            queued.push_back(choiceless_chunk(id, model, "cordon", event));
            return false;
        }
        Read::End(end) => end,
    };
    match end {
        Ending::Answer(_) => queued.push_back(chunk(id, model, json!({}), Some("stop"))),
        Ending::Truncated(_) => queued.push_back(chunk(id, model, json!({}), Some("length"))),
        Ending::ClientCalls(_, calls) => {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| c.to_json(i))
                .collect();
            queued.push_back(chunk(id, model, json!({"tool_calls": calls}), None));
            queued.push_back(chunk(id, model, json!({}), Some("tool_calls")));
        }
        Ending::Error(e) => {
            queued.push_back(SseEvent::default().data(error_body(&e).to_string()));
            queued.push_back(SseEvent::default().data("[DONE]"));
            return true;
        }
    }
    if reading.chat.include_usage {
        let usage = usage_json(&reading.usage);
        queued.push_back(choiceless_chunk(id, model, "usage", usage));
    }
    queued.push_back(SseEvent::default().data("[DONE]"));
    true
}

/// The turn as `chat.completion.chunk`s: a first chunk with the role, the model's text as it
/// streams, a last chunk with the finish reason (and the tool calls, when the model called
/// the client's tools), the usage when asked for, then `[DONE]`.
///
/// The response starts once the model first answered (text, tool calls, or the turn's end),
/// so a turn that fails before that (a 429 the retries did not get past) is answered with the
/// status an upstream would give; while Cordon's tools run or wait for approval, the started
/// stream keeps the connection alive. An error after that comes as an `{"error": …}` event,
/// as OpenAI's API sends one.
pub(super) async fn stream_response(mut reading: Reading) -> Result<Response, GatewayError> {
    let first = match reading.next().await {
        Read::End(Ending::Error(e)) => return Err(e),
        read => read,
    };
    let mut queued = VecDeque::from([chunk(
        &reading.id,
        &reading.chat.model,
        json!({"role": "assistant", "content": ""}),
        None,
    )]);
    let done = chunks_of(first, &reading, &mut queued);
    let stream = futures::stream::unfold(
        (reading, queued, done),
        |(mut reading, mut queued, mut done)| async move {
            loop {
                if let Some(event) = queued.pop_front() {
                    return Some((Ok::<_, Infallible>(event), (reading, queued, done)));
                }
                if done {
                    return None;
                }
                let read = reading.next().await;
                done = chunks_of(read, &reading, &mut queued);
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}
