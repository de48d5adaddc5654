//! Who may use the host: bearer tokens read from a token file, each with a name that the audit
//! log records as the one who asked for a turn or answered an approval, and scopes that say
//! what it may do.
//!
//! What a request may do is decided here, in this order:
//! 1. a token that is not in the file gets `401`, saying nothing else, unless the identity
//!    provider's checks take it ([`crate::oidc`]: its user, `oidc:` and a claim, and its
//!    scopes come from its claims, and are decided on below exactly as a named token's; a
//!    JWT they refuse gets `401` saying why, so its holder knows to get another);
//! 2. `admin` may do everything;
//! 3. a session belongs to the token that created it: only it, or a token with
//!    `sessions:all`, sees it (lists it, reads, follows, continues, forks, cancels, deletes
//!    it); for any other it does not exist (`404`, never `403`, so that a session's id says
//!    nothing about whose it is); every session request needs `sessions`;
//! 4. a question about a call is answered only by a token that may see its session, with
//!    `approve` when another token's turn caused the call and `approve:own` when its own did
//!    (named tokens lack `approve:own` unless given it, so the one who asks is not the one who
//!    approves); a question of an MCP client's call belongs to the token the client came
//!    with over `/mcp` as if it were its session (its own turn caused the call), and one
//!    from `cordon mcp` on stdio, which came with no token, to nobody (`sessions:all` sees
//!    it);
//! 5. the audit log shows a token the records of the turns it asked for with `audit`, and
//!    every record with `audit:all`;
//! 6. `/metrics` needs `metrics`, which no named token has unless given it: its counts span
//!    every session and token;
//! 7. a scope a request lacks gets `403` naming the scope and the token.

use std::path::{Path, PathBuf};

use cordon_core::Requester;
use sha2::{Digest, Sha256};

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read or written.
    #[error("cannot use the token file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the file is not a token.
    #[error(
        "the token file {path}, line {line}: {reason} (each line is `TOKEN`, `NAME TOKEN` or `NAME TOKEN SCOPE,SCOPE…`; a token has at least 16 characters)"
    )]
    Bad {
        /// The file.
        path: PathBuf,
        /// The line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The file holds no token.
    #[error("the token file {path} holds no token")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// What a token may do: a set of scopes (see the module docs for what each allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    /// Nothing.
    pub const NONE: Scopes = Scopes(0);
    /// Create sessions and use one's own.
    pub const SESSIONS: Scopes = Scopes(1);
    /// See and use every session.
    pub const SESSIONS_ALL: Scopes = Scopes(2);
    /// Answer questions about calls other tokens' turns caused, in sessions one may see.
    pub const APPROVE: Scopes = Scopes(4);
    /// Answer questions about calls one's own turns caused.
    pub const APPROVE_OWN: Scopes = Scopes(8);
    /// Read the audit records of one's own turns.
    pub const AUDIT: Scopes = Scopes(16);
    /// Read every audit record.
    pub const AUDIT_ALL: Scopes = Scopes(32);
    /// Everything.
    pub const ADMIN: Scopes = Scopes(64);
    /// Read `/metrics`: counts by plugin and tool over every session, so not given by default
    /// (a scraper's token needs nothing else).
    pub const METRICS: Scopes = Scopes(128);
    /// Every scope: what the single unnamed token (the one `cordon serve` generates) has, so
    /// one person's use is as it always was.
    pub const ALL: Scopes = Scopes(255);
    /// A named token's when its line names none: its own sessions and audit records, and
    /// answers to questions other tokens' turns caused.
    pub const NAMED: Scopes = Scopes(1 | 4 | 16);

    const NAMES: [(&'static str, Scopes); 8] = [
        ("sessions", Scopes::SESSIONS),
        ("sessions:all", Scopes::SESSIONS_ALL),
        ("approve", Scopes::APPROVE),
        ("approve:own", Scopes::APPROVE_OWN),
        ("audit", Scopes::AUDIT),
        ("audit:all", Scopes::AUDIT_ALL),
        ("admin", Scopes::ADMIN),
        ("metrics", Scopes::METRICS),
    ];

    /// `sessions,approve:own`: scope names separated by commas. `sessions:all` includes
    /// `sessions` and `audit:all` includes `audit`.
    pub fn parse(text: &str) -> Result<Scopes, String> {
        let mut scopes = Scopes(0);
        for word in text.split(',').map(str::trim) {
            let Some((_, scope)) = Self::NAMES.iter().find(|(name, _)| *name == word) else {
                let known: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                let near = known
                    .iter()
                    .find(|n| strsim::levenshtein(n, word) <= 2)
                    .map(|n| format!("; did you mean `{n}`?"))
                    .unwrap_or_default();
                return Err(format!(
                    "`{word}` is not a scope{near} (scopes: {})",
                    known.join(", ")
                ));
            };
            scopes.0 |= scope.0;
        }
        if scopes.0 & Scopes::SESSIONS_ALL.0 != 0 {
            scopes.0 |= Scopes::SESSIONS.0;
        }
        if scopes.0 & Scopes::AUDIT_ALL.0 != 0 {
            scopes.0 |= Scopes::AUDIT.0;
        }
        if scopes.0 & Scopes::ADMIN.0 != 0 {
            scopes = Scopes::ALL;
        }
        Ok(scopes)
    }

    /// The scope called `name` (one name, with what it includes), if there is one.
    pub fn named(name: &str) -> Option<Scopes> {
        if name.contains(',') {
            return None;
        }
        Scopes::parse(name).ok()
    }

    /// These and `other`.
    pub fn with(self, other: Scopes) -> Scopes {
        Scopes(self.0 | other.0)
    }

    /// Whether these include `scope`.
    pub fn has(self, scope: Scopes) -> bool {
        self.0 & scope.0 == scope.0
    }

    /// The names of the scopes held, in the order of the module docs.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(_, s)| self.has(*s))
            .map(|(n, _)| *n)
            .collect()
    }

    /// The name of `scope` (one of the constants above).
    fn name_of(scope: Scopes) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, s)| *s == scope)
            .map_or("admin", |(n, _)| *n)
    }
}

