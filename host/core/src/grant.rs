//! Capability grants: the only way a plugin reaches anything outside its own memory.
//!
//! A grant is written by a person on the command line (`fs:/data:/data:ro`), stored in the
//! home's lock file as that same text, and turned into a WASI context by the runtime. Keeping
//! one textual form (FromStr + Display round-trip) means what the user typed, what is stored and
//! what is shown back are always the same thing.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::marks::{Marked, Marks};

/// The accepted grant forms, repeated in every syntax error so the user can fix the input
/// without looking anything up.
const ACCEPTED_FORMS: &str = "accepted forms: `fs:<host-path>[:<guest-path>][:ro|rw][:public][:shared]`, \
     `env:NAME[:public]`, `config:KEY[:public]`, `net:https://host[:port][:trusted]`, \
     `net:http://host[:port][:trusted]`, `net:tcp://<ip>:<port>[:trusted]`";

/// Longest configuration key accepted.
pub const MAX_CONFIG_KEY_BYTES: usize = 128;

/// Why a grant could not be parsed or resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The text is not a grant; the message names the problem and lists the accepted forms.
    #[error("invalid grant `{input}`: {reason}; {ACCEPTED_FORMS}")]
    Syntax {
        /// The text as given.
        input: String,
        /// What exactly is wrong with it.
        reason: String,
    },
    /// The host directory of an `fs:` grant cannot be granted (missing, not a directory, ...).
    #[error("cannot grant host path `{path}`: {reason}")]
    HostPath {
        /// The host path as given.
        path: PathBuf,
        /// What is wrong with it and what to do.
        reason: String,
    },
    /// The directory overlaps Cordon's own state (the home, the config file, the store, the
    /// token file).
    #[error("cannot grant `{granted}`: {overlap}", granted = .0.granted.display(), overlap = .0)]
    Reserved(crate::reserved::ReservedOverlap),
    /// The `net:tcp` address reaches the PostgreSQL store.
    #[error("cannot grant `net:tcp://{granted}`: {overlap}", granted = .0.granted, overlap = .0)]
    ReservedAddress(crate::reserved::ReservedAddressOverlap),
}

fn syntax(input: &str, reason: impl Into<String>) -> GrantError {
    GrantError::Syntax {
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// Whether a granted directory may be changed by the plugin.
///
/// Read-only is the default because most tools only need to look, and a read-write grant is
/// what makes a tool need approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum FsMode {
    /// Files and directories can be read and listed, never created, changed or removed.
    #[default]
    ReadOnly,
    /// Everything inside the directory may be created, changed and removed.
    ReadWrite,
}

impl FsMode {
    /// The suffix used in the grant syntax (`ro` or `rw`).
    pub fn as_str(self) -> &'static str {
        match self {
            FsMode::ReadOnly => "ro",
            FsMode::ReadWrite => "rw",
        }
    }
}

/// A host directory made visible to the plugin at a guest path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FsGrant {
    /// The host directory. After [`Grant::resolve`] it is absolute and canonical (symlinks
    /// resolved at grant time, so a later swap of a symlink cannot redirect the grant).
    pub host: PathBuf,
    /// Where the plugin sees the directory: absolute, normalised, without `..`. `None` means
    /// "the same as the host path"; [`Grant::resolve`] fills it in.
    pub guest: Option<String>,
    /// Read-only or read-write.
    pub mode: FsMode,
    /// What the person who granted it said of its contents (`:public`, `:shared`).
    pub marks: Marks,
}

impl FsGrant {
    /// The guest path the directory is mounted at: the explicit one, or the host path.
    pub fn guest_path(&self) -> String {
        match &self.guest {
            Some(g) => g.clone(),
            None => self.host.to_string_lossy().into_owned(),
        }
    }
}

/// `http` or `https`, the schemes an HTTP origin grant can allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HttpScheme {
    /// Plain HTTP (default port 80).
    Http,
    /// HTTP over TLS (default port 443).
    Https,
}

impl HttpScheme {
    /// The scheme as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        }
    }

    /// The port used when a URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            HttpScheme::Http => 80,
            HttpScheme::Https => 443,
        }
    }
}

