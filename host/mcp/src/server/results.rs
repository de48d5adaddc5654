//! What a client gets of a call that succeeded: the result whole, or, past the result budget,
//! a preview and a link to read it whole (see [`crate::kept`]).

use cordon_agent::ToolSpec;
use cordon_core::Content;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ReadResourceResult, Resource, ResourceContents};
use serde_json::Value;

use super::McpServer;
use crate::kept::{Owner, Unreadable};

/// The largest written result a tool with an output schema sends whole as structured content:
/// what a plugin may return at once.
const MAX_STRUCTURED_BYTES: u64 = 16 << 20;

impl McpServer {
    /// The result of a call of `spec` that returned `content`, for the client `owner`.
    pub(super) fn delivered(
        &self,
        spec: &ToolSpec,
        content: Vec<Content>,
        owner: Owner,
    ) -> CallToolResult {
        let budget = self.host.options.result_budget_tokens;
        // A written result too long to send whole goes as a preview and a link. A tool with an
        // output schema must send its object (`structuredContent`; clients check it is there)
        // whole, which is done up to what a plugin may return at once; past that the result
        // is never held whole, so the call is answered as an error saying where the result is.
        let keep = cordon_agent::spill::keep_threshold(budget) as u64;
        let structured = spec.output_schema.is_some();
        if let Some(i) = content.iter().position(|p| {
            matches!(p, Content::Written(w)
                if w.len() > keep && (!structured || w.len() > MAX_STRUCTURED_BYTES))
        }) {
            return self.delivered_written(spec, content, i, owner);
        }
        let content: Vec<Content> = content
            .into_iter()
            .map(|piece| {
                piece.in_memory().unwrap_or_else(|e| {
                    Content::Text(format!("(the written result could not be read back: {e})"))
                })
            })
            .collect();
        let limit = cordon_agent::spill::threshold(budget);
        let size: usize = content.iter().map(Content::size).sum();
        // A tool with an output schema must send its object (`structuredContent`) whole.
        let Some(limit) = limit.filter(|&l| size > l && spec.output_schema.is_none()) else {
            return succeeded(content, spec.output_schema.is_some());
        };
        let text = cordon_agent::tools::render_result(&Ok(content));
        let bytes = text.len() as u64;
        let shown = |how: &str| cordon_agent::spill::ends(&text, &spec.name, limit, how);
        match self.host.kept.keep(owner, text.clone()) {
            Some(uri) => {
                let preview = shown(&format!(
                    "The whole result is the resource `{uri}`: read it with resources/read."
                ));
                let link = Resource::new(uri, format!("{} result", spec.name))
                    .with_mime_type("text/plain")
                    .with_size(bytes);
                CallToolResult::success(vec![
                    ContentBlock::text(preview),
                    ContentBlock::resource_link(link),
                ])
            }
            None => CallToolResult::success(vec![ContentBlock::text(shown(
                "It is too large for this host to keep whole; ask for less.",
            ))]),
        }
    }

    /// The result of a call whose piece `i` is a written result too large to send whole: its
    /// preview and a link to read it in parts, then the other pieces.
    fn delivered_written(
        &self,
        spec: &ToolSpec,
        mut content: Vec<Content>,
        i: usize,
        owner: Owner,
    ) -> CallToolResult {
        let Content::Written(written) = content.remove(i) else {
            return succeeded(content, false);
        };
        let limit = cordon_agent::spill::kept_preview_bytes(self.host.options.result_budget_tokens);
        let bytes = written.len();
        let preview = |how: &str| {
            cordon_agent::pages::line_count(&written)
                .and_then(|lines| {
                    cordon_agent::spill::written_ends(&written, lines, &spec.name, limit, how)
                })
                .unwrap_or_else(|e| format!("(the written result could not be read back: {e})"))
        };
        let too_large = spec.output_schema.is_some().then(|| {
            format!(
                "(This result of `{}` is {bytes} bytes, more than the {} MiB sent as structured \
                 content: read it from the resource, or ask for less.)",
                spec.name,
                MAX_STRUCTURED_BYTES >> 20
            )
        });
        let mut blocks = match self.host.kept.keep_written(owner, written.clone()) {
            Some(uri) => {
                let parts = crate::kept::parts_of(&written);
                let how = if bytes <= crate::kept::MAX_WHOLE_READ {
                    format!(
                        "The whole result is the resource `{uri}`: read it with resources/read."
                    )
                } else {
                    format!(
                        "The whole result is the resource `{uri}`, read with resources/read in \
                         {parts} parts of about 1 MiB: `{uri}?part=0` to `{uri}?part={}`.",
                        parts - 1
                    )
                };
                let link = Resource::new(uri, format!("{} result", spec.name))
                    .with_mime_type(if written.is_json() {
                        "application/json"
                    } else {
                        "text/plain"
                    })
                    .with_size(bytes);
                vec![
                    ContentBlock::text(preview(&how)),
                    ContentBlock::resource_link(link),
                ]
            }
            None => vec![ContentBlock::text(preview(
                "It is too large for this host to keep; ask for less.",
            ))],
        };
        for piece in content {
            blocks.push(ContentBlock::text(cordon_agent::tools::render_result(&Ok(
                vec![piece],
            ))));
        }
        match too_large {
            Some(why) => {
                blocks.insert(0, ContentBlock::text(why));
                CallToolResult::error(blocks)
            }
            None => CallToolResult::success(blocks),
        }
    }

