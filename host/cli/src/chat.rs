//! `cordon chat` and `cordon run`: the conversation engine on a terminal.
//!
//! `chat` is an interactive REPL with streamed answers, compact tool lines, inline approval
//! (yes / no / always / never) and Ctrl-C that cancels the running stream or tool without
//! leaving the conversation; on a terminal it reads with a line editor (see [`crate::input`]). `run` answers one prompt (or several with `--then`) without a
//! REPL; with `--json` it prints every event as a JSON line for scripts.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use cordon_agent::{
    Agent, AgentConfig, AuditContext, CancellationToken, Conversation, Driven, Journal, Message,
    NoJournal, Policy, SessionSettings, ToolFormat, ToolHost, TurnInput, TurnIo, TurnOutcome,
};
use tokio::sync::mpsc;

use crate::input::{Input, Read};
use crate::term::{errln, outln};

/// Settings shared by `chat` and `run`.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Base URL of an OpenAI-compatible API, ending in /v1 (e.g. http://localhost:11434/v1).
    #[arg(long, env = "CORDON_LLM_URL")]
    pub llm_url: Option<String>,
    /// Model name.
    #[arg(long, env = "CORDON_MODEL")]
    pub model: Option<String>,
    /// Config file (default: ./cordon.toml when it exists).
    #[arg(long, env = "CORDON_CONFIG")]
    pub config: Option<PathBuf>,
    /// Model requests with tools per turn before the final-answer pass.
    #[arg(long)]
    pub max_iterations: Option<u32>,
    /// Tool-call wire format: native (OpenAI tool calls) or hermes (<tool_call> text).
    #[arg(long, value_parser = ["native", "hermes"])]
    pub tool_format: Option<String>,
    /// Continue a conversation saved with --save.
    #[arg(long, conflicts_with = "session")]
    pub load: Option<PathBuf>,
    /// Save the conversation (JSON) here after every change.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Make the conversation a durable session of this name (created if new, continued if
    /// not): every step is recorded in the store, and a turn stopped midway goes on.
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
}

/// Where a conversation is recorded and what it starts from: in memory only, the audit log
/// only, or a session (its journal, its conversation as last recorded and its settings).
pub struct Recording {
    /// Records transitions (for a session) and tool calls (the audit log).
    pub journal: Box<dyn Journal>,
    /// What the audit records say about where the calls came from.
    pub audit: AuditContext,
    /// The session's conversation as last recorded, when the conversation is a session.
    pub conversation: Option<Conversation>,
    /// What the session uses instead of the configuration's defaults.
    pub settings: SessionSettings,
}

impl Recording {
    /// Nothing is recorded. (The `cordon` binary always records tool calls; the agent crate's
    /// example runs this module with in-memory tools and records nothing.)
    #[allow(dead_code)]
    pub fn none() -> Self {
        Self {
            journal: Box::new(NoJournal),
            audit: AuditContext::default(),
            conversation: None,
            settings: SessionSettings::default(),
        }
    }

    fn is_session(&self) -> bool {
        self.audit.session.is_some()
    }
}

/// `cordon chat`.
#[derive(clap::Args, Debug, Clone)]
pub struct ChatArgs {
    /// Model and conversation settings.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// How `cordon run` answers approval questions.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproveMode {
    /// Ask on the terminal; with no terminal, deny.
    Ask,
    /// Run only tools the policy runs without asking; deny the rest.
    Auto,
    /// Approve every call that would be asked about (`deny` rules still win).
    All,
    /// Run no tools at all.
    None,
}

/// `cordon run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The first message.
    pub prompt: String,
    /// Further messages, each sent after the previous turn finishes.
    #[arg(long)]
    pub then: Vec<String>,
    /// How the turns run without a REPL.
    #[command(flatten)]
    pub unattended: Unattended,
}

