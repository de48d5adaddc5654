//! Cordon's own pieces of `wasi:filesystem`: directory listings as a guest sees them (every
//! entry with its own type, links not followed, nested and repeated listings, directories too
//! large for one read of the kernel's listing, files that are not directories), the identity
//! of a listed entry, and the cap on descriptors one call holds open.

use crate::common::*;
use serde_json::json;

fn symlink(target: &str, link: std::path::PathBuf) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[tokio::test]
async fn entries_are_listed_with_their_own_types() {
    let _process = shared();
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::write(d.join("file.txt"), "x").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/inner.txt"), "y").unwrap();
    std::fs::create_dir(d.join("empty")).unwrap();
    symlink("file.txt", d.join("link_file"));
    symlink("sub", d.join("link_dir"));
    symlink("missing", d.join("dangling"));
    symlink("/etc", d.join("link_out"));
    let _socket = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);

    // The same entries either way; the probe names a socket by what std (through wasi-libc)
    // or the raw interface calls it.
    let expected = |socket: &str| {
        json!([
            ["dangling", "symlink"],
            ["empty", "dir"],
            ["file.txt", "file"],
            ["link_dir", "symlink"],
            ["link_file", "symlink"],
            ["link_out", "symlink"],
            ["sock", socket],
            ["sub", "dir"],
        ])
    };
    let listing = fs(&sb, "readdir_types", "/d", None).await.unwrap();
    assert_eq!(listing, expected("other"));
    // The preopened directory itself, listed through its own descriptor (opened as a path
    // only, so the listing must open it for reading); FIFOs and sockets are `unknown`, as
    // wasmtime-wasi's stat calls them.
    let listing = fs(&sb, "readdir_preopen", "/d", None).await.unwrap();
    assert_eq!(listing, expected("unknown"));
    // A directory opened below the grant, listed twice: each listing starts afresh.
    for _ in 0..2 {
        let listing = fs(&sb, "readdir_types", "/d/sub", None).await.unwrap();
        assert_eq!(listing, json!([["inner.txt", "file"]]));
    }
    // Through a link that stays inside the grant; an empty directory lists nothing.
    let listing = fs(&sb, "readdir_types", "/d/link_dir", None).await.unwrap();
    assert_eq!(listing, json!([["inner.txt", "file"]]));
    assert_eq!(
        fs(&sb, "readdir_types", "/d/empty", None).await.unwrap(),
        json!([])
    );
    // A file is not a directory, and a link out of the grant cannot be listed.
    fs(&sb, "readdir_types", "/d/file.txt", None)
        .await
        .unwrap_err();
    fs(&sb, "readdir_types", "/d/link_out", None)
        .await
        .unwrap_err();
    still_serves().await;
}

#[tokio::test]
async fn a_listed_entry_has_the_identity_a_stat_gives_it() {
    let _process = shared();
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::write(d.join("a.txt"), "a").unwrap();
    std::fs::write(d.join("b.txt"), "b").unwrap();
    std::fs::hard_link(d.join("a.txt"), d.join("a_again.txt")).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/inner.txt"), "i").unwrap();
    symlink("a.txt", d.join("link"));
    symlink("missing", d.join("dangling"));
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    // The identity a listing reports (what becomes d_ino) equals the one asked by path and
    // the one of the opened file, for every kind of entry, in the preopen and below it.
    for dir in ["/d", "/d/sub"] {
        let listing = fs(&sb, "readdir_identities", dir, None).await.unwrap();
        for entry in listing.as_array().unwrap() {
            assert_eq!(entry[1], json!(true), "{dir}: {entry}");
            let is_file = entry[0].as_str().unwrap().ends_with(".txt");
            assert_eq!(
                entry[2],
                if is_file { json!(true) } else { json!(null) },
                "{entry}"
            );
        }
    }
    // Two names of one file share an identity; different files do not.
    let listing = fs(&sb, "readdir_identities", "/d", None).await.unwrap();
    let hash = |name: &str| {
        let entries = listing.as_array().unwrap();
        let entry = entries.iter().find(|e| e[0] == json!(name)).unwrap();
        entry[3].as_str().unwrap().to_owned()
    };
    assert_eq!(hash("a.txt"), hash("a_again.txt"));
    let distinct: std::collections::HashSet<_> = ["a.txt", "b.txt", "sub", "link", "dangling"]
        .into_iter()
        .map(hash)
        .collect();
    assert_eq!(distinct.len(), 5, "{listing}");
}

#[tokio::test]
async fn large_directories_are_listed_whole() {
    let _process = shared();
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    // Long names, so the listing spans many reads of the kernel's directory stream.
    let names: Vec<String> = (0..3000)
        .map(|i| format!("entry-{i:05}-{}", "n".repeat(80)))
        .collect();
    for (i, name) in names.iter().enumerate() {
        if i % 3 == 0 {
            std::fs::create_dir(d.join(name)).unwrap();
        } else {
            std::fs::write(d.join(name), "").unwrap();
        }
    }
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    let listing = fs(&sb, "readdir_types", "/d", None).await.unwrap();
    let expected: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| json!([n, if i % 3 == 0 { "dir" } else { "file" }]))
        .collect();
    assert_eq!(listing, json!(expected));
}

#[tokio::test]
async fn a_call_cannot_hold_more_than_its_share_of_open_files() {
    let _process = shared();
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::write(d.join("file.txt"), "x").unwrap();
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    // A plugin that never closes what it opens is refused past the cap (not the host's own
    // descriptor limit); what it closes can be opened again.
    let out = fs(&sb, "hold_open", "/d/file.txt", Some("5000"))
        .await
        .unwrap();
    assert_eq!(out["opened"], json!(256), "{out}");
    assert!(out["error"].as_str().is_some(), "{out}");
    assert_eq!(out["reopened"], json!(5000), "{out}");
    // A stream keeps its file open after the descriptor it came from is dropped, so it
    // counts too.
    let out = fs(&sb, "hold_streams", "/d/file.txt", Some("5000"))
        .await
        .unwrap();
    assert_eq!(out["opened"], json!(256), "{out}");
    // Streams of one file share its descriptor, but each holds host memory (a read fills a
    // 64 KiB buffer on a host thread): they count too, and what is dropped can be taken again.
    std::fs::write(d.join("big.bin"), vec![7u8; 1 << 20]).unwrap();
    let out = fs(&sb, "streams_of_one_file", "/d/big.bin", Some("3000"))
        .await
        .unwrap();
    assert_eq!(out["taken"], json!(256), "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("insufficient-memory"),
        "{out}"
    );
    assert_eq!(out["again"], json!(3000), "{out}");
    // The next call starts with none open.
    let out = fs(&sb, "hold_open", "/d/file.txt", Some("200"))
        .await
        .unwrap();
    assert_eq!(out, json!({"opened": 200, "error": null, "reopened": 200}));
    still_serves().await;
}

#[tokio::test]
async fn listings_a_call_holds_are_bounded() {
    let _process = shared();
    // A listing is collected whole in host memory and kept while the guest holds it: a call
    // holds at most 64 MiB of them. 10,000 entries with 240-byte names take ~2.8 MB each.
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    let big = d.join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..10_000 {
        std::fs::write(big.join(format!("{i:05}{}", "x".repeat(235))), "").unwrap();
    }
    let sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    let out = fs(&sb, "hold_listings", "/d/big", Some("100"))
        .await
        .unwrap();
    let held = out["held"].as_u64().unwrap();
    assert!((15..=30).contains(&held), "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("insufficient-memory"),
        "{out}"
    );
    assert_eq!(out["again"], json!(100), "{out}");
    still_serves().await;
}
