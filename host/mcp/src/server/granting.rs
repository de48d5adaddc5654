//! Grant requests over MCP (see [`cordon_agent::grant_requests`] for what decides): a call its
//! sandbox refused something a grant would allow is put to the client's user (a form), or to
//! whoever answers `cordon approve` and the console for clients that cannot ask; granted, it
//! runs again with the grant and that is its result.
//!
//! A session here is what holds labels (a stdio connection; over HTTP, a token and client
//! name): its grants given for the session and refused for good are kept with them. One call
//! makes at most one request, and a session at most
//! [`MAX_PER_SESSION`](cordon_agent::grant_requests::MAX_PER_SESSION).

use cordon_agent::grant_requests::{Applying, GrantRequest, GrantSpan, MAX_MINUTES, reason};
use cordon_agent::{
    ApprovalAnswer, ApprovalRequest, Content, GivenAnswer, ToolFailure, ToolFailureKind,
};
use cordon_core::{AuditEntry, AuditRecord, HomeChangeAudit, now_ms};
use rmcp::RoleServer;
use rmcp::service::RequestContext;

use super::{Approved, CallFacts, Holding, McpServer, outcome_of};
use crate::asking::{can_elicit_form, question_form};
use crate::catalog::Catalog;

/// A call's failure with what its sandbox refused and which grants would have allowed it.
pub(super) struct Refusal {
    pub(super) failure: ToolFailure,
    /// The grants the sandbox's report names (not yet checked).
    pub(super) wanted: Vec<String>,
    /// What it refused, one line each.
    pub(super) refused: Vec<String>,
}

