//! Values of WIT types to and from JSON, in the forms [`super::schema`] describes.

use serde_json::{Number, Value};
use wasmtime::component::Val;
use wasmtime::component::types::Type;

use super::schema::takes_null;

/// A JSON value that is not a value of the type at `path` (a JSON pointer into the arguments).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mismatch {
    pub path: String,
    pub problem: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "at {at}: {}", self.problem)
    }
}

/// Where in the JSON a conversion is, as JSON pointer segments.
#[derive(Default)]
pub(crate) struct Path(Vec<String>);

impl Path {
    fn at<T>(&mut self, segment: impl ToString, f: impl FnOnce(&mut Path) -> T) -> T {
        self.0
            .push(segment.to_string().replace('~', "~0").replace('/', "~1"));
        let out = f(self);
        self.0.pop();
        out
    }

    fn mismatch(&self, problem: impl Into<String>) -> Mismatch {
        Mismatch {
            path: self.0.iter().map(|s| format!("/{s}")).collect(),
            problem: problem.into(),
        }
    }
}

/// What kind of JSON value `v` is, for error messages.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => "a string".into(),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// The fields of an object of named values (a function's parameters, a record's fields): an
/// absent `option` is `none`; a field the type does not have is refused.
pub(crate) fn fields(
    named: &[(String, Type)],
    value: &Value,
    path: &mut Path,
) -> Result<Vec<(String, Val)>, Mismatch> {
    let Value::Object(map) = value else {
        return Err(path.mismatch(format!("expected an object, found {}", kind(value))));
    };
    if let Some(extra) = map
        .keys()
        .find(|k| !named.iter().any(|(name, _)| name == *k))
    {
        let known: Vec<String> = named.iter().map(|(n, _)| format!("`{n}`")).collect();
        return Err(path.mismatch(format!(
            "unknown field `{extra}`; the fields are {}",
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        )));
    }
    named
        .iter()
        .map(|(name, ty)| match map.get(name) {
            Some(v) => path
                .at(name, |p| to_val(ty, v, p))
                .map(|v| (name.clone(), v)),
            None if takes_null(ty) => Ok((name.clone(), Val::Option(None))),
            None => Err(path.mismatch(format!("the field `{name}` is missing"))),
        })
        .collect()
}

fn integer<T: TryFrom<i128>>(value: &Value, name: &str, path: &Path) -> Result<T, Mismatch> {
    let n: Option<i128> = match value {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1.9e19)
                    .map(|f| f as i128)
            }),
        _ => None,
    };
    let Some(n) = n else {
        return Err(path.mismatch(format!(
            "expected an integer ({name}), found {}",
            kind(value)
        )));
    };
    T::try_from(n).map_err(|_| path.mismatch(format!("{n} is out of range for {name}")))
}

/// Converts each of `items` to a value of `item`.
fn each(item: &Type, items: &[Value], path: &mut Path) -> Result<Vec<Val>, Mismatch> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| path.at(i, |p| to_val(item, v, p)))
        .collect()
}

