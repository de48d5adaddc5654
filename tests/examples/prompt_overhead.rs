//! Cordon's own prompt overhead: everything a request to the model carries besides the user's
//! messages and the tools' results (the system prompt, the tool list), in tokens, with the 3
//! tools of `sql`, the 8 bundled tools, and 50 or more (the bundled tools and the test
//! fixtures), for native and text (Hermes) tool calls.
//!
//! Each set is installed into a fresh home, `cordon run` asks a scripted model one question,
//! and the request the model got is measured: its system messages and its `tools`, in tokens
//! of `--tokenizer` (o200k_base; `estimate` is characters / 4, what Cordon uses for models it
//! has no tokenizer for).
//!
//! `cargo run --release -p cordon-tests --example prompt_overhead -- [--cordon
//! target/release/cordon] [--tokenizer o200k_base]`. Run it against two builds to compare.

use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_agent::context::Tokenizer;
use cordon_scripted_llm::{Script, ScriptedServer, Step};
use cordon_tests::bench::{arg, file_arg};
use serde_json::Value;

/// Installs `wasm` into `home`.
fn install(bin: &Path, home: &Path, wasm: &Path) {
    let out = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(["plugin", "install"])
        .arg(wasm)
        .arg("--yes")
        .output()
        .expect("run cordon plugin install");
    assert!(
        out.status.success(),
        "installing {}: {}",
        wasm.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first request `cordon run` sends with `plugins` installed, with `config`.
async fn first_request(bin: &Path, plugins: &[PathBuf], config: &str) -> Value {
    let home = tempfile::Builder::new()
        .prefix("cordon-prompt-")
        .tempdir()
        .expect("a temporary home");
    for wasm in plugins {
        install(bin, home.path(), wasm);
    }
    let config_path = home.path().join("bench.toml");
    std::fs::write(&config_path, config).expect("write the config");
    let model = ScriptedServer::start(Script::new([Step::text("Hello.")]))
        .await
        .expect("the scripted model starts");
    let out = tokio::process::Command::new(bin)
        .arg("--home")
        .arg(home.path())
        .arg("run")
        .arg("--config")
        .arg(&config_path)
        .arg("Which tables does the shop database have?")
        .env("CORDON_LLM_URL", model.base_url())
        .env("CORDON_MODEL", "qwen2.5-coder-1.5b")
        .env_remove("CORDON_CONFIG")
        .output()
        .await
        .expect("run cordon run");
    assert!(
        out.status.success(),
        "cordon run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    model.requests()[0].body.clone()
}

/// Chars and tokens of the request's system messages and of its `tools`.
fn overhead(body: &Value, tokenizer: &Tokenizer) -> [(usize, usize); 2] {
    let system: String = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let tools = body.get("tools").map(|t| t.to_string()).unwrap_or_default();
    [system, tools].map(|t| (t.chars().count(), tokenizer.count(&t)))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    let plugins = file_arg(&args, "--plugins", "target/plugins");
    let fixtures = file_arg(&args, "--fixtures", "target/fixtures");
    let setting = arg(&args, "--tokenizer").unwrap_or_else(|| "o200k_base".into());
    let tokenizer = Tokenizer::new(&setting, "");
    let estimate = Tokenizer::new("estimate", "");
    let sql = vec![plugins.join("sql.wasm")];
    let bundled = vec![
        plugins.join("sql.wasm"),
        plugins.join("files.wasm"),
        plugins.join("python.wasm"),
    ];
    let mut many = bundled.clone();
    many.extend(
        [
            "typed", "typed-c", "outputs", "greeter", "writer", "probe", "escapes", "noop",
        ]
        .map(|f| fixtures.join(format!("{f}.wasm"))),
    );
    println!(
        "prompt_overhead: {} ({} tokens; estimate = characters / 4)",
        bin.display(),
        tokenizer.name()
    );
    println!("| tools | tool calls | system prompt | tools | overhead | overhead (estimate) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (set, format) in [
        (&sql, "native"),
        (&bundled, "native"),
        (&bundled, "hermes"),
        (&many, "native"),
    ] {
        let config = format!("[llm]\ntool_format = \"{format}\"\n");
        let body = first_request(&bin, set, &config).await;
        let offered = body["tools"].as_array().map_or(0, Vec::len);
        let [system, tools] = overhead(&body, &tokenizer);
        let [es, et] = overhead(&body, &estimate);
        let count = if format == "native" {
            offered
        } else {
            // Text tool calls list the tools in the system prompt.
            body["messages"][0]["content"]
                .as_str()
                .map_or(0, |s| s.matches("{\"type\":\"function\"").count())
        };
        println!(
            "| {count} | {format} | {} chars, {} tokens | {} chars, {} tokens | {} tokens | {} tokens |",
            system.0,
            system.1,
            tools.0,
            tools.1,
            system.1 + tools.1,
            es.1 + et.1
        );
    }
}
