//! `cordon`: install sandboxed WebAssembly tools, decide what each may reach, and call them.
//!
//! This file only parses the command line, sets up logging and maps errors to exit codes;
//! each command group lives in its own module.

// Everything printed goes through `term`'s macros, which keep text Cordon did not write from
// acting on a terminal; a plain `println!` would bypass them.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod approve;
mod audit;
mod call;
mod chat;
mod doctor;
mod grants;
mod init;
mod input;
mod install_notes;
mod log_format;
mod mcp;
mod new;
mod plugin;
mod plugin_config;
mod plugin_view;
mod policy;
mod records;
mod serve;
mod serving;
mod sessions;
mod telemetry;
mod term;
mod toolbox_host;
mod trust;
mod ui;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cordon_home::{Home, HomeError};

use crate::term::{Stream, errln};

/// Runs language-model tool calls in WebAssembly sandboxes with deny-by-default grants.
#[derive(Debug, Parser)]
#[command(name = "cordon", version, propagate_version = true)]
struct Cli {
    /// The Cordon home (installed plugins, grants, compile cache).
    /// Default: $CORDON_HOME, else <user data dir>/cordon.
    #[arg(long, global = true, env = cordon_home::HOME_ENV, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Where sessions and the audit log are kept: sqlite:PATH or postgres://USER@HOST/DB.
    /// Default: [store] url of the config in use, else sessions.db in the home.
    #[arg(long, global = true, env = "CORDON_STORE", value_name = "URL")]
    store: Option<String>,
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install, list, inspect, update and remove plugins; publish and sign your own.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Check the per-call policy of cordon.toml against the installed tools, and see what it
    /// decides for a call.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Choose whose signatures you accept on plugins: add, list and remove public keys.
    #[command(subcommand)]
    Trust(trust::TrustCommand),
    /// Give a plugin capabilities: fs:<dir>[:<guest>][:ro|rw], env:NAME, config:KEY, net:https://host[:port], net:tcp://ip:port.
    Grant(grants::GrantArgs),
    /// Take capabilities away from a plugin.
    Revoke(grants::RevokeArgs),
    /// Override a plugin's limits: memory=64MiB time=5s output=256KiB args=… log=….
    Limit(grants::LimitArgs),
    /// Call one tool with JSON arguments and print its result.
    Call(call::CallArgs),
    /// Talk with a model that can use the installed tools (interactive).
    Chat(chat::ChatArgs),
    /// Answer one prompt (or several with --then) with the installed tools, non-interactively.
    Run(chat::RunArgs),
    /// List, show, resume, fork, replay, export and remove durable sessions.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// Show the audit log: every tool call, wherever it ran, and every change to the home.
    Audit(audit::AuditArgs),
    /// Run a resident host: sessions, approvals and the audit log over HTTP, and a web console.
    Serve(serve::ServeArgs),
    /// Answer, from this terminal, the tool calls a running `cordon serve` waits to have approved.
    Approve(approve::ApproveArgs),
    /// Serve the installed tools to an MCP client over stdin and stdout (for Claude, VS Code,
    /// Cursor, Codex, …): each call sandboxed, approved and audited as everywhere else.
    Mcp(mcp::McpArgs),
    /// Create a plugin project (rust, python, js or c) that builds outside the Cordon tree.
    New(new::NewArgs),
    /// Check this setup: home, config, store, model server (and its tool calls), plugins and
    /// their grants; print the settings MCP clients need.
    Doctor(doctor::DoctorArgs),
    /// Write a commented cordon.toml in a project directory, and suggest the installs and
    /// grants that let the bundled tools work on it.
    Init(init::InitArgs),
}

