//! The per-call policy at the MCP door: the policy as cordon.toml says now, who asks, the
//! counters a call needs from the store, and what a call that runs leaves behind (a person's
//! approval, its counts).

use std::collections::BTreeMap;
use std::sync::Arc;

use cordon_agent::ToolSpec;
use cordon_core::now_ms;
use serde_json::Value;

use super::{Approved, CallFacts, McpServer};
use crate::catalog::Catalog;

impl McpServer {
    /// The per-call policy for `catalog`'s tools as `cordon.toml` says now: the catalog's,
    /// or a new one when the file changed since (a broken one keeps the last that loaded).
    pub(super) fn policy(
        &self,
        catalog: &Catalog,
    ) -> Result<Arc<cordon_agent::cordon_policy::Policy>, String> {
        match cordon_agent::policy::reread(&self.host.options.policy) {
            std::borrow::Cow::Borrowed(_) => catalog.policy.clone(),
            std::borrow::Cow::Owned(config) => {
                let specs: Vec<ToolSpec> =
                    catalog.offered.values().map(|o| o.spec.clone()).collect();
                cordon_agent::policy::load_or_last(&config, &specs)
            }
        }
    }

    /// Who asks, as policy rules see it.
    pub(super) fn caller(
        &self,
        client: &str,
        token: Option<&str>,
    ) -> cordon_agent::cordon_policy::Caller {
        cordon_agent::cordon_policy::Caller {
            origin: cordon_agent::driver::policy_origin(&self.host.options.origin).to_string(),
            token: token.unwrap_or_default().to_string(),
            user: String::new(),
            client: client.to_string(),
        }
    }

    /// What the per-call policy says of a call, with the counters it needs from the store.
    pub(super) async fn verdict(
        &self,
        policy: &Result<Arc<cordon_agent::cordon_policy::Policy>, String>,
        spec: &ToolSpec,
        widened: bool,
        arguments: &Value,
        caller: &cordon_agent::cordon_policy::Caller,
        labels: &cordon_core::SessionLabels,
    ) -> Option<cordon_agent::cordon_policy::Verdict> {
        let policy = match policy {
            Ok(p) if p.is_empty() => return None,
            Ok(p) => p,
            Err(e) => return Some(cordon_agent::approval::broken_policy(e)),
        };
        let identity = spec.identity();
        let now = now_ms();
        let scope = cordon_agent::cordon_policy::CountScope {
            session: &self.session,
            caller: (&caller.token, &caller.user),
        };
        let queries = policy.counters_for(&identity, scope, now);
        let mut counts = BTreeMap::new();
        if let (Some(store), false) = (&self.host.store, queries.is_empty()) {
            match store.count_calls(&queries, None).await {
                Ok(found) => {
                    for (q, n) in queries.into_iter().zip(found) {
                        counts.insert(q.name, n);
                    }
                }
                // Unknown counts must not let a call past a limit: the rules see the limit
                // reached.
                Err(e) => {
                    tracing::warn!(
                        "policy counters could not be read ({e}); counting them as full"
                    );
                    for q in queries {
                        counts.insert(q.name, u64::MAX);
                    }
                }
            }
        }
        let session = cordon_agent::cordon_policy::SessionFacts {
            approved: self
                .approved
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            labels: labels.names().into_iter().collect(),
        };
        Some(policy.decide(&cordon_agent::cordon_policy::Call {
            tool: &identity,
            args: arguments,
            caller,
            session: &session,
            counts: &counts,
            now_ms: now,
            // Rules on what the tool reaches decide by what this session's grants make it
            // reach.
            reach: widened.then_some(&spec.reach),
        }))
    }

    /// A call that runs: remembers a person's approval and adds it to the policy counters.
    pub(super) async fn ran(
        &self,
        policy: &Result<Arc<cordon_agent::cordon_policy::Policy>, String>,
        facts: &CallFacts<'_>,
        approved: &Approved,
        caller: &cordon_agent::cordon_policy::Caller,
    ) {
        let identity = facts.spec.identity();
        if approved.decision == "yes" || approved.decision == "always" {
            self.approved
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(identity.clone());
        }
        let (Ok(policy), Some(verdict), Some(store)) = (policy, &facts.verdict, &self.host.store)
        else {
            return;
        };
        let applied: Vec<String> = verdict.applied.iter().map(|r| r.id.clone()).collect();
        let scope = cordon_agent::cordon_policy::CountScope {
            session: &self.session,
            caller: (&caller.token, &caller.user),
        };
        let keys = policy.tally(&identity, &applied, scope);
        if !keys.is_empty()
            && let Err(e) = store
                .add_calls(&keys, now_ms().div_euclid(60_000), None)
                .await
        {
            tracing::warn!("policy counters could not be written: {e}");
        }
    }
}