    /// `resources/read` of a link to a kept result.
    pub(super) fn read_kept(
        &self,
        uri: &str,
        owner: &Owner,
    ) -> Result<ReadResourceResult, ErrorData> {
        match self.host.kept.read(uri, owner) {
            Ok(text) => Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text.to_string(), uri).with_mime_type("text/plain"),
            ])),
            Err(Unreadable::NotOurs) => Err(ErrorData::invalid_params(
                format!(
                    "`{}` is not a resource of this server; it offers only the results it \
                     links to (`{}…`)",
                    uri.chars().take(200).collect::<String>(),
                    crate::kept::URI_PREFIX
                ),
                None,
            )),
            Err(Unreadable::InParts(parts)) => Err(ErrorData::invalid_params(
                format!(
                    "`{uri}` is too large to read at once: read it in {parts} parts, `{uri}?part=0` \
                     to `{uri}?part={}`",
                    parts - 1
                ),
                None,
            )),
            Err(Unreadable::NoSuchPart(parts)) => Err(ErrorData::invalid_params(
                format!(
                    "this result has {parts} parts, numbered from 0 to {}",
                    parts - 1
                ),
                None,
            )),
            Err(Unreadable::Failed(why)) => Err(ErrorData::internal_error(
                format!("the result could not be read: {why}"),
                None,
            )),
            Err(Unreadable::Gone) => Err(ErrorData::invalid_params(
                format!(
                    "`{uri}` is not kept for this client: results are read by the client that \
                     got them, and the oldest go when many are kept; call the tool again"
                ),
                None,
            )),
        }
    }
}

/// A successful result: each piece as text, and, when one JSON object is the whole result,
/// that object also as `structuredContent`. Several clients (Claude Code, Codex) give the
/// model only `structuredContent` when a result has it, so it must not leave anything out: a
/// result with text beside its JSON (the text of a file, and facts about it) has none. A tool
/// with an output schema always has it (MCP requires it; the home checked the result against
/// the schema, and its author promised the object is the result).
pub(super) fn succeeded(content: Vec<Content>, output_schema: bool) -> CallToolResult {
    let mut json = content.iter().filter_map(|piece| match piece {
        Content::Json(v) => Some(v),
        Content::Text(_) | Content::Written(_) => None,
    });
    let alone = content.len() == 1 || output_schema;
    let structured = match (json.next(), json.next()) {
        (Some(v @ Value::Object(_)), None) if alone => Some(v.clone()),
        _ => None,
    };
    let blocks: Vec<ContentBlock> =
        content
            .into_iter()
            .map(|piece| match piece {
                Content::Text(t) => ContentBlock::text(t),
                Content::Json(v) => ContentBlock::text(v.to_string()),
                Content::Written(w) => ContentBlock::text(w.to_text().unwrap_or_else(|e| {
                    format!("(the written result could not be read back: {e})")
                })),
            })
            .collect();
    let mut result = CallToolResult::success(blocks);
    result.structured_content = structured;
    result
}
