//! `cordon sessions list | show | resume | fork | replay | export | rm`, and what makes `cordon
//! chat --session` and `cordon run --session` durable: the session's journal and its
//! conversation as last recorded.

use std::sync::Arc;

use anyhow::bail;
use clap::{Args, Subcommand};
use cordon_agent::{AuditContext, Conversation, Message, SessionSettings, ToolHost};
use cordon_store::{NewSession, SessionInfo, Store, StoreError};
use serde_json::json;

use crate::chat::{Recording, Unattended};
use crate::records::Records;
use crate::term::{errln, outln, print_json_line};

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// The sessions, most recently changed first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// A session's transcript (or, with --log, every recorded transition).
    Show {
        /// The session.
        name: String,
        /// Every transition with its cause, instead of the transcript.
        #[arg(long)]
        log: bool,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Go on with a turn the session stopped in (a crash, a stop of the host).
    Resume(ResumeArgs),
    /// A new session holding the first turns of another.
    Fork {
        /// The session to copy.
        name: String,
        /// Finished turns to keep (default: all).
        #[arg(long)]
        turns: Option<usize>,
        /// The new session's name (default: generated).
        #[arg(long = "as", value_name = "NAME")]
        new_name: Option<String>,
    },
    /// Send a session's user messages again, turn by turn, into a new session — with other
    /// tools, another model or another system prompt.
    Replay(ReplayArgs),
    /// A session as one JSON document: its details, its conversation and (with --log) its
    /// recorded transitions.
    Export {
        /// The session.
        name: String,
        /// Include every recorded transition.
        #[arg(long)]
        log: bool,
    },
    /// Remove sessions and their logs (the audit log keeps its records).
    Rm {
        /// The sessions.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

impl SessionsCommand {
    /// How the command uses the store: resume and replay hold conversations.
    pub fn opener(&self) -> crate::records::Opener {
        match self {
            SessionsCommand::Resume(_) | SessionsCommand::Replay(_) => {
                crate::records::Opener::Conversation
            }
            _ => crate::records::Opener::OneShot,
        }
    }

    /// The config file named on the command line.
    pub fn config(&self) -> Option<&std::path::Path> {
        match self {
            SessionsCommand::Resume(args) => args.unattended.model.config.as_deref(),
            SessionsCommand::Replay(args) => args.unattended.model.config.as_deref(),
            _ => None,
        }
    }
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session.
    name: String,
    /// How the turn runs.
    #[command(flatten)]
    unattended: Unattended,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The session whose user messages are sent again.
    name: String,
    /// The new session's name (default: generated).
    #[arg(long = "as", value_name = "NAME")]
    new_name: Option<String>,
    /// The system prompt of the new session.
    #[arg(long)]
    system_prompt: Option<String>,
    /// Offer only these tools (names the model sees, plugin.tool, or plugin names; comma
    /// separated).
    #[arg(long, value_delimiter = ',')]
    tools: Option<Vec<String>>,
    /// How the turns run (--model picks the replay's model).
    #[command(flatten)]
    unattended: Unattended,
}

/// Runs a `cordon sessions` command; returns the exit code for `resume` and `replay`.
pub async fn run(
    records: Records,
    command: SessionsCommand,
    tools: impl AsyncFnOnce() -> anyhow::Result<Arc<dyn ToolHost>>,
) -> anyhow::Result<i32> {
    let store = &records.store;
    match command {
        SessionsCommand::List { limit, json } => {
            let sessions = store.sessions(limit).await?;
            for s in &sessions {
                if json {
                    print_json_line(&serde_json::to_string(s)?);
                } else {
                    print_listing(s);
                }
            }
            if sessions.is_empty() && !json {
                outln!("No sessions yet: `cordon chat --session NAME` starts one.");
            }
        }
        SessionsCommand::Show { name, log, json } => show(store, &name, log, json).await?,
        SessionsCommand::Resume(args) => {
            let recording = open_session(&records, &args.name, "run", false).await?;
            if recording
                .conversation
                .as_ref()
                .is_some_and(Conversation::is_idle)
            {
                let mut recording = recording;
                crate::chat::close(&mut recording).await;
                bail!(
                    "session `{}` has no turn to resume; send it a message with `cordon run --session {} \"…\"`",
                    args.name,
                    args.name
                );
            }
            let tools = tools().await?;
            return crate::chat::run_prompts(&args.unattended, tools, recording, Vec::new()).await;
        }
        SessionsCommand::Fork {
            name,
            turns,
            new_name,
        } => {
            let info = store.fork(&name, turns, new_name, None).await?;
            outln!(
                "Forked `{name}` into `{}` ({} turn(s)); continue it with `cordon chat --session {}`.",
                info.id,
                info.turns,
                info.id
            );
        }
        SessionsCommand::Replay(args) => return replay(&records, args, tools).await,
        SessionsCommand::Export { name, log } => {
            let (info, conversation) = store.load(&name).await?;
            let mut doc = json!({"session": info, "conversation": conversation});
            if log {
                doc["transitions"] = json!(store.transitions(&name, 0).await?);
            }
            outln!("{}", serde_json::to_string_pretty(&doc)?);
        }
        SessionsCommand::Rm { names } => {
            for name in names {
                store.delete_session(&name).await?;
                outln!("Removed session `{name}`.");
            }
        }
    }
    Ok(0)
}

fn print_listing(s: &SessionInfo) {
    let driven = match s.live_lease() {
        Some(l) => format!(" (driven by {})", l.holder),
        None => String::new(),
    };
    let parent = s
        .parent
        .as_deref()
        .map(|p| format!(" from {p}"))
        .unwrap_or_default();
    outln!(
        "{:<24} {:<18} {:>3} turn(s)  {}{parent}{driven}  {}",
        s.id,
        s.state,
        s.turns,
        s.origin,
        s.title
    );
}

async fn show(store: &Store, name: &str, log: bool, json: bool) -> anyhow::Result<()> {
    if log {
        for t in store.transitions(name, 0).await? {
            if json {
                print_json_line(&serde_json::to_string(&t)?);
            } else {
                let event = t.cause["event"]["event"]
                    .as_str()
                    .or_else(|| t.cause["cause"].as_str())
                    .unwrap_or("?");
                outln!(
                    "{:>5}  {:<24} → {:<26} +{} message(s)",
                    t.seq,
                    event,
                    t.state,
                    t.messages.len()
                );
            }
        }
        return Ok(());
    }
    let (info, conversation) = store.load(name).await?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"session": info, "conversation": conversation}))?
        );
        return Ok(());
    }
    print_listing(&info);
    if !conversation.labels.is_empty() {
        outln!("labels: {}", conversation.labels.describe());
        if conversation.labels.holds_both() {
            outln!("        tools that can send data out are asked first (Rule of Two)");
        }
    }
    crate::chat::print_history(&conversation);
    Ok(())
}

