//! The Cedar schema Cordon derives from the installed tools, and the arguments of a call as
//! Cedar values of those types.
//!
//! Each tool is an action `Action::"plugin.tool"`, a member of `Action::"plugin:PLUGIN"`,
//! `Action::"tool:TOOL"` and `Action::"call"`; its arguments are `context.input`, typed from
//! its JSON Schema, so a rule that names an argument the tool does not have is refused at load.

use std::collections::BTreeMap;

use cedar_policy::RestrictedExpression;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What the policy knows of a tool before any call: who offers it, its arguments' schema and
/// what its grants reach.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFacts {
    /// The plugin that offers it.
    pub plugin: String,
    /// Its own name in that plugin.
    pub tool: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// What its effective grants reach.
    pub reach: Reach,
}

impl ToolFacts {
    /// `plugin.tool`.
    pub fn identity(&self) -> String {
        format!("{}.{}", self.plugin, self.tool)
    }
}

/// What a tool's effective grants reach: `resource` in Cedar.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reach {
    /// Whether anything could be changed or sent (a read-write path, network, environment).
    pub can_change: bool,
    /// Guest paths granted read-write.
    #[serde(default)]
    pub read_write: Vec<String>,
    /// Guest paths granted read-only.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// HTTP origins (`https://host:443`) and TCP addresses (`tcp://host:port`).
    #[serde(default)]
    pub network: Vec<String>,
    /// Environment variables by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// `wasi:config/store` keys.
    #[serde(default)]
    pub config: Vec<String>,
}

/// The type of an argument as Cedar sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ArgType {
    String,
    Long,
    /// JSON numbers that need not be integers: Cedar's `decimal` (four decimal places).
    Decimal,
    Bool,
    Set(Box<ArgType>),
    /// Properties with whether each is required.
    Record(BTreeMap<String, (ArgType, bool)>),
}

