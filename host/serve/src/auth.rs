//! Who may use the host: bearer tokens read from a token file, each with a name that the audit
//! log records as the one who answered an approval.

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
        "the token file {path}, line {line}: {reason} (each line is `TOKEN` or `NAME TOKEN`; a token has at least 16 characters)"
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

/// Who made a request: the name of the token it carried (put in the request's extensions by
/// the API's token check).
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub(crate) String);

impl Caller {
    /// The caller as the requester of a turn.
    pub(crate) fn requester(&self) -> Requester {
        Requester::token(self.0.clone())
    }
}

/// One accepted token.
#[derive(Clone)]
struct Token {
    name: String,
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
    /// Reads the token file: one token per line, `TOKEN` (named `default`) or `NAME TOKEN`;
    /// blank lines and lines starting with `#` are skipped.
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
            let (name, secret) = match words.as_slice() {
                [secret] => ("default", *secret),
                [name, secret] => (*name, *secret),
                _ => return Err(bad("it has more than two words")),
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
            tokens.push(Token {
                name: name.to_string(),
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
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.tokens
            .iter()
            .find(|t| t.digest == digest)
            .map(|t| t.name.as_str())
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
