//! `cordon doctor`: checks a setup the way a newcomer's first hour goes wrong: the home, the
//! config in use, the store, the model server (reachable, and answering a request that offers
//! a tool with a call of it), the installed plugins and what their grants name on this
//! machine; then prints the MCP client settings for this binary and home. Each finding says
//! what to do. Exits 1 when something is broken, 0 otherwise (warnings included).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use cordon_agent::CancellationToken;
use cordon_agent::llm::{ChatRequest, LlmClient};
use cordon_agent::{AgentConfig, ModelResponse};
use cordon_core::Grant;
use cordon_home::Home;
use serde_json::json;

use crate::term::outln;

/// `cordon doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The config file to check (default: $CORDON_CONFIG, else ./cordon.toml if present).
    #[arg(long, env = "CORDON_CONFIG")]
    config: Option<PathBuf>,
    /// The model server to check, over the config's [llm] url.
    #[arg(long, env = "CORDON_LLM_URL")]
    llm_url: Option<String>,
    /// The model to check, over the config's [llm] model.
    #[arg(long, env = "CORDON_MODEL")]
    model: Option<String>,
    /// Send nothing to the model server (no check of it).
    #[arg(long)]
    offline: bool,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// What was found, printed as it is found.
#[derive(Default)]
struct Findings {
    failed: usize,
    warned: usize,
}

impl Findings {
    fn say(&mut self, verdict: Verdict, what: &str, detail: impl AsRef<str>) {
        let mark = match verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => {
                self.warned += 1;
                "warn"
            }
            Verdict::Fail => {
                self.failed += 1;
                "FAIL"
            }
        };
        outln!("{mark}  {what}: {}", detail.as_ref());
    }
}

/// Runs every check; `Ok(1)` when one failed.
pub async fn run(home: &Home, store: Option<&str>, args: DoctorArgs) -> anyhow::Result<u8> {
    let mut found = Findings::default();
    check_home(&mut found, home);
    let config = check_config(&mut found, &args);
    check_store(&mut found, home, store, args.config.as_deref()).await;
    match (&config, args.offline) {
        (_, true) => found.say(Verdict::Ok, "model server", "not checked (--offline)"),
        (Some(config), false) => check_model(&mut found, config).await,
        (None, false) => found.say(
            Verdict::Warn,
            "model server",
            "not checked: the config does not load (above)",
        ),
    }
    check_plugins(&mut found, home);
    check_config_values(&mut found, home);
    print_mcp_settings(home);
    outln!();
    match (found.failed, found.warned) {
        (0, 0) => outln!("Everything checked is in order."),
        (0, w) => outln!("Nothing is broken; {w} warning(s) above."),
        (f, w) => outln!("{f} problem(s) and {w} warning(s) above; each says what to do."),
    }
    Ok(u8::from(found.failed > 0))
}

fn check_home(found: &mut Findings, home: &Home) {
    let root = home.root();
    if !root.exists() {
        found.say(
            Verdict::Warn,
            "home",
            format!(
                "{} does not exist yet; `cordon plugin install` creates it",
                root.display()
            ),
        );
        return;
    }
    let probe = root.join(format!(".doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            found.say(Verdict::Ok, "home", root.display().to_string());
        }
        Err(e) => found.say(
            Verdict::Fail,
            "home",
            format!(
                "{} cannot be written ({e}); give a home you own with --home or CORDON_HOME",
                root.display()
            ),
        ),
    }
}

/// The config in use with the flags' overrides, when it loads.
fn check_config(found: &mut Findings, args: &DoctorArgs) -> Option<AgentConfig> {
    let path = crate::chat::config_in_use(args.config.as_deref());
    let loaded = match &path {
        Some(path) => AgentConfig::load(path, true),
        None => Ok(AgentConfig::default()),
    };
    let mut config = match loaded {
        Ok(config) => config,
        Err(e) => {
            found.say(Verdict::Fail, "config", e.to_string());
            return None;
        }
    };
    if let Some(url) = &args.llm_url {
        config.llm.url = url.clone();
    }
    if let Some(model) = &args.model {
        config.llm.model = model.clone();
    }
    if let Err(e) = config.validate() {
        found.say(Verdict::Fail, "config", e.to_string());
        return None;
    }
    match &path {
        Some(path) => found.say(Verdict::Ok, "config", path.display().to_string()),
        None => found.say(
            Verdict::Ok,
            "config",
            "none (no --config, CORDON_CONFIG or ./cordon.toml): the defaults",
        ),
    }
    Some(config)
}

