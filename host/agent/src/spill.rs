//! Results too large for the model: the conversation keeps a tool's whole result, the model
//! is sent a preview (its first and last lines, with counts) and pages through the rest with
//! the built-in tool `read_result`, by lines or by searching.
//!
//! What decides, in order:
//! 1. A tool result longer than `[context] result_budget_tokens` (estimated at four bytes a
//!    token, so the check costs nothing) is sent as a preview; shorter ones are sent whole.
//!    `0` turns this off, except for kept results (rule 3).
//! 2. A result the plugin returned whole stays in the conversation (and so in the store): a
//!    preview loses nothing, and a later request can read any part of it.
//! 3. A result the plugin wrote as it went (`result-stream`, up to the output limit, 64 MiB by
//!    default) that is longer than the budget (16 MiB when previews are off) is *kept*: the
//!    journal stores it in parts beside the conversation, which holds only its preview
//!    ([`KeptResult`]), so neither the conversation nor the host's memory ever holds it whole.
//!    A journal that keeps nothing (a conversation without a store) holds it in the
//!    conversation instead.
//! 4. `read_result` is offered to the model only once the conversation holds a result sent as
//!    a preview; it reads only results of this conversation, names them by the call's id, and
//!    runs in the host without a sandbox (it reads what the conversation already holds or its
//!    journal keeps for it; see [`crate::pages`]).
//! 5. Each page is itself bounded by the budget, so paging can never overflow the context.

use serde_json::{Value, json};

use crate::messages::{KeptResult, Message};
use crate::pages::{self, KeptAt, KeptPart, KeptParts};
use crate::tools::ToolSpec;

/// The built-in tool's plugin name: approval rules, the audit log and policy see it as
/// `cordon.read_result`.
pub const PLUGIN: &str = cordon_core::BUILT_IN_PLUGIN;
/// The built-in tool's own name.
pub const TOOL: &str = "read_result";

/// How much of a result one page holds when previews are off (`result_budget_tokens = 0`)
/// and the model reads an earlier result all the same.
pub const PAGE_BYTES: usize = 32_000;

use crate::pages::MAX_PAGE_LINES;

/// The size past which a written result is kept apart from the conversation when previews are
/// off: what a plugin may return whole at once.
pub const KEEP_WITHOUT_PREVIEWS: usize = 16 << 20;

/// The byte length past which a result is sent as a preview (`budget_tokens` × 4), or `None`
/// when previews are off.
pub fn threshold(budget_tokens: usize) -> Option<usize> {
    (budget_tokens > 0).then(|| budget_tokens.saturating_mul(4))
}

/// Whether any tool result of `messages` is longer than `limit` bytes.
pub fn holds_large(messages: &[Message], limit: usize) -> bool {
    messages
        .iter()
        .any(|m| matches!(m, Message::Tool { content, .. } if content.len() > limit))
}

/// Whether `messages` hold a result kept apart (rule 3): the pager is offered whatever the
/// budget.
pub fn holds_kept(messages: &[Message]) -> bool {
    messages
        .iter()
        .any(|m| matches!(m, Message::Tool { kept: Some(_), .. }))
}

/// The size past which a written result is kept apart (rule 3), for a budget of
/// `budget_tokens`.
pub fn keep_threshold(budget_tokens: usize) -> usize {
    threshold(budget_tokens).unwrap_or(KEEP_WITHOUT_PREVIEWS)
}

/// How long the preview of a kept result is, for a budget of `budget_tokens`.
pub fn kept_preview_bytes(budget_tokens: usize) -> usize {
    threshold(budget_tokens).unwrap_or(PAGE_BYTES)
}

/// The preview of a written result of `tool_name` (a piece in a file, too long to read
/// whole), for the call the model gave id `call_id`: as [`preview`] makes of one in memory.
/// `lines` is its line count (as [`pages::Parts`] counted it).
pub fn written_preview(
    written: &cordon_core::Written,
    lines: u64,
    call_id: &str,
    tool_name: &str,
    pager: &str,
    limit: usize,
) -> std::io::Result<String> {
    written_ends(
        written,
        lines,
        tool_name,
        limit,
        &how_to_read(call_id, pager),
    )
}

