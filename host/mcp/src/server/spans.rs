//! The span of one `tools/call` (exported only when the binary sends traces; see
//! `cordon_agent::telemetry`), named and attributed as OpenTelemetry's conventions for MCP
//! servers name it (`tools/call TOOL`, `mcp.method.name`, `mcp.session.id`,
//! `gen_ai.tool.name`), with Cordon's decision and the sandbox's measures beside.
//!
//! The client's trace is continued from the request's `_meta` (`traceparent`, `tracestate`:
//! SEP-414), else from the HTTP request's headers. Never an argument or a result.

use rmcp::RoleServer;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;
use tracing::Span;
use tracing::field::Empty;

use cordon_agent::ToolFailure;
use cordon_agent::tools::Content;
use cordon_core::CallReport;

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
        .unwrap_or("");
    let span = tracing::info_span!(
        "tools/call",
        otel.name = %format_args!("tools/call {}", request.name),
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = "tools/call",
        mcp.session.id = session,
        jsonrpc.request.id = %context.id,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %request.name,
        cordon.origin = origin,
        enduser.id = token.unwrap_or(""),
        cordon.decision = Empty,
        cordon.decided_by = Empty,
        cordon.policy_rule = Empty,
        cordon.peak_memory_bytes = Empty,
        cordon.refusals = Empty,
        "error.type" = Empty,
    );
    let mut carried = http::HeaderMap::new();
    if let Some(parent) = context.meta.get_traceparent() {
        for (name, value) in [
            ("traceparent", Some(parent)),
            ("tracestate", context.meta.get_tracestate()),
        ] {
            if let Some(value) = value.and_then(|v| http::HeaderValue::from_str(v).ok()) {
                carried.insert(name, value);
            }
        }
    } else if let Some(parts) = parts {
        carried = parts.headers.clone();
    }
    cordon_core::trace::continue_trace(&span, &carried);
    span
}

/// Records who or what decided the call in the current call's span.
pub(super) fn decided(decision: &str, by: &str, rule: Option<&str>) {
    let span = Span::current();
    span.record("cordon.decision", decision);
    span.record("cordon.decided_by", by);
    if let Some(rule) = rule {
        span.record("cordon.policy_rule", rule);
    }
}

/// Records the call's outcome and what the sandbox measured in the current call's span.
pub(super) fn ran(result: &Result<Vec<Content>, ToolFailure>, report: Option<&CallReport>) {
    let span = Span::current();
    if let Some(report) = report {
        span.record("cordon.peak_memory_bytes", report.peak_memory);
        span.record("cordon.refusals", report.refused.len());
    }
    if let Err(failure) = result {
        span.record("otel.status_code", "error");
        span.record("error.type", failure.kind.as_str());
    }
}
