//! Cordon's policy engine: decides each tool call from its arguments, its caller, the session
//! so far, what the tool's grants reach and the time, on top of the grant-derived default.
//!
//! Rules are written one per line in `cordon.toml` (`[policy] rules`) or as Cedar policies in
//! files beside it; both become one Cedar policy set, validated against a schema derived from
//! the installed tools (each tool an action, its arguments `context.input`), so a rule naming a
//! tool or argument that does not exist is refused at load with "did you mean".
//!
//! A `cordon.toml` rule is also compiled for the host (`native.rs`), which evaluates it in
//! nanoseconds where Cedar's authorizer takes microseconds; so are `when` conditions and Cedar
//! files' policies written in the common subset of Cedar (`subset.rs`). Cedar evaluates the
//! rest. The two forms are compared on every example at load.
//!
//! How a call is decided, in order of precedence:
//!
//! 1. Every rule whose scope and conditions hold for the call **applies**. A rule that cannot
//!    be evaluated for the call (an argument of an unexpected type) counts as applying when it
//!    denies or asks, and never when it allows.
//! 2. The **strictest** decision of the rules that apply wins: `deny` over `ask` over `allow`.
//!    On equal strictness the rule written first is the one named.
//! 3. When no rule applies, the policy has nothing to say and the host's grant-derived default
//!    decides (see `cordon-agent`'s approval, which also places the user's `always`/`never`
//!    answers around these decisions).
//!
//! A decision never widens what a tool can reach: `allow` only skips the question; the sandbox
//! still enforces the tool's grants.

mod by_caller;
mod by_count;
mod call;
mod compile;
mod config;
mod context;
mod counts;
mod decide;
mod engine;
mod error;
mod examples;
mod native;
mod schema;
mod subset;

pub use call::{Call, Caller, SessionFacts, normalise};
pub use config::{
    CallCount, ConfigSource, CounterSpec, Decision, Example, Names, PolicyConfig, Rule,
};
pub use counts::{
    CountQuery, CountScope, Counts, Reservation, Window, counts_of, places_ahead, settle,
};
pub use engine::{Policy, RuleRef, Verdict};
pub use error::PolicyError;
pub use schema::{Reach, ToolFacts};

#[cfg(test)]
mod tests;