/// Who made a request: its token's name and scopes (put in the request's extensions by the
/// API's token check).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) name: String,
    pub(crate) scopes: Scopes,
}

impl Caller {
    /// The caller as the requester of a turn.
    pub(crate) fn requester(&self) -> Requester {
        Requester::token(self.name.clone())
    }

    /// `403` unless the token holds `scope`, naming what it was for.
    pub(crate) fn require(&self, scope: Scopes, to: &str) -> Result<(), crate::ApiError> {
        if self.scopes.has(scope) {
            return Ok(());
        }
        // Rule 7.
        Err(crate::ApiError::forbidden(format!(
            "token `{}` may not {to}: that needs the scope `{}`, which it was not given",
            self.name,
            Scopes::name_of(scope)
        )))
    }

    /// Whether the caller may see a session created by `created_by` (rule 3).
    pub(crate) fn sees(&self, created_by: Option<&str>) -> bool {
        self.scopes.has(Scopes::SESSIONS_ALL)
            || (self.scopes.has(Scopes::SESSIONS) && created_by == Some(self.name.as_str()))
    }

    /// Whether the caller may answer a question about a call that a turn asked for by
    /// `asked_by` caused, in a session it may see (rule 4).
    pub(crate) fn may_answer(&self, asked_by: Option<&str>) -> bool {
        self.scopes.has(self.answer_scope(asked_by).0)
    }

    /// `403` unless the caller may answer such a question, naming the scope it needs.
    pub(crate) fn require_answer(&self, asked_by: Option<&str>) -> Result<(), crate::ApiError> {
        let (scope, whose) = self.answer_scope(asked_by);
        self.require(
            scope,
            &format!("answer a question about a call {whose} caused"),
        )
    }

