//! The bundled `python` tool (`run_python`) end to end through `cordon call`: values, output,
//! tracebacks, `input` fed from an `sql_query` result, files under a read-only grant, the
//! time and memory limits, output flooding and the network.
//!
//! Compiling the ~20 MB Python component takes ~20 s, so the component is installed once
//! into a template home (kept under cargo's target tmp dir, keyed by the component and
//! binary) and every test starts from a copy of it; see `support`.

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use cordon_tests::TestHome;
use serde_json::{Value, json};

use support::{grant_fs, home_with, install, json_of};

/// One template for every test here, so the Python component is compiled once.
const PLUGINS: &[&str] = &["python", "sql"];

/// Calls `run_python` with `code` (and `input` when given) and returns the parsed report.
fn python(home: &TestHome, code: &str, input: Option<Value>) -> Value {
    let mut args = json!({ "code": code });
    if let Some(input) = input {
        args["input"] = input;
    }
    let run = home.cordon(&["call", "run_python", &args.to_string()]).ok();
    json_of(&run)
}

#[test]
fn values_output_and_tracebacks_come_back_as_a_report() {
    let home = home_with(PLUGINS);
    install(&home, "python", &[], &[]);

    let report = python(
        &home,
        "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nsum(range(10)) * 2",
        None,
    );
    assert_eq!(report["ok"], json!(true), "{report:#}");
    assert_eq!(report["result"], json!(90), "{report:#}");
    assert_eq!(report["result_repr"], json!("90"), "{report:#}");
    assert_eq!(report["stdout"], json!("to out\n"), "{report:#}");
    assert_eq!(report["stderr"], json!("to err\n"), "{report:#}");

    // A value JSON cannot hold comes back as its repr only.
    let report = python(&home, "frozenset({3})", None);
    assert_eq!(report["result_repr"], json!("frozenset({3})"), "{report:#}");
    assert!(report.get("result").is_none(), "{report:#}");
    // A statement at the end has no value; `input` defaults to None.
    let report = python(&home, "x = input is None\nprint(x)", None);
    assert_eq!(report["stdout"], json!("True\n"), "{report:#}");
    assert!(report.get("result_repr").is_none(), "{report:#}");

    // A failing call is a result (exit 0) with what was printed before and a traceback
    // that starts in the user's code.
    let report = python(
        &home,
        "print('before')\ndef f(x):\n    return 10 // x\nf(0)",
        None,
    );
    assert_eq!(report["ok"], json!(false), "{report:#}");
    assert_eq!(report["stdout"], json!("before\n"), "{report:#}");
    let error = &report["error"];
    assert_eq!(error["type"], json!("ZeroDivisionError"), "{report:#}");
    assert_eq!(error["message"], json!("division by zero"), "{report:#}");
    assert_eq!(error["line"], json!(3), "{report:#}");
    let traceback = error["traceback"].as_str().unwrap();
    assert!(
        traceback.starts_with(
            "Traceback (most recent call last):\n  File \"<code>\", line 4, in <module>"
        ),
        "{traceback}"
    );
    assert!(
        traceback.contains("File \"<code>\", line 3, in f\n    return 10 // x"),
        "{traceback}"
    );
    assert!(
        !traceback.contains("pyrunner"),
        "runner frames leak: {traceback}"
    );

    let report = python(&home, "x = 1\ndef broken(:\n    pass", None);
    assert_eq!(report["ok"], json!(false), "{report:#}");
    assert_eq!(report["error"]["type"], json!("SyntaxError"), "{report:#}");
    assert_eq!(report["error"]["line"], json!(2), "{report:#}");

    // Each call is a fresh interpreter: nothing defined before survives.
    let report = python(&home, "x = 41", None);
    assert_eq!(report["ok"], json!(true), "{report:#}");
    let report = python(&home, "x + 1", None);
    assert_eq!(report["error"]["type"], json!("NameError"), "{report:#}");

    // Bad arguments are refused by the host before the component runs.
    home.cordon(&["call", "run_python", r#"{"code":"1","extra":true}"#])
        .code(2)
        .stderr_has(&["run_python", "extra"]);
}

/// Orders as (customer, cents); totals are summed in Rust to check Python's answer.
fn orders() -> Vec<(&'static str, i64)> {
    let names = ["ada", "bob", "cy"];
    (0..60)
        .map(|i| (names[i % 3], 100 + (i as i64 * 37) % 900))
        .collect()
}

#[test]
fn sql_query_rows_are_handed_to_python_as_input() {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    let mut script = String::from(
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT NOT NULL, cents INTEGER NOT NULL);\n",
    );
    for (i, (who, cents)) in orders().iter().enumerate() {
        script.push_str(&format!(
            "INSERT INTO orders VALUES({i}, '{who}', {cents});\n"
        ));
    }
    support::sqlite(&data.join("shop.db"), &script);
    install(&home, "sql", &[grant_fs(&data, "/data", "ro")], &[]);
    install(&home, "python", &[], &[]);

    let query = home
        .cordon(&[
            "call",
            "sql_query",
            &json!({"database": "/data/shop.db", "sql": "SELECT customer, cents FROM orders ORDER BY id"})
                .to_string(),
        ])
        .ok();
    let rows = json_of(&query);
    assert_eq!(rows["row_count"], json!(60), "{rows:#}");

    let code = "totals = {}\n\
                for customer, cents in input['rows']:\n\
                \x20   totals[customer] = totals.get(customer, 0) + cents\n\
                print(input['columns'])\n\
                totals";
    let report = python(&home, code, Some(rows));
    let mut expected = serde_json::Map::new();
    for (who, cents) in orders() {
        let sum = expected.get(who).and_then(Value::as_i64).unwrap_or(0) + cents;
        expected.insert(who.to_string(), json!(sum));
    }
    assert_eq!(report["ok"], json!(true), "{report:#}");
    assert_eq!(report["result"], Value::Object(expected), "{report:#}");
    assert_eq!(
        report["stdout"],
        json!("['customer', 'cents']\n"),
        "{report:#}"
    );
}

#[test]
fn read_only_grant_allows_reading_and_refuses_writing() {
    let home = home_with(PLUGINS);
    let data = home.scratch("data");
    let outside = home.scratch("outside");
    std::fs::write(data.join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    std::fs::create_dir(data.join("sub")).unwrap();
    std::fs::write(data.join("sub/deep.csv"), "a,b\n1,2\n3,4\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "top-secret-value").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), data.join("link-out")).unwrap();
    install(&home, "python", &[grant_fs(&data, "/data", "ro")], &[]);

    let report = python(
        &home,
        "import csv, os\n\
         lines = open('/data/notes.txt').read().splitlines()\n\
         rows = list(csv.DictReader(open('/data/sub/deep.csv')))\n\
         [lines, sum(int(r['b']) for r in rows), sorted(os.listdir('/data'))]",
        None,
    );
    assert_eq!(
        report["result"],
        json!([
            ["alpha", "beta", "gamma"],
            6,
            ["link-out", "notes.txt", "sub"]
        ]),
        "{report:#}"
    );

    // Writing, creating and deleting are refused; the host files are unchanged.
    for code in [
        "open('/data/notes.txt', 'w').write('overwritten')",
        "open('/data/new.txt', 'x').write('created')",
        "import os\nos.remove('/data/notes.txt')",
        "import os\nos.mkdir('/data/newdir')",
    ] {
        let report = python(&home, code, None);
        assert_eq!(report["ok"], json!(false), "{code}: {report:#}");
        assert_eq!(
            report["error"]["type"],
            json!("PermissionError"),
            "{code}: {report:#}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(data.join("notes.txt")).unwrap(),
        "alpha\nbeta\ngamma\n"
    );
    assert!(!data.join("new.txt").exists());
    assert!(!data.join("newdir").exists());

    // Nothing outside the grant is reachable: not by host path, `..` or the symlink.
    let host_secret = outside.join("secret.txt");
    for path in [
        host_secret.to_str().unwrap(),
        "/data/../outside/secret.txt",
        "/data/link-out",
        "/etc/passwd",
    ] {
        let report = python(&home, &format!("open({path:?}).read()"), None);
        assert_eq!(report["ok"], json!(false), "{path}: {report:#}");
        let text = report.to_string();
        assert!(
            !text.contains("top-secret-value") && !text.contains("root:"),
            "{path}: {text}"
        );
    }
}

#[test]
fn limits_stop_runaway_code_and_the_next_call_still_works() {
    let home = home_with(PLUGINS);
    install(&home, "python", &[], &["time=2s", "memory=160MiB"]);

    // The error names the limit that stopped the call, so no wall-clock assertion is needed.
    let run = home
        .cordon(&["call", "run_python", r#"{"code":"while True:\n    pass"}"#])
        .code(1)
        .stderr_has(&["`run_python` failed", "time limit", "2s"]);
    assert!(run.stdout.is_empty(), "{}", run.stdout);

    home.cordon(&[
        "call",
        "run_python",
        r#"{"code":"hog = []\nwhile True:\n    hog.append(bytearray(8 * 1024 * 1024))"}"#,
    ])
    .code(1)
    .stderr_has(&["`run_python` failed", "memory limit", "160MiB"]);

    // Below the limit the same kind of allocation is fine, and a trap leaves nothing behind.
    let report = python(&home, "len(bytearray(32 * 1024 * 1024))", None);
    assert_eq!(report["result"], json!(32 * 1024 * 1024), "{report:#}");
}

#[test]
fn a_print_flood_is_truncated_with_a_note() {
    let home = home_with(PLUGINS);
    install(&home, "python", &[], &[]);
    let report = python(&home, "for i in range(200000):\n    print(i)\n'done'", None);
    assert_eq!(report["ok"], json!(true), "{report:#}");
    assert_eq!(report["result"], json!("done"));
    let stdout = report["stdout"].as_str().unwrap();
    assert!(
        stdout.len() < 21_000,
        "stdout kept {} characters",
        stdout.len()
    );
    assert!(stdout.starts_with("0\n1\n2\n3\n"), "{}", &stdout[..40]);
    assert!(
        stdout.ends_with("199998\n199999\n"),
        "{}",
        &stdout[stdout.len() - 40..]
    );
    // 0..199999, each with a newline; the first and last 10,000 characters are kept.
    let written: usize = (0..200_000u32).map(|i| i.to_string().len() + 1).sum();
    let dropped = written - 20_000;
    assert!(
        stdout.contains(&format!("\n[... {dropped} characters dropped ...]\n")),
        "no marker for {dropped} dropped characters"
    );
    assert_eq!(
        report["notes"],
        json!([format!(
            "stdout truncated: {written} characters were written; {dropped} from the middle were dropped"
        )]),
        "{:#}",
        report["notes"]
    );
}

/// A loopback listener that records whether anything connected.
struct Listener {
    socket: TcpListener,
}

impl Listener {
    fn new() -> Listener {
        let socket = TcpListener::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        Listener { socket }
    }

    fn port(&self) -> u16 {
        self.socket.local_addr().unwrap().port()
    }

    /// Whether a connection is waiting; reads what it sent.
    fn accepted(&self) -> Option<String> {
        match self.socket.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                let mut got = String::new();
                let _ = stream.read_to_string(&mut got);
                Some(got)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("accept failed: {e}"),
        }
    }
}

fn connect_code(port: u16) -> String {
    format!(
        "import _socket\n\
         s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n\
         s.connect(('127.0.0.1', {port}))\n\
         s.send(b'hello from python')\n\
         s.close()\n\
         'connected'"
    )
}

#[test]
fn no_network_without_a_grant_and_only_the_granted_address_with_one() {
    let home = home_with(PLUGINS);
    install(&home, "python", &[], &[]);
    let listener = Listener::new();

    let report = python(&home, &connect_code(listener.port()), None);
    assert_eq!(report["ok"], json!(false), "{report:#}");
    assert_eq!(
        report["error"]["type"],
        json!("PermissionError"),
        "{report:#}"
    );
    assert_eq!(
        listener.accepted(),
        None,
        "a connection got through without a grant"
    );
    let report = python(&home, "import urllib.request", None);
    assert_eq!(
        report["error"]["type"],
        json!("ModuleNotFoundError"),
        "{report:#}"
    );

    // Control: granting exactly this address lets the same code through, so the refusal
    // above is the sandbox and not a broken test. Another port stays closed.
    let other = Listener::new();
    home.cordon(&[
        "grant",
        "python",
        &format!("net:tcp://127.0.0.1:{}", listener.port()),
    ])
    .ok();
    let report = python(&home, &connect_code(listener.port()), None);
    assert_eq!(report["result"], json!("connected"), "{report:#}");
    assert_eq!(listener.accepted().as_deref(), Some("hello from python"));
    let report = python(&home, &connect_code(other.port()), None);
    assert_eq!(report["ok"], json!(false), "{report:#}");
    assert_eq!(other.accepted(), None, "an ungranted port was reachable");
}

/// Template homes with bundled plugins installed once, copied into each test's home.
mod support {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Mutex;

    use cordon_tests::{Run, TestHome, cordon_bin, file_digest, target_dir};
    use serde_json::Value;
    use sha2::{Digest, Sha256};

    /// A bundled tool component built by `make plugins` into `target/plugins/<name>.wasm`.
    pub fn plugin_wasm(name: &str) -> PathBuf {
        let path = target_dir().join("plugins").join(format!("{name}.wasm"));
        assert!(
            path.is_file(),
            "the bundled plugin {} is missing: run `make plugins` first",
            path.display()
        );
        path
    }

    /// `fs:<host>:<guest>:<mode>`.
    pub fn grant_fs(host: &Path, guest: &str, mode: &str) -> String {
        format!("fs:{}:{guest}:{mode}", host.display())
    }

    /// Parses the JSON a call printed (one JSON content).
    #[track_caller]
    pub fn json_of(run: &Run) -> Value {
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
            panic!(
                "`{}` did not print one JSON document ({e}):\n{}",
                run.command, run.stdout
            )
        })
    }

    /// Installs (in fact reinstalls, from the template's compile cache) `plugin` with these
    /// grants and limits through the CLI, as a user would.
    #[track_caller]
    pub fn install(home: &TestHome, plugin: &str, grants: &[String], limits: &[&str]) {
        let wasm = plugin_wasm(plugin);
        let mut args = vec!["plugin", "install", wasm.to_str().unwrap(), "--yes"];
        for g in grants {
            args.extend(["--grant", g.as_str()]);
        }
        for l in limits {
            args.extend(["--limit", l]);
        }
        let run = home.cordon(&args).ok();
        assert!(
            run.stdout.contains(&format!("plugin `{plugin}`")),
            "{}",
            run.stdout
        );
    }

    /// Creates an SQLite database from an SQL script with python3's sqlite3 module.
    #[allow(dead_code)]
    pub fn sqlite(db: &Path, script: &str) {
        let out = Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1])\n\
                 c.executescript(sys.stdin.read())\n\
                 c.commit()\n\
                 c.close()",
                db.to_str().unwrap(),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(script.as_bytes())?;
                child.wait_with_output()
            })
            .expect("python3 is needed to create test databases");
        assert!(
            out.status.success(),
            "creating {} failed:\n{}",
            db.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Templates already found or built by this process, by plugin set.
    static TEMPLATES: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());

    /// A home with `plugins` installed and nothing granted, built once per set of components
    /// and `cordon` binary and kept in cargo's target tmp dir for later runs.
    fn template(plugins: &[&str]) -> PathBuf {
        let mut known = TEMPLATES.lock().unwrap_or_else(|e| e.into_inner());
        let set = plugins.join("+");
        if let Some(home) = known.get(&set) {
            return home.clone();
        }
        let mut key = Sha256::new();
        for p in plugins {
            key.update(p.as_bytes());
            key.update(file_digest(&plugin_wasm(p)).as_bytes());
        }
        let bin = std::fs::metadata(cordon_bin()).expect("cordon binary");
        key.update(bin.len().to_le_bytes());
        key.update(format!("{:?}", bin.modified().ok()).as_bytes());
        let prefix = format!("tools-home-{set}-");
        let name = format!("{prefix}{}", &hex::encode(key.finalize())[..16]);
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = root.join(&name);
        if !dir.join("home/plugins.toml").is_file() {
            prune(&root, &prefix);
            build(&root, &name, plugins);
        }
        known.insert(set, dir.join("home"));
        dir.join("home")
    }

    /// Removes templates of the same plugins for other builds, once no test run can still
    /// be copying them (untouched for an hour); they only take space.
    fn prune(root: &Path, prefix: &str) {
        let Ok(entries) = std::fs::read_dir(root) else {
            return;
        };
        for e in entries.flatten() {
            let stale = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(3600));
            if stale && e.file_name().to_string_lossy().starts_with(prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// Installs `plugins` through the CLI into a new template `root/name`.
    fn build(root: &Path, name: &str, plugins: &[&str]) {
        let dir = root.join(name);
        let building = root.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        std::fs::create_dir_all(&building).unwrap();
        for p in plugins {
            let out = Command::new(cordon_bin())
                .args(["plugin", "install", plugin_wasm(p).to_str().unwrap()])
                .env("CORDON_HOME", building.join("home"))
                .env_remove("RUST_LOG")
                .env("RUST_BACKTRACE", "0")
                .output()
                .expect("run cordon");
            assert!(
                out.status.success(),
                "installing {p} into the template home failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if std::fs::rename(&building, &dir).is_err() {
            // Another test process finished first; its template is as good.
            let _ = std::fs::remove_dir_all(&building);
        }
    }

    /// A fresh home holding a copy of the template for `plugins` (compiled code and
    /// components hard-linked: Cordon replaces files by renaming, never in place).
    pub fn home_with(plugins: &[&str]) -> TestHome {
        let template = template(plugins);
        let home = TestHome::new();
        copy_tree(&template, &home.path(), false);
        home
    }

    fn copy_tree(from: &Path, to: &Path, link: bool) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let (src, dst) = (entry.path(), to.join(entry.file_name()));
            if entry.file_type().unwrap().is_dir() {
                copy_tree(&src, &dst, true);
            } else if !(link && std::fs::hard_link(&src, &dst).is_ok()) {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }
}
