//! Lookups answered from the listing a guest just took (`fresh_listing`): every way of asking
//! about a name gets the same answer as from the filesystem (present and absent names, names
//! differing in case, paths through missing or present entries, links in and out, `.`/`..`,
//! overlong names, opens that must fail for their flags first), the listing does answer the
//! names it lacks in a read-only call, and a call that can write sees what it created.
//!
//! Runs alone in the test process: it reads a process-wide counter.

use crate::common::*;
use serde_json::{Value, json};

fn symlink(target: &str, link: std::path::PathBuf) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

async fn lookups(sb: &cordon_runtime::Sandbox, args: Value) -> Vec<Value> {
    let out = call(probe(), sb, "fs", args)
        .await
        .unwrap_or_else(|e| panic!("lookups: {e}"));
    json_of(&out)["ok"].as_array().unwrap().clone()
}

#[tokio::test]
async fn answers_from_a_fresh_listing_are_the_filesystems_answers() {
    let _process = alone();
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let d = root.join("tree/dir");
    std::fs::create_dir_all(d.join("sub/.git")).unwrap();
    std::fs::write(d.join("sub/file"), "x").unwrap();
    std::fs::write(d.join("Cargo.toml"), "x").unwrap();
    std::fs::write(d.join(".gitignore"), "target\n").unwrap();
    std::fs::create_dir(d.join(".git")).unwrap();
    symlink("Cargo.toml", d.join("link_in"));
    symlink("/etc", d.join("link_out"));
    symlink("missing", d.join("dangling"));
    symlink("../dir", d.join("loop_dir"));
    let long = "n".repeat(300);
    let names: Vec<String> = [
        ".git",
        ".git/info/exclude",
        ".ignore",
        ".gitignore",
        "Cargo.toml",
        "cargo.toml",
        "CARGO.TOML",
        "sub",
        "sub/",
        "sub/file",
        "sub/.git",
        "sub/missing",
        "missing",
        "missing/",
        "missing/x",
        "missing/../Cargo.toml",
        "link_in",
        "link_out",
        "link_out/passwd",
        "dangling",
        "dangling/x",
        "loop_dir/.ignore",
        "loop_dir/Cargo.toml",
        ".",
        "..",
        "../dir/.ignore",
        "./.ignore",
        "/.ignore",
        "",
        "caf\u{e9}",
        &long,
        &format!("missing/{long}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let ro = sandbox(&[format!("fs:{}:/r:ro", root.display())]);
    let rw = sandbox(&[format!("fs:{}:/r:rw", root.display())]);
    let ask = |list: bool, changing: bool| {
        json!({"op": "lookups", "path": "/r/tree/dir", "names": names, "list": list,
            "changing": changing})
    };

    // Without a listing every question goes to the filesystem.
    let before = cordon_runtime::lookups_answered_from_listings();
    let from_filesystem = lookups(&ro, ask(false, true)).await;
    assert_eq!(cordon_runtime::lookups_answered_from_listings(), before);
    assert_eq!(from_filesystem.len(), names.len());
    assert!(
        from_filesystem
            .iter()
            .all(|r| r.as_array().unwrap().len() == 8)
    );
    // A sample of what the filesystem says, so the comparison below compares something.
    let row = |name: &str| {
        from_filesystem
            .iter()
            .find(|r| r[0] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(row(".ignore")[1], "no-entry");
    assert_eq!(row(".gitignore")[4], "ok DescriptorType::RegularFile");
    assert_eq!(
        row(".ignore")[6],
        "not-permitted",
        "create on a read-only grant"
    );
    assert_eq!(
        row(".ignore")[7],
        "not-permitted",
        "write on a read-only grant"
    );
    assert_eq!(row(&long)[1], "name-too-long");

    // After a listing: the same answers, some of them given by the listing: `.ignore`,
    // `missing`, `missing/`, `missing/x` and `missing/../Cargo.toml`, each asked the five ways
    // that only look a name up (both hashes, stat, open to read, open as a directory). Answers
    // come only within a moment of the listing, so a machine too busy to ask all of them in
    // time gets another try.
    let trusted = lists_the_truth(&root);
    let mut answered = Vec::new();
    for _ in 0..5 {
        let before = cordon_runtime::lookups_answered_from_listings();
        let from_listing = lookups(&ro, ask(true, true)).await;
        answered.push(cordon_runtime::lookups_answered_from_listings() - before);
        assert_eq!(from_listing, from_filesystem, "with a listing first");
        if !trusted || answered.last() == Some(&25) {
            break;
        }
    }
    if trusted {
        assert_eq!(
            answered.last(),
            Some(&25),
            "answered from the listing: {answered:?}"
        );
    } else {
        eprintln!(
            "{} is on a filesystem whose listings are not trusted; answers only compared",
            root.display()
        );
        assert_eq!(answered, [0]);
    }

    // A call that can write may have created the name since; it is looked up for real.
    let before = cordon_runtime::lookups_answered_from_listings();
    let created = lookups(
        &rw,
        json!({"op": "lookups", "path": "/r/tree/dir", "names": [".ignore"], "create": ".ignore",
            "changing": false}),
    )
    .await;
    assert_eq!(created[0][1], "ok ");
    assert_eq!(created[0][4], "ok DescriptorType::RegularFile");
    assert_eq!(cordon_runtime::lookups_answered_from_listings(), before);
    std::fs::remove_file(d.join(".ignore")).unwrap();

    // Same answers from a writable call, with or without a listing (without the opens that
    // would create or write, which a writable call may do).
    for list in [false, true] {
        let rw_answers = lookups(&rw, ask(list, false)).await;
        assert_eq!(rw_answers.len(), from_filesystem.len());
        for (fs, got) in from_filesystem.iter().zip(&rw_answers) {
            assert_eq!(
                fs.as_array().unwrap()[..6],
                got.as_array().unwrap()[..6],
                "read-write, list {list}"
            );
        }
    }
}

/// Whether listings on the filesystem of `dir` are trusted to answer lookups (ext2/3/4, xfs,
/// btrfs, tmpfs, f2fs), as the runtime decides.
fn lists_the_truth(dir: &std::path::Path) -> bool {
    let kind = rustix::fs::statfs(dir).unwrap().f_type as i64;
    [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010].contains(&kind)
}
