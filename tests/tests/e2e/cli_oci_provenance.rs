//! Where an update comes from, against the real registry of `cli_oci`: a tag moved back to a
//! manifest the plugin had before (a rollback) and a version signed by another trusted key
//! than the installed one are refused unless allowed, and shown loudly and recorded in the
//! audit log when they are; a key trusted `--for` some repositories signs for no others.

use cordon_tests::{TestHome, fixture};

use super::cli_oci::{Registry, get_manifest, keygen, push_raw, pushed};

/// Moves `repo:tag` to the manifest `digest` the registry already holds, as anyone who can
/// push to the repository can.
fn retag(registry: &Registry, repo: &str, tag: &str, digest: &str) {
    let manifest = get_manifest(registry, repo, digest);
    push_raw(
        registry,
        repo,
        tag,
        &[],
        "application/vnd.oci.image.manifest.v1+json",
        &manifest,
    );
}

fn lock_of(home: &TestHome) -> String {
    std::fs::read_to_string(home.path().join("plugins.toml")).unwrap()
}

/// The audit log's line for `action` on `plugin`.
fn audit_line(home: &TestHome, action: &str, plugin: &str) -> String {
    let audit = home.cordon(&["audit"]).ok();
    let needle = format!(" {action} {plugin} by ");
    audit
        .stdout
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no `{action} {plugin}` in the audit log:\n{}", audit.stdout))
        .to_string()
}

/// The first 12 hex digits of a digest, as listings show it.
fn short(digest: &str) -> &str {
    &digest[7..19]
}