/// One allowed HTTP origin: scheme, host and port must all match a request exactly.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HttpOrigin {
    /// `http` or `https`.
    pub scheme: HttpScheme,
    /// Lower-case host name, IPv4 address, or bracketed IPv6 address (`[::1]`), as the `url`
    /// crate normalises it (international names in punycode).
    pub host: String,
    /// The port, with the scheme's default filled in.
    pub port: u16,
}

impl HttpOrigin {
    /// Whether a request to `scheme://host:port` is allowed by this origin. `host` is compared
    /// case-insensitively; the caller must have normalised it (no trailing dot, brackets on IPv6).
    pub fn matches(&self, scheme: HttpScheme, host: &str, port: u16) -> bool {
        self.scheme == scheme && self.port == port && self.host.eq_ignore_ascii_case(host)
    }
}

impl fmt::Display for HttpOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.host)?;
        if self.port != self.scheme.default_port() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

impl FromStr for HttpOrigin {
    type Err = GrantError;

    /// Parses `https://host[:port]` (no path, query, user name or password).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let input = format!("net:{s}");
        let scheme = if s.starts_with("https://") {
            HttpScheme::Https
        } else if s.starts_with("http://") {
            HttpScheme::Http
        } else {
            return Err(syntax(
                &input,
                "a network grant must start with `https://`, `http://` or `tcp://`",
            ));
        };
        let url = url::Url::parse(s)
            .map_err(|e| syntax(&input, format!("not a valid URL origin ({e})")))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(syntax(
                &input,
                "an HTTP origin must not contain a user name or password",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() || !matches!(url.path(), "" | "/") {
            return Err(syntax(
                &input,
                "an HTTP grant allows a whole origin: give only scheme, host and port, no path or query",
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.');
                if d.is_empty() {
                    return Err(syntax(&input, "the host name is empty"));
                }
                // Written without its trailing dots, the name must read as itself: the URL
                // parser takes `127.0..` for a name only because of the dots, and `127.0`
                // is an address (and `039..` reads as nothing).
                match url::Host::parse(d) {
                    Ok(url::Host::Domain(again)) if again == d => again,
                    _ => {
                        return Err(syntax(
                            &input,
                            format!(
                                "the host `{d}` is not a host name: without its trailing dots \
                                 it reads as an address, or not at all"
                            ),
                        ));
                    }
                }
            }
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            None => return Err(syntax(&input, "the origin has no host")),
        };
        let port = url.port().unwrap_or(scheme.default_port());
        Ok(HttpOrigin { scheme, host, port })
    }
}

/// One capability given to a plugin.
///
/// Ordering is only used to keep [`Grants`] in a stable order for display and storage.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grant {
    /// A preopened host directory.
    Fs(FsGrant),
    /// An environment variable, by name; the value is read from the host at call time so that
    /// secrets are never written into the lock file.
    Env(String, Marks),
    /// Outgoing HTTP requests to one origin.
    Http(HttpOrigin, Marks),
    /// Raw TCP connections to one address and port (no name lookup).
    Tcp(SocketAddr, Marks),
    /// One `wasi:config/store` key, by name; its value is kept in the home (`cordon plugin
    /// config`), never in the lock file and never taken from the environment.
    Config(String, Marks),
}

impl Grant {
    /// Checks the host side of the grant and makes it canonical: for `fs:` grants the host path
    /// must exist and be a directory; symlinks are resolved now, and the guest path defaults to
    /// the canonical host path. Other grants are returned unchanged.
    pub fn resolve(self) -> Result<Grant, GrantError> {
        match self {
            Grant::Fs(fs) => {
                let host = canonical_dir(&fs.host)?;
                let guest = match fs.guest {
                    Some(g) => g,
                    None => host.to_str().map(str::to_string).ok_or_else(|| {
                        host_err(
                            &fs.host,
                            "the resolved path is not valid UTF-8; give an explicit guest path",
                        )
                    })?,
                };
                Ok(Grant::Fs(FsGrant {
                    host,
                    guest: Some(guest),
                    mode: fs.mode,
                    marks: fs.marks,
                }))
            }
            other => Ok(other),
        }
    }

    /// Whether this grant lets the plugin change or send something (a read-write directory,
    /// any network access, any environment variable — a variable usually holds a credential).
    pub fn can_change_anything(&self) -> bool {
        match self {
            Grant::Fs(fs) => fs.mode == FsMode::ReadWrite,
            // A configuration value, like a variable, usually holds a credential.
            Grant::Env(..) | Grant::Config(..) | Grant::Http(..) | Grant::Tcp(..) => true,
        }
    }

