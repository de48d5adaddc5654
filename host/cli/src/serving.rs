//! Where a running `cordon serve` can be reached, as it records it in its home when it starts:
//! so `cordon approve` talks to the server that holds this home's questions, on whatever
//! address and with whatever token file it was started, instead of assuming one.
//!
//! The record is only a hint for the home's own user (the home is theirs, and no grant can
//! reach it): `cordon approve` still checks that something answers there, and says which
//! server it talks to and why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cordon_home::Home;
use serde_json::{Value, json};

/// The file in the home.
const FILE: &str = "serving.json";

/// A `cordon serve` that recorded itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Serving {
    /// Its base URL (`http://127.0.0.1:8420`).
    pub url: String,
    /// The file of the tokens it accepts.
    pub token_file: PathBuf,
    /// Its process id.
    pub pid: u32,
}

/// The URL a client on this machine reaches a server listening on `addr` at: a server on
/// every address (`0.0.0.0`, `::`) is reached on loopback.
pub fn local_url(addr: SocketAddr) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{addr}")
}

/// Records that this process serves on `addr` with the tokens of `token_file`; the newest
/// `cordon serve` of a home is the one recorded. Written whole or not at all.
pub fn record(home: &Home, addr: SocketAddr, token_file: &Path) -> std::io::Result<()> {
    let root = home.root();
    std::fs::create_dir_all(root)?;
    let token_file = std::path::absolute(token_file)?;
    let body = json!({
        "url": local_url(addr),
        "token_file": token_file,
        "pid": std::process::id(),
    });
    let mut file = tempfile::NamedTempFile::new_in(root)?;
    std::io::Write::write_all(&mut file, format!("{body:#}\n").as_bytes())?;
    file.persist(root.join(FILE)).map_err(|e| e.error)?;
    Ok(())
}

/// Removes the record if it is this process's (a later `cordon serve` of the home may have
/// replaced it).
pub fn forget(home: &Home) {
    if read(home).is_some_and(|s| s.pid == std::process::id()) {
        let _ = std::fs::remove_file(home.root().join(FILE));
    }
}

/// Whether the recorded process still runs a `cordon`: a record left by one killed outright
/// names a port that anyone may have taken since, and the token must not go there.
pub fn alive(serving: &Serving) -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_link(format!("/proc/{}/exe", serving.pid)).is_ok_and(|exe| {
            exe.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cordon"))
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = serving;
        true
    }
}

/// The recorded server, if a `cordon serve` recorded one (it may have stopped since without
/// removing it: killed outright; see [`alive`]).
pub fn read(home: &Home) -> Option<Serving> {
    let text = std::fs::read_to_string(home.root().join(FILE)).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    Some(Serving {
        url: value["url"].as_str()?.to_string(),
        token_file: PathBuf::from(value["token_file"].as_str()?),
        pid: u32::try_from(value["pid"].as_u64()?).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_read_back_and_forgotten_only_by_its_writer() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        assert_eq!(read(&home), None);
        let addr: SocketAddr = "0.0.0.0:8421".parse().unwrap();
        record(&home, addr, &dir.path().join("tokens")).unwrap();
        let serving = read(&home).unwrap();
        assert_eq!(serving.url, "http://127.0.0.1:8421");
        assert_eq!(serving.token_file, dir.path().join("tokens"));
        assert_eq!(serving.pid, std::process::id());
        // This test runs in a program named cordon-…: a live record.
        assert!(alive(&serving));
        // Another process's record stays.
        let other = json!({"url": "http://127.0.0.1:1", "token_file": "/t", "pid": 1});
        std::fs::write(home.root().join(FILE), other.to_string()).unwrap();
        forget(&home);
        assert_eq!(read(&home).unwrap().pid, 1);
        // pid 1 is no cordon: the record is stale.
        assert!(!alive(&read(&home).unwrap()));
        record(&home, addr, Path::new("t")).unwrap();
        forget(&home);
        assert_eq!(read(&home), None);
        assert_eq!(local_url("[::]:9".parse().unwrap()), "http://[::1]:9");
    }
}