impl ArgType {
    /// The type of a JSON Schema, or `None` for schemas Cedar cannot type (unions, `$ref`,
    /// arrays of mixed items): such arguments are left out of `context.input`.
    pub(crate) fn of_schema(schema: &Value) -> Option<ArgType> {
        let ty = match schema.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(ts)) => {
                let mut real = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null");
                match (real.next(), real.next()) {
                    (Some(one), None) => one,
                    _ => return None,
                }
            }
            None if schema.get("properties").is_some() => "object",
            None => match schema.get("enum") {
                Some(Value::Array(v)) if !v.is_empty() && v.iter().all(Value::is_string) => {
                    "string"
                }
                _ => return None,
            },
            _ => return None,
        };
        Some(match ty {
            "string" => ArgType::String,
            "integer" => ArgType::Long,
            "number" => ArgType::Decimal,
            "boolean" => ArgType::Bool,
            "array" => ArgType::Set(Box::new(ArgType::of_schema(schema.get("items")?)?)),
            "object" => {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut fields = BTreeMap::new();
                if let Some(Value::Object(props)) = schema.get("properties") {
                    for (name, sub) in props {
                        if let Some(t) = ArgType::of_schema(sub) {
                            fields.insert(name.clone(), (t, required.contains(&name.as_str())));
                        }
                    }
                }
                ArgType::Record(fields)
            }
            _ => return None,
        })
    }

    /// The Cedar JSON-schema form of the type.
    pub(crate) fn cedar(&self) -> Value {
        match self {
            ArgType::String => json!({"type": "String"}),
            ArgType::Long => json!({"type": "Long"}),
            ArgType::Decimal => json!({"type": "Extension", "name": "decimal"}),
            ArgType::Bool => json!({"type": "Boolean"}),
            ArgType::Set(e) => json!({"type": "Set", "element": e.cedar()}),
            ArgType::Record(fields) => {
                let attrs: serde_json::Map<String, Value> = fields
                    .iter()
                    .map(|(k, (t, req))| {
                        let mut v = t.cedar();
                        v["required"] = json!(*req);
                        (k.clone(), v)
                    })
                    .collect();
                json!({"type": "Record", "attributes": attrs})
            }
        }
    }

    /// A word for messages: `string`, `integer`, …
    pub(crate) fn word(&self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Long => "integer",
            ArgType::Decimal => "number",
            ArgType::Bool => "boolean",
            ArgType::Set(_) => "array",
            ArgType::Record(_) => "object",
        }
    }

    /// `value` as a Cedar value of this type, or `None` when it is not one (a value of
    /// another type, an integer beyond 64 bits, a number beyond `decimal`'s range): the
    /// attribute is then left out, and rules that test it do not apply to the call, except
    /// that a rule that cannot be evaluated counts as applying when it denies or asks.
    pub(crate) fn value(&self, value: &Value) -> Option<RestrictedExpression> {
        match (self, value) {
            (ArgType::String, Value::String(s)) => {
                Some(RestrictedExpression::new_string(s.clone()))
            }
            (ArgType::Long, Value::Number(n)) => n.as_i64().map(RestrictedExpression::new_long),
            (ArgType::Decimal, Value::Number(n)) => {
                decimal(n).map(RestrictedExpression::new_decimal)
            }
            (ArgType::Bool, Value::Bool(b)) => Some(RestrictedExpression::new_bool(*b)),
            (ArgType::Set(e), Value::Array(items)) => {
                let items: Option<Vec<_>> = items.iter().map(|v| e.value(v)).collect();
                Some(RestrictedExpression::new_set(items?))
            }
            (ArgType::Record(fields), Value::Object(map)) => {
                let mut out = Vec::with_capacity(fields.len());
                for (name, (t, _)) in fields {
                    if let Some(v) = map.get(name).and_then(|v| t.value(v)) {
                        out.push((name.clone(), v));
                    }
                }
                RestrictedExpression::new_record(out).ok()
            }
            _ => None,
        }
    }

    /// [`ArgType::value`] of a record with only the properties `only` names (all when
    /// `None`): what Cedar policies that read a few arguments need of a call.
    pub(crate) fn value_with(
        &self,
        value: &Value,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> Option<RestrictedExpression> {
        let (ArgType::Record(fields), Value::Object(map), Some(only)) = (self, value, only) else {
            return self.value(value);
        };
        let mut out = Vec::with_capacity(only.len());
        for name in only {
            if let Some(v) = fields
                .get(name)
                .and_then(|(t, _)| map.get(name).and_then(|v| t.value(v)))
            {
                out.push((name.clone(), v));
            }
        }
        RestrictedExpression::new_record(out).ok()
    }

    /// The type at a dotted path of properties below this record.
    pub(crate) fn at<'a>(&'a self, path: &[&str]) -> Result<&'a ArgType, PathProblem> {
        let mut here = self;
        for (i, part) in path.iter().enumerate() {
            let ArgType::Record(fields) = here else {
                return Err(PathProblem::NotAnObject(path[..i].join(".")));
            };
            match fields.get(*part) {
                Some((t, _)) => here = t,
                None => {
                    return Err(PathProblem::Missing {
                        at: path[..=i].join("."),
                        known: fields.keys().cloned().collect(),
                    });
                }
            }
        }
        Ok(here)
    }
}

/// Why an argument path does not name an argument.
#[derive(Debug)]
pub(crate) enum PathProblem {
    /// The path goes below something that is not an object.
    NotAnObject(String),
    /// No such property; what there is.
    Missing { at: String, known: Vec<String> },
}

/// A JSON number as the text of a Cedar `decimal` (at most four decimal places, within
/// ±922337203685477), or `None` when it has no such form.
fn decimal(n: &serde_json::Number) -> Option<String> {
    let units = decimal_units(n)?;
    let sign = if units < 0 { "-" } else { "" };
    let (whole, fraction) = (units.unsigned_abs() / 10_000, units.unsigned_abs() % 10_000);
    let fraction = format!("{fraction:04}");
    let fraction = match fraction.trim_end_matches('0') {
        "" => "0",
        f => f,
    };
    Some(format!("{sign}{whole}.{fraction}"))
}