/// The preview of a written result of `tool_name` of `lines` lines, saying `how` to read the
/// rest; like [`ends`], but reading only the ends of its file.
pub fn written_ends(
    written: &cordon_core::Written,
    lines: u64,
    tool_name: &str,
    limit: usize,
    how: &str,
) -> std::io::Result<String> {
    if written.len() <= limit as u64 {
        return written.to_text();
    }
    let (head, tail) = pages::ends_of(written, limit)?;
    let ends = Ends {
        head: &head,
        tail: &tail,
        bytes: written.len(),
        lines,
    };
    Ok(ends.shown(tool_name, limit, how))
}

fn how_to_read(call_id: &str, pager: &str) -> String {
    // The id as a JSON string: a gateway client chooses it.
    let id = serde_json::to_string(call_id).unwrap_or_default();
    format!(
        "Read the rest with `{pager}`: {{\"call_id\": {id}, \"from_line\": N, \"lines\": M}}, \
         {{\"call_id\": {id}, \"offset\": BYTE, \"length\": N}}, or {{\"call_id\": {id}, \
         \"pattern\": \"regex\"}}."
    )
}

/// What the model is sent for `content`, the result of the call the model gave id `call_id`:
/// itself when it fits in `limit` bytes, else its first and last lines, the counts, and how
/// to read the rest with the pager, whose model-facing name is `pager`; never longer than
/// `limit`.
pub fn preview(content: &str, call_id: &str, tool_name: &str, pager: &str, limit: usize) -> String {
    ends(content, tool_name, limit, &how_to_read(call_id, pager))
}

/// `content` itself when it fits in `limit` bytes, else its first and last lines, the counts,
/// and `how` to read the rest (MCP clients read a resource instead); never longer than
/// `limit` unless `how` alone is.
pub fn ends(content: &str, tool_name: &str, limit: usize, how: &str) -> String {
    if content.len() <= limit {
        return content.to_string();
    }
    Ends {
        head: content,
        tail: content,
        bytes: content.len() as u64,
        lines: content.lines().count() as u64,
    }
    .shown(tool_name, limit, how)
}

/// A result's start and end and its counts: what a preview is made of, whether the result is
/// in memory (`head` and `tail` both the whole of it) or in a file (each a part of it).
pub struct Ends<'a> {
    /// Its start: at least the preview's length of it, or all of it.
    pub head: &'a str,
    /// Its end, from the start of a line, or all of it.
    pub tail: &'a str,
    /// Its length.
    pub bytes: u64,
    /// Its lines (a last line without a newline counts).
    pub lines: u64,
}

