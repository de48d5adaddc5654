//! End-to-end test support: run the built `cordon` binary against a private home, snapshot a
//! home to prove a failed command changed nothing, and serve files over loopback HTTP.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

pub mod balancer;
pub mod bench;
pub mod fake_registry;
pub mod oidc;
pub mod otlp;
pub mod postgres;
pub mod running;
pub mod serve;

/// The workspace root (the directory holding the top `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Cargo's target directory for this workspace.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| {
            if p.is_absolute() {
                p
            } else {
                workspace_root().join(p)
            }
        })
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The `cordon` binary under test: `$CORDON_BIN`, else `target/debug/cordon`.
pub fn cordon_bin() -> PathBuf {
    let bin = std::env::var_os("CORDON_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("debug").join("cordon"));
    assert!(
        bin.is_file(),
        "the cordon binary is missing at {}: run `make` first (or `cargo build -p cordon`)",
        bin.display()
    );
    bin
}

/// A fixture component built by `make` into `target/fixtures/<name>.wasm`.
pub fn fixture(name: &str) -> PathBuf {
    let path = target_dir().join("fixtures").join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "fixture {} is missing: run `make` first (it builds the fixtures into target/fixtures)",
        path.display()
    );
    path
}

/// `sha256:<hex>` of a file.
pub fn file_digest(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The result of one `cordon` run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The command line, for messages.
    pub command: String,
    /// The exit code (-1 if killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    fn from_output(command: String, out: Output) -> Run {
        Run {
            command,
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Asserts exit code 0 and returns self for chaining.
    #[track_caller]
    pub fn ok(self) -> Run {
        self.code(0)
    }

    /// Asserts the exit code.
    #[track_caller]
    pub fn code(self, expected: i32) -> Run {
        assert_eq!(
            self.code, expected,
            "`{}` exited {} (expected {expected})\n--- stdout\n{}\n--- stderr\n{}",
            self.command, self.code, self.stdout, self.stderr
        );
        self
    }

    /// Asserts stdout contains every needle.
    #[track_caller]
    pub fn stdout_has(self, needles: &[&str]) -> Run {
        for n in needles {
            assert!(
                self.stdout.contains(n),
                "stdout of `{}` lacks {n:?}\n--- stdout\n{}\n--- stderr\n{}",
                self.command,
                self.stdout,
                self.stderr
            );
        }
        self
    }

    /// Asserts stdout contains none of the needles.
    #[track_caller]
    pub fn stdout_lacks(self, needles: &[&str]) -> Run {
        for n in needles {
            assert!(
                !self.stdout.contains(n),
                "stdout of `{}` has {n:?}\n--- stdout\n{}\n--- stderr\n{}",
                self.command,
                self.stdout,
                self.stderr
            );
        }
        self
    }

    /// Asserts stderr contains every needle.
    #[track_caller]
    pub fn stderr_has(self, needles: &[&str]) -> Run {
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "stderr of `{}` lacks {n:?}\n--- stdout\n{}\n--- stderr\n{}",
                self.command,
                self.stdout,
                self.stderr
            );
        }
        self
    }
}

/// A private Cordon home in a temporary directory, removed when dropped.
pub struct TestHome {
    dir: tempfile::TempDir,
}

impl Default for TestHome {
    fn default() -> Self {
        Self::new()
    }
}

impl TestHome {
    /// A fresh, empty home (the directory itself is not created until Cordon needs it).
    pub fn new() -> TestHome {
        TestHome {
            dir: tempfile::Builder::new()
                .prefix("cordon-test-")
                .tempdir()
                .expect("create a temporary directory"),
        }
    }

