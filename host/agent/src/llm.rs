//! The client for OpenAI-compatible chat endpoints (Ollama, llama.cpp, vLLM, Foundry Local,
//! OpenAI): one attempt per call, streaming or not. Retrying is the state machine's job, so the
//! history is only ever appended once per successful answer.

use std::collections::BTreeMap;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::field::Empty;

use crate::config::LlmConfig;
pub use crate::messages::LlmFailure;
use crate::messages::{ModelResponse, ToolCall, Usage, snippet};
use crate::parameters::{MAX_TOKENS_FIELDS, RESERVED};

/// Why a request to the model produced no answer: it failed, or the caller cancelled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LlmError {
    /// The request failed.
    Failed(LlmFailure),
    /// The caller cancelled; `partial` is the text streamed so far.
    Cancelled {
        /// Text received before the cancellation.
        partial: String,
    },
}

/// Problems creating the client.
#[derive(Debug, thiserror::Error)]
pub enum LlmSetupError {
    /// The config names an API key variable that is not set.
    #[error(
        "the environment variable `{0}` (named by llm.api_key_env) is not set; export it or remove api_key_env"
    )]
    MissingKey(String),
    /// The HTTP client could not be built.
    #[error("cannot create the HTTP client: {0}")]
    Http(String),
}

/// A request, already rendered into the wire's messages and tools.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// OpenAI `messages`.
    pub messages: Vec<Value>,
    /// OpenAI `tools` (empty: none offered).
    pub tools: Vec<Value>,
    /// OpenAI `tool_choice`, sent only with tools.
    pub tool_choice: Option<Value>,
    /// What a client set for the turn ([`crate::TurnParameters::sent`]): sent as given over
    /// `[llm]`'s settings, never in place of a [`RESERVED`] field.
    pub parameters: Map<String, Value>,
}

/// A client for one endpoint and model.
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    endpoint: String,
    config: LlmConfig,
    api_key: Option<String>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("LlmClient")
            .field("endpoint", &self.endpoint)
            .field("model", &self.config.model)
            .finish()
    }
}

/// An error with its sources, each once: what reqwest's errors hide in their chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