/// What a failed command exits with: 2 for bad input (the user can fix the command), 1 for
/// everything else (a tool failed, the home or a plugin is broken).
fn exit_code(error: &anyhow::Error) -> u8 {
    let usage = error.chain().any(|e| {
        e.is::<new::NewError>()
            || e.is::<init::InitError>()
            || e.is::<policy::PolicyUsage>()
            || e.is::<cordon_policy::PolicyError>()
            // A host or conversation refusing to start on a policy that does not load.
            || e.downcast_ref::<cordon_agent::driver::AgentError>()
                .is_some_and(|e| matches!(e, cordon_agent::driver::AgentError::Policy(_)))
            || e.downcast_ref::<HomeError>()
                .is_some_and(HomeError::is_usage)
            || e.downcast_ref::<cordon_store::StoreError>()
                .is_some_and(|e| {
                    matches!(
                        e,
                        cordon_store::StoreError::UnknownSession { .. }
                            | cordon_store::StoreError::BadSessionId { .. }
                            | cordon_store::StoreError::SessionExists { .. }
                            | cordon_store::StoreError::BadUrl { .. }
                    )
                })
    });
    if usage { 2 } else { 1 }
}

/// The error and its causes, skipping a cause whose text the message before already includes
/// (library errors often quote their source), so nothing is printed twice.
pub(crate) fn render_error(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

/// Installs the log (to stderr, at `-v`'s level or `RUST_LOG`'s) and, when `telemetry` names
/// an endpoint, the span exporter, which must be kept until the process ends.
fn init_logging(
    verbose: u8,
    telemetry: Option<&cordon_agent::telemetry::TelemetryConfig>,
) -> anyhow::Result<Option<telemetry::Exporting>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours are escape sequences too: only for a terminal, and not when NO_COLOR asks so.
    let colour =
        Stream::Stderr.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(verbose >= 2)
        .with_ansi(colour)
        // Plugin log records and stderr, model and server text: every field neutralised.
        .fmt_fields(log_format::LogFields)
        // Cordon's spans are for traces: a log line does not carry their fields.
        .with_filter(filter.and(tracing_subscriber::filter::filter_fn(|meta| {
            !(meta.is_span() && meta.target().starts_with("cordon"))
        })));
    let (spans, exporting) = match telemetry.map(telemetry::start).transpose()?.flatten() {
        Some((layer, exporting)) => (Some(layer), Some(exporting)),
        None => (None, None),
    };
    tracing_subscriber::registry().with(log).with(spans).init();
    Ok(exporting)
}

impl Command {
    /// Whether the command holds a conversation (long-lived, concurrent tool calls) rather
    /// than doing one thing and exiting.
    fn is_conversation(&self) -> bool {
        matches!(
            self,
            Command::Chat(_)
                | Command::Run(_)
                | Command::Serve(_)
                | Command::Mcp(_)
                | Command::Sessions(
                    sessions::SessionsCommand::Resume(_) | sessions::SessionsCommand::Replay(_)
                )
        )
    }
}

/// Instances a one-shot command may need at once: one call, or one check at install.
const ONE_SHOT_INSTANCES: u32 = 4;

