//! `cordon plugin install | list | inspect | remove`, from files and loopback URLs, and every
//! way an install can be refused — each refusal leaving the home byte-for-byte unchanged.

use std::collections::BTreeMap;

use cordon_tests::{HttpServer, TestHome, file_digest, fixture};

fn probe() -> String {
    fixture("probe").display().to_string()
}

#[test]
fn install_list_inspect_remove() {
    let home = TestHome::new();
    let data = home.scratch("data");
    let grant = format!("fs:{}:/data:ro", data.display());
    let canonical = data.canonicalize().unwrap();

    let run = home
        .cordon(&["plugin", "install", &probe(), "--grant", &grant])
        .ok()
        .stdout_has(&[
            "Plugin `probe` (sha256:",
            "imports:",
            "wasi:filesystem",
            &format!("fs:{}:/data:ro", canonical.display()),
            "tools:   fs, env, http, http_many, tcp, tcp_many, pollables, http_objects, tcp_listen, log, bulk_read, noop, counter, echo",
            "Installed plugin `probe`",
        ]);
    // What it imports and what it is granted is shown before the final confirmation line.
    let granted_at = run.stdout.find("grants:").unwrap();
    assert!(granted_at < run.stdout.find("Installed plugin").unwrap());

    let digest = file_digest(&fixture("probe"));
    let hex = digest.strip_prefix("sha256:").unwrap();
    let stored = home.path().join("components").join(format!("{hex}.wasm"));
    assert_eq!(file_digest(&stored), digest, "component stored by digest");
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(lock.contains(&format!("digest = \"{digest}\"")), "{lock}");
    assert!(lock.contains("tools_hash = \"sha256:"), "{lock}");

    home.cordon(&["plugin", "list"])
        .ok()
        .stdout_has(&["probe", &hex[..12], "14  fs:", "/data:ro"]);

    home.cordon(&["plugin", "inspect", "probe"])
        .ok()
        .stdout_has(&[
            &digest,
            "ceiling:",
            "grants:",
            "limits:  memory=512MiB",
            "tools:",
            "  fs\n",
            "Performs one filesystem operation",
            "\"required\": [",
            "effect:  its grants cannot change anything",
        ]);

    home.cordon(&["plugin", "remove", "probe"])
        .ok()
        .stdout_has(&["Removed plugin `probe`"]);
    assert!(
        !stored.exists(),
        "component file removed with its last user"
    );
    home.cordon(&["plugin", "list"])
        .ok()
        .stdout_has(&["No plugins installed"]);
    home.fails_unchanged(&["plugin", "remove", "probe"], 2)
        .stderr_has(&["no plugin named `probe`"]);
    home.fails_unchanged(&["plugin", "inspect", "probe"], 2);
}

#[test]
fn install_from_loopback_url_pins_the_digest() {
    let home = TestHome::new();
    let bytes = std::fs::read(fixture("probe")).unwrap();
    let digest = file_digest(&fixture("probe"));
    let hex = digest.strip_prefix("sha256:").unwrap().to_string();
    let server = HttpServer::serve(BTreeMap::from([("/p/probe.wasm".to_string(), bytes)]));
    let url = server.url("/p/probe.wasm");

    home.fails_unchanged(&["plugin", "install", &url], 2)
        .stderr_has(&["--sha256"]);
    let wrong = "0".repeat(64);
    home.fails_unchanged(&["plugin", "install", &url, "--sha256", &wrong], 1)
        .stderr_has(&["digest mismatch", &hex]);
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &server.url("/missing.wasm"),
            "--sha256",
            &hex,
        ],
        1,
    )
    .stderr_has(&["404"]);
    home.fails_unchanged(&["plugin", "install", &url, "--sha256", "xyz"], 2)
        .stderr_has(&["not a SHA-256 digest"]);
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            "http://example.com/p.wasm",
            "--sha256",
            &hex,
        ],
        2,
    )
    .stderr_has(&["loopback"]);

    home.cordon(&["plugin", "install", &url, "--sha256", &hex])
        .ok()
        .stdout_has(&["Installed plugin `probe`"]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(lock.contains(&format!("source = \"{url}\"")), "{lock}");
    home.cordon(&["call", "noop"]).ok();
}

