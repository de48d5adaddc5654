//! `cordon approve`: answers, from a terminal, the questions a running `cordon serve` waits
//! on (a tool call that needs approval), through its approvals API and its token.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use cordon_home::Home;
use serde_json::{Value, json};

use crate::term::{Stream, errln, outln};

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The session of the call to answer. Without SESSION, CALL and ANSWER, each waiting
    /// question is shown and asked on the terminal.
    session: Option<String>,
    /// The call (`c3`), as `--list` shows it.
    call: Option<String>,
    /// yes, no, always (this tool, for the rest of the session) or never.
    #[arg(value_parser = ["yes", "no", "always", "never"])]
    answer: Option<String>,
    /// List the waiting questions and exit.
    #[arg(long)]
    list: bool,
    /// The server (default: http:// and [serve] listen of the config in use, else
    /// 127.0.0.1:8420).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// The file holding the token (default: $CORDON_HOME/serve-token).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The config whose [serve] listen names the server.
    #[arg(long, env = "CORDON_CONFIG")]
    config: Option<PathBuf>,
}

/// The server's approvals API with the token.
struct Server {
    base: String,
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

fn server(home: &Home, args: &ApproveArgs) -> anyhow::Result<Server> {
    let base = match &args.url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => {
            let config = match crate::chat::config_in_use(args.config.as_deref()) {
                Some(path) => cordon_agent::AgentConfig::load(&path, true)?,
                None => cordon_agent::AgentConfig::default(),
            };
            format!("http://{}", config.serve.listen)
        }
    };
    let file = args
        .token_file
        .clone()
        .unwrap_or_else(|| home.root().join("serve-token"));
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "cannot read the token of cordon serve in {} (--token-file names another)",
            file.display()
        )
    })?;
    // The first token of the file (`TOKEN` or `NAME TOKEN` lines).
    let token = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().last())
        .with_context(|| format!("the token file {} holds no token", file.display()))?
        .to_string();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .context("cannot make an HTTP client")?;
    Ok(Server {
        base,
        token,
        client,
    })
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
    format!(
        "session {} call {}: tool `{}` (plugin {}) wants to run with:\n{}\ngrants: {grants}\nasked because {}.",
        question["session"].as_str().unwrap_or("?"),
        question["call_id"].as_str().unwrap_or("?"),
        question["tool"].as_str().unwrap_or("?"),
        question["plugin"].as_str().unwrap_or("?"),
        stream.show_json(&arguments),
        question["reason"].as_str().unwrap_or("?"),
    )
}

/// `cordon approve`.
pub async fn run(home: &Home, args: ApproveArgs) -> anyhow::Result<()> {
    let server = server(home, &args)?;
    match (&args.session, &args.call, &args.answer) {
        (Some(session), Some(call), Some(answer)) => {
            let answered = server.answer(session, call, answer).await?;
            outln!(
                "Answered {answer} for call {call} of session {session} (as {}).",
                answered["by"].as_str().unwrap_or("?")
            );
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
        let answer = loop {
            crate::term::ask("Allow? [y]es / [n]o / [a]lways for this tool / ne[v]er / [s]kip: ");
            let mut line = String::new();
            if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
                return Ok(());
            }
            match line.trim().to_lowercase().as_str() {
                "y" | "yes" => break Some("yes"),
                "n" | "no" => break Some("no"),
                "a" | "always" => break Some("always"),
                "v" | "never" => break Some("never"),
                "s" | "skip" | "" => break None,
                other => errln!("`{other}` is not an answer; type y, n, a, v or s."),
            }
        };
        let Some(answer) = answer else { continue };
        let session = question["session"].as_str().unwrap_or_default();
        let call = question["call_id"].as_str().unwrap_or_default();
        match server.answer(session, call, answer).await {
            Ok(_) => errln!("answered {answer}"),
            Err(e) => errln!("{e:#}"),
        }
    }
    Ok(())
}
