//! `cordon audit`: the audit log, filtered; and the records of what a person did at the
//! terminal (a direct `cordon call`, a change to the home).

use std::fmt::Write as _;

use clap::Args;
use cordon_core::{
    AuditEntry, AuditRecord, CallOutcome, CallReport, HomeChangeAudit, ToolCallAudit,
    arguments_sha256, format_bytes, local_user, now_ms,
};
use cordon_home::ToolEntry;
use cordon_store::{AuditQuery, Store, StoredAudit};
use serde_json::Value;

use crate::records::Records;
use crate::term::{outln, print_json_line};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this session's tool calls.
    #[arg(long)]
    session: Option<String>,
    /// Only calls of this tool (`tool` or `plugin.tool`).
    #[arg(long)]
    tool: Option<String>,
    /// Only records since then: a time (2026-11-26T10:00:00Z), or how long ago (10m, 2h, 3d).
    #[arg(long, value_parser = since_arg)]
    since: Option<i64>,
    /// Only calls of turns asked for with this token (its name in `cordon serve`'s token
    /// file; `default` for the unnamed one).
    #[arg(long, value_name = "TOKEN")]
    asked_by: Option<String>,
    /// Only calls decided by someone or something whose description contains this, whatever
    /// the case: a token's name, `policy`, `terminal`.
    #[arg(long, value_name = "TEXT")]
    decided_by: Option<String>,
    /// Only tool calls or only changes to the home.
    #[arg(long, value_parser = ["tool_call", "home_change"])]
    kind: Option<String>,
    /// At most this many, the newest.
    #[arg(long, default_value_t = 100)]
    limit: i64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// `cordon audit`.
pub async fn run(records: &Records, args: AuditArgs) -> anyhow::Result<()> {
    let since_ms = args.since;
    let found = records
        .store
        .audit(&AuditQuery {
            session: args.session,
            tool: args.tool,
            since_ms,
            kind: args.kind,
            after_id: None,
            limit: Some(args.limit),
            requested_by: args.asked_by,
            decided_by: args.decided_by,
        })
        .await?;
    for record in &found {
        if args.json {
            print_json_line(&serde_json::to_string(record)?);
        } else {
            print_record(record);
        }
    }
    if found.is_empty() && !args.json {
        outln!("No records match.");
    }
    Ok(())
}

/// `--since` read when the command line is, so a bad one is a usage error like any other.
fn since_arg(text: &str) -> Result<i64, String> {
    cordon_serve::parse_since(text, now_ms())
}

/// A record's time for people; one past what RFC 3339 can write (year 9999) shows as its
/// milliseconds rather than failing.
fn time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0).unsigned_abs());
    let mut text = String::new();
    match write!(text, "{}", humantime::format_rfc3339_seconds(at)) {
        Ok(()) => text,
        Err(_) => format!("{ms} ms since 1970"),
    }
}

fn print_record(stored: &StoredAudit) {
    let r = &stored.record;
    match &r.entry {
        AuditEntry::ToolCall(call) => {
            let place = match (&call.session, &call.call_id) {
                (Some(s), Some(c)) => format!("{s}/{c}"),
                (Some(s), None) => s.clone(),
                _ => "-".to_string(),
            };
            let place = match &call.client {
                Some(client) => format!("{place} ({client})"),
                None => place,
            };
            let outcome = match &call.outcome {
                CallOutcome::Ok => "ok".to_string(),
                CallOutcome::Error { kind, message } => format!("{kind}: {message}"),
                CallOutcome::NotRun { reason } => format!("not run: {reason}"),
            };
            let measured = call
                .report
                .as_ref()
                .map(|rep| {
                    format!(
                        "  {:.1} ms  {}",
                        rep.duration_ms,
                        format_bytes(rep.peak_memory)
                    )
                })
                .unwrap_or_default();
            outln!(
                "{}  {:<5}  {place}  {}.{}  {} by {}  {outcome}{measured}",
                time(r.at_ms),
                r.origin,
                call.plugin,
                call.tool,
                call.decision,
                call.decided_by,
            );
            if let Some(who) = &call.requested_by {
                outln!("    asked for by {who}");
            }
            if let Some(rep) = &call.report {
                for refused in &rep.refused {
                    outln!("    refused: {refused}");
                }
                if rep.refusals_dropped > 0 {
                    outln!("    refused {} more", rep.refusals_dropped);
                }
            }
        }
        AuditEntry::HomeChange(change) => {
            outln!(
                "{}  {:<5}  {} {} by {}{}",
                time(r.at_ms),
                r.origin,
                change.action,
                change.plugin,
                change.by,
                if change.details.is_empty() {
                    String::new()
                } else {
                    format!(": {}", change.details.join("; "))
                }
            );
        }
    }
}

/// Records a change to the home made at the terminal.
pub async fn home_change(
    store: &Store,
    action: &str,
    plugin: &str,
    digest: &str,
    details: Vec<String>,
) -> anyhow::Result<()> {
    let record = AuditRecord {
        at_ms: now_ms(),
        origin: "cli".to_string(),
        entry: AuditEntry::HomeChange(HomeChangeAudit {
            action: action.to_string(),
            plugin: plugin.to_string(),
            digest: digest.to_string(),
            details,
            by: local_user(),
        }),
    };
    store.append_audit(&record).await.map_err(|e| {
        anyhow::anyhow!("the change was made, but the audit log did not record it: {e}")
    })
}

/// The record of a `cordon call` of `tool` with `arguments`.
pub fn direct_call(
    records: &Records,
    tool: &ToolEntry,
    arguments: &Value,
    outcome: CallOutcome,
    report: Option<CallReport>,
) -> AuditRecord {
    AuditRecord {
        at_ms: now_ms(),
        origin: "call".to_string(),
        entry: AuditEntry::ToolCall(Box::new(ToolCallAudit {
            session: None,
            turn: None,
            call_id: None,
            client: None,
            requested_by: None,
            tool: tool.descriptor.name.clone(),
            plugin: tool.plugin.clone(),
            digest: tool.digest.clone(),
            arguments_sha256: arguments_sha256(arguments),
            arguments: records.keep_arguments.then(|| arguments.clone()),
            grants: tool.grants.iter().map(|g| g.to_string()).collect(),
            decision: "direct".to_string(),
            decided_by: format!("{} at the terminal (cordon call)", local_user()),
            policy_rule: None,
            policy_digest: None,
            labels: Vec::new(),
            outcome,
            report,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_stored_time_prints() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(-5), "1970-01-01T00:00:00Z");
        assert_eq!(time(i64::MAX), format!("{} ms since 1970", i64::MAX));
    }
}
