//! A real load balancer in front of several `cordon serve`s: Debian's `haproxy`, started on
//! 127.0.0.1 with its own configuration (never the package's service), spreading requests
//! round-robin as a team's deployment would, and taking a host out once its health check
//! fails.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running haproxy.
pub struct Balancer {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its configuration file (kept for a failing test to show).
    pub config: PathBuf,
}

/// The haproxy binary, if installed (`make test-services` installs it).
pub fn haproxy() -> Option<PathBuf> {
    ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A port free now on 127.0.0.1: where to start a balancer, known before the hosts behind
/// it start (they answer to its address, `[serve] public_url`).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Balancer {
    /// haproxy on 127.0.0.1:`port` in front of `hosts` (`127.0.0.1:PORT` each),
    /// round-robin, passing requests on with their `Host` (the hosts' `[serve] public_url`
    /// is `http://127.0.0.1:port`). A request is sent to another host only when it could not
    /// reach one (a connection refused): never again once a host had it, so nothing runs
    /// twice. Hosts are checked on `GET /api/v1/health` every 200 ms and taken out at the
    /// first failure. `dir` holds the configuration and haproxy's log.
    pub fn start(port: u16, hosts: &[&str], dir: &std::path::Path) -> Balancer {
        let haproxy = haproxy().expect("haproxy is installed (make test-services installs it)");
        let servers: String = hosts
            .iter()
            .enumerate()
            .map(|(i, addr)| format!("    server host{i} {addr} check inter 200 fall 1 rise 1\n"))
            .collect();
        let config = dir.join("haproxy.cfg");
        let text = format!(
            "global\n    maxconn 512\n\
             defaults\n    mode http\n    timeout connect 2s\n    timeout client 300s\n    \
             timeout server 300s\n    option redispatch\n    retries 3\n    \
             retry-on conn-failure\n\
             frontend cordon\n    bind 127.0.0.1:{port}\n    default_backend hosts\n\
             backend hosts\n    balance roundrobin\n    option httpchk\n    \
             http-check send meth GET uri /api/v1/health ver HTTP/1.1 hdr Host 127.0.0.1:{port}\n    \
             http-check expect status 200\n{servers}"
        );
        std::fs::File::create(&config)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .expect("write haproxy.cfg");
        let child = Command::new(haproxy)
            .args(["-db", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.join("haproxy.log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .spawn()
            .expect("start haproxy");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "haproxy did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let balancer = Balancer {
            child,
            addr,
            config,
        };
        // A host whose first checks fail is down from the start: say why at once.
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            !balancer.log().contains("is DOWN"),
            "haproxy sees a host down:\n{}\n{text}",
            balancer.log()
        );
        balancer
    }

    /// What haproxy wrote: hosts going up and down.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_file_name("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
