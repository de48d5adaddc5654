//! What the benchmark programs in `examples/` share: their command line, `cordon` run on a
//! throwaway home, and a `cordon serve` started on it and stopped however the run ends.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The token benchmarks' clients present to `cordon serve` (see [`write_token`]).
pub const TOKEN: &str = "bench-token-0123456789abcdef";

/// The value after `name` on the command line.
pub fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after `name` on the command line, else `default`.
pub fn number(args: &[String], name: &str, default: usize) -> usize {
    arg(args, name)
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}"))
        })
        .unwrap_or(default)
}

/// The file after `name` on the command line, else `default` (relative to the repository),
/// made absolute: benchmarks run their children in throwaway homes, where a relative path
/// would not lead back.
pub fn file_arg(args: &[String], name: &str, default: &str) -> PathBuf {
    let path = arg(args, name).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(default)
    });
    std::fs::canonicalize(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `cordon` on the home, failing on a non-zero exit.
pub fn cordon(bin: &Path, home: &Path, args: &[&str]) {
    let out = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(args)
        .current_dir(home)
        .env_remove("CORDON_CONFIG")
        .env_remove("CORDON_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run cordon");
    assert!(
        out.status.success(),
        "cordon {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `[serve.limits]` for benchmarks of what the host does at a thousand requests at once.
const BENCH_LIMITS: &str = "[serve.limits]\nmax_connections = 8192\nmax_turns = 4096\n\
max_turns_per_token = 4096\nmax_tool_calls = 4096\nmax_mcp_sessions = 8192\n\
max_mcp_sessions_per_token = 8192\nrequests_per_second = 1000000\nrequest_burst = 1000000\n";

/// Writes the home's `bench-token` file (mode 0600) holding [`TOKEN`], named `bench`.
pub fn write_token(home: &Path) {
    write_token_with_scopes(home, None);
}

/// [`write_token`], the token limited to `scopes` (`sessions:all,audit:all`) when given.
pub fn write_token_with_scopes(home: &Path, scopes: Option<&str>) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(home.join("bench-token"))
        .expect("write the token file");
    let line = match scopes {
        Some(scopes) => format!("bench {TOKEN} {scopes}"),
        None => format!("bench {TOKEN}"),
    };
    writeln!(f, "{line}").expect("write the token file");
}

/// A `/proc/PID/status` field in KiB.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A running `cordon serve`, stopped on drop (SIGTERM, then SIGKILL after 20 s), whatever
/// happened.
pub struct Serve(pub Child);

impl Serve {
    /// Kills it outright (SIGKILL), as a crash would, and waits for it to be gone.
    pub fn kill9(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // Already gone (killed, or it stopped by itself): its id may be another process's now.
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        // SAFETY: signals our own child process by its id.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cordon serve` on the home (any free port on 127.0.0.1, the `bench-token` file,
/// then `extra` arguments) and returns it with its base URL.
///
/// Unless `extra` names a config, the server runs with `[serve.limits]` raised out of the
/// way (`bench.toml` in the home): these benchmarks measure what the host does with the work
/// it takes on, and `serve_overload` measures what it refuses.
pub fn start_serve(bin: &Path, home: &Path, extra: &[&str]) -> (Serve, String) {
    let config = home.join("bench.toml");
    let configured: Vec<&str> = if extra.contains(&"--config") {
        Vec::new()
    } else {
        std::fs::write(&config, BENCH_LIMITS).expect("write the bench config");
        vec!["--config", config.to_str().expect("a UTF-8 home")]
    };
    let mut child = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(home.join("bench-token"))
        .args(extra)
        .args(&configured)
        .current_dir(home)
        .env_remove("CORDON_CONFIG")
        .env_remove("CORDON_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cordon serve");
    let stderr = child.stderr.take().expect("piped stderr");
    let serve = Serve(child);
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads stderr to its end, so the server never blocks on a full pipe; the address goes back.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or_default();
                let _ = tx.send(format!("http://{addr}"));
            } else if line.contains("error") || line.contains("warn") {
                eprintln!("serve: {line}");
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("cordon serve says where it listens within 60 s");
    (serve, url)
}
