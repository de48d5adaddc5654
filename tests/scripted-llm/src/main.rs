//! `scripted-llm`: serves a JSON script as an OpenAI-compatible chat endpoint, so the demo and
//! manual tests can run the conversation engine without a real model.

use anyhow::Context;
use clap::Parser;
use cordon_scripted_llm::{Script, ScriptedServer};

/// A scripted stand-in for a language model (OpenAI-compatible `/v1/chat/completions`).
#[derive(Parser)]
#[command(name = "scripted-llm", version)]
struct Args {
    /// The script: `{"steps": [{"kind": "text", "text": "…"}, …]}`, one step per request.
    #[arg(long)]
    script: String,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: String,
    /// Write every request received, as JSON lines, to this file when the server stops.
    #[arg(long)]
    record: Option<String>,
    /// Stop after the script is used up (plus one second for the last response to flush); a
    /// script that answers `by_role` is never used up.
    #[arg(long)]
    exit_when_done: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let script = Script::from_file(&args.script)?;
    if args.exit_when_done && script.by_role.is_some() {
        anyhow::bail!("--exit-when-done: a script that answers `by_role` is never used up");
    }
    let server = ScriptedServer::bind(&args.addr, script).await?;
    // The first line of stdout is the base URL, for scripts to read.
    println!("{}", server.base_url());
    eprintln!(
        "scripted-llm: a scripted stand-in for a model, listening on {} ({} steps)",
        server.base_url(),
        server.remaining()
    );
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {
                if args.exit_when_done && server.remaining() == 0 {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    break;
                }
            }
        }
    }
    if let Some(path) = &args.record {
        let lines: Vec<String> = server
            .requests()
            .iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default())
            .collect();
        std::fs::write(path, lines.join("\n") + "\n")
            .with_context(|| format!("cannot write the request record to {path}"))?;
    }
    Ok(())
}