    /// What the person who granted it said of it.
    pub fn marks(&self) -> Marks {
        match self {
            Grant::Fs(fs) => fs.marks,
            Grant::Env(_, m) | Grant::Config(_, m) | Grant::Http(_, m) | Grant::Tcp(_, m) => *m,
        }
    }

    /// Whether `other` gives the same access, whatever either's marks say: granting it again
    /// with other marks replaces it.
    pub fn same_access(&self, other: &Grant) -> bool {
        match (self, other) {
            (Grant::Fs(a), Grant::Fs(b)) => {
                a.host == b.host && a.guest_path() == b.guest_path() && a.mode == b.mode
            }
            (Grant::Env(a, _), Grant::Env(b, _)) => a == b,
            (Grant::Config(a, _), Grant::Config(b, _)) => a == b,
            (Grant::Http(a, _), Grant::Http(b, _)) => a == b,
            (Grant::Tcp(a, _), Grant::Tcp(b, _)) => a == b,
            _ => false,
        }
    }

    /// Whether revoking `pattern` removes this grant. `fs:` grants match on the host path (and
    /// the guest path, if the pattern names one) whatever their mode, so `revoke fs:/data`
    /// removes `fs:/data:/data:rw`; other grants must be equal.
    pub fn matches_revoke(&self, pattern: &Grant) -> bool {
        match (self, pattern) {
            (Grant::Fs(g), Grant::Fs(p)) => {
                g.host == p.host
                    && (p.guest.is_none() || p.guest.as_deref() == Some(&g.guest_path()))
            }
            _ => self.same_access(pattern),
        }
    }
}

fn host_err(path: &Path, reason: impl Into<String>) -> GrantError {
    GrantError::HostPath {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn canonical_dir(path: &Path) -> Result<PathBuf, GrantError> {
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            host_err(
                path,
                "it does not exist; create the directory first or fix the path",
            )
        } else {
            host_err(path, format!("it cannot be resolved ({e})"))
        }
    })?;
    let meta = std::fs::metadata(&canonical)
        .map_err(|e| host_err(path, format!("cannot read its metadata ({e})")))?;
    if !meta.is_dir() {
        return Err(host_err(
            path,
            "it is not a directory; grant the directory that contains it",
        ));
    }
    if canonical.to_string_lossy().contains(':') {
        return Err(host_err(
            path,
            "paths containing `:` cannot be granted (`:` separates the grant's parts)",
        ));
    }
    Ok(canonical)
}