    /// The scope answering needs, and whose turn caused the call.
    fn answer_scope(&self, asked_by: Option<&str>) -> (Scopes, &'static str) {
        if asked_by == Some(self.name.as_str()) {
            (Scopes::APPROVE_OWN, "its own turn")
        } else {
            (Scopes::APPROVE, "another token's turn")
        }
    }
}

/// One accepted token.
#[derive(Clone)]
struct Token {
    name: String,
    scopes: Scopes,
    digest: [u8; 32],
}

/// The accepted tokens.
#[derive(Clone)]
pub struct Tokens {
    tokens: Vec<Token>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|t| t.name.as_str()).collect();
        f.debug_struct("Tokens").field("names", &names).finish()
    }
}

/// The shortest token accepted.
const MIN_TOKEN_LEN: usize = 16;

impl Tokens {
    /// Reads the token file: one token per line, `TOKEN` (named `default`, every scope),
    /// `NAME TOKEN` (the scopes of [`Scopes::NAMED`]) or `NAME TOKEN SCOPE,SCOPE…`; blank
    /// lines and lines starting with `#` are skipped. Names are unique.
    pub fn parse(text: &str, path: &Path) -> Result<Tokens, TokenError> {
        let mut tokens = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| TokenError::Bad {
                path: path.to_path_buf(),
                line: i + 1,
                reason: reason.to_string(),
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let (name, secret, scopes) = match words.as_slice() {
                [secret] => ("default", *secret, Scopes::ALL),
                [name, secret] => (*name, *secret, Scopes::NAMED),
                [name, secret, scopes] => {
                    (*name, *secret, Scopes::parse(scopes).map_err(|e| bad(&e))?)
                }
                _ => return Err(bad("it has more than three words")),
            };
            if secret.len() < MIN_TOKEN_LEN {
                return Err(bad("the token is too short"));
            }
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(bad(
                    "a name may hold letters, digits, `-`, `_` and `.` only",
                ));
            }
            if tokens.iter().any(|t: &Token| t.name == name) {
                return Err(bad(&format!(
                    "the name `{name}` is taken by an earlier line; each token needs its own"
                )));
            }
            tokens.push(Token {
                name: name.to_string(),
                scopes,
                digest: Sha256::digest(secret.as_bytes()).into(),
            });
        }
        if tokens.is_empty() {
            return Err(TokenError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Tokens { tokens })
    }

    /// Reads `path`, or, when it does not exist and `create` is set, writes a new random
    /// token there (mode 0600) first. Returns the tokens and whether the file was created.
    pub fn load_or_create(path: &Path, create: bool) -> Result<(Tokens, bool), TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                warn_if_readable_by_others(path);
                Ok((Tokens::parse(&text, path)?, false))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let secret = hex::encode(rand::random::<[u8; 32]>());
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                write_private(path, &format!("{secret}\n")).map_err(io)?;
                Ok((Tokens::parse(&secret, path)?, true))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// The name of the token `presented` is, if it is one. Compares digests, so the time
    /// taken says nothing about how much of a wrong token was right.
    pub fn check(&self, presented: &str) -> Option<&str> {
        self.find(presented).map(|t| t.name.as_str())
    }

    /// The caller `presented` is, if it is a token.
    pub(crate) fn caller(&self, presented: &str) -> Option<Caller> {
        self.find(presented).map(|t| Caller {
            name: t.name.clone(),
            scopes: t.scopes,
        })
    }

    fn find(&self, presented: &str) -> Option<&Token> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.tokens.iter().find(|t| t.digest == digest)
    }

    /// Each token's name and scopes, for the log at start.
    pub fn describe(&self) -> Vec<(String, Vec<&'static str>)> {
        self.tokens
            .iter()
            .map(|t| (t.name.clone(), t.scopes.names()))
            .collect()
    }
}

