//! `cordon call`: output formats, exit codes, argument validation, sandbox refusals and
//! tamper detection.

use cordon_tests::{TestHome, fixture};

fn with_data() -> (TestHome, std::path::PathBuf) {
    let home = TestHome::new();
    let data = home.scratch("data");
    std::fs::write(data.join("note.txt"), "line one\nline two\n").unwrap();
    home.cordon(&[
        "plugin",
        "install",
        fixture("probe").to_str().unwrap(),
        "--grant",
        &format!("fs:{}:/data:ro", data.display()),
    ])
    .ok();
    (home, data)
}

#[test]
fn text_is_printed_raw_and_json_pretty() {
    let (home, _) = with_data();
    let run = home.cordon(&["call", "echo", r#"{"a":[1,2]}"#]).ok();
    // echo returns the arguments as text, then as JSON.
    assert!(run.stdout.starts_with("{\"a\":[1,2]}\n"), "{}", run.stdout);
    assert!(
        run.stdout.contains("{\n  \"a\": [\n    1,\n    2\n  ]\n}"),
        "{}",
        run.stdout
    );
    home.cordon(&["call", "noop"]).ok();
    home.cordon(&["call", "probe.noop", "{}"]).ok();
}

#[test]
fn reads_inside_the_grant_and_refuses_escapes() {
    let (home, data) = with_data();
    home.cordon(&["call", "fs", r#"{"op":"read","path":"/data/note.txt"}"#])
        .ok()
        .stdout_has(&["line one\\nline two"]);

    let outside = home.scratch("outside");
    std::fs::write(outside.join("secret.txt"), "do not read").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), data.join("link")).unwrap();
    for path in ["/data/../outside/secret.txt", "/data/link", "/etc/passwd"] {
        let run = home
            .cordon(&["call", "fs", &format!(r#"{{"op":"read","path":"{path}"}}"#)])
            .code(1);
        assert!(
            !run.stdout.contains("do not read"),
            "{path}: {}",
            run.stdout
        );
        assert!(run.stderr.contains("failed"), "{path}: {}", run.stderr);
    }
}

#[test]
fn bad_calls_exit_2_and_change_nothing() {
    let (home, _) = with_data();
    home.fails_unchanged(&["call", "nosuchtool", "{}"], 2)
        .stderr_has(&["no tool named `nosuchtool`", "echo", "fs"]);
    home.fails_unchanged(&["call", "echo", "{not json"], 2)
        .stderr_has(&["not valid JSON"]);
    home.fails_unchanged(&["call", "echo", "[1,2]"], 2)
        .stderr_has(&["expected a JSON object"]);
    home.fails_unchanged(&["call", "fs", r#"{"op":3}"#], 2)
        .stderr_has(&["do not match its input schema", "path", "/op"]);
    home.fails_unchanged(&["call", "nobody.echo", "{}"], 2);
    // A tool error (not found inside the grant) is exit 1.
    home.fails_unchanged(&["call", "fs", r#"{"op":"read","path":"/data/absent"}"#], 1)
        .stderr_has(&["`fs` failed"]);
}

#[test]
fn tampered_component_is_refused_until_reinstalled() {
    let (home, _) = with_data();
    let components = home.path().join("components");
    let wasm = std::fs::read_dir(&components)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "wasm"))
        .unwrap();
    let original = std::fs::read(&wasm).unwrap();
    let mut changed = original.clone();
    changed.extend_from_slice(b"\0");
    std::fs::write(&wasm, &changed).unwrap();
    home.cordon(&["call", "noop"])
        .code(1)
        .stderr_has(&["changed since install", "reinstall"]);
    home.cordon(&["plugin", "inspect", "probe"]).code(1);

    std::fs::remove_file(&wasm).unwrap();
    home.cordon(&["call", "noop"])
        .code(1)
        .stderr_has(&["reinstall"]);
    home.cordon(&["plugin", "install", fixture("probe").to_str().unwrap()])
        .ok();
    home.cordon(&["call", "noop"]).ok();
    assert_eq!(std::fs::read(&wasm).unwrap(), original);
}

#[test]
fn corrupt_lock_file_is_reported_not_overwritten() {
    let (home, _) = with_data();
    let lock = home.path().join("plugins.toml");
    std::fs::write(&lock, "this is = = not toml").unwrap();
    home.fails_unchanged(&["plugin", "list"], 1)
        .stderr_has(&["plugins.toml", "not a valid Cordon lock file"]);
    home.fails_unchanged(&["grant", "probe", "env:HOME"], 1);
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            fixture("probe").to_str().unwrap(),
            "--name",
            "x",
        ],
        1,
    );
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "this is = = not toml"
    );
}

#[test]
fn a_reader_that_goes_away_ends_commands_quietly() {
    use std::process::{Command, Stdio};
    let (home, _) = with_data();
    for args in [
        vec!["plugin", "inspect", "probe"],
        vec!["plugin", "list"],
        vec!["call", "echo", r#"{"a":1}"#],
    ] {
        let mut child = Command::new(cordon_tests::cordon_bin())
            .arg("--home")
            .arg(home.path())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked"),
            "`cordon {}` panicked on a closed stdout:\n{stderr}",
            args.join(" ")
        );
    }
}

/// A file whose text carries terminal controls, read by the bundled `files` plugin: on a
/// terminal the result is shown with every control visible and inert; through a pipe the
/// reader gets the file's exact bytes.
#[test]
fn file_contents_reach_a_terminal_escaped_and_a_pipe_exact() {
    use cordon_tests::support::{grant_fs, home_with, install};
    use cordon_tests::terminal::{HOSTILE, HOSTILE_SHOWN};

    let home = home_with(&["files"]);
    let data = home.scratch("data");
    std::fs::write(data.join("evil.txt"), format!("{HOSTILE}\n")).unwrap();
    install(&home, "files", &[grant_fs(&data, "/data", "ro")], &[]);
    let args = r#"{"path":"/data/evil.txt"}"#;

    home.cordon_on_terminal(&["call", "read_file", args])
        .ok()
        .shows_only_text()
        .shows(&[HOSTILE_SHOWN, "\"total_lines\": 1"]);

    let piped = home.cordon(&["call", "read_file", args]).ok();
    assert!(
        piped.stdout.starts_with(&format!("{HOSTILE}\n")),
        "a pipe did not get the file's exact text: {:?}",
        piped.stdout
    );
}

/// A plugin's result, log records, stderr and error message all carry terminal controls; on a
/// terminal none of them acts, through a pipe the result is exact.
#[test]
fn a_hostile_plugin_cannot_drive_the_terminal() {
    use cordon_tests::terminal::{HOSTILE, HOSTILE_SHOWN};

    let home = TestHome::new();
    home.cordon(&["plugin", "install", fixture("escapes").to_str().unwrap()])
        .ok();

    let shown = home
        .cordon_on_terminal(&["call", "shout", "{}"])
        .ok()
        .shows_only_text()
        .shows(&[
            &format!("result {HOSTILE_SHOWN}"),
            &format!("log {HOSTILE_SHOWN}"),
        ]);
    assert!(shown.output.contains("WARN"), "{}", shown.output);

    // With -v the plugin's own stderr is logged too (as the pieces it was written in).
    home.cordon_on_terminal(&["-v", "call", "shout", "{}"])
        .ok()
        .shows_only_text()
        .shows(&["INFO stderr", &format!("INFO {HOSTILE_SHOWN}")]);

    home.cordon_on_terminal(&["call", "shout", r#"{"fail": true}"#])
        .code(1)
        .shows_only_text()
        .shows(&["error: ", &format!("error {HOSTILE_SHOWN}")]);

    let piped = home.cordon(&["call", "shout", "{}"]).ok();
    assert_eq!(piped.stdout, format!("result {HOSTILE}\n"));
}