/// Normalises a guest path: absolute, `.` and repeated or trailing `/` removed, `..` refused
/// (a guest path with `..` would be confusing at best and an escape attempt at worst).
pub(crate) fn normalize_guest_path(input: &str, path: &str) -> Result<String, GrantError> {
    if !path.starts_with('/') {
        return Err(syntax(
            input,
            format!("the guest path `{path}` must be absolute (start with `/`)"),
        ));
    }
    if path.contains('\0') {
        return Err(syntax(input, "the guest path contains a NUL byte"));
    }
    let mut out = String::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(syntax(
                    input,
                    format!("the guest path `{path}` must not contain `..`"),
                ));
            }
            p => {
                out.push('/');
                out.push_str(p);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// A `wasi:config/store` key as a grant may name it: letters, digits, `_`, `-` and `.`, so that
/// it never holds the `:` that separates a grant's parts (nor a mark).
pub fn valid_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_CONFIG_KEY_BYTES
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl FromStr for Grant {
    type Err = GrantError;

    /// Parses the grant syntax only; call [`Grant::resolve`] to check the host side.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let input = s;
        let (s, marks) = Marks::strip(s.trim()).map_err(|reason| syntax(input, reason))?;
        let placed = |on: Marked| match marks.misplaced(on) {
            Some(reason) => Err(syntax(input, reason)),
            None => Ok(()),
        };
        if let Some(rest) = s.strip_prefix("fs:") {
            let (rest, mode) = if let Some(r) = rest.strip_suffix(":ro") {
                (r, FsMode::ReadOnly)
            } else if let Some(r) = rest.strip_suffix(":rw") {
                (r, FsMode::ReadWrite)
            } else {
                (rest, FsMode::ReadOnly)
            };
            let parts: Vec<&str> = rest.split(':').collect();
            let (host, guest) = match parts.as_slice() {
                [host] => (*host, None),
                [host, guest] => (*host, Some(*guest)),
                _ => {
                    return Err(syntax(
                        input,
                        "too many `:`-separated parts (paths containing `:` are not supported; the mode must be `ro` or `rw`)",
                    ));
                }
            };
            if host.is_empty() {
                return Err(syntax(input, "the host path is empty"));
            }
            if host.contains('\0') {
                return Err(syntax(input, "the host path contains a NUL byte"));
            }
            let guest = guest.map(|g| normalize_guest_path(input, g)).transpose()?;
            placed(match mode {
                FsMode::ReadOnly => Marked::ReadOnlyDir,
                FsMode::ReadWrite => Marked::ReadWriteDir,
            })?;
            return Ok(Grant::Fs(FsGrant {
                host: PathBuf::from(host),
                guest,
                mode,
                marks,
            }));
        }
        if let Some(name) = s.strip_prefix("env:") {
            if !valid_env_name(name) {
                return Err(syntax(
                    input,
                    format!(
                        "`{name}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"
                    ),
                ));
            }
            placed(Marked::Env)?;
            return Ok(Grant::Env(name.to_string(), marks));
        }
        if let Some(key) = s.strip_prefix("config:") {
            if !valid_config_key(key) {
                return Err(syntax(
                    input,
                    format!(
                        "`{key}` is not a configuration key (1 to {MAX_CONFIG_KEY_BYTES} letters, \
                         digits, `_`, `-` and `.`)"
                    ),
                ));
            }
            placed(Marked::Config)?;
            return Ok(Grant::Config(key.to_string(), marks));
        }
        if let Some(rest) = s.strip_prefix("net:") {
            if let Some(addr) = rest.strip_prefix("tcp://") {
                let addr = addr.strip_suffix('/').unwrap_or(addr);
                let sa: SocketAddr = addr.parse().map_err(|_| {
                    syntax(
                        input,
                        format!("`{addr}` is not `<ip>:<port>` (host names are not resolved; use an IP address, `[..]` around IPv6)"),
                    )
                })?;
                if sa.port() == 0 {
                    return Err(syntax(input, "port 0 cannot be connected to"));
                }
                placed(Marked::Network)?;
                return Ok(Grant::Tcp(sa, marks));
            }
            placed(Marked::Network)?;
            return HttpOrigin::from_str(rest)
                .map(|origin| Grant::Http(origin, marks))
                .map_err(|e| match e {
                    GrantError::Syntax { reason, .. } => syntax(input, reason),
                    other => other,
                });
        }
        Err(syntax(
            input,
            "unknown grant kind (expected `fs:`, `env:`, `config:` or `net:`)",
        ))
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Fs(fs) => {
                write!(f, "fs:{}", fs.host.display())?;
                if let Some(g) = &fs.guest {
                    write!(f, ":{g}")?;
                }
                write!(f, ":{}{}", fs.mode.as_str(), fs.marks)
            }
            Grant::Env(name, marks) => write!(f, "env:{name}{marks}"),
            Grant::Config(key, marks) => write!(f, "config:{key}{marks}"),
            Grant::Http(origin, marks) => write!(f, "net:{origin}{marks}"),
            Grant::Tcp(addr, marks) => write!(f, "net:tcp://{addr}{marks}"),
        }
    }
}

impl Serialize for Grant {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Grant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The set of grants of one plugin, kept sorted and free of duplicates.
///
/// Two `fs:` grants may not share a guest path (the later one replaces the earlier), so a
/// plugin never sees two directories fighting over one mount point.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Grants {
    list: Vec<Grant>,
}

impl Grants {
    /// No grants at all: the plugin can reach nothing but its arguments.
    pub fn new() -> Grants {
        Grants::default()
    }