/// How turns run without a REPL (`cordon run`, `cordon sessions resume | replay`).
#[derive(clap::Args, Debug, Clone)]
pub struct Unattended {
    /// Approval of tool calls that need it.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveMode,
    /// Print every event as a JSON line instead of text.
    #[arg(long)]
    pub json: bool,
    /// Say which tools each request offered the model, and why, when more are installed than
    /// `[agent] max_offered_tools`.
    #[arg(long)]
    pub explain_tools: bool,
    /// Model and conversation settings.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// The config file a conversation started here uses: `explicit` (`--config`,
/// `$CORDON_CONFIG`), else `./cordon.toml` when it exists. Also what no grant may reach, and
/// whose approval rules `plugin inspect` shows.
pub fn config_in_use(explicit: Option<&Path>) -> Option<PathBuf> {
    let default = Path::new("cordon.toml");
    explicit
        .map(Path::to_path_buf)
        .or_else(|| default.exists().then(|| default.to_path_buf()))
}

/// Loads cordon.toml, then a session's settings, then flag/env overrides.
pub fn load_config(args: &ModelArgs, settings: &SessionSettings) -> anyhow::Result<AgentConfig> {
    let mut config = match config_in_use(args.config.as_deref()) {
        Some(path) => AgentConfig::load(&path, true)?,
        None => AgentConfig::default(),
    };
    settings.apply(&mut config);
    if let Some(url) = &args.llm_url {
        config.llm.url = url.clone();
    }
    if let Some(model) = &args.model {
        config.llm.model = model.clone();
    }
    if let Some(n) = args.max_iterations {
        config.agent.max_iterations = n;
    }
    match args.tool_format.as_deref() {
        Some("hermes") => config.llm.tool_format = ToolFormat::Hermes,
        Some("native") => config.llm.tool_format = ToolFormat::Native,
        _ => {}
    }
    config.validate()?;
    Ok(config)
}

/// Approval rules that name no installed tool protect nothing; say so before the model runs.
fn warn_unmatched_rules(config: &AgentConfig, tools: &dyn ToolHost) {
    for warning in config.approval.unmatched_rules(&tools.tools()) {
        errln!("warning: {warning}");
    }
}

fn load_conversation(args: &ModelArgs, recording: &mut Recording) -> anyhow::Result<Conversation> {
    if let Some(conversation) = recording.conversation.take() {
        return Ok(conversation);
    }
    match &args.load {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("cannot read the saved conversation {}", path.display())
            })?;
            Conversation::from_json(&text)
                .with_context(|| format!("cannot load {}", path.display()))
        }
        None => Ok(Conversation::new()),
    }
}

fn save(path: &Option<PathBuf>, conv: &Conversation) {
    if let Some(path) = path {
        // Write beside, then rename: a crash never leaves a half-written file.
        let tmp = path.with_extension("json.tmp");
        let result = std::fs::write(&tmp, conv.to_json()).and_then(|_| std::fs::rename(&tmp, path));
        if let Err(e) = result {
            errln!(
                "warning: cannot save the conversation to {}: {e}",
                path.display()
            );
        }
    }
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// The token of the turn running now, if one is; replaced for each turn.
type Current = Arc<Mutex<Option<CancellationToken>>>;

// Named by path: the agent crate's `chat` example includes this file by its path.
#[path = "chat/terminal.rs"]
mod terminal;
use terminal::Terminal;

/// Ctrl-C cancels whatever token is current; the token is replaced for each turn. With no
/// turn running it sends on `quit`, if given.
fn watch_ctrl_c(current: Current, quit: Option<mpsc::UnboundedSender<()>>) {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            let token = current.lock().ok().and_then(|g| g.clone());
            match token {
                Some(t) if !t.is_cancelled() => t.cancel(),
                _ => {
                    if let Some(quit) = &quit {
                        let _ = quit.send(());
                    }
                }
            }
        }
    });
}

fn exit_code(outcome: &TurnOutcome) -> i32 {
    match outcome {
        TurnOutcome::Answered | TurnOutcome::FinalAnswerAfterLimit => 0,
        TurnOutcome::Failed { .. } => 1,
        TurnOutcome::NoProgress { .. } => 3,
        TurnOutcome::Cancelled => 130,
    }
}

/// `cordon run "prompt" [--then "…"]…`: runs the turns and returns the exit code (0 answered,
/// 1 failed, 3 stopped for lack of progress, 130 cancelled).
pub async fn run(
    args: RunArgs,
    tools: Arc<dyn ToolHost>,
    recording: Recording,
) -> anyhow::Result<i32> {
    if args.prompt.trim().is_empty() {
        bail!(
            "the prompt is empty; pass the question as the first argument, e.g. cordon run \"How many rows?\""
        );
    }
    let prompts = std::iter::once(args.prompt.clone())
        .chain(args.then.iter().cloned())
        .collect();
    run_prompts(&args.unattended, tools, recording, prompts).await
}

