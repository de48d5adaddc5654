//! Results written through `cordon:tool/result-stream` (WIT 0.1.4): kept in a file as they
//! come, held to the output limit with what the call returns, and refused when they break the
//! contract (two kinds, JSON that is not JSON).

use cordon_core::{Content, LimitKind, Limits, Written};
use cordon_runtime::{CallError, Plugin, Sandbox};
use serde_json::json;
use std::sync::OnceLock;

use crate::common::{call, load, shared};

fn writer() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| load("writer"))
}

fn with_output(limit: &str) -> Sandbox {
    let mut limits = Limits::default();
    limits.apply(&format!("output={limit}")).unwrap();
    Sandbox {
        limits,
        ..Sandbox::default()
    }
}

fn written(content: &[Content]) -> &Written {
    match content.first() {
        Some(Content::Written(w)) => w,
        other => panic!("the first piece is not written: {other:?}"),
    }
}

#[tokio::test]
async fn a_written_result_is_one_piece_before_the_returned_ones() {
    let _process = shared();
    let out = call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "text", "first": "rows:\n", "chunk": "a row of text\n", "times": 100_000, "returned": "done"}),
    )
    .await
    .unwrap();
    let piece = written(&out.content);
    assert!(!piece.is_json());
    assert_eq!(piece.len(), 6 + 14 * 100_000);
    let text = piece.to_text().unwrap();
    assert!(text.starts_with("rows:\na row of text\n") && text.ends_with("a row of text\n"));
    assert_eq!(out.content[1], Content::Text("done".into()));

    let out = call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "json", "first": "{\"n\":[", "chunk": "1,", "times": 50_000, "last": "1]}"}),
    )
    .await
    .unwrap();
    let piece = written(&out.content);
    assert!(piece.is_json() && out.content.len() == 1);
    let value: serde_json::Value = serde_json::from_str(&piece.to_text().unwrap()).unwrap();
    assert_eq!(value["n"].as_array().unwrap().len(), 50_001);
}

#[tokio::test]
async fn the_output_limit_counts_written_and_returned_bytes_together() {
    let _process = shared();
    let e = call(
        writer(),
        &with_output("10KiB"),
        "write",
        json!({"kind": "text", "chunk": "x".repeat(1000), "times": 11}),
    )
    .await
    .unwrap_err();
    match &e {
        CallError::LimitExceeded { limit, detail } => {
            assert_eq!(*limit, LimitKind::Output);
            assert!(
                detail.contains("wrote a result of more than") && detail.contains("10KiB"),
                "{e}"
            );
        }
        other => panic!("{other}"),
    }
    // Within the limit written, past it with the returned piece.
    let e = call(
        writer(),
        &with_output("10KiB"),
        "write",
        json!({"kind": "text", "chunk": "x".repeat(1000), "times": 10, "returned": "y".repeat(500)}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, CallError::LimitExceeded { detail, .. } if detail.contains("10000 written, 500 returned")),
        "{e}"
    );
    // Exactly at the limit is fine.
    let out = call(
        writer(),
        &with_output("10KiB"),
        "write",
        json!({"kind": "text", "chunk": "x".repeat(1024), "times": 10}),
    )
    .await
    .unwrap();
    assert_eq!(written(&out.content).len(), 10 * 1024);
}

#[tokio::test]
async fn broken_written_results_are_refused_and_a_failed_call_keeps_nothing() {
    let _process = shared();
    let e = call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "mixed", "first": "text", "last": "1"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, CallError::Malformed(m) if m.contains("as text and then as json")),
        "{e}"
    );
    let e = call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "json", "first": "{\"open\": ["}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, CallError::Malformed(m) if m.contains("written result of tool `write` is marked json but is not JSON")),
        "{e}"
    );
    // Refused exactly where a returned piece is: 127 levels parse, 128 do not.
    let nest = |n: usize| "[".repeat(n) + &"]".repeat(n);
    call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "json", "first": nest(127)}),
    )
    .await
    .unwrap();
    let deep = nest(128);
    let e = call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "json", "first": deep}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, CallError::Malformed(m) if m.contains("nested deeper than 128 levels")),
        "{e}"
    );
    // The tool's own error wins over what it wrote, which goes with the call.
    let e = call(
        writer(),
        &Sandbox::default(),
        "write",
        json!({"kind": "text", "first": "partial", "fail": true}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, CallError::Tool(t) if t.message.contains("gave up")),
        "{e}"
    );
}