/// The config files a command uses or a conversation would use: `--config`, `$CORDON_CONFIG`,
/// and `./cordon.toml` when it exists. They hold the approval rules, so no grant may reach them.
fn configs_in_use(command: &Command) -> Vec<PathBuf> {
    let explicit = explicit_config(command);
    let from_env = std::env::var_os("CORDON_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    explicit
        .into_iter()
        .chain(from_env)
        .chain(chat::config_in_use(None))
        .collect()
}

/// The config file a command names (`--config`, or `$CORDON_CONFIG` through it).
fn explicit_config(command: &Command) -> Option<PathBuf> {
    match command {
        Command::Chat(args) => args.model.config.clone(),
        Command::Run(args) => args.unattended.model.config.clone(),
        Command::Serve(args) => args.config().map(PathBuf::from),
        Command::Mcp(args) => args.config.clone(),
        Command::Sessions(command) => command.config().map(PathBuf::from),
        _ => None,
    }
}

/// The `[telemetry]` of the config a conversation uses (the defaults without one, which the
/// environment may still turn on); `None` for a one-shot command, which makes no spans. A
/// config that does not load gives the defaults here: the command itself reports it.
fn telemetry_config(command: &Command) -> Option<cordon_agent::telemetry::TelemetryConfig> {
    if !command.is_conversation() {
        return None;
    }
    let config = chat::config_in_use(explicit_config(command).as_deref())
        .and_then(|path| cordon_agent::AgentConfig::load(&path, true).ok())
        .unwrap_or_default();
    Some(config.telemetry)
}

async fn run(cli: Cli, one_shot: bool) -> anyhow::Result<ExitCode> {
    let mut home = Home::locate(cli.home)?;
    for config in configs_in_use(&cli.command) {
        home = home.protecting_config(config);
    }
    if one_shot {
        home = home.with_max_instances(ONE_SHOT_INSTANCES);
    }
    tracing::debug!(home = %home.root().display(), "using home");
    let store = cli.store.as_deref();
    // Opening the store also keeps every grant clear of it, so it comes before what the
    // command does with the home.
    let one_shot_records =
        async |home: &mut Home| records::open(home, store, None, records::Opener::OneShot).await;
    let code = match cli.command {
        Command::Plugin(cmd) => {
            // Changes are recorded in the audit log, whose store must be reachable first.
            let records = match cmd.changes_home() {
                true => Some(one_shot_records(&mut home).await?),
                false => None,
            };
            plugin::run(&home, records.as_ref(), cmd).await?;
            0
        }
        Command::Policy(cmd) => {
            policy::run(&home, cmd).await?;
            0
        }
        Command::Trust(cmd) => {
            let records = match cmd.changes_home() {
                true => Some(one_shot_records(&mut home).await?),
                false => None,
            };
            trust::run(&home, records.as_ref(), cmd).await?;
            0
        }
        Command::Grant(args) => {
            let records = one_shot_records(&mut home).await?;
            grants::grant(&home, &records, args).await?;
            0
        }
        Command::Revoke(args) => {
            let records = one_shot_records(&mut home).await?;
            grants::revoke(&home, &records, args).await?;
            0
        }
        Command::Limit(args) => {
            let records = one_shot_records(&mut home).await?;
            grants::limit(&home, &records, args).await?;
            0
        }
        Command::Call(args) => {
            let records = one_shot_records(&mut home).await?;
            call::run(&home, &records, args).await?;
            0
        }
        Command::Chat(args) => {
            let records = records::open(
                &mut home,
                store,
                args.model.config.as_deref(),
                records::Opener::Conversation,
            )
            .await?;
            let recording = recording(&records, args.model.session.as_deref(), "chat").await?;
            let tools = conversation_tools(&home).await?;
            chat::chat(args, tools, recording, Some(&home.chat_history_path())).await?;
            0
        }
        Command::Run(args) => {
            let model = &args.unattended.model;
            let records = records::open(
                &mut home,
                store,
                model.config.as_deref(),
                records::Opener::Conversation,
            )
            .await?;
            let recording = recording(&records, model.session.as_deref(), "run").await?;
            chat::run(args, conversation_tools(&home).await?, recording).await?
        }
        Command::Sessions(command) => {
            let records =
                records::open(&mut home, store, command.config(), command.opener()).await?;
            sessions::run(records, command, async || conversation_tools(&home).await).await?
        }
        Command::Audit(args) => {
            audit::run(&one_shot_records(&mut home).await?, args).await?;
            0
        }
        Command::Doctor(args) => i32::from(doctor::run(&home, store, args).await?),
        Command::Init(args) => {
            init::run(&home, args)?;
            0
        }
        Command::Approve(args) => {
            approve::run(&home, store, args).await?;
            0
        }
        Command::Serve(args) => {
            let records =
                records::open(&mut home, store, args.config(), records::Opener::Serve).await?;
            serve::run(&home, records, args).await?;
            0
        }
        Command::Mcp(args) => {
            let records = records::open(
                &mut home,
                store,
                args.config.as_deref(),
                records::Opener::Mcp,
            )
            .await?;
            mcp::run(&home, records, args).await?;
            0
        }
        Command::New(args) => {
            new::run(args)?;
            0
        }
    };
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// How a conversation command records itself: as session `name` (created if new), else
/// only its tool calls in the audit log.
async fn recording(
    records: &records::Records,
    session: Option<&str>,
    origin: &str,
) -> anyhow::Result<chat::Recording> {
    Ok(match session {
        Some(name) => sessions::open_session(records, name, origin, true).await?,
        None => sessions::audit_only(records, origin),
    })
}

/// Loads every installed plugin for a conversation; a plugin that fails its checks is left out
/// with a warning rather than stopping the whole conversation. A grant that reaches Cordon's
/// own state stops it before it starts.
async fn conversation_tools(
    home: &Home,
) -> anyhow::Result<std::sync::Arc<dyn cordon_agent::ToolHost>> {
    home.check_recorded_grants()?;
    let toolbox = cordon_home::Toolbox::load(home).await?;
    let tools = toolbox_host::ToolboxHost::new(toolbox).with_home(home.clone());
    for (plugin, reason) in tools.unavailable() {
        errln!("warning: plugin `{plugin}` is not offered: {reason}");
    }
    for notice in tools.notices() {
        errln!("note: {notice}");
    }
    Ok(std::sync::Arc::new(tools))
}

/// Errors inside wasmtime-wasi (every "no such file" a plugin sees, for instance) are
/// `anyhow` errors, which capture a backtrace when `RUST_BACKTRACE` is set. A file search then
/// spends a third of its time unwinding stacks nobody prints. Library backtraces stay off
/// unless asked for with `RUST_LIB_BACKTRACE`; panics still honour `RUST_BACKTRACE`.
fn quiet_library_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: called first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
}

/// Rust ignores SIGPIPE, so `println!` panics when the reader of stdout has gone
/// (`cordon plugin list | head -1`). A one-shot command should end quietly instead, as `ls`
/// does. Conversations keep ignoring it: they talk to servers, and a lost connection is an
/// error to report, not a reason to die.
#[cfg(unix)]
fn die_quietly_on_closed_stdout() {
    // SAFETY: restores the default disposition of one signal before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn die_quietly_on_closed_stdout() {}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    quiet_library_backtraces();
    let cli = Cli::parse();
    let one_shot = !cli.command.is_conversation();
    if one_shot {
        die_quietly_on_closed_stdout();
    }
    let exporting = match init_logging(cli.verbose, telemetry_config(&cli.command).as_ref()) {
        Ok(exporting) => exporting,
        Err(e) => {
            errln!("error: {}", render_error(&e));
            return ExitCode::from(2);
        }
    };
    // A one-shot command runs on the calling thread: starting worker threads costs more than
    // anything such a command does concurrently. So does `cordon mcp`, which serves one
    // client: without hand-offs between threads its round trip is 1.3–1.4× a native MCP server's
    // instead of 1.7× (docs/performance.md), and a spinning guest still yields at every epoch
    // tick.
    let one_thread = one_shot || matches!(cli.command, Command::Mcp(_));
    let mut builder = if one_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let result = builder
        .enable_all()
        .build()
        .context("could not start the async runtime")
        .and_then(|rt| {
            let result = rt.block_on(run(cli, one_shot));
            // A read of stdin still blocked in tokio's pool (`cordon mcp` stopped by a signal)
            // must not keep the process alive; everything that matters is done by now.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            result
        });
    // The last spans go out before the process ends.
    drop(exporting);
    match result {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", render_error(&e));
            ExitCode::from(exit_code(&e))
        }
    }
}
