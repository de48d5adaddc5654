//! `cordon grant | revoke | limit`: grants change what a call can reach, refused changes
//! change nothing.

use cordon_tests::{TestHome, fixture};

fn installed() -> TestHome {
    let home = TestHome::new();
    home.cordon(&["plugin", "install", fixture("probe").to_str().unwrap()])
        .ok();
    home
}

#[test]
fn grant_then_revoke_controls_access() {
    let home = installed();
    let data = home.scratch("data");
    std::fs::write(data.join("note.txt"), "hello from the host").unwrap();
    let read = r#"{"op":"read","path":"/data/note.txt"}"#;

    // Nothing granted: the file is out of reach.
    home.cordon(&["call", "fs", read]).code(1);

    let grant = format!("fs:{}:/data", data.display());
    home.cordon(&["grant", "probe", &grant])
        .ok()
        .stdout_has(&["Granted fs:", ":/data:ro to `probe`"]);
    home.cordon(&["call", "fs", read])
        .ok()
        .stdout_has(&["hello from the host"]);
    // Read-only: writing is refused and the host file is untouched.
    home.cordon(&[
        "call",
        "fs",
        r#"{"op":"write","path":"/data/note.txt","content":"x"}"#,
    ])
    .code(1);
    assert_eq!(
        std::fs::read_to_string(data.join("note.txt")).unwrap(),
        "hello from the host"
    );

    // Upgrading the same directory to read-write replaces the read-only grant.
    home.cordon(&["grant", "probe", &format!("{grant}:rw")])
        .ok()
        .stdout_has(&["replaces"]);
    home.cordon(&["plugin", "inspect", "probe"])
        .ok()
        .stdout_has(&[":/data:rw", "its grants let it change or send things"]);
    home.cordon(&[
        "call",
        "fs",
        r#"{"op":"write","path":"/data/new.txt","content":"made"}"#,
    ])
    .ok();
    assert_eq!(
        std::fs::read_to_string(data.join("new.txt")).unwrap(),
        "made"
    );

    home.cordon(&["revoke", "probe", &format!("fs:{}", data.display())])
        .ok()
        .stdout_has(&["Revoked fs:"]);
    home.cordon(&["call", "fs", read]).code(1);
    home.cordon(&["plugin", "list"]).ok().stdout_has(&["none"]);
}

