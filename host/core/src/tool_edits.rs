//! What the person installing a plugin says of its tools, over what the component says itself.
//!
//! Components built by the usual toolchains (cargo-component, componentize-py, jco) arrive
//! without their WIT doc comments, so every typed-export tool would be described to the model
//! by a placeholder. The installer may write the descriptions, parameter descriptions and hints
//! (a sidecar file or `--describe`), and hide tools a model should not see. The edits are kept
//! in the lock file beside the grants — where only the host writes — and applied every time the
//! plugin's tools are listed, so what a model is told is what the person saw at install.
//!
//! Precedence, for each tool:
//! 1. A hidden tool is not offered at all: not listed, not callable.
//! 2. The installer's description replaces the component's; a parameter description is set in
//!    the input schema, over any the component wrote.
//! 3. Each hint the installer gives replaces the component's claim; hints not given stay.
//!    Hints are claims either way: [`crate::ProvenHints`] still derives what clients see from
//!    the grants.
//! 4. Everything else (name, schemas) stays the component's own, pinned by the lock's
//!    tool-list hash.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::tool::{MAX_DESCRIPTION_BYTES, ToolDescriptor};

/// The installer's edits of one plugin's tools (see the module doc for their precedence).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolEdits {
    /// Tools not offered, by the component's name for them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub hide: BTreeSet<String>,
    /// Text and hints by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolText>,
}

/// What the installer wrote for one tool. Absent fields leave the component's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolText {
    /// What the tool does, written for a language model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Descriptions of its parameters, by parameter name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    /// The tool only reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool may delete or overwrite data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Repeating a call has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// The tool talks to things outside the granted paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

/// Why edits do not fit the tools they are meant for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolEditError {
    /// The edits name a tool the component does not offer.
    #[error("there is no tool `{tool}` to {action}; the component's tools are: {available}")]
    UnknownTool {
        /// The name as written.
        tool: String,
        /// `hide` or `describe`.
        action: &'static str,
        /// The component's tool names, comma-separated.
        available: String,
    },
    /// A parameter description names a parameter the tool's schema does not have.
    #[error(
        "tool `{tool}` has no parameter `{param}` to describe; its parameters are: {available}"
    )]
    UnknownParam {
        /// The tool.
        tool: String,
        /// The parameter as written.
        param: String,
        /// The schema's property names, comma-separated (or "none").
        available: String,
    },
    /// A description is empty or longer than a model should be sent on every request.
    #[error(
        "the description of {what} is {reason}; write one of 1 to {MAX_DESCRIPTION_BYTES} bytes"
    )]
    BadDescription {
        /// `tool `x`` or `parameter `p` of `x``.
        what: String,
        /// `empty` or `N bytes long`.
        reason: String,
    },
}

impl ToolEdits {
    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.hide.is_empty() && self.tools.is_empty()
    }

    /// Checks the edits against the component's own tools: every name they use must be one of
    /// its tools (and parameters), every description of a size a model can be sent.
    pub fn check(&self, tools: &[ToolDescriptor]) -> Result<(), ToolEditError> {
        let available = || {
            tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let find = |name: &str, action| {
            tools
                .iter()
                .find(|t| t.name == name)
                .ok_or_else(|| ToolEditError::UnknownTool {
                    tool: name.to_string(),
                    action,
                    available: available(),
                })
        };
        for name in &self.hide {
            find(name, "hide")?;
        }
        for (name, text) in &self.tools {
            let tool = find(name, "describe")?;
            if let Some(d) = &text.description {
                check_description(d, || format!("tool `{name}`"))?;
            }
            let properties = tool
                .input_schema
                .get("properties")
                .and_then(|p| p.as_object());
            for (param, d) in &text.params {
                if !properties.is_some_and(|p| p.contains_key(param)) {
                    let names: Vec<&str> = properties
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    return Err(ToolEditError::UnknownParam {
                        tool: name.clone(),
                        param: param.clone(),
                        available: if names.is_empty() {
                            "none".into()
                        } else {
                            names.join(", ")
                        },
                    });
                }
                check_description(d, || format!("parameter `{param}` of `{name}`"))?;
            }
        }
        Ok(())
    }

    /// The tools as offered: `tools` (the component's list) with the edits applied. Edits
    /// naming tools that are not there are ignored, so edits kept across an upgrade never stop
    /// a plugin from loading; [`ToolEdits::check`] refuses them when they are written.
    pub fn apply(&self, tools: Vec<ToolDescriptor>) -> Vec<ToolDescriptor> {
        if self.is_empty() {
            return tools;
        }
        tools
            .into_iter()
            .filter(|t| !self.hide.contains(&t.name))
            .map(|mut t| {
                if let Some(text) = self.tools.get(&t.name) {
                    text.apply_to(&mut t);
                }
                t
            })
            .collect()
    }

    /// The edits that still name tools of `tools`: what an upgrade keeps.
    pub fn kept_for(&self, tools: &[ToolDescriptor]) -> ToolEdits {
        let known = |name: &String| tools.iter().any(|t| &t.name == name);
        ToolEdits {
            hide: self.hide.iter().filter(|n| known(n)).cloned().collect(),
            tools: self
                .tools
                .iter()
                .filter(|(n, _)| known(n))
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect(),
        }
    }

    /// These edits with `later` over them: its hidden tools added, its text replacing this
    /// one's tool by tool.
    pub fn merged_with(mut self, later: ToolEdits) -> ToolEdits {
        self.hide.extend(later.hide);
        self.tools.extend(later.tools);
        self
    }
}

