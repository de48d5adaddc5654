//! What the machine needs besides the conversation: the tool catalog and the turn limits.

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
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            max_iterations: 8,
            max_repeats: 2,
            retry: RetryConfig::default(),
        }
    }
}
