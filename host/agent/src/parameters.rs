//! What a client sets for the model requests of one turn: sampling and output settings sent
//! with each request, and which tools the turn's first request may or must call.
//!
//! A served door (the gateway) takes these from its client's request; the turn records them,
//! so a turn resumed after a restart sends what its client asked for. A terminal turn sets
//! none and gets the configuration's (`[llm]`).
//!
//! Precedence, for each field of a model request:
//! 1. Cordon's own fields (`model`, `messages`, `tools`, `stream`, `stream_options`) are never
//!    taken from a client: [`RESERVED`].
//! 2. A value the client set for the turn ([`TurnParameters::sent`]) wins over `[llm]`'s
//!    (`temperature`, `max_tokens`); `max_tokens` and `max_completion_tokens` are one setting,
//!    sent under the upstream's spelling ([`crate::LlmConfig::max_tokens_field`]).
//! 3. `tool_choice` applies to the turn's first model request only (and its retries); every
//!    later request leaves the choice to the model, or a forced call would repeat forever.
//!    `none` offers no tools on that request at all, which every upstream understands.
//! 4. The final-answer pass never offers tools, so it carries no `tool_choice`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Request fields Cordon always sets itself; a client's value for one is never sent.
pub const RESERVED: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
    "n",
    "functions",
    "function_call",
];

/// The two spellings of the answer-length limit.
pub const MAX_TOKENS_FIELDS: [&str; 2] = ["max_tokens", "max_completion_tokens"];

/// What a client set for the model requests of one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnParameters {
    /// Fields sent as given with every model request of the turn (`temperature`, `top_p`,
    /// `max_tokens`, `stop`, `seed`, `response_format`, …). Never a [`RESERVED`] field.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub sent: Map<String, Value>,
    /// Which tools the turn's first model request may or must call (`None`: the model
    /// chooses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

impl TurnParameters {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty() && self.tool_choice.is_none()
    }
}

/// `tool_choice` other than `auto`, for the first model request of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "choice", content = "name")]
pub enum ToolChoice {
    /// No tools: the model answers in text.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool (the name the model knows it by).
    Function(String),
}

impl ToolChoice {
    /// The wire form, for a request that offers tools.
    pub fn to_wire(&self) -> Value {
        match self {
            ToolChoice::None => Value::from("none"),
            ToolChoice::Required => Value::from("required"),
            ToolChoice::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parameters_round_trip_and_stay_out_of_old_records() {
        let mut p = TurnParameters::default();
        assert!(p.is_empty());
        assert_eq!(serde_json::to_value(&p).unwrap(), json!({}));
        p.sent.insert("temperature".into(), json!(0.2));
        p.tool_choice = Some(ToolChoice::Function("sql_query".into()));
        let saved = serde_json::to_value(&p).unwrap();
        assert_eq!(
            saved,
            json!({"sent": {"temperature": 0.2}, "tool_choice": {"choice": "function", "name": "sql_query"}})
        );
        assert_eq!(serde_json::from_value::<TurnParameters>(saved).unwrap(), p);
        assert_eq!(
            ToolChoice::Function("f".into()).to_wire(),
            json!({"type": "function", "function": {"name": "f"}})
        );
        assert_eq!(ToolChoice::Required.to_wire(), json!("required"));
    }
}