impl LlmClient {
    /// Creates a client; reads the API key from the environment variable the config names.
    pub fn new(config: &LlmConfig) -> Result<Self, LlmSetupError> {
        let api_key = match &config.api_key_env {
            Some(var) => {
                Some(std::env::var(var).map_err(|_| LlmSetupError::MissingKey(var.clone()))?)
            }
            None => None,
        };
        // reqwest is built without a TLS crypto provider of its own (see the workspace Cargo.toml):
        // make ring the process default unless one is already installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(config.connect_timeout_secs))
            .read_timeout(Duration::from_secs(config.read_timeout_secs))
            .build()
            .map_err(|e| LlmSetupError::Http(error_chain(&e)))?;
        let endpoint = format!("{}/chat/completions", config.url.trim_end_matches('/'));
        Ok(Self {
            http,
            endpoint,
            config: config.clone(),
            api_key,
        })
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A POST of `body` to another route of the same server (`completions`, `embeddings`),
    /// with this client's key: what a gateway forwards unchanged.
    pub fn forward(&self, route: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
        let url = format!("{}/{route}", self.config.url.trim_end_matches('/'));
        let builder = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// The JSON body for a request.
    pub fn body(&self, req: &ChatRequest, stream: bool) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": req.messages,
            "stream": stream,
        });
        if stream && self.config.stream_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(req.tools.clone());
        }
        let max_tokens = self.config.max_tokens_field.as_str();
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = self.config.max_tokens {
            body[max_tokens] = json!(m);
        }
        for (name, value) in &req.parameters {
            if RESERVED.contains(&name.as_str()) {
                continue;
            }
            let name = if MAX_TOKENS_FIELDS.contains(&name.as_str()) {
                max_tokens
            } else {
                name
            };
            body[name] = value.clone();
        }
        if let Some(choice) = req.tool_choice.as_ref().filter(|_| !req.tools.is_empty()) {
            body["tool_choice"] = choice.clone();
        }
        if self.config.llama_cpp_slots > 0 {
            body["cache_prompt"] = json!(true);
            body["id_slot"] = json!(slot(&req.messages, self.config.llama_cpp_slots));
        }
        body
    }

    /// Sends one request; streamed text goes to `on_text` as it arrives. Its time, outcome
    /// and tokens go to the metrics ([`cordon_core::metrics`]) and to a span named as
    /// OpenTelemetry's conventions for generative AI name a model request (`chat MODEL`),
    /// whose trace the request carries on to the model server.
    pub async fn complete(
        &self,
        req: &ChatRequest,
        stream: bool,
        on_text: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, LlmError> {
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", self.config.model),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.request.model = %self.config.model,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            "error.type" = Empty,
            cordon.stream = stream,
            cordon.tools_offered = req.tools.len(),
        );
        let started = std::time::Instant::now();
        let done = self
            .request(req, stream, on_text, cancel)
            .instrument(span.clone())
            .await;
        let (outcome, tokens) = match &done {
            Ok(r) => (
                "ok",
                r.usage
                    .as_ref()
                    .map(|u| (u.prompt_tokens, u.completion_tokens)),
            ),
            Err(LlmError::Cancelled { .. }) => ("cancelled", None),
            Err(_) => ("failed", None),
        };
        cordon_core::metrics::model_request(started.elapsed(), outcome, tokens);
        if let Some((input, output)) = tokens {
            span.record("gen_ai.usage.input_tokens", input);
            span.record("gen_ai.usage.output_tokens", output);
        }
        if outcome != "ok" {
            span.record("otel.status_code", "error");
            span.record("error.type", outcome);
        }
        done
    }

    async fn request(
        &self,
        req: &ChatRequest,
        stream: bool,
        on_text: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, LlmError> {
        let mut trace = reqwest::header::HeaderMap::new();
        cordon_core::trace::pass_on(&mut trace);
        let mut builder = self
            .http
            .post(&self.endpoint)
            .headers(trace)
            .json(&self.body(req, stream));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled { partial: String::new() }),
            r = builder.send() => r,
        };
        let response = response.map_err(|e| {
            let what = if e.is_timeout() {
                "timed out waiting for"
            } else {
                "cannot reach"
            };
            LlmError::Failed(LlmFailure::transient(format!(
                "{what} the model server at {}: {}",
                self.endpoint,
                error_chain(&e)
            )))
        })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after_ms = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
            let text = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LlmError::Cancelled { partial: String::new() }),
                t = response.text() => t.unwrap_or_default(),
            };
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| {
                    v["error"]["message"]
                        .as_str()
                        .or(v["error"].as_str())
                        .or(v["message"].as_str())
                        .map(str::to_string)
                })
                .unwrap_or_else(|| snippet(&text));
            let code = status.as_u16();
            let transient = code == 429 || code == 408 || status.is_server_error();
            let kind = if code == 429 {
                "is rate-limiting requests"
            } else if status.is_server_error() {
                "failed"
            } else {
                "rejected the request"
            };
            return Err(LlmError::Failed(LlmFailure {
                transient,
                message: format!("the model server {kind} (HTTP {code}): {message}"),
                status: Some(code),
                retry_after_ms,
            }));
        }
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if stream && is_sse {
            self.read_stream(response, on_text, cancel).await
        } else {
            let text = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LlmError::Cancelled { partial: String::new() }),
                t = response.text() => t.map_err(|e| LlmError::Failed(LlmFailure::transient(format!(
                    "the connection to {} broke while reading the answer: {}", self.endpoint, error_chain(&e)))))?,
            };
            let response = parse_full(&text).map_err(LlmError::Failed)?;
            if !response.content.is_empty() {
                on_text(&response.content);
            }
            Ok(response)
        }
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        on_text: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, LlmError> {
        read_events(&self.endpoint, response.bytes_stream(), on_text, cancel).await
    }
}

