//! Tool vocabulary, mirroring the `cordon:tool/types` interface of `wit/tool.wit`.
//!
//! The runtime converts the component's values into these types once, so nothing above the
//! runtime ever deals with WIT bindings or JSON-as-text.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Behaviour hints; the author's claims, shown to users and models but never used alone to
/// decide approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolHints {
    /// The tool only reads.
    pub read_only: bool,
    /// The tool may delete or overwrite data.
    pub destructive: bool,
    /// Repeating a call has no further effect.
    pub idempotent: bool,
    /// The tool talks to things outside the granted paths.
    pub open_world: bool,
}

/// One tool a plugin offers, with its input schema already parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// Unique within the plugin.
    pub name: String,
    /// What the tool does, written for a language model.
    pub description: String,
    /// JSON Schema the arguments must satisfy.
    pub input_schema: serde_json::Value,
    /// Behaviour hints.
    pub hints: ToolHints,
    /// JSON Schema of the tool's result, for a tool that returns one JSON object (WIT 0.1.3
    /// `tool-outputs`): its every successful result holds exactly one JSON piece, an object the
    /// schema accepts. `None` for tools without one, and for every plugin built before 0.1.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
}

/// Longest tool name accepted, in bytes (what chat APIs accept for a function name).
pub const MAX_TOOL_NAME_BYTES: usize = 64;
/// Longest tool description accepted, in bytes. Descriptions are author text sent to the model
/// with every request; a few paragraphs are plenty, megabytes are a prompt-injection payload
/// and a cost on every turn.
pub const MAX_DESCRIPTION_BYTES: usize = 4 << 10;
/// Largest input schema accepted, in bytes of compact JSON; also sent with every request.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;

impl ToolDescriptor {
    /// Checks the size of what the model and clients will read of this tool on every request:
    /// its description, input schema and output schema (see [`MAX_DESCRIPTION_BYTES`],
    /// [`MAX_SCHEMA_BYTES`]).
    pub fn check_sizes(&self) -> Result<(), String> {
        let description = self.description.len();
        if description > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "the description of tool `{}` is {} long; at most {} is accepted, since it is \
                 sent to the model with every request",
                self.name,
                crate::format_bytes_rounded(description as u64),
                crate::format_bytes(MAX_DESCRIPTION_BYTES as u64)
            ));
        }
        let schema = self.input_schema.to_string().len();
        if schema > MAX_SCHEMA_BYTES {
            return Err(format!(
                "the input schema of tool `{}` is {} long as JSON; at most {} is accepted, since \
                 it is sent to the model with every request",
                self.name,
                crate::format_bytes_rounded(schema as u64),
                crate::format_bytes(MAX_SCHEMA_BYTES as u64)
            ));
        }
        let output = self
            .output_schema
            .as_ref()
            .map_or(0, |s| s.to_string().len());
        if output > MAX_SCHEMA_BYTES {
            return Err(format!(
                "the output schema of tool `{}` is {} long as JSON; at most {} is accepted, \
                 since it is sent to clients with every tool list",
                self.name,
                crate::format_bytes_rounded(output as u64),
                crate::format_bytes(MAX_SCHEMA_BYTES as u64)
            ));
        }
        Ok(())
    }

    /// Checks the name rule of the WIT contract (lowercase letters, digits and `_`, starting with
    /// a letter), because names end up in model prompts and in `plugin.tool` references.
    pub fn check_name(name: &str) -> Result<(), String> {
        let mut chars = name.chars();
        let ok = matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if ok && name.len() > MAX_TOOL_NAME_BYTES {
            Err(format!(
                "tool name `{}…` is {} bytes long; at most {MAX_TOOL_NAME_BYTES} are accepted",
                &name[..MAX_TOOL_NAME_BYTES],
                name.len()
            ))
        } else if ok {
            Ok(())
        } else {
            Err(format!(
                "tool name `{name}` is invalid: use lowercase letters, digits and `_`, starting with a letter"
            ))
        }
    }
}