impl Ends<'_> {
    /// The preview: the first and last lines that fit in `limit` with the counts, and `how`
    /// to read the rest; never longer than `limit` unless `how` alone is.
    pub fn shown(&self, tool_name: &str, limit: usize, how: &str) -> String {
        let total = self.lines;
        let header = |head: u64, tail_from: u64| {
            format!(
                "[This result of `{tool_name}` is {} bytes in {total} lines, too long to send \
                 whole. Shown: {}. {how}]\n",
                self.bytes,
                match (head, tail_from <= total) {
                    (0, false) => "its start".to_string(),
                    (0, true) => format!("its start and lines {tail_from}-{total}"),
                    (h, false) => format!("lines 1-{h}"),
                    (h, true) => format!("lines 1-{h} and {tail_from}-{total}"),
                }
            )
        };
        // The header at its longest, and the gap's line, come out of the room first.
        let fixed = header(total, 1).len() + 64;
        let room = limit.saturating_sub(fixed);
        // Two thirds of the room for the head, a third for the tail.
        let (head_room, tail_room) = (room * 2 / 3, room / 3);
        let mut head = Vec::new();
        let mut used = 0;
        // Where the lines shown at the head end, in the result.
        let mut head_end = 0u64;
        for segment in self.head.split_inclusive('\n') {
            let line = trim_line(segment);
            let cost = line.len() + 1;
            if used + cost > head_room {
                break;
            }
            used += cost;
            head_end += segment.len() as u64;
            head.push(line);
        }
        // The last lines, found from the end: only as many as are shown are looked at.
        let tail_start = self.bytes - self.tail.len() as u64;
        let body = self.tail.strip_suffix('\n').unwrap_or(self.tail);
        let mut tail = Vec::new();
        let mut used = 0;
        let mut end = body.len();
        while !self.tail.is_empty() {
            let start = body[..end].rfind('\n').map_or(0, |nl| nl + 1);
            let line = trim_line(&body[start..end]);
            let cost = line.len() + 1;
            if tail_start + (start as u64) < head_end || used + cost > tail_room {
                break;
            }
            used += cost;
            tail.push(line);
            if start == 0 {
                break;
            }
            end = start - 1;
        }
        tail.reverse();
        let tail_from = total + 1 - tail.len() as u64;
        let mut out = header(head.len() as u64, tail_from);
        if head.is_empty() {
            // A first line longer than the room: its start, cut on a character boundary.
            let mut end = head_room.min(self.head.len());
            while !self.head.is_char_boundary(end) {
                end -= 1;
            }
            out.push_str(&self.head[..end]);
            out.push_str(" …\n");
        } else {
            out.push_str(&head.join("\n"));
            out.push('\n');
        }
        out.push_str("[… the rest not shown …]\n");
        out.push_str(&tail.join("\n"));
        out
    }
}

/// A line without its ending (`\n` or `\r\n`), as `str::lines` gives it.
fn trim_line(segment: &str) -> &str {
    let line = segment.strip_suffix('\n').unwrap_or(segment);
    line.strip_suffix('\r').unwrap_or(line)
}

/// Whether `spec` is the built-in `read_result` (an installed plugin's tool always has its
/// component's digest; the built-in has none).
pub fn is_builtin(spec: &ToolSpec) -> bool {
    spec.plugin == PLUGIN && spec.tool == TOOL && spec.digest.is_empty()
}

/// What the model is sent of `message`: a tool result longer than `limit` bytes as its
/// preview naming the pager `pager`, anything else as it is.
pub fn shown(message: &Message, pager: &str, limit: usize) -> Message {
    match message {
        // A kept result's content is its preview already.
        Message::Tool {
            tool_call_id,
            name,
            content,
            is_error,
            kept: None,
        } if content.len() > limit => Message::Tool {
            tool_call_id: tool_call_id.clone(),
            name: name.clone(),
            content: preview(content, tool_call_id, name, pager, limit),
            is_error: *is_error,
            kept: None,
        },
        other => other.clone(),
    }
}

/// The tool the model pages with; `name` is the name it sees.
pub fn tool_spec(name: &str) -> ToolSpec {
    let descriptor = cordon_core::ToolDescriptor {
        name: TOOL.to_string(),
        description: "Reads a tool result that was too long to send whole: `lines` lines from \
                      `from_line` (1-based), `length` bytes from `offset`, or each match of \
                      `pattern` (a regular expression) with its offset, line and surroundings. \
                      Name the result by the id of the call that returned it."
            .to_string(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "the id of the call whose result to read"},
                "from_line": {"type": "integer", "minimum": 1},
                "lines": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LINES},
                "offset": {"type": "integer", "minimum": 0, "description": "a byte offset, to read by bytes"},
                "length": {"type": "integer", "minimum": 1},
                "pattern": {"type": "string", "description": "a regular expression; each match is returned with what surrounds it"},
            },
            "required": ["call_id"],
            "additionalProperties": false,
        }),
        hints: cordon_core::ToolHints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        output_schema: None,
    };
    let mut spec = ToolSpec::from_descriptor(descriptor, PLUGIN, Vec::new(), false);
    spec.name = name.to_string();
    spec
}

