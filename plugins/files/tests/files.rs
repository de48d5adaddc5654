//! The `files` tools run natively on a tree the tests create, through the same entry points
//! the component exports.

use std::fs;
use std::path::Path;

use cordon_plugin_files::{
    FindFilesArgs, GrantedDirs, ListDirArgs, ReadFileArgs, SearchTextArgs, logic, plugin,
};
use cordon_sdk::{Content, ToolError};
use serde_json::{Value, json};
use tempfile::TempDir;

fn write(root: &Path, rel: &str, content: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// A small project: ignored build output and logs, hidden files, nested dirs, a binary file,
/// a large file, a file with many matches, and links pointing out of the tree.
fn tree() -> (TempDir, String) {
    let dir = TempDir::new().unwrap();
    let r = dir.path();
    write(r, ".gitignore", b"target/\n*.log\n");
    write(r, ".ignore", b"secret_ignored.txt\n");
    write(
        r,
        "src/main.rs",
        b"fn main() {\n    println!(\"hello\");\n}\n",
    );
    write(
        r,
        "src/lib/deep/nested.rs",
        b"// Hello from deep\npub fn nested() {}\n",
    );
    write(r, "target/build.rs", b"// hello from build output\n");
    write(r, "app.log", b"hello log\n");
    write(r, "secret_ignored.txt", b"hello secret\n");
    write(r, ".hidden/config.toml", b"hello = true\n");
    write(r, "docs/README.md", b"# Docs\nSay hello.\n");
    let mut binary = b"hello binary\n".to_vec();
    binary.extend_from_slice(&[0, 1, 2, 3, 0, 255]);
    binary.extend_from_slice(b"\nhello again\n");
    write(r, "data/blob.bin", &binary);
    let large: String = (1..=10_000).map(|i| format!("line {i}\n")).collect();
    write(r, "data/large.txt", large.as_bytes());
    let many: String = (1..=100).map(|i| format!("match {i}\n")).collect();
    write(r, "data/many.txt", many.as_bytes());
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("/etc", r.join("link_out")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", r.join("docs/hostname_link")).unwrap();
    }
    let root = r.to_str().unwrap().to_owned();
    (dir, root)
}

fn call_json(tool: &str, args: Value) -> Result<Value, ToolError> {
    let out = plugin().call(tool, &args.to_string())?;
    match out.as_slice() {
        [Content::Json(j)] => Ok(serde_json::from_str(j).unwrap()),
        other => panic!("expected one JSON piece, got {other:?}"),
    }
}

fn call_text(tool: &str, args: Value) -> Result<String, ToolError> {
    let out = plugin().call(tool, &args.to_string())?;
    match out.as_slice() {
        [Content::Text(t)] => Ok(t.clone()),
        other => panic!("expected one text piece, got {other:?}"),
    }
}

fn read(args: Value) -> Result<(String, Value), ToolError> {
    let out = plugin().call("read_file", &args.to_string())?;
    match out.as_slice() {
        [Content::Text(t), Content::Json(j)] => Ok((t.clone(), serde_json::from_str(j).unwrap())),
        other => panic!("unexpected {other:?}"),
    }
}

fn files_of(v: &Value, root: &str) -> Vec<String> {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().strip_prefix(root).unwrap().to_owned())
        .collect()
}

#[test]
fn plugin_is_well_formed_and_read_only() {
    let p = plugin();
    p.check().unwrap();
    let names: Vec<_> = p
        .descriptors()
        .into_iter()
        .map(|d| {
            assert!(d.hints.read_only && !d.hints.destructive && !d.hints.open_world);
            d.name
        })
        .collect();
    assert_eq!(
        names,
        ["list_dir", "find_files", "search_text", "read_file"]
    );
}

#[test]
fn find_files_honours_gitignore_and_hidden() {
    let (_d, root) = tree();
    let v = call_json("find_files", json!({ "pattern": "*.rs", "path": root })).unwrap();
    assert_eq!(
        files_of(&v, &root),
        ["/src/lib/deep/nested.rs", "/src/main.rs"]
    );
    assert_eq!(v["truncated"], false);
    let v = call_json(
        "find_files",
        json!({ "pattern": "*.rs", "path": root, "no_ignore": true }),
    )
    .unwrap();
    assert!(files_of(&v, &root).contains(&"/target/build.rs".to_owned()));
    let v = call_json("find_files", json!({ "pattern": "*.txt", "path": root })).unwrap();
    assert_eq!(
        files_of(&v, &root),
        ["/data/large.txt", "/data/many.txt"],
        ".ignore honoured"
    );
    let v = call_json("find_files", json!({ "pattern": "*.toml", "path": root })).unwrap();
    assert_eq!(v["count"], 0, "hidden off by default");
    let v = call_json(
        "find_files",
        json!({ "pattern": "*.toml", "path": root, "hidden": true }),
    )
    .unwrap();
    assert_eq!(files_of(&v, &root), ["/.hidden/config.toml"]);
}

