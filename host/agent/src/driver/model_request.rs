//! The model requests of a turn: the history in the wire format (pruned to the context
//! window, with a summary when configured), the tools offered, what the turn's client set
//! ([`crate::TurnParameters`]); and the answer read back into the machine's event.

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Agent, final_pass_prompt};
use crate::config::{PruneStrategy, ToolFormat};
use crate::context;
use crate::conversation::{Conversation, Note, Summary};
use crate::llm::{ChatRequest, LlmError};
use crate::machine::{AgentEvent, Event, ToolCatalog};
use crate::messages::Message;
use crate::parameters::ToolChoice;
use crate::text_tool_calls;
use crate::tools::ToolSpec;

impl Agent {
    fn wire(&self, messages: &[Message]) -> Vec<Value> {
        if self.config.llm.tool_format == ToolFormat::Hermes {
            return text_tool_calls::render(messages);
        }
        messages
            .iter()
            .map(|m| match m {
                Message::Assistant {
                    content,
                    tool_calls,
                    ..
                } if !tool_calls.is_empty() => json!({
                    "role": "assistant",
                    "content": content,
                    "tool_calls": tool_calls.iter().map(|c| json!({
                        "id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })).collect::<Vec<_>>(),
                }),
                Message::Tool {
                    tool_call_id,
                    content,
                    ..
                } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
                other => json!({"role": other.role(), "content": other.wire_content()}),
            })
            .collect()
    }

    /// Builds the request for the current history: system prompt, pruning (and summary), wire
    /// format, and what the turn's client set.
    pub(super) async fn build_request(
        &self,
        conv: &mut Conversation,
        catalog: &ToolCatalog,
        final_pass: bool,
        emit: &mut (dyn FnMut(&AgentEvent) + Send),
        cancel: &CancellationToken,
    ) -> (ChatRequest, usize) {
        let asked = conv
            .turns
            .last()
            .map(|t| t.parameters.clone())
            .unwrap_or_default();
        // The client's tool choice is for the turn's first request only (see `parameters`).
        let choice = asked
            .tool_choice
            .as_ref()
            .filter(|_| conv.progress.iterations == 0 && !final_pass);
        let ctx = &self.config.context;
        // Results too long to send whole go as previews (see `crate::spill`), and the model
        // gets the tool to page through them.
        let limit = crate::spill::threshold(ctx.result_budget_tokens)
            .filter(|&l| crate::spill::holds_large(&conv.messages, l));
        let pager = catalog
            .pager_name()
            .unwrap_or(crate::spill::TOOL)
            .to_string();
        // The tools the request may offer, and the router's picks among them, asked before
        // anything borrows the conversation for the request.
        let max = self.config.agent.max_offered_tools;
        let (candidates, routed) = if final_pass || choice == Some(&ToolChoice::None) {
            (Vec::new(), Vec::new())
        } else {
            let candidates = catalog.offered(conv.standing());
            let routed = self.route(conv, &candidates, max, cancel).await;
            (candidates, routed)
        };
        let view: std::borrow::Cow<'_, [Message]> = match limit {
            Some(l) => conv
                .messages
                .iter()
                .map(|m| crate::spill::shown(m, &pager, l))
                .collect::<Vec<_>>()
                .into(),
            None => (&conv.messages[..]).into(),
        };
        let offered: Vec<&ToolSpec> = if final_pass || choice == Some(&ToolChoice::None) {
            Vec::new()
        } else {
            let mut offered = candidates;
            let named = match choice {
                Some(ToolChoice::Function(name)) => Some(name.as_str()),
                _ => None,
            };
            if let Some((selected, selection)) =
                crate::selection::select(&offered, max, &conv.messages, named, &routed)
            {
                offered = selected;
                emit(&AgentEvent::ToolsSelected { selection });
            }
            if limit.is_some() || crate::spill::holds_kept(&conv.messages) {
                offered.extend(catalog.pager(conv.standing()));
            }
            offered
        };
        let system = self.system_prompt(&offered, final_pass);
        let tools: Vec<Value> = if self.config.llm.tool_format == ToolFormat::Native {
            offered.iter().map(|t| crate::offer::function(t)).collect()
        } else {
            Vec::new()
        };
        let fixed = self.tokenizer.count(&system)
            + tools
                .iter()
                .map(|t| self.tokenizer.count(&t.to_string()))
                .sum::<usize>()
            + if final_pass { 64 } else { 0 };
        let budget = ctx
            .window_tokens
            .saturating_sub(ctx.reserve_tokens)
            .saturating_sub(fixed);
        let plan = context::prune(&view, budget, ctx, &self.tokenizer);
        let mut summary_text = None;
        if !plan.dropped.is_empty() {
            if ctx.summarize {
                summary_text = match &conv.summary {
                    Some(s) if s.covers == plan.dropped => Some(s.text.clone()),
                    _ => {
                        let text = self.summarize(&view, &plan.dropped, cancel).await;
                        if let Some(t) = &text {
                            conv.summary = Some(Summary {
                                covers: plan.dropped.clone(),
                                text: t.clone(),
                            });
                        }
                        text
                    }
                };
            }
            let strategy = match ctx.strategy {
                PruneStrategy::OldestFirst => "oldest-first",
                PruneStrategy::MiddleOut => "middle-out",
                PruneStrategy::KeepLastTurns => "keep-last-turns",
            };
            let text = format!(
                "Context pruned ({strategy}, {} tokenizer): {} of {} messages ({} tokens) left out of the request{}.",
                self.tokenizer.name(),
                plan.dropped.len(),
                conv.messages.len(),
                plan.dropped_tokens,
                if summary_text.is_some() {
                    ", replaced by a summary"
                } else {
                    ""
                }
            );
            if conv.notes.last().map(|n| &n.text) != Some(&text) {
                conv.notes.push(Note {
                    at_message: conv.messages.len(),
                    text,
                });
            }
            emit(&AgentEvent::ContextPruned {
                strategy: strategy.to_string(),
                dropped_messages: plan.dropped.len(),
                dropped_tokens: plan.dropped_tokens,
                kept_tokens: plan.kept_tokens,
                summarized: summary_text.is_some(),
                fits: plan.fits,
            });
        }
        let kept: Vec<Message> = plan.kept.iter().map(|&i| view[i].clone()).collect();
        let mut messages = vec![json!({"role": "system", "content": system})];
        if let Some(s) = summary_text {
            messages.push(json!({"role": "system", "content": format!(
                "Summary of {} earlier messages left out to fit the context window: {s}", plan.dropped.len())}));
        }
        messages.extend(self.wire(&kept));
        if final_pass {
            messages.push(
                json!({"role": "user", "content": final_pass_prompt(self.limits.max_iterations)}),
            );
        }
        let n = messages.len();
        let tool_choice = choice
            .filter(|c| **c != ToolChoice::None && !tools.is_empty())
            .map(ToolChoice::to_wire);
        let request = ChatRequest {
            messages,
            tools,
            tool_choice,
            parameters: asked.sent,
        };
        (request, n)
    }

    /// What `[agent] router_model` picks for the turn among `offered` (see
    /// [`crate::selection`], rule 4): asked once a turn, when there is a router and more tools
    /// than `max`; kept in the conversation for the turn's later requests. A router that fails
    /// picks nothing, and selection goes on without it.
    async fn route(
        &self,
        conv: &mut Conversation,
        offered: &[&ToolSpec],
        max: usize,
        cancel: &CancellationToken,
    ) -> Vec<String> {
        let (Some(router), Some(start)) =
            (&self.router, crate::selection::turn_start(&conv.messages))
        else {
            return Vec::new();
        };
        if !crate::selection::selects(offered, max) {
            return Vec::new();
        }
        if let Some(routed) = conv.routed.as_ref().filter(|r| r.at_message == start) {
            return routed.tools.clone();
        }
        let question = conv.messages[start].content();
        let [system, user] = crate::selection::router_messages(offered, max, question);
        let req = ChatRequest {
            messages: vec![
                json!({"role": "system", "content": system}),
                json!({"role": "user", "content": user}),
            ],
            ..ChatRequest::default()
        };
        let tools = match router.complete(&req, false, &mut |_| {}, cancel).await {
            Ok(r) => crate::selection::router_picks(&r.content, offered, max),
            Err(e) => {
                tracing::warn!("the router model picked no tools: {e:?}");
                Vec::new()
            }
        };
        conv.routed = Some(crate::selection::Routed {
            at_message: start,
            tools: tools.clone(),
        });
        tools
    }

    async fn summarize(
        &self,
        messages: &[Message],
        dropped: &[usize],
        cancel: &CancellationToken,
    ) -> Option<String> {
        let excerpt: Vec<String> = dropped
            .iter()
            .map(|&i| {
                let m = &messages[i];
                format!("{}: {}", m.role(), m.content())
            })
            .collect();
        let req = ChatRequest {
            messages: vec![
                json!({"role": "system", "content": "Summarize the following conversation excerpt in a few sentences. Keep facts, numbers, names, file paths and decisions; leave out pleasantries."}),
                json!({"role": "user", "content": excerpt.join("\n")}),
            ],
            ..ChatRequest::default()
        };
        match self.llm.complete(&req, false, &mut |_| {}, cancel).await {
            Ok(r) if !r.content.trim().is_empty() => Some(r.content.trim().to_string()),
            _ => None,
        }
    }

    pub(super) async fn call_model(
        &self,
        conv: &mut Conversation,
        catalog: &ToolCatalog,
        final_pass: bool,
        emit: &mut (dyn FnMut(&AgentEvent) + Send),
        cancel: &CancellationToken,
    ) -> Event {
        let (request, count) = self
            .build_request(conv, catalog, final_pass, emit, cancel)
            .await;
        let asking = Asking {
            iteration: conv.progress.iterations + 1,
            messages: conv.messages.len(),
            final_pass,
        };
        self.ask_model(&request, count, asking, emit, cancel).await
    }

    /// Sends a built request and turns the answer into the machine's event; deltas go to
    /// `emit` as they arrive.
    pub(super) async fn ask_model(
        &self,
        request: &ChatRequest,
        count: usize,
        asking: Asking,
        emit: &mut (dyn FnMut(&AgentEvent) + Send),
        cancel: &CancellationToken,
    ) -> Event {
        let Asking {
            iteration,
            messages,
            final_pass,
        } = asking;
        emit(&AgentEvent::ModelRequest {
            iteration,
            final_pass,
            messages: count,
            tools: request.tools.len(),
        });
        let hermes = self.config.llm.tool_format == ToolFormat::Hermes && !final_pass;
        let mut filter = text_tool_calls::StreamFilter::default();
        let result = {
            let mut on_text = |t: &str| {
                let shown = if hermes {
                    filter.push(t)
                } else {
                    t.to_string()
                };
                if !shown.is_empty() {
                    emit(&AgentEvent::TextDelta { text: shown });
                }
            };
            self.llm
                .complete(request, self.config.llm.stream, &mut on_text, cancel)
                .await
        };
        let rest = filter.finish();
        if !rest.is_empty() {
            emit(&AgentEvent::TextDelta { text: rest });
        }
        match result {
            Ok(mut response) => {
                if hermes {
                    let (text, calls) = text_tool_calls::parse(&response.content, messages);
                    if !calls.is_empty() {
                        response.content = text;
                        response.tool_calls = calls;
                    }
                }
                Event::ModelResponded { response }
            }
            Err(LlmError::Failed(failure)) => Event::ModelFailed { failure },
            Err(LlmError::Cancelled { partial }) => Event::Cancel { partial },
        }
    }
}

/// What a model request is counted as, for its event and for parsing its answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asking {
    /// The iteration it starts.
    pub(super) iteration: u32,
    /// The conversation's messages when it was built.
    pub(super) messages: usize,
    pub(super) final_pass: bool,
}
