//! A throwaway PostgreSQL cluster for tests: Debian's `postgresql` package, initialised in a
//! temporary directory, listening on 127.0.0.1 only, trusting local connections, and stopped
//! when the test process exits. No Docker, no system cluster touched.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// One running cluster.
pub struct PgCluster {
    /// The temporary directory holding the data and the socket (removed at exit).
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// `runuser -u postgres --` when this process runs as root (PostgreSQL refuses root).
    as_postgres: bool,
}

/// The cluster shared by the tests of this process, started on first use.
pub fn shared() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = PgCluster::start();
        // Test binaries end through exit(), which runs these: nothing is left running.
        extern "C" fn stop_at_exit() {
            if let Some(c) = CLUSTERS.lock().ok().and_then(|g| g.clone()) {
                let _ = c
                    .command("pg_ctl")
                    .args(["stop", "-m", "immediate", "-D"])
                    .arg(c.dir.join("data"))
                    .output();
                let _ = std::fs::remove_dir_all(&c.dir);
            }
        }
        *CLUSTERS.lock().unwrap() = Some(cluster.handle());
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(stop_at_exit) };
        cluster
    })
}

/// What the exit handler needs to stop the shared cluster.
#[derive(Clone)]
struct Handle {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
}

impl Handle {
    fn command(&self, program: &str) -> Command {
        command(&self.bin, program, self.as_postgres)
    }
}

static CLUSTERS: Mutex<Option<Handle>> = Mutex::new(None);

/// The directory of Debian's PostgreSQL server programs (the newest version installed).
fn server_bin() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's server programs are missing (no /usr/lib/postgresql/*/bin/initdb): \
             `make test` installs Debian's `postgresql` package; or run \
             `apt-get install postgresql`"
        )
    })
}

fn command(bin: &Path, program: &str, as_postgres: bool) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free port on 127.0.0.1")
}

fn run(mut c: Command, what: &str) {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgCluster {
    /// Initialises and starts a cluster in a new temporary directory.
    pub fn start() -> PgCluster {
        let bin = server_bin();
        // SAFETY: geteuid has no preconditions.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("cordon-pg-")
            .tempdir()
            .expect("create a temporary directory")
            .keep();
        if as_postgres {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres:").arg(&dir);
                    c
                },
                "chown of the cluster directory",
            );
        }
        let cluster = PgCluster {
            dir,
            bin,
            port: free_port(),
            as_postgres,
        };
        let mut init = cluster.command("initdb");
        init.args([
            "--auth=trust",
            "--username=cordon",
            "--encoding=UTF8",
            "--no-sync",
            "-D",
        ])
        .arg(cluster.dir.join("data"));
        run(init, "initdb");
        cluster.start_server();
        cluster
    }

    fn handle(&self) -> Handle {
        Handle {
            dir: self.dir.clone(),
            bin: self.bin.clone(),
            as_postgres: self.as_postgres,
        }
    }

    fn command(&self, program: &str) -> Command {
        command(&self.bin, program, self.as_postgres)
    }

    /// Starts the server (again, after [`PgCluster::stop`]).
    pub fn start_server(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c max_connections=300",
            self.port,
            self.dir.display()
        );
        let mut start = self.command("pg_ctl");
        start
            .args(["start", "-w", "-t", "60", "-l"])
            .arg(self.dir.join("server.log"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-o", &options]);
        run(start, "pg_ctl start");
    }

    /// Stops the server at once (as a crash would), keeping its data; [`PgCluster::start_server`]
    /// brings it back.
    pub fn stop(&self) {
        let mut stop = self.command("pg_ctl");
        stop.args(["stop", "-m", "immediate", "-D"])
            .arg(self.dir.join("data"));
        run(stop, "pg_ctl stop");
    }

    /// A new, empty database and its URL.
    pub fn database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut create = self.command("createdb");
        create
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "cordon",
            ])
            .arg(&name);
        run(create, "createdb");
        self.url(&name)
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://cordon@127.0.0.1:{}/{name}", self.port)
    }
}

/// A cluster of a test's own is stopped and removed with it (the shared one lives in a static
/// and is stopped at exit instead).
impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-D"])
            .arg(self.dir.join("data"))
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
