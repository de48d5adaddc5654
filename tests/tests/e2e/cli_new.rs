//! `cordon new <rust|python|js|c>`: each generated project builds outside the Cordon tree with
//! its language's toolchain (the ones `make` installs), passes its own test, and its tool is
//! installed and called through the `cordon` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::{TestHome, cordon_bin, target_dir, workspace_root};

/// Runs `program args` in `dir` with `env`, and fails the test with its output unless it
/// succeeds. Returns its stdout.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, PathBuf)]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{program} {args:?} in {} failed:\n{stdout}\n{stderr}",
        dir.display()
    );
    stdout + &stderr
}

/// A new project of `language` in a fresh directory (not inside the Cordon tree).
fn new_project(home: &TestHome, language: &str) -> PathBuf {
    let dir = home.scratch("projects").join(format!("my-{language}"));
    home.cordon(&[
        "new",
        language,
        &format!("my-{language}"),
        "--dir",
        &dir.display().to_string(),
    ])
    .ok()
    .stdout_has(&["Created", "Then, in"]);
    assert!(!dir.starts_with(workspace_root().canonicalize().unwrap()));
    dir
}

/// A toolchain `make` installed under target/, or a panic saying to run it.
fn tool(path: &str) -> PathBuf {
    let path = target_dir().join(path);
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    path
}

#[test]
fn a_new_rust_project_builds_tests_and_its_tool_is_called() {
    let home = TestHome::new();
    let dir = new_project(&home, "rust");
    // One target directory across runs, so only the first builds the dependencies.
    let cargo_target = [("CARGO_TARGET_DIR", target_dir().join("new-rust"))];
    run(&dir, "cargo", &["test", "--quiet"], &cargo_target);
    run(
        &dir,
        "cargo",
        &["build", "--quiet", "--release", "--target", "wasm32-wasip2"],
        &cargo_target,
    );
    let wasm = target_dir().join("new-rust/wasm32-wasip2/release/my_rust.wasm");
    home.cordon(&[
        "plugin",
        "install",
        &wasm.display().to_string(),
        "--name",
        "my-rust",
    ])
    .ok();
    home.cordon(&["call", "greet", r#"{"name": "Rust"}"#])
        .ok()
        .stdout_has(&["Hello, Rust"]);
}

#[test]
fn a_new_python_project_builds_tests_and_its_tool_is_called() {
    let home = TestHome::new();
    let dir = new_project(&home, "python");
    let env = [
        ("COMPONENTIZE", tool("venv/bin/componentize-py")),
        ("PYTHON", tool("venv/bin/python")),
    ];
    run(&dir, "make", &["--no-print-directory"], &env);
    // With the component built, its tests run it in wasmtime too.
    let tested = run(&dir, "make", &["--no-print-directory", "test"], &env);
    assert!(!tested.contains("skipped"), "{tested}");
    let wasm = dir.join("build/text_stats.wasm");
    home.cordon(&[
        "plugin",
        "install",
        &wasm.display().to_string(),
        "--name",
        "my-python",
    ])
    .ok();
    home.cordon(&["call", "text_stats", r#"{"text": "to be or not to be"}"#])
        .ok()
        .stdout_has(&["\"words\": 6"]);
}

#[test]
fn a_new_js_project_builds_tests_and_its_tool_is_called() {
    let home = TestHome::new();
    let dir = new_project(&home, "js");
    // What `npm install` would fetch (the same pinned componentize-js), already installed.
    std::os::unix::fs::symlink(tool("js/node_modules"), dir.join("node_modules")).unwrap();
    let tested = run(&dir, "npm", &["test", "--silent"], &[]);
    assert!(tested.contains("# fail 0"), "{tested}");
    run(&dir, "npm", &["run", "--silent", "build"], &[]);
    let wasm = dir.join("build/plugin.wasm");
    home.cordon(&[
        "plugin",
        "install",
        &wasm.display().to_string(),
        "--name",
        "my-js",
    ])
    .ok();
    home.cordon(&["call", "text_stats", r#"{"text": "a b a"}"#])
        .ok()
        .stdout_has(&["\"most_frequent\": \"a\""]);
}

#[test]
fn a_new_c_project_builds_tests_and_its_tool_is_called() {
    let home = TestHome::new();
    let dir = new_project(&home, "c");
    let env = [
        ("WIT_BINDGEN", tool("tools/bin/wit-bindgen")),
        ("CORDON", cordon_bin()),
    ];
    run(&dir, "make", &["--no-print-directory"], &env);
    let tested = run(&dir, "make", &["--no-print-directory", "test"], &env);
    assert!(tested.contains("1 passed, 0 failed"), "{tested}");
    let wasm = dir.join("build/tool.wasm");
    home.cordon(&[
        "plugin",
        "install",
        &wasm.display().to_string(),
        "--name",
        "my-c",
    ])
    .ok();
    home.cordon(&["call", "text_shout", r#"{"text": "loud"}"#])
        .ok()
        .stdout_has(&["LOUD"]);
}

#[test]
fn a_new_project_is_never_written_over_an_existing_one() {
    let home = TestHome::new();
    let dir = new_project(&home, "c");
    let before = std::fs::read_to_string(dir.join("tool.c")).unwrap();
    home.cordon(&["new", "js", "other", "--dir", &dir.display().to_string()])
        .code(2)
        .stderr_has(&["already exists and is not empty"]);
    assert_eq!(std::fs::read_to_string(dir.join("tool.c")).unwrap(), before);
    home.cordon(&["new", "rust", "Not-A-Name"])
        .code(2)
        .stderr_has(&["cannot name a plugin"]);
}
