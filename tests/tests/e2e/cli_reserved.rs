//! Cordon's state outside the home is as far out of reach as the home: a SQLite store kept
//! elsewhere (with its `-wal` and `-shm` files), `cordon serve`'s token file and a PostgreSQL
//! store's address. A grant reaching one is refused when given; one given before the state was
//! put there stops a host from starting, naming both, and makes every call fail.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cordon_scripted_llm::Step;
use cordon_tests::serve::{Served, eventually};
use cordon_tests::support::grant_fs;
use cordon_tests::{Run, TestHome, fixture};
use serde_json::json;

use crate::model::{Model, call};

const WAIT: Duration = Duration::from_secs(60);

/// What a refusal to reach the store says.
const STORE: &str = "the store of sessions and the audit log";

fn installed() -> TestHome {
    let home = TestHome::new();
    home.cordon(&["plugin", "install", fixture("probe").to_str().unwrap()])
        .ok();
    home
}

fn sqlite(db: &Path) -> String {
    format!("sqlite:{}", db.display())
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap()
}

/// Runs `cordon <global> serve --listen 127.0.0.1:0 <args>`, which must refuse to start: its
/// exit, or a failure naming what it printed when it is still running after a minute.
fn serve_refused(home: &TestHome, global: &[&str], args: &[&str]) -> Run {
    let mut all = global.to_vec();
    all.extend(["serve", "--listen", "127.0.0.1:0"]);
    all.extend_from_slice(args);
    let mut child = home
        .cordon_command(&all)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cordon serve");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for cordon serve") {
            break Some(status);
        }
        if started.elapsed() > WAIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr);
    let Some(status) = status else {
        panic!(
            "`cordon {}` started instead of refusing:\n{stderr}",
            all.join(" ")
        );
    };
    Run {
        command: format!("cordon {}", all.join(" ")),
        code: status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr,
    }
}

/// The review's finding: a store outside the home, chosen by `--store`, `$CORDON_STORE` or
/// `[store] url`, could be granted — read-only, a plugin read every transcript; read-write, it
/// deleted the audit log.
#[test]
fn a_store_outside_the_home_may_not_be_granted() {
    let home = installed();
    let state = home.scratch("state");
    std::fs::create_dir_all(state.join("db")).unwrap();
    let db = state.join("db/x.db");
    let url = sqlite(&db);
    // The store exists (and has a record) before the grants are tried.
    home.cordon(&["--store", &url, "audit"]).ok();
    let lock = home.path().join("plugins.toml");
    for dir in [state.clone(), state.join("db")] {
        for mode in ["ro", "rw"] {
            let grant = grant_fs(&dir, "/s", mode);
            let run = home.fails_unchanged(&["--store", &url, "grant", "probe", &grant], 2);
            assert!(
                run.stderr.contains(STORE)
                    && run.stderr.contains(&canonical(&db).display().to_string())
                    && run.stderr.contains("--store"),
                "{grant}: {}",
                run.stderr
            );
        }
    }
    let grant = grant_fs(&state, "/s", "ro");
    let run = home
        .cordon_env(
            &["grant", "probe", &grant],
            &[("CORDON_STORE", url.as_str())],
        )
        .code(2);
    assert!(run.stderr.contains(STORE), "{}", run.stderr);
    // The store named by the config in use.
    let project = home.scratch("project");
    std::fs::write(
        project.join("cordon.toml"),
        format!("[store]\nurl = \"{url}\"\n"),
    )
    .unwrap();
    let run = home
        .cordon_in(&project, &["grant", "probe", &grant])
        .code(2);
    assert!(run.stderr.contains(STORE), "{}", run.stderr);
    // At install too.
    let run = home
        .cordon(&[
            "--store",
            &url,
            "plugin",
            "install",
            fixture("probe").to_str().unwrap(),
            "--name",
            "other",
            "--grant",
            &grant_fs(&state, "/s", "rw"),
        ])
        .code(2);
    assert!(run.stderr.contains(STORE), "{}", run.stderr);
    let recorded = std::fs::read_to_string(&lock).unwrap();
    assert!(
        !recorded.contains(&state.display().to_string()) && !recorded.contains("[plugins.other]"),
        "{recorded}"
    );
    // Beside the store, a directory may be granted as before.
    let beside = home.scratch("beside");
    home.cordon(&[
        "--store",
        &url,
        "grant",
        "probe",
        &grant_fs(&beside, "/b", "rw"),
    ])
    .ok();
}

