//! The bundled `files` tools (`list_dir`, `find_files`, `search_text`, `read_file`) end to
//! end through `cordon call`, over a tree the tests build: .gitignore, nested directories,
//! hidden files, a binary and a large file, and symlinks pointing out of the grant. Every
//! output is checked to name guest paths only, never the host's temporary directory.

use std::path::{Path, PathBuf};

use cordon_tests::{Run, TestHome};
use serde_json::{Value, json};

use cordon_tests::support::{grant_fs, home_with, install, json_of};

const PLUGINS: &[&str] = &["files"];

const README: &str = "# Demo\nThe needle is in this line.\nNo match here.\n";

/// Lines in `big.txt`; every 250th mentions the needle.
const BIG_LINES: usize = 5000;

fn big_line(n: usize) -> String {
    if n.is_multiple_of(250) {
        format!("line {n}: a needle hides here\n")
    } else {
        format!("line {n}: hay hay hay hay hay hay hay hay\n")
    }
}

/// Builds the tree under `data` and a secret beside it in `outside`.
fn build_tree(data: &Path, outside: &Path) {
    let write = |rel: &str, bytes: &[u8]| {
        let path = data.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    };
    write(".gitignore", b"build/\n*.log\nsecret-notes.txt\n");
    write(
        "README.md",
        b"# Demo\nThe needle is in this line.\nNo match here.\n",
    );
    write(
        "src/main.rs",
        b"fn main() {\n    println!(\"Needle\");\n}\n",
    );
    write(
        "src/lib.rs",
        b"// one\n// two\npub fn needle() -> usize {\n    1 + 1\n}\n// six\n// seven\npub const PATTERN: &str = \"a.b(c\";\n",
    );
    write("src/nested/deep/mod.rs", b"// deep needle\n");
    write("build/out.txt", b"needle in ignored build output\n");
    write("app.log", b"needle in an ignored log\n");
    write("secret-notes.txt", b"needle in an ignored file\n");
    write(".hidden/config.toml", b"needle = true\n");
    write(".env", b"TOKEN=needle\n");
    write("data.bin", b"needle\0\x01\x02\xffbinary needle");
    let big: String = (1..=BIG_LINES).map(big_line).collect();
    write("big.txt", big.as_bytes());

    std::fs::write(outside.join("secret.txt"), "top-secret needle value\n").unwrap();
    std::os::unix::fs::symlink(outside, data.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), data.join("secret-link.txt")).unwrap();
}

/// A home with `files` installed and the tree granted read-only as `/data`.
fn tree() -> (TestHome, PathBuf) {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    let outside = home.scratch("outside");
    build_tree(&data, &outside);
    install(&home, "files", &[grant_fs(&data, "/data", "ro")], &[]);
    (home, data)
}