/// One piece of a tool's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Content {
    /// Plain text.
    Text(String),
    /// A parsed JSON document.
    Json(serde_json::Value),
    /// Text or a JSON document the plugin wrote as it went, held in a file rather than in
    /// memory (see [`Written`]). Never serialised: it is read in parts by whoever takes it.
    #[serde(skip)]
    Written(crate::Written),
}

impl Content {
    /// The size this piece counts for against the output limit (its text, or its JSON text).
    pub fn size(&self) -> usize {
        match self {
            Content::Text(t) => t.len(),
            Content::Json(v) => v.to_string().len(),
            Content::Written(w) => usize::try_from(w.len()).unwrap_or(usize::MAX),
        }
    }

    /// The piece in memory: a written piece read whole (see [`Written::to_text`]), as text, or
    /// as JSON when it is a JSON document. For callers that hold whole results anyway.
    pub fn in_memory(self) -> std::io::Result<Content> {
        match self {
            Content::Written(w) => {
                let text = w.to_text()?;
                Ok(if w.is_json() {
                    match serde_json::from_str(&text) {
                        Ok(v) => Content::Json(v),
                        Err(_) => Content::Text(text),
                    }
                } else {
                    Content::Text(text)
                })
            }
            other => Ok(other),
        }
    }
}

/// Why a tool call failed, as the plugin classified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// The arguments did not fit the tool.
    InvalidArguments,
    /// Something named in the arguments does not exist.
    NotFound,
    /// The plugin was not allowed to do it.
    Denied,
    /// Anything else.
    Failed,
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ToolErrorKind::InvalidArguments => "invalid arguments",
            ToolErrorKind::NotFound => "not found",
            ToolErrorKind::Denied => "denied",
            ToolErrorKind::Failed => "failed",
        })
    }
}

/// An error a tool returned; the message is meant for the user and the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolError {
    /// The class of failure.
    pub kind: ToolErrorKind,
    /// What went wrong and what to do instead.
    pub message: String,
}

