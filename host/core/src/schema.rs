//! Checking JSON against a tool's schemas: a call's arguments against its input schema, and a
//! result against its output schema.
//!
//! The home (before a sandboxed call, and on its result) and the agent (before a call is
//! approved or run) both check; they share this checker so a violation reads the same wherever
//! it is reported: the JSON pointer of the offending value, then what is wrong with it.

use serde_json::Value;

/// A tool's input or output schema, compiled once and used for every call of the tool.
pub struct CompiledSchema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema").finish_non_exhaustive()
    }
}

/// A schema that is not a valid JSON Schema; the text says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaError(pub String);

/// A value (arguments, a result) that does not match a schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .violations.join("; "))]
pub struct SchemaViolations {
    violations: Vec<String>,
}

impl SchemaViolations {
    /// One line per violation, in the validator's order: `at /pointer: what is wrong`, or
    /// only what is wrong when it concerns the value as a whole.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl CompiledSchema {
    /// Compiles a schema.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        jsonschema::validator_for(schema)
            .map(|validator| Self { validator })
            .map_err(|e| SchemaError(e.to_string()))
    }

    /// Checks a value against the schema, listing every violation.
    pub fn check(&self, value: &Value) -> Result<(), SchemaViolations> {
        let violations: Vec<String> = self
            .validator
            .iter_errors(value)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(SchemaViolations { violations })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> CompiledSchema {
        CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["q"]
        }))
        .unwrap()
    }

    #[test]
    fn valid_arguments_pass() {
        schema().check(&json!({"q": "rows", "n": 3})).unwrap();
    }

    #[test]
    fn violations_name_the_offending_value_by_json_pointer() {
        let e = schema().check(&json!({"q": 7, "n": "x"})).unwrap_err();
        assert_eq!(e.violations().len(), 2, "{e}");
        assert!(e.violations().iter().all(|v| v.starts_with("at /")), "{e}");
        assert!(
            e.violations().iter().any(|v| v.starts_with("at /q: ")),
            "{e}"
        );
        assert_eq!(e.to_string(), e.violations().join("; "));
    }

    #[test]
    fn a_violation_of_the_whole_value_has_no_pointer() {
        let e = schema().check(&json!({})).unwrap_err();
        assert_eq!(e.violations().len(), 1);
        assert!(!e.violations()[0].starts_with("at "), "{e}");
        assert!(e.to_string().contains("\"q\""), "{e}");
    }

    #[test]
    fn invalid_schemas_do_not_compile() {
        let e = CompiledSchema::compile(&json!({"type": 7})).unwrap_err();
        assert!(!e.0.is_empty());
    }
}
