//! A Responses API response reading its turn: one `response` object, or the stream of
//! Responses events (`response.created`, `response.in_progress`, per message
//! `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`s,
//! `response.output_text.done`, `response.content_part.done`, `response.output_item.done`;
//! per call of the client's tools a `function_call` item with its
//! `response.function_call_arguments.delta` and `.done`; then `response.completed` with the
//! usage, or `response.failed`), numbered by `sequence_number`.
//!
//! The text of each model request of the turn is a message item of its own, as it streams: a
//! model that says something before it calls Cordon's tools has said it. Cordon's tool calls
//! are not output items; they are in the session, the audit log and the console (and, asked
//! for with `X-Cordon-Tool-Events`, `cordon.tool_activity` events or a `cordon.events` list).

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::Json;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::super::request::{WireCall, history_digest};
use super::super::response::{Ending, Read, Reading, created, recorded};
use super::super::{GatewayError, GatewayState};
use super::ResponseId;
use super::input::saids;
use super::stored::Output;

/// A response's output as it is written, and its events when it streams.
pub(super) struct Writer {
    session: String,
    /// The turn's number, when known before its start is read (the rest of a turn).
    turn: Option<usize>,
    round: usize,
    echo: Map<String, Value>,
    /// Whether the history the request sent, and this output, are remembered as the
    /// session's end (not when the request named the response it continues).
    record: bool,
    created_at: i64,
    id: Option<ResponseId>,
    output: Vec<Output>,
    /// The text of the message item being written.
    open: Option<String>,
    streaming: bool,
    sequence: u64,
    queued: VecDeque<SseEvent>,
    activity: Vec<Value>,
    /// The model stopped the answer at its length limit: the response is `incomplete`.
    truncated: bool,
    /// The store's record of the history the response ends with, while it is written.
    recording: Option<tokio::task::JoinHandle<()>>,
}

impl Writer {
    pub(super) fn new(
        session: String,
        turn: Option<usize>,
        round: usize,
        echo: Map<String, Value>,
        record: bool,
    ) -> Self {
        Writer {
            session,
            turn,
            round,
            echo,
            record,
            created_at: created(),
            id: None,
            output: Vec::new(),
            open: None,
            streaming: false,
            sequence: 0,
            queued: VecDeque::new(),
            activity: Vec::new(),
            truncated: false,
            recording: None,
        }
    }

    /// The response's id: known once the turn's start was read.
    fn id(&mut self, reading: &Reading) -> ResponseId {
        self.id
            .get_or_insert_with(|| ResponseId {
                session: self.session.clone(),
                turn: self.turn.or(reading.turn.map(|t| t + 1)).unwrap_or(0),
                round: self.round,
            })
            .clone()
    }

    fn event(&mut self, kind: &str, mut body: Value) {
        if !self.streaming {
            return;
        }
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.queued
            .push_back(SseEvent::default().event(kind).data(body.to_string()));
    }

    /// The response object as it stands.
    fn object(&self, reading: &Reading, status: &str, error: Option<&GatewayError>) -> Value {
        let id = self.id.clone().unwrap_or_else(|| ResponseId {
            session: self.session.clone(),
            turn: 0,
            round: self.round,
        });
        let mut items = self.items(&id);
        if let Some(text) = &self.open {
            items.push(message_item(
                &id.item(self.output.len()),
                text,
                "in_progress",
            ));
        }
        let usage = matches!(status, "completed" | "incomplete").then(|| usage(&reading.usage));
        let error = error.map(|e| {
            json!({
                "code": if e.status == StatusCode::TOO_MANY_REQUESTS { "rate_limit_exceeded" } else { "server_error" },
                "message": e.message,
            })
        });
        object(
            &id.to_string(),
            &reading.chat.model,
            self.created_at,
            status,
            items,
            usage,
            error,
            &self.echo,
        )
    }

    fn items(&self, id: &ResponseId) -> Vec<Value> {
        items(id, &self.output)
    }

    /// The stream begins: `response.created` and `response.in_progress`.
    fn begin(&mut self, reading: &Reading) {
        self.streaming = true;
        self.id(reading);
        let response = self.object(reading, "in_progress", None);
        self.event("response.created", json!({"response": response}));
        let response = self.object(reading, "in_progress", None);
        self.event("response.in_progress", json!({"response": response}));
    }