/// Runs a call and checks that its output names no host path and no secret.
fn call(home: &TestHome, tool: &str, args: Value) -> Run {
    let run = home.cordon(&["call", tool, &args.to_string()]);
    let host = home.path().parent().unwrap().display().to_string();
    for text in [&run.stdout, &run.stderr] {
        assert!(
            !text.contains(&host),
            "`{}` revealed the host path {host}:\n{text}",
            run.command
        );
        assert!(
            !text.contains("top-secret"),
            "`{}` revealed the secret:\n{text}",
            run.command
        );
    }
    run
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// `read_file` prints the text, then pretty JSON: splits the two.
fn text_and_info(run: &Run) -> (String, Value) {
    let at = if run.stdout.starts_with("{\n") {
        0
    } else {
        run.stdout.rfind("\n{\n").expect("JSON after the text") + 1
    };
    let info = serde_json::from_str(&run.stdout[at..]).expect("JSON info");
    (run.stdout[..at].to_owned(), info)
}

#[test]
fn list_dir_shows_names_types_sizes_and_the_grants() {
    let (home, _) = tree();
    let out = json_of(&call(&home, "list_dir", json!({"path": "/data"})).ok());
    let entries = out["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            ".env",
            ".gitignore",
            ".hidden",
            "README.md",
            "app.log",
            "big.txt",
            "build",
            "data.bin",
            "escape",
            "secret-link.txt",
            "secret-notes.txt",
            "src"
        ],
        "{out:#}"
    );
    assert_eq!(
        (out["total"].clone(), out["truncated"].clone()),
        (json!(12), json!(false))
    );
    let entry = |name: &str| entries.iter().find(|e| e["name"] == json!(name)).unwrap();
    assert_eq!(entry("README.md")["type"], json!("file"));
    assert_eq!(entry("README.md")["size"], json!(README.len()));
    assert_eq!(entry("src")["type"], json!("dir"));
    let big_size: usize = (1..=BIG_LINES).map(|n| big_line(n).len()).sum();
    assert_eq!(entry("big.txt")["size"], json!(big_size));
    // Links that lead out of the grant are shown as links, never followed or resolved.
    for link in ["escape", "secret-link.txt"] {
        assert_eq!(entry(link)["type"], json!("symlink"), "{out:#}");
        assert!(
            entry(link)["target_type"]
                .as_str()
                .unwrap()
                .starts_with("unreachable"),
            "{out:#}"
        );
    }

    let sub = json_of(&call(&home, "list_dir", json!({"path": "/data/src/nested"})).ok());
    assert_eq!(
        sub["entries"],
        json!([{"name": "deep", "type": "dir"}]),
        "{sub:#}"
    );
    let capped = json_of(
        &call(
            &home,
            "list_dir",
            json!({"path": "/data", "max_entries": 3}),
        )
        .ok(),
    );
    assert_eq!(capped["entries"].as_array().unwrap().len(), 3);
    assert_eq!(capped["truncated"], json!(true));
    // `/` shows the granted directories and nothing else of the host.
    let root = json_of(&call(&home, "list_dir", json!({"path": "/"})).ok());
    assert_eq!(
        root["entries"],
        json!([{"name": "/data", "type": "dir", "granted": true}])
    );
}

#[test]
fn find_files_globs_honour_gitignore_and_skip_hidden_by_default() {
    let (home, _) = tree();
    let find = |args: Value| json_of(&call(&home, "find_files", args).ok());

    let out = find(json!({"pattern": "*.rs"}));
    assert_eq!(
        strings(&out["files"]),
        [
            "/data/src/lib.rs",
            "/data/src/main.rs",
            "/data/src/nested/deep/mod.rs"
        ],
        "{out:#}"
    );
    assert_eq!(out["searched"], json!(["/data"]));
    let out = find(json!({"pattern": "src/**/*.rs", "path": "/data"}));
    assert_eq!(
        strings(&out["files"]),
        [
            "/data/src/lib.rs",
            "/data/src/main.rs",
            "/data/src/nested/deep/mod.rs"
        ]
    );
    let out = find(json!({"pattern": "*.rs", "path": "/data/src/nested"}));
    assert_eq!(strings(&out["files"]), ["/data/src/nested/deep/mod.rs"]);

    // .gitignore'd files (build/, *.log, secret-notes.txt) appear only with no_ignore.
    let out = find(json!({"pattern": "*.{txt,log}"}));
    assert_eq!(
        strings(&out["files"]),
        ["/data/big.txt", "/data/secret-link.txt"],
        "{out:#}"
    );
    let out = find(json!({"pattern": "*.{txt,log}", "no_ignore": true}));
    assert_eq!(
        strings(&out["files"]),
        [
            "/data/app.log",
            "/data/big.txt",
            "/data/build/out.txt",
            "/data/secret-link.txt",
            "/data/secret-notes.txt"
        ],
        "{out:#}"
    );
    // Hidden files and directories appear only with hidden.
    let out = find(json!({"pattern": "*.toml"}));
    assert_eq!(out["files"], json!([]), "{out:#}");
    let out = find(json!({"pattern": "{*.toml,.env}", "hidden": true}));
    assert_eq!(
        strings(&out["files"]),
        ["/data/.env", "/data/.hidden/config.toml"],
        "{out:#}"
    );
    // The link to the outside directory is not walked into.
    let out = find(json!({"pattern": "secret*", "no_ignore": true, "hidden": true}));
    assert_eq!(
        strings(&out["files"]),
        ["/data/secret-link.txt", "/data/secret-notes.txt"],
        "{out:#}"
    );

    let out = find(json!({"pattern": "*", "max_results": 2}));
    assert_eq!(
        (out["count"].clone(), out["truncated"].clone()),
        (json!(2), json!(true))
    );
    call(&home, "find_files", json!({"pattern": "[unclosed"}))
        .code(1)
        .stderr_has(&["`pattern` is not a valid glob"]);
}