/// A JSON number as a `decimal` in ten-thousandths, rounded as [`decimal`] writes it (the
/// exact binary value, ties to even), or `None` when it has no such form. Computed without
/// formatting: this runs for every numeric argument a rule compares.
pub(crate) fn decimal_units(n: &serde_json::Number) -> Option<i64> {
    const LIMIT: i64 = 922_337_203_685_477;
    if let Some(i) = n.as_i64() {
        return (i.unsigned_abs() < LIMIT as u64).then(|| i * 10_000);
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.abs() >= LIMIT as f64 {
        return None;
    }
    // |f| = mantissa × 2^exponent, exactly.
    let bits = f.to_bits();
    let raw_exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = u128::from(bits & ((1 << 52) - 1));
    let (mantissa, exponent) = if raw_exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), raw_exponent - 1075)
    };
    let scaled = mantissa * 10_000;
    let units = if exponent >= 0 {
        scaled << exponent
    } else {
        let shift = exponent.unsigned_abs();
        if shift >= 100 {
            0
        } else {
            let quotient = scaled >> shift;
            let rest = scaled & ((1u128 << shift) - 1);
            let half = 1u128 << (shift - 1);
            if rest > half || (rest == half && quotient & 1 == 1) {
                quotient + 1
            } else {
                quotient
            }
        }
    };
    let units = i64::try_from(units).ok()?;
    Some(if f.is_sign_negative() { -units } else { units })
}

/// The Cedar action id of a tool.
pub(crate) fn action_id(identity: &str) -> String {
    identity.to_string()
}

/// The action groups a tool's action belongs to.
pub(crate) fn groups(tool: &ToolFacts) -> [String; 3] {
    [
        format!("plugin:{}", tool.plugin),
        format!("tool:{}", tool.tool),
        "call".to_string(),
    ]
}