#[test]
fn a_tag_moved_back_to_an_older_signed_manifest_is_refused_as_a_rollback() {
    let registry = Registry::start();
    let home = TestHome::new();
    let (alice_key, alice_pub) = keygen(&home, "alice");
    home.cordon(&["trust", "add", &alice_pub]).ok();
    let tag = registry.reference("plugins/greeter:stable");
    let v1 = pushed(&home, &fixture("greeter"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok();
    home.cordon(&["plugin", "install", &tag]).ok();
    let v2 = pushed(&home, &fixture("greeter-v2"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok();
    home.cordon(&["plugin", "update", "greeter", "--yes"])
        .ok()
        .stdout_has(&["Upgraded plugin `greeter`"]);
    let lock = lock_of(&home);
    assert!(lock.contains(&format!("oci_manifest = \"{v2}\"")), "{lock}");
    assert!(
        lock.contains("previous_manifests") && lock.contains(&v1),
        "{lock}"
    );

    // Someone who can push to the repository moves the tag back to v1: a release Alice did
    // sign, and replaced since.
    retag(&registry, "plugins/greeter", "stable", &v1);
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&[
            &format!(
                "ROLLBACK: {} -> {}, a manifest it had 1 version(s) ago",
                short(&v2),
                short(&v1)
            ),
            &format!("!!! ROLLBACK: `greeter` goes back to manifest {v1}"),
            "`cordon plugin update` refuses this without --allow-rollback.",
            "- import  wasi:sockets/tcp",
        ]);
    for args in [
        vec!["plugin", "update", "greeter", "--yes"],
        vec!["plugin", "update", "--all", "--yes"],
        vec!["plugin", "update", "greeter", "--yes", "--allow-new-signer"],
        // Installing the tag over it again is the same rollback.
        vec!["plugin", "install", &tag, "--yes"],
    ] {
        home.fails_unchanged(&args, 2).stderr_has(&[
            &format!("now names {v1}, a manifest this plugin had 1 version(s) ago"),
            &format!("(it has {v2} now)"),
            "Nothing was changed",
            "--allow-rollback",
        ]);
    }

    // Allowed: done, said loudly, and in the audit log.
    home.cordon(&["plugin", "update", "greeter", "--yes", "--allow-rollback"])
        .ok()
        .stdout_has(&[
            &format!("!!! ROLLBACK: `greeter` goes back to manifest {v1}"),
            "Rolled back plugin `greeter`",
        ]);
    assert!(lock_of(&home).contains(&format!("oci_manifest = \"{v1}\"")));
    let line = audit_line(&home, "rollback", "greeter");
    assert!(
        line.contains(&format!(
            "ROLLBACK to manifest {v1}, which it had 1 version(s) ago, from {v2} (allowed \
             with --allow-rollback)"
        )),
        "{line}"
    );

    // Moving forward to v2 again is not another rollback; going back to v1 from there is.
    retag(&registry, "plugins/greeter", "stable", &v2);
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&[&format!("NEW: {} -> {}", short(&v1), short(&v2))]);
    home.cordon(&["plugin", "update", "greeter", "--yes"])
        .ok()
        .stdout_has(&["Upgraded plugin `greeter`"]);
    retag(&registry, "plugins/greeter", "stable", &v1);
    home.fails_unchanged(&["plugin", "update", "greeter", "--yes"], 2)
        .stderr_has(&["--allow-rollback"]);
}

#[test]
fn a_version_signed_only_by_another_trusted_key_is_refused_as_a_new_signer() {
    let registry = Registry::start();
    let home = TestHome::new();
    let (alice_key, alice_pub) = keygen(&home, "alice");
    let (bob_key, bob_pub) = keygen(&home, "bob");
    home.cordon(&["trust", "add", &alice_pub]).ok();
    // Bob is trusted too, for his own plugins, with no scope given.
    home.cordon(&["trust", "add", &bob_pub]).ok();
    let tag = registry.reference("alice/greeter:1");
    pushed(&home, &fixture("greeter"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok();
    home.cordon(&["plugin", "install", &tag]).ok();

    // Alice's repository now serves a release only Bob signed.
    pushed(&home, &fixture("greeter-v2"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &bob_key])
        .ok();
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&[
            "NEW: ",
            "!!! NEW SIGNER: signed by `bob` (sha256:",
            "not by `alice` (sha256:",
            "`cordon plugin update` refuses this without --allow-new-signer.",
        ]);
    for args in [
        vec!["plugin", "update", "greeter", "--yes"],
        vec!["plugin", "update", "greeter", "--yes", "--allow-rollback"],
        vec!["plugin", "install", &tag, "--yes"],
    ] {
        home.fails_unchanged(&args, 2).stderr_has(&[
            "is signed by `bob` (sha256:",
            "not by `alice` (sha256:",
            "who signed the version installed",
            "Nothing was changed",
            "--allow-new-signer",
        ]);
    }

    home.cordon(&["plugin", "update", "greeter", "--yes", "--allow-new-signer"])
        .ok()
        .stdout_has(&[
            "!!! NEW SIGNER: signed by `bob`",
            "Upgraded plugin `greeter`",
        ]);
    assert!(lock_of(&home).contains("key = \"bob\""));
    home.cordon(&["plugin", "list"])
        .ok()
        .stdout_has(&["(signed by `bob`)"]);
    let line = audit_line(&home, "upgrade", "greeter");
    assert!(
        line.contains("NEW SIGNER `bob` (sha256:")
            && line.contains("instead of `alice` (sha256:")
            && line.contains("(allowed with --allow-new-signer)"),
        "{line}"
    );
}

#[test]
fn a_key_trusted_for_other_repositories_does_not_sign_for_this_one() {
    let registry = Registry::start();
    let home = TestHome::new();
    let (alice_key, alice_pub) = keygen(&home, "alice");
    let (bob_key, bob_pub) = keygen(&home, "bob");
    let bobs = format!("127.0.0.1:{}/bob/*", registry.port);
    home.cordon(&["trust", "add", &alice_pub]).ok();
    // A pattern that could name any registry is refused, and nothing is trusted.
    home.fails_unchanged(&["trust", "add", &bob_pub, "--for", "*/bob/*"], 2)
        .stderr_has(&["`*/bob/*` is not a repository pattern", "named in full"]);
    home.cordon(&["trust", "add", &bob_pub, "--for", &bobs])
        .ok()
        .stdout_has(&[&format!("to sign plugins from {bobs} only")]);
    home.cordon(&["trust", "list"]).ok().stdout_has(&[
        "alice  sha256:",
        "  any plugin",
        "bob  sha256:",
        &format!("  plugins from {bobs} only"),
    ]);
    let line = audit_line(&home, "trust", "bob");
    assert!(line.contains(&format!("for {bobs}")), "{line}");

    let tag = registry.reference("alice/greeter:1");
    pushed(&home, &fixture("greeter"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok();
    home.cordon(&["plugin", "install", &tag]).ok();

    // A release in Alice's repository signed only by Bob: his signature does not count here,
    // whatever else the user allows.
    pushed(&home, &fixture("greeter-v2"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &bob_key])
        .ok();
    let refusal = [
        "none is a valid signature of it by a key you trust (trusted: alice)",
        &format!(
            "`bob` signed it, but is trusted only for {bobs}, not for 127.0.0.1:{}/alice/greeter",
            registry.port
        ),
    ];
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&["`cordon plugin update` would refuse it:"])
        .stdout_has(&refusal);
    home.fails_unchanged(
        &[
            "plugin",
            "update",
            "greeter",
            "--yes",
            "--allow-new-signer",
            "--allow-rollback",
        ],
        1,
    )
    .stderr_has(&refusal);
    home.fails_unchanged(&["plugin", "install", &tag, "--name", "other"], 1)
        .stderr_has(&refusal);

    // In his own repositories it does.
    let own = registry.reference("bob/tools:1");
    pushed(&home, &fixture("noop"), &own);
    home.cordon(&["plugin", "sign", &own, "--key", &bob_key])
        .ok();
    home.cordon(&["plugin", "install", &own])
        .ok()
        .stdout_has(&["signed:  signed by `bob`", "Installed plugin `tools`"]);

    // Removed, the key's scope goes with it.
    home.cordon(&["trust", "remove", "bob"]).ok();
    assert!(!home.path().join("trust/bob.toml").exists());
}
