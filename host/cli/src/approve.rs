//! `cordon approve`: answers, from a terminal, the questions a running `cordon serve` waits
//! on (a tool call that needs approval), through its approvals API and its token. The server
//! is the one `--url` names, else the one the home records as serving it (the address and
//! token file `cordon serve` wrote there when it started), else the one at `[serve] listen`;
//! it says which. When no `cordon serve` runs here, it answers the questions waiting in the
//! store: MCP clients' calls (`cordon mcp` puts them there when its client cannot ask its
//! user), and the turns of sessions that `cordon serve`s on a shared store drive elsewhere.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use cordon_agent::{ApprovalAnswer, GivenAnswer};
use cordon_core::local_user;
use cordon_home::Home;
use cordon_store::{Store, WAITING_APPROVALS_SESSION};
use serde_json::{Value, json};

use crate::records::{self, Opener};
use crate::term::{Stream, errln, outln};

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The session of the call to answer (`mcp:` for a call an MCP client made). Without
    /// SESSION, CALL and ANSWER, each waiting question is shown and asked on the terminal.
    session: Option<String>,
    /// The call (`c3`), as `--list` shows it.
    call: Option<String>,
    /// yes, no, always (this tool, for the rest of the session) or never; to a grant request
    /// also `for 30m` (up to a day) or forever.
    answer: Option<String>,
    /// List the waiting questions and exit.
    #[arg(long)]
    list: bool,
    /// The server (default: the `cordon serve` running on this home, as it recorded itself
    /// there; else http:// and [serve] listen of the config in use, else 127.0.0.1:8420).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// The file holding the token (default: the one the running `cordon serve` recorded, else
    /// $CORDON_HOME/serve-token).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The config whose [serve] listen names the server.
    #[arg(long, env = "CORDON_CONFIG")]
    config: Option<PathBuf>,
}

/// The server's approvals API with the token.
struct Server {
    base: String,
    /// Why this server: how it was found, for the user.
    found: String,
    token: String,
    client: reqwest::Client,
}

impl Server {
    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| {
                format!(
                    "cannot reach cordon serve at {}; is it running there? (--url names another)",
                    self.base
                )
            })?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.as_u16() == 401 {
            bail!("cordon serve at {} did not accept the token", self.base);
        }
        if !status.is_success() {
            let message = body["error"]["message"]
                .as_str()
                .unwrap_or("no reason given");
            bail!("cordon serve refused ({status}): {message}");
        }
        Ok(body)
    }

    /// Whether cordon serve answers at all (a refusal is an answer; only a connection that
    /// fails is not).
    async fn is_running(&self) -> bool {
        let url = format!("{}/api/v1/health", self.base);
        match self.client.get(url).send().await {
            Ok(_) => true,
            Err(e) => !(e.is_connect() || e.is_timeout()),
        }
    }

    async fn pending(&self) -> anyhow::Result<Vec<Value>> {
        let url = format!("{}/api/v1/approvals", self.base);
        let body = self.send(self.client.get(url)).await?;
        Ok(body["pending"].as_array().cloned().unwrap_or_default())
    }

    async fn answer(&self, session: &str, call: &str, answer: &str) -> anyhow::Result<Value> {
        let url = format!("{}/api/v1/approvals/{session}/{call}", self.base);
        let request = self.client.post(url).json(&json!({"answer": answer}));
        self.send(request).await
    }
}

/// Where a `cordon serve` may be, in the order to try them: the one `--url` names, else the
/// one this home records as serving it, then the one at `[serve] listen`. Each with the token
/// file to use there and how it was found.
fn candidates(home: &Home, args: &ApproveArgs) -> anyhow::Result<Vec<(String, PathBuf, String)>> {
    let default_tokens = || home.root().join("serve-token");
    let tokens = |recorded: Option<PathBuf>| {
        args.token_file
            .clone()
            .or(recorded)
            .unwrap_or_else(default_tokens)
    };
    if let Some(url) = &args.url {
        let url = url.trim_end_matches('/').to_string();
        return Ok(vec![(url, tokens(None), "named by --url".to_string())]);
    }
    let mut found = Vec::new();
    if let Some(serving) = crate::serving::read(home).filter(crate::serving::alive) {
        let why = format!(
            "the cordon serve (pid {}) that recorded itself in {}",
            serving.pid,
            home.root().display()
        );
        found.push((serving.url, tokens(Some(serving.token_file)), why));
    }
    let config = match crate::chat::config_in_use(args.config.as_deref()) {
        Some(path) => cordon_agent::AgentConfig::load(&path, true)?,
        None => cordon_agent::AgentConfig::default(),
    };
    let listen = format!("http://{}", config.serve.listen);
    if found.iter().all(|(url, _, _)| *url != listen) {
        found.push((listen, tokens(None), "[serve] listen".to_string()));
    }
    Ok(found)
}

