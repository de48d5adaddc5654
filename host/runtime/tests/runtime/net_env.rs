//! Environment and network grants attacked from inside the sandbox.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use cordon_core::{LimitKind, Limits};
use cordon_runtime::{CallError, EnvSource, Sandbox};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::test]
async fn only_granted_env_vars_are_visible() {
    let _process = alone();
    // SAFETY: the test runs alone in the process (no other thread reads the environment), and
    // these lines are the only environment writers of the test binary.
    unsafe {
        std::env::set_var("CORDON_TEST_SECRET", "s3cret");
        std::env::set_var("CORDON_TEST_GRANTED", "yes");
        std::env::remove_var("CORDON_TEST_UNSET");
    }
    let sb = sandbox(&[
        "env:CORDON_TEST_GRANTED".into(),
        "env:CORDON_TEST_UNSET".into(),
    ]);
    let env = |name: &'static str, sb: Sandbox| async move {
        json_of(
            &call(probe(), &sb, "env", json!({ "name": name }))
                .await
                .unwrap(),
        )["ok"]
            .clone()
    };
    let v = env("CORDON_TEST_SECRET", sb.clone()).await;
    assert_eq!(v["value"], Value::Null, "{v}");
    assert_eq!(
        v["names"],
        json!(["CORDON_TEST_GRANTED"]),
        "only granted, set variables exist"
    );
    assert_eq!(v["args"], json!([]), "no inherited arguments");
    assert_eq!(env("CORDON_TEST_GRANTED", sb.clone()).await["value"], "yes");
    assert_eq!(
        env("CORDON_TEST_UNSET", sb.clone()).await["value"],
        Value::Null
    );
    assert_eq!(env("PATH", sb.clone()).await["value"], Value::Null);

    // Values are read at call time.
    unsafe { std::env::set_var("CORDON_TEST_GRANTED", "changed") };
    assert_eq!(
        env("CORDON_TEST_GRANTED", sb.clone()).await["value"],
        "changed"
    );

    // No grants: nothing at all.
    assert_eq!(
        env("CORDON_TEST_GRANTED", Sandbox::default()).await["names"],
        json!([])
    );

    // A map source passes granted names only.
    let mut map = std::collections::BTreeMap::new();
    map.insert("CORDON_TEST_GRANTED".to_string(), "from-map".to_string());
    map.insert("CORDON_TEST_SECRET".to_string(), "leak".to_string());
    let sb = Sandbox {
        env: EnvSource::Map(map),
        ..sb
    };
    let v = env("CORDON_TEST_SECRET", sb.clone()).await;
    assert_eq!(v["names"], json!(["CORDON_TEST_GRANTED"]));
    assert_eq!(env("CORDON_TEST_GRANTED", sb).await["value"], "from-map");
}