/// The Cedar schema (JSON form) for `tools`, with `counters` as `context.calls` attributes.
pub(crate) fn cedar_schema(tools: &[(ToolFacts, ArgType)], counters: &[String]) -> Value {
    let string_set = json!({"type": "Set", "element": {"type": "String"}});
    let calls: serde_json::Map<String, Value> = counters
        .iter()
        .map(|c| (c.clone(), json!({"type": "Long"})))
        .collect();
    let mut actions = serde_json::Map::new();
    actions.insert("call".into(), json!({}));
    for (tool, input) in tools {
        for group in groups(tool).iter().take(2) {
            actions
                .entry(group.clone())
                .or_insert_with(|| json!({"memberOf": [{"id": "call"}]}));
        }
        let member_of: Vec<Value> = groups(tool).iter().map(|g| json!({"id": g})).collect();
        actions.insert(
            action_id(&tool.identity()),
            json!({
                "memberOf": member_of,
                "appliesTo": {
                    "principalTypes": ["Caller"],
                    "resourceTypes": ["Plugin"],
                    "context": {"type": "Record", "attributes": {
                        "input": input.cedar(),
                        "caller": {"type": "CallerInfo"},
                        "session": {"type": "SessionInfo"},
                        "time": {"type": "TimeInfo"},
                        "calls": {"type": "Record", "attributes": calls.clone()},
                        "matched": string_set.clone(),
                    }}
                }
            }),
        );
    }
    json!({"": {
        "entityTypes": {
            "Caller": {},
            "Plugin": {"shape": {"type": "Record", "attributes": {
                "can_change": {"type": "Boolean"},
                "read_write": string_set.clone(),
                "read_only": string_set.clone(),
                "network": string_set.clone(),
                "env": string_set.clone(),
                "config": string_set.clone(),
            }}},
        },
        "commonTypes": {
            "CallerInfo": {"type": "Record", "attributes": {
                "origin": {"type": "String"},
                "token": {"type": "String"},
                "user": {"type": "String"},
                "client": {"type": "String"},
            }},
            "SessionInfo": {"type": "Record", "attributes": {
                "approved": string_set.clone(),
                "labels": string_set.clone(),
            }},
            "TimeInfo": {"type": "Record", "attributes": {
                "hour": {"type": "Long"},
                "minute": {"type": "Long"},
                "minute_of_day": {"type": "Long"},
                "weekday": {"type": "String"},
                "date": {"type": "String"},
            }},
        },
        "actions": actions,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_type_what_cedar_can_compare_and_leave_out_the_rest() {
        let t = ArgType::of_schema(&json!({
            "type": "object",
            "required": ["sql"],
            "properties": {
                "sql": {"type": "string"},
                "limit": {"type": "integer"},
                "ratio": {"type": ["number", "null"]},
                "mode": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            }
        }))
        .unwrap();
        let ArgType::Record(f) = &t else { panic!() };
        assert_eq!(f["sql"], (ArgType::String, true));
        assert_eq!(f["limit"], (ArgType::Long, false));
        assert_eq!(f["ratio"].0, ArgType::Decimal);
        assert_eq!(f["mode"].0, ArgType::String);
        assert!(!f.contains_key("any"));
        assert!(matches!(t.at(&["sqll"]), Err(PathProblem::Missing { .. })));
        assert!(matches!(
            t.at(&["sql", "x"]),
            Err(PathProblem::NotAnObject(_))
        ));
    }

    #[test]
    fn numbers_become_decimals_when_they_fit() {
        let d = |v: Value| decimal(v.as_number().unwrap());
        assert_eq!(d(json!(1.5)).as_deref(), Some("1.5"));
        assert_eq!(d(json!(500)).as_deref(), Some("500.0"));
        assert_eq!(d(json!(0.00001)).as_deref(), Some("0.0"));
        assert_eq!(d(json!(1e300)), None);
        assert_eq!(d(json!(-2.25)).as_deref(), Some("-2.25"));
        // The units are what the Cedar text of the number says, for any number.
        let by_text = |n: &serde_json::Number| {
            let f = n.as_f64()?;
            if !f.is_finite() || f.abs() >= 922_337_203_685_477.0 {
                return None;
            }
            let text = format!("{f:.4}");
            let digits: String = text.chars().filter(char::is_ascii_digit).collect();
            let units: i64 = digits.parse().unwrap();
            Some(if text.starts_with('-') { -units } else { units })
        };
        let mut x: u64 = 1;
        let mut samples: Vec<f64> = vec![
            0.00005,
            0.00015,
            0.00025,
            1.00005,
            -0.00005,
            2.5e-5,
            5e-324,
            123_456.789_05,
            922_337_203_685_476.9,
            -0.0,
        ];
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let f = f64::from_bits(x);
            samples.push(f);
            samples.push((x >> 11) as f64 / 1e4 / f64::from(1 + (x % 1000) as u32));
            samples.push(((x >> 40) as f64) * 0.00005);
        }
        for f in samples {
            if let Some(n) = serde_json::Number::from_f64(f) {
                assert_eq!(decimal_units(&n), by_text(&n), "{f:e}");
            }
        }
        for i in [
            0i64,
            7,
            -7,
            922_337_203_685_476,
            922_337_203_685_477,
            i64::MIN,
        ] {
            let n = serde_json::Number::from(i);
            assert_eq!(decimal_units(&n), by_text(&n), "{i}");
        }
        let u = |v: Value| decimal_units(v.as_number().unwrap());
        assert_eq!(u(json!(1.5)), Some(15_000));
        assert_eq!(u(json!(-2.25)), Some(-22_500));
        assert_eq!(u(json!(0.00001)), Some(0));
        assert_eq!(u(json!(1e300)), None);
    }
}
