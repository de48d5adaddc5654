//! The per-call policy at the MCP door: the policy as cordon.toml says now, who asks, the
//! counters a call needs from the store, and what a call that runs leaves behind (a person's
//! approval, its counts).

use std::sync::{Arc, Mutex};

use cordon_agent::ToolSpec;
use cordon_core::now_ms;
use serde_json::Value;

use cordon_agent::cordon_policy::{CountQuery, CountScope, Policy, PolicyConfig, Reservation};
use cordon_agent::policy::Reread;

use super::{Approved, CallFacts, McpServer};
use crate::catalog::Catalog;

/// The policy last loaded from an edited `cordon.toml`, with the config and catalog it was
/// loaded for.
#[derive(Default)]
pub(super) struct Edited(Mutex<Option<EditedPolicy>>);
type EditedPolicy = (Arc<PolicyConfig>, Arc<Catalog>, Result<Arc<Policy>, String>);

/// What the calls of one tool count on, for one policy, session, caller and minute: the
/// store's queries, the keys a call is reserved on, and what a call that runs keeps when no
/// rule applied to it. The same for each of these calls, so made once: the keys are strings
/// built from all four, and making them cost a call about a microsecond.
#[derive(Debug)]
pub(super) struct Plan {
    policy: Arc<Policy>,
    identity: String,
    session: String,
    caller: (String, String),
    minute: i64,
    queries: Vec<CountQuery>,
    adds: Vec<Reservation>,
    /// [`Policy::tally`] with no rule applied.
    kept: Vec<String>,
}

impl Plan {
    /// The session and caller it was made for.
    fn scope(&self) -> CountScope<'_> {
        CountScope {
            session: &self.session,
            caller: (&self.caller.0, &self.caller.1),
        }
    }
}

/// A connection's latest [`Plan`]s, at most [`PLANS`], of one policy and minute.
#[derive(Default)]
pub(super) struct Plans(Mutex<Vec<Arc<Plan>>>);

/// How many tools' plans a connection keeps (those of its most recently planned tools).
const PLANS: usize = 16;

impl Plans {
    /// The plan of a call of `identity` by `scope` at `now_ms`, under `policy`.
    fn of(
        &self,
        policy: &Arc<Policy>,
        identity: &str,
        scope: CountScope<'_>,
        now_ms: i64,
    ) -> Arc<Plan> {
        let minute = now_ms.div_euclid(60_000);
        let mut plans = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let found = plans.iter().find(|p| {
            p.minute == minute
                && Arc::ptr_eq(&p.policy, policy)
                && p.identity == identity
                && p.session == scope.session
                && (p.caller.0.as_str(), p.caller.1.as_str()) == scope.caller
        });
        if let Some(plan) = found {
            return plan.clone();
        }
        let plan = Arc::new(Plan {
            policy: policy.clone(),
            identity: identity.to_string(),
            session: scope.session.to_string(),
            caller: (scope.caller.0.to_string(), scope.caller.1.to_string()),
            minute,
            queries: policy.counters_for(identity, scope, now_ms),
            adds: policy.reservable(identity, scope),
            kept: policy.tally(identity, &[], scope),
        });
        plans.retain(|p| p.minute == minute && Arc::ptr_eq(&p.policy, policy));
        if plans.len() >= PLANS {
            plans.remove(0);
        }
        plans.push(plan.clone());
        plan
    }
}

