//! The sampling and output parameters of a gateway request: checked as an upstream would
//! check them (so a bad value is a 400 before any turn starts), bounded by `cordon.toml`'s
//! `[gateway.parameters]`, and kept for the turn's model requests.
//!
//! What happens to a field a client sends, in order of precedence:
//! 1. The API's own fields (`model`, `messages`, `stream`, `tools`, …) are read by the
//!    request's parser, never forwarded.
//! 2. A field the operator lists in `refuse` is a 400 naming it; one in `drop` is taken and
//!    not sent.
//! 3. Fields Cordon cannot honour are a 400 that says why: `functions`/`function_call` (use
//!    `tools`), audio output (`modalities` other than text, `audio`).
//! 4. `store`, `metadata`, `prompt_cache_key` and `safety_identifier` are taken and not sent:
//!    Cordon keeps every session and its audit whatever `store` says, and what it keeps, and
//!    on whose account, is the operator's to decide.
//! 5. The standard parameters ([`STANDARD`]) are checked (type and range) and bounded: a
//!    `max_tokens` over the ceiling is lowered to it, a `temperature` outside the range moved
//!    to its nearer end.
//! 6. A model server's own fields (`top_k`, `min_p`, …) are sent as given only when the
//!    operator lists them in `allow`; any other field is a 400 naming it. Forwarding what is
//!    not known would let a client get around the operator's bounds (llama.cpp's `n_predict`
//!    outranks `max_tokens`) or choose models and tiers on the operator's key.

use serde_json::{Map, Value};

use cordon_agent::{GatewayParameters, ToolChoice, TurnParameters};

use super::GatewayError;

/// The standard Chat Completions parameters, checked and sent to the model server.
pub(super) const STANDARD: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "response_format",
    "parallel_tool_calls",
    "reasoning_effort",
    "verbosity",
];

/// Fields taken from clients and never sent (see the module's rule 4).
const KEPT_BACK: &[&str] = &["store", "metadata", "prompt_cache_key", "safety_identifier"];

/// Checks a request's parameters; `handled` are the fields its API's parser reads itself.
pub(super) fn take(
    fields: &Map<String, Value>,
    handled: &[&str],
    bounds: &GatewayParameters,
) -> Result<TurnParameters, GatewayError> {
    let mut sent = Map::new();
    for (name, value) in fields {
        if handled.contains(&name.as_str()) || value.is_null() {
            continue;
        }
        if bounds.refuse.iter().any(|r| r == name) {
            return Err(refused(name));
        }
        if bounds.drop.iter().any(|d| d == name) {
            continue;
        }
        match name.as_str() {
            "functions" | "function_call" => {
                return Err(GatewayError::invalid(
                    name,
                    format!(
                        "`{name}` is the old form of tools; define your tools with `tools` and \
                         choose with `tool_choice`"
                    ),
                ));
            }
            "modalities" => {
                let text_only = value
                    .as_array()
                    .is_some_and(|m| m.iter().all(|m| m == "text"));
                if !text_only {
                    return Err(GatewayError::invalid(
                        name,
                        "Cordon's gateway answers in text: `modalities` may only be [\"text\"]",
                    ));
                }
                continue;
            }
            "audio" => {
                return Err(GatewayError::invalid(
                    name,
                    "Cordon's gateway answers in text, not audio: leave `audio` out",
                ));
            }
            "store" => {
                expect(name, value.is_boolean(), "a boolean")?;
                continue;
            }
            "metadata" => {
                let fits = value
                    .as_object()
                    .is_some_and(|m| m.len() <= 16 && m.values().all(Value::is_string));
                expect(name, fits, "an object of at most 16 string values")?;
                continue;
            }
            _ if KEPT_BACK.contains(&name.as_str()) => continue,
            _ => {}
        }
        let value = if STANDARD.contains(&name.as_str()) {
            checked(name, value, bounds)?
        } else if bounds.allow.iter().any(|a| a == name) {
            value.clone()
        } else {
            return Err(GatewayError::invalid(
                name,
                format!(
                    "`{name}` is not a parameter Cordon's gateway sends to the model server; \
                     leave it out (an operator can let it through: cordon.toml's \
                     [gateway.parameters] allow)"
                ),
            )
            .with_code("parameter_not_allowed"));
        };
        sent.insert(name.clone(), value);
    }
    if let (Some(a), Some(b)) = (sent.get("max_tokens"), sent.get("max_completion_tokens")) {
        if a != b {
            return Err(GatewayError::invalid(
                "max_completion_tokens",
                "`max_tokens` and `max_completion_tokens` are one limit; send one of them",
            ));
        }
        sent.remove("max_tokens");
    }
    Ok(TurnParameters {
        sent,
        tool_choice: None,
    })
}