/// A tiny HTTP/1.1 server: `/redirect/<port>` answers 302 to that port, `/hang` never answers,
/// anything else 200 with `hello from <port>`. Counts requests so tests can prove a refused
/// request never arrived.
async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut len = 0;
                while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf[len..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => len += n,
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let head = String::from_utf8_lossy(&buf[..len]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let reply = if let Some(port) = path.strip_prefix("/redirect/") {
                    format!(
                        "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                } else if path == "/hang" {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return;
                } else {
                    let body = format!("hello from {}", addr.port());
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (addr, hits)
}

async fn http(sb: &Sandbox, args: Value) -> Result<Value, String> {
    match call(probe(), sb, "http", args).await {
        Ok(out) => Ok(json_of(&out)["ok"].clone()),
        Err(CallError::Tool(e)) => Err(e.message),
        Err(other) => Err(format!("host error: {other}")),
    }
}

#[tokio::test]
async fn http_allowlist_is_enforced_per_request() {
    let _process = shared();
    let (a, a_hits) = server().await;
    let (b, b_hits) = server().await;
    let sb = sandbox(&[format!("net:http://127.0.0.1:{}", a.port())]);

    // Granted origin works.
    let v = http(
        &sb,
        json!({"url": format!("http://127.0.0.1:{}/x", a.port())}),
    )
    .await
    .unwrap();
    assert_eq!(v["status"], 200);
    assert_eq!(v["body"], format!("hello from {}", a.port()));
    assert_eq!(a_hits.load(Ordering::SeqCst), 1);

    // Other port, other host spelling, https on the granted port: refused before connecting.
    for url in [
        format!("http://127.0.0.1:{}/", b.port()),
        format!("http://localhost:{}/", a.port()),
        format!("https://127.0.0.1:{}/", a.port()),
        format!("http://127.0.0.2:{}/", a.port()),
    ] {
        let e = http(&sb, json!({ "url": url })).await.unwrap_err();
        assert!(e.contains("HttpRequestDenied"), "{url}: {e}");
    }

    // The host does not follow redirects itself ...
    let v = http(
        &sb,
        json!({"url": format!("http://127.0.0.1:{}/redirect/{}", a.port(), b.port())}),
    )
    .await
    .unwrap();
    assert_eq!(v["status"], 302);
    // ... and a guest that follows one makes a new request, checked again.
    let e = http(
        &sb,
        json!({"url": format!("http://127.0.0.1:{}/redirect/{}", a.port(), b.port()), "follow_redirects": true}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("HttpRequestDenied"), "{e}");
    // A redirect back to the granted origin is followed fine.
    let v = http(
        &sb,
        json!({"url": format!("http://127.0.0.1:{}/redirect/{}", a.port(), a.port()), "follow_redirects": true}),
    )
    .await
    .unwrap();
    assert_eq!(v["status"], 200);

    // Tricks: an authority differing from the URL, an absolute-form target, a Host header.
    let granted_url = format!("http://127.0.0.1:{}/", a.port());
    for extra in [
        json!({"authority": format!("127.0.0.1:{}", b.port())}),
        json!({"authority": format!("127.0.0.1:{}@127.0.0.1:{}", a.port(), b.port())}),
        json!({"authority": format!("127.0.0.1:{}:{}", a.port(), b.port())}),
        json!({"path_with_query": format!("http://127.0.0.1:{}/", b.port())}),
        json!({"headers": [["host", format!("127.0.0.1:{}", b.port())]]}),
    ] {
        let mut args = json!({ "url": granted_url });
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        let r = http(&sb, args.clone()).await;
        assert!(r.is_err(), "{args}: {r:?}");
    }
    assert_eq!(
        b_hits.load(Ordering::SeqCst),
        0,
        "the non-granted server was reached"
    );

    // No grant: nothing.
    let e = http(&Sandbox::default(), json!({ "url": granted_url }))
        .await
        .unwrap_err();
    assert!(e.contains("HttpRequestDenied"), "{e}");
    assert_eq!(b_hits.load(Ordering::SeqCst), 0);
    still_serves().await;
}

#[tokio::test]
async fn names_are_resolved_by_the_host_and_checked() {
    let _process = shared();
    let (a, hits) = server().await;
    // `localhost` is this machine by definition: its loopback answers are used.
    let sb = sandbox(&[format!("net:http://localhost:{}", a.port())]);
    let v = http(
        &sb,
        json!({"url": format!("http://localhost:{}/x", a.port())}),
    )
    .await
    .unwrap();
    assert_eq!(v["status"], 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // A granted name that does not resolve fails at DNS, with nothing sent.
    let sb = sandbox(&["net:http://no-such-host.invalid".to_string()]);
    let e = http(&sb, json!({"url": "http://no-such-host.invalid/"}))
        .await
        .unwrap_err();
    assert!(
        e.contains("DnsError") || e.contains("DestinationNotFound"),
        "{e}"
    );
    still_serves().await;
}

#[tokio::test]
async fn a_call_may_have_32_connections_open() {
    let _process = shared();
    let (a, _) = server().await;
    let sb = sandbox(&[format!("net:http://127.0.0.1:{}", a.port())]);
    // 40 requests to a server that never answers: 32 stay open, the rest are refused with
    // wasi:http's connection-limit-reached; once they are dropped, a request goes through.
    let out = call(
        probe(),
        &sb,
        "http_many",
        json!({
            "url": format!("http://127.0.0.1:{}/hang", a.port()),
            "count": 40,
            "then_url": format!("http://127.0.0.1:{}/", a.port()),
        }),
    )
    .await
    .unwrap();
    let out = json_of(&out)["ok"].clone();
    assert_eq!(out["pending"], json!(32), "{out}");
    assert_eq!(
        out["failures"],
        json!(vec!["ErrorCode::ConnectionLimitReached"; 8]),
        "{out}"
    );
    assert_eq!(out["then"], json!(200), "{out}");
    // The budget is per call.
    let out = http(
        &sb,
        json!({"url": format!("http://127.0.0.1:{}/", a.port())}),
    )
    .await;
    assert_eq!(out.unwrap()["status"], json!(200));
}

#[tokio::test]
async fn a_hanging_server_is_cut_off_by_the_time_limit() {
    let _process = shared();
    let (a, _) = server().await;
    let mut sb = sandbox(&[format!("net:http://127.0.0.1:{}", a.port())]);
    sb.limits = Limits::default().with_overrides(["time=500ms"]).unwrap();
    let start = Instant::now();
    let e = call(
        probe(),
        &sb,
        "http",
        json!({"url": format!("http://127.0.0.1:{}/hang", a.port())}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            CallError::LimitExceeded {
                limit: LimitKind::Time,
                ..
            }
        ),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    still_serves().await;
}

async fn tcp_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(b"pong\n").await;
            });
        }
    });
    (addr, hits)
}