#[test]
fn search_text_prints_path_line_text_and_skips_binary_hidden_and_ignored() {
    let (home, _) = tree();
    let search = |args: Value| call(&home, "search_text", args).ok().stdout;

    let out = search(json!({"pattern": "needle", "max_per_file": 100}));
    let mut expected = vec!["/data/README.md:2:The needle is in this line.".to_owned()];
    expected.extend(
        (1..=BIG_LINES)
            .filter(|n| n.is_multiple_of(250))
            .map(|n| format!("/data/big.txt:{n}:line {n}: a needle hides here")),
    );
    expected.push("/data/src/lib.rs:3:pub fn needle() -> usize {".to_owned());
    expected.push("/data/src/nested/deep/mod.rs:1:// deep needle".to_owned());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..lines.len() - 2], expected, "{out}");
    assert_eq!(lines[lines.len() - 2], "");
    let summary = lines[lines.len() - 1];
    assert!(
        summary.starts_with("[23 matching line(s) in 4 file(s);")
            && summary.contains("1 binary file(s) skipped"),
        "{summary}"
    );

    // Case-insensitive finds `Needle` in main.rs too; a regex matches across words.
    let out = search(json!({"pattern": "NEEDLE", "ignore_case": true, "path": "/data/src"}));
    assert!(
        out.contains("/data/src/main.rs:2:    println!(\"Needle\");"),
        "{out}"
    );
    assert!(out.contains("[3 matching line(s) in 3 file(s)"), "{out}");
    let out = search(json!({"pattern": r"^pub (fn|const) \w+", "path": "/data/src/lib.rs"}));
    assert!(
        out.starts_with(
            "/data/src/lib.rs:3:pub fn needle() -> usize {\n/data/src/lib.rs:8:pub const PATTERN"
        ),
        "{out}"
    );
    // Literal text with regex characters; as a regex the same text is invalid.
    let out = search(json!({"pattern": "a.b(c", "literal": true}));
    assert!(
        out.starts_with("/data/src/lib.rs:8:pub const PATTERN: &str = \"a.b(c\";\n"),
        "{out}"
    );
    call(&home, "search_text", json!({"pattern": "a.b(c"}))
        .code(1)
        .stderr_has(&["not a valid regular expression", "literal"]);

    // Context lines are `path-line-text`, groups split by `--`.
    let out = search(json!({"pattern": "needle", "path": "/data/src/lib.rs", "context": 1}));
    assert!(
        out.starts_with("/data/src/lib.rs-2-// two\n/data/src/lib.rs:3:pub fn needle() -> usize {\n/data/src/lib.rs-4-    1 + 1\n"),
        "{out}"
    );
    let out =
        search(json!({"pattern": "^// (one|seven)", "path": "/data/src/lib.rs", "context": 1}));
    assert!(
        out.contains(
            "/data/src/lib.rs-2-// two\n--\n/data/src/lib.rs-6-// six\n/data/src/lib.rs:7:// seven"
        ),
        "{out}"
    );

    // Hidden and ignored files only when asked; binary files never.
    let out = search(
        json!({"pattern": "needle", "hidden": true, "no_ignore": true, "glob": "{*.toml,.env,*.log,*.bin,out.txt}"}),
    );
    for hit in [
        "/data/.env:1:",
        "/data/.hidden/config.toml:1:",
        "/data/app.log:1:",
        "/data/build/out.txt:1:",
    ] {
        assert!(out.contains(hit), "{hit} missing:\n{out}");
    }
    assert!(!out.contains("data.bin"), "{out}");
    assert!(out.contains("1 binary file(s) skipped"), "{out}");

    // The total cap stops the search and says so.
    let out = search(json!({"pattern": "needle", "max_matches": 5, "max_per_file": 100}));
    let hits = out.lines().filter(|l| l.starts_with("/data/")).count();
    assert_eq!(hits, 5, "{out}");
    assert!(out.contains("Stopped at 5 matches in total"), "{out}");
    let out = search(json!({"pattern": "needle", "path": "/data/big.txt"}));
    assert!(
        out.contains("stopped at 20 matches (raise max_per_file)"),
        "{out}"
    );
}

