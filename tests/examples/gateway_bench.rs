//! Cordon's OpenAI-compatible gateway, measured against its upstream in the same run.
//!
//! 1. **Time to first token.** The same scripted upstream (streaming a text answer) is asked
//!    directly and through `cordon serve`'s `/v1/chat/completions` (a new session per request,
//!    as a client that sends its history gets), alternately, `--requests` times each: the time
//!    from sending the request to the first content delta. Medians, and what the gateway adds
//!    (target ≤ 1 ms at p50).
//! 2. **Continuing a session by its history.** Alternately, `--requests` times each: a new
//!    conversation (one user message: a new session), and its next request (the whole
//!    history and a new message), which the gateway matches to that session only after
//!    checking the requester, the creator and the session's recorded conversation. Medians of
//!    the time to first token of each, and their ratio.
//! 3. **A client's parameters.** Alternately, `--requests` times each: a request without
//!    parameters, and one with the sampling and output parameters clients send (checked,
//!    bounded by `[gateway.parameters]`, recorded on the turn, sent upstream). Medians, ratio.
//! 4. **Concurrent streams.** `--concurrent` (200) streaming requests at once through the
//!    gateway: all must complete with the whole answer; the server's peak resident memory
//!    (target < 512 MiB).
//!
//! `cargo run --release -p cordon-tests --example gateway_bench -- [--cordon
//! target/release/cordon] [--requests 300] [--concurrent 200]`. Everything listens on
//! 127.0.0.1; every loop is bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_scripted_llm::{Script, ScriptedServer, Step};
use cordon_tests::bench::{TOKEN, file_arg, number, start_serve, status_kib, write_token};
use futures::StreamExt;
use serde_json::json;

/// The answer the upstream streams, 7 characters a delta.
const ANSWER: &str = "The gateway streamed this answer through Cordon, delta by delta.";
/// The longest the concurrent requests may take together.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// One streaming request: the time to the first content delta, and the whole text.
async fn stream(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    token: Option<&str>,
) -> Result<(Duration, String), String> {
    let messages = json!([{"role": "user", "content": "Say something."}]);
    stream_messages(client, url, model, token, messages, json!({}))
        .await
        .map(|(t, text, _)| (t, text))
}