/// Runs a turn the conversation stopped in (if it did), then one turn per prompt, without a
/// REPL; returns the exit code of the last turn (see [`run`]) and stops at the first turn
/// that did not answer.
pub async fn run_prompts(
    how: &Unattended,
    tools: Arc<dyn ToolHost>,
    mut recording: Recording,
    prompts: Vec<String>,
) -> anyhow::Result<i32> {
    let (model, approve, json) = (&how.model, how.approve, how.json);
    let mut config = load_config(model, &recording.settings)?;
    let tools = recording.settings.tools(tools);
    warn_unmatched_rules(&config, tools.as_ref());
    if approve == ApproveMode::None {
        for t in tools.tools() {
            config.approval.plugins.insert(t.plugin, Policy::Deny);
        }
    }
    let agent = Agent::new(config, tools)?;
    let mut conv = load_conversation(model, &mut recording)?;
    let current: Current = Arc::new(Mutex::new(None));
    let mut frontend = Terminal {
        json,
        mode: approve,
        input: Arc::new(Input::lines()),
        interactive: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
        save: model.save.clone(),
        at_line_start: true,
        rejected: Default::default(),
        current: current.clone(),
        explain_tools: how.explain_tools,
    };
    watch_ctrl_c(current.clone(), None);
    let mut inputs = Vec::new();
    if !conv.is_idle() {
        if !json {
            errln!(
                "(resuming the turn this conversation stopped in while {})",
                conv.state.name()
            );
        }
        inputs.push(TurnInput::Resume);
    }
    inputs.extend(prompts.into_iter().map(TurnInput::Message));
    let mut code = 0;
    let mut result = Ok(());
    for input in inputs {
        let token = CancellationToken::new();
        if let Ok(mut g) = current.lock() {
            *g = Some(token.clone());
        }
        match drive_turn(
            &agent,
            &mut conv,
            input,
            &mut frontend,
            &mut recording,
            &token,
        )
        .await
        {
            Ok(outcome) => code = exit_code(&outcome),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        if code != 0 {
            break;
        }
    }
    save(&model.save, &conv);
    close(&mut recording).await;
    result.map(|()| code)
}

/// One turn, recorded as the conversation is.
async fn drive_turn(
    agent: &Agent,
    conv: &mut Conversation,
    input: TurnInput,
    frontend: &mut Terminal,
    recording: &mut Recording,
    cancel: &CancellationToken,
) -> anyhow::Result<TurnOutcome> {
    let mut io = TurnIo {
        frontend,
        journal: recording.journal.as_mut(),
        cancel,
        suspend: None,
        audit: recording.audit.clone(),
    };
    match agent.drive(conv, input, &mut io).await? {
        Driven::Finished(outcome) => Ok(outcome),
        // Nothing suspends a terminal's turn.
        Driven::Suspended => bail!("the turn was suspended"),
    }
}

/// Gives up the session's lease, if the conversation is one.
pub async fn close(recording: &mut Recording) {
    if let Err(e) = recording.journal.close().await {
        errln!("warning: {e}; the session's lease lapses by itself");
    }
}

const HELP: &str = "Commands:
  /help            this help
  /tools           the tools the model can use, with their approval policy
  /history         the conversation so far
  /fork N          continue in a new branch that keeps the first N turns
  /branch [K]      list branches, or switch to branch K
  /retry           re-send the last failed request
  /clear           start a new, empty conversation
  /save PATH       save the conversation as JSON
  /quit            leave (Ctrl-D too)
Ctrl-C cancels the running answer or tool call; the conversation stays usable.
On a terminal: Up and Down recall earlier lines (kept in the home; not a line that starts
with a space), Ctrl-R searches them, Tab completes /commands and tool names, Ctrl-C clears
the line. Alt-Enter, or Enter after a trailing \\, starts a new line of the same message;
a paste keeps its lines.";

/// The commands Tab completes, as `HELP` lists them.
const COMMANDS: &[&str] = &[
    "/help", "/tools", "/history", "/fork", "/branch", "/retry", "/clear", "/save", "/quit",
];

pub fn print_history(conv: &Conversation) {
    let mut turn = 0;
    for (i, m) in conv.messages.iter().enumerate() {
        for n in conv.notes.iter().filter(|n| n.at_message == i) {
            outln!("    ({})", n.text);
        }
        match m {
            Message::User { content, .. } => {
                turn += 1;
                outln!("[{turn}] you: {}", one_line(content, 200));
            }
            Message::Assistant {
                content,
                tool_calls,
                partial,
            } => {
                if !content.is_empty() {
                    let mark = if *partial { " [partial]" } else { "" };
                    outln!("    model{mark}: {}", one_line(content, 200));
                }
                for c in tool_calls {
                    outln!("    ⚙ {} {}", c.name, one_line(&c.arguments, 120));
                }
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => {
                let mark = if *is_error { "✗" } else { "→" };
                outln!("      {mark} {name}: {}", one_line(content, 160));
            }
            Message::System { content } => outln!("    (system: {})", one_line(content, 160)),
        }
    }
    for n in conv
        .notes
        .iter()
        .filter(|n| n.at_message >= conv.messages.len())
    {
        outln!("    ({})", n.text);
    }
}

/// `cordon chat`: the interactive REPL. On a terminal what is typed is kept in `history`
/// (in memory only when `None`).
pub async fn chat(
    args: ChatArgs,
    tools: Arc<dyn ToolHost>,
    mut recording: Recording,
    history: Option<&Path>,
) -> anyhow::Result<()> {
    let config = load_config(&args.model, &recording.settings)?;
    let tools = recording.settings.tools(tools);
    warn_unmatched_rules(&config, tools.as_ref());
    let url = config.llm.url.clone();
    let model = config.llm.model.clone();
    let agent = Agent::new(config, tools)?;
    let mut branches: Vec<Conversation> = vec![load_conversation(&args.model, &mut recording)?];
    let mut active = 0usize;
    let input = Arc::new(Input::for_chat(history, COMMANDS));
    let current: Current = Arc::new(Mutex::new(None));
    let mut frontend = Terminal {
        json: false,
        mode: ApproveMode::Ask,
        input: input.clone(),
        interactive: true,
        save: args.model.save.clone(),
        at_line_start: true,
        rejected: Default::default(),
        current: current.clone(),
        explain_tools: false,
    };
    let (quit_tx, mut quit_rx) = mpsc::unbounded_channel();
    // The line editor reads Ctrl-C at the prompt as a key (it clears the line); a stray
    // signal between turns must not end the chat. Without it, Ctrl-C there leaves.
    watch_ctrl_c(current.clone(), (!input.edits()).then_some(quit_tx));
    errln!(
        "cordon chat — {model} at {url}; {} tool(s). /help for commands, Ctrl-D to leave.",
        agent.offered_tools(&branches[active]).len()
    );
    // A session stopped in the middle of a turn goes on first.
    let mut resume = !branches[active].is_idle();
    if resume && let Some(name) = &recording.audit.session {
        errln!(
            "(session `{name}` stopped while {}; resuming that turn)",
            branches[active].state.name()
        );
    }
    loop {
        if resume {
            resume = false;
            let token = CancellationToken::new();
            if let Ok(mut g) = current.lock() {
                *g = Some(token.clone());
            }
            let conv = &mut branches[active];
            let turn = drive_turn(
                &agent,
                conv,
                TurnInput::Resume,
                &mut frontend,
                &mut recording,
                &token,
            );
            if let Err(e) = turn.await {
                outln!("{e}");
            }
            continue;
        }
        let tools = match input.edits() {
            true => agent
                .offered_tools(&branches[active])
                .into_iter()
                .map(|t| t.name)
                .collect(),
            false => Vec::new(),
        };
        let read = tokio::select! {
            read = input.message("> ", tools) => read,
            Some(()) = quit_rx.recv() => Read::End,
        };
        let line = match read {
            Read::Line(line) => line,
            // Ctrl-C at the prompt: the line is dropped, a fresh prompt follows.
            Read::Interrupted => continue,
            Read::End => break,
        };
        let line = line.trim().to_string();
        if line.is_empty() {
            continue;
        }
        let conv = &mut branches[active];
        let input = if let Some(command) = line.strip_prefix('/') {
            let mut parts = command.splitn(2, ' ');
            let name = parts.next().unwrap_or_default();
            let arg = parts.next().map(str::trim).unwrap_or_default();
            match name {
                "help" | "h" | "?" => {
                    outln!("{HELP}");
                    continue;
                }
                "quit" | "exit" | "q" => break,
                "tools" => {
                    let policies = agent.tool_policies(conv);
                    if policies.is_empty() {
                        outln!("No tools are installed and enabled.");
                    }
                    for (spec, d) in policies {
                        let p = match d.policy {
                            Policy::Ask => "ask",
                            Policy::Auto => "auto",
                            Policy::Deny => "deny",
                        };
                        outln!(
                            "{:<20} {:<5} ({}) — {}",
                            spec.name,
                            p,
                            d.reason,
                            one_line(&spec.description, 80)
                        );
                        for g in &spec.grants {
                            outln!("{:<27}{g}", "");
                        }
                    }
                    continue;
                }
                "history" => {
                    print_history(conv);
                    continue;
                }
                "clear" | "fork" | "branch" if recording.is_session() => {
                    let session = recording.audit.session.as_deref().unwrap_or_default();
                    outln!(
                        "/{name} is for conversations kept in memory; this one is the session \
                         `{session}`. Fork it with `cordon sessions fork {session} --turns N`, or \
                         start another with `cordon chat --session OTHER`."
                    );
                    continue;
                }
                "clear" => {
                    *conv = Conversation::new();
                    outln!("Started a new, empty conversation.");
                    continue;
                }
                "save" => {
                    if arg.is_empty() {
                        outln!("usage: /save PATH");
                    } else {
                        let path = PathBuf::from(arg);
                        match std::fs::write(&path, conv.to_json()) {
                            Ok(()) => outln!("Saved to {}.", path.display()),
                            Err(e) => outln!("cannot save to {}: {e}", path.display()),
                        }
                    }
                    continue;
                }
                "fork" => {
                    let keep = if arg.is_empty() {
                        Ok(conv.finished_turns())
                    } else {
                        arg.parse::<usize>()
                    };
                    match keep {
                        Err(_) => outln!("usage: /fork N (N = turns to keep)"),
                        Ok(n) => match conv.fork(n) {
                            Ok(copy) => {
                                branches.push(copy);
                                active = branches.len() - 1;
                                outln!(
                                    "Now on branch {active}, a copy keeping the first {n} turn(s). /branch lists branches."
                                );
                            }
                            Err(e) => outln!("{e}"),
                        },
                    }
                    continue;
                }
                "branch" => {
                    if arg.is_empty() {
                        for (i, b) in branches.iter().enumerate() {
                            let mark = if i == active { "*" } else { " " };
                            outln!("{mark} {i}: {} turn(s)", b.turns.len());
                        }
                    } else {
                        match arg.parse::<usize>() {
                            Ok(k) if k < branches.len() => {
                                active = k;
                                outln!("Now on branch {k}.");
                            }
                            _ => outln!("no branch `{arg}`; /branch lists them"),
                        }
                    }
                    continue;
                }
                "retry" => TurnInput::Retry,
                other => {
                    outln!("unknown command /{other}; /help lists the commands");
                    continue;
                }
            }
        } else {
            TurnInput::Message(line)
        };
        let token = CancellationToken::new();
        if let Ok(mut g) = current.lock() {
            *g = Some(token.clone());
        }
        let conv = &mut branches[active];
        let turn = drive_turn(&agent, conv, input, &mut frontend, &mut recording, &token);
        if let Err(e) = turn.await {
            outln!("{e}");
        }
        if let Ok(mut g) = current.lock() {
            *g = None;
        }
    }
    save(&args.model.save, &branches[active]);
    close(&mut recording).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_command_tab_completes() {
        for command in COMMANDS {
            assert!(
                HELP.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{command} "))),
                "{command} is completed but not in /help"
            );
        }
    }
}
