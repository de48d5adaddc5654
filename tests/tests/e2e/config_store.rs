//! `wasi:config/store` (0.2.0-draft and 0.2.0-rc.1) from `config:KEY` grants: a key's value,
//! kept in the home and set from stdin, reaches only its plugin and only under a grant; an
//! ungranted key reads as absent and is recorded as refused; the environment is never read;
//! the value is never shown, written to the lock file or left behind by a removed plugin.

use std::os::unix::fs::PermissionsExt;

use cordon_tests::{TestHome, fixture};

#[test]
fn config_values_reach_a_plugin_only_under_its_grant() {
    let home = TestHome::new();
    let reader = fixture("config-reader").display().to_string();
    home.cordon(&["plugin", "install", &reader])
        .ok()
        .stdout_has(&[
            "get_draft, get_rc, get_all_draft",
            "wasi:config@0.2.0-draft: store",
            "wasi:config@0.2.0-rc.1: store",
            "configuration values (config:)",
        ]);

    home.cordon_with_stdin(
        &["plugin", "config", "config-reader", "api_key"],
        "s3cret\n",
    )
    .ok()
    .stdout_has(&[
        "Set the value of `api_key`",
        "cannot read it yet: cordon grant config-reader config:api_key",
    ]);
    home.cordon_with_stdin(
        &["plugin", "config", "config-reader", "other"],
        "not-for-you",
    )
    .ok();
    // Not granted: absent, as a key without a value is; the refusal is in the audit log.
    home.cordon_env(
        &["call", "get_draft", r#"{"key": "api_key"}"#],
        &[("api_key", "from-the-environment")],
    )
    .ok()
    .stdout_has(&["null"]);
    home.cordon(&["audit"])
        .ok()
        .stdout_has(&["config: key `api_key` (not granted)"]);

    home.cordon(&["grant", "config-reader", "config:api_key"])
        .ok();
    for tool in ["get_draft", "get_rc"] {
        home.cordon(&["call", tool, r#"{"key": "api_key"}"#])
            .ok()
            .stdout_has(&["s3cret"]);
        home.cordon(&["call", tool, r#"{"key": "other"}"#])
            .ok()
            .stdout_has(&["null"]);
    }
    let all = home.cordon(&["call", "get_all_draft"]).ok();
    assert!(
        all.stdout.contains("s3cret") && !all.stdout.contains("not-for-you"),
        "{}",
        all.stdout
    );

    // Never shown, never in the lock file, readable by its owner only.
    home.cordon(&["plugin", "inspect", "config-reader"])
        .ok()
        .stdout_has(&["config:api_key"])
        .stdout_lacks(&["s3cret"]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains("s3cret"), "{lock}");
    let values_path = home.path().join("config-values.toml");
    let mode = std::fs::metadata(&values_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "config-values.toml is mode {mode:o}");

    // A values file broken by hand: the error says where, never what the line holds.
    let values = home.path().join("config-values.toml");
    let kept = std::fs::read_to_string(&values).unwrap();
    std::fs::write(
        &values,
        format!("{kept}\n[other-plugin]\nleaked = s3cret-unquoted\n"),
    )
    .unwrap();
    let broken = home
        .cordon(&["call", "get_draft", r#"{"key": "api_key"}"#])
        .code(1);
    assert!(
        broken.stderr.contains("config-values.toml") && !broken.stderr.contains("s3cret"),
        "{}",
        broken.stderr
    );
    home.cordon(&["audit"]).ok().stdout_lacks(&["s3cret"]);
    std::fs::write(&values, &kept).unwrap();

    // No value from the command line, and none empty.
    home.cordon_with_stdin(&["plugin", "config", "config-reader", "api_key"], "")
        .code(1)
        .stderr_has(&["no value was given"]);
    home.cordon(&["plugin", "config", "config-reader", "a/b", "--unset"])
        .code(2)
        .stderr_has(&["not a configuration key"]);
    home.cordon(&["plugin", "config", "config-reader", "api_key", "--unset"])
        .ok();
    home.cordon(&["call", "get_draft", r#"{"key": "api_key"}"#])
        .ok()
        .stdout_has(&["null"]);

    // A plugin that does not import the interface cannot be given a key.
    home.cordon(&["plugin", "install", fixture("probe").to_str().unwrap()])
        .ok();
    home.cordon(&["grant", "probe", "config:api_key"])
        .code(2)
        .stderr_has(&["does not import wasi:config/store"]);

    // Removing the plugin forgets its values.
    home.cordon(&["plugin", "remove", "config-reader"]).ok();
    let kept = std::fs::read_to_string(&values).unwrap();
    assert!(!kept.contains("not-for-you"), "{kept}");
}

/// Moving from Wassette: `--policy policy.yaml` shows each permission with the grant it
/// becomes and asks first; an environment key becomes `env:` for a component that reads its
/// environment and `config:` for one that reads `wasi:config/store`; what cannot be granted as
/// narrowly as written is refused, leaving the home unchanged.
#[test]
fn a_wassette_policy_becomes_grants_shown_before_asking() {
    let home = TestHome::new();
    let data = home.scratch("data");
    let data = data.canonicalize().unwrap();
    let policy = home.scratch("policy").join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "$schema: https://raw.githubusercontent.com/microsoft/policy-mcp/main/schema/policy-v1.0.schema.json\n\
             version: \"1.0\"\n\
             description: \"Permission policy for a probe\"\n\
             permissions:\n  storage:\n    allow:\n      - uri: \"fs://{}/**\"\n        access: [\"read\"]\n\
             \x20 network:\n    allow:\n      - host: \"api.openweathermap.org\"\n\
             \x20 environment:\n    allow:\n      - key: \"OPENWEATHER_API_KEY\"\n\
             \x20 resources:\n    memory: 256\n    cpu: 50.0\n",
            data.display()
        ),
    )
    .unwrap();
    let policy_arg = policy.to_str().unwrap();
    let probe = fixture("probe").display().to_string();
    // A home with something in it, so that a refused install is seen to change nothing.
    home.cordon(&["plugin", "install", &fixture("typed").display().to_string()])
        .ok();
    let d = data.display().to_string();
    home.fails_unchanged(&["plugin", "install", &probe, "--policy", policy_arg], 2)
        .stdout_has(&[
            "from the Wassette policy",
            &format!("storage fs://{d}/** [read]  ->  fs:{d}:{d}:ro"),
            "network host api.openweathermap.org  ->  net:https://api.openweathermap.org",
            "environment OPENWEATHER_API_KEY  ->  env:OPENWEATHER_API_KEY",
            "resources memory 256 (MB)  ->  memory=256MB",
            "not translated: resources cpu and io",
        ])
        .stderr_has(&["needs your confirmation", "--yes"]);
    home.cordon(&["plugin", "install", &probe, "--policy", policy_arg, "--yes"])
        .ok();
    home.cordon(&["plugin", "inspect", "probe"])
        .ok()
        .stdout_has(&[
            &format!("fs:{d}:{d}:ro"),
            "net:https://api.openweathermap.org",
            "env:OPENWEATHER_API_KEY",
            "memory=250000KiB",
        ]);

    // The same key, for a component that reads wasi:config/store instead.
    let reader = fixture("config-reader").display().to_string();
    let keys = home.scratch("keys").join("policy.yaml");
    std::fs::write(
        &keys,
        "version: \"1.0\"\npermissions:\n  environment:\n    allow:\n      - key: \"OPENWEATHER_API_KEY\"\n",
    )
    .unwrap();
    home.cordon(&[
        "plugin",
        "install",
        &reader,
        "--policy",
        keys.to_str().unwrap(),
        "--yes",
    ])
    .ok()
    .stdout_has(&[
        "environment OPENWEATHER_API_KEY  ->  config:OPENWEATHER_API_KEY",
        "cordon plugin config config-reader OPENWEATHER_API_KEY",
    ]);
    home.cordon_with_stdin(
        &["plugin", "config", "config-reader", "OPENWEATHER_API_KEY"],
        "k-123\n",
    )
    .ok();
    home.cordon(&["call", "get_rc", r#"{"key": "OPENWEATHER_API_KEY"}"#])
        .ok()
        .stdout_has(&["k-123"]);

    // Broader than Cordon grants: refused, naming the entry.
    std::fs::write(
        &keys,
        "version: \"1.0\"\npermissions:\n  network:\n    allow:\n      - host: \"*.example.com\"\n",
    )
    .unwrap();
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &probe,
            "--name",
            "p2",
            "--policy",
            keys.to_str().unwrap(),
            "--yes",
        ],
        2,
    )
    .stderr_has(&["`*.example.com` is a pattern", "name each host"]);
}