/// Converts `value` to a value of `ty`.
pub(crate) fn to_val(ty: &Type, value: &Value, path: &mut Path) -> Result<Val, Mismatch> {
    let expected = |what: &str, path: &Path| {
        Err(path.mismatch(format!("expected {what}, found {}", kind(value))))
    };
    Ok(match ty {
        Type::Bool => match value {
            Value::Bool(b) => Val::Bool(*b),
            _ => return expected("a boolean", path),
        },
        Type::S8 => Val::S8(integer(value, "s8", path)?),
        Type::U8 => Val::U8(integer(value, "u8", path)?),
        Type::S16 => Val::S16(integer(value, "s16", path)?),
        Type::U16 => Val::U16(integer(value, "u16", path)?),
        Type::S32 => Val::S32(integer(value, "s32", path)?),
        Type::U32 => Val::U32(integer(value, "u32", path)?),
        Type::S64 => Val::S64(integer(value, "s64", path)?),
        Type::U64 => Val::U64(integer(value, "u64", path)?),
        Type::Float32 => match value.as_f64() {
            Some(f) if f.abs() <= f64::from(f32::MAX) => Val::Float32(f as f32),
            Some(_) => return Err(path.mismatch(format!("{value} is out of range for f32"))),
            None => return expected("a number", path),
        },
        Type::Float64 => match value.as_f64() {
            Some(f) => Val::Float64(f),
            None => return expected("a number", path),
        },
        Type::Char => match value.as_str().map(|s| {
            let mut chars = s.chars();
            (chars.next(), chars.next())
        }) {
            Some((Some(c), None)) => Val::Char(c),
            _ => return expected("a string of one character", path),
        },
        Type::String => match value {
            Value::String(s) => Val::String(s.clone()),
            _ => return expected("a string", path),
        },
        Type::List(l) => {
            let Value::Array(items) = value else {
                return expected("an array", path);
            };
            Val::List(each(&l.ty(), items, path)?)
        }
        Type::FixedLengthList(l) => {
            let Value::Array(items) = value else {
                return expected("an array", path);
            };
            if items.len() != l.len() as usize {
                return expected(&format!("an array of exactly {}", l.len()), path);
            }
            Val::FixedLengthList(each(&l.ty(), items, path)?)
        }
        Type::Map(m) => {
            let (key, val) = (m.key(), m.value());
            match value {
                Value::Object(map) if matches!(key, Type::String) => Val::Map(
                    map.iter()
                        .map(|(k, v)| {
                            path.at(k, |p| Ok((Val::String(k.clone()), to_val(&val, v, p)?)))
                        })
                        .collect::<Result<_, _>>()?,
                ),
                Value::Array(pairs) if !matches!(key, Type::String) => Val::Map(
                    pairs
                        .iter()
                        .enumerate()
                        .map(|(i, pair)| {
                            path.at(i, |p| match pair.as_array().map(Vec::as_slice) {
                                Some([k, v]) => Ok((
                                    p.at(0, |p| to_val(&key, k, p))?,
                                    p.at(1, |p| to_val(&val, v, p))?,
                                )),
                                _ => Err(p.mismatch(format!(
                                    "expected a [key, value] pair, found {}",
                                    kind(pair)
                                ))),
                            })
                        })
                        .collect::<Result<_, _>>()?,
                ),
                _ if matches!(key, Type::String) => return expected("an object", path),
                _ => return expected("an array of [key, value] pairs", path),
            }
        }
        Type::Record(r) => {
            let named: Vec<(String, Type)> =
                r.fields().map(|f| (f.name.to_string(), f.ty)).collect();
            Val::Record(fields(&named, value, path)?)
        }
        Type::Tuple(t) => {
            let types: Vec<Type> = t.types().collect();
            match value {
                Value::Array(items) if items.len() == types.len() => Val::Tuple(
                    items
                        .iter()
                        .zip(&types)
                        .enumerate()
                        .map(|(i, (v, ty))| path.at(i, |p| to_val(ty, v, p)))
                        .collect::<Result<_, _>>()?,
                ),
                _ => return expected(&format!("an array of exactly {}", types.len()), path),
            }
        }
        Type::Variant(v) => {
            let names = || {
                v.cases()
                    .map(|c| format!("`{}`", c.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (name, payload) = match value {
                Value::String(name) => (name.as_str(), None),
                Value::Object(map) if map.len() == 1 => {
                    let (name, payload) = map.iter().next().expect("one entry");
                    (name.as_str(), Some(payload))
                }
                _ => {
                    return expected(
                        &format!("a case name or {{\"case\": value}} (cases {})", names()),
                        path,
                    );
                }
            };
            let Some(case) = v.cases().find(|c| c.name == name) else {
                return Err(
                    path.mismatch(format!("unknown case `{name}`; the cases are {}", names()))
                );
            };
            match (&case.ty, payload) {
                (None, None) => Val::Variant(name.to_string(), None),
                (Some(ty), Some(payload)) => {
                    let inner = path.at(name, |p| to_val(ty, payload, p))?;
                    Val::Variant(name.to_string(), Some(Box::new(inner)))
                }
                (None, Some(_)) => {
                    return Err(path.mismatch(format!(
                        "case `{name}` has no value: write it as the string \"{name}\""
                    )));
                }
                (Some(_), None) => {
                    return Err(path.mismatch(format!(
                        "case `{name}` needs a value: write it as {{\"{name}\": value}}"
                    )));
                }
            }
        }
        Type::Enum(e) => match value.as_str() {
            Some(name) if e.names().any(|n| n == name) => Val::Enum(name.to_string()),
            _ => {
                let names: Vec<String> = e.names().map(|n| format!("`{n}`")).collect();
                return expected(&format!("one of {}", names.join(", ")), path);
            }
        },
        Type::Option(o) => {
            let inner = o.ty();
            match value {
                Value::Null => Val::Option(None),
                _ if takes_null(&inner) => match value
                    .as_object()
                    .and_then(|m| (m.len() == 1).then(|| m.get("some")).flatten())
                {
                    Some(v) => {
                        Val::Option(Some(Box::new(path.at("some", |p| to_val(&inner, v, p))?)))
                    }
                    None => return expected("null or {\"some\": value}", path),
                },
                _ => Val::Option(Some(Box::new(to_val(&inner, value, path)?))),
            }
        }
        Type::Result(r) => {
            let Some((side, payload)) = value
                .as_object()
                .filter(|m| m.len() == 1)
                .and_then(|m| m.iter().next())
            else {
                return expected("{\"ok\": value} or {\"err\": value}", path);
            };
            let ty = match side.as_str() {
                "ok" => r.ok(),
                "err" => r.err(),
                _ => return expected("{\"ok\": value} or {\"err\": value}", path),
            };
            let inner = match (ty, payload) {
                (None, Value::Null) => None,
                (None, _) => {
                    return Err(path.mismatch(format!("`{side}` has no value here: write null")));
                }
                (Some(ty), v) => Some(Box::new(path.at(side, |p| to_val(&ty, v, p))?)),
            };
            Val::Result(if side == "ok" { Ok(inner) } else { Err(inner) })
        }
        Type::Flags(f) => {
            let Value::Array(items) = value else {
                return expected("an array of flag names", path);
            };
            let mut set = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(name) if f.names().any(|n| n == name) => {
                        if set.iter().any(|s: &String| s == name) {
                            return Err(path.at(i, |p| {
                                p.mismatch(format!("the flag `{name}` is given twice"))
                            }));
                        }
                        set.push(name.to_string());
                    }
                    _ => {
                        let names: Vec<String> = f.names().map(|n| format!("`{n}`")).collect();
                        return Err(path.at(i, |p| {
                            p.mismatch(format!(
                                "expected one of {}, found {}",
                                names.join(", "),
                                kind(item)
                            ))
                        }));
                    }
                }
            }
            Val::Flags(set)
        }
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(path.mismatch("this type has no JSON form"));
        }
    })
}

