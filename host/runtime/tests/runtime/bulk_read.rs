//! `cordon:tool/bulk-read`: files come back whole and in the order queued, and only regular
//! files inside the call's grants are read (`..`, absolute paths, links out, trailing slashes,
//! FIFOs, hard links), within the size and queue bounds, without threads outliving the call.

use crate::common::*;
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
    let _process = shared();
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
        assert_eq!(out["refused"], json!({}));
        assert_eq!(out["queued"], json!(0));
    }
}

#[tokio::test]
async fn only_regular_files_inside_the_grants_are_read() {
    let _process = shared();
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
    // Leaves the directory and comes back in: refused like any link that leaves it.
    symlink("../granted/a.txt", d.join("link_out_and_in"));
    symlink("missing/../a.txt", d.join("link_via_missing"));
    symlink("a.txt/", d.join("link_file_as_dir"));
    // A hard link is the same file under a name inside the grant: wasi:filesystem reads it
    // too, so bulk-read must agree with it.
    std::fs::hard_link(outside.join("secret.txt"), d.join("hard")).unwrap();
    mkfifo(&d.join("pipe"));
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
        ("/d/link_out_and_in", json!({"err": "not-granted"})),
        ("/d", json!({"err": "not-a-file"})),
        ("/d/sub", json!({"err": "not-a-file"})),
        ("/d/sub/", json!({"err": "not-a-file"})),
        ("/d/a.txt/", json!({"err": "not-a-file"})),
        ("/d/pipe", json!({"err": "not-a-file"})),
        ("/d/missing", json!({"err": "not-found"})),
        ("/d/missing/", json!({"err": "not-found"})),
        ("/d/a.txt/.", json!({"err": "not-a-file"})),
        ("/d/a.txt/x", json!({"err": "not-a-file"})),
        ("/d/link_via_missing", json!({"err": "not-found"})),
        ("/d/link_file_as_dir", json!({"err": "not-a-file"})),
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
    let _process = shared();
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
    sb.limits.args = 4 << 20;
    sb.limits.output = 4 << 20;
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
    // At most 4096 paths (and 1 MiB of them) wait to be taken in one call, over all its
    // readers; no path is longer than 4096 bytes.
    let many: Vec<String> = (0..5000).map(|i| format!("/d/missing{i}")).collect();
    for readers in [1, 2] {
        let out = bulk(&sb, json!({"paths": many, "readers": readers})).await;
        assert_eq!(out["refused"], json!({"queue-full": 904}));
        assert_eq!(results(&out).len(), 4096);
    }
    let long: Vec<String> = (0..300)
        .map(|i| format!("/d/{i:03}{}", "x".repeat(3994)))
        .collect();
    assert_eq!(long[0].len(), 4000);
    let out = bulk(&sb, json!({"paths": long})).await;
    assert_eq!(out["refused"], json!({"queue-full": 38}));
    let out = bulk(
        &sb,
        json!({"paths": [format!("/d/{}", "x".repeat(4094)), "/d/ten"]}),
    )
    .await;
    assert_eq!(out["refused"], json!({"path-too-long": 1}));
    assert_eq!(
        results(&out),
        [("/d/ten".to_owned(), json!({"ok": "0123456789"}))]
    );
}

#[tokio::test]
async fn a_take_hands_over_at_most_8_mib_unless_one_file_is_larger() {
    let _process = shared();
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    for i in 0..5 {
        std::fs::write(d.join(format!("three{i}")), "3".repeat(3 << 20)).unwrap();
    }
    std::fs::write(d.join("nine"), "9".repeat(9 << 20)).unwrap();
    std::fs::write(d.join("small"), "s").unwrap();
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    let threes: Vec<String> = (0..5).map(|i| format!("/d/three{i}")).collect();
    // With one reader, and with the paths on a threaded reader and an inline one (taken in
    // turn: 3 and 2 of them), each batch by the same rule.
    for (readers, batches) in [(1, json!([2, 2, 1])), (2, json!([2, 2, 1]))] {
        let out = bulk(&sb, json!({"paths": threes, "take": 5, "readers": readers})).await;
        assert_eq!(out["batches"], batches, "readers {readers}");
    }
    let out = bulk(
        &sb,
        json!({"paths": ["/d/small", "/d/small", "/d/nine", "/d/small"], "take": 10}),
    )
    .await;
    assert_eq!(out["batches"], json!([2, 1, 1]));
    assert_eq!(results(&out)[2].1["len"], json!(9 << 20));
}

