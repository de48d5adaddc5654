//! Reinstalling a name with a different component: the diff is shown, confirmation is
//! required, grants carry over only where the new ceiling permits them.

use cordon_tests::{TestHome, fixture};

fn path(name: &str) -> String {
    fixture(name).display().to_string()
}

#[test]
fn upgrade_shows_diff_and_needs_confirmation() {
    let home = TestHome::new();
    home.cordon(&["plugin", "install", &path("runaway"), "--name", "thing"])
        .ok();
    home.cordon(&["grant", "thing", "env:HOME"]).ok();

    // No terminal and no --yes: refused, nothing changed, the diff still shown.
    let refused = home
        .fails_unchanged(&["plugin", "install", &path("probe"), "--name", "thing"], 2)
        .stderr_has(&["--yes"]);
    let diff = &refused.stdout;
    for needle in [
        "`thing` is installed with a different component",
        "+ tool    fs",
        "+ tool    echo",
        "- tool    spin",
        "- tool    fine",
        "= grant   env:HOME (kept)",
    ] {
        assert!(diff.contains(needle), "diff lacks {needle:?}:\n{diff}");
    }
    // probe imports wasi:http and wasi:sockets, runaway does not: said loudly.
    assert!(diff.contains("WARNING"), "{diff}");
    assert!(
        diff.contains("+ import  wasi:http/outgoing-handler"),
        "{diff}"
    );

    // Piped "y" is not a terminal answer: still refused.
    let before = home.snapshot();
    home.cordon_with_stdin(
        &["plugin", "install", &path("probe"), "--name", "thing"],
        "y\n",
    )
    .code(2);
    assert_eq!(before, home.snapshot());

    home.cordon(&[
        "plugin",
        "install",
        &path("probe"),
        "--name",
        "thing",
        "--yes",
    ])
    .ok()
    .stdout_has(&["Upgraded plugin `thing`"]);
    home.cordon(&["plugin", "inspect", "thing"])
        .ok()
        .stdout_has(&["env:HOME", "  echo\n"]);
    home.cordon(&["call", "thing.echo", r#"{"x":1}"#]).ok();
    // The old component is gone from the home.
    let components: Vec<_> = std::fs::read_dir(home.path().join("components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".wasm"))
        .collect();
    assert_eq!(components.len(), 1, "{components:?}");
}

#[test]
fn downgrade_drops_grants_the_new_ceiling_forbids() {
    let home = TestHome::new();
    home.cordon(&[
        "plugin",
        "install",
        &path("probe"),
        "--name",
        "thing",
        "--grant",
        "net:https://example.com",
        "--grant",
        "env:HOME",
    ])
    .ok();
    home.cordon(&[
        "plugin",
        "install",
        &path("runaway"),
        "--name",
        "thing",
        "--yes",
    ])
    .ok()
    .stdout_has(&[
        "- grant   net:https://example.com",
        "dropped",
        "= grant   env:HOME (kept)",
        "- import  wasi:http/outgoing-handler",
        "Upgraded plugin `thing`",
    ]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains("example.com"), "{lock}");
    assert!(lock.contains("env:HOME"), "{lock}");
}

#[test]
fn reinstalling_the_same_component_keeps_grants_without_asking() {
    let home = TestHome::new();
    home.cordon(&["plugin", "install", &path("probe"), "--grant", "env:HOME"])
        .ok();
    home.cordon(&["plugin", "install", &path("probe"), "--grant", "env:USER"])
        .ok()
        .stdout_has(&["Reinstalled plugin `probe`", "env:HOME", "env:USER"]);
}