#[test]
fn find_files_globs_on_paths_and_caps() {
    let (_d, root) = tree();
    let v = call_json(
        "find_files",
        json!({ "pattern": "src/**/*.rs", "path": root }),
    )
    .unwrap();
    assert_eq!(
        files_of(&v, &root),
        ["/src/lib/deep/nested.rs", "/src/main.rs"]
    );
    let v = call_json("find_files", json!({ "pattern": "src/*.rs", "path": root })).unwrap();
    assert_eq!(files_of(&v, &root), ["/src/main.rs"], "* does not cross /");
    let v = call_json(
        "find_files",
        json!({ "pattern": "{README,main}*", "path": root }),
    )
    .unwrap();
    assert_eq!(v["count"], 2);
    let v = call_json(
        "find_files",
        json!({ "pattern": "*", "path": root, "max_results": 3 }),
    )
    .unwrap();
    assert_eq!(v["count"], 3);
    assert_eq!(v["truncated"], true);
    // Links are not followed: nothing from /etc shows up.
    let v = call_json("find_files", json!({ "pattern": "passwd", "path": root })).unwrap();
    assert_eq!(v["count"], 0);
    let e = call_json("find_files", json!({ "pattern": "[", "path": root })).unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("glob")),
        "{e:?}"
    );
    let e = call_json(
        "find_files",
        json!({ "pattern": "*", "path": format!("{root}/nope") }),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("/nope")),
        "{e:?}"
    );
}

#[test]
fn search_text_prints_like_ripgrep_and_skips_binary_and_ignored() {
    let (_d, root) = tree();
    let out = call_text("search_text", json!({ "pattern": "hello", "path": root })).unwrap();
    let main = format!("{root}/src/main.rs:2:    println!(\"hello\");");
    assert!(out.contains(&main), "{out}");
    for skipped in [
        "blob.bin",
        "build.rs",
        "app.log",
        "secret",
        "config.toml",
        "Hello from deep",
    ] {
        assert!(
            !out.contains(skipped),
            "{skipped} should be skipped:\n{out}"
        );
    }
    assert!(out.contains("1 binary file(s) skipped"), "{out}");
    assert!(out.contains("2 matching line(s) in 2 file(s)"), "{out}");
    let out = call_text(
        "search_text",
        json!({ "pattern": "HELLO", "path": root, "ignore_case": true }),
    )
    .unwrap();
    assert!(out.contains("nested.rs:1:// Hello from deep"), "{out}");
}

#[test]
fn search_text_literal_regex_and_context() {
    let (_d, root) = tree();
    let out = call_text(
        "search_text",
        json!({ "pattern": "fn main() {", "path": root, "literal": true }),
    )
    .unwrap();
    assert!(out.contains("main.rs:1:fn main() {"), "{out}");
    let e = call_text(
        "search_text",
        json!({ "pattern": "fn main() {", "path": root }),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("literal")),
        "{e:?}"
    );
    let out = call_text("search_text", json!({ "pattern": r"^line 50\d\d$", "path": format!("{root}/data/large.txt"), "context": 1, "max_per_file": 2 })).unwrap();
    let expected = format!(
        "{root}/data/large.txt-4999-line 4999\n{root}/data/large.txt:5000:line 5000\n{root}/data/large.txt:5001:line 5001\n"
    );
    assert!(out.starts_with(&expected), "{out}");
    let out = call_text(
        "search_text",
        json!({ "pattern": "hello", "path": root, "glob": "*.md" }),
    )
    .unwrap();
    assert!(
        out.contains("README.md:2:Say hello.") && !out.contains("main.rs"),
        "{out}"
    );
    let out = call_text("search_text", json!({ "pattern": "zzzz", "path": root })).unwrap();
    assert!(out.starts_with("[no matches"), "{out}");
}

#[test]
fn search_text_caps_per_file_and_total() {
    let (_d, root) = tree();
    let out = call_text("search_text", json!({ "pattern": "^match", "path": root })).unwrap();
    assert_eq!(out.lines().filter(|l| l.contains("many.txt:")).count(), 20);
    assert!(out.contains("stopped at 20 matches"), "{out}");
    let out = call_text(
        "search_text",
        json!({ "pattern": "line", "path": root, "max_matches": 5, "max_per_file": 100 }),
    )
    .unwrap();
    assert_eq!(out.lines().filter(|l| l.contains("large.txt:")).count(), 5);
    assert!(out.contains("Stopped at 5 matches in total"), "{out}");
    let e = call_text(
        "search_text",
        json!({ "pattern": "x", "path": root, "context": 50 }),
    )
    .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)));
}