/// The server at `base` with the first token of `file`; `None` when the file is the default
/// one and does not exist (no cordon serve ever ran with this home; the store may still hold
/// questions).
fn server(
    base: String,
    file: &std::path::Path,
    found: String,
    args: &ApproveArgs,
) -> anyhow::Result<Option<Server>> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && args.token_file.is_none() => {
            return Ok(None);
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "cannot read the token of cordon serve in {} (--token-file names another)",
                    file.display()
                )
            });
        }
    };
    // The first token of the file (`TOKEN`, `NAME TOKEN` or `NAME TOKEN SCOPES` lines): its
    // scopes say what it may answer.
    let token = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.as_slice() {
                [token] | [_, token, ..] => Some(*token),
                [] => None,
            }
        })
        .with_context(|| format!("the token file {} holds no token", file.display()))?
        .to_string();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .context("cannot make an HTTP client")?;
    Ok(Some(Server {
        base,
        found,
        token,
        client,
    }))
}

/// Who answers: a running cordon serve (its sessions' questions and the store's), else the
/// store directly (the questions of MCP clients' calls).
enum Answerer {
    Serve(Server),
    Store(Store),
}

impl Answerer {
    async fn pending(&self) -> anyhow::Result<Vec<Value>> {
        match self {
            Answerer::Serve(server) => server.pending().await,
            Answerer::Store(store) => Ok(store
                .waiting_approvals()
                .await?
                .into_iter()
                .map(|w| {
                    serde_json::to_value(cordon_serve::PendingApproval::from(w)).unwrap_or_default()
                })
                .collect()),
        }
    }

    /// Answers; returns who the answer was recorded as given by.
    async fn answer(&self, session: &str, call: &str, answer: &str) -> anyhow::Result<String> {
        match self {
            Answerer::Serve(server) => Ok(server.answer(session, call, answer).await?["by"]
                .as_str()
                .unwrap_or("?")
                .to_string()),
            Answerer::Store(store) => {
                // A session's question is found by its session and call: the host driving the
                // turn, wherever it runs on this store, hears the answer from the store.
                let id = if session == WAITING_APPROVALS_SESSION {
                    call.to_string()
                } else {
                    match store.session_approval(session, call).await? {
                        Some(waiting) => waiting.id,
                        None => bail!(
                            "session `{session}` has no call `{call}` waiting for an answer in \
                             the store; list the waiting ones with `cordon approve --list`"
                        ),
                    }
                };
                let given = ApprovalAnswer::parse(answer, true).map_err(anyhow::Error::msg)?;
                let by = format!("{} at the terminal (cordon approve)", local_user());
                store
                    .answer_approval(&id, &GivenAnswer::new(given, by.clone()))
                    .await?;
                Ok(by)
            }
        }
    }
}

/// The running cordon serve, else the store.
async fn answerer(
    home: &Home,
    store: Option<&str>,
    args: &ApproveArgs,
) -> anyhow::Result<Answerer> {
    let mut tried = Vec::new();
    for (base, tokens, found) in candidates(home, args)? {
        let Some(server) = server(base, &tokens, found, args)? else {
            continue;
        };
        if args.url.is_some() || server.is_running().await {
            errln!(
                "cordon approve: talking to cordon serve at {} ({}).",
                server.base,
                server.found
            );
            return Ok(Answerer::Serve(server));
        }
        tried.push(server.base);
    }
    if !tried.is_empty() {
        errln!(
            "cordon serve is not running at {}; answering the calls MCP clients wait on.",
            tried.join(" or ")
        );
    }
    // Answering runs no tool: what the store would keep grants clear of is not needed here.
    let records = records::open(
        &mut home.clone(),
        store,
        args.config.as_deref(),
        Opener::OneShot,
    )
    .await?;
    Ok(Answerer::Store(records.store))
}

