//! Every call's report: what the sandbox refused (one line each, where the host refused it),
//! its duration and the peak of its linear memory, for calls that succeed and calls that fail.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::common::*;
use cordon_core::{CallReport, LimitKind, Limits, ReservedKind, ReservedPaths};
use cordon_runtime::{CallError, Plugin, Sandbox, ToolOutput};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// Calls `tool` of `plugin` and returns the result with the call's report.
async fn reported(
    plugin: &Plugin,
    sb: &Sandbox,
    tool: &str,
    args: Value,
) -> (Result<ToolOutput, CallError>, CallReport) {
    plugin.call_tool_reported(sb, tool, &args.to_string()).await
}

/// A read-only grant at `/ro` holding `file.txt`, a subdirectory, and links that point out
/// of it to `outside/secret.txt`.
struct Tree {
    _tmp: tempfile::TempDir,
    ro: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let (ro, outside) = (root.join("ro"), root.join("outside"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(ro.join("sub")).unwrap();
    std::fs::write(ro.join("file.txt"), "ro-data").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink("../outside/secret.txt", ro.join("link_rel")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ro.join("link_abs")).unwrap();
    Tree {
        _tmp: tmp,
        ro,
        outside,
    }
}

fn read_only(t: &Tree) -> Sandbox {
    sandbox(&[format!("fs:{}:/ro:ro", t.ro.display())])
}

/// A bound port nothing is asked of, for grants and refused connects.
async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

#[tokio::test]
async fn a_call_refused_nothing_reports_no_refusals_and_what_it_measured() {
    let _process = shared();
    let t = tree();
    let (result, report) = reported(
        probe(),
        &read_only(&t),
        "fs",
        json!({"op": "read", "path": "/ro/file.txt"}),
    )
    .await;
    assert_eq!(json_of(&result.unwrap())["ok"], "ro-data");
    assert!(report.refused.is_empty(), "{report:?}");
    assert_eq!(report.refusals_dropped, 0);
    assert!(report.duration_ms > 0.0, "{report:?}");
    assert!(report.peak_memory > 0, "{report:?}");

    // A tool error the plugin reports itself (a name that is not there) is not a refusal.
    let (result, report) = reported(
        probe(),
        &read_only(&t),
        "fs",
        json!({"op": "read", "path": "/ro/missing.txt"}),
    )
    .await;
    assert!(matches!(result, Err(CallError::Tool(_))), "{result:?}");
    assert!(report.refused.is_empty(), "{report:?}");
}

#[tokio::test]
async fn a_refused_http_origin_is_reported() {
    let _process = shared();
    let (_a, a) = listener().await;
    let (_b, b) = listener().await;
    let sb = sandbox(&[format!("net:http://127.0.0.1:{}", a.port())]);
    let (result, report) = reported(
        probe(),
        &sb,
        "http",
        json!({"url": format!("http://127.0.0.1:{}/x", b.port())}),
    )
    .await;
    let Err(CallError::Tool(e)) = result else {
        panic!("not refused: {result:?}");
    };
    assert!(e.message.contains("HttpRequestDenied"), "{e}");
    assert_eq!(
        report.refused,
        [format!("http: http://127.0.0.1:{} (not granted)", b.port())]
    );
    // No grant at all: the same line.
    let (_, report) = reported(
        probe(),
        &Sandbox::default(),
        "http",
        json!({"url": "https://evil.example/"}),
    )
    .await;
    assert_eq!(
        report.refused,
        ["http: https://evil.example:443 (not granted)"]
    );
}

#[tokio::test]
async fn a_tcp_connect_to_an_address_not_granted_is_reported() {
    let _process = shared();
    let (_granted, granted) = listener().await;
    let (_other, other) = listener().await;
    let sb = sandbox(&[format!("net:tcp://{granted}")]);
    let (result, report) = reported(probe(), &sb, "tcp", json!({"addr": other.to_string()})).await;
    assert!(matches!(result, Err(CallError::Tool(_))), "{result:?}");
    assert_eq!(report.refused, [format!("tcp: {other} (not granted)")]);
    // The grant a person may be asked for: that address.
    assert_eq!(report.wanted, [format!("net:tcp://{other}")]);

    // Listening is never granted: the bind is refused.
    let (result, report) =
        reported(probe(), &sb, "tcp_listen", json!({"addr": "127.0.0.1:0"})).await;
    assert!(matches!(result, Err(CallError::Tool(_))), "{result:?}");
    assert_eq!(report.refused, ["tcp: binding 127.0.0.1:0 (not granted)"]);

    // Without any TCP grant the connect is refused all the same, and names the address.
    let (result, report) = reported(
        probe(),
        &Sandbox::default(),
        "tcp",
        json!({"addr": other.to_string()}),
    )
    .await;
    assert!(matches!(result, Err(CallError::Tool(_))), "{result:?}");
    assert_eq!(report.refused, [format!("tcp: {other} (not granted)")]);
    assert_eq!(report.wanted, [format!("net:tcp://{other}")]);
}

#[tokio::test]
async fn a_write_under_a_read_only_grant_is_reported() {
    let _process = shared();
    let t = tree();
    let (result, report) = reported(
        probe(),
        &read_only(&t),
        "fs",
        json!({"op": "write", "path": "/ro/new.txt"}),
    )
    .await;
    assert!(matches!(result, Err(CallError::Tool(_))), "{result:?}");
    assert!(!t.ro.join("new.txt").exists());
    assert_eq!(
        report.refused,
        ["write: /ro/new.txt under a read-only grant at /ro"]
    );
    let (_, report) = reported(
        probe(),
        &read_only(&t),
        "fs",
        json!({"op": "append", "path": "/ro/file.txt"}),
    )
    .await;
    assert_eq!(
        report.refused,
        ["write: /ro/file.txt under a read-only grant at /ro"]
    );
    assert_eq!(
        std::fs::read_to_string(t.ro.join("file.txt")).unwrap(),
        "ro-data"
    );
}

#[tokio::test]
async fn escapes_are_reported_with_the_path_the_guest_named() {
    let _process = shared();
    let t = tree();
    for (path, line) in [
        (
            "/ro/../outside/secret.txt",
            "path: /ro/../outside/secret.txt escapes the grant at /ro",
        ),
        (
            "/ro/sub/../../outside/secret.txt",
            "path: /ro/sub/../../outside/secret.txt escapes the grant at /ro",
        ),
        (
            "/ro/link_rel",
            "path: /ro/link_rel escapes the grant at /ro",
        ),
        (
            "/ro/link_abs",
            "path: /ro/link_abs escapes the grant at /ro",
        ),
    ] {
        let (result, report) = reported(
            probe(),
            &read_only(&t),
            "fs",
            json!({"op": "read", "path": path}),
        )
        .await;
        assert!(
            matches!(result, Err(CallError::Tool(_))),
            "{path}: {result:?}"
        );
        assert_eq!(report.refused, [line], "{path}");
    }
    assert!(t.outside.join("secret.txt").exists());
}

#[tokio::test]
async fn a_named_pipe_the_host_will_not_open_is_reported() {
    let _process = shared();
    let t = tree();
    mkfifo(&t.ro.join("pipe"));
    let (result, report) = reported(
        probe(),
        &read_only(&t),
        "fs",
        json!({"op": "read", "path": "/ro/pipe"}),
    )
    .await;
    assert!(matches!(result, Err(CallError::Tool(_))), "{result:?}");
    assert_eq!(
        report.refused,
        ["path: /ro/pipe is a named pipe or socket (not opened)"]
    );
}

#[tokio::test]
async fn paths_bulk_read_refuses_are_reported() {
    let _process = shared();
    let t = tree();
    let (result, report) = reported(
        probe(),
        &read_only(&t),
        "bulk_read",
        json!({"paths": ["/ro/file.txt", "/etc/passwd", "/ro/link_rel"]}),
    )
    .await;
    result.unwrap();
    let mut refused = report.refused.clone();
    // The reader's workers may read the paths in any order.
    refused.sort();
    assert_eq!(
        refused,
        [
            "path: /etc/passwd is outside the grants (bulk read)",
            "path: /ro/link_rel escapes the grant at /ro (bulk read)",
        ]
    );
}

#[tokio::test]
async fn peak_memory_is_within_the_limit_and_grows_with_what_a_call_allocates() {
    let _process = shared();
    let limits = Limits::default();
    let (result, small) = reported(probe(), &Sandbox::default(), "noop", json!({})).await;
    result.unwrap();
    assert!(small.peak_memory > 0, "{small:?}");
    assert!(small.peak_memory <= limits.memory, "{small:?}");
    // The log tool builds its message before writing it `count` times: 64 MiB, never written.
    let (result, big) = reported(
        probe(),
        &Sandbox::default(),
        "log",
        json!({"count": 0, "size": 64 << 20}),
    )
    .await;
    result.unwrap();
    assert!(
        big.peak_memory >= small.peak_memory + (64 << 20),
        "{small:?} {big:?}"
    );
    assert!(big.peak_memory <= limits.memory, "{big:?}");
}

#[tokio::test]
async fn a_call_stopped_by_its_memory_limit_reports_a_peak_within_it() {
    let _process = shared();
    let sb = Sandbox {
        limits: Limits::default().with_overrides(["memory=64MiB"]).unwrap(),
        ..Sandbox::default()
    };
    let (result, report) = reported(runaway(), &sb, "hog", json!({})).await;
    assert!(
        matches!(
            result,
            Err(CallError::LimitExceeded {
                limit: LimitKind::Memory,
                ..
            })
        ),
        "{result:?}"
    );
    // It held close to all of it: the hog grows in 8 MiB steps.
    assert!(report.peak_memory <= 64 << 20, "{report:?}");
    assert!(report.peak_memory > 48 << 20, "{report:?}");
    assert!(report.refused.is_empty(), "{report:?}");
}

#[tokio::test]
async fn grants_refused_before_the_call_are_reported_as_refusals() {
    let _process = shared();
    let t = tree();
    // The runaway fixture imports no wasi:filesystem: its ceiling refuses a directory.
    let (result, report) = reported(runaway(), &read_only(&t), "fine", json!({})).await;
    let Err(CallError::Denied(denial)) = result else {
        panic!("not denied: {result:?}");
    };
    assert_eq!(report.refused, [format!("grant: {denial}")]);
    assert!(report.refused[0].contains("cannot be given"), "{report:?}");
    assert_eq!(report.peak_memory, 0, "no instance started");
    assert!(report.duration_ms >= 0.0);

    // A directory that is Cordon's own is refused when the call opens its grants.
    let sb = Sandbox {
        reserved: ReservedPaths::none().with(&t.ro, ReservedKind::Home),
        ..read_only(&t)
    };
    let (result, report) = reported(probe(), &sb, "noop", json!({})).await;
    let Err(CallError::Denied(denial)) = result else {
        panic!("not denied: {result:?}");
    };
    assert_eq!(report.refused, [format!("grant: {denial}")]);
    assert_eq!(report.peak_memory, 0, "no instance started");
}

/// A `net:tcp` grant recorded before the PostgreSQL store moved to that server (or written by
/// hand) runs nothing: every call checks it, as it does directories.
#[tokio::test]
async fn a_tcp_grant_reaching_the_store_refuses_the_call() {
    let _process = shared();
    let store: SocketAddr = "127.0.0.1:5432".parse().unwrap();
    for granted in ["127.0.0.1:5432", "0.0.0.0:5432", "[::1]:5432"] {
        let sb = Sandbox {
            grants: grants(&[format!("net:tcp://{granted}")]),
            reserved: ReservedPaths::none().with_address(store, "postgres://db.example/cordon"),
            ..sandbox(&[])
        };
        let (result, report) = reported(probe(), &sb, "noop", json!({})).await;
        let Err(CallError::Denied(denial)) = result else {
            panic!("{granted} was not denied: {result:?}");
        };
        let text = denial.to_string();
        assert!(
            text.contains("postgres://db.example/cordon") && text.contains("call was refused"),
            "{text}"
        );
        assert_eq!(report.peak_memory, 0, "no instance started");
    }
    let elsewhere = Sandbox {
        grants: grants(&["net:tcp://127.0.0.1:5433".to_string()]),
        reserved: ReservedPaths::none().with_address(store, "postgres://db.example/cordon"),
        ..sandbox(&[])
    };
    reported(probe(), &elsewhere, "noop", json!({}))
        .await
        .0
        .unwrap();
}

/// A time limit too long to add to the clock (a hand-edited lock file may hold one) is a
/// deadline that never comes, not a panic of the host.
#[tokio::test]
async fn an_endless_time_limit_runs_the_call() {
    let _process = shared();
    let sb = Sandbox {
        limits: Limits {
            time: std::time::Duration::from_secs(u64::MAX),
            ..Limits::default()
        },
        ..sandbox(&[])
    };
    reported(probe(), &sb, "noop", json!({})).await.0.unwrap();
}

#[tokio::test]
async fn call_tool_still_answers_as_before() {
    let _process = shared();
    let t = tree();
    let args = json!({"op": "write", "path": "/ro/new.txt"}).to_string();
    let plain = probe().call_tool(&read_only(&t), "fs", &args).await;
    let (reported, _) = probe()
        .call_tool_reported(&read_only(&t), "fs", &args)
        .await;
    match (plain, reported) {
        (Err(CallError::Tool(a)), Err(CallError::Tool(b))) => assert_eq!(a, b),
        other => panic!("{other:?}"),
    }
}