/// Reads a chat completion stream from `endpoint`, given as the bytes it sent in the pieces
/// they came in, and assembles the answer; text goes to `on_text` as it comes.
pub(crate) async fn read_events<S, B, E>(
    endpoint: &str,
    bytes: S,
    on_text: &mut (dyn FnMut(&str) + Send),
    cancel: &CancellationToken,
) -> Result<ModelResponse, LlmError>
where
    S: futures::Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    {
        let mut raw_head = Vec::<u8>::new();
        let bytes = bytes.inspect(|chunk| {
            if let Ok(b) = chunk
                && raw_head.len() < 200
            {
                let b = b.as_ref();
                raw_head.extend_from_slice(&b[..b.len().min(200 - raw_head.len())]);
            }
        });
        // Whole lines only: the parser then reads each byte once (see `stream_lines`).
        let lines = crate::stream_lines::whole_lines(
            bytes,
            crate::stream_lines::MAX_LINE,
            crate::stream_lines::MAX_STREAM,
        );
        let mut events = lines.eventsource();
        let mut asm = Assembly::default();
        let mut done = false;
        let mut seen = 0usize;
        loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LlmError::Cancelled { partial: asm.content }),
                n = events.next() => n,
            };
            let Some(event) = next else { break };
            let event = match event {
                Ok(e) => e,
                // A line or an answer past its bound comes again if asked again.
                Err(eventsource_stream::EventStreamError::Transport(
                    e @ (crate::stream_lines::Cut::LineTooLong(_)
                    | crate::stream_lines::Cut::TooMuch(_)),
                )) => {
                    return Err(LlmError::Failed(LlmFailure::fatal(format!(
                        "the model server at {endpoint} was cut off: {e}"
                    ))));
                }
                Err(e) => {
                    return Err(LlmError::Failed(LlmFailure::transient(format!(
                        "the stream from {endpoint} broke: {e}"
                    ))));
                }
            };
            seen += 1;
            let data = event.data.trim();
            if data == "[DONE]" {
                done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Value = serde_json::from_str(data).map_err(|_| {
                LlmError::Failed(LlmFailure::fatal(format!(
                    "the model server sent a stream chunk that is not JSON: {}; check that llm.url points at an OpenAI-compatible /v1 endpoint",
                    snippet(data)
                )))
            })?;
            if let Some(err) = chunk.get("error") {
                let msg = err["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| err.to_string());
                return Err(LlmError::Failed(LlmFailure::fatal(format!(
                    "the model server reported an error in the stream: {msg}"
                ))));
            }
            if let Some(text) = asm.apply(&chunk) {
                on_text(&text);
            }
        }
        drop(events);
        if !done {
            if seen == 0 && !raw_head.is_empty() {
                return Err(LlmError::Failed(LlmFailure::fatal(format!(
                    "the model server answered with something that is not a chat completion stream: {}; check that llm.url points at an OpenAI-compatible /v1 endpoint",
                    snippet(&String::from_utf8_lossy(&raw_head))
                ))));
            }
            return Err(LlmError::Failed(LlmFailure::transient(format!(
                "the stream from {endpoint} ended before [DONE] (after {seen} events); the answer was incomplete"
            ))));
        }
        Ok(asm.finish())
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles streamed deltas: text appended, tool calls gathered by `index`.
#[derive(Default)]
pub(crate) struct Assembly {
    content: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
    finish: Option<String>,
}

impl Assembly {
    /// Applies one chunk; returns new text to forward.
    pub(crate) fn apply(&mut self, chunk: &Value) -> Option<String> {
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage(u));
        }
        let choice = chunk["choices"].get(0)?;
        if let Some(f) = choice["finish_reason"].as_str() {
            self.finish = Some(f.to_string());
        }
        let delta = &choice["delta"];
        if let Some(calls) = delta["tool_calls"].as_array() {
            for (pos, c) in calls.iter().enumerate() {
                let mut index = c["index"].as_u64().map(|i| i as usize).unwrap_or(pos);
                let id = c["id"].as_str().unwrap_or_default();
                // Some servers reuse index 0 for every call: a new id on a finished entry is a
                // new call.
                if let Some(existing) = self.calls.get(&index)
                    && !id.is_empty()
                    && !existing.id.is_empty()
                    && existing.id != id
                {
                    index = self.calls.keys().next_back().map(|k| k + 1).unwrap_or(0);
                }
                let entry = self.calls.entry(index).or_default();
                if !id.is_empty() {
                    entry.id = id.to_string();
                }
                if let Some(n) = c["function"]["name"].as_str() {
                    entry.name.push_str(n);
                }
                match &c["function"]["arguments"] {
                    Value::String(s) => entry.arguments.push_str(s),
                    Value::Null => {}
                    other => entry.arguments.push_str(&other.to_string()),
                }
            }
        }
        let text = delta["content"].as_str().filter(|s| !s.is_empty())?;
        self.content.push_str(text);
        Some(text.to_string())
    }

    pub(crate) fn finish(self) -> ModelResponse {
        ModelResponse {
            content: self.content,
            tool_calls: self
                .calls
                .into_values()
                .map(|c| ToolCall {
                    // A missing id stays empty: the engine names the call, making sure the
                    // name is not one the model gave another call.
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            usage: self.usage,
            finish_reason: self.finish,
        }
    }
}

fn usage(u: &Value) -> Usage {
    Usage {
        prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
    }
}

/// The llama.cpp slot of a conversation: from its first two messages (the system prompt and
/// the first user message), which every request of the conversation starts with until
/// pruning drops them, so its requests go where its prefix is cached. FNV-1a: the same slot
/// in every process and version.
fn slot(messages: &[Value], slots: u32) -> u32 {
    let hash = messages
        .iter()
        .take(2)
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, m| {
            m.to_string()
                .bytes()
                .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        });
    (hash % u64::from(slots)) as u32
}