/// Writes `v` as canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace.
/// Written out here rather than relying on serde_json's map order, which changes when any crate
/// in the build enables its `preserve_order` feature.
pub(crate) fn canonical_json(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A digest of a tool list (names, descriptions, schemas and hints, in the given order) as
/// `sha256:<hex>`. The home records it at install time; a plugin whose list later hashes
/// differently has changed what it tells the model ("rug pull") and is refused.
///
/// An output schema counts only when there is one, so the hash of a tool without one is what
/// it was before output schemas existed and lock files written then stay valid.
pub fn tools_hash(tools: &[ToolDescriptor]) -> String {
    let list: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            let mut entry = serde_json::json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "hints": {
                    "read_only": t.hints.read_only,
                    "destructive": t.hints.destructive,
                    "idempotent": t.hints.idempotent,
                    "open_world": t.hints.open_world,
                },
            });
            if let Some(schema) = &t.output_schema {
                entry["output_schema"] = schema.clone();
            }
            entry
        })
        .collect();
    let mut text = String::new();
    canonical_json(&serde_json::Value::Array(list), &mut text);
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(description: usize, schema_padding: usize) -> ToolDescriptor {
        ToolDescriptor {
            name: "t".into(),
            description: "d".repeat(description),
            input_schema: serde_json::json!({"type": "object", "description": "p".repeat(schema_padding)}),
            hints: ToolHints::default(),
            output_schema: None,
        }
    }

    #[test]
    fn author_text_is_capped_where_the_model_reads_it() {
        sized(MAX_DESCRIPTION_BYTES, 0).check_sizes().unwrap();
        let e = sized(MAX_DESCRIPTION_BYTES + 1, 0)
            .check_sizes()
            .unwrap_err();
        assert!(
            e.contains("description of tool `t`") && e.contains("at most 4KiB"),
            "{e}"
        );
        let e = sized(4 << 20, 0).check_sizes().unwrap_err();
        assert!(e.contains("is 4MiB long"), "{e}");
        // The schema counts as compact JSON text: 40 bytes of wrapping around the padding.
        sized(0, MAX_SCHEMA_BYTES - 100).check_sizes().unwrap();
        let e = sized(0, MAX_SCHEMA_BYTES).check_sizes().unwrap_err();
        assert!(
            e.contains("input schema of tool `t`") && e.contains("at most 64KiB"),
            "{e}"
        );
    }

    #[test]
    fn tool_names_are_short() {
        ToolDescriptor::check_name(&"a".repeat(MAX_TOOL_NAME_BYTES)).unwrap();
        let e = ToolDescriptor::check_name(&"a".repeat(MAX_TOOL_NAME_BYTES + 1)).unwrap_err();
        assert!(e.contains("65 bytes long"), "{e}");
    }
    use serde_json::json;

    fn tool(name: &str, schema: serde_json::Value) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            description: "d".into(),
            input_schema: schema,
            hints: ToolHints::default(),
            output_schema: None,
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = tool(
            "read",
            json!({"type":"object","properties":{"b":{},"a":{}}}),
        );
        let h = tools_hash(std::slice::from_ref(&a));
        assert!(h.starts_with("sha256:") && h.len() == 7 + 64, "{h}");
        // Key order in the schema does not matter.
        let a2 = tool(
            "read",
            serde_json::from_str(r#"{"properties":{"a":{},"b":{}},"type":"object"}"#).unwrap(),
        );
        assert_eq!(tools_hash(&[a2]), h);
        // Every field matters.
        let mut b = a.clone();
        b.description = "other".into();
        assert_ne!(tools_hash(&[b]), h);
        let mut b = a.clone();
        b.hints.destructive = true;
        assert_ne!(tools_hash(&[b]), h);
        let b = tool("read", json!({"type":"object"}));
        assert_ne!(tools_hash(&[b]), h);
        let b = tool("reads", a.input_schema.clone());
        assert_ne!(tools_hash(&[b]), h);
        assert_ne!(tools_hash(&[]), h);
        let mut b = a.clone();
        b.output_schema = Some(json!({"type": "object"}));
        let with_output = tools_hash(&[b.clone()]);
        assert_ne!(with_output, h);
        b.output_schema = Some(json!({"type": "object", "required": ["n"]}));
        assert_ne!(tools_hash(&[b]), with_output);
    }

    #[test]
    fn hashes_of_tools_without_output_schemas_did_not_change() {
        // Recorded before output schemas existed: lock files of that time must still verify.
        let t = tool("read", json!({"type": "object"}));
        assert_eq!(
            tools_hash(&[t]),
            "sha256:e934256be514b059385150bfe01a4dc6b2bdf5f6926df7305afbe2e625d3fd33"
        );
    }

    #[test]
    fn output_schemas_are_capped_and_optional_in_json() {
        let mut t = sized(0, 0);
        let text = serde_json::to_string(&t).unwrap();
        assert!(!text.contains("output_schema"), "{text}");
        t.output_schema =
            Some(json!({"type": "object", "description": "p".repeat(MAX_SCHEMA_BYTES)}));
        let e = t.check_sizes().unwrap_err();
        assert!(e.contains("output schema of tool `t`"), "{e}");
        let back: ToolDescriptor =
            serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn canonical_json_sorts_nested_keys() {
        let mut s = String::new();
        canonical_json(&json!({"z":[{"y":1,"x":"\"q"}],"a":null}), &mut s);
        assert_eq!(s, r#"{"a":null,"z":[{"x":"\"q","y":1}]}"#);
    }

    #[test]
    fn names_and_content() {
        assert!(ToolDescriptor::check_name("read_file2").is_ok());
        for bad in ["", "Read", "2x", "a-b", "a.b", "_x"] {
            assert!(ToolDescriptor::check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(Content::Json(json!({"a":1})).size(), 7);
        assert_eq!(
            serde_json::to_value(Content::Text("hi".into())).unwrap(),
            json!({"type":"text","value":"hi"})
        );
        let e = ToolError {
            kind: ToolErrorKind::NotFound,
            message: "no file `x`".into(),
        };
        assert_eq!(e.to_string(), "not found: no file `x`");
    }
}

/// What Cordon can state about a tool's behaviour from the grants it runs under (which its
/// ceiling has already bounded), as opposed to the author's [`ToolHints`], which are claims: a
/// claim may only make a hint stricter (`destructive`, for a tool that can change something),
/// or be kept where the grants back it (`idempotent` for a tool that cannot change anything). Clients that show or act on hints
/// (MCP annotations) get these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenHints {
    /// Its grants cannot change anything: no read-write directory, no network, no variable.
    pub read_only: bool,
    /// It may delete or overwrite: it can change something, and the author says so or it
    /// holds a read-write directory. A tool whose grants cannot change anything is never
    /// destructive whatever its author claims: clients that see both `readOnlyHint` and
    /// `destructiveHint` cannot tell which to believe.
    pub destructive: bool,
    /// Repeating a call has no further effect: the author says so and it cannot change
    /// anything.
    pub idempotent: bool,
    /// It can reach the world beyond its directories: it holds a network grant.
    pub open_world: bool,
}

impl ProvenHints {
    /// The hints `grants` prove, with the author's `declared` ones used only where they are
    /// stricter or backed by the grants.
    pub fn derive(grants: &crate::Grants, declared: &ToolHints) -> Self {
        use crate::{FsMode, Grant};
        let read_only = !grants.can_change_anything();
        ProvenHints {
            read_only,
            destructive: !read_only
                && (declared.destructive || grants.fs().any(|f| f.mode == FsMode::ReadWrite)),
            idempotent: declared.idempotent && read_only,
            open_world: grants
                .iter()
                .any(|g| matches!(g, Grant::Http(..) | Grant::Tcp(..))),
        }
    }
}

#[cfg(test)]
mod proven_hints_tests {
    use super::*;
    use crate::{Grant, Grants};

    fn grants(list: &[&str]) -> Grants {
        let mut g = Grants::default();
        for text in list {
            g.add(text.parse::<Grant>().unwrap());
        }
        g
    }

    #[test]
    fn claims_never_loosen_what_the_grants_prove() {
        let claims_everything = ToolHints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        };
        // A read-write directory: not read-only, destructive, not idempotent, whatever it says.
        let rw = ProvenHints::derive(&grants(&["fs:/tmp:/data:rw"]), &claims_everything);
        assert_eq!(
            rw,
            ProvenHints {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: false
            }
        );
        // A network grant: open world, and not read-only (it can send).
        let net = ProvenHints::derive(&grants(&["net:https://example.com"]), &claims_everything);
        assert!(net.open_world && !net.read_only && !net.idempotent && !net.destructive);
        let tcp = ProvenHints::derive(
            &grants(&["net:tcp://127.0.0.1:5432"]),
            &ToolHints::default(),
        );
        assert!(tcp.open_world);
        // A variable may hold a credential: not read-only, but not open world either.
        let env = ProvenHints::derive(&grants(&["env:HOME"]), &ToolHints::default());
        assert!(!env.read_only && !env.open_world);
    }

    #[test]
    fn read_only_grants_keep_the_claims_they_back() {
        let ro = grants(&["fs:/tmp:/data:ro"]);
        let idempotent = ToolHints {
            idempotent: true,
            ..ToolHints::default()
        };
        let h = ProvenHints::derive(&ro, &idempotent);
        assert!(h.read_only && h.idempotent && !h.destructive && !h.open_world);
        // An author calling its own tool destructive is believed where the grants allow
        // changing something; under read-only grants it cannot be, and is not called so.
        let destructive = ToolHints {
            destructive: true,
            ..ToolHints::default()
        };
        let h = ProvenHints::derive(&ro, &destructive);
        assert!(h.read_only && !h.destructive, "{h:?}");
        let env = ProvenHints::derive(&grants(&["env:HOME"]), &destructive);
        assert!(!env.read_only && env.destructive, "{env:?}");
        // No grants at all: read-only, not idempotent unless claimed.
        let none = ProvenHints::derive(&Grants::default(), &ToolHints::default());
        assert!(none.read_only && !none.idempotent);
    }
}
