//! Tool selection with 50 installed tools (the 8 bundled and 42 others of kinds people
//! install), against questions written with the tool each needs (`tests/bench/
//! tool_selection`): how often the expected tool is among the offered (target ≥ 95 %), what
//! selecting costs per request (target ≤ 1 ms p50), and the tokens of the tools offered
//! (target ≤ 2,000 per request, the system prompt included).
//!
//! `cargo run --release -p cordon-tests --example tool_selection -- [--max 12]
//! [--tokenizer o200k_base]`.

use std::time::{Duration, Instant};

use cordon_agent::context::Tokenizer;
use cordon_agent::{Message, ToolSpec};
use cordon_tests::bench::{arg, number};
use serde_json::Value;

fn spec(tool: &Value) -> ToolSpec {
    ToolSpec {
        name: tool["name"].as_str().unwrap_or_default().into(),
        tool: tool["name"].as_str().unwrap_or_default().into(),
        description: tool["description"].as_str().unwrap_or_default().into(),
        input_schema: tool["input_schema"].clone(),
        output_schema: None,
        hints: Default::default(),
        plugin: "bench".into(),
        grants: Vec::new(),
        can_change_anything: false,
        // Installed tools come with their component's digest (their words are kept).
        digest: "sha256:bench".into(),
        proven: Default::default(),
        reach: Default::default(),
        exposure: Default::default(),
    }
}

fn quantile(values: &mut [Duration], p: f64) -> Duration {
    values.sort();
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let max = number(&args, "--max", 12);
    let tokenizer = Tokenizer::new(
        &arg(&args, "--tokenizer").unwrap_or("o200k_base".into()),
        "",
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/tool_selection");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).expect("read"))
            .expect("JSON")
    };
    let tools: Vec<ToolSpec> = read("tools.json")
        .as_array()
        .expect("a list")
        .iter()
        .map(spec)
        .collect();
    let questions = read("questions.json");
    let questions = questions.as_array().expect("a list");
    let candidates: Vec<&ToolSpec> = tools.iter().collect();
    let system = 60; // Cordon's system prompt with tools (see prompt_overhead).
    let mut hits = 0;
    let mut missed = Vec::new();
    let mut times = Vec::new();
    let mut tokens = Vec::new();
    for q in questions {
        let question = q["question"].as_str().expect("a question");
        let expected = q["tool"].as_str().expect("a tool");
        let messages = [Message::user(question)];
        let mut offered = Vec::new();
        for _ in 0..200 {
            let started = Instant::now();
            let selected = cordon_agent::selection::select(&candidates, max, &messages, None, &[]);
            times.push(started.elapsed());
            offered = selected.map_or_else(|| candidates.clone(), |(t, _)| t);
        }
        if offered.iter().any(|t| t.name == expected) {
            hits += 1;
        } else {
            missed.push(format!("{expected}: {question}"));
        }
        let json: Vec<Value> = offered
            .iter()
            .map(|t| cordon_agent::offer::function(t))
            .collect();
        tokens.push(system + tokenizer.count(&Value::Array(json).to_string()));
    }
    tokens.sort();
    let recall = hits as f64 / questions.len() as f64 * 100.0;
    println!(
        "tool_selection: {} tools, {} questions, {max} offered per request",
        tools.len(),
        questions.len()
    );
    println!(
        "  expected tool offered: {hits} of {} ({recall:.1} %; target >= 95 %)",
        questions.len()
    );
    println!(
        "  selection: p50 {:.1} µs, p99 {:.1} µs (target p50 <= 1 ms)",
        quantile(&mut times, 0.5).as_secs_f64() * 1e6,
        quantile(&mut times, 0.99).as_secs_f64() * 1e6
    );
    println!(
        "  tokens offered per request ({}): median {}, max {} (target <= 2,000)",
        tokenizer.name(),
        tokens[tokens.len() / 2],
        tokens[tokens.len() - 1]
    );
    for m in &missed {
        println!("  missed {m}");
    }
}