/// A store named through a link to a file elsewhere: neither the directory of the file nor
/// that of the link (whose owner could point it at another store, and beside which SQLite may
/// keep the `-wal` and `-shm` files) may be granted; and while a host has the store open, the
/// `-wal` and `-shm` files beside it are no more reachable than the store itself.
#[test]
fn the_stores_link_wal_and_shm_files_may_not_be_granted() {
    let home = installed();
    let (links, files) = (home.scratch("links"), home.scratch("files"));
    std::fs::write(files.join("real.db"), "").unwrap();
    std::os::unix::fs::symlink(files.join("real.db"), links.join("x.db")).unwrap();
    let url = sqlite(&links.join("x.db"));
    for dir in [&links, &files] {
        let run = home.fails_unchanged(
            &[
                "--store",
                &url,
                "grant",
                "probe",
                &grant_fs(dir, "/s", "ro"),
            ],
            2,
        );
        assert!(
            run.stderr.contains(STORE),
            "{}: {}",
            dir.display(),
            run.stderr
        );
    }

    // A host keeps the store open, with its write-ahead log and shared-memory index beside it.
    let state = home.scratch("state");
    let db = state.join("x.db");
    let model = Model::new(vec![]);
    let served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
            ("CORDON_STORE", &sqlite(&db)),
        ],
        &[],
    );
    for companion in ["x.db-wal", "x.db-shm"] {
        assert!(state.join(companion).exists(), "no {companion}");
    }
    let run = home.fails_unchanged(
        &[
            "--store",
            &sqlite(&db),
            "grant",
            "probe",
            &grant_fs(&state, "/s", "ro"),
        ],
        2,
    );
    assert!(run.stderr.contains(STORE), "{}", run.stderr);
    drop(served);
}

/// A directory granted first, the store put inside it later (or `--store` naming a file in
/// it): no host starts, naming the grant and the store, and no call runs.
#[test]
fn a_store_put_inside_a_granted_directory_stops_hosts_and_calls() {
    let home = installed();
    let data = home.scratch("data");
    home.cordon(&["grant", "probe", &grant_fs(&data, "/data", "rw")])
        .ok();
    let db = data.join("x.db");
    let url = sqlite(&db);
    let run = serve_refused(&home, &["--store", &url], &[]).code(2);
    assert!(
        run.stderr.contains("plugin `probe`'s grant")
            && run
                .stderr
                .contains(&format!("fs:{}", canonical(&data).display()))
            && run.stderr.contains(STORE)
            && run.stderr.contains(&canonical(&db).display().to_string())
            && run.stderr.contains("cordon revoke probe"),
        "{}",
        run.stderr
    );
    // The same for a conversation at the terminal and an MCP client's host.
    for command in [["mcp"].as_slice(), ["run", "hello"].as_slice()] {
        let mut args = vec!["--store", url.as_str()];
        args.extend_from_slice(command);
        let run = home.cordon(&args).code(2);
        assert!(run.stderr.contains(STORE), "{command:?}: {}", run.stderr);
    }
    // A call would overwrite the audit log's file: it fails, and the log is whole.
    let run = home
        .cordon(&[
            "--store",
            &url,
            "call",
            "fs",
            r#"{"op":"write","path":"/data/x.db","content":"gone"}"#,
        ])
        .code(1);
    assert!(run.stderr.contains(STORE), "{}", run.stderr);
    let header = std::fs::read(&db).unwrap();
    assert!(
        header.starts_with(b"SQLite format 3\0"),
        "the store was overwritten"
    );
    home.cordon(&["--store", &url, "audit"])
        .ok()
        .stdout_has(&["probe.fs"]);
    // Revoked, everything works again.
    home.cordon(&["revoke", "probe", &format!("fs:{}", data.display())])
        .ok();
    home.cordon(&["--store", &url, "call", "echo", "{}"]).ok();
}