async fn check_store(
    found: &mut Findings,
    home: &Home,
    explicit: Option<&str>,
    config: Option<&Path>,
) {
    let url = match crate::records::settings(config) {
        Ok((store, _)) => explicit.map(String::from).or(store.url),
        Err(_) => explicit.map(String::from),
    };
    let shown = url
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", home.root().join("sessions.db").display()));
    if url.is_none() && !home.root().join("sessions.db").exists() {
        found.say(
            Verdict::Ok,
            "store",
            format!("{shown} (made by the first conversation or call)"),
        );
        return;
    }
    let mut probe = home.clone();
    match crate::records::open(
        &mut probe,
        url.as_deref(),
        config,
        crate::records::Opener::OneShot,
    )
    .await
    {
        Ok(records) => match records.store.sessions(1).await {
            Ok(_) => found.say(Verdict::Ok, "store", shown),
            Err(e) => found.say(Verdict::Fail, "store", format!("{shown}: {e}")),
        },
        Err(e) => found.say(
            Verdict::Fail,
            "store",
            format!("{shown}: {}", crate::render_error(&e)),
        ),
    }
}

/// The model server: reachable, and calling a tool when offered one.
async fn check_model(found: &mut Findings, config: &AgentConfig) {
    let llm = &config.llm;
    let what = format!("model `{}` at {}", llm.model, llm.url);
    let mut settings = llm.clone();
    settings.connect_timeout_secs = settings.connect_timeout_secs.min(5);
    settings.read_timeout_secs = settings.read_timeout_secs.min(60);
    settings.max_tokens = Some(64);
    let client = match LlmClient::new(&settings) {
        Ok(client) => client,
        Err(e) => {
            found.say(Verdict::Fail, "model server", format!("{what}: {e}"));
            return;
        }
    };
    let request = ChatRequest {
        messages: vec![
            json!({"role": "user", "content": "Call the tool `get_time` now; do not answer in text."}),
        ],
        tools: vec![json!({"type": "function", "function": {
            "name": "get_time",
            "description": "Returns the current time.",
            "parameters": {"type": "object", "properties": {}}
        }})],
        ..ChatRequest::default()
    };
    let cancel = CancellationToken::new();
    let answer = tokio::time::timeout(
        Duration::from_secs(90),
        client.complete(&request, false, &mut |_| {}, &cancel),
    )
    .await;
    match answer {
        Err(_) => found.say(
            Verdict::Fail,
            "model server",
            format!("{what}: no answer within 90 s; is the model loaded?"),
        ),
        Ok(Err(e)) => found.say(
            Verdict::Fail,
            "model server",
            format!(
                "{what}: {}; start it, or set [llm] url and model (or CORDON_LLM_URL and \
                 CORDON_MODEL)",
                describe_failure(&e)
            ),
        ),
        Ok(Ok(ModelResponse { tool_calls, .. })) if !tool_calls.is_empty() => found.say(
            Verdict::Ok,
            "model server",
            format!("{what} answers, and called the tool it was offered"),
        ),
        Ok(Ok(_)) => found.say(
            Verdict::Warn,
            "model server",
            format!(
                "{what} answers, but answered in text when asked to call a tool: a model \
                 without tool calls (or a server that drops `tools`) cannot use Cordon's tools; \
                 try a model trained for them (qwen2.5, llama3.1, …) or [llm] tool_format = \
                 \"hermes\""
            ),
        ),
    }
}