/// Shows one waiting question (on stdout for `--list`, on stderr when asking).
fn describe(question: &Value, stream: Stream) -> String {
    let arguments =
        serde_json::to_string_pretty(&question["arguments"]).unwrap_or_else(|_| "{}".into());
    let grants: Vec<&str> = question["grants"]
        .as_array()
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let grants = if grants.is_empty() {
        "none".to_string()
    } else {
        grants.join(", ")
    };
    let whose = match question["client"].as_str() {
        Some(client) => format!("MCP client `{client}`"),
        None => format!("session {}", question["session"].as_str().unwrap_or("?")),
    };
    let wanted: Vec<&str> = question["requested_grants"]
        .as_array()
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !wanted.is_empty() {
        return format!(
            "{whose} call {}: tool `{}` (plugin {}), called with:\n{}\nwas refused by its \
             sandbox; asked because {}.\nIt would run again with: {}",
            question["call_id"].as_str().unwrap_or("?"),
            question["tool"].as_str().unwrap_or("?"),
            question["plugin"].as_str().unwrap_or("?"),
            stream.show_json(&arguments),
            question["reason"].as_str().unwrap_or("?"),
            wanted.join(", "),
        );
    }
    format!(
        "{whose} call {}: tool `{}` (plugin {}) wants to run with:\n{}\ngrants: {grants}\nasked because {}.",
        question["call_id"].as_str().unwrap_or("?"),
        question["tool"].as_str().unwrap_or("?"),
        question["plugin"].as_str().unwrap_or("?"),
        stream.show_json(&arguments),
        question["reason"].as_str().unwrap_or("?"),
    )
}

/// `cordon approve`.
pub async fn run(home: &Home, store: Option<&str>, args: ApproveArgs) -> anyhow::Result<()> {
    let server = answerer(home, store, &args).await?;
    match (&args.session, &args.call, &args.answer) {
        (Some(session), Some(call), Some(answer)) => {
            ApprovalAnswer::parse(answer, true).map_err(anyhow::Error::msg)?;
            let by = server.answer(session, call, answer).await?;
            outln!("Answered {answer} for call {call} of session {session} (as {by}).");
            return Ok(());
        }
        (None, None, None) => {}
        _ => bail!(
            "give SESSION, CALL and ANSWER together (e.g. `cordon approve ops c3 yes`), or none to be asked about each waiting call"
        ),
    }
    let pending = server.pending().await?;
    if pending.is_empty() {
        outln!("No call is waiting for an answer.");
        return Ok(());
    }
    if args.list || !std::io::stdin().is_terminal() {
        for question in &pending {
            outln!("{}\n", describe(question, Stream::Stdout));
        }
        return Ok(());
    }
    let stdin = std::io::stdin();
    for question in &pending {
        errln!("\n{}", describe(question, Stream::Stderr));
        let grant = question["requested_grants"]
            .as_array()
            .is_some_and(|g| !g.is_empty());
        let answer = loop {
            crate::term::ask(if grant {
                "Grant? [y]es this call / [a]lways this session / for 30m / [f]orever / [n]o / \
                 ne[v]er / [s]kip: "
            } else {
                "Allow? [y]es / [n]o / [a]lways for this tool / ne[v]er / [s]kip: "
            });
            let mut line = String::new();
            if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
                return Ok(());
            }
            let line = line.trim().to_lowercase();
            if line.is_empty() || line == "s" || line == "skip" {
                break None;
            }
            match ApprovalAnswer::parse(&line, grant) {
                Ok(a) => {
                    break Some(match a {
                        ApprovalAnswer::For { minutes } => format!("for {minutes}m"),
                        other => other.as_str().to_string(),
                    });
                }
                Err(e) => errln!("{e}; or s to skip."),
            }
        };
        let Some(answer) = answer else { continue };
        let answer = answer.as_str();
        let session = question["session"].as_str().unwrap_or_default();
        let call = question["call_id"].as_str().unwrap_or_default();
        match server.answer(session, call, answer).await {
            Ok(_) => errln!("answered {answer}"),
            Err(e) => errln!("{e:#}"),
        }
    }
    Ok(())
}
