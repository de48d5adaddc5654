//! What a client gets of a call that succeeded: the result whole, or, past the result budget,
//! a preview and a link to read it whole (see [`crate::kept`]).

use cordon_agent::ToolSpec;
use cordon_core::Content;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ReadResourceResult, Resource, ResourceContents};

use super::{McpServer, succeeded};
use crate::kept::{Owner, Unreadable};

impl McpServer {
    /// The result of a call of `spec` that returned `content`, for the client `owner`.
    pub(super) fn delivered(
        &self,
        spec: &ToolSpec,
        content: Vec<Content>,
        owner: Owner,
    ) -> CallToolResult {
        let limit = cordon_agent::spill::threshold(self.host.options.result_budget_tokens);
        let size: usize = content
            .iter()
            .map(|piece| match piece {
                Content::Text(t) => t.len(),
                Content::Json(v) => v.to_string().len(),
            })
            .sum();
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
