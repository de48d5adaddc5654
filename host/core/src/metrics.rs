//! The numbers `cordon serve` publishes at `/metrics`, named and recorded in one place so that
//! a name means one thing wherever it is counted.
//!
//! Crates record through the `metrics` facade, which does nothing until a process installs a
//! recorder: only `cordon serve` does, so `cordon mcp`, `chat` and `call` pay one atomic load
//! a record. Tool calls are counted from their audit records as the store writes them, so a
//! call is counted once whichever door it came through (a session, the gateway, `/mcp`), and
//! only once it is on record; a call whose record could not be written is not counted.
//!
//! Labels take only names an operator chose (plugins, tools, outcomes): nothing a model or a
//! client writes becomes a label, so the number of series stays bounded by what is installed.

use std::time::Duration;

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge};

use crate::{CallOutcome, ToolCallAudit};

/// Tool calls on record, by plugin, tool and outcome (`ok`, an error kind, `not_run`).
pub const TOOL_CALLS: &str = "cordon_tool_calls_total";
/// How long tool calls ran in the sandbox, by plugin and tool.
pub const TOOL_CALL_SECONDS: &str = "cordon_tool_call_duration_seconds";
/// Calls a policy (a rule or the grant-derived default) denied, by plugin and tool.
pub const POLICY_DENIALS: &str = "cordon_policy_denials_total";
/// What the sandbox refused plugins (a path, a host outside their grants), by plugin and tool.
pub const SANDBOX_REFUSALS: &str = "cordon_sandbox_refusals_total";
/// Questions about calls waiting for a person, on this host and in the store.
pub const APPROVALS_WAITING: &str = "cordon_approvals_waiting";
/// How long questions waited for their answer.
pub const APPROVAL_ANSWER_SECONDS: &str = "cordon_approval_answer_seconds";
/// Sessions with a turn running, a question waiting or a follower on this host.
pub const SESSIONS_ACTIVE: &str = "cordon_sessions_active";
/// Requests to the model server, by outcome (`ok`, `failed`, `cancelled`).
pub const MODEL_REQUEST_SECONDS: &str = "cordon_model_request_duration_seconds";
/// Tokens the model server reported, by kind (`prompt`, `completion`).
pub const MODEL_TOKENS: &str = "cordon_model_tokens_total";
/// Statements (and transactions) sent to the session store, by backend.
pub const STORE_SECONDS: &str = "cordon_store_operation_duration_seconds";
/// Store operations that failed, by backend.
pub const STORE_ERRORS: &str = "cordon_store_errors_total";
/// Requests refused before any work (`429`/`503`), by why.
pub const REQUESTS_REFUSED: &str = "cordon_requests_refused_total";

/// The histograms, for a recorder to give buckets: every one measures seconds.
pub const HISTOGRAMS: [&str; 4] = [
    TOOL_CALL_SECONDS,
    APPROVAL_ANSWER_SECONDS,
    MODEL_REQUEST_SECONDS,
    STORE_SECONDS,
];

/// Bucket bounds (seconds) from a tenth of a millisecond, for a no-op call or a statement, to
/// five minutes, for a question a person answers.
pub const BUCKETS: [f64; 16] = [
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
    300.0,
];

/// Gives each metric its help text; called once by the process that installs a recorder.
pub fn describe() {
    describe_counter!(
        TOOL_CALLS,
        "Tool calls on record, by plugin, tool and outcome."
    );
    describe_histogram!(
        TOOL_CALL_SECONDS,
        Unit::Seconds,
        "How long tool calls ran in the sandbox."
    );
    describe_counter!(POLICY_DENIALS, "Tool calls a policy denied.");
    describe_counter!(
        SANDBOX_REFUSALS,
        "Accesses the sandbox refused plugins (outside their grants)."
    );
    describe_gauge!(
        APPROVALS_WAITING,
        "Questions about calls waiting for a person."
    );
    describe_histogram!(
        APPROVAL_ANSWER_SECONDS,
        Unit::Seconds,
        "How long questions waited for their answer."
    );
    describe_gauge!(
        SESSIONS_ACTIVE,
        "Sessions with a turn running or a follower on this host."
    );
    describe_histogram!(
        MODEL_REQUEST_SECONDS,
        Unit::Seconds,
        "Requests to the model server, by outcome."
    );
    describe_counter!(MODEL_TOKENS, "Tokens the model server reported, by kind.");
    describe_histogram!(
        STORE_SECONDS,
        Unit::Seconds,
        "Operations on the session store, by backend."
    );
    describe_counter!(STORE_ERRORS, "Session store operations that failed.");
    describe_counter!(
        REQUESTS_REFUSED,
        "Requests refused before any work, by why."
    );
}