/// Answers a call of `read_result` with `args`: a page by lines or by bytes, or the matches
/// of a pattern with what surrounds them, of a result `messages` hold whole or `parts` (the
/// journal) keeps (see [`crate::pages`]); or what was wrong with the call. Every answer is at
/// most `limit` bytes, so it is never previewed itself.
pub async fn read(
    messages: &[Message],
    args: &Value,
    limit: usize,
    parts: &mut dyn KeptParts,
) -> Result<String, String> {
    let call_id = args["call_id"]
        .as_str()
        .ok_or("give `call_id`, the id of the call whose result to read")?;
    let (content, kept) = messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                kept,
                ..
            } if tool_call_id == call_id => Some((content.as_str(), kept.clone())),
            _ => None,
        })
        .ok_or_else(|| format!("this conversation holds no result of a call `{call_id}`"))?;
    // Room for the line that says what follows.
    let room = limit.saturating_sub(FOOTER);
    match kept {
        Some(kept) => page(&mut Kept { parts, kept }, args, room).await,
        None => page(&mut pages::Whole::new(content), args, room).await,
    }
}

async fn page(source: &mut dyn pages::Source, args: &Value, room: usize) -> Result<String, String> {
    if let Some(pattern) = args["pattern"].as_str() {
        return pages::search(source, pattern, room).await;
    }
    if args.get("offset").is_some() || args.get("length").is_some() {
        let offset = args["offset"].as_u64().unwrap_or(0);
        return pages::bytes(source, offset, args["length"].as_u64(), room).await;
    }
    let from = args["from_line"].as_u64().unwrap_or(1).max(1);
    pages::lines(source, from, args["lines"].as_u64().unwrap_or(100), room).await
}

/// A result the journal keeps, read part by part.
struct Kept<'a> {
    parts: &'a mut dyn KeptParts,
    kept: KeptResult,
}

#[async_trait::async_trait]
impl pages::Source for Kept<'_> {
    fn bytes(&self) -> u64 {
        self.kept.bytes
    }

    fn lines(&self) -> u64 {
        self.kept.lines
    }

    async fn part(&mut self, at: KeptAt) -> Result<Option<KeptPart>, String> {
        let part = self.parts.kept_part(&self.kept.id, at).await?;
        // Past the last part there is none; but the first, and any byte or line the readers
        // ask for (they check the ranges first), must be there.
        if part.is_none() && at != KeptAt::Index(0) && matches!(at, KeptAt::Index(_)) {
            return Ok(None);
        }
        part.map(Some).ok_or_else(|| {
            "the store no longer holds this result (its session was moved or cut short); run \
             the call again"
                .to_string()
        })
    }
}

