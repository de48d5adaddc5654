//! `cordon call <tool> '<json>'`: one tool call, outside any conversation.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use cordon_core::{CallOutcome, Content};
use cordon_home::{Home, Toolbox};
use serde_json::Value;

use crate::audit;
use crate::records::Records;
use crate::term::{Stream, json_for_terminal, shown_on};
use crate::toolbox_host::failure;

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool name, or `plugin.tool` when several plugins offer one by that name.
    tool: String,
    /// The arguments as a JSON object.
    #[arg(default_value = "{}", value_name = "JSON")]
    arguments: String,
}

/// Prints text content and JSON content pretty-printed, each on its own lines: exact for a pipe
/// or file, neutralised for a terminal (see [`crate::term`]). The call goes to the audit log,
/// whose store was opened before the call so an unreachable store stops it from running.
pub async fn run(home: &Home, records: &Records, args: CallArgs) -> anyhow::Result<()> {
    let toolbox = Toolbox::load_for_tool(home, &args.tool).await?;
    let (result, report) = toolbox.call_reported(&args.tool, &args.arguments).await;
    if let Ok(tool) = toolbox.resolve(&args.tool) {
        let arguments = serde_json::from_str(&args.arguments)
            .unwrap_or_else(|_| Value::String(args.arguments.clone()));
        let outcome = match &result {
            Ok(_) => CallOutcome::Ok,
            Err(e) => CallOutcome::Error {
                kind: failure(e).kind.as_str().to_string(),
                message: e.to_string(),
            },
        };
        let record = audit::direct_call(records, tool, &arguments, outcome, report);
        records
            .store
            .append_audit(&record)
            .await
            .context("the call ran, but the audit log did not record it")?;
    }
    let output = result?;
    // Stdout is line-buffered: pretty JSON written through it directly costs a write per line
    // (30,000 for a 5,000-row query).
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    match print_content(&mut out, &output.content, Stream::Stdout.is_terminal()) {
        // A reader that stopped early (`| head`) is not an error of the call.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Writes a call's content to `out`; `terminal` says whether `out` is one.
fn print_content(out: &mut impl Write, content: &[Content], terminal: bool) -> std::io::Result<()> {
    for part in content {
        match part {
            Content::Text(text) => {
                out.write_all(shown_on(terminal, text).as_bytes())?;
                if !text.ends_with('\n') {
                    out.write_all(b"\n")?;
                }
            }
            Content::Json(value) if terminal => {
                let json = serde_json::to_string_pretty(value)?;
                out.write_all(json_for_terminal(&json).as_bytes())?;
                out.write_all(b"\n")?;
            }
            Content::Json(value) => {
                serde_json::to_writer_pretty(&mut *out, value)?;
                out.write_all(b"\n")?;
            }
            Content::Written(written) => print_written(out, written, terminal)?,
        }
    }
    out.flush()
}

/// Copies a written piece to `out` as it is read, never holding it whole; on a terminal
/// with its control characters made harmless, as text pieces are.
fn print_written(
    out: &mut impl Write,
    written: &cordon_core::Written,
    terminal: bool,
) -> std::io::Result<()> {
    use std::io::Read;
    let mut reader = written.reader();
    let mut buf = vec![0u8; 64 << 10];
    let mut carry = 0;
    let mut last = b'\n';
    loop {
        let n = reader.read(&mut buf[carry..])?;
        if n == 0 {
            break;
        }
        let filled = carry + n;
        // Whole characters only; a character cut at the end waits for the next read.
        let whole = match std::str::from_utf8(&buf[..filled]) {
            Ok(_) => filled,
            Err(e) => e.valid_up_to(),
        };
        let text = std::str::from_utf8(&buf[..whole]).unwrap_or_default();
        out.write_all(shown_on(terminal, text).as_bytes())?;
        if whole > 0 {
            last = buf[whole - 1];
        }
        buf.copy_within(whole..filled, 0);
        carry = filled - whole;
    }
    if last != b'\n' {
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "\u{1b}]0;title\u{7}\u{9b}8m\rover\u{202e}";

    fn printed(content: &[Content], terminal: bool) -> String {
        let mut out = Vec::new();
        print_content(&mut out, content, terminal).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_pipe_gets_exact_text_and_a_terminal_inert_text() {
        let content = [Content::Text(HOSTILE.to_string())];
        assert_eq!(printed(&content, false), format!("{HOSTILE}\n"));
        assert_eq!(
            printed(&content, true),
            "\\x1b]0;title\\x07\\u{9b}8m\\x0dover\\u{202e}\n"
        );
    }

    #[test]
    fn json_keeps_its_data_on_a_terminal() {
        let value = serde_json::json!({"text": HOSTILE});
        let content = [Content::Json(value.clone())];
        let piped = printed(&content, false);
        let shown = printed(&content, true);
        assert!(shown.contains(r"\u009b8m\rover\u202e"), "{shown}");
        assert!(
            !shown.contains(['\u{1b}', '\u{9b}', '\r', '\u{202e}']),
            "{shown}"
        );
        for text in [piped, shown] {
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, value);
        }
    }
}
