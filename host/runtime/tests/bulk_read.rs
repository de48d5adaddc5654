//! `cordon:tool/bulk-read`: files come back whole and in the order queued, and only regular
//! files inside the call's grants are read (`..`, absolute paths, links out, trailing slashes,
//! FIFOs, hard links), within the size and queue bounds, without threads outliving the call.

mod common;

use common::*;
use cordon_runtime::Sandbox;
use serde_json::{Value, json};

fn symlink(target: &str, link: std::path::PathBuf) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

async fn bulk(sb: &Sandbox, args: Value) -> Value {
    let out = call(probe(), sb, "bulk_read", args)
        .await
        .unwrap_or_else(|e| panic!("bulk_read: {e}"));
    json_of(&out)["ok"].clone()
}

/// What each path came back as, in order.
fn results(out: &Value) -> Vec<(String, Value)> {
    out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f[0].as_str().unwrap().to_owned(), f[1].clone()))
        .collect()
}

#[tokio::test]
async fn files_come_back_whole_in_the_order_queued() {
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    // Names whose order is not the directory's or alphabetical, some empty files, one
    // larger than a read-ahead batch of small ones.
    let names: Vec<String> = (0..600)
        .map(|i| format!("f{}", (i * 7919) % 1000))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let body = if i % 50 == 0 {
            String::new()
        } else {
            format!("body of {name}")
        };
        std::fs::write(d.join(name), body).unwrap();
    }
    // Larger than a read-ahead batch; larger than the read-ahead bound (read when taken).
    std::fs::write(d.join("big"), "b".repeat(3 << 20)).unwrap();
    std::fs::write(d.join("bigger"), "B".repeat(9 << 20)).unwrap();
    let mut paths: Vec<String> = names.iter().map(|n| format!("/d/{n}")).collect();
    paths.insert(300, "/d/big".into());
    paths.insert(100, "/d/bigger".into());
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    for (readers, take) in [(1, 7), (1, 64), (3, 5)] {
        let out = bulk(
            &sb,
            json!({"paths": paths, "take": take, "readers": readers}),
        )
        .await;
        let got = results(&out);
        assert_eq!(got.len(), paths.len(), "readers {readers}");
        for (i, (path, result)) in got.iter().enumerate() {
            // With several readers the paths are dealt out in turn and taken in turn.
            let expected_path = if readers == 1 { &paths[i] } else { path };
            assert_eq!(path, expected_path);
            let name = path.trim_start_matches("/d/");
            let body = std::fs::read_to_string(d.join(name)).unwrap();
            let expected = if body.len() > 100 {
                json!({"ok": &body[..100], "len": body.len()})
            } else {
                json!({"ok": body})
            };
            assert_eq!(result, &expected, "{path}");
        }
        if readers == 1 {
            assert_eq!(
                got.iter().map(|g| &g.0).collect::<Vec<_>>(),
                paths.iter().collect::<Vec<_>>()
            );
        }
        assert_eq!(out["refused"], json!(0));
        assert_eq!(out["queued"], json!(0));
    }
}