#[test]
fn read_file_pages_through_lines() {
    let (_d, root) = tree();
    let large = format!("{root}/data/large.txt");
    let (text, info) = read(json!({ "path": large, "start_line": 10, "end_line": 12 })).unwrap();
    assert_eq!(text, "line 10\nline 11\nline 12\n");
    assert_eq!(info["total_lines"], 10_000);
    assert_eq!(info["end_line"], 12);
    assert_eq!(info["truncated"], false);
    let (text, info) = read(json!({ "path": large, "max_bytes": 100 })).unwrap();
    assert!(text.len() <= 100 && text.ends_with('\n'), "{text}");
    assert_eq!(info["truncated"], true);
    let next = info["next_start_line"].as_u64().unwrap();
    assert_eq!(next, info["end_line"].as_u64().unwrap() + 1);
    let (text, _) = read(json!({ "path": large, "start_line": next, "end_line": next })).unwrap();
    assert_eq!(text, format!("line {next}\n"));
    // Default cap: 64 KiB of whole lines out of ~88 KiB.
    let (text, info) = read(json!({ "path": large })).unwrap();
    assert!(
        text.len() <= 65_536 && info["truncated"] == true,
        "{}",
        text.len()
    );
    let (text, info) = read(json!({ "path": format!("{root}/src/main.rs") })).unwrap();
    assert_eq!(text, "fn main() {\n    println!(\"hello\");\n}\n");
    assert_eq!(info["total_lines"], 3);
    assert!(info.get("next_start_line").is_none());
}

#[test]
fn read_file_refuses_what_it_cannot_return() {
    let (_d, root) = tree();
    let e = read(json!({ "path": format!("{root}/data/blob.bin") })).unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("binary")),
        "{e:?}"
    );
    let e = read(json!({ "path": format!("{root}/src") })).unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("directory")),
        "{e:?}"
    );
    let e = read(json!({ "path": format!("{root}/src/main.rs"), "start_line": 9 })).unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("only 3 line")),
        "{e:?}"
    );
    let e = read(json!({ "path": format!("{root}/src/main.rs"), "start_line": 3, "end_line": 2 }))
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)));
    let e = read(json!({ "path": format!("{root}/missing.txt") })).unwrap_err();
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("missing.txt")),
        "{e:?}"
    );
    let e = read(json!({ "file": "x" })).unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("file")),
        "{e:?}"
    );
}

#[test]
fn list_dir_shows_entries_without_following_links() {
    let (_d, root) = tree();
    let v = call_json("list_dir", json!({ "path": root })).unwrap();
    let entries = v["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            ".gitignore",
            ".hidden",
            ".ignore",
            "app.log",
            "data",
            "docs",
            "link_out",
            "secret_ignored.txt",
            "src",
            "target"
        ]
    );
    let link = entries.iter().find(|e| e["name"] == "link_out").unwrap();
    assert_eq!(link["type"], "symlink");
    assert!(link.get("size").is_none());
    let log = entries.iter().find(|e| e["name"] == "app.log").unwrap();
    assert_eq!(log, &json!({"name": "app.log", "type": "file", "size": 10}));
    let v = call_json("list_dir", json!({ "path": root, "max_entries": 2 })).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["total"], 10);
    let e = call_json("list_dir", json!({ "path": format!("{root}/app.log") })).unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("read_file")),
        "{e:?}"
    );
    let e = call_json("list_dir", json!({ "path": format!("{root}/nope") })).unwrap_err();
    assert!(
        matches!(&e, ToolError::NotFound(m) if m.contains("/nope")),
        "{e:?}"
    );
}

/// With explicit grants (as inside the component), paths outside them are refused before
/// any filesystem access, and `/` shows the grants.
#[test]
fn paths_outside_grants_are_denied() {
    let (_d, root) = tree();
    let fs_view = GrantedDirs::with_roots(&[&root]);
    let e = logic::read_file(
        &fs_view,
        serde_json::from_value::<ReadFileArgs>(json!({ "path": "/etc/passwd" })).unwrap(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ToolError::Denied(m) if m.contains(&root)),
        "{e:?}"
    );
    let escape = format!("{root}/../../etc/passwd");
    let e = logic::read_file(
        &fs_view,
        serde_json::from_value::<ReadFileArgs>(json!({ "path": escape })).unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, ToolError::Denied(_)), "{e:?}");
    // Relative paths are relative to the grant.
    let (text, _) = match logic::read_file(
        &fs_view,
        serde_json::from_value(json!({ "path": "src/main.rs" })).unwrap(),
    )
    .unwrap()
    .as_slice()
    {
        [Content::Text(t), Content::Json(j)] => (t.clone(), j.clone()),
        other => panic!("{other:?}"),
    };
    assert!(text.starts_with("fn main"));
    let v = logic::list_dir(
        &fs_view,
        serde_json::from_value::<ListDirArgs>(json!({ "path": "/" })).unwrap(),
    )
    .unwrap();
    assert_eq!(v.entries[0].name, root);
    // Without a path, search and find cover every grant.
    let out = logic::search_text(
        &fs_view,
        serde_json::from_value::<SearchTextArgs>(json!({ "pattern": "println" })).unwrap(),
    )
    .unwrap();
    assert!(out.contains(&format!("{root}/src/main.rs:2:")), "{out}");
    let v = logic::find_files(
        &fs_view,
        serde_json::from_value::<FindFilesArgs>(json!({ "pattern": "README.md", "path": "/" }))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(v.count, 1);
    let e = logic::find_files(
        &GrantedDirs::with_roots(&[]),
        serde_json::from_value::<FindFilesArgs>(json!({ "pattern": "*" })).unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, ToolError::Denied(_)));
}