#[cfg(unix)]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            "the token file {} can be read by other users; `chmod 600` it",
            path.display()
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_named_and_checked() {
        let t = Tokens::parse(
            "# ops team\nops 0123456789abcdef0123\n\nfedcba9876543210fedc\n",
            Path::new("t"),
        )
        .unwrap();
        assert_eq!(t.check("0123456789abcdef0123"), Some("ops"));
        assert_eq!(t.check("fedcba9876543210fedc"), Some("default"));
        assert_eq!(t.check("0123456789abcdef012"), None);
        assert_eq!(t.check(""), None);
    }

    #[test]
    fn scopes_come_from_the_third_word_and_default_by_kind_of_token() {
        let t = Tokens::parse(
            "alice aaaaaaaaaaaaaaaaaaaa\n\
             bob bbbbbbbbbbbbbbbbbbbb sessions:all,approve:own\n\
             ops oooooooooooooooooooo admin\n\
             cccccccccccccccccccc\n",
            Path::new("t"),
        )
        .unwrap();
        let scopes = |secret: &str| t.caller(secret).unwrap().scopes.names();
        assert_eq!(
            scopes("aaaaaaaaaaaaaaaaaaaa"),
            ["sessions", "approve", "audit"]
        );
        assert_eq!(
            scopes("bbbbbbbbbbbbbbbbbbbb"),
            ["sessions", "sessions:all", "approve:own"]
        );
        // Every scope, `metrics` included.
        assert_eq!(scopes("oooooooooooooooooooo").len(), 8);
        assert_eq!(scopes("cccccccccccccccccccc").len(), 8);
        let e = Tokens::parse("bob bbbbbbbbbbbbbbbbbbbb sesions", Path::new("t")).unwrap_err();
        assert!(
            e.to_string()
                .contains("`sesions` is not a scope; did you mean `sessions`?"),
            "{e}"
        );
        let e = Tokens::parse(
            "bob bbbbbbbbbbbbbbbbbbbb\nbob cccccccccccccccccccc",
            Path::new("t"),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("line 2") && e.to_string().contains("taken"),
            "{e}"
        );
    }

    #[test]
    fn callers_see_their_own_sessions_and_answer_others_questions() {
        let caller = |scopes: &str| Caller {
            name: "alice".into(),
            scopes: Scopes::parse(scopes).unwrap(),
        };
        let named = Caller {
            name: "alice".into(),
            scopes: Scopes::NAMED,
        };
        assert!(named.sees(Some("alice")));
        assert!(!named.sees(Some("bob")));
        assert!(!named.sees(None));
        assert!(caller("sessions:all").sees(Some("bob")));
        assert!(caller("sessions:all").sees(None));
        assert!(!caller("approve").sees(Some("alice")));
        assert!(named.may_answer(Some("bob")));
        assert!(!named.may_answer(Some("alice")));
        assert!(caller("approve:own").may_answer(Some("alice")));
        assert!(!caller("approve:own").may_answer(Some("bob")));
        let e = caller("audit")
            .require(Scopes::SESSIONS, "create sessions")
            .unwrap_err();
        assert!(e.to_string().contains("the scope `sessions`"), "{e}");
    }

    #[test]
    fn bad_files_say_which_line() {
        let e = Tokens::parse("a b c", Path::new("t")).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let e = Tokens::parse("\nshort", Path::new("t")).unwrap_err();
        assert!(
            e.to_string().contains("line 2") && e.to_string().contains("too short"),
            "{e}"
        );
        let e = Tokens::parse("# nothing\n", Path::new("t")).unwrap_err();
        assert!(e.to_string().contains("holds no token"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_new_token_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve-token");
        let (tokens, created) = Tokens::load_or_create(&path, true).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let secret = std::fs::read_to_string(&path).unwrap();
        assert_eq!(tokens.check(secret.trim()), Some("default"));
        let (again, created) = Tokens::load_or_create(&path, true).unwrap();
        assert!(!created);
        assert_eq!(again.check(secret.trim()), Some("default"));
        assert!(Tokens::load_or_create(&dir.path().join("missing"), false).is_err());
    }
}