/// One streaming request of `messages`, with `extra` fields in the body: the time to the first
/// content delta, the whole text and the session the response names.
async fn stream_messages(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    token: Option<&str>,
    messages: serde_json::Value,
    extra: serde_json::Value,
) -> Result<(Duration, String, String), String> {
    let mut body = json!({
        "model": model,
        "stream": true,
        "messages": messages,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let start = Instant::now();
    let mut request = client.post(url).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let session = response
        .headers()
        .get("x-cordon-session")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if !response.status().is_success() {
        let status = response.status();
        return Err(format!(
            "{status}: {}",
            response.text().await.unwrap_or_default()
        ));
    }
    let mut first = None;
    let mut text = String::new();
    let mut buffer = String::new();
    let mut body = response.bytes_stream();
    while let Some(piece) = body.next().await {
        buffer.push_str(&String::from_utf8_lossy(&piece.map_err(|e| e.to_string())?));
        while let Some(end) = buffer.find('\n') {
            let line = buffer[..end].trim().to_string();
            buffer.drain(..=end);
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                return first
                    .map(|f| (f, text.clone(), session.clone()))
                    .ok_or_else(|| "no content before [DONE]".to_string());
            }
            let chunk: serde_json::Value =
                serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
            if let Some(delta) = chunk["choices"][0]["delta"]["content"].as_str()
                && !delta.is_empty()
            {
                first.get_or_insert_with(|| start.elapsed());
                text.push_str(delta);
            }
        }
    }
    Err("the stream ended without [DONE]".to_string())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    let n = number(&args, "--requests", 300).max(10);
    let concurrent = number(&args, "--concurrent", 200).max(1);
    let dir = tempfile::tempdir().expect("temporary home");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home directory");
    write_token(&home);

    let answer = Step::Text {
        text: ANSWER.to_string(),
        chunk: Some(7),
        delay_ms: None,
        usage: None,
    };
    let model = ScriptedServer::start(Script::by_role(answer.clone(), answer))
        .await
        .expect("start the scripted model");
    let model_url = model.base_url();
    let (serve, base) = start_serve(
        &bin,
        &home,
        &["--llm-url", &model_url, "--model", "scripted"],
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrent)
        .build()
        .expect("an HTTP client");
    let direct = format!("{model_url}/chat/completions");
    let gateway = format!("{base}/v1/chat/completions");

    // 1. Time to first token, alternating rounds so drift affects both alike.
    for _ in 0..20 {
        stream(&client, &direct, "scripted", None)
            .await
            .expect("direct");
        stream(&client, &gateway, "scripted", Some(TOKEN))
            .await
            .expect("gateway");
    }
    let (mut direct_times, mut gateway_times) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let (t, text) = stream(&client, &direct, "scripted", None)
            .await
            .expect("direct");
        assert_eq!(text, ANSWER);
        direct_times.push(t);
        let (t, text) = stream(&client, &gateway, "scripted", Some(TOKEN))
            .await
            .expect("gateway");
        assert_eq!(text, ANSWER);
        gateway_times.push(t);
    }
    let (d, g) = (median(direct_times), median(gateway_times));
    println!(
        "OpenAI gateway, time to first token ({n} streaming requests each, a new session each):"
    );
    println!("  the scripted upstream, directly      {:>10}", ms(d));
    println!("  through cordon serve /v1             {:>10}", ms(g));
    println!(
        "  added by the gateway (p50)           {:>10}   (target ≤ 1 ms)",
        ms(g.saturating_sub(d))
    );

    // 2. A new session against continuing one by its history, alternately.
    let (mut new_times, mut continued_times) = (Vec::new(), Vec::new());
    for i in 0..n {
        let opening = json!([{"role": "user", "content": format!("Conversation {i}.")}]);
        let (t, text, session) = stream_messages(
            &client,
            &gateway,
            "scripted",
            Some(TOKEN),
            opening.clone(),
            json!({}),
        )
        .await
        .expect("a new conversation");
        new_times.push(t);
        let mut next = opening;
        if let Some(list) = next.as_array_mut() {
            list.push(json!({"role": "assistant", "content": text}));
            list.push(json!({"role": "user", "content": "And then?"}));
        }
        let (t, _, again) =
            stream_messages(&client, &gateway, "scripted", Some(TOKEN), next, json!({}))
                .await
                .expect("the conversation's next request");
        assert_eq!(again, session, "the history continues its own session");
        continued_times.push(t);
    }
    let (fresh, continued) = (median(new_times), median(continued_times));
    println!("OpenAI gateway, a new session against continuing one by its history ({n} each):");
    println!("  a new conversation (a new session)   {:>10}", ms(fresh));
    println!(
        "  its next request (history matched)   {:>10}",
        ms(continued)
    );
    println!(
        "  continued / new                      {:>9.2}x",
        continued.as_secs_f64() / fresh.as_secs_f64()
    );

    // 3. A client's parameters, alternately with none.
    let parameters = json!({
        "max_tokens": 4096, "temperature": 0.2, "top_p": 0.9, "stop": ["\n\n\n"], "seed": 7,
        "presence_penalty": 0.1, "frequency_penalty": 0.1, "parallel_tool_calls": true,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
            "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}},
    });
    let (mut plain_times, mut set_times) = (Vec::new(), Vec::new());
    for i in 0..n {
        let ask = json!([{"role": "user", "content": format!("Parameters {i}.")}]);
        let (t, ..) = stream_messages(
            &client,
            &gateway,
            "scripted",
            Some(TOKEN),
            ask.clone(),
            json!({}),
        )
        .await
        .expect("a request without parameters");
        plain_times.push(t);
        let (t, ..) = stream_messages(
            &client,
            &gateway,
            "scripted",
            Some(TOKEN),
            ask,
            parameters.clone(),
        )
        .await
        .expect("a request with parameters");
        set_times.push(t);
    }
    let last = model.requests().pop().expect("the upstream was asked");
    assert_eq!(
        (&last.body["seed"], &last.body["max_tokens"]),
        (&json!(7), &json!(4096)),
        "the parameters reached the upstream"
    );
    let (plain, set) = (median(plain_times), median(set_times));
    println!("OpenAI gateway, a client's parameters ({n} each, a new session each):");
    println!("  no parameters                        {:>10}", ms(plain));
    println!("  ten parameters, a JSON schema        {:>10}", ms(set));
    println!(
        "  with / without                       {:>9.2}x",
        set.as_secs_f64() / plain.as_secs_f64()
    );

    // 4. Concurrent streams.
    let pid = serve.0.id();
    let started = Instant::now();
    let client = Arc::new(client);
    let gateway = Arc::new(gateway);
    let tasks: Vec<_> = (0..concurrent)
        .map(|_| {
            let (client, gateway) = (client.clone(), gateway.clone());
            tokio::spawn(async move { stream(&client, &gateway, "scripted", Some(TOKEN)).await })
        })
        .collect();
    let results = tokio::time::timeout(RUN_TIMEOUT, futures::future::join_all(tasks))
        .await
        .expect("the concurrent streams finish within the run timeout");
    let elapsed = started.elapsed();
    let mut failures = Vec::new();
    let mut ok = 0;
    for r in results {
        match r {
            Ok(Ok((_, text))) if text == ANSWER => ok += 1,
            Ok(Ok((_, text))) => failures.push(format!("a partial answer: {text:?}")),
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let peak = status_kib(pid, "VmHWM:").unwrap_or(0);
    println!("OpenAI gateway, {concurrent} streaming requests at once:");
    println!(
        "  {ok} complete, {} failed in {:.2} s: {:.0} requests/s",
        failures.len(),
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  cordon serve peak RSS (VmHWM) {:.1} MiB (target < 512 MiB)",
        peak as f64 / 1024.0
    );
    if let Some(first) = failures.first() {
        eprintln!("first failure: {first}");
        std::process::exit(1);
    }
    drop(serve);
}