impl ToolText {
    fn apply_to(&self, tool: &mut ToolDescriptor) {
        if let Some(d) = &self.description {
            tool.description = d.clone();
        }
        if let Some(properties) = tool
            .input_schema
            .get_mut("properties")
            .and_then(|p| p.as_object_mut())
        {
            for (param, d) in &self.params {
                if let Some(serde_json::Value::Object(schema)) = properties.get_mut(param) {
                    schema.insert("description".into(), d.clone().into());
                }
            }
        }
        let hints = &mut tool.hints;
        for (given, hint) in [
            (self.read_only, &mut hints.read_only),
            (self.destructive, &mut hints.destructive),
            (self.idempotent, &mut hints.idempotent),
            (self.open_world, &mut hints.open_world),
        ] {
            if let Some(v) = given {
                *hint = v;
            }
        }
    }
}

fn check_description(text: &str, what: impl Fn() -> String) -> Result<(), ToolEditError> {
    let reason = if text.trim().is_empty() {
        "empty".to_string()
    } else if text.len() > MAX_DESCRIPTION_BYTES {
        format!("{} bytes long", text.len())
    } else {
        return Ok(());
    };
    Err(ToolEditError::BadDescription {
        what: what(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolHints;
    use serde_json::json;

    fn tool(name: &str) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            description: format!("Calls `{name}` of the component"),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            hints: ToolHints::default(),
            output_schema: None,
        }
    }

    #[test]
    fn hides_describes_and_hints_in_that_order() {
        let edits: ToolEdits = serde_json::from_value(json!({
            "hide": ["exports_init"],
            "tools": {"read_file": {
                "description": "Reads a UTF-8 file.",
                "params": {"path": "Absolute path of the file"},
                "read_only": true
            }}
        }))
        .unwrap();
        let tools = vec![tool("read_file"), tool("exports_init"), tool("other")];
        edits.check(&tools).unwrap();
        let shown = edits.apply(tools);
        let names: Vec<&str> = shown.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["read_file", "other"]);
        assert_eq!(shown[0].description, "Reads a UTF-8 file.");
        assert_eq!(
            shown[0].input_schema["properties"]["path"]["description"],
            "Absolute path of the file"
        );
        assert!(shown[0].hints.read_only);
        assert!(!shown[0].hints.destructive, "hints not given stay");
        assert_eq!(shown[1], tool("other"));
    }

    #[test]
    fn names_that_do_not_fit_are_refused_with_what_there_is() {
        let tools = vec![tool("read_file")];
        let hide = ToolEdits {
            hide: ["reed_file".to_string()].into(),
            ..Default::default()
        };
        let e = hide.check(&tools).unwrap_err().to_string();
        assert!(e.contains("`reed_file`") && e.contains("read_file"), "{e}");
        let mut text = ToolText::default();
        text.params.insert("file".into(), "the file".into());
        let param = ToolEdits {
            tools: [("read_file".to_string(), text)].into(),
            ..Default::default()
        };
        let e = param.check(&tools).unwrap_err().to_string();
        assert!(e.contains("`file`") && e.contains("path"), "{e}");
        let long = ToolEdits {
            tools: [(
                "read_file".to_string(),
                ToolText {
                    description: Some("x".repeat(MAX_DESCRIPTION_BYTES + 1)),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        assert!(matches!(
            long.check(&tools),
            Err(ToolEditError::BadDescription { .. })
        ));
        // Applied to tools that no longer have those names (after an upgrade), nothing breaks.
        assert_eq!(long.apply(vec![tool("other")]), vec![tool("other")]);
        assert!(long.kept_for(&[tool("other")]).is_empty());
    }

    #[test]
    fn later_edits_win_tool_by_tool() {
        let a = ToolEdits {
            hide: ["x".to_string()].into(),
            tools: [(
                "t".to_string(),
                ToolText {
                    description: Some("old".into()),
                    ..Default::default()
                },
            )]
            .into(),
        };
        let b = ToolEdits {
            hide: ["y".to_string()].into(),
            tools: [(
                "t".to_string(),
                ToolText {
                    description: Some("new".into()),
                    ..Default::default()
                },
            )]
            .into(),
        };
        let m = a.merged_with(b);
        assert_eq!(m.hide.len(), 2);
        assert_eq!(m.tools["t"].description.as_deref(), Some("new"));
    }
}