    /// Adds a grant. Returns the grant it replaced: one giving the same access (perhaps with
    /// other marks), or an `fs:` grant mounted at the same guest path (e.g. the same directory
    /// with another mode).
    pub fn add(&mut self, grant: Grant) -> Option<Grant> {
        let pos = self.list.iter().position(|g| match (g, &grant) {
            (Grant::Fs(a), Grant::Fs(b)) => a.guest_path() == b.guest_path(),
            _ => g.same_access(&grant),
        });
        let replaced = pos.map(|i| self.list.remove(i));
        let at = self.list.binary_search(&grant).unwrap_or_else(|i| i);
        self.list.insert(at, grant);
        replaced
    }

    /// Removes every grant that `pattern` matches (see [`Grant::matches_revoke`]) and returns
    /// them; empty when nothing matched, so the caller can tell the user.
    pub fn revoke(&mut self, pattern: &Grant) -> Vec<Grant> {
        let (removed, kept): (Vec<Grant>, Vec<Grant>) =
            self.list.drain(..).partition(|g| g.matches_revoke(pattern));
        self.list = kept;
        removed
    }

    /// Whether the plugin was given nothing.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The number of grants.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The grants in stable order.
    pub fn iter(&self) -> std::slice::Iter<'_, Grant> {
        self.list.iter()
    }

    /// Whether any grant lets the plugin change or send something: any read-write path, any
    /// network access, any environment variable. A tool whose plugin has none of these cannot
    /// have effects beyond its result, which is the rule for auto-approval.
    pub fn can_change_anything(&self) -> bool {
        self.list.iter().any(Grant::can_change_anything)
    }

    /// The directory grants.
    pub fn fs(&self) -> impl Iterator<Item = &FsGrant> {
        self.list.iter().filter_map(|g| match g {
            Grant::Fs(f) => Some(f),
            _ => None,
        })
    }

    /// The names of the granted environment variables.
    pub fn env_names(&self) -> impl Iterator<Item = &str> {
        self.list.iter().filter_map(|g| match g {
            Grant::Env(n, _) => Some(n.as_str()),
            _ => None,
        })
    }

    /// The granted `wasi:config/store` keys.
    pub fn config_keys(&self) -> impl Iterator<Item = &str> {
        self.list.iter().filter_map(|g| match g {
            Grant::Config(k, _) => Some(k.as_str()),
            _ => None,
        })
    }

    /// The allowed HTTP origins.
    pub fn http_origins(&self) -> impl Iterator<Item = &HttpOrigin> {
        self.list.iter().filter_map(|g| match g {
            Grant::Http(o, _) => Some(o),
            _ => None,
        })
    }

    /// The allowed TCP addresses.
    pub fn tcp_addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.list.iter().filter_map(|g| match g {
            Grant::Tcp(a, _) => Some(*a),
            _ => None,
        })
    }
}

impl<'a> IntoIterator for &'a Grants {
    type Item = &'a Grant;
    type IntoIter = std::slice::Iter<'a, Grant>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl FromIterator<Grant> for Grants {
    fn from_iter<T: IntoIterator<Item = Grant>>(iter: T) -> Self {
        let mut grants = Grants::new();
        for g in iter {
            grants.add(g);
        }
        grants
    }
}

impl Serialize for Grants {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.list.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Grants {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Vec::<Grant>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Grant {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        s.parse::<Grant>().expect_err(s).to_string()
    }

    /// Found by fuzzing (`grant`): a name the URL parser reads only because of its trailing
    /// dots was written back as an address, or as nothing that reads.
    #[test]
    fn a_host_reads_as_itself_without_its_trailing_dots() {
        assert_eq!(g("net:https://docs.rs.").to_string(), "net:https://docs.rs");
        assert_eq!(
            g("net:https://docs.rs..").to_string(),
            "net:https://docs.rs"
        );
        for bad in [
            "net:http://127.0........",
            "net:http://127.0.0..:8080",
            "net:http://039...",
            "net:http://127..127....",
            "net:http://1....",
        ] {
            assert!(
                err(bad).contains("is not a host name"),
                "{bad}: {}",
                err(bad)
            );
        }
    }