fn describe_failure(e: &cordon_agent::llm::LlmError) -> String {
    match e {
        cordon_agent::llm::LlmError::Failed(failure) => failure.message.clone(),
        cordon_agent::llm::LlmError::Cancelled { .. } => "cancelled".to_string(),
    }
}

/// The plugins' configuration values: readable, and readable by their owner only.
fn check_config_values(found: &mut Findings, home: &Home) {
    use std::os::unix::fs::PermissionsExt;
    let path = home.config_values_path();
    let Ok(meta) = std::fs::metadata(&path) else {
        return;
    };
    if let Err(e) = home.check_config_values() {
        found.say(Verdict::Fail, "config values", e.to_string());
    } else if meta.permissions().mode() & 0o077 != 0 {
        found.say(
            Verdict::Warn,
            "config values",
            format!(
                "{} can be read by others (mode {:o}); they are secrets: chmod 600 it",
                path.display(),
                meta.permissions().mode() & 0o777
            ),
        );
    }
}

fn check_plugins(found: &mut Findings, home: &Home) {
    let lock = match home.read() {
        Ok(lock) => lock,
        Err(e) => {
            found.say(Verdict::Fail, "plugins", e.to_string());
            return;
        }
    };
    if lock.plugins.is_empty() {
        found.say(
            Verdict::Warn,
            "plugins",
            "none installed: a model gets no tools; e.g. `cordon plugin install files --grant \
             fs:$PWD:/work:ro`",
        );
        return;
    }
    for (name, record) in &lock.plugins {
        let tools = record.tools.len();
        if !home.component_path(&record.digest).is_file() {
            found.say(
                Verdict::Fail,
                &format!("plugin {name}"),
                "its component is missing from the home; install it again",
            );
            continue;
        }
        let mut missing = Vec::new();
        let values = home.config_keys(name).unwrap_or_default();
        for grant in &record.grants {
            match grant {
                Grant::Fs(fs) if !fs.host.is_dir() => {
                    missing.push(format!("{} (no such directory)", fs.host.display()));
                }
                Grant::Env(var, _) if std::env::var_os(var).is_none() => {
                    missing.push(format!("env:{var} (not set here)"));
                }
                Grant::Config(key, _) if !values.contains(key) => {
                    missing.push(format!(
                        "config:{key} (no value: cordon plugin config {name} {key})"
                    ));
                }
                _ => {}
            }
        }
        let grants = if record.grants.is_empty() {
            "no grants".to_string()
        } else {
            record
                .grants
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        if missing.is_empty() {
            found.say(
                Verdict::Ok,
                &format!("plugin {name}"),
                format!("{tools} tool(s); {grants}"),
            );
        } else {
            found.say(
                Verdict::Warn,
                &format!("plugin {name}"),
                format!(
                    "{tools} tool(s); granted what this machine lacks: {}; calls that need it \
                     fail (`cordon revoke {name} …`, or create it)",
                    missing.join(", ")
                ),
            );
        }
    }
}

/// What MCP clients are told to run: this binary with this home.
fn print_mcp_settings(home: &Home) {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_else(|| PathBuf::from("cordon"));
    let binary = binary.display().to_string();
    let home = std::path::absolute(home.root())
        .unwrap_or_else(|_| home.root().to_path_buf())
        .display()
        .to_string();
    let args = json!(["--home", home, "mcp"]);
    outln!();
    outln!("MCP clients (this binary, this home):");
    outln!(
        "  Claude Desktop, Cursor (mcpServers in their JSON settings):\n    {}",
        json!({"mcpServers": {"cordon": {"command": binary, "args": args}}})
    );
    outln!(
        "  VS Code (.vscode/mcp.json):\n    {}",
        json!({"servers": {"cordon": {"type": "stdio", "command": binary, "args": args}}})
    );
    outln!("  Claude Code:\n    claude mcp add cordon -- {binary} --home {home} mcp");
    outln!(
        "  Codex (~/.codex/config.toml):\n    [mcp_servers.cordon]\n    command = {}\n    args = {}",
        json!(binary),
        args
    );
}