    /// The home directory.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The audit records of calls of `tool` (its name, or `plugin.tool`), as `cordon audit
    /// --json` lists them, oldest first.
    pub fn audit_of(&self, tool: &str) -> Vec<serde_json::Value> {
        let run = self.cordon(&["audit", "--json", "--tool", tool]).ok();
        let mut records: Vec<serde_json::Value> = run
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("an audit record as JSON"))
            .collect();
        records.sort_by_key(|r| r["id"].as_i64());
        records
    }

    /// A scratch directory beside the home for test data.
    pub fn scratch(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).expect("create scratch directory");
        p
    }

    /// Runs `cordon <args>` with this home, no terminal on stdin, and a clean environment
    /// for Cordon's own variables.
    pub fn cordon(&self, args: &[&str]) -> Run {
        self.cordon_with_stdin(args, "")
    }

    /// Like [`TestHome::cordon`], feeding `stdin` (still not a terminal).
    pub fn cordon_with_stdin(&self, args: &[&str], stdin: &str) -> Run {
        self.cordon_full(args, stdin, &[])
    }

    /// Like [`TestHome::cordon`], with extra environment variables for the `cordon` process.
    pub fn cordon_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.cordon_full(args, "", env)
    }

    /// Like [`TestHome::cordon`], run from `cwd` (where Cordon looks for `cordon.toml`).
    pub fn cordon_in(&self, cwd: &Path, args: &[&str]) -> Run {
        self.cordon_at(Some(cwd), args, "", &[])
    }

    fn cordon_full(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Run {
        self.cordon_at(None, args, stdin, env)
    }

    /// `cordon <args>` with this home and the variables that would make Cordon read the
    /// developer's own settings removed; every way the tests start `cordon` begins here.
    pub fn cordon_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(cordon_bin());
        command
            .args(args)
            .env("CORDON_HOME", self.path())
            .env_remove("CORDON_CONFIG")
            .env_remove("CORDON_STORE")
            .env_remove("RUST_LOG")
            // A developer's or CI's own trace collector is not the tests'.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            // Bundled tools come from the build under test, not a directory of the user's.
            .env_remove("CORDON_PLUGINS_DIR")
            .env("RUST_BACKTRACE", "0");
        command
    }

    /// Runs `cordon <args>` with this home from `cwd` (else the test's directory), feeding
    /// `stdin` (not a terminal), with extra environment variables; the variables that would
    /// make Cordon read the developer's own settings are removed.
    pub fn cordon_at(
        &self,
        cwd: Option<&Path>,
        args: &[&str],
        stdin: &str,
        env: &[(&str, &str)],
    ) -> Run {
        let mut command = self.cordon_command(args);
        if let Some(dir) = cwd {
            command.current_dir(dir);
        }
        let mut child = command
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cordon");
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        let out = child.wait_with_output().expect("wait for cordon");
        Run::from_output(format!("cordon {}", args.join(" ")), out)
    }

    /// [`TestHome::cordon_at`] with no input, and the peak resident memory of the `cordon`
    /// process in KiB (its own, from `wait4`), for tests that hold the host's memory to a bound.
    #[expect(
        clippy::zombie_processes,
        reason = "the child is reaped by wait4, which gives its peak memory"
    )]
    pub fn cordon_measured(
        &self,
        cwd: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (Run, u64) {
        use std::io::Read;
        use std::os::unix::process::ExitStatusExt;
        let mut command = self.cordon_command(args);
        if let Some(dir) = cwd {
            command.current_dir(dir);
        }
        let mut child = command
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cordon");
        let drain = |mut from: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = from.read_to_end(&mut bytes);
                bytes
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("stdout is piped")));
        let stderr = drain(Box::new(child.stderr.take().expect("stderr is piped")));
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, which `child` never waits for after this.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(waited, pid, "wait4 for cordon");
        let out = Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout: stdout.join().expect("stdout reader"),
            stderr: stderr.join().expect("stderr reader"),
        };
        // Linux gives the peak in KiB.
        let peak = u64::try_from(usage.ru_maxrss).unwrap_or(0);
        (
            Run::from_output(format!("cordon {}", args.join(" ")), out),
            peak,
        )
    }

    /// Every file (with a hash of its bytes) and directory under the home, to prove that a
    /// failed command changed nothing. Verification records in `cache/` (`*.sum`,
    /// `*.verified`: when a file's digest was last checked) are left out: any read may refresh
    /// them, and they only ever save a re-hash. So is the store (`sessions.db`): the audit
    /// log records failed calls too.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        snapshot_into(&self.path(), &self.path(), &mut out);
        out
    }

    /// Runs a command that must fail with `code`, and asserts the home is byte-for-byte
    /// unchanged; returns the run for checking the message.
    #[track_caller]
    pub fn fails_unchanged(&self, args: &[&str], code: i32) -> Run {
        let before = self.snapshot();
        let run = self.cordon(args).code(code);
        let after = self.snapshot();
        assert_eq!(
            before, after,
            "`{}` failed but changed the home\n--- stderr\n{}",
            run.command, run.stderr
        );
        assert!(
            run.stderr.starts_with("error: ") || run.stderr.contains("\nerror: "),
            "`{}` printed no error message:\n{}",
            run.command,
            run.stderr
        );
        run
    }
}

fn snapshot_into(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let entry = entry.expect("read directory entry");
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("under root").to_path_buf();
        let kind = entry.file_type().expect("file type");
        let is_record = rel.starts_with("cache")
            && rel
                .extension()
                .is_some_and(|e| e == "sum" || e == "verified");
        // The store of sessions and the audit log, which records failed calls too.
        let is_store = rel.to_str().is_some_and(|r| r.starts_with("sessions.db"));
        if is_record || is_store {
            continue;
        }
        if kind.is_dir() {
            out.insert(rel, "dir".into());
            snapshot_into(root, &path, out);
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).expect("read link");
            out.insert(rel, format!("link:{}", target.display()));
        } else {
            out.insert(rel, file_digest(&path));
        }
    }
}