/// The 400 for a parameter the operator refuses (`[gateway.parameters] refuse`).
pub(super) fn refused(name: &str) -> GatewayError {
    GatewayError::invalid(
        name,
        format!(
            "`{name}` is refused by this gateway (its cordon.toml lists it in \
             [gateway.parameters] refuse); leave it out"
        ),
    )
    .with_code("parameter_refused")
}

/// A standard parameter's value, checked and bounded.
fn checked(name: &str, value: &Value, bounds: &GatewayParameters) -> Result<Value, GatewayError> {
    let number_in = |low: f64, high: f64| -> Result<f64, GatewayError> {
        match value.as_f64() {
            Some(n) if (low..=high).contains(&n) => Ok(n),
            _ => Err(GatewayError::invalid(
                name,
                format!("`{name}` must be a number from {low} to {high}, not {value}"),
            )),
        }
    };
    Ok(match name {
        "temperature" => {
            let t = number_in(0.0, 2.0)?;
            match bounds.temperature {
                Some(_) => Value::from(bounds.temperature_within(t)),
                None => value.clone(),
            }
        }
        "top_p" => {
            number_in(0.0, 1.0)?;
            value.clone()
        }
        "presence_penalty" | "frequency_penalty" => {
            number_in(-2.0, 2.0)?;
            value.clone()
        }
        "max_tokens" | "max_completion_tokens" => match value.as_u64() {
            Some(n) if n >= 1 => Value::from(bounds.max_tokens_within(n)),
            _ => {
                return Err(GatewayError::invalid(
                    name,
                    format!("`{name}` must be a whole number of at least 1, not {value}"),
                ));
            }
        },
        "seed" => {
            expect(name, value.is_i64() || value.is_u64(), "an integer")?;
            value.clone()
        }
        "stop" => {
            let fits = match value {
                Value::String(_) => true,
                Value::Array(list) => list.len() <= 4 && list.iter().all(Value::is_string),
                _ => false,
            };
            expect(name, fits, "a string or a list of at most 4 strings")?;
            value.clone()
        }
        "logit_bias" => {
            let fits = value.as_object().is_some_and(|m| {
                m.values()
                    .all(|b| b.as_f64().is_some_and(|b| (-100.0..=100.0).contains(&b)))
            });
            expect(
                name,
                fits,
                "an object of token ids to numbers from -100 to 100",
            )?;
            value.clone()
        }
        "logprobs" | "parallel_tool_calls" => {
            expect(name, value.is_boolean(), "a boolean")?;
            value.clone()
        }
        "top_logprobs" => {
            expect(
                name,
                value.as_u64().is_some_and(|n| n <= 20),
                "a whole number from 0 to 20",
            )?;
            value.clone()
        }
        "reasoning_effort" | "verbosity" => {
            expect(
                name,
                value.is_string(),
                "a string such as \"low\" or \"high\"",
            )?;
            value.clone()
        }
        "response_format" => {
            response_format(value)?;
            value.clone()
        }
        _ => value.clone(),
    })
}