#[test]
fn refused_installs_leave_the_home_unchanged() {
    let home = TestHome::new();
    let scratch = home.scratch("inputs");
    // A first plugin, so there is something to protect.
    home.cordon(&["plugin", "install", &probe()]).ok();

    let missing = scratch.join("missing.wasm");
    home.fails_unchanged(&["plugin", "install", missing.to_str().unwrap()], 2)
        .stderr_has(&["no file at"]);

    let garbage = scratch.join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm this is not a component").unwrap();
    home.fails_unchanged(&["plugin", "install", garbage.to_str().unwrap()], 1)
        .stderr_has(&["not a usable Cordon plugin"]);

    home.fails_unchanged(
        &["plugin", "install", fixture("badimport").to_str().unwrap()],
        1,
    )
    .stderr_has(&["evil:thing"]);

    let data = home.scratch("data");
    for bad in [
        "fs".to_string(),
        "disk:/tmp".to_string(),
        format!("fs:{}:relative", data.display()),
        format!("fs:{}:ro:extra", data.display()),
        "net:ftp://example.com".to_string(),
    ] {
        home.fails_unchanged(
            &[
                "plugin",
                "install",
                &probe(),
                "--name",
                "other",
                "--grant",
                &bad,
            ],
            2,
        );
    }
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &probe(),
            "--name",
            "other",
            "--grant",
            "fs:/no/such/dir",
        ],
        2,
    );
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &probe(),
            "--name",
            "other",
            "--limit",
            "memory=lots",
        ],
        2,
    )
    .stderr_has(&["memory=lots"]);
    home.fails_unchanged(&["plugin", "install", &probe(), "--name", "Bad.Name"], 2)
        .stderr_has(&["not a valid plugin name"]);

    // The runaway fixture does not import wasi:http, so an HTTP grant is beyond its ceiling.
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            fixture("runaway").to_str().unwrap(),
            "--grant",
            "net:https://example.com",
        ],
        2,
    )
    .stderr_has(&["does not import wasi:http"]);
}

#[test]
fn clashing_tool_names_must_be_qualified() {
    let home = TestHome::new();
    home.cordon(&["plugin", "install", &probe()]).ok();
    home.cordon(&["plugin", "install", &probe(), "--name", "probe2"])
        .ok()
        .stdout_has(&["tool `echo` is also offered by `probe`; call it as `probe2.echo`"]);
    home.fails_unchanged(&["call", "echo", "{}"], 2)
        .stderr_has(&["probe.echo", "probe2.echo"]);
    home.cordon(&["call", "probe2.echo", r#"{"a":1}"#])
        .ok()
        .stdout_has(&[r#"{"a":1}"#]);
    // Both names share one stored component; removing one keeps it for the other.
    home.cordon(&["plugin", "remove", "probe"]).ok();
    home.cordon(&["call", "echo", "{}"]).ok();
}

/// A tool description and input schema carrying terminal controls (the `escapes` fixture), an
/// install source whose path carries them, and a lock file that does: `plugin install`,
/// `inspect`, `list` and the errors quoting them show every control visibly and inertly on a
/// terminal.
#[test]
fn author_text_and_install_sources_cannot_drive_the_terminal() {
    use cordon_tests::terminal::{HOSTILE, HOSTILE_SHOWN};

    let home = TestHome::new();
    let dir = home.scratch("downloads");
    let hostile_path = dir.join(format!("evil{HOSTILE}.wasm"));
    std::fs::copy(fixture("escapes"), &hostile_path).unwrap();
    let source = hostile_path.to_str().unwrap();

    // The file name is not a plugin name; the refusal quotes it.
    home.cordon_on_terminal(&["plugin", "install", source])
        .code(2)
        .shows_only_text()
        .shows(&["error: ", HOSTILE_SHOWN]);
    home.cordon_on_terminal(&["plugin", "install", source, "--name", "escapes"])
        .ok()
        .shows_only_text()
        .shows(&[
            &format!("source:  {}", dir.display()),
            HOSTILE_SHOWN,
            "shout",
        ]);
    home.cordon_on_terminal(&["plugin", "list"])
        .ok()
        .shows_only_text()
        .shows(&["escapes"]);
    home.cordon_on_terminal(&["plugin", "inspect", "escapes"])
        .ok()
        .shows_only_text()
        .shows(&[
            &format!("Returns hostile text. {HOSTILE_SHOWN}"),
            // The schema keeps JSON's own escapes; what JSON leaves raw is made visible.
            "Fail instead. \\u001b]0;pwned-title",
            "\\u009b31mred\\rback\\u202edesrever",
        ]);

    let lock = home.path().join("plugins.toml");
    std::fs::write(&lock, format!("this is = = not toml {HOSTILE}")).unwrap();
    home.cordon_on_terminal(&["plugin", "list"])
        .code(1)
        .shows_only_text()
        .shows(&[
            "error: ",
            "not a valid Cordon lock file",
            "not toml \\x1b]0;pwned-title\\x07",
        ]);
}