impl McpServer {
    /// Puts `refusal` to a person as a grant request when one may be made, and returns the
    /// call's result: the refusal (with why nobody was asked, or who did not grant), or what
    /// the call returned when run again with what was given (audited as it ends).
    pub(super) async fn grant_request(
        &self,
        catalog: &Catalog,
        facts: &CallFacts<'_>,
        held: &Holding,
        context: &RequestContext<RoleServer>,
        refusal: Refusal,
    ) -> Result<Vec<Content>, ToolFailure> {
        let Refusal {
            mut failure,
            wanted,
            refused,
        } = refusal;
        let spec = facts.spec;
        let offered = catalog.host.requestable(&spec.name, &wanted);
        let to = Applying {
            plugin: &spec.plugin,
            digest: &spec.digest,
            requester: None,
            now_ms: now_ms(),
        };
        let (askable, blocked) = {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            let askable = held.grants.askable(to, &offered);
            // `spec` already holds the session's grants (see `call`).
            let widened = spec.widened(&askable);
            let blocked =
                if cordon_core::rule_of_two(&held.labels, &spec.identity(), &widened.exposure)
                    .is_some()
                {
                    Some(
                        "this session holds private data and untrusted content, and the grant \
                         would let the tool send data out (Rule of Two)"
                            .to_string(),
                    )
                } else {
                    held.grants.limit_reached(0)
                };
            if blocked.is_none() && !askable.is_empty() {
                held.grants.asked += 1;
            }
            (askable, blocked)
        };
        if askable.is_empty() {
            return Err(failure);
        }
        let grants = askable.join(", ");
        if let Some(why) = blocked {
            failure
                .message
                .push_str(&format!(" (Nobody was asked to grant {grants}: {why}.)"));
            return Err(failure);
        }
        let request = GrantRequest {
            grants: askable.clone(),
            refused,
            result: String::new(),
        };
        let question = ApprovalRequest {
            call_id: facts.call_id.clone(),
            tool: spec.tool.clone(),
            plugin: spec.plugin.clone(),
            arguments: facts.arguments.clone(),
            grants: spec.grants.clone(),
            reason: reason(&spec.tool, &request),
            rule_of_two: false,
            requested_grants: askable.clone(),
        };
        let given = self.ask_grant(&question, facts, context).await;
        // A person may take minutes to answer while other calls of the session add labels:
        // the Rule of Two is checked again as the grant would now be used.
        let now_sends = {
            let held = held.lock().unwrap_or_else(|e| e.into_inner());
            cordon_core::rule_of_two(
                &held.labels,
                &spec.identity(),
                &spec.widened(&askable).exposure,
            )
        };
        if now_sends.is_some() && given.answer.as_str() != "no" && given.answer.as_str() != "never"
        {
            failure.message.push_str(&format!(
                " (Not granted: while the question waited, this session came to hold private data \
                 and untrusted content, and {grants} would let the tool send data out.)"
            ));
            return Err(failure);
        }
        let span = match given.answer {
            ApprovalAnswer::Yes => GrantSpan::Call,
            ApprovalAnswer::Always => GrantSpan::Session,
            ApprovalAnswer::For { minutes } => GrantSpan::Minutes(minutes.clamp(1, MAX_MINUTES)),
            ApprovalAnswer::Forever => GrantSpan::Forever,
            ApprovalAnswer::Never => {
                let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
                held.grants.refuse(&spec.plugin, &askable);
                failure.message.push_str(&format!(
                    " ({} did not grant {grants}, and will not be asked again in this session.)",
                    given.by
                ));
                return Err(failure);
            }
            ApprovalAnswer::No => {
                failure
                    .message
                    .push_str(&format!(" ({} did not grant {grants}.)", given.by));
                return Err(failure);
            }
            ApprovalAnswer::Refused { reason } => {
                failure
                    .message
                    .push_str(&format!(" (Nobody granted {grants}: {reason}.)"));
                return Err(failure);
            }
        };
        let mut details: Vec<String> = askable
            .iter()
            .map(|g| {
                format!(
                    "+ {g} {} (grant request of call {})",
                    span.describe(),
                    facts.call_id
                )
            })
            .collect();
        let lasting = match span {
            GrantSpan::Minutes(m) => Some(Some(m)),
            GrantSpan::Forever => Some(None),
            GrantSpan::Call | GrantSpan::Session => None,
        };
        let mut in_lock = lasting.is_some();
        if let Some(minutes) = lasting
            && let Err(e) = catalog
                .host
                .grant_for(&spec.name, &askable, minutes, &given.by)
                .await
        {
            in_lock = false;
            tracing::warn!("grants given {} were not recorded: {e}", span.describe());
            details = vec![format!(
                "not recorded: {grants} {} ({e}); given to this session only (grant request of \
                 call {})",
                span.describe(),
                facts.call_id
            )];
        }
        self.host
            .audit(AuditRecord {
                at_ms: now_ms(),
                origin: self.host.options.origin.clone(),
                entry: AuditEntry::HomeChange(HomeChangeAudit {
                    action: "grant".to_string(),
                    plugin: spec.plugin.clone(),
                    digest: spec.digest.clone(),
                    details,
                    by: given.by.clone(),
                }),
            })
            .await;
        // Beyond this call: kept for the session too, as a host that does not reload the lock
        // at once still applies it to the plugin's next calls until its end.
        let mut grants_now = {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            let until = match span {
                GrantSpan::Call => None,
                GrantSpan::Session | GrantSpan::Forever => Some(None),
                GrantSpan::Minutes(m) => {
                    Some(Some(given.at_ms.saturating_add((m * 60_000) as i64)))
                }
            };
            if let Some(until) = until {
                held.grants
                    .give(to, &askable, &given.by, given.at_ms, until, in_lock);
            }
            held.grants.of(to)
        };
        for g in &askable {
            if !grants_now.contains(g) {
                grants_now.push(g.clone());
            }
        }
        let (result, report) = self
            .host
            .calls
            .call(
                &catalog.host,
                &spec.name,
                facts.arguments.clone(),
                &grants_now,
                context.ct.clone(),
            )
            .await;
        let withheld = self
            .saw(
                held,
                &spec.identity(),
                &spec.widened(&grants_now).exposure,
                context,
            )
            .await
            .err();
        let approved = Approved {
            decision: given.answer.as_str().to_string(),
            by: format!("{}, to a grant request for {grants}", given.by),
        };
        self.host
            .audit(self.record(facts, &approved, outcome_of(&result), report))
            .await;
        match withheld {
            Some(why) => Err(ToolFailure::new(ToolFailureKind::Failed, why)),
            None => result,
        }
    }

    /// Asks the client's user (a form) or, for a client that cannot show one, whoever answers
    /// `cordon approve` and the console.
    async fn ask_grant(
        &self,
        question: &ApprovalRequest,
        facts: &CallFacts<'_>,
        context: &RequestContext<RoleServer>,
    ) -> GivenAnswer {
        let timeout = self.host.options.approval_timeout;
        // A client on 2026-07-28 has no session to send a form over while its call waits
        // (its questions go back in an `InputRequiredResult`, which asks before a call runs).
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        if modern || !can_elicit_form(context.client_capabilities().as_ref()) {
            return self
                .host
                .approver
                .ask(question, facts.client, facts.token, timeout, &context.ct)
                .await;
        }
        crate::asking::elicit(context, question_form(question, ""), facts.client, timeout).await
    }
}
