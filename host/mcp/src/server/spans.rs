//! The span of one `tools/call` (exported only when the binary sends traces; see
//! `cordon_agent::telemetry`), named and attributed as OpenTelemetry's conventions for MCP
//! servers name it (`tools/call TOOL`, `mcp.method.name`, `mcp.session.id`,
//! `gen_ai.tool.name`), with Cordon's decision and the sandbox's measures beside.
//!
//! The client's trace is continued from the request's `_meta` (`traceparent`, `tracestate`:
//! SEP-414); else, over HTTP, the call is a child of the HTTP request's span (which continued
//! the trace of the request's headers). Never an argument or a result; what the client names
//! (the tool, the request id) only as far as a tool name or an id can be.

use rmcp::RoleServer;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;
use tracing::Span;
use tracing::field::Empty;

/// The span of `request`, continuing the trace the client sent with it.
pub(super) fn tool_call(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    origin: &str,
    token: Option<&str>,
) -> Span {
    let parts = context.extensions.get::<http::request::Parts>();
    let session = parts
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map(|v| bounded(v, MAX_ID))
        .unwrap_or("");
    // A name no tool could have (too long, or with characters no tool name has) is not shown.
    let tool = Some(request.name.as_ref())
        .filter(|n| n.len() <= MAX_ID && n.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("?");
    let id = context.id.to_string();
    let span = tracing::info_span!(
        "tools/call",
        otel.name = %format_args!("tools/call {tool}"),
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = "tools/call",
        mcp.session.id = session,
        jsonrpc.request.id = bounded(&id, MAX_ID),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        cordon.origin = origin,
        enduser.id = token.unwrap_or(""),
        cordon.decision = Empty,
        cordon.policy_rule = Empty,
        cordon.peak_memory_bytes = Empty,
        cordon.refusals = Empty,
        "error.type" = Empty,
    );
    if let Some(parent) = context.meta.get_traceparent() {
        let mut carried = http::HeaderMap::new();
        for (name, value) in [
            ("traceparent", Some(parent)),
            ("tracestate", context.meta.get_tracestate()),
        ] {
            if let Some(value) = value.and_then(|v| http::HeaderValue::from_str(v).ok()) {
                carried.insert(name, value);
            }
        }
        cordon_core::trace::continue_trace(&span, &carried);
    } else if let Some(parent) =
        parts.and_then(|p| p.extensions.get::<cordon_core::trace::Parent>())
    {
        parent.adopt(&span);
    }
    span
}

/// The longest tool name, session id or request id a span shows.
const MAX_ID: usize = 128;

/// `text` up to `max` bytes, cut at a character's boundary.
fn bounded(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Records the decision on the call, and the rule that made it, in the current call's span
/// (not who decided in the audit log's words, which name a grant request's directories and
/// a rule's reason).
pub(super) fn decided(decision: &str, rule: Option<&str>) {
    let span = Span::current();
    span.record("cordon.decision", decision);
    if let Some(rule) = rule {
        span.record("cordon.policy_rule", rule);
    }
}
