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

use cordon_tests::support::{self, grant_fs, home_with, install, json_of};

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

    // Code stopped at the limit returns no report, but the error quotes its last prints, so a
    // model learns how far it got.
    home.cordon(&[
        "call",
        "run_python",
        r#"{"code":"import time\nfor i in range(100):\n    print(f'step {i}')\n    time.sleep(0.5)"}"#,
    ])
    .code(1)
    .stderr_has(&["time limit", "last plugin output:\nstep 0\nstep 1"]);

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