/// What a function returned that JSON cannot carry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NotJson(pub String);

/// Converts a value of `ty` a function returned to JSON.
pub(crate) fn to_json(ty: &Type, val: &Val, path: &mut Path) -> Result<Value, NotJson> {
    let float = |f: f64, path: &Path| {
        Number::from_f64(f).map(Value::Number).ok_or_else(|| {
            let at = path.mismatch("").path;
            NotJson(format!(
                "it returned {f}{}, which JSON cannot represent",
                if at.is_empty() {
                    String::new()
                } else {
                    format!(" at {at}")
                }
            ))
        })
    };
    let each = |item: &Type, vals: &[Val], path: &mut Path| -> Result<Value, NotJson> {
        vals.iter()
            .enumerate()
            .map(|(i, v)| path.at(i, |p| to_json(item, v, p)))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    };
    let tagged =
        |name: &str, inner: Option<(Type, &Val)>, path: &mut Path| -> Result<Value, NotJson> {
            let v = match inner {
                Some((ty, v)) => path.at(name, |p| to_json(&ty, v, p))?,
                None => Value::Null,
            };
            Ok(serde_json::json!({ name: v }))
        };
    let mismatch = || NotJson(format!("it returned {val:?} where its type says {ty:?}"));
    Ok(match (ty, val) {
        (_, Val::Bool(b)) => Value::Bool(*b),
        (_, Val::S8(n)) => Value::from(*n),
        (_, Val::U8(n)) => Value::from(*n),
        (_, Val::S16(n)) => Value::from(*n),
        (_, Val::U16(n)) => Value::from(*n),
        (_, Val::S32(n)) => Value::from(*n),
        (_, Val::U32(n)) => Value::from(*n),
        (_, Val::S64(n)) => Value::from(*n),
        (_, Val::U64(n)) => Value::from(*n),
        (_, Val::Float32(f)) => float(f64::from(*f), path)?,
        (_, Val::Float64(f)) => float(*f, path)?,
        (_, Val::Char(c)) => Value::String(c.to_string()),
        (_, Val::String(s)) => Value::String(s.clone()),
        (Type::List(l), Val::List(items)) => each(&l.ty(), items, path)?,
        (Type::FixedLengthList(l), Val::FixedLengthList(items)) => each(&l.ty(), items, path)?,
        (Type::Tuple(t), Val::Tuple(items)) => Value::Array(
            t.types()
                .zip(items)
                .enumerate()
                .map(|(i, (ty, v))| path.at(i, |p| to_json(&ty, v, p)))
                .collect::<Result<_, _>>()?,
        ),
        (Type::Map(m), Val::Map(pairs)) if matches!(m.key(), Type::String) => {
            let mut map = serde_json::Map::new();
            for (k, v) in pairs {
                let Val::String(k) = k else {
                    return Err(mismatch());
                };
                map.insert(k.clone(), path.at(k, |p| to_json(&m.value(), v, p))?);
            }
            Value::Object(map)
        }
        (Type::Map(m), Val::Map(pairs)) => Value::Array(
            pairs
                .iter()
                .enumerate()
                .map(|(i, (k, v))| {
                    path.at(i, |p| {
                        Ok(Value::Array(vec![
                            to_json(&m.key(), k, p)?,
                            to_json(&m.value(), v, p)?,
                        ]))
                    })
                })
                .collect::<Result<_, NotJson>>()?,
        ),
        (Type::Record(r), Val::Record(fields)) => {
            let mut map = serde_json::Map::new();
            for (field, (name, v)) in r.fields().zip(fields) {
                map.insert(name.clone(), path.at(name, |p| to_json(&field.ty, v, p))?);
            }
            Value::Object(map)
        }
        (_, Val::Variant(name, None) | Val::Enum(name)) => Value::String(name.clone()),
        (Type::Variant(v), Val::Variant(name, Some(payload))) => {
            let ty = v
                .cases()
                .find(|c| c.name == name)
                .and_then(|c| c.ty)
                .ok_or_else(mismatch)?;
            tagged(name, Some((ty, payload)), path)?
        }
        (_, Val::Option(None)) => Value::Null,
        (Type::Option(o), Val::Option(Some(inner))) => {
            let inner_ty = o.ty();
            if takes_null(&inner_ty) {
                tagged("some", Some((inner_ty, inner)), path)?
            } else {
                to_json(&inner_ty, inner, path)?
            }
        }
        (Type::Result(r), Val::Result(Ok(inner))) => {
            tagged("ok", r.ok().zip(inner.as_deref()), path)?
        }
        (Type::Result(r), Val::Result(Err(inner))) => {
            tagged("err", r.err().zip(inner.as_deref()), path)?
        }
        (_, Val::Flags(names)) => Value::Array(names.iter().cloned().map(Value::String).collect()),
        (_, Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_)) => {
            return Err(NotJson(
                "it returned a handle, which JSON cannot carry".into(),
            ));
        }
        _ => return Err(mismatch()),
    })
}