/// `--token-file` inside a granted directory: the host does not start; and a grant of it given
/// while the host runs (`cordon grant` does not know the host's token file) makes the call fail
/// without showing the token.
#[test]
fn the_token_file_is_out_of_every_grant() {
    let home = installed();
    let (secrets, data) = (home.scratch("secrets"), home.scratch("data"));
    let tokens = secrets.join("tokens");
    let token = "the-token-of-the-host-0123456789";
    // The host's one token, unnamed: every scope, so it answers its own turn's question.
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    home.cordon(&["grant", "probe", &grant_fs(&secrets, "/secrets", "ro")])
        .ok();
    let run = serve_refused(&home, &[], &["--token-file", tokens.to_str().unwrap()]).code(2);
    assert!(
        run.stderr
            .contains(&format!("fs:{}", canonical(&secrets).display()))
            && run.stderr.contains("token file")
            && run
                .stderr
                .contains(&canonical(&tokens).display().to_string()),
        "{}",
        run.stderr
    );
    home.cordon(&["revoke", "probe", &format!("fs:{}", secrets.display())])
        .ok();

    let model = Model::new(vec![
        Step::tool_calls(vec![call(
            "k1",
            "fs",
            json!({"op": "read", "path": "/secrets/tokens"}),
        )]),
        Step::text("done"),
    ]);
    let mut served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &["--token-file", tokens.to_str().unwrap()],
    );
    served.token = token.to_string();
    home.cordon(&["grant", "probe", &grant_fs(&secrets, "/secrets", "ro")])
        .ok();
    home.cordon(&["grant", "probe", &grant_fs(&data, "/data", "ro")])
        .ok();
    eventually(WAIT, "the new grants", || {
        let tools = served.get("/api/v1/tools");
        tools.json["tools"]
            .as_array()?
            .iter()
            .any(|t| t["name"] == "fs" && t["grants"].as_array().is_some_and(|g| g.len() == 2))
            .then_some(())
    });
    let created = served.post("/api/v1/sessions", json!({"id": "leak"}));
    assert_eq!(created.status, 201, "{}", created.text);
    let events = served.stream(
        "/api/v1/sessions/leak/messages",
        json!({"text": "read the tokens"}),
    );
    // The probe's file tool declares itself destructive: it is asked about first.
    let call_id = eventually(WAIT, "the call to wait for approval", || {
        let answer = served.get("/api/v1/approvals");
        answer.json["pending"]
            .as_array()?
            .iter()
            .find(|p| p["session"] == "leak")?["call_id"]
            .as_str()
            .map(str::to_string)
    });
    let answered = served.post(
        &format!("/api/v1/approvals/leak/{call_id}"),
        json!({"answer": "yes"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.text);
    events.until("turn_finished", WAIT);
    let told = model.tool_messages(1);
    let text = told[0]["content"].as_str().unwrap();
    assert!(text.contains("token file"), "{text}");
    assert!(!text.contains(token), "{text}");
}

/// A PostgreSQL store's address may not be granted as `net:tcp` (a plugin connecting there
/// reads and rewrites everything), and a grant of it given before stops hosts and calls.
#[test]
fn a_postgres_stores_address_may_not_be_granted() {
    let home = installed();
    let url = cordon_tests::postgres::shared().database();
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap()
        .to_string();
    for addr in [
        format!("127.0.0.1:{port}"),
        format!("0.0.0.0:{port}"),
        format!("[::1]:{port}"),
    ] {
        let grant = format!("net:tcp://{addr}");
        let run = home.fails_unchanged(&["--store", &url, "grant", "probe", &grant], 2);
        assert!(
            run.stderr.contains(&format!("cannot grant `{grant}`"))
                && run.stderr.contains("PostgreSQL store")
                && run.stderr.contains(&url),
            "{}",
            run.stderr
        );
    }
    // Another port of the same machine is a grant like any other.
    home.cordon(&["--store", &url, "grant", "probe", "net:tcp://127.0.0.1:9"])
        .ok();

    // Granted while the store was elsewhere.
    let grant = format!("net:tcp://127.0.0.1:{port}");
    home.cordon(&["grant", "probe", &grant]).ok();
    let run = serve_refused(&home, &["--store", &url], &[]).code(2);
    assert!(
        run.stderr
            .contains(&format!("plugin `probe`'s grant `{grant}`"))
            && run.stderr.contains("PostgreSQL store"),
        "{}",
        run.stderr
    );
    let run = home
        .cordon(&[
            "--store",
            &url,
            "call",
            "tcp",
            &json!({"addr": format!("127.0.0.1:{port}")}).to_string(),
        ])
        .code(1);
    assert!(
        run.stderr.contains("PostgreSQL store") && run.stderr.contains("call was refused"),
        "{}",
        run.stderr
    );
}

/// The review's panic: hours whose milliseconds overflow. The API answers 400, the CLI exits 2,
/// both saying what was wrong.
#[test]
fn an_audit_since_too_long_ago_is_a_clear_error() {
    let home = installed();
    let run = home.cordon(&["audit", "--since", "2562047788016h"]).code(2);
    assert!(
        run.stderr.contains("2562047788016h") && run.stderr.contains("too long ago"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let model = Model::new(vec![]);
    let served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &[],
    );
    for since in [
        "2562047788016h",
        "18446744073709551615s",
        "99999999999999999999999d",
    ] {
        let answer = served.get(&format!("/api/v1/audit?since={since}"));
        assert_eq!(answer.status, 400, "{since}: {}", answer.text);
        assert!(answer.text.contains("too long ago"), "{}", answer.text);
    }
    // The host is still serving.
    assert_eq!(served.get("/api/v1/audit?since=2h").status, 200);
    assert!(!served.stderr().contains("panicked"), "{}", served.stderr());
}
