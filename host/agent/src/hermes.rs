//! The Hermes text format for models without native tool calling: tools listed in the system
//! prompt inside `<tools>`, calls written as `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
//! in the answer, results returned in a user message as `<tool_response>` blocks.

use serde_json::{Value, json};

use crate::tools::ToolSpec;
use crate::types::{Message, ToolCall};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The system prompt section that describes the tools and the call syntax.
pub fn tools_section(tools: &[ToolSpec]) -> String {
    let list: Vec<String> = tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {"name": t.name, "description": t.description,
                "parameters": t.input_schema}})
            .to_string()
        })
        .collect();
    format!(
        "You may call the functions listed inside <tools></tools>.\n<tools>\n{}\n</tools>\n\
         To call one, write a JSON object with its name and arguments inside <tool_call></tool_call> tags:\n\
         <tool_call>\n{{\"name\": \"<function-name>\", \"arguments\": {{<arguments>}}}}\n</tool_call>\n\
         Results come back inside <tool_response></tool_response> tags.",
        list.join("\n")
    )
}

/// Splits an answer into its text and the calls written in it. Calls get ids `hermes_<n>_<i>`
/// (`n` distinguishes responses). A block that is not a JSON object with a string `name` becomes
/// a call with an empty name and the raw block as arguments, so the engine can tell the model
/// what was wrong.
pub fn parse(content: &str, n: usize) -> (String, Vec<ToolCall>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut rest = content;
    while let Some(start) = rest.find(OPEN) {
        text.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let (block, next) = match after.find(CLOSE) {
            Some(end) => (&after[..end], &after[end + CLOSE.len()..]),
            None => (after, ""),
        };
        let id = format!("hermes_{n}_{}", calls.len());
        let call = match serde_json::from_str::<Value>(block.trim()) {
            Ok(v) if v.get("name").and_then(Value::as_str).is_some() => {
                let arguments = match v.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => "{}".to_string(),
                };
                ToolCall {
                    id,
                    name: v["name"].as_str().unwrap_or_default().to_string(),
                    arguments,
                }
            }
            _ => ToolCall {
                id,
                name: String::new(),
                arguments: block.trim().to_string(),
            },
        };
        calls.push(call);
        rest = next;
    }
    text.push_str(rest);
    (text.trim().to_string(), calls)
}

/// Hides `<tool_call>` blocks from streamed text, so a user sees the answer, not the call
/// syntax. Text after the first block is held back (the calls are shown as tool events); a tail
/// that could be the start of `<tool_call>` is held until the next piece decides it.
#[derive(Debug, Default)]
pub struct StreamFilter {
    pending: String,
    inside: bool,
}

impl StreamFilter {
    /// Takes a streamed piece; returns the text to show now.
    pub fn push(&mut self, text: &str) -> String {
        if self.inside {
            return String::new();
        }
        self.pending.push_str(text);
        if let Some(i) = self.pending.find(OPEN) {
            self.inside = true;
            let out = self.pending[..i].to_string();
            self.pending.clear();
            return out;
        }
        let keep = (1..OPEN.len())
            .rev()
            .find(|&k| self.pending.ends_with(&OPEN[..k]))
            .unwrap_or(0);
        let cut = self.pending.len() - keep;
        self.pending.drain(..cut).collect()
    }

    /// The held-back text at the end of the stream (none once a call started).
    pub fn finish(&mut self) -> String {
        if self.inside {
            String::new()
        } else {
            std::mem::take(&mut self.pending)
        }
    }
}

/// Renders the history for a model that reads Hermes text: assistant tool calls become
/// `<tool_call>` blocks, consecutive tool results become one user message.
pub fn render(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut responses: Vec<String> = Vec::new();
    let flush = |out: &mut Vec<Value>, responses: &mut Vec<String>| {
        if !responses.is_empty() {
            out.push(json!({"role": "user", "content": responses.join("\n")}));
            responses.clear();
        }
    };
    for m in messages {
        match m {
            Message::Tool { name, content, .. } => responses.push(format!(
                "<tool_response>\n{}\n</tool_response>",
                json!({"name": name, "content": content})
            )),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                flush(&mut out, &mut responses);
                let mut text = content.clone();
                for c in tool_calls {
                    let args = serde_json::from_str::<Value>(&c.arguments)
                        .unwrap_or(Value::String(c.arguments.clone()));
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "{OPEN}\n{}\n{CLOSE}",
                        json!({"name": c.name, "arguments": args})
                    ));
                }
                out.push(json!({"role": "assistant", "content": text}));
            }
            other => {
                flush(&mut out, &mut responses);
                out.push(json!({"role": other.role(), "content": other.content()}));
            }
        }
    }
    flush(&mut out, &mut responses);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_calls_and_keeps_text() {
        let (text, calls) = parse(
            "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>{\"name\":\"b\"}</tool_call>",
            3,
        );
        assert_eq!(text, "Let me look.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "a");
        assert_eq!(calls[0].id, "hermes_3_0");
        assert_eq!(
            serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
            json!({"x": 1})
        );
        assert_eq!(calls[1].arguments, "{}");
    }

    #[test]
    fn malformed_and_unterminated_blocks_become_nameless_calls() {
        let (_, calls) = parse(
            "<tool_call>not json</tool_call><tool_call>{\"name\": \"z\"}",
            0,
        );
        assert_eq!(calls[0].name, "");
        assert_eq!(calls[0].arguments, "not json");
        assert_eq!(calls[1].name, "z");
    }

    #[test]
    fn stream_filter_hides_calls_split_across_pieces() {
        let mut f = StreamFilter::default();
        let pieces = [
            "Let me ",
            "look.<tool",
            "_ca",
            "ll>{\"name\": \"a\"}</tool_call>",
            " more",
        ];
        let shown: String = pieces.iter().map(|p| f.push(p)).collect::<String>() + &f.finish();
        assert_eq!(shown, "Let me look.");
        let mut f = StreamFilter::default();
        let shown = f.push("a <tool") + &f.push(" is not a call") + &f.finish();
        assert_eq!(shown, "a <tool is not a call");
    }

    #[test]
    fn render_then_parse_round_trips() {
        let history = vec![
            Message::user("q"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "1".into(),
                    name: "a".into(),
                    arguments: "{\"x\":1}".into(),
                }],
                partial: false,
            },
            Message::Tool {
                tool_call_id: "1".into(),
                name: "a".into(),
                content: "r1".into(),
                is_error: false,
            },
            Message::Tool {
                tool_call_id: "2".into(),
                name: "b".into(),
                content: "r2".into(),
                is_error: false,
            },
        ];
        let out = render(&history);
        assert_eq!(out.len(), 3);
        assert_eq!(out[2]["role"], "user");
        let results = out[2]["content"].as_str().unwrap();
        assert!(results.contains("r1") && results.contains("r2"));
        let (_, calls) = parse(out[1]["content"].as_str().unwrap(), 0);
        assert_eq!(calls[0].name, "a");
        assert_eq!(
            serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
            json!({"x": 1})
        );
    }
}