    fn text(&mut self, reading: &Reading, delta: &str) {
        let id = self.id(reading);
        let index = self.output.len();
        let item_id = id.item(index);
        if self.open.is_none() {
            self.open = Some(String::new());
            self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": message_item(&item_id, "", "in_progress")}),
            );
            self.event(
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": text_part("")}),
            );
        }
        if let Some(open) = &mut self.open {
            open.push_str(delta);
        }
        self.event(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": []}),
        );
    }

    /// The message item being written is done.
    fn close(&mut self, reading: &Reading) {
        let Some(text) = self.open.take() else {
            return;
        };
        let id = self.id(reading);
        let index = self.output.len();
        let item_id = id.item(index);
        self.event(
            "response.output_text.done",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
        );
        self.event(
            "response.content_part.done",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": text_part(&text)}),
        );
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": message_item(&item_id, &text, "completed")}),
        );
        self.output.push(Output::Text(text));
    }

    fn calls(&mut self, calls: &[WireCall]) {
        for call in calls {
            let index = self.output.len();
            let item_id = call_item_id(call);
            let mut added = call_item(call, "in_progress");
            added["arguments"] = json!("");
            self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": index, "delta": call.arguments}),
            );
            self.event(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": index, "name": call.name, "arguments": call.arguments}),
            );
            self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": call_item(call, "completed")}),
            );
            self.output.push(Output::Call(call.clone()));
        }
    }

    /// The turn's answer ends the response; `truncated`: at the model's length limit.
    fn answered(&mut self, reading: &Reading, answer: String, truncated: bool) {
        self.truncated = truncated;
        self.close(reading);
        let last = self.output.iter().rev().find_map(|o| match o {
            Output::Text(t) => Some(t),
            Output::Call(_) => None,
        });
        // An answer that did not stream (a turn that gave up with an explanation).
        if !answer.is_empty() && last != Some(&answer) {
            self.text(reading, &answer);
            self.close(reading);
        }
        self.done(reading);
    }

    /// Shows what the reading read; `Err` when the response ended in an error.
    fn apply(&mut self, reading: &Reading, read: Read) -> Result<bool, GatewayError> {
        self.id(reading);
        match read {
            Read::Text(text) => self.text(reading, &text),
            Read::CordonCalls => self.close(reading),
            Read::Activity(event) => {
                if self.streaming {
                    self.event("cordon.tool_activity", json!({"event": event}));
                } else {
                    self.activity.push(event);
                }
            }
            Read::End(Ending::Answer(answer)) => {
                self.answered(reading, answer, false);
                return Ok(true);
            }
            Read::End(Ending::Truncated(answer)) => {
                self.answered(reading, answer, true);
                return Ok(true);
            }
            Read::End(Ending::ClientCalls(said, calls)) => {
                if self.open.is_none() && !said.is_empty() {
                    self.text(reading, &said);
                }
                self.close(reading);
                self.calls(&calls);
                self.done(reading);
                return Ok(true);
            }
            Read::End(Ending::Error(e)) => return Err(e),
        }
        Ok(false)
    }

    /// The response is complete: the history the client will send next is remembered as
    /// the session's end (see [`super::super::histories`]), then `response.completed`.
    fn done(&mut self, reading: &Reading) {
        if self.record {
            let mut history = reading.chat.sent.clone();
            let output: Vec<_> = self.output.iter().map(|o| (0, o.as_input())).collect();
            history.extend(saids(&output).into_iter().map(|(_, s)| s));
            let state: &GatewayState = &reading.state;
            self.recording = Some(state.histories.record(
                &state.host,
                history_digest(&reading.requester, &reading.chat.model, &history),
                self.session.clone(),
            ));
        }
        let status = self.status();
        let response = self.object(reading, status, None);
        self.event(&format!("response.{status}"), json!({"response": response}));
    }

    /// How the response ended: `completed`, or `incomplete` when the model stopped its
    /// answer at the length limit.
    pub(super) fn status(&self) -> &'static str {
        if self.truncated {
            "incomplete"
        } else {
            "completed"
        }
    }

    fn failed(&mut self, reading: &Reading, e: &GatewayError) {
        let response = self.object(reading, "failed", Some(e));
        self.event("response.failed", json!({"response": response}));
    }
}