#[tokio::test]
async fn only_regular_files_inside_the_grants_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let (d, outside) = (root.join("granted"), root.join("outside"));
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(d.join("a.txt"), "inside").unwrap();
    std::fs::write(d.join("sub/b.txt"), "nested").unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET").unwrap();
    symlink("a.txt", d.join("link_in"));
    symlink("../a.txt", d.join("sub/link_up_in"));
    symlink(
        outside.join("secret.txt").to_str().unwrap(),
        d.join("link_abs_out"),
    );
    symlink("../outside/secret.txt", d.join("link_rel_out"));
    symlink("sub/../../outside", d.join("link_dir_out"));
    // A hard link is the same file under a name inside the grant: wasi:filesystem reads it
    // too, so bulk-read must agree with it.
    std::fs::hard_link(outside.join("secret.txt"), d.join("hard")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(d.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    let secret_host_path = outside.join("secret.txt");
    let cases = [
        ("/d/a.txt", json!({"ok": "inside"})),
        ("//d/./sub//b.txt", json!({"ok": "nested"})),
        ("/d/link_in", json!({"ok": "inside"})),
        ("/d/sub/link_up_in", json!({"ok": "inside"})),
        ("/d/hard", json!({"ok": "SECRET"})),
        ("/d/../outside/secret.txt", json!({"err": "not-granted"})),
        (
            "/d/sub/../../outside/secret.txt",
            json!({"err": "not-granted"}),
        ),
        ("/outside/secret.txt", json!({"err": "not-granted"})),
        (
            secret_host_path.to_str().unwrap(),
            json!({"err": "not-granted"}),
        ),
        ("d/a.txt", json!({"err": "not-granted"})),
        ("", json!({"err": "not-granted"})),
        ("/d/link_abs_out", json!({"err": "not-granted"})),
        ("/d/link_rel_out", json!({"err": "not-granted"})),
        ("/d/link_dir_out/secret.txt", json!({"err": "not-granted"})),
        ("/d", json!({"err": "not-a-file"})),
        ("/d/sub", json!({"err": "not-a-file"})),
        ("/d/sub/", json!({"err": "not-a-file"})),
        ("/d/a.txt/", json!({"err": "not-a-file"})),
        ("/d/pipe", json!({"err": "not-a-file"})),
        ("/d/missing", json!({"err": "not-found"})),
    ];
    let paths: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let out = bulk(&sb, json!({"paths": paths})).await;
    let got = results(&out);
    for ((path, expected), (got_path, result)) in cases.iter().zip(&got) {
        assert_eq!(path, got_path);
        assert_eq!(result, expected, "{path}");
    }
    assert_eq!(got.len(), cases.len());
    // Agreement with wasi:filesystem on the same paths.
    assert_eq!(
        fs(&sb, "read", "/d/hard", None).await.unwrap(),
        json!("SECRET")
    );
    fs(&sb, "read", "/d/link_abs_out", None).await.unwrap_err();
    // Without a grant nothing is reachable.
    let out = bulk(&Sandbox::default(), json!({"paths": ["/d/a.txt"]})).await;
    assert_eq!(results(&out)[0].1, json!({"err": "not-granted"}));
    still_serves().await;
}

#[tokio::test]
async fn sizes_and_queues_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::write(d.join("ten"), "0123456789").unwrap();
    // Larger than the call's memory limit (sparse: no disk used).
    std::fs::File::create(d.join("huge"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let mut sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    sb.limits.memory = 48 << 20;
    let out = bulk(
        &sb,
        json!({"paths": ["/d/ten", "/d/ten", "/d/huge"], "max_size": 10}),
    )
    .await;
    let got: Vec<Value> = results(&out).into_iter().map(|r| r.1).collect();
    assert_eq!(got[0], json!({"ok": "0123456789"}));
    assert_eq!(got[2], json!({"err": "too-large:67108864"}));
    let out = bulk(&sb, json!({"paths": ["/d/ten"], "max_size": 9})).await;
    assert_eq!(results(&out)[0].1, json!({"err": "too-large:10"}));
    // A size limit above the memory limit is lowered to it.
    let out = bulk(&sb, json!({"paths": ["/d/huge"]})).await;
    assert_eq!(results(&out)[0].1, json!({"err": "too-large:67108864"}));
    // At most 4096 paths wait to be taken.
    let many: Vec<String> = (0..5000).map(|i| format!("/d/missing{i}")).collect();
    let out = bulk(&sb, json!({"paths": many})).await;
    assert_eq!(out["refused"], json!(904));
    assert_eq!(results(&out).len(), 4096);
}

fn reader_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("cordon-bulk"))
        .count()
}

#[tokio::test]
async fn a_call_that_stops_taking_leaves_no_reader_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    for i in 0..500 {
        std::fs::write(d.join(format!("f{i}")), "x".repeat(1000)).unwrap();
    }
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    let paths: Vec<String> = (0..500).map(|i| format!("/d/f{i}")).collect();
    for _ in 0..5 {
        let out = bulk(&sb, json!({"paths": paths, "take": 10, "stop_after": 10})).await;
        assert_eq!(results(&out).len(), 10);
        assert_eq!(out["queued"], json!(490));
    }
    // The workers end with the call (after the file each is reading).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while reader_threads() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "reader threads outlived their calls"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    still_serves().await;
}
