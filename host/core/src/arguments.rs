//! Checking a tool call's arguments against the tool's input schema.
//!
//! The home (before a sandboxed call) and the agent (before a call is approved or run) both
//! check arguments; they share this checker so a violation reads the same wherever it is
//! reported: the JSON pointer of the offending value, then what is wrong with it.

use serde_json::Value;

/// A tool's input schema, compiled once and used for every call of the tool.
pub struct InputSchema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputSchema").finish_non_exhaustive()
    }
}

/// A schema that is not a valid JSON Schema; the text says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaError(pub String);

/// Arguments that do not match an input schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .violations.join("; "))]
pub struct ArgumentError {
    violations: Vec<String>,
}

impl ArgumentError {
    /// One line per violation, in the validator's order: `at /pointer: what is wrong`, or
    /// only what is wrong when it concerns the arguments as a whole.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl InputSchema {
    /// Compiles a schema.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        jsonschema::validator_for(schema)
            .map(|validator| Self { validator })
            .map_err(|e| SchemaError(e.to_string()))
    }

    /// Checks arguments against the schema, listing every violation.
    pub fn check(&self, arguments: &Value) -> Result<(), ArgumentError> {
        let violations: Vec<String> = self
            .validator
            .iter_errors(arguments)
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
            Err(ArgumentError { violations })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> InputSchema {
        InputSchema::compile(&json!({
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
        let e = InputSchema::compile(&json!({"type": 7})).unwrap_err();
        assert!(!e.0.is_empty());
    }
}