/// The recording of session `name` for a conversation command: the session is created when
/// it does not exist (`create`), its lease taken, and its conversation loaded.
pub async fn open_session(
    records: &Records,
    name: &str,
    origin: &str,
    create: bool,
) -> anyhow::Result<Recording> {
    let store = &records.store;
    match store.session(name).await {
        Ok(_) => {}
        Err(StoreError::UnknownSession { .. }) if create => {
            store
                .create_session(NewSession {
                    id: Some(name.to_string()),
                    origin: origin.to_string(),
                    parent: None,
                    settings: SessionSettings::default(),
                    conversation: Conversation::new(),
                    created_by: None,
                })
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    let info = store.session(name).await?;
    let (journal, conversation) = store.drive(name).await?;
    Ok(Recording {
        journal: Box::new(journal),
        audit: AuditContext {
            session: Some(name.to_string()),
            origin: origin.to_string(),
            keep_arguments: records.keep_arguments,
            requested_by: None,
        },
        conversation: Some(conversation),
        settings: info.settings,
    })
}

/// A conversation that is not a session: its tool calls still go to the audit log.
pub fn audit_only(records: &Records, origin: &str) -> Recording {
    Recording {
        journal: Box::new(cordon_store::AuditJournal::new(records.store.clone())),
        audit: AuditContext {
            session: None,
            origin: origin.to_string(),
            keep_arguments: records.keep_arguments,
            requested_by: None,
        },
        conversation: None,
        settings: SessionSettings::default(),
    }
}

/// The user messages that started each turn of a conversation, in order.
fn user_turns(conversation: &Conversation) -> Vec<String> {
    conversation
        .turns
        .iter()
        .filter_map(|t| match conversation.messages.get(t.first_message) {
            Some(Message::User { content, .. }) => Some(content.clone()),
            _ => None,
        })
        .collect()
}

async fn replay(
    records: &Records,
    args: ReplayArgs,
    tools: impl AsyncFnOnce() -> anyhow::Result<Arc<dyn ToolHost>>,
) -> anyhow::Result<i32> {
    let store = &records.store;
    let (source, conversation) = store.load(&args.name).await?;
    let prompts = user_turns(&conversation);
    if prompts.is_empty() {
        bail!("session `{}` has no turns to replay", args.name);
    }
    let mut settings = source.settings.clone();
    if let Some(model) = &args.unattended.model.model {
        settings.model = Some(model.clone());
    }
    if let Some(prompt) = &args.system_prompt {
        settings.system_prompt = Some(prompt.clone());
    }
    if let Some(tools) = &args.tools {
        settings.tools = Some(tools.clone());
    }
    let info = store
        .create_session(NewSession {
            id: args.new_name.clone(),
            origin: "replay".to_string(),
            parent: Some(args.name.clone()),
            settings,
            conversation: Conversation::new(),
            created_by: None,
        })
        .await?;
    if !args.unattended.json {
        errln!(
            "Replaying {} turn(s) of `{}` into `{}`.",
            prompts.len(),
            args.name,
            info.id
        );
    }
    let recording = open_session(records, &info.id, "replay", false).await?;
    let tools = tools().await?;
    crate::chat::run_prompts(&args.unattended, tools, recording, prompts).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_turns_of_a_conversation() {
        let mut conv = Conversation::new();
        for (i, text) in ["first", "second"].iter().enumerate() {
            conv.messages.push(Message::user(*text));
            conv.turns.push(cordon_agent::conversation::Turn {
                first_message: i * 2,
                outcome: None,
                requested_by: None,
                parameters: Default::default(),
            });
            conv.messages.push(Message::assistant("ok"));
        }
        assert_eq!(user_turns(&conv), vec!["first", "second"]);
    }
}