/// A minimal HTTP/1.1 server on 127.0.0.1 serving fixed responses by path, for URL installs
/// and for tools that fetch. Unknown paths get 404; every request target (path and query) is
/// remembered. Stops when dropped.
pub struct HttpServer {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
}

impl HttpServer {
    /// Serves `routes` (path → body with status 200).
    pub fn serve(routes: BTreeMap<String, Vec<u8>>) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let handle = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let _ = answer(stream, &routes, &log);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(_) => break,
                }
            }
        });
        HttpServer {
            addr,
            stop,
            handle: Some(handle),
            asked,
        }
    }

    /// The request targets received so far (path and query), in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `http://127.0.0.1:<port>`, the origin to grant.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn answer(
    mut stream: std::net::TcpStream,
    routes: &BTreeMap<String, Vec<u8>>,
    asked: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Drain the headers; the requests we serve have no body.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let target = request_line.split_whitespace().nth(1).unwrap_or("/");
    asked
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(target.to_string());
    let path = target.split('?').next().unwrap_or(target);
    let (status, body): (&str, &[u8]) = match routes.get(path) {
        Some(body) => ("200 OK", body),
        None => ("404 Not Found", b"not found"),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/wasm\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()?;
    Ok(())
}

/// Homes with the bundled tools installed, shared across tests: each set of plugins is installed
/// (and compiled) once into a template home, and each test gets a copy whose compiled code is
/// hard-linked, so a test pays milliseconds instead of seconds per plugin.
pub mod support {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Mutex;

    use crate::{Run, TestHome, cordon_bin, file_digest, target_dir};
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

