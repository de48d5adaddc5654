//! The scripted server serves steps in order, records requests and misbehaves on request.

use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use serde_json::{Value, json};

async fn post(url: &str, body: Value) -> reqwest::Response {
    // reqwest is built without a TLS crypto provider of its own (see the workspace Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .bearer_auth("k")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The tool calls of a whole (not streamed) completion.
async fn tool_calls_sent(url: &str) -> Value {
    let body: Value = post(url, json!({"stream": false}))
        .await
        .json()
        .await
        .unwrap();
    body["choices"][0]["message"]["tool_calls"].clone()
}

#[tokio::test]
async fn serves_steps_in_order_and_records_requests() {
    let server = ScriptedServer::start(Script::new([
        Step::text("hello there"),
        Step::Status {
            status: 429,
            message: "slow".into(),
            retry_after: Some(3),
        },
        Step::tool_calls(vec![ScriptedCall::new(
            "sql_query",
            json!({"q": "select 1"}),
        )]),
        Step::Cut {
            text: "abcdefgh".into(),
        },
    ]))
    .await
    .unwrap();
    let url = server.base_url();
    let r = post(
        &url,
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    let text = r.text().await.unwrap();
    assert!(
        text.contains("\"content\":\"hello t\"") && text.trim_end().ends_with("data: [DONE]"),
        "{text}"
    );
    let r = post(&url, json!({"stream": true})).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "3");
    let r = post(&url, json!({"stream": false})).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "sql_query"
    );
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"q\":\"select 1\"}"
    );
    let text = post(&url, json!({"stream": true}))
        .await
        .text()
        .await
        .unwrap();
    assert!(!text.contains("[DONE]") && text.contains("abcd"), "{text}");
    let r = post(&url, json!({"stream": true})).await;
    assert_eq!(r.status(), 500);
    assert!(r.text().await.unwrap().contains("script exhausted"));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(reqs[0].messages()[0]["content"], "hi");
    assert_eq!(reqs[0].authorization.as_deref(), Some("Bearer k"));
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn calls_can_share_an_id_or_have_none() {
    let calls = || {
        vec![
            ScriptedCall::with_id("dup", "a", json!({})),
            ScriptedCall::with_id("dup", "b", json!({})),
            ScriptedCall::without_id("c", json!({})),
        ]
    };
    let server = ScriptedServer::start(Script::new([
        Step::tool_calls(calls()),
        Step::tool_calls(calls()),
    ]))
    .await
    .unwrap();
    let url = server.base_url();
    let text = post(&url, json!({"stream": true}))
        .await
        .text()
        .await
        .unwrap();
    let first_deltas: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]
                .as_object()
                .cloned()
        })
        .filter(|d| d.contains_key("type"))
        .map(Value::Object)
        .collect();
    assert_eq!(first_deltas.len(), 3, "{text}");
    assert_eq!(first_deltas[0]["id"], "dup");
    assert_eq!(first_deltas[1]["id"], "dup");
    assert!(first_deltas[2].get("id").is_none(), "{}", first_deltas[2]);
    let sent = &tool_calls_sent(&url).await;
    assert_eq!(
        (&sent[0]["id"], &sent[1]["id"]),
        (&json!("dup"), &json!("dup"))
    );
    assert!(sent[2].get("id").is_none(), "{sent}");
}