impl McpServer {
    /// The per-call policy for `catalog`'s tools as `cordon.toml` says now: the catalog's,
    /// or a new one when the file changed since (a broken one keeps the last that loaded).
    pub(super) fn policy(&self, catalog: &Arc<Catalog>) -> Result<Arc<Policy>, String> {
        let config = match cordon_agent::policy::reread(&self.host.options.policy) {
            Reread::Unchanged(_) => return catalog.policy.clone(),
            Reread::Changed(config) => config,
        };
        // Loading again, even from the cache of loaded policies, hashes the whole config and
        // every tool's schema: once for each edit and catalog, not on every call after it.
        let mut edited = self.host.edited.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, k, policy)) = edited.as_ref()
            && Arc::ptr_eq(c, &config)
            && Arc::ptr_eq(k, catalog)
        {
            return policy.clone();
        }
        let specs: Vec<ToolSpec> = catalog.offered.values().map(|o| o.spec.clone()).collect();
        let policy = cordon_agent::policy::load_or_last(&config, &specs);
        *edited = Some((config, catalog.clone(), policy.clone()));
        policy
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

    /// What the per-call policy says of a call, with the counters it needs from the store;
    /// the call is reserved on its counters at the same time, so that calls decided at once
    /// see each other ([`McpServer::ran`] keeps what it counts, [`McpServer::unreserve`]
    /// takes back a call that does not run).
    pub(super) async fn verdict(
        &self,
        policy: &Result<Arc<cordon_agent::cordon_policy::Policy>, String>,
        spec: &ToolSpec,
        widened: bool,
        arguments: &Value,
        caller: &cordon_agent::cordon_policy::Caller,
        labels: &cordon_core::SessionLabels,
    ) -> (Option<cordon_agent::cordon_policy::Verdict>, Reserved) {
        let now = now_ms();
        let mut reserved = Reserved {
            keys: Mutex::new(Vec::new()),
            minute: now.div_euclid(60_000),
            store: self.host.store.clone(),
            plan: None,
        };
        let policy = match policy {
            Ok(p) if p.is_empty() => return (None, reserved),
            Ok(p) => p,
            Err(e) => return (Some(cordon_agent::approval::broken_policy(e)), reserved),
        };
        let identity = spec.identity();
        let session = self.counting_session();
        let scope = CountScope {
            session: &session,
            caller: (&caller.token, &caller.user),
        };
        let plan = self.plans.of(policy, &identity, scope, now);
        let (queries, adds) = (&plan.queries, &plan.adds);
        let mut counts = Default::default();
        if let (Some(store), false) = (&self.host.store, queries.is_empty() && adds.is_empty()) {
            match store
                .reserve_calls(adds, queries, reserved.minute, None)
                .await
            {
                Ok(found) => {
                    *reserved.keys.get_mut().unwrap_or_else(|e| e.into_inner()) =
                        adds.iter().map(|a| a.key.clone()).collect();
                    counts = cordon_agent::cordon_policy::counts_of(queries, &found);
                }
                // Unknown counts must not let a call past a limit: the rules see the limit
                // reached.
                Err(e) => {
                    tracing::warn!(
                        "policy counters could not be read ({e}); counting them as full"
                    );
                    counts = cordon_agent::cordon_policy::counts_of(
                        queries,
                        &vec![u64::MAX; queries.len()],
                    );
                }
            }
        }
        reserved.plan = Some(plan.clone());
        let session = cordon_agent::cordon_policy::SessionFacts {
            approved: self
                .approved
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            labels: labels.names().into_iter().collect(),
        };
        let verdict = policy.decide(&cordon_agent::cordon_policy::Call {
            tool: &identity,
            args: arguments,
            caller,
            session: &session,
            counts: &counts,
            now_ms: now,
            // Rules on what the tool reaches decide by what this session's grants make it
            // reach.
            reach: widened.then_some(&spec.reach),
        });
        (Some(verdict), reserved)
    }

    /// A call that runs: remembers a person's approval and settles its counts: it keeps what
    /// its rules count of what was reserved for it, and what was not reserved (the policy
    /// changed meanwhile) is added.
    pub(super) async fn ran(
        &self,
        policy: &Result<Arc<cordon_agent::cordon_policy::Policy>, String>,
        facts: &CallFacts<'_>,
        approved: &Approved,
        caller: &cordon_agent::cordon_policy::Caller,
    ) {
        let identity = facts.spec.identity();
        // Settled here, whatever happens below: not taken back when the request ends.
        let reserved = facts.reserved.take();
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
        // Counted for the session and caller the call was reserved for.
        let planned = facts
            .reserved
            .plan
            .as_ref()
            .filter(|p| Arc::ptr_eq(&p.policy, policy));
        let session;
        let scope = match planned {
            Some(plan) => plan.scope(),
            None => {
                session = self.counting_session();
                CountScope {
                    session: &session,
                    caller: (&caller.token, &caller.user),
                }
            }
        };
        let tallied;
        let kept = match planned {
            Some(plan) if verdict.applied.is_empty() => &plan.kept,
            _ => {
                let applied: Vec<String> = verdict.applied.iter().map(|r| r.id.clone()).collect();
                tallied = policy.tally(&identity, &applied, scope);
                &tallied
            }
        };
        let (add, release) = cordon_agent::cordon_policy::settle(&reserved, kept);
        if !add.is_empty()
            && let Err(e) = store
                .add_calls(&add, now_ms().div_euclid(60_000), None)
                .await
        {
            tracing::warn!("policy counters could not be written: {e}");
        }
        if !release.is_empty() {
            self.release(store, &release, facts.reserved.minute).await;
        }
    }

    /// A call that does not run after all (refused, its arguments wrong, or its question
    /// sent to the client to be asked again): what was reserved for it is taken back.
    pub(super) async fn unreserve(&self, reserved: &Reserved) {
        let keys = reserved.take();
        if let (Some(store), false) = (&self.host.store, keys.is_empty()) {
            self.release(store, &keys, reserved.minute).await;
        }
    }

    /// A failure is only logged: it counts a call too many, never one too few.
    async fn release(&self, store: &cordon_store::Store, keys: &[String], minute: i64) {
        if let Err(e) = store.release_calls(keys, minute, None).await {
            tracing::warn!("policy counters reserved for a call that did not run stay: {e}");
        }
    }
}