/// Output items as JSON, message items named after `id`.
pub(super) fn items(id: &ResponseId, output: &[Output]) -> Vec<Value> {
    output
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Output::Text(text) => message_item(&id.item(i), text, "completed"),
            Output::Call(call) => call_item(call, "completed"),
        })
        .collect()
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" && text.is_empty() {
        json!([])
    } else {
        json!([text_part(text)])
    };
    json!({"id": id, "type": "message", "role": "assistant", "status": status, "content": content})
}

fn call_item_id(call: &WireCall) -> String {
    format!("fc_{}", call.id)
}

fn call_item(call: &WireCall, status: &str) -> Value {
    json!({
        "id": call_item_id(call),
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    })
}

fn usage(usage: &cordon_agent::Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

/// A `response` object; the request's own settings echoed from `echo`.
#[allow(clippy::too_many_arguments)]
pub(super) fn object(
    id: &str,
    model: &str,
    created_at: i64,
    status: &str,
    output: Vec<Value>,
    usage: Option<Value>,
    error: Option<Value>,
    echo: &Map<String, Value>,
) -> Value {
    let echoed = |key: &str, default: Value| echo.get(key).cloned().unwrap_or(default);
    json!({
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": (status == "completed").then(created),
        "error": error,
        "incomplete_details": (status == "incomplete").then(|| json!({"reason": "max_output_tokens"})),
        "instructions": echoed("instructions", Value::Null),
        "max_output_tokens": echoed("max_output_tokens", Value::Null),
        "metadata": echoed("metadata", json!({})),
        "model": model,
        "output": output,
        "parallel_tool_calls": echoed("parallel_tool_calls", json!(true)),
        "previous_response_id": echoed("previous_response_id", Value::Null),
        "reasoning": echoed("reasoning", json!({"effort": null, "summary": null})),
        "store": echoed("store", json!(true)),
        "temperature": echoed("temperature", Value::Null),
        "text": echoed("text", json!({"format": {"type": "text"}})),
        "tool_choice": echoed("tool_choice", json!("auto")),
        "tools": echoed("tools", json!([])),
        "top_p": echoed("top_p", Value::Null),
        "truncation": echoed("truncation", json!("disabled")),
        "usage": usage,
        "user": echoed("user", Value::Null),
    })
}

/// The whole response, once the turn ended or waits for the client's tools.
pub(super) async fn whole(
    mut reading: Reading,
    mut writer: Writer,
) -> Result<Response, GatewayError> {
    loop {
        let read = reading.next().await;
        if writer.apply(&reading, read)? {
            break;
        }
    }
    recorded(&mut writer.recording).await;
    let mut response = writer.object(&reading, writer.status(), None);
    if reading.tool_events {
        response["cordon"] = json!({"events": writer.activity});
    }
    Ok(Json(response).into_response())
}

/// The response as Responses events. As for Chat Completions, the stream starts once the model
/// first answered, so a turn that fails before that is answered with the status an upstream
/// would give; an error after that is a `response.failed` event.
pub(super) async fn stream(
    mut reading: Reading,
    mut writer: Writer,
) -> Result<Response, GatewayError> {
    let first = match reading.next().await {
        Read::End(Ending::Error(e)) => return Err(e),
        read => read,
    };
    writer.begin(&reading);
    let done = match writer.apply(&reading, first) {
        Ok(done) => done,
        Err(e) => {
            writer.failed(&reading, &e);
            true
        }
    };
    let stream = futures::stream::unfold(
        (reading, writer, done),
        |(mut reading, mut writer, mut done)| async move {
            loop {
                // The last events (`response.completed`) go once the store holds the
                // history they end.
                if done {
                    recorded(&mut writer.recording).await;
                }
                if let Some(event) = writer.queued.pop_front() {
                    return Some((Ok::<_, Infallible>(event), (reading, writer, done)));
                }
                if done {
                    return None;
                }
                let read = reading.next().await;
                done = match writer.apply(&reading, read) {
                    Ok(done) => done,
                    Err(e) => {
                        writer.failed(&reading, &e);
                        true
                    }
                };
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}
