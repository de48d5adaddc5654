//! `cordon call <tool> '<json>'`: one tool call, outside any conversation.

use std::io::Write;

use clap::Args;
use cordon_core::Content;
use cordon_home::{Home, Toolbox};

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool name, or `plugin.tool` when several plugins offer one by that name.
    tool: String,
    /// The arguments as a JSON object.
    #[arg(default_value = "{}", value_name = "JSON")]
    arguments: String,
}

/// Prints text content as is and JSON content pretty-printed, each on its own lines.
pub async fn run(home: &Home, args: CallArgs) -> anyhow::Result<()> {
    let toolbox = Toolbox::load_for_tool(home, &args.tool).await?;
    let output = toolbox.call(&args.tool, &args.arguments).await?;
    // Stdout is line-buffered: pretty JSON written through it directly costs a write per line
    // (30,000 for a 5,000-row query).
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    match print_content(&mut out, &output.content) {
        // A reader that stopped early (`| head`) is not an error of the call.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn print_content(out: &mut impl Write, content: &[Content]) -> std::io::Result<()> {
    for part in content {
        match part {
            Content::Text(text) => {
                out.write_all(text.as_bytes())?;
                if !text.ends_with('\n') {
                    out.write_all(b"\n")?;
                }
            }
            Content::Json(value) => {
                serde_json::to_writer_pretty(&mut *out, value)?;
                out.write_all(b"\n")?;
            }
        }
    }
    out.flush()
}