#[tokio::test]
async fn a_call_may_hold_16_readers() {
    let _process = shared();
    let sb = Sandbox::default();
    let out = bulk(&sb, json!({"paths": [], "readers": 16})).await;
    assert_eq!(out["files"], json!([]));
    let err = call(
        probe(),
        &sb,
        "bulk_read",
        json!({"paths": [], "readers": 17}),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("16 bulk-read readers at once"), "{err}");
    still_serves().await;
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
    // Alone: it counts the process's reader threads, which other tests' calls would start.
    let _process = alone();
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

#[tokio::test]
async fn a_sifting_reader_hands_over_only_files_with_a_needle() {
    let _process = shared();
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    let mut no_needle_large = b"x".repeat(9 << 20);
    no_needle_large[5 << 20] = 0;
    let mut needle_large = b"y".repeat(9 << 20);
    needle_large[(9 << 20) - 6..].copy_from_slice(b"needle");
    let files: Vec<(&str, Vec<u8>, Value)> = vec![
        (
            "hit",
            b"a needle in it".to_vec(),
            json!({"ok": "a needle in it"}),
        ),
        // Needles are bytes: no case folding, and no match across a NUL.
        (
            "other_case",
            b"a NEEDLE\0".to_vec(),
            json!({"passed_over": 9, "first_nul": 8}),
        ),
        (
            "split",
            b"nee\0dle".to_vec(),
            json!({"passed_over": 7, "first_nul": 3}),
        ),
        (
            "second",
            b"only a pin".to_vec(),
            json!({"ok": "only a pin"}),
        ),
        (
            "empty",
            Vec::new(),
            json!({"passed_over": 0, "first_nul": null}),
        ),
        // A byte-order mark: decoded text may match where the raw bytes do not.
        (
            "utf16",
            b"\xff\xfen\0e\0e\0d\0l\0e\0".to_vec(),
            json!({"ok": "\u{fffd}\u{fffd}n\0e\0e\0d\0l\0e\0"}),
        ),
        (
            "utf8_marked",
            b"\xef\xbb\xbfnothing".to_vec(),
            json!({"ok": "\u{feff}nothing"}),
        ),
        // Larger than the read-ahead bound: read when taken, sifted all the same.
        (
            "large",
            no_needle_large,
            json!({"passed_over": 9 << 20, "first_nul": 5 << 20}),
        ),
        (
            "large_hit",
            needle_large,
            json!({"ok": "y".repeat(100), "len": 9 << 20}),
        ),
    ];
    for (name, body, _) in &files {
        std::fs::write(d.join(name), body).unwrap();
    }
    let mut paths: Vec<String> = files.iter().map(|f| format!("/d/{}", f.0)).collect();
    paths.push("/d/missing".into());
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    // One reader reads on worker threads; with three, the second and third read inline.
    for readers in [1, 3] {
        let needles = json!(["needle", "pin"]);
        let sifted = bulk(
            &sb,
            json!({"paths": paths, "take": 4, "readers": readers, "needles": needles,
                "sifted": true}),
        )
        .await;
        let got = results(&sifted);
        assert_eq!(got.len(), paths.len());
        for (path, result) in &got {
            let name = path.trim_start_matches("/d/");
            let expected = match files.iter().find(|f| f.0 == name) {
                Some(f) => f.2.clone(),
                None => json!({"err": "not-found"}),
            };
            assert_eq!(result, &expected, "{path}, {readers} reader(s)");
        }
        // A plain take on a sifting reader, and take-sifted on a plain one, hand everything
        // over whole.
        for args in [
            json!({"paths": paths, "take": 4, "readers": readers, "needles": needles}),
            json!({"paths": paths, "take": 4, "readers": readers, "sifted": true}),
        ] {
            let whole = bulk(&sb, args.clone()).await;
            let got = results(&whole);
            assert_eq!(got.len(), paths.len());
            for (path, result) in got {
                let name = path.trim_start_matches("/d/");
                let expected = match files.iter().find(|f| f.0 == name) {
                    Some((_, body, _)) if body.len() > 100 => json!({
                        "ok": String::from_utf8_lossy(&body[..100]),
                        "len": body.len(),
                    }),
                    Some((_, body, _)) => json!({"ok": String::from_utf8_lossy(body)}),
                    None => json!({"err": "not-found"}),
                };
                assert_eq!(result, expected, "{path} ({args})");
            }
        }
    }
}

#[tokio::test]
async fn a_sifting_reader_refuses_needles_it_cannot_use() {
    let _process = shared();
    let sb = sandbox(&[]);
    let cases = [
        (json!(["ok", ""]), "needle 1 is empty"),
        (json!(["n".repeat(1025)]), "needle 0 is 1025 bytes"),
        (json!(vec!["n"; 1025]), "1025 needles were given"),
        (json!(vec!["n".repeat(1000); 66]), "66000 bytes in all"),
    ];
    for (needles, why) in cases {
        let out = bulk(&sb, json!({"paths": [], "needles": needles})).await;
        let error = out["sifting_error"].as_str().unwrap_or_default();
        assert!(error.contains(why), "{why:?} not in {out}");
    }
    // No needles: a reader that sifts nothing.
    let out = bulk(&sb, json!({"paths": [], "needles": [], "sifted": true})).await;
    assert_eq!(out["files"], json!([]));
}
