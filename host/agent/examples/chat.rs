//! Runs `cordon chat` / `cordon run` (the CLI's `chat` module) with in-memory tools instead
//! of the sandbox, so the terminal interface can be tried and tested without wasmtime.

use std::sync::Arc;

use clap::Parser;
use cordon_agent::{
    CancellationToken, Content, ToolFailure, ToolFailureKind, ToolHints, ToolHost, ToolSpec,
};
use serde_json::{Value, json};

#[path = "../../cli/src/chat.rs"]
mod chat;
#[path = "../../cli/src/input.rs"]
mod input;
// How the CLI prints (text Cordon did not write is neutralised on a terminal); the example uses
// only the part `chat` needs.
#[path = "../../cli/src/term.rs"]
#[allow(dead_code)]
mod term;

#[derive(Parser)]
enum Cli {
    /// Interactive chat.
    Chat(chat::ChatArgs),
    /// One or more turns, non-interactive.
    Run(chat::RunArgs),
}

struct DemoTools;

#[cordon_agent::async_trait]
impl ToolHost for DemoTools {
    fn tools(&self) -> Vec<ToolSpec> {
        let spec = |name: &str, description: &str, schema: Value, can_change: bool| ToolSpec {
            name: name.into(),
            tool: name.into(),
            description: description.into(),
            input_schema: schema,
            output_schema: None,
            hints: ToolHints::default(),
            plugin: "demo".into(),
            grants: if can_change {
                vec!["read-write ./notes".into()]
            } else {
                vec![]
            },
            can_change_anything: can_change,
            digest: String::new(),
            proven: Default::default(),
            reach: Default::default(),
            exposure: Default::default(),
        };
        vec![
            spec(
                "add",
                "Adds two numbers.",
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
                false,
            ),
            spec(
                "write_note",
                "Writes a note to ./notes.",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                true,
            ),
            spec(
                "read_file",
                "Reads a file.",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                false,
            ),
        ]
    }

    async fn call(
        &self,
        name: &str,
        args: Value,
        _cancel: CancellationToken,
    ) -> Result<Vec<Content>, ToolFailure> {
        match name {
            "add" => Ok(vec![Content::Json(json!(
                args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)
            ))]),
            "write_note" => Ok(vec![Content::Text("note written".into())]),
            "read_file" => Err(ToolFailure::new(
                ToolFailureKind::Denied,
                format!(
                    "{} is outside the granted paths",
                    args["path"].as_str().unwrap_or("?")
                ),
            )),
            other => Err(ToolFailure::new(
                ToolFailureKind::NotFound,
                format!("no tool {other}"),
            )),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let tools: Arc<dyn ToolHost> = Arc::new(DemoTools);
    match Cli::parse() {
        Cli::Chat(args) => chat::chat(args, tools, chat::Recording::none(), None).await,
        Cli::Run(args) => {
            let code = chat::run(args, tools, chat::Recording::none()).await?;
            std::process::exit(code);
        }
    }
}
