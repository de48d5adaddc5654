//! The terminal front end of `chat` and `run`: how events are printed and approval questions
//! asked.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use cordon_agent::selection::Reason;
use cordon_agent::{
    AgentEvent, ApprovalAnswer, ApprovalRequest, Conversation, Frontend, GivenAnswer, TurnOutcome,
};

use super::{ApproveMode, Current, one_line, save};
use crate::input::{Input, Read};
use crate::term::{Stream, errln};

/// A terminal front end: prints events, asks approval questions, saves. Text from the model
/// and tools is neutralised on whichever stream is a terminal (see [`crate::term`]).
pub(super) struct Terminal {
    pub(super) json: bool,
    pub(super) mode: ApproveMode,
    pub(super) input: Arc<Input>,
    pub(super) interactive: bool,
    pub(super) save: Option<PathBuf>,
    pub(super) at_line_start: bool,
    /// Calls refused before they ran, whose rejection is already on the screen.
    pub(super) rejected: std::collections::HashSet<String>,
    /// The running turn's token: Ctrl-C typed at an approval question cancels the turn.
    pub(super) current: Current,
    /// Show which tools each request offered (`--explain-tools`).
    pub(super) explain_tools: bool,
}

/// The question every approval ends with.
const ALLOW: &str = "Allow? [y]es / [n]o / [a]lways for this tool / ne[v]er: ";
const GRANT: &str =
    "Grant? [y]es this call / [a]lways this session / for 30m / [f]orever / [n]o / ne[v]er: ";

impl Terminal {
    /// A grant request: only a person at a terminal answers it, whatever `--approve` says.
    async fn grant(&mut self, request: &ApprovalRequest) -> GivenAnswer {
        if self.mode != ApproveMode::Ask || !self.interactive {
            let answer = ApprovalAnswer::Refused {
                reason: "grant requests are answered by a person at a terminal, and this run \
                         has none to ask (grant it with `cordon grant` and run it again)"
                    .to_string(),
            };
            return GivenAnswer::new(answer, "nobody (no person to ask for a grant)");
        }
        let mut text = format!(
            "\nTool `{}` (plugin {}) was refused by its sandbox.\n",
            request.tool, request.plugin
        );
        let args = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
        text.push_str(&format!(
            "It was called with:\n{}\n",
            Stream::Stderr.show_json(&args)
        ));
        text.push_str(&format!("Asked because {}.\n", request.reason));
        text.push_str("It would run again with:\n");
        for g in &request.requested_grants {
            text.push_str(&format!("  + {g}\n"));
        }
        Stream::Stderr.reset_attributes();
        self.note(&text);
        self.read_answer(GRANT, "not granted", |line| {
            ApprovalAnswer::parse(line, true)
        })
        .await
    }

    /// Reads answers to `prompt` until one `parse` takes. The input's end answers no (`ended`
    /// says what that means here). Ctrl-C at the question (read by the line editor, so no
    /// signal) cancels the turn as it does while the turn runs: the driver waits on the token
    /// first, so the turn ends cancelled and the question goes unanswered, not answered no.
    async fn read_answer(
        &mut self,
        prompt: &str,
        ended: &str,
        parse: impl Fn(&str) -> Result<ApprovalAnswer, String>,
    ) -> GivenAnswer {
        loop {
            let read = self.input.answer(prompt).await;
            let by = format!("{} at the terminal", cordon_core::local_user());
            let line = match read {
                Read::Line(line) => line,
                Read::End => {
                    errln!("\n(no more input: {ended})");
                    return GivenAnswer::new(
                        ApprovalAnswer::No,
                        "nobody (the terminal's input ended)",
                    );
                }
                Read::Interrupted => {
                    let token = self.current.lock().ok().and_then(|g| g.clone());
                    if let Some(token) = token {
                        token.cancel();
                        std::future::pending::<()>().await;
                    }
                    return GivenAnswer::new(ApprovalAnswer::No, by);
                }
            };
            match parse(&line) {
                Ok(answer) => return GivenAnswer::new(answer, by),
                Err(e) => errln!("{e}."),
            }
        }
    }

    fn out(&mut self, text: &str) {
        let mut stdout = std::io::stdout();
        let _ = stdout.write_all(Stream::Stdout.show(text).as_bytes());
        let _ = stdout.flush();
        self.at_line_start = text.ends_with('\n');
    }

    fn note(&mut self, text: &str) {
        if !self.at_line_start {
            self.out("\n");
        }
        errln!("{text}");
    }
}

