//! Fuzz targets for every parser that takes untrusted input: what a model server, an MCP or
//! HTTP client, a registry, a component or a user's file gives Cordon. Each target is a
//! function of bytes that must never panic, and checks what must hold of what it read (a
//! grant written back reads as itself, streamed text is the answer's text, arguments taken
//! are arguments the schema allows).
//!
//! AFL++ runs them through `cargo afl` (`make fuzz`; the binary is `src/bin/cordon-fuzz.rs`);
//! `cargo test` replays each target's corpus (`corpus/<target>/`), the inputs that once broke
//! it (`regressions/<target>/`) and a few thousand mutations of them (`tests/smoke.rs`).

use std::path::PathBuf;
use std::sync::OnceLock;

use cordon_core::{Grant, LimitKind, Limits, parse_bytes, parse_duration};

/// One fuzz target.
pub struct Target {
    /// Its name: the directory of its corpus, and what `cordon-fuzz` is told to run.
    pub name: &'static str,
    /// Reads one input.
    pub run: fn(&[u8]),
    /// What it reads.
    pub what: &'static str,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "grant",
        run: grant,
        what: "grant syntax (`fs:/data:ro:public`, `net:https://…`, `env:…`)",
    },
    Target {
        name: "limits",
        run: limits,
        what: "limit syntax (`time=5s`, `memory=64MiB`)",
    },
    Target {
        name: "completion_stream",
        run: cordon_agent::fuzzing::completion_stream,
        what: "a model server's SSE stream and the assembly of its tool-call deltas",
    },
    Target {
        name: "completion",
        run: cordon_agent::fuzzing::completion,
        what: "a model server's whole chat completion",
    },
    Target {
        name: "text_tool_calls",
        run: cordon_agent::fuzzing::text_tool_calls,
        what: "tool calls written in a model's text",
    },
    Target {
        name: "config",
        run: cordon_agent::fuzzing::config,
        what: "`cordon.toml`, policy rules included",
    },
    Target {
        name: "mcp_stdio",
        run: cordon_mcp::fuzzing::stdio_lines,
        what: "MCP stdio framing and JSON-RPC messages",
    },
    Target {
        name: "api_requests",
        run: cordon_serve::fuzzing::api_requests,
        what: "the HTTP API's request bodies and query strings",
    },
    Target {
        name: "gateway_requests",
        run: cordon_serve::fuzzing::gateway_requests,
        what: "the gateway's Chat Completions and Responses request bodies",
    },
    Target {
        name: "token_file",
        run: cordon_serve::fuzzing::token_file,
        what: "`cordon serve`'s token file",
    },
    Target {
        name: "oci_manifest",
        run: cordon_home::fuzzing::manifest,
        what: "OCI manifests a registry serves (components and signatures)",
    },
    Target {
        name: "signature",
        run: cordon_home::fuzzing::signature,
        what: "signature payloads, signatures and public key files",
    },
    Target {
        name: "references",
        run: cordon_home::fuzzing::references,
        what: "install sources, OCI references and repository patterns",
    },
    Target {
        name: "typed_arguments",
        run: typed_arguments,
        what: "JSON arguments converted to a component's typed values and back",
    },
    Target {
        name: "component_docs",
        run: cordon_runtime::fuzzing::component_docs,
        what: "the WIT a component carries for its doc comments",
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The component whose typed exports `typed_arguments` converts arguments for:
/// `CORDON_FUZZ_TYPED`, or the `typed` fixture `make fixtures` builds.
pub fn typed_component() -> PathBuf {
    std::env::var_os("CORDON_FUZZ_TYPED").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/fixtures/typed.wasm"),
        PathBuf::from,
    )
}

fn typed_arguments(data: &[u8]) {
    static TYPED: OnceLock<cordon_runtime::fuzzing::Fuzzed> = OnceLock::new();
    let typed = TYPED.get_or_init(|| {
        let path = typed_component();
        let wasm = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the typed fixture {} ({e}): run `make fixtures`, or set \
                 CORDON_FUZZ_TYPED",
                path.display()
            )
        });
        cordon_runtime::fuzzing::Fuzzed::load(&wasm)
    });
    typed.arguments(data);
}

/// A grant that reads is written back as text that reads as the same grant.
fn grant(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(grant) = text.parse::<Grant>() {
        let written = grant.to_string();
        let again: Grant = written
            .parse()
            .unwrap_or_else(|e| panic!("{text:?} read as {written:?}, which does not read: {e}"));
        assert_eq!(
            again, grant,
            "{text:?} read as {written:?}, which reads otherwise"
        );
    }
}

/// Limits that read are written back as text that reads as the same limits.
fn limits(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_bytes(text);
    let _ = parse_duration(text);
    let _ = text.parse::<LimitKind>();
    let mut limits = Limits::default();
    if limits.apply(text).is_ok() {
        let written = limits.to_string();
        let again = Limits::default()
            .with_overrides(written.split(' '))
            .unwrap_or_else(|e| {
                panic!("{text:?} set limits written {written:?}, which do not read: {e}")
            });
        assert_eq!(
            again.to_string(),
            written,
            "{text:?} set limits that read otherwise"
        );
    }
}