/// What the line saying what follows (or the header of a page of bytes) takes at most.
const FOOTER: usize = 96;

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> String {
        (1..=n)
            .map(|i| format!("row-{i}|{}", "x".repeat(20)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn tool(call_id: &str, content: String) -> Message {
        Message::Tool {
            tool_call_id: call_id.into(),
            name: "sql_query".into(),
            content,
            is_error: false,
            kept: None,
        }
    }

    /// `read` as the driver calls it, for a conversation without a store.
    fn read(messages: &[Message], args: &Value, limit: usize) -> Result<String, String> {
        futures::executor::block_on(super::read(
            messages,
            args,
            limit,
            &mut crate::pages::NoParts,
        ))
    }

    #[test]
    fn a_long_result_is_sent_as_its_ends_and_counts_within_the_budget() {
        let text = rows(10_000);
        let shown = preview(&text, "q1", "sql_query", "read_result", 4_000);
        assert!(shown.len() <= 4_000, "{}", shown.len());
        assert!(shown.contains("10000 lines") && shown.contains("\"call_id\": \"q1\""));
        assert!(shown.contains("\nrow-1|") && shown.contains("row-10000|"));
        assert!(!shown.contains("row-5000|"));
        // The pager by the name the model knows it by; an id a client chose, quoted.
        let renamed = preview(&text, "a\"b", "t", "cordon__read_result", 4_000);
        assert!(renamed.contains("`cordon__read_result`") && renamed.contains(r#""a\"b""#));
        // What fits is sent as it is.
        assert_eq!(preview("short", "q1", "t", "read_result", 4_000), "short");
        // One enormous line of multi-byte characters: its start, cut between characters.
        let blob = "é".repeat(25_000);
        let shown = preview(&blob, "q2", "t", "read_result", 3_000);
        assert!(shown.contains("1 lines") && shown.contains("its start") && shown.len() <= 3_000);
        // Lines ending in CRLF.
        let crlf = (1..=2_000).map(|i| format!("r{i}\r\n")).collect::<String>();
        let shown = preview(&crlf, "q3", "t", "read_result", 1_000);
        assert!(
            shown.len() <= 1_000 && shown.contains("2000 lines"),
            "{shown}"
        );
    }

    #[test]
    fn pages_and_searches_read_the_whole_result() {
        let messages = vec![tool("q1", rows(10_000))];
        let page = read(
            &messages,
            &json!({"call_id": "q1", "from_line": 4321, "lines": 2}),
            10_000,
        )
        .unwrap();
        assert!(
            page.starts_with("4321: row-4321|") && page.contains("4322: row-4322|"),
            "{page}"
        );
        assert!(page.contains("[lines 4323-10000 follow]"));
        let found = read(
            &messages,
            &json!({"call_id": "q1", "pattern": "^row-777\\|"}),
            10_000,
        )
        .unwrap();
        // `^` and `$` hold at each line's ends.
        assert!(
            found.starts_with("offset ") && found.contains("(line 777): "),
            "{found}"
        );
        assert_eq!(found.lines().count(), 1, "{found}");
        // One long line (a JSON result) is read by bytes, and searched all the same.
        let ids: Vec<String> = (0..5_000).map(|i| format!("{{\"id\":{i}}}")).collect();
        let json_line = vec![tool("j1", format!("[{}]", ids.join(",")))];
        let hit = read(
            &json_line,
            &json!({"call_id": "j1", "pattern": "\"id\":4321\\b"}),
            10_000,
        )
        .unwrap();
        assert!(
            hit.contains("{\"id\":4321}") && hit.contains("(line 1)"),
            "{hit}"
        );
        let slice = read(
            &json_line,
            &json!({"call_id": "j1", "offset": 10, "length": 20}),
            10_000,
        )
        .unwrap();
        assert!(slice.starts_with("[bytes 10-30 of "), "{slice}");
        assert!(
            read(&json_line, &json!({"call_id": "j1"}), 1_000)
                .unwrap_err()
                .contains("read it by bytes from `offset` 0")
        );
        // A page is bounded by the budget, not only by its line count.
        // Every answer is within the budget, so it is never previewed in turn.
        for args in [
            json!({"call_id": "q1", "lines": 1000}),
            json!({"call_id": "q1", "offset": 0}),
            json!({"call_id": "q1", "pattern": "row"}),
        ] {
            let page = read(&messages, &args, 500).unwrap();
            assert!(page.len() <= 500, "{args}: {}", page.len());
        }
        // A match too long for a page is named by where it is.
        let blob = vec![tool("b1", "é".repeat(10_000))];
        let hit = read(&blob, &json!({"call_id": "b1", "pattern": "é+"}), 500).unwrap();
        assert!(
            hit.starts_with("offset 0 (line 1): a match of 20000 bytes"),
            "{hit}"
        );
        let cut = read(
            &blob,
            &json!({"call_id": "b1", "offset": 1, "length": 3}),
            500,
        )
        .unwrap();
        assert!(cut.starts_with("[bytes 0-2 of 20000]"), "{cut}");
        assert!(
            read(&messages, &json!({"call_id": "nope"}), 500)
                .unwrap_err()
                .contains("no result")
        );
        assert!(read(&messages, &json!({"call_id": "q1", "pattern": "("}), 500).is_err());
        assert!(
            read(
                &messages,
                &json!({"call_id": "q1", "from_line": 20_000}),
                500
            )
            .is_err()
        );
        let none = read(&messages, &json!({"call_id": "q1", "pattern": "zzz"}), 500).unwrap();
        assert!(none.starts_with("nothing in the "), "{none}");
        assert!(holds_large(&messages, 1_000) && !holds_large(&messages, 10_000_000));
        assert_eq!(threshold(0), None);
    }
}