#[test]
fn script_files_parse_with_clear_errors() {
    let dir = tempfile_dir();
    let good = dir.join("good.json");
    std::fs::write(&good, r#"{"steps": [{"kind": "text", "text": "x"}, {"kind": "hermes", "calls": [{"name": "a", "arguments": {}}]}, {"kind": "tool_calls", "calls": [{"name": "a", "arguments": {}, "no_id": true}]}]}"#).unwrap();
    assert_eq!(
        Script::from_file(good.to_str().unwrap())
            .unwrap()
            .steps
            .len(),
        3
    );
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"steps": [{"kind": "txt", "text": "x"}]}"#).unwrap();
    let e = Script::from_file(bad.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.json") && e.contains("txt"), "{e}");
    let e = Script::from_file("/nonexistent/script.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/script.json"), "{e}");
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("scripted-llm-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test]
async fn by_role_answers_any_number_of_conversations_after_the_steps() {
    let mut script = Script::by_role(
        Step::tool_calls(vec![
            ScriptedCall::new("look", json!({"at": "a"})),
            ScriptedCall::new("look", json!({"at": "b"})),
        ]),
        Step::text("done"),
    );
    script.steps.push(Step::text("first"));
    let server = ScriptedServer::start(script).await.unwrap();
    let url = server.base_url();
    let user = json!({"stream": false, "messages": [{"role": "user", "content": "q"}]});
    let after_tool = json!({"stream": false, "messages": [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "r"},
    ]});
    let message = |body: Value| body["choices"][0]["message"].clone();
    // The steps come first, whatever the role.
    let first: Value = post(&url, user.clone()).await.json().await.unwrap();
    assert_eq!(message(first)["content"], "first");
    // Then the same answers for every conversation, in any order, with fresh call ids.
    for round in 0..3 {
        let calls: Value = post(&url, user.clone()).await.json().await.unwrap();
        let calls = message(calls)["tool_calls"].clone();
        assert_eq!(calls.as_array().unwrap().len(), 2, "{calls}");
        assert_eq!(calls[1]["function"]["arguments"], "{\"at\":\"b\"}");
        assert_eq!(calls[0]["id"], format!("call_{}_0", 2 + 2 * round));
        let done: Value = post(&url, after_tool.clone()).await.json().await.unwrap();
        assert_eq!(message(done)["content"], "done");
    }
    // Streamed answers too.
    let text = post(
        &url,
        json!({"stream": true, "messages": [{"role": "tool", "content": "r"}]}),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        text.contains("\"content\":\"done\"") && text.contains("[DONE]"),
        "{text}"
    );
    assert_eq!(server.served(), 8);
    assert_eq!(server.requests().len(), 8);
    // A long run forgets what it recorded; the count goes on, and so do the call ids.
    server.forget_requests();
    assert!(server.requests().is_empty());
    let calls: Value = post(&url, user.clone()).await.json().await.unwrap();
    assert_eq!(message(calls)["tool_calls"][0]["id"], "call_9_0");
    assert_eq!((server.served(), server.requests().len()), (9, 1));
}

/// The same answer made again and again names each call in its arguments, streamed or not, so
/// what the calls did can be told apart by whatever they reached.
#[tokio::test]
async fn call_id_in_the_arguments_is_the_calls_own_id() {
    let server = ScriptedServer::start(Script::by_role(
        Step::tool_calls(vec![
            ScriptedCall::new("hit", json!({"url": "http://service/call/{call_id}"})),
            ScriptedCall::with_id("mine", "hit", json!({"url": "/call/{call_id}"})),
            ScriptedCall::without_id("hit", json!({"url": "/call/{call_id}"})),
        ]),
        Step::text("done"),
    ))
    .await
    .unwrap();
    let url = server.base_url();
    let sent = &tool_calls_sent(&url).await;
    let arguments = |i: usize| {
        sent[i]["function"]["arguments"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(arguments(0), r#"{"url":"http://service/call/call_1_0"}"#);
    assert_eq!(sent[0]["id"], "call_1_0");
    assert_eq!(arguments(1), r#"{"url":"/call/mine"}"#);
    assert_eq!(arguments(2), r#"{"url":"/call/call_1_2"}"#);
    // Streamed, the argument fragments add up to the same text, with the next request's ids.
    let text = post(&url, json!({"stream": true}))
        .await
        .text()
        .await
        .unwrap();
    let fragments: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0)
        .filter_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(fragments, r#"{"url":"http://service/call/call_2_0"}"#);
}
