//! `[serve.limits]`: how much `cordon serve` takes on at once, and how long it waits for a
//! client. Past a bound a client gets a clear answer (`429`/`503` with `Retry-After`, or a
//! closed connection for one that sends nothing), never a queue without end. The defaults
//! keep a 2-core host answering its health check and its approvals at four times the load
//! it admits; `docs/reliability.md` has the figures.

use serde::{Deserialize, Serialize};

/// A bound out of range: the key and what to use instead.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting `{field}`: {message}")]
pub struct InvalidLimit {
    /// The key, e.g. `serve.limits.max_turns`.
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The bounds, each named by its key in `[serve.limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeLimits {
    /// Connections open at once; the next is answered `503` and closed before a byte of it
    /// is read.
    pub max_connections: usize,
    /// Seconds a connection may take to send a request's headers, and stay idle between
    /// requests; then it is closed.
    pub header_timeout_secs: u64,
    /// Seconds a request's body may take to arrive, counted from its headers; then it is
    /// refused.
    pub body_timeout_secs: u64,
    /// Seconds a client may leave an answer unread while it is being sent; then its
    /// connection is closed. The turn it followed goes on.
    pub send_timeout_secs: u64,
    /// Turns (API and gateway) running at once; the next is answered `503`.
    pub max_turns: usize,
    /// Turns one token may run at once.
    pub max_turns_per_token: usize,
    /// MCP tool calls running at once over HTTP.
    pub max_tool_calls: usize,
    /// MCP tool calls that may wait for a place; past it the next is answered `503`.
    pub tool_call_queue: usize,
    /// Seconds an MCP tool call waits for a place before it is answered `503`.
    pub queue_wait_secs: u64,
    /// MCP sessions open at once; the next `initialize` is answered `503`.
    pub max_mcp_sessions: usize,
    /// MCP sessions one token may hold open.
    pub max_mcp_sessions_per_token: usize,
    /// Requests per second one token may make, on average; past it `429`.
    pub requests_per_second: u32,
    /// Requests one token may make at once after a quiet spell.
    pub request_burst: u32,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout_secs: 30,
            body_timeout_secs: 60,
            send_timeout_secs: 60,
            max_turns: 128,
            max_turns_per_token: 128,
            max_tool_calls: 32,
            tool_call_queue: 256,
            queue_wait_secs: 30,
            max_mcp_sessions: 1000,
            max_mcp_sessions_per_token: 1000,
            requests_per_second: 500,
            request_burst: 1000,
        }
    }
}

/// The largest count any bound takes: more would outgrow what one process can hold open.
const MAX_COUNT: usize = 1 << 20;
/// The longest any wait may be: an hour.
const MAX_SECS: u64 = 3600;

impl ServeLimits {
    /// Checks that every bound is at least 1 and at most what a process can use.
    pub fn validate(&self) -> Result<(), InvalidLimit> {
        let invalid = |field: &str, message: String| InvalidLimit {
            field: format!("serve.limits.{field}"),
            message,
        };
        for (field, value) in [
            ("max_connections", self.max_connections),
            ("max_turns", self.max_turns),
            ("max_turns_per_token", self.max_turns_per_token),
            ("max_tool_calls", self.max_tool_calls),
            ("max_mcp_sessions", self.max_mcp_sessions),
            (
                "max_mcp_sessions_per_token",
                self.max_mcp_sessions_per_token,
            ),
            ("requests_per_second", self.requests_per_second as usize),
            ("request_burst", self.request_burst as usize),
        ] {
            if value == 0 || value > MAX_COUNT {
                return Err(invalid(
                    field,
                    format!("{value} is out of range; use 1 to {MAX_COUNT}"),
                ));
            }
        }
        if self.tool_call_queue > MAX_COUNT {
            return Err(invalid(
                "tool_call_queue",
                format!(
                    "{} is out of range; use 0 (no queue) to {MAX_COUNT}",
                    self.tool_call_queue
                ),
            ));
        }
        for (field, secs) in [
            ("header_timeout_secs", self.header_timeout_secs),
            ("body_timeout_secs", self.body_timeout_secs),
            ("send_timeout_secs", self.send_timeout_secs),
            ("queue_wait_secs", self.queue_wait_secs),
        ] {
            if secs == 0 || secs > MAX_SECS {
                return Err(invalid(
                    field,
                    format!("{secs} seconds is out of range; use 1 to {MAX_SECS} (an hour)"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_hold_and_every_bound_is_checked_at_both_ends() {
        ServeLimits::default().validate().unwrap();
        let zero = ServeLimits {
            max_turns: 0,
            ..ServeLimits::default()
        };
        let e = zero.validate().unwrap_err().to_string();
        assert!(
            e.contains("serve.limits.max_turns") && e.contains("1 to"),
            "{e}"
        );
        let huge = ServeLimits {
            max_connections: usize::MAX,
            ..ServeLimits::default()
        };
        assert!(huge.validate().is_err());
        let long = ServeLimits {
            body_timeout_secs: 86_400,
            ..ServeLimits::default()
        };
        let e = long.validate().unwrap_err().to_string();
        assert!(
            e.contains("body_timeout_secs") && e.contains("an hour"),
            "{e}"
        );
        let no_queue = ServeLimits {
            tool_call_queue: 0,
            ..ServeLimits::default()
        };
        no_queue.validate().unwrap();
    }
}