#[tokio::test]
async fn tcp_connects_only_to_granted_addresses() {
    let _process = shared();
    let (c, c_hits) = tcp_server().await;
    let (d, d_hits) = tcp_server().await;
    let tcp = |sb: Sandbox, addr: SocketAddr| async move {
        match call(probe(), &sb, "tcp", json!({"addr": addr.to_string()})).await {
            Ok(out) => Ok(json_of(&out)["ok"].clone()),
            Err(CallError::Tool(e)) => Err(e.message),
            Err(other) => panic!("{other}"),
        }
    };
    tcp(Sandbox::default(), c).await.unwrap_err();
    let sb = sandbox(&[format!("net:tcp://{c}")]);
    let v = tcp(sb.clone(), c).await.unwrap();
    assert_eq!(v["reply"], "pong\n");
    tcp(sb.clone(), d).await.unwrap_err();
    // An HTTP grant for the same port is not a socket grant.
    tcp(sandbox(&[format!("net:http://{d}")]), d)
        .await
        .unwrap_err();
    assert_eq!(c_hits.load(Ordering::SeqCst), 1);
    assert_eq!(d_hits.load(Ordering::SeqCst), 0);
    still_serves().await;
}

/// A server that accepts connections and holds them open until the peer closes.
async fn holding_tcp_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_call_may_hold_32_tcp_sockets() {
    let _process = shared();
    let a = holding_tcp_server().await;
    let sb = sandbox(&[format!("net:tcp://{a}")]);
    // Every socket is a descriptor of the host process: 40 held at once would be 40, and a
    // loop of them would run the host out. 32 connect; the rest are refused with
    // new-socket-limit; once they are closed, the call connects again.
    let out = call(
        probe(),
        &sb,
        "tcp_many",
        json!({"addr": a.to_string(), "count": 40}),
    )
    .await
    .unwrap();
    let out = json_of(&out)["ok"].clone();
    assert_eq!(out["connected"], json!(32), "{out}");
    let failures = out["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 8, "{out}");
    // wasi-libc renders new-socket-limit as "No file descriptors available".
    assert!(
        failures
            .iter()
            .all(|f| f.as_str().unwrap().contains("file descriptors")),
        "{out}"
    );
    assert_eq!(out["again"], json!(true), "{out}");
    // The budget is per call.
    let out = call(
        probe(),
        &sb,
        "tcp_many",
        json!({"addr": a.to_string(), "count": 32}),
    )
    .await
    .unwrap();
    assert_eq!(json_of(&out)["ok"]["connected"], json!(32));
    still_serves().await;
}

#[tokio::test]
async fn a_tcp_grant_does_not_let_a_plugin_listen() {
    let _process = shared();
    let a = holding_tcp_server().await;
    let sb = sandbox(&[format!("net:tcp://{a}")]);
    // Connecting binds to the unspecified address and port 0 first, so that bind is allowed;
    // listening on it (or on any address) would take inbound connections, which no grant
    // gives.
    for addr in ["0.0.0.0:0", "127.0.0.1:0", &a.to_string()] {
        match call(probe(), &sb, "tcp_listen", json!({"addr": addr})).await {
            Err(CallError::Tool(e)) => assert!(e.message.contains("listen"), "{e:?}"),
            other => panic!("listening on {addr}: {other:?}"),
        }
    }
    still_serves().await;
}

#[tokio::test]
async fn http_objects_a_call_builds_are_bounded() {
    let _process = shared();
    // No grant is needed to build requests and header maps (only to send them), and
    // whatever is built lives in host memory: lengths and counts are capped.
    let sb = Sandbox::default();
    let out = call(probe(), &sb, "http_objects", json!({"what": "strings"}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&out)["ok"],
        json!({
            "method": true, "long_method": false,
            "scheme": true, "long_scheme": false,
            "authority": true, "long_authority": false,
            "path": true, "long_path": false,
        })
    );
    for (what, fits, over, cap) in [
        ("requests", 60, 65, "64 outgoing requests and responses"),
        ("fields", 250, 257, "256 header maps"),
    ] {
        let out = call(
            probe(),
            &sb,
            "http_objects",
            json!({"what": what, "count": fits}),
        )
        .await
        .unwrap();
        assert_eq!(json_of(&out)["ok"]["held"], json!(fits));
        let e = call(
            probe(),
            &sb,
            "http_objects",
            json!({"what": what, "count": over}),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&e, CallError::Trapped(m) if m.contains(&format!("the call holds {cap}"))),
            "{what}: {e}"
        );
    }
    still_serves().await;
}