    /// A home with the `probe` fixture installed read-write on a fresh `data` directory (seen
    /// as /data), plus `extra_grants`; returns the home and the data directory.
    pub fn probe_home(extra_grants: &[String]) -> (TestHome, PathBuf) {
        let home = TestHome::new();
        let data = home.scratch("data");
        let probe = crate::fixture("probe");
        let grant = grant_fs(&data, "/data", "rw");
        let mut args = vec![
            "plugin",
            "install",
            probe.to_str().unwrap(),
            "--grant",
            &grant,
        ];
        for g in extra_grants {
            args.extend(["--grant", g.as_str()]);
        }
        home.cordon(&args).ok();
        (home, data)
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
        let root = target_dir().join("tmp");
        let _ = std::fs::create_dir_all(&root);
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

/// Running `cordon` on a pseudo-terminal: its stdin, stdout and stderr are all the terminal, as
/// for a person typing at one, so it takes every decision it takes for a terminal (what it
/// escapes, whether it asks for approval). Everything it writes is captured byte for byte.
pub mod terminal {
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use crate::TestHome;

    /// Text that acts on a terminal when written raw, the same as the `escapes` fixture's: OSC 0
    /// (window title), OSC 52 (clipboard), `ESC[8m` (hidden text), a C1 CSI, a bare carriage
    /// return and a right-to-left override.
    pub const HOSTILE: &str = "\u{1b}]0;pwned-title\u{7}\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[8mhidden\u{1b}[0m\u{9b}31mred\rback\u{202e}desrever";

    /// [`HOSTILE`] as Cordon shows it on a terminal: every control as a visible escape.
    pub const HOSTILE_SHOWN: &str = r"\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07\x1b[8mhidden\x1b[0m\u{9b}31mred\x0dback\u{202e}desrever";

    /// How long a command on a terminal may take before the test gives up on it.
    const TIMEOUT: Duration = Duration::from_secs(120);

    /// What a command run on a terminal wrote: stdout and stderr interleaved as the person saw
    /// them.
    #[derive(Debug)]
    pub struct TerminalRun {
        /// The command line, for messages.
        pub command: String,
        /// The exit code (-1 if killed by a signal).
        pub code: i32,
        /// Everything written to the terminal (lossy UTF-8; the terminal does not translate
        /// newlines, so these are the bytes the program wrote).
        pub output: String,
    }

    impl TerminalRun {
        /// Asserts the exit code.
        #[track_caller]
        pub fn code(self, expected: i32) -> TerminalRun {
            assert_eq!(
                self.code, expected,
                "`{}` on a terminal exited {} (expected {expected})\n--- terminal\n{}",
                self.command, self.code, self.output
            );
            self
        }

        /// Asserts exit code 0.
        #[track_caller]
        pub fn ok(self) -> TerminalRun {
            self.code(0)
        }

        /// Asserts the terminal shows every needle.
        #[track_caller]
        pub fn shows(self, needles: &[&str]) -> TerminalRun {
            for n in needles {
                assert!(
                    self.output.contains(n),
                    "the terminal of `{}` lacks {n:?}\n--- terminal\n{}",
                    self.command,
                    self.output
                );
            }
            self
        }

        /// Asserts nothing reached the terminal that a terminal acts on rather than shows,
        /// except the attribute reset Cordon writes itself before a question (`ESC[0m`): no
        /// other ESC, no C0 control but newline and tab, no DEL, no C1 control, no Unicode bidi
        /// control or line/paragraph separator.
        #[track_caller]
        pub fn shows_only_text(self) -> TerminalRun {
            let found = raw_controls(&self.output);
            assert!(
                found.is_empty(),
                "`{}` let terminal controls through raw: {found:?}\n--- terminal (Rust-escaped)\n{}",
                self.command,
                self.output.escape_debug()
            );
            self
        }
    }

    /// Characters of `output` a terminal would act on (with their byte offsets), skipping the
    /// `ESC[0m` resets Cordon writes itself.
    pub fn raw_controls(output: &str) -> Vec<(usize, char)> {
        const RESET: &str = "\u{1b}[0m";
        let mut found = Vec::new();
        let mut at = 0;
        while let Some(ch) = output[at..].chars().next() {
            if output[at..].starts_with(RESET) {
                at += RESET.len();
                continue;
            }
            let acts = match ch {
                '\n' | '\t' => false,
                '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
                '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' => true,
                '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' => true,
                _ => false,
            };
            if acts {
                found.push((at, ch));
            }
            at += ch.len_utf8();
        }
        found
    }

    /// Opens a pseudo-terminal that neither echoes input nor translates output (so the output
    /// holds exactly the bytes written); returns (master, slave).
    fn open() -> (OwnedFd, OwnedFd) {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: openpty writes two descriptors into the integers it is given; the null
        // pointers ask for no name, default attributes and default size.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty failed: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened by openpty and are owned by nobody else.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        use std::os::fd::AsRawFd;
        // SAFETY: termios is plain data; tcgetattr fills it for the slave just opened.
        let mut attrs: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::tcgetattr(slave.as_raw_fd(), &mut attrs) }, 0);
        attrs.c_lflag &= !(libc::ECHO | libc::ECHONL);
        attrs.c_oflag &= !libc::OPOST;
        // SAFETY: sets attributes of the slave we own from a termios tcgetattr filled.
        assert_eq!(
            unsafe { libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &attrs) },
            0
        );
        (master, slave)
    }

    /// Runs `command` with a new pseudo-terminal as stdin, stdout and stderr, types `input`
    /// into it (lines, as a person would) and returns everything the command wrote.
    pub fn run(mut command: Command, input: &[u8]) -> TerminalRun {
        let description = format!("{command:?}");
        let (master, slave) = open();
        let side = || Stdio::from(slave.try_clone().expect("duplicate the terminal"));
        command.stdin(side()).stdout(side()).stderr(side());
        let mut child = command.spawn().expect("start the command on a terminal");
        // The child holds the terminal now; once it exits, reading the master side ends.
        drop(command);
        drop(slave);
        let mut reader = File::from(master.try_clone().expect("duplicate the master"));
        let collector = std::thread::spawn(move || {
            let mut output = Vec::new();
            let mut buf = [0u8; 8192];
            // Linux reports EIO once no process holds the terminal any more.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                output.extend_from_slice(&buf[..n]);
            }
            output
        });
        let mut writer = File::from(master);
        writer.write_all(input).expect("type into the terminal");
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the command") {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(writer);
        let output =
            String::from_utf8_lossy(&collector.join().expect("collector thread")).into_owned();
        let Some(status) = status else {
            panic!("`{description}` did not finish within {TIMEOUT:?}\n--- terminal\n{output}");
        };
        TerminalRun {
            command: description,
            code: status.code().unwrap_or(-1),
            output,
        }
    }

    impl TestHome {
        /// `cordon <args>` with this home and a clean environment for Cordon's own variables
        /// and colours (NO_COLOR, so the only escape sequences Cordon may write are its own
        /// attribute resets).
        pub fn command(&self, args: &[&str]) -> Command {
            let mut command = self.cordon_command(args);
            command.env("NO_COLOR", "1");
            command
        }

        /// Runs `cordon <args>` on a terminal (see [`run`]), typing nothing.
        pub fn cordon_on_terminal(&self, args: &[&str]) -> TerminalRun {
            run(self.command(args), b"")
        }
    }
}