    #[test]
    fn marks_parse_print_back_and_do_not_change_access() {
        for text in [
            "fs:/srv/www:/www:ro:public",
            "fs:/sync:/sync:rw:public:shared",
            "env:REGION:public",
            "net:https://docs.rs:trusted",
            "net:http://127.0.0.1:8080:trusted",
            "net:tcp://127.0.0.1:5432:trusted",
        ] {
            let grant = g(text);
            assert_eq!(grant.to_string(), text);
            assert!(!grant.marks().is_empty(), "{text}");
        }
        // Any order in, one order out.
        assert_eq!(
            g("fs:/sync:/sync:rw:shared:public").to_string(),
            "fs:/sync:/sync:rw:public:shared"
        );
        assert!(err("fs:/data:/data:ro:shared").contains("read-only directory"));
        assert!(err("net:https://x.org:public").contains("`:trusted`"));
        assert!(err("env:A:trusted").contains("environment variable"));
        assert!(err("env:A:public:public").contains("twice"));
        // Granting again with other marks replaces; revoking ignores marks.
        let mut grants = Grants::new();
        grants.add(g("net:https://docs.rs"));
        let replaced = grants.add(g("net:https://docs.rs:trusted"));
        assert_eq!(replaced, Some(g("net:https://docs.rs")));
        assert_eq!(grants.len(), 1);
        assert_eq!(grants.revoke(&g("net:https://docs.rs")).len(), 1);
        assert!(grants.is_empty());
        assert!(g("env:A:public").same_access(&g("env:A")));
        assert!(!g("env:A").same_access(&g("env:B")));
    }

    #[test]
    fn fs_forms_parse_with_defaults() {
        assert_eq!(
            g("fs:/data"),
            Grant::Fs(FsGrant {
                host: "/data".into(),
                guest: None,
                mode: FsMode::ReadOnly,
                marks: Marks::default(),
            })
        );
        assert_eq!(
            g("fs:./data:/mnt//x/./y/:rw"),
            Grant::Fs(FsGrant {
                host: "./data".into(),
                guest: Some("/mnt/x/y".into()),
                mode: FsMode::ReadWrite,
                marks: Marks::default(),
            })
        );
        assert_eq!(
            g("fs:/data:ro"),
            Grant::Fs(FsGrant {
                host: "/data".into(),
                guest: None,
                mode: FsMode::ReadOnly,
                marks: Marks::default(),
            })
        );
        assert_eq!(
            g("fs:/data:/"),
            Grant::Fs(FsGrant {
                host: "/data".into(),
                guest: Some("/".into()),
                mode: FsMode::ReadOnly,
                marks: Marks::default(),
            })
        );
    }

    #[test]
    fn bad_fs_forms_are_explained() {
        assert!(err("fs:/data:/a/../b").contains("must not contain `..`"));
        assert!(err("fs:/data:relative").contains("must be absolute"));
        assert!(err("fs::/x").contains("host path is empty"));
        assert!(err("fs:/a:/b:/c").contains("too many"));
        assert!(err("fs:/a:/b:rx").contains("too many"));
        assert!(err("disk:/a").contains("unknown grant kind"));
        assert!(err("disk:/a").contains("accepted forms"));
    }