#[test]
fn env_grants_pass_only_named_variables() {
    let home = installed();
    let env = [
        ("CORDON_TEST_VISIBLE", "shown"),
        ("CORDON_TEST_SECRET", "hidden"),
    ];
    let call = |name: &str| {
        home.cordon_env(&["call", "env", &format!(r#"{{"name":"{name}"}}"#)], &env)
            .ok()
    };
    // Nothing granted: the variable is set on the host but the plugin sees no environment.
    let before = call("CORDON_TEST_VISIBLE");
    assert!(
        before.stdout.contains("\"value\": null"),
        "{}",
        before.stdout
    );
    assert!(!before.stdout.contains("shown"), "{}", before.stdout);

    home.cordon(&["grant", "probe", "env:CORDON_TEST_VISIBLE"])
        .ok();
    call("CORDON_TEST_VISIBLE").stdout_has(&["\"value\": \"shown\""]);
    let other = call("CORDON_TEST_SECRET");
    assert!(!other.stdout.contains("hidden"), "{}", other.stdout);
    home.cordon(&["plugin", "inspect", "probe"])
        .ok()
        .stdout_has(&[
            "env:CORDON_TEST_VISIBLE",
            "its grants let it change or send things",
        ]);
}

#[test]
fn refused_grant_changes_leave_the_home_unchanged() {
    let home = installed();
    let data = home.scratch("data");
    home.cordon(&["grant", "probe", "env:HOME"]).ok();

    home.fails_unchanged(&["grant", "probe", "nonsense"], 2)
        .stderr_has(&["fs:"]);
    home.fails_unchanged(&["grant", "probe", "fs:/definitely/not/here"], 2);
    home.fails_unchanged(&["grant", "nobody", "env:HOME"], 2)
        .stderr_has(&["no plugin named `nobody`", "probe"]);
    // One bad grant in a list refuses the whole list.
    home.fails_unchanged(
        &[
            "grant",
            "probe",
            &format!("fs:{}", data.display()),
            "bogus:x",
        ],
        2,
    );
    home.fails_unchanged(&["revoke", "probe", "env:PATH"], 2)
        .stderr_has(&["no grant matching `env:PATH`", "env:HOME"]);
    home.fails_unchanged(&["limit", "probe", "memory=0"], 2);
    home.fails_unchanged(&["limit", "probe", "colour=blue"], 2)
        .stderr_has(&["colour"]);
    home.fails_unchanged(&["limit", "probe", "time"], 2);

    // The runaway fixture does not import wasi:sockets: a TCP grant is beyond its ceiling.
    home.cordon(&["plugin", "install", fixture("runaway").to_str().unwrap()])
        .ok();
    home.fails_unchanged(&["grant", "runaway", "net:tcp://127.0.0.1:9"], 2)
        .stderr_has(&["plugin `runaway` does not import"]);
}

#[test]
fn limits_are_recorded_and_enforced() {
    let home = installed();
    home.cordon(&["limit", "probe", "memory=64MiB", "time=5s"])
        .ok()
        .stdout_has(&["memory=64MiB", "time=5s", "output=64MiB"]);
    home.cordon(&["plugin", "inspect", "probe"])
        .ok()
        .stdout_has(&["memory=64MiB (set)", "time=5s (set)"]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(lock.contains("memory = \"64MiB\""), "{lock}");

    // An argument limit below the size of the arguments stops the call before it runs.
    home.cordon(&["limit", "probe", "args=16B"]).ok();
    home.cordon(&["call", "echo", r#"{"padding":"more than sixteen bytes"}"#])
        .code(1)
        .stderr_has(&["args"]);
}

#[test]
fn concurrent_changes_are_serialised_not_lost() {
    let home = installed();
    let probe = fixture("probe").display().to_string();
    std::thread::scope(|s| {
        for i in 0..4 {
            let home = &home;
            s.spawn(move || {
                home.cordon(&["grant", "probe", &format!("env:CORDON_VAR_{i}")])
                    .ok();
            });
        }
        for name in ["copy-a", "copy-b"] {
            let (home, probe) = (&home, &probe);
            s.spawn(move || {
                home.cordon(&["plugin", "install", probe, "--name", name])
                    .ok();
            });
        }
    });
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    for i in 0..4 {
        assert!(
            lock.contains(&format!("env:CORDON_VAR_{i}")),
            "lost grant {i}:\n{lock}"
        );
    }
    assert!(
        lock.contains("[plugins.copy-a]") && lock.contains("[plugins.copy-b]"),
        "{lock}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// The directory holding the test home (and its scratch directories).
fn home_parent(home: &TestHome) -> std::path::PathBuf {
    home.path().parent().unwrap().to_path_buf()
}

#[test]
fn grants_that_reach_the_home_or_the_config_are_refused() {
    let home = installed();
    let parent = home_parent(&home);
    // Containing the home, being it, lying inside it: refused at `grant`, with the reason.
    for (dir, says) in [
        (parent.clone(), "contains the Cordon home"),
        (home.path(), "is the Cordon home"),
        (
            home.path().join("components"),
            "lies inside the Cordon home",
        ),
    ] {
        for mode in ["ro", "rw"] {
            let grant = format!("fs:{}:/x:{mode}", dir.display());
            let run = home.fails_unchanged(&["grant", "probe", &grant], 2);
            assert!(run.stderr.contains(says), "{grant}: {}", run.stderr);
            assert!(run.stderr.contains("CORDON_HOME"), "{}", run.stderr);
        }
    }
    // The same through a symlink to the home's parent.
    let link = home.scratch("elsewhere").join("link");
    std::os::unix::fs::symlink(&parent, &link).unwrap();
    home.fails_unchanged(
        &["grant", "probe", &format!("fs:{}:/x:ro", link.display())],
        2,
    );
    // At install, too.
    let other = TestHome::new();
    let run = other
        .cordon(&[
            "plugin",
            "install",
            fixture("probe").to_str().unwrap(),
            "--grant",
            &format!("fs:{}:/x:rw", home_parent(&other).display()),
        ])
        .code(2);
    assert!(
        run.stderr.contains("contains the Cordon home"),
        "{}",
        run.stderr
    );
    assert!(!other.path().join("plugins.toml").exists());

    // The config file in use (./cordon.toml) may not be inside a grant either.
    let project = home.scratch("project");
    std::fs::write(
        project.join("cordon.toml"),
        "[approval.tools]\nfs = \"ask\"\n",
    )
    .unwrap();
    let grant = format!("fs:{}:/p:rw", project.display());
    let run = home
        .cordon_in(&project, &["grant", "probe", &grant])
        .code(2);
    assert!(run.stderr.contains("config file"), "{}", run.stderr);
    // Elsewhere (no cordon.toml there) the same directory may be granted.
    home.cordon(&["grant", "probe", &grant]).ok();
}

/// The review's attack: a plugin whose grant contains the home rewrites `plugins.toml` to widen
/// its own grants. A grant recorded before this check existed (or a home moved under a grant
/// since) must make the call fail, never run it.
#[test]
fn a_recorded_grant_over_the_home_refuses_the_call() {
    let home = installed();
    let lock = home.path().join("plugins.toml");
    let text = std::fs::read_to_string(&lock).unwrap();
    let widened = format!(
        "fs:{}:/host:rw",
        std::fs::canonicalize(home_parent(&home)).unwrap().display()
    );
    let planted = text.replace("grants = []", &format!("grants = [\"{widened}\"]"));
    assert_ne!(
        planted, text,
        "the lock file should list the probe's grants:\n{text}"
    );
    std::fs::write(&lock, &planted).unwrap();

    let forged = planted.replace(
        &format!("\"{widened}\""),
        "\"env:HOME\", \"net:tcp://127.0.0.1:22\"",
    );
    let write = serde_json::json!({
        "op": "write",
        "path": "/host/home/plugins.toml",
        "content": forged,
    })
    .to_string();
    let run = home.cordon(&["call", "fs", &write]).code(1);
    assert!(
        run.stderr.contains("contains the Cordon home"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        planted,
        "the lock file was rewritten"
    );

    // A home moved inside a directory granted earlier: the grant was fine when given.
    let home2 = installed();
    let data = home2.scratch("data");
    home2
        .cordon(&["grant", "probe", &format!("fs:{}:/data:rw", data.display())])
        .ok();
    let moved = data.join("home");
    std::fs::rename(home2.path(), &moved).unwrap();
    let run = home2
        .cordon(&[
            "--home",
            moved.to_str().unwrap(),
            "call",
            "fs",
            r#"{"op":"write","path":"/data/home/plugins.toml","content":"version = 1"}"#,
        ])
        .code(1);
    assert!(
        run.stderr.contains("contains the Cordon home"),
        "{}",
        run.stderr
    );
    assert!(
        std::fs::read_to_string(moved.join("plugins.toml"))
            .unwrap()
            .contains("[plugins.probe]")
    );
}
