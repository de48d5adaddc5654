//! Who decides whether a tool call runs: the user's policy, then the tool's real capabilities.
//!
//! A plugin's `read_only` hint is never consulted: a tool runs without asking only when the
//! host says its effective grants cannot change anything (or the user said so). `deny` from the
//! config always wins.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::tools::ToolSpec;

/// What to do with a call to a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Ask the user before each call.
    Ask,
    /// Run without asking.
    Auto,
    /// Never run; the model is told the call was refused.
    Deny,
}

/// Policy rules from `cordon.toml`:
///
/// ```toml
/// [approval.tools]
/// sql_query = "auto"
/// [approval.plugins]
/// files = "ask"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Rules by tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, Policy>,
    /// Rules by plugin name.
    #[serde(default)]
    pub plugins: BTreeMap<String, Policy>,
}

/// A user's answer to an approval question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// Run this call.
    Yes,
    /// Do not run this call; the model is told the user declined.
    No,
    /// Run this call and every later call of this tool in the conversation.
    Always,
    /// Refuse this call and every later call of this tool in the conversation.
    Never,
}

/// A decision with the reason shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The policy that applies.
    pub policy: Policy,
    /// Why, in words.
    pub reason: String,
}

/// Decides the policy for a tool: config `deny` (tool or plugin) wins; then the user's answers
/// in this conversation (`always`/`never`); then config rules (tool before plugin); then the
/// default — `ask` for tools that declare themselves destructive, `auto` for tools whose
/// effective capabilities cannot change anything, `ask` for everything else.
pub fn decide(
    config: &ApprovalConfig,
    session: &BTreeMap<String, Policy>,
    spec: &ToolSpec,
) -> Decision {
    let tool_rule = config.tools.get(&spec.name).copied();
    let plugin_rule = config.plugins.get(&spec.plugin).copied();
    if tool_rule == Some(Policy::Deny) {
        return Decision {
            policy: Policy::Deny,
            reason: format!("cordon.toml denies the tool `{}`", spec.name),
        };
    }
    if plugin_rule == Some(Policy::Deny) {
        return Decision {
            policy: Policy::Deny,
            reason: format!("cordon.toml denies the plugin `{}`", spec.plugin),
        };
    }
    if let Some(p) = session.get(&spec.name) {
        let reason = match p {
            Policy::Deny => "you answered `never` for this tool in this conversation",
            Policy::Auto => "you answered `always` for this tool in this conversation",
            Policy::Ask => "you asked to be asked for this tool",
        };
        return Decision {
            policy: *p,
            reason: reason.to_string(),
        };
    }
    if let Some(p) = tool_rule {
        return Decision {
            policy: p,
            reason: format!(
                "cordon.toml sets `{}` for the tool `{}`",
                name(p),
                spec.name
            ),
        };
    }
    if let Some(p) = plugin_rule {
        return Decision {
            policy: p,
            reason: format!(
                "cordon.toml sets `{}` for the plugin `{}`",
                name(p),
                spec.plugin
            ),
        };
    }
    if spec.hints.destructive {
        return Decision {
            policy: Policy::Ask,
            reason: "the tool declares itself destructive".to_string(),
        };
    }
    if spec.can_change_anything {
        Decision {
            policy: Policy::Ask,
            reason: "its grants allow changing something (a writable path, a network host or environment)".to_string(),
        }
    } else {
        Decision {
            policy: Policy::Auto,
            reason: "its grants cannot change anything".to_string(),
        }
    }
}

fn name(p: Policy) -> &'static str {
    match p {
        Policy::Ask => "ask",
        Policy::Auto => "auto",
        Policy::Deny => "deny",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolHints;

    fn spec(
        name: &str,
        plugin: &str,
        can_change: bool,
        read_only_hint: bool,
        destructive: bool,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            hints: ToolHints {
                read_only: read_only_hint,
                destructive,
                ..ToolHints::default()
            },
            plugin: plugin.into(),
            grants: vec![],
            can_change_anything: can_change,
        }
    }

    #[test]
    fn defaults_follow_capabilities_not_hints() {
        let c = ApprovalConfig::default();
        let s = BTreeMap::new();
        assert_eq!(
            decide(&c, &s, &spec("a", "p", false, false, false)).policy,
            Policy::Auto
        );
        // A tool that claims to be read-only but can write is still asked about.
        assert_eq!(
            decide(&c, &s, &spec("a", "p", true, true, false)).policy,
            Policy::Ask
        );
        // Destructive is always ask by default, even with harmless grants.
        assert_eq!(
            decide(&c, &s, &spec("a", "p", false, true, true)).policy,
            Policy::Ask
        );
    }

    #[test]
    fn deny_wins_and_rules_apply_in_order() {
        let mut c = ApprovalConfig::default();
        c.tools.insert("a".into(), Policy::Auto);
        c.plugins.insert("p".into(), Policy::Deny);
        let mut s = BTreeMap::new();
        s.insert("a".to_string(), Policy::Auto);
        assert_eq!(
            decide(&c, &s, &spec("a", "p", true, false, false)).policy,
            Policy::Deny
        );
        c.plugins.insert("p".into(), Policy::Ask);
        assert_eq!(
            decide(&c, &BTreeMap::new(), &spec("a", "p", true, false, true)).policy,
            Policy::Auto
        );
        assert_eq!(
            decide(&c, &BTreeMap::new(), &spec("b", "p", false, false, false)).policy,
            Policy::Ask
        );
        s.insert("b".to_string(), Policy::Deny);
        assert_eq!(
            decide(&c, &s, &spec("b", "p", false, false, false)).policy,
            Policy::Deny
        );
        c.tools.insert("b".into(), Policy::Deny);
        s.insert("b".to_string(), Policy::Auto);
        assert_eq!(
            decide(&c, &s, &spec("b", "p", false, false, false)).policy,
            Policy::Deny
        );
    }
}