#[test]
fn read_file_returns_line_ranges_capped_with_paging_info() {
    let (home, _) = tree();
    let read = |args: Value| text_and_info(&call(&home, "read_file", args).ok());

    let (text, info) = read(json!({"path": "/data/big.txt", "start_line": 250, "end_line": 252}));
    assert_eq!(
        text,
        format!("{}{}{}", big_line(250), big_line(251), big_line(252))
    );
    assert_eq!(info["total_lines"], json!(BIG_LINES), "{info:#}");
    assert_eq!(
        (info["start_line"].clone(), info["end_line"].clone()),
        (json!(250), json!(252))
    );
    assert_eq!(info["truncated"], json!(false));
    assert_eq!(info["path"], json!("/data/big.txt"));

    // The default cap (64 KiB) stops a large file on a whole line and says where to go on.
    let (text, info) = read(json!({"path": "/data/big.txt"}));
    assert!(
        text.len() <= 65_536 && text.len() > 60_000,
        "{}",
        text.len()
    );
    let last = info["end_line"].as_u64().unwrap() as usize;
    assert!(text.ends_with(&big_line(last)), "{info:#}");
    let expected: String = (1..=last).map(big_line).collect();
    assert_eq!(text, expected);
    assert_eq!(info["truncated"], json!(true));
    assert_eq!(info["next_start_line"], json!(last + 1));
    let (text, info) =
        read(json!({"path": "/data/big.txt", "start_line": last + 1, "max_bytes": 100}));
    assert_eq!(
        text,
        format!("{}{}", big_line(last + 1), big_line(last + 2))
    );
    assert_eq!(info["next_start_line"], json!(last + 3));
    // Relative paths are taken inside the grant.
    let (text, _) = read(json!({"path": "src/main.rs"}));
    assert_eq!(text, "fn main() {\n    println!(\"Needle\");\n}\n");

    call(&home, "read_file", json!({"path": "/data/data.bin"}))
        .code(1)
        .stderr_has(&["/data/data.bin is a binary file"]);
    call(&home, "read_file", json!({"path": "/data/src"}))
        .code(1)
        .stderr_has(&["/data/src is a directory"]);
    call(
        &home,
        "read_file",
        json!({"path": "/data/README.md", "start_line": 9}),
    )
    .code(1)
    .stderr_has(&["has only 3 line(s)"]);
    call(&home, "read_file", json!({"path": "/data/nope.txt"}))
        .code(1)
        .stderr_has(&["not found", "/data/nope.txt does not exist"]);
}