fn response_format(value: &Value) -> Result<(), GatewayError> {
    match value["type"].as_str() {
        Some("text" | "json_object") => Ok(()),
        Some("json_schema") => {
            let spec = &value["json_schema"];
            let named = spec["name"].as_str().is_some_and(|n| !n.is_empty());
            if !named || !spec["schema"].is_object() && !spec["schema"].is_null() {
                return Err(GatewayError::invalid(
                    "response_format.json_schema",
                    "`json_schema` needs a `name` and a `schema` object",
                ));
            }
            if let Some(schema) = spec.get("schema").filter(|s| s.is_object())
                && let Err(e) = cordon_core::CompiledSchema::compile(schema)
            {
                return Err(GatewayError::invalid(
                    "response_format.json_schema.schema",
                    format!("the schema is not a valid JSON Schema: {e}"),
                ));
            }
            Ok(())
        }
        _ => Err(GatewayError::invalid(
            "response_format.type",
            "`response_format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

fn expect(name: &str, fits: bool, what: &str) -> Result<(), GatewayError> {
    if fits {
        Ok(())
    } else {
        Err(GatewayError::invalid(
            name,
            format!("`{name}` must be {what}"),
        ))
    }
}

/// A request's `tool_choice`: `auto` (or none given) leaves the choice to the model.
pub(super) fn tool_choice(value: Option<&Value>) -> Result<Option<ToolChoice>, GatewayError> {
    let refused = || {
        GatewayError::invalid(
            "tool_choice",
            "`tool_choice` must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \
             \"function\": {\"name\": …}}",
        )
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(None),
            "none" => Ok(Some(ToolChoice::None)),
            "required" => Ok(Some(ToolChoice::Required)),
            _ => Err(refused()),
        },
        Some(choice @ Value::Object(_)) if choice["type"] == "function" => {
            // Chat Completions nests the name; the Responses API does not.
            let name = choice["function"]["name"]
                .as_str()
                .or(choice["name"].as_str())
                .filter(|n| !n.is_empty())
                .ok_or_else(refused)?;
            Ok(Some(ToolChoice::Function(name.to_string())))
        }
        Some(_) => Err(refused()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taken(body: Value, bounds: &GatewayParameters) -> Result<TurnParameters, GatewayError> {
        take(body.as_object().unwrap(), &["model", "messages"], bounds)
    }

    #[test]
    fn standard_parameters_are_kept_as_sent_and_extras_only_when_allowed() {
        let body = json!({
            "model": "m", "messages": [],
            "temperature": 0.3, "top_p": 0.9, "max_tokens": 4096, "stop": ["\n\n"], "seed": 7,
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"50256": -100},
            "logprobs": true, "top_logprobs": 3, "parallel_tool_calls": false,
            "reasoning_effort": "low", "top_k": 40, "store": false, "metadata": {"a": "b"},
            "prompt_cache_key": "k",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
            "temperature_unused": null,
        });
        let allowed = GatewayParameters {
            allow: vec!["top_k".into()],
            ..GatewayParameters::default()
        };
        let e = taken(body.clone(), &GatewayParameters::default()).unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.code),
            (Some("top_k"), Some("parameter_not_allowed"))
        );
        assert!(e.message.contains("[gateway.parameters] allow"), "{e:?}");
        let p = taken(body, &allowed).unwrap();
        let mut names: Vec<&str> = p.sent.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "frequency_penalty",
                "logit_bias",
                "logprobs",
                "max_tokens",
                "parallel_tool_calls",
                "presence_penalty",
                "reasoning_effort",
                "response_format",
                "seed",
                "stop",
                "temperature",
                "top_k",
                "top_logprobs",
                "top_p"
            ]
        );
        assert_eq!(p.sent["temperature"], json!(0.3));
        assert_eq!(p.sent["top_k"], json!(40));
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let none = GatewayParameters::default();
        for (body, param) in [
            (json!({"temperature": 3}), "temperature"),
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (
                json!({"max_completion_tokens": -5}),
                "max_completion_tokens",
            ),
            (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
            (json!({"seed": 1.5}), "seed"),
            (
                json!({"response_format": {"type": "yaml"}}),
                "response_format.type",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {}}}),
                "response_format.json_schema",
            ),
            (json!({"functions": []}), "functions"),
            (json!({"modalities": ["text", "audio"]}), "modalities"),
            (json!({"store": "yes"}), "store"),
            (json!({"n_predict": -1}), "n_predict"),
            (json!({"service_tier": "priority"}), "service_tier"),
            (
                json!({"max_tokens": 5, "max_completion_tokens": 6}),
                "max_completion_tokens",
            ),
        ] {
            let e = taken(body.clone(), &none).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e:?}");
        }
        let e = tool_choice(Some(&json!("sometimes"))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
    }

    #[test]
    fn the_operator_bounds_drops_and_refuses() {
        let bounds = GatewayParameters {
            max_tokens: Some(1000),
            temperature: Some([0.0, 1.0]),
            drop: vec!["logit_bias".into()],
            refuse: vec!["seed".into()],
            ..GatewayParameters::default()
        };
        let p = taken(
            json!({"max_completion_tokens": 4096, "temperature": 1.7, "logit_bias": {"1": 1}}),
            &bounds,
        )
        .unwrap();
        assert_eq!(p.sent["max_completion_tokens"], json!(1000));
        assert_eq!(p.sent["temperature"], json!(1.0));
        assert!(!p.sent.contains_key("logit_bias"));
        let p = taken(json!({"max_tokens": 10}), &bounds).unwrap();
        assert_eq!(p.sent["max_tokens"], json!(10));
        let e = taken(json!({"seed": 1}), &bounds).unwrap_err();
        assert_eq!(e.code, Some("parameter_refused"));
        assert!(e.message.contains("[gateway.parameters] refuse"), "{e:?}");
    }

    #[test]
    fn tool_choice_reads_both_apis_forms() {
        assert_eq!(tool_choice(Some(&json!("auto"))).unwrap(), None);
        assert_eq!(
            tool_choice(Some(&json!("none"))).unwrap(),
            Some(ToolChoice::None)
        );
        assert_eq!(
            tool_choice(Some(
                &json!({"type": "function", "function": {"name": "f"}})
            ))
            .unwrap(),
            Some(ToolChoice::Function("f".into()))
        );
        assert_eq!(
            tool_choice(Some(&json!({"type": "function", "name": "g"}))).unwrap(),
            Some(ToolChoice::Function("g".into()))
        );
    }
}
