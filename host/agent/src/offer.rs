//! What the model is shown of a tool: its name, its description and a compact form of its
//! input schema. Every token of it is sent with every request, and on a small local model each
//! costs prompt-processing time, so the schema the model sees keeps what tells it which
//! arguments to write and drops the rest. Calls are still checked against the full schema, and
//! a refusal quotes it.
//!
//! What the compact schema leaves out, in this order:
//!
//! 1. Annotations that do not change which arguments are valid: `$schema`, `$id`, `$comment`,
//!    `title`, `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`, and a `format`
//!    naming a machine number type (`uint32`, `double`, …: schema generators add these; the
//!    `type` says it all). A tool's defaults belong in its descriptions.
//! 2. `additionalProperties: false`: the model is told the properties there are.
//! 3. `null` as an alternative: `["integer", "null"]` is `integer`, and an `anyOf` member
//!    `{"type": "null"}` goes (one member left is put in place of the `anyOf`). Leaving an
//!    optional argument out is how a model says nothing.
//! 4. Descriptions below an object's properties (of array items, of `anyOf` members, of
//!    values of a map): the property's own description says what it takes.
//! 5. An `anyOf` whose members (after the above) each say only a type is written as one
//!    `type` list: `{"anyOf": [{"type": "integer"}, {"type": "string"}]}` is
//!    `{"type": ["integer", "string"]}`, which accepts the same values. (A `oneOf` is left as
//!    it is: `integer` and `number` both match `1`, which `oneOf` then refuses.) In a type
//!    list, `integer` goes when `number` is there: every integer is a number.
//!
//! Everything else stays: `type`, `properties`, `required`, `enum`, `const`, `items`, bounds,
//! patterns, and a `$ref` with its `$defs`.

use serde_json::{Map, Value, json};

use crate::tools::ToolSpec;

/// The tool as OpenAI's `tools` array (and the Hermes `<tools>` list) carries it.
pub fn function(tool: &ToolSpec) -> Value {
    json!({"type": "function", "function": {
        "name": tool.name,
        "description": tool.description,
        "parameters": parameters(&tool.input_schema),
    }})
}

/// The compact form of an input schema (see the module docs).
pub fn parameters(schema: &Value) -> Value {
    compact(schema, true)
}

const ANNOTATIONS: [&str; 10] = [
    "$schema",
    "$id",
    "$comment",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "additionalProperties",
];

const NUMBER_FORMATS: [&str; 12] = [
    "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float",
    "double", "int",
];

