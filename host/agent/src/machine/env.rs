//! What the machine needs besides the conversation: the tool catalog and the turn limits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ToolCatalog;
use crate::config::RetryConfig;

/// What the machine needs besides the conversation.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    /// The tools of the turn and the user's approval rules.
    pub catalog: &'a ToolCatalog,
    /// How far the turn may go.
    pub limits: &'a TurnLimits,
    /// What per-call policy rules read besides the call and the conversation.
    pub inputs: &'a CallInputs,
}

/// No caller, no counts, the epoch: for machines driven without a per-call policy (tests).
pub static NO_INPUTS: CallInputs = CallInputs {
    caller: cordon_policy::Caller {
        origin: String::new(),
        token: String::new(),
        user: String::new(),
        client: String::new(),
    },
    counts: BTreeMap::new(),
    keys: BTreeMap::new(),
    session: String::new(),
    now_ms: 0,
};

/// What per-call policy rules read that the machine cannot know by itself: who asks, the
/// counters of earlier calls (which the driver asked the store for), and the time. Recorded
/// decisions are never made again, so a resumed turn does not depend on these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallInputs {
    /// Who asks (origin, token, user, client).
    pub caller: cordon_policy::Caller,
    /// Counter values by tool (`plugin.tool`), then by counter name.
    pub counts: BTreeMap<String, cordon_policy::Counts>,
    /// The store key of each counter in `counts`, by tool then counter name: what tells which
    /// counters an earlier call of the same answer adds to.
    pub keys: BTreeMap<String, BTreeMap<std::sync::Arc<str>, std::sync::Arc<str>>>,
    /// The session that `within = "session"` counters key on.
    pub session: String,
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: i64,
}

impl CallInputs {
    /// These inputs with `earlier` added to the counters: the store keys that calls decided
    /// earlier in the same model answer will add to, and how often.
    pub(super) fn with_earlier(&self, earlier: &BTreeMap<String, u64>) -> CallInputs {
        let mut inputs = self.clone();
        for (tool, names) in &self.keys {
            for (name, key) in names {
                if let Some(n) = earlier.get(&**key) {
                    let counts = inputs.counts.entry(tool.clone()).or_default();
                    let count = counts.get(name).unwrap_or(0).saturating_add(*n);
                    counts.insert(name.clone(), count);
                }
            }
        }
        inputs
    }
}

/// The limits of one turn that the machine enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnLimits {
    /// Model answers with tools per turn before the final-answer pass.
    pub max_iterations: u32,
    /// Times the same call may be requested in a turn before the loop stops.
    pub max_repeats: u32,
    /// Retry policy for transient failures.
    pub retry: RetryConfig,
    /// Calls of a batch that run at once; the others wait (`queued`) and each is marked
    /// started in the transition that gives it a place, so a host taking the session up knows
    /// which never started. 0 starts no more (the driver's host is stopping).
    #[serde(default = "parallel_tools")]
    pub max_parallel_tools: usize,
}

fn parallel_tools() -> usize {
    4
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            max_iterations: 8,
            max_repeats: 2,
            retry: RetryConfig::default(),
            max_parallel_tools: parallel_tools(),
        }
    }
}