    #[test]
    fn env_and_net_forms() {
        assert_eq!(
            g("env:API_KEY"),
            Grant::Env("API_KEY".into(), Marks::default())
        );
        assert!(err("env:1X").contains("not an environment variable name"));
        assert!(err("env:A=B").contains("not an environment variable name"));
        assert!(err("env:").contains("not an environment variable name"));
        assert_eq!(
            g("config:weather.api-key_2"),
            Grant::Config("weather.api-key_2".into(), Marks::default())
        );
        assert_eq!(g("config:k:public").to_string(), "config:k:public");
        assert!(err("config:").contains("not a configuration key"));
        assert!(err("config:a/b").contains("not a configuration key"));
        assert!(err(&format!("config:{}", "k".repeat(129))).contains("not a configuration key"));
        assert!(err("config:k:trusted").contains("`:trusted`"));
        assert!(g("config:k").can_change_anything());
        assert_eq!(
            g("net:https://Example.COM"),
            Grant::Http(
                HttpOrigin {
                    scheme: HttpScheme::Https,
                    host: "example.com".into(),
                    port: 443
                },
                Marks::default()
            )
        );
        assert_eq!(
            g("net:http://127.0.0.1:8080/"),
            Grant::Http(
                HttpOrigin {
                    scheme: HttpScheme::Http,
                    host: "127.0.0.1".into(),
                    port: 8080
                },
                Marks::default()
            )
        );
        assert_eq!(
            g("net:http://[::1]:81"),
            Grant::Http(
                HttpOrigin {
                    scheme: HttpScheme::Http,
                    host: "[::1]".into(),
                    port: 81
                },
                Marks::default()
            )
        );
        assert_eq!(
            g("net:tcp://10.0.0.1:5432"),
            Grant::Tcp("10.0.0.1:5432".parse().unwrap(), Marks::default())
        );
        assert!(err("net:https://example.com/path").contains("no path"));
        assert!(err("net:https://u:p@example.com").contains("user name"));
        assert!(err("net:ftp://example.com").contains("must start with"));
        assert!(err("net:tcp://db.local:5432").contains("host names are not resolved"));
        assert!(err("net:tcp://1.2.3.4:0").contains("port 0"));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "fs:/data:ro",
            "fs:/data:/mnt:rw",
            "fs:rel/dir:/x:ro",
            "env:HOME",
            "net:https://example.com",
            "net:https://example.com:8443",
            "net:http://127.0.0.1:80",
            "net:http://[::1]:9000",
            "net:tcp://127.0.0.1:5432",
            "net:tcp://[::1]:5432",
        ] {
            let parsed = g(s);
            let shown = parsed.to_string();
            assert_eq!(g(&shown), parsed, "{s} -> {shown}");
        }
        assert_eq!(g("fs:/data").to_string(), "fs:/data:ro");
        assert_eq!(g("net:http://h:80").to_string(), "net:http://h");
    }

    #[test]
    fn resolve_canonicalises_and_checks_directories() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let canonical = std::fs::canonicalize(&real).unwrap();

        let resolved = Grant::Fs(FsGrant {
            host: link.clone(),
            guest: None,
            mode: FsMode::ReadOnly,
            marks: Marks::default(),
        })
        .resolve()
        .unwrap();
        match &resolved {
            Grant::Fs(fs) => {
                assert_eq!(fs.host, canonical);
                assert_eq!(fs.guest.as_deref(), canonical.to_str());
            }
            other => panic!("{other:?}"),
        }
        // The resolved grant round-trips through its text form.
        assert_eq!(g(&resolved.to_string()), resolved);

        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let e = Grant::Fs(FsGrant {
            host: file,
            guest: None,
            mode: FsMode::ReadOnly,
            marks: Marks::default(),
        })
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let e = Grant::Fs(FsGrant {
            host: dir.path().join("missing"),
            guest: None,
            mode: FsMode::ReadOnly,
            marks: Marks::default(),
        })
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn grants_set_semantics() {
        let mut gs = Grants::new();
        assert!(gs.is_empty());
        assert!(!gs.can_change_anything());
        assert_eq!(gs.add(g("fs:/data:/data:ro")), None);
        assert!(!gs.can_change_anything());
        // Same guest path: replaced.
        assert_eq!(gs.add(g("fs:/data:/data:rw")), Some(g("fs:/data:/data:ro")));
        assert_eq!(gs.len(), 1);
        assert!(gs.can_change_anything());
        assert_eq!(gs.add(g("env:A")), None);
        assert_eq!(gs.add(g("env:A")), Some(g("env:A")));
        assert_eq!(gs.len(), 2);
        assert_eq!(gs.revoke(&g("fs:/data")), vec![g("fs:/data:/data:rw")]);
        assert!(gs.revoke(&g("fs:/other")).is_empty());
        assert!(
            gs.can_change_anything(),
            "env grants count as able to change things"
        );
        gs.revoke(&g("env:A"));
        assert!(gs.is_empty());
        gs.add(g("net:https://example.com"));
        assert!(gs.can_change_anything());
    }

    #[test]
    fn grants_serde_as_strings() {
        let gs: Grants = [g("env:B"), g("fs:/x:/y:rw"), g("env:A")]
            .into_iter()
            .collect();
        let json = serde_json::to_string(&gs).unwrap();
        assert_eq!(json, r#"["fs:/x:/y:rw","env:A","env:B"]"#);
        let back: Grants = serde_json::from_str(&json).unwrap();
        assert_eq!(back, gs);
        let bad = serde_json::from_str::<Grants>(r#"["fs:/x:rel"]"#).unwrap_err();
        assert!(bad.to_string().contains("must be absolute"), "{bad}");
    }
}