#[test]
fn escapes_out_of_the_grant_are_refused() {
    let (home, data) = tree();
    let host_secret = data.parent().unwrap().join("outside/secret.txt");
    let host_secret = host_secret.to_str().unwrap();
    let reads = [
        "/data/../outside/secret.txt",
        "../outside/secret.txt",
        "/data/secret-link.txt",
        "/data/escape/secret.txt",
        "/etc/passwd",
    ];
    for path in reads {
        let run = call(&home, "read_file", json!({"path": path})).code(1);
        assert!(run.stdout.is_empty(), "{path}: {}", run.stdout);
        assert!(
            run.stderr.contains("denied") || run.stderr.contains("not found"),
            "{path}: {}",
            run.stderr
        );
    }
    // A host path is refused without touching the filesystem; the refusal names only the
    // path as given and the guest grants.
    let run = home
        .cordon(&[
            "call",
            "read_file",
            &json!({"path": host_secret}).to_string(),
        ])
        .code(1)
        .stderr_has(&[
            "denied",
            "outside the directories granted to this tool (/data)",
        ]);
    assert!(!run.stdout.contains("top-secret"));
    call(&home, "list_dir", json!({"path": "/data/escape"})).code(1);
    call(&home, "list_dir", json!({"path": "/data/.."}))
        .ok()
        .stdout_has(&["\"name\": \"/data\"", "not granted"]);
    call(
        &home,
        "find_files",
        json!({"pattern": "*", "path": "/data/../outside"}),
    )
    .code(1)
    .stderr_has(&["denied"]);
    call(
        &home,
        "search_text",
        json!({"pattern": "secret", "path": "/data/escape"}),
    )
    .code(1);
    call(
        &home,
        "search_text",
        json!({"pattern": "top-secret", "path": "/tmp"}),
    )
    .code(1)
    .stderr_has(&["denied"]);
    // Searching everything granted never reaches the secret through the links.
    let out = call(
        &home,
        "search_text",
        json!({"pattern": "top-secret", "hidden": true, "no_ignore": true}),
    )
    .ok()
    .stdout;
    // All 12 regular files were searched (links are not files to the walk).
    assert!(
        out.starts_with("[no matches; 0 matching line(s) in 0 file(s); 12 file(s) searched"),
        "{out}"
    );
}

#[test]
fn search_text_counts_files_without_a_match_as_ripgrep_does() {
    // The host passes over files that contain none of the pattern's literals; the answer must
    // be the one searching them would give: binary only by a NUL in the first 64 KiB,
    // byte-order-marked files decoded, Unicode case folding kept.
    let home = home_with(PLUGINS);
    let data = home.scratch("sift");
    let write = |name: &str, bytes: &[u8]| std::fs::write(data.join(name), bytes).unwrap();
    write("plain.txt", b"a needle\n");
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(
            "a needle, decoded\n"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    write("utf16.txt", &utf16);
    write("early_nul.bin", b"hay\0hay\n");
    let mut late_nul = b"hay hay\n".repeat(9000);
    late_nul.push(0);
    write("late_nul.txt", &late_nul);
    write("kelvin.txt", "\u{212A}ELVIN\n".as_bytes());
    install(&home, "files", &[grant_fs(&data, "/data", "ro")], &[]);
    let search = |args: Value| call(&home, "search_text", args).ok().stdout;

    let out = search(json!({"pattern": "needle", "literal": true}));
    assert_eq!(
        out.trim_end(),
        "/data/plain.txt:1:a needle\n/data/utf16.txt:1:a needle, decoded\n\n\
         [2 matching line(s) in 2 file(s); 5 file(s) searched, 1 binary file(s) skipped]",
    );
    let out = search(json!({"pattern": "kelvin", "ignore_case": true}));
    assert!(
        out.starts_with("/data/kelvin.txt:1:\u{212A}ELVIN\n"),
        "{out}"
    );
    // Nothing matches: every file is passed over (but the marked one) and still counted.
    let out = search(json!({"pattern": "zzz", "literal": true}));
    assert_eq!(
        out.trim_end(),
        "[no matches; 0 matching line(s) in 0 file(s); 5 file(s) searched, 1 binary file(s) skipped]"
    );
}