/// Parses a non-streaming chat completion.
pub(crate) fn parse_full(text: &str) -> Result<ModelResponse, LlmFailure> {
    let garbage = || {
        LlmFailure::fatal(format!(
            "the model server answered with something that is not a chat completion: {}; check that llm.url points at an OpenAI-compatible /v1 endpoint",
            snippet(text)
        ))
    };
    let v: Value = serde_json::from_str(text).map_err(|_| garbage())?;
    if let Some(err) = v.get("error") {
        let msg = err["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| err.to_string());
        return Err(LlmFailure::fatal(format!(
            "the model server reported an error: {msg}"
        )));
    }
    let choice = v["choices"].get(0).ok_or_else(garbage)?;
    let message = &choice["message"];
    if !message.is_object() {
        return Err(garbage());
    }
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    // A missing id stays empty: the engine names the call.
                    id: c["id"].as_str().map(str::to_string).unwrap_or_default(),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => "{}".to_string(),
                        other => other.to_string(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ModelResponse {
        content: message["content"].as_str().unwrap_or_default().to_string(),
        tool_calls,
        usage: v.get("usage").filter(|u| u.is_object()).map(usage),
        finish_reason: choice["finish_reason"].as_str().map(str::to_string),
    })
}

/// `Retry-After` as milliseconds from `now`: either delay-seconds (`120`) or an HTTP date
/// (`Fri, 31 Dec 2027 23:59:59 GMT`), the two forms RFC 9110 allows. A date in the past means
/// "now"; anything else is ignored and the usual backoff applies.
fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(now)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_its_bound_fails_the_request_for_good() {
        let mut line = b"data: ".to_vec();
        line.resize(crate::stream_lines::MAX_LINE + 100, b'6');
        let pieces: Vec<Result<Vec<u8>, std::convert::Infallible>> =
            line.chunks(1 << 16).map(|c| Ok(c.to_vec())).collect();
        let cancel = CancellationToken::new();
        let mut on_text = |_: &str| {};
        let read = read_events("x", futures::stream::iter(pieces), &mut on_text, &cancel);
        let Err(LlmError::Failed(failure)) = futures::executor::block_on(read) else {
            panic!("an endless line was taken");
        };
        assert!(!failure.transient, "{}", failure.message);
        assert!(
            failure.message.contains("longer than"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn llama_cpp_requests_of_one_conversation_share_a_slot() {
        let client = |slots| {
            LlmClient::new(&LlmConfig {
                llama_cpp_slots: slots,
                ..LlmConfig::default()
            })
            .unwrap()
        };
        let request = |messages: &[&str]| ChatRequest {
            messages: messages
                .iter()
                .map(|m| json!({"role": "user", "content": m}))
                .collect(),
            tools: Vec::new(),
            tool_choice: None,
            parameters: Map::new(),
        };
        let first = client(4).body(&request(&["system", "question"]), true);
        let later = client(4).body(&request(&["system", "question", "answer", "more"]), true);
        assert_eq!(first["cache_prompt"], true);
        assert!(first["id_slot"].as_u64().unwrap() < 4);
        assert_eq!(first["id_slot"], later["id_slot"]);
        let slots: std::collections::BTreeSet<u64> = (0..40)
            .map(|n| {
                client(4).body(&request(&["system", &format!("question {n}")]), true)["id_slot"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(slots.len(), 4, "conversations are spread over the slots");
        let plain = client(0).body(&request(&["system", "question"]), true);
        assert!(plain.get("cache_prompt").is_none() && plain.get("id_slot").is_none());
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 08:00:00 GMT").unwrap();
        assert_eq!(parse_retry_after("7", now), Some(7000));
        assert_eq!(parse_retry_after(" 0 ", now), Some(0));
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 08:00:30 GMT", now),
            Some(30_000)
        );
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 07:00:00 GMT", now),
            Some(0),
            "a date in the past means retry now"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn assembles_interleaved_tool_call_fragments_by_index() {
        let mut a = Assembly::default();
        let chunks = [
            json!({"choices":[{"delta":{"content":"Hi"}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"se","arguments":""}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"sql","arguments":"{\"q\":"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"arch","arguments":"{}"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}),
            json!({"choices":[{"delta":{},"finish_reason":"tool_calls"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}),
        ];
        let texts: Vec<String> = chunks.iter().filter_map(|c| a.apply(c)).collect();
        assert_eq!(texts, vec!["Hi"]);
        let r = a.finish();
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(
            (
                r.tool_calls[0].id.as_str(),
                r.tool_calls[0].name.as_str(),
                r.tool_calls[0].arguments.as_str()
            ),
            ("a", "sql", "{\"q\":1}")
        );
        assert_eq!(
            (
                r.tool_calls[1].name.as_str(),
                r.tool_calls[1].arguments.as_str()
            ),
            ("search", "{}")
        );
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 4
            })
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn reused_index_with_new_id_is_a_new_call() {
        let mut a = Assembly::default();
        a.apply(&json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"a","arguments":"{}"}}]}}]}));
        a.apply(&json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"y","function":{"name":"b","arguments":"{}"}}]}}]}));
        let r = a.finish();
        assert_eq!(
            r.tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            vec!["a", "b"]
        );
    }

    /// A call without an id is left for the engine to name: an id made up here (`call_0`)
    /// could be one the model gave another call of the same answer.
    #[test]
    fn missing_ids_stay_empty_instead_of_guessing() {
        let mut a = Assembly::default();
        a.apply(&json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{}"}}]}}]}));
        a.apply(&json!({"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_0","function":{"name":"b","arguments":"{}"}}]}}]}));
        let ids: Vec<String> = a.finish().tool_calls.into_iter().map(|c| c.id).collect();
        assert_eq!(ids, vec!["".to_string(), "call_0".to_string()]);
        let r = parse_full(r#"{"choices":[{"message":{"content":"","tool_calls":[{"function":{"name":"a","arguments":"{}"}},{"id":"call_0","function":{"name":"b","arguments":"{}"}}]}}]}"#).unwrap();
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, vec!["", "call_0"]);
    }

    #[test]
    fn parses_full_responses_and_rejects_garbage() {
        let r = parse_full(r#"{"choices":[{"message":{"content":"x","tool_calls":[{"id":"1","function":{"name":"t","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}"#).unwrap();
        assert_eq!(r.content, "x");
        assert_eq!(r.tool_calls[0].arguments, "{\"a\":1}");
        let e = parse_full("<html>hello</html>").unwrap_err();
        assert!(
            !e.transient && e.message.contains("<html>hello</html>"),
            "{}",
            e.message
        );
        assert!(parse_full(r#"{"choices":[]}"#).is_err());
        assert!(
            parse_full(r#"{"error":{"message":"bad model"}}"#)
                .unwrap_err()
                .message
                .contains("bad model")
        );
    }
}
