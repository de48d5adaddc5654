//! A plugin with two tools, as in the README. Build it into a component with
//! `cargo build --release --example two_tools --target wasm32-wasip2`.

use cordon_sdk::{Hints, Json, Plugin, ToolError, export_plugin};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `greet`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Greet {
    /// Who to greet.
    name: String,
    /// How many exclamation marks to add (0-10).
    #[serde(default)]
    excitement: u8,
}

/// Arguments of `add`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Add {
    /// The numbers to add up.
    numbers: Vec<f64>,
}

fn plugin() -> Plugin {
    Plugin::new()
        .tool(
            "greet",
            "Greets someone by name.",
            Hints::READ_ONLY,
            |a: Greet| {
                if a.excitement > 10 {
                    return Err(ToolError::invalid("excitement must be at most 10"));
                }
                Ok(format!(
                    "Hello, {}{}",
                    a.name,
                    "!".repeat(a.excitement.into())
                ))
            },
        )
        .tool("add", "Adds numbers.", Hints::READ_ONLY, |a: Add| {
            let sum: f64 = a.numbers.iter().sum();
            Ok::<_, ToolError>(Json(serde_json::json!({ "sum": sum })))
        })
}

export_plugin!(plugin);
