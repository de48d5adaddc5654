//! A plugin builds against a copy of the SDK taken out of the Cordon tree: the SDK must not
//! reach for anything outside its own directory (the WIT contract above all).
//!
//! The SDK is copied into a temporary directory with a plugin crate made of
//! `examples/two_tools.rs` beside it, and that crate is built for `wasm32-wasip2`.

use std::path::Path;
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn has_wasip2_target() -> bool {
    let sysroot = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    sysroot.is_some_and(|s| Path::new(&s).join("lib/rustlib/wasm32-wasip2").is_dir())
}

#[test]
fn a_plugin_builds_against_a_copy_of_the_sdk() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !has_wasip2_target() {
        // Inside the tree `make toolchain` installs it, so there the test must run.
        assert!(
            !sdk.join("../../host").is_dir(),
            "the wasm32-wasip2 target is missing; run `make toolchain`"
        );
        eprintln!("skipped: `rustup target add wasm32-wasip2` to run it");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("cordon-sdk-outside-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_dir(sdk, &tmp.join("cordon-sdk"));
    let plugin = tmp.join("hello");
    std::fs::create_dir_all(plugin.join("src")).unwrap();
    std::fs::copy(sdk.join("examples/two_tools.rs"), plugin.join("src/lib.rs")).unwrap();
    // The SDK's lock file pins the same dependency versions, so nothing new is resolved.
    std::fs::copy(sdk.join("Cargo.lock"), plugin.join("Cargo.lock")).unwrap();
    std::fs::write(
        plugin.join("Cargo.toml"),
        r#"[package]
name = "hello"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
cordon-sdk = { path = "../cordon-sdk" }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
schemars = "1"
"#,
    )
    .unwrap();
    // Its own target directory: the one running this test is locked by the running cargo.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("outside-tree");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&plugin)
        .args(["build", "--quiet", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo runs");
    let wasm = std::fs::read(target.join("wasm32-wasip2/debug/hello.wasm"));
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        status.success(),
        "the plugin did not build against the copied SDK"
    );
    let wasm = wasm.unwrap();
    // A component, not a core module: `\0asm`, then version 0x0d and layer 1.
    assert_eq!(&wasm[..8], b"\0asm\x0d\x00\x01\x00", "not a component");
}
