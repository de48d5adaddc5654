//! JSON Schema generation for tool arguments.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// Builds the input schema for argument type `A`, shaped for a model to follow.
///
/// The schema is draft 2020-12 (what the host validates with), with every sub-schema
/// inlined: models follow a flat schema far more reliably than one full of `$ref`s. Doc
/// comments on fields (and on the types of fields) become `description`s. The argument
/// type's own `title` (its Rust name) and doc comment are dropped from the top level: the
/// tool's description is what tells the model what the tool is for, and a line such as
/// "Arguments of `greet`." sent beside it would only repeat or contradict it.
///
/// The schema is also tidied for models: wrapped doc-comment lines are joined into one line
/// per paragraph, `"default": null` and Rust-only formats (`uint32`, `double`, …) are
/// dropped, and nested `anyOf`s (from `Option<enum>`) are flattened.
///
/// Fails if the top level is not an object, because tool arguments always are.
pub fn input_schema<A: JsonSchema>() -> Result<Value, String> {
    let mut value = object_schema::<A>().map_err(|kind| {
        format!(
            "the argument type `{}` must be a struct with named fields (its schema must have \
             \"type\": \"object\"){kind}, because tool arguments are always a JSON object",
            std::any::type_name::<A>()
        )
    })?;
    if let Some(object) = value.as_object_mut() {
        object.remove("description");
        // An argument struct without fields still needs `properties` for some model APIs.
        object
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    Ok(value)
}

/// Builds the output schema of a tool whose results are values of type `O` (see
/// [`Plugin::structured_tool`](crate::Plugin::structured_tool)), as [`input_schema`] builds
/// an input schema, but keeping `O`'s doc comment as the top-level `description`: nothing else
/// tells a client what the result is.
///
/// Fails if the top level is not an object, because a structured result is one JSON object.
pub fn output_schema<O: JsonSchema>() -> Result<Value, String> {
    object_schema::<O>().map_err(|kind| {
        format!(
            "the result type `{}` must be a struct with named fields or a map (its schema must \
             have \"type\": \"object\"){kind}, because a structured result is one JSON object",
            std::any::type_name::<O>()
        )
    })
}

/// The tidied, inlined draft 2020-12 schema of `T` without its `title`; Err says what its top
/// level is instead of an object schema (empty when it is not even a JSON object).
fn object_schema<T: JsonSchema>() -> Result<Value, String> {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
    });
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    tidy(&mut value);
    let Some(object) = value.as_object_mut() else {
        return Err(String::new());
    };
    object.remove("title");
    match object.get("type") {
        Some(Value::String(t)) if t == "object" => Ok(value),
        Some(other) => Err(format!(", not {other}")),
        None => Err(String::new()),
    }
}

/// Rust integer and float formats schemars emits; not JSON Schema formats, and some model
/// APIs reject unknown formats.
const RUST_FORMATS: &[&str] = &[
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "uint", "int",
    "float", "double",
];

/// Joins hard-wrapped lines of a doc comment; blank lines still separate paragraphs.
fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|para| {
            para.split('\n')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn tidy(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(d)) = map.get_mut("description") {
                *d = unwrap_lines(d);
            }
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| RUST_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            if let Some(Value::Array(options)) = map.get_mut("anyOf") {
                let mut flat = Vec::with_capacity(options.len());
                for option in options.drain(..) {
                    match option {
                        // An option that is nothing but another anyOf (plus a description)
                        // contributes its own options.
                        Value::Object(inner)
                            if inner.contains_key("anyOf")
                                && inner.keys().all(|k| k == "anyOf" || k == "description") =>
                        {
                            if let Some(Value::Array(nested)) = inner.get("anyOf") {
                                flat.extend(nested.iter().cloned());
                            }
                        }
                        other => flat.push(other),
                    }
                }
                *options = flat;
            }
            for v in map.values_mut() {
                tidy(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}