/// The counters a call was reserved on before it was decided, at `minute` (empty when no
/// counter counts it, or the store could not be reached). Settled by [`McpServer::ran`] or
/// [`McpServer::unreserve`]; a request that ends otherwise (its client went away while a
/// person was asked) takes them back when it is dropped, so abandoned questions never use up
/// a limit.
#[derive(Debug)]
pub(super) struct Reserved {
    keys: Mutex<Vec<String>>,
    minute: i64,
    store: Option<cordon_store::Store>,
    /// What the call counted on, when it was counted.
    plan: Option<Arc<Plan>>,
}

impl Reserved {
    /// The keys not yet settled, leaving none.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.keys.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let keys = self.take();
        let (Some(store), false) = (self.store.clone(), keys.is_empty()) else {
            return;
        };
        let minute = self.minute;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.release_calls(&keys, minute, None).await {
                    tracing::warn!("policy counters reserved for a dropped call stay: {e}");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_agent::cordon_policy::{Reach, ToolFacts};

    /// A policy asking after 5 calls of `a.t` an hour, and per caller a day.
    fn policy() -> Arc<Policy> {
        let text = r#"
rules = [
  { id = "busy", tool = "a.t", calls = { of = "tool", within = "1h", at_least = 5 }, decision = "ask" },
  { id = "mine", tool = "a.t", calls = { of = "tool", within = "1d", per = "caller", at_least = 50 }, decision = "ask" },
  { id = "here", tool = "a.t", calls = { of = "tool", within = "session", at_least = 500 }, decision = "ask" },
]
"#;
        let config: PolicyConfig = toml::from_str(text).unwrap();
        let tool = ToolFacts {
            plugin: "a".into(),
            tool: "t".into(),
            input_schema: serde_json::json!({"type": "object"}),
            reach: Reach::default(),
        };
        Arc::new(Policy::load(&config, &[tool]).unwrap())
    }

    fn scope<'a>(session: &'a str, token: &'a str) -> CountScope<'a> {
        CountScope {
            session,
            caller: (token, ""),
        }
    }

    const NOON: i64 = 1_780_000_000_000 / 60_000 * 60_000;

    #[test]
    fn a_plan_is_made_once_per_policy_tool_session_caller_and_minute() {
        let plans = Plans::default();
        let p = policy();
        let first = plans.of(&p, "a.t", scope("s1", "ci"), NOON);
        assert_eq!(
            first.queries,
            p.counters_for("a.t", scope("s1", "ci"), NOON)
        );
        assert_eq!(first.adds, p.reservable("a.t", scope("s1", "ci")));
        assert_eq!(first.kept, p.tally("a.t", &[], scope("s1", "ci")));
        // The same minute, later: the same plan.
        let again = plans.of(&p, "a.t", scope("s1", "ci"), NOON + 59_999);
        assert!(Arc::ptr_eq(&first, &again));
        // Anything its keys or windows are made of: a plan of its own, as made afresh.
        let other_policy = policy();
        for (policy, session, token, at) in [
            (&p, "s1", "ci", NOON + 60_000),
            (&p, "s2", "ci", NOON),
            (&p, "s1", "bot", NOON),
            (&other_policy, "s1", "ci", NOON),
        ] {
            let plans = Plans::default();
            let first = plans.of(&p, "a.t", scope("s1", "ci"), NOON);
            let plan = plans.of(policy, "a.t", scope(session, token), at);
            assert!(!Arc::ptr_eq(&plan, &first), "{session} {token} {at}");
            assert_eq!(
                plan.queries,
                policy.counters_for("a.t", scope(session, token), at)
            );
            assert_eq!(plan.adds, policy.reservable("a.t", scope(session, token)));
        }
    }

    #[test]
    fn a_connection_keeps_the_plans_of_one_policy_and_minute_and_at_most_sixteen() {
        let plans = Plans::default();
        let p = policy();
        for i in 0..40 {
            plans.of(&p, &format!("a.t{i}"), scope("s1", "ci"), NOON);
        }
        assert_eq!(plans.0.lock().unwrap().len(), PLANS);
        plans.of(&p, "a.t", scope("s1", "ci"), NOON + 60_000);
        assert_eq!(
            plans.0.lock().unwrap().len(),
            1,
            "the last minute's are let go"
        );
        plans.of(&policy(), "a.t", scope("s1", "ci"), NOON + 60_000);
        assert_eq!(
            plans.0.lock().unwrap().len(),
            1,
            "the last policy's are let go"
        );
    }
}