/// `described`: whether this node keeps its description (a schema's top and its properties).
fn compact(node: &Value, described: bool) -> Value {
    let Value::Object(map) = node else {
        return node.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            // A schema (not `false`) for the values of a map says what they are.
            "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), compact(value, false));
            }
            k if ANNOTATIONS.contains(&k) => {}
            "format" if value.as_str().is_some_and(|f| NUMBER_FORMATS.contains(&f)) => {}
            "description" if !described => {}
            "type" => {
                out.insert(key.clone(), without_integer(without_null(value)));
            }
            "anyOf" | "oneOf" => {
                let members: Vec<Value> = value
                    .as_array()
                    .map(|m| {
                        m.iter()
                            .filter(|m| !is_null(m))
                            .map(|m| compact(m, false))
                            .collect()
                    })
                    .unwrap_or_default();
                match <[Value; 1]>::try_from(members) {
                    Ok([only]) => {
                        if let Value::Object(only) = only {
                            for (k, v) in only {
                                out.entry(k).or_insert(v);
                            }
                        }
                    }
                    Err(members) => match only_types(&members) {
                        Some(types) if key == "anyOf" && !map.contains_key("type") => {
                            out.insert("type".to_string(), without_integer(Value::Array(types)));
                        }
                        _ => {
                            out.insert(key.clone(), Value::Array(members));
                        }
                    },
                }
            }
            "properties" | "$defs" | "definitions" | "patternProperties" => {
                let fields = value
                    .as_object()
                    .map(|f| {
                        f.iter()
                            .map(|(name, schema)| {
                                (name.clone(), compact(schema, key == "properties"))
                            })
                            .collect::<Map<String, Value>>()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(fields));
            }
            "items" | "not" | "if" | "then" | "else" | "contains" => {
                out.insert(key.clone(), compact(value, false));
            }
            "allOf" | "prefixItems" => {
                let members = value
                    .as_array()
                    .map(|m| m.iter().map(|m| compact(m, false)).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Array(members));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// The types of `members` when each is `{"type": T}` and nothing else, T one type.
fn only_types(members: &[Value]) -> Option<Vec<Value>> {
    members
        .iter()
        .map(|m| match m.as_object() {
            Some(m) if m.len() == 1 => m.get("type").filter(|t| t.is_string()).cloned(),
            _ => None,
        })
        .collect()
}

fn is_null(schema: &Value) -> bool {
    schema.get("type") == Some(&json!("null")) && schema.as_object().is_some_and(|m| m.len() <= 2)
}

/// A type list without `integer` when it has `number` (rule 5).
fn without_integer(types: Value) -> Value {
    match types {
        Value::Array(list) if list.iter().any(|t| t == "number") => {
            let kept: Vec<Value> = list.into_iter().filter(|t| t != "integer").collect();
            match <[Value; 1]>::try_from(kept) {
                Ok([only]) => only,
                Err(kept) => Value::Array(kept),
            }
        }
        other => other,
    }
}

/// `["integer", "null"]` as `"integer"`; other types as they are.
fn without_null(types: &Value) -> Value {
    let Some(list) = types.as_array() else {
        return types.clone();
    };
    let kept: Vec<&Value> = list.iter().filter(|t| *t != "null").collect();
    match kept.as_slice() {
        [only] => (*only).clone(),
        [] => types.clone(),
        _ => Value::Array(kept.into_iter().cloned().collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_does_not_change_valid_arguments_goes_and_the_rest_stays() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "type": "object",
            "additionalProperties": false,
            "required": ["sql"],
            "properties": {
                "sql": {"type": "string", "description": "One statement.", "minLength": 1},
                "max_rows": {"type": ["integer", "null"], "format": "uint32", "minimum": 1,
                             "default": 200, "description": "At most this many rows."},
                "when": {"type": "string", "format": "date-time"},
                "mode": {"enum": ["a", "b"], "description": "Which."},
                "params": {
                    "description": "Values for placeholders.",
                    "anyOf": [
                        {"type": "array", "description": "In order.",
                         "items": {"anyOf": [{"type": "null", "description": "SQL NULL."},
                                             {"type": "integer", "description": "An integer."},
                                             {"type": "string", "description": "Text."}],
                                   "description": "One value."}},
                        {"type": "object", "description": "By name.",
                         "additionalProperties": {"type": "string", "description": "A value."}},
                        {"type": "null"}
                    ]
                },
                "only": {"anyOf": [{"type": "string", "description": "A name."}, {"type": "null"}]}
            }
        });
        assert_eq!(
            parameters(&schema),
            json!({
                "type": "object",
                "required": ["sql"],
                "properties": {
                    "sql": {"type": "string", "description": "One statement.", "minLength": 1},
                    "max_rows": {"type": "integer", "minimum": 1,
                                 "description": "At most this many rows."},
                    "when": {"type": "string", "format": "date-time"},
                    "mode": {"enum": ["a", "b"], "description": "Which."},
                    "params": {
                        "description": "Values for placeholders.",
                        "anyOf": [
                            {"type": "array", "items": {"type": ["integer", "string"]}},
                            {"type": "object", "additionalProperties": {"type": "string"}}
                        ]
                    },
                    "only": {"type": "string"}
                }
            })
        );
    }

    /// Rule 5: only an `anyOf` of bare types becomes a type list.
    #[test]
    fn an_any_of_bare_types_is_a_type_list() {
        let scalar = json!({"anyOf": [{"type": "boolean"}, {"type": "integer"},
                                      {"type": "string", "description": "Text."}]});
        assert_eq!(
            parameters(&scalar),
            json!({"type": ["boolean", "integer", "string"]})
        );
        // Every integer is a number.
        let numbers = json!({"anyOf": [{"type": "integer"}, {"type": "number"}]});
        assert_eq!(parameters(&numbers), json!({"type": "number"}));
        assert_eq!(
            parameters(&json!({"type": ["integer", "number", "string"]})),
            json!({"type": ["number", "string"]})
        );
        for kept in [
            json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
            json!({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]}),
            json!({"anyOf": [{"type": "integer"}, {"type": ["string", "boolean"]}]}),
        ] {
            assert_eq!(parameters(&kept), kept);
        }
    }

    #[test]
    fn a_schema_without_annotations_is_unchanged() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"]});
        assert_eq!(parameters(&schema), schema);
        assert_eq!(parameters(&json!(true)), json!(true));
    }
}
