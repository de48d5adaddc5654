//! The JSON Schema of a WIT type, as [`super::json`] converts values of it.
//!
//! The mapping, chosen so that every value has exactly one JSON form and a model can write it:
//! integers are JSON integers bounded by their width; floats are numbers (NaN and infinities
//! have no JSON form); `char` is a one-character string; a `record` is an object of its fields
//! (an `option` field may be left out); a `tuple` and a `list` are arrays; an `enum` case and a
//! `variant` case without a value are the case's name; a `variant` case with a value is
//! `{"case": value}`; `option<T>` is `null` or the value, except when the value itself can be
//! `null` (`option<option<T>>`), where it is `{"some": value}`; `result<T, E>` is
//! `{"ok": value}` or `{"err": value}` (`null` without a value); `flags` are an array of the
//! names set; a `map` with string keys is an object, any other an array of `[key, value]`
//! pairs. Resources, futures, streams and error contexts are handles into a running instance
//! and have no JSON form: a function using them is not offered as a tool.

use serde_json::{Value, json};
use wasmtime::component::types::Type;

/// Why a type has no JSON form.
pub(crate) fn unsupported(ty: &Type) -> Option<String> {
    match ty {
        Type::Own(_) | Type::Borrow(_) => Some(
            "it passes a resource (`own` or `borrow`), a handle into the running instance that \
             JSON cannot carry"
                .into(),
        ),
        Type::Future(_) => Some("it passes a `future`, which JSON cannot carry".into()),
        Type::Stream(_) => Some("it passes a `stream`, which JSON cannot carry".into()),
        Type::ErrorContext => Some("it passes an `error-context`, which JSON cannot carry".into()),
        Type::List(l) => unsupported(&l.ty()),
        Type::FixedLengthList(l) => unsupported(&l.ty()),
        Type::Map(m) => unsupported(&m.key()).or_else(|| unsupported(&m.value())),
        Type::Record(r) => r.fields().find_map(|f| unsupported(&f.ty)),
        Type::Tuple(t) => t.types().find_map(|t| unsupported(&t)),
        Type::Variant(v) => v.cases().find_map(|c| c.ty.as_ref().and_then(unsupported)),
        Type::Option(o) => unsupported(&o.ty()),
        Type::Result(r) => r
            .ok()
            .as_ref()
            .and_then(unsupported)
            .or_else(|| r.err().as_ref().and_then(unsupported)),
        _ => None,
    }
}

/// Whether `null` is one of the type's values (so an `option` of it needs `{"some": …}`).
pub(crate) fn takes_null(ty: &Type) -> bool {
    matches!(ty, Type::Option(_))
}

/// The schema of an object of named values (a function's parameters, a record's fields):
/// each is required unless it is an `option`.
pub(crate) fn object<'a>(fields: impl Iterator<Item = (&'a str, Type)>) -> Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        if !takes_null(&ty) {
            required.push(Value::from(name));
        }
        properties.insert(name.to_string(), schema(&ty));
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn integer(min: i128, max: i128) -> Value {
    // Every bound fits an i64 or a u64, which serde_json keeps exactly.
    let bound = |n: i128| match u64::try_from(n) {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(n as i64),
    };
    json!({"type": "integer", "minimum": bound(min), "maximum": bound(max)})
}

/// `{"name": value}` and nothing else.
fn tagged(name: &str, value: Value) -> Value {
    json!({
        "type": "object",
        "properties": {name: value},
        "required": [name],
        "additionalProperties": false,
    })
}

/// The schema of a value of `ty` (a type [`unsupported`] accepts).
pub(crate) fn schema(ty: &Type) -> Value {
    match ty {
        Type::Bool => json!({"type": "boolean"}),
        Type::S8 => integer(i8::MIN.into(), i8::MAX.into()),
        Type::U8 => integer(0, u8::MAX.into()),
        Type::S16 => integer(i16::MIN.into(), i16::MAX.into()),
        Type::U16 => integer(0, u16::MAX.into()),
        Type::S32 => integer(i32::MIN.into(), i32::MAX.into()),
        Type::U32 => integer(0, u32::MAX.into()),
        Type::S64 => integer(i64::MIN.into(), i64::MAX.into()),
        Type::U64 => integer(0, u64::MAX.into()),
        Type::Float32 => json!({
            "type": "number",
            "minimum": -f64::from(f32::MAX),
            "maximum": f64::from(f32::MAX),
        }),
        Type::Float64 => json!({"type": "number"}),
        Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
        Type::String => json!({"type": "string"}),
        Type::List(l) => json!({"type": "array", "items": schema(&l.ty())}),
        Type::FixedLengthList(l) => json!({
            "type": "array",
            "items": schema(&l.ty()),
            "minItems": l.len(),
            "maxItems": l.len(),
        }),
        Type::Map(m) if matches!(m.key(), Type::String) => {
            json!({"type": "object", "additionalProperties": schema(&m.value())})
        }
        Type::Map(m) => json!({
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [schema(&m.key()), schema(&m.value())],
                "minItems": 2,
                "maxItems": 2,
            },
        }),
        Type::Record(r) => object(r.fields().map(|f| (f.name, f.ty))),
        Type::Tuple(t) => {
            let items: Vec<Value> = t.types().map(|t| schema(&t)).collect();
            json!({
                "type": "array",
                "prefixItems": items,
                "minItems": items.len(),
                "maxItems": items.len(),
            })
        }
        Type::Variant(v) => {
            let cases: Vec<Value> = v
                .cases()
                .map(|c| match &c.ty {
                    None => json!({"const": c.name}),
                    Some(ty) => tagged(c.name, schema(ty)),
                })
                .collect();
            json!({"oneOf": cases})
        }
        Type::Enum(e) => json!({"type": "string", "enum": e.names().collect::<Vec<_>>()}),
        Type::Option(o) => {
            let inner = o.ty();
            let some = if takes_null(&inner) {
                tagged("some", schema(&inner))
            } else {
                schema(&inner)
            };
            json!({"anyOf": [{"type": "null"}, some]})
        }
        Type::Result(r) => {
            let side = |ty: Option<Type>| ty.map_or(json!({"type": "null"}), |t| schema(&t));
            json!({"oneOf": [tagged("ok", side(r.ok())), tagged("err", side(r.err()))]})
        }
        Type::Flags(f) => json!({
            "type": "array",
            "items": {"type": "string", "enum": f.names().collect::<Vec<_>>()},
            "uniqueItems": true,
        }),
        // Never reached: `unsupported` keeps these from becoming tools.
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            json!(false)
        }
    }
}