/// Counts a tool call as its audit record says: its outcome, how long it ran, whether a policy
/// denied it and what the sandbox refused it.
pub fn tool_call(call: &ToolCallAudit) {
    let plugin = call.plugin.clone();
    // A tool no plugin offers is named by the model: never a label.
    let tool = match plugin.is_empty() {
        true => "(none installed)".to_string(),
        false => call.tool.clone(),
    };
    let outcome = call.outcome.label().to_string();
    counter!(TOOL_CALLS, "plugin" => plugin.clone(), "tool" => tool.clone(), "outcome" => outcome)
        .increment(1);
    if call.decision == "deny" && matches!(call.outcome, CallOutcome::NotRun { .. }) {
        counter!(POLICY_DENIALS, "plugin" => plugin.clone(), "tool" => tool.clone()).increment(1);
    }
    if let Some(report) = &call.report {
        metrics::histogram!(TOOL_CALL_SECONDS, "plugin" => plugin.clone(), "tool" => tool.clone())
            .record(report.duration_ms / 1000.0);
        let refused = report.refused.len() as u64 + report.refusals_dropped;
        if refused > 0 {
            counter!(SANDBOX_REFUSALS, "plugin" => plugin, "tool" => tool).increment(refused);
        }
    }
}

/// Records a request to the model server: how long it took, how it ended, and the tokens the
/// server reported.
pub fn model_request(took: Duration, outcome: &'static str, tokens: Option<(u64, u64)>) {
    metrics::histogram!(MODEL_REQUEST_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
    if let Some((prompt, completion)) = tokens {
        counter!(MODEL_TOKENS, "kind" => "prompt").increment(prompt);
        counter!(MODEL_TOKENS, "kind" => "completion").increment(completion);
    }
}

/// Records that a question was answered `waited_ms` after it was asked.
pub fn approval_answered(waited_ms: i64) {
    metrics::histogram!(APPROVAL_ANSWER_SECONDS).record(waited_ms.max(0) as f64 / 1000.0);
}

/// Records one operation on the session store.
pub fn store_operation(backend: &'static str, took: Duration) {
    metrics::histogram!(STORE_SECONDS, "backend" => backend).record(took.as_secs_f64());
}

/// Counts a failed store operation.
pub fn store_error(backend: &'static str) {
    counter!(STORE_ERRORS, "backend" => backend).increment(1);
}

/// Counts a request refused before any work, for `why` (`connections`, `turns`, `rate`, …).
pub fn request_refused(why: &'static str) {
    counter!(REQUESTS_REFUSED, "why" => why).increment(1);
}

/// Sets the gauges a host knows the values of when it is scraped.
pub fn gauges(sessions_active: usize, approvals_waiting: usize) {
    gauge!(SESSIONS_ACTIVE).set(sessions_active as f64);
    gauge!(APPROVALS_WAITING).set(approvals_waiting as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CallReport;

    fn call(plugin: &str, tool: &str, decision: &str, outcome: CallOutcome) -> ToolCallAudit {
        ToolCallAudit {
            session: None,
            turn: None,
            call_id: None,
            client: None,
            requested_by: None,
            tool: tool.into(),
            plugin: plugin.into(),
            digest: String::new(),
            arguments_sha256: String::new(),
            arguments: None,
            grants: Vec::new(),
            decision: decision.into(),
            decided_by: String::new(),
            policy_rule: None,
            policy_digest: None,
            labels: Vec::new(),
            outcome,
            report: None,
        }
    }

    /// What `record` leaves in a fresh Prometheus recorder, rendered.
    fn rendered(record: impl FnOnce()) -> String {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, record);
        handle.render()
    }

    #[test]
    fn a_call_is_counted_by_plugin_tool_and_outcome_with_its_denials_and_refusals() {
        let mut refused = call("files", "read_file", "auto", CallOutcome::Ok);
        refused.report = Some(CallReport {
            duration_ms: 2.0,
            refused: vec!["/etc: outside the grants".into()],
            refusals_dropped: 2,
            ..CallReport::default()
        });
        let denied = call(
            "sql",
            "sql_execute",
            "deny",
            CallOutcome::NotRun {
                reason: "no DROP".into(),
            },
        );
        let text = rendered(|| {
            tool_call(&refused);
            tool_call(&denied);
        });
        for line in [
            r#"cordon_tool_calls_total{plugin="files",tool="read_file",outcome="ok"} 1"#,
            r#"cordon_tool_calls_total{plugin="sql",tool="sql_execute",outcome="not_run"} 1"#,
            r#"cordon_policy_denials_total{plugin="sql",tool="sql_execute"} 1"#,
            r#"cordon_sandbox_refusals_total{plugin="files",tool="read_file"} 3"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        // A person's `no` is not a policy's denial.
        let declined = call(
            "sql",
            "sql_execute",
            "no",
            CallOutcome::NotRun {
                reason: "declined".into(),
            },
        );
        let text = rendered(|| tool_call(&declined));
        assert!(!text.contains("cordon_policy_denials_total{"), "{text}");
    }

    #[test]
    fn a_tool_name_the_model_made_up_is_never_a_label() {
        let text = rendered(|| {
            for i in 0..50 {
                let outcome = CallOutcome::NotRun {
                    reason: "no such tool".into(),
                };
                tool_call(&call("", &format!("made_up_{i}"), "invalid", outcome));
            }
        });
        assert!(!text.contains("made_up"), "{text}");
        assert!(
            text.contains(
                r#"cordon_tool_calls_total{plugin="",tool="(none installed)",outcome="not_run"} 50"#
            ),
            "{text}"
        );
    }
}