#[cordon_agent::async_trait]
impl Frontend for Terminal {
    fn event(&mut self, event: &AgentEvent) {
        if self.json {
            if let Ok(line) = serde_json::to_string(event) {
                crate::term::print_json_line(&line);
            }
            return;
        }
        match event {
            AgentEvent::TextDelta { text } => self.out(text),
            AgentEvent::AssistantMessage { partial: true, .. } => self.note("  [partial answer kept]"),
            AgentEvent::ToolStarted { tool, arguments, .. } => {
                self.note(&format!("  ⚙ {tool} {}", one_line(&arguments.to_string(), 120)));
            }
            // A call refused before it ran was printed when it was rejected.
            AgentEvent::ToolResult { call_id, .. } if self.rejected.contains(call_id) => {}
            AgentEvent::ToolResult { tool, content, is_error, .. } => {
                let mark = if *is_error { "✗" } else { "→" };
                self.note(&format!("    {mark} {tool}: {}", one_line(content, 160)));
            }
            AgentEvent::ToolCallRejected { call_id, tool, reason } => {
                self.rejected.insert(call_id.clone());
                self.note(&format!("  ✗ {tool}: {}", one_line(reason, 160)));
            }
            AgentEvent::Retrying { retry, max_retries, delay_ms, cause } => self.note(&format!(
                "  (model server: {cause}; retry {retry}/{max_retries} in {:.1} s)",
                *delay_ms as f64 / 1000.0
            )),
            AgentEvent::ContextPruned { strategy, dropped_messages, dropped_tokens, summarized, .. } => {
                self.note(&format!(
                    "  (context window: {dropped_messages} older messages, {dropped_tokens} tokens, left out by {strategy}{})",
                    if *summarized { ", summarised" } else { "" }
                ))
            }
            AgentEvent::LabelsChanged { sources, rule_of_two, .. } => self.note(&format!(
                "  [session: {sources}{}]",
                if *rule_of_two {
                    "; tools that can send data out now ask first (Rule of Two)"
                } else {
                    ""
                }
            )),
            AgentEvent::ToolsSelected { selection } if self.explain_tools => {
                let offered: Vec<String> = selection
                    .offered
                    .iter()
                    .map(|o| match &o.why {
                        Reason::Named => format!("{} (named by the request)", o.name),
                        Reason::Called => format!("{} (called earlier)", o.name),
                        Reason::Matched { score } => format!("{} (matched, {score:.2})", o.name),
                        Reason::Related { to } => format!("{} (beside {to})", o.name),
                        Reason::Routed => format!("{} (picked by the router model)", o.name),
                        Reason::Filled => o.name.clone(),
                        Reason::Client => format!("{} (the client's)", o.name),
                    })
                    .collect();
                self.note(&format!(
                    "  [tools: {} of {} offered: {}]",
                    selection.offered.len(),
                    selection.of,
                    offered.join(", ")
                ));
            }
            AgentEvent::IterationLimitReached { limit } => self.note(&format!(
                "  (reached {limit} tool steps; asking the model for its final answer)"
            )),
            AgentEvent::TurnFinished { outcome, .. } => match outcome {
                TurnOutcome::NoProgress { explanation } => self.note(&format!("  {explanation}")),
                TurnOutcome::Failed { error, .. } => self.note(&format!("error: {error}")),
                TurnOutcome::Cancelled => self.note("  (cancelled)"),
                _ => {
                    if !self.at_line_start {
                        self.out("\n");
                    }
                }
            },
            _ => {}
        }
    }

    async fn approve(&mut self, request: &ApprovalRequest) -> GivenAnswer {
        if request.is_grant_request() {
            return self.grant(request).await;
        }
        match self.mode {
            // A blanket answer given before the session saw anything cannot answer the Rule
            // of Two, which holds a call back because of what the session saw since.
            ApproveMode::All if request.rule_of_two => {
                let answer = ApprovalAnswer::Refused {
                    reason: format!(
                        "{}; `--approve all` does not answer this, a person must (run it where \
                         one can answer, or mark the grant `:public` or `:trusted` if its \
                         contents are neither private nor untrusted)",
                        request.reason
                    ),
                };
                return GivenAnswer::new(
                    answer,
                    "nobody (--approve all does not answer the Rule of Two)",
                );
            }
            ApproveMode::All => {
                return GivenAnswer::new(ApprovalAnswer::Yes, "cordon run --approve all");
            }
            // Refused without asking: the machine tells the model why and reports the call
            // as rejected, which is printed once.
            ApproveMode::Auto | ApproveMode::None => {
                let mode = if self.mode == ApproveMode::Auto {
                    "auto"
                } else {
                    "none"
                };
                let answer = ApprovalAnswer::Refused {
                    reason: format!(
                        "it needs approval and this run uses --approve {mode}, which allows only tools that need none (--approve all or ask would allow it)"
                    ),
                };
                return GivenAnswer::new(answer, format!("cordon run --approve {mode}"));
            }
            ApproveMode::Ask if !self.interactive => {
                let answer = ApprovalAnswer::Refused {
                    reason: format!(
                        "it needs approval ({}) and there is no terminal to ask, so it was declined",
                        request.reason
                    ),
                };
                return GivenAnswer::new(answer, "nobody (no terminal to ask)");
            }
            ApproveMode::Ask => {}
        }
        let args = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
        let args = Stream::Stderr.show_json(&args);
        let mut text = format!(
            "\nTool `{}` (plugin {}) wants to run with:\n{args}\n",
            request.tool, request.plugin
        );
        if request.grants.is_empty() {
            text.push_str("Grants: none\n");
        } else {
            text.push_str("Grants:\n");
            for g in &request.grants {
                text.push_str(&format!("  - {g}\n"));
            }
        }
        text.push_str(&format!("Asked because {}.\n", request.reason));
        // On a clean line (`note`), in plain attributes whatever was printed before.
        Stream::Stderr.reset_attributes();
        self.note(&text);
        self.read_answer(ALLOW, "denied", |line| {
            match line.trim().to_lowercase().as_str() {
                "y" | "yes" => Ok(ApprovalAnswer::Yes),
                "n" | "no" => Ok(ApprovalAnswer::No),
                "a" | "always" => Ok(ApprovalAnswer::Always),
                "v" | "never" => Ok(ApprovalAnswer::Never),
                other => Err(format!("`{other}` is not an answer; type y, n, a or v")),
            }
        })
        .await
    }

    fn persist(&mut self, conversation: &Conversation) {
        save(&self.save, conversation);
    }
}
