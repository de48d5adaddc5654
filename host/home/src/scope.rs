//! Which registry repositories a trusted key may sign plugins for (`cordon trust add --for`).
//!
//! A pattern is `REGISTRY/PATH`, matched against the repository a signature is checked for
//! (`registry/repository`, as in a signature payload, without tag or digest). The registry is
//! written out in full (compared without regard to case, as host names are); the path is a
//! glob in which `*` matches any characters within one path segment and a `**` segment any
//! number of segments: `ghcr.io/alice/*` covers `ghcr.io/alice/greeter`, not
//! `ghcr.io/alice/tools/greeter`, which `ghcr.io/alice/**` covers too. A leading `oci://` is
//! accepted and dropped.

use std::fmt;

use globset::{Glob, GlobBuilder, GlobMatcher};

use crate::error::HomeError;

/// One `--for` pattern of a trusted key.
#[derive(Debug, Clone)]
pub struct RepositoryPattern {
    text: String,
    registry: String,
    path: GlobMatcher,
}

impl PartialEq for RepositoryPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for RepositoryPattern {}

impl fmt::Display for RepositoryPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The characters that make a glob of a pattern's text.
const GLOB_CHARACTERS: &[char] = &['*', '?', '[', ']', '{', '}', '\\', '!'];

impl RepositoryPattern {
    /// Parses a pattern as the user wrote it, refusing what could be read more widely than
    /// meant: a registry given by a wildcard, a tag or digest, an empty path.
    pub fn parse(given: &str) -> Result<RepositoryPattern, HomeError> {
        let bad = |reason: &str| HomeError::BadRepositoryPattern {
            pattern: given.to_string(),
            reason: reason.to_string(),
        };
        let text = given.trim();
        let text = text.strip_prefix("oci://").unwrap_or(text);
        let Some((registry, path)) = text.split_once('/') else {
            return Err(bad(
                "name the registry, then the repository path: ghcr.io/alice/*",
            ));
        };
        if registry.is_empty() || registry.contains(GLOB_CHARACTERS) {
            return Err(bad(
                "the registry must be named in full, without wildcards (ghcr.io, \
                 registry.example.com:5000)",
            ));
        }
        if path.is_empty() || path.split('/').any(str::is_empty) {
            return Err(bad(
                "the repository path has an empty segment; write it as ghcr.io/alice/*",
            ));
        }
        if path.contains([':', '@']) {
            return Err(bad(
                "a pattern names repositories, not tags or digests: drop the `:TAG` or `@DIGEST`",
            ));
        }
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains spaces or control characters"));
        }
        let glob: Glob = GlobBuilder::new(path)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| bad(&format!("the repository path is not a valid glob ({e})")))?;
        Ok(RepositoryPattern {
            text: format!("{}/{path}", registry.to_ascii_lowercase()),
            registry: registry.to_ascii_lowercase(),
            path: glob.compile_matcher(),
        })
    }

    /// Whether `repository` (`registry/path`) is one this pattern names.
    pub fn matches(&self, repository: &str) -> bool {
        let Some((registry, path)) = repository.split_once('/') else {
            return false;
        };
        registry.eq_ignore_ascii_case(&self.registry) && self.path.is_match(path)
    }

    /// The pattern as it is stored and shown.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> RepositoryPattern {
        RepositoryPattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_star_stays_within_one_segment_and_a_double_star_crosses_them() {
        let one = pattern("ghcr.io/alice/*");
        assert!(one.matches("ghcr.io/alice/greeter"));
        assert!(!one.matches("ghcr.io/alice/tools/greeter"));
        assert!(!one.matches("ghcr.io/alice"));
        assert!(!one.matches("ghcr.io/alicex/greeter"));
        assert!(!one.matches("ghcr.io/bob/greeter"));
        assert!(!one.matches("evil.example/ghcr.io/alice/greeter"));
        let all = pattern("oci://ghcr.io/alice/**");
        assert_eq!(all.as_str(), "ghcr.io/alice/**");
        assert!(all.matches("ghcr.io/alice/greeter"));
        assert!(all.matches("ghcr.io/alice/tools/greeter"));
        assert!(!all.matches("ghcr.io/alicex/greeter"));
        let prefix = pattern("127.0.0.1:5000/plugins/alice-*");
        assert!(prefix.matches("127.0.0.1:5000/plugins/alice-greeter"));
        assert!(!prefix.matches("127.0.0.1:5001/plugins/alice-greeter"));
        assert!(!prefix.matches("127.0.0.1:5000/plugins/bob-greeter"));
    }

    #[test]
    fn a_pattern_without_wildcards_names_one_repository_and_the_host_ignores_case() {
        let exact = pattern("GHCR.io/alice/greeter");
        assert_eq!(exact.as_str(), "ghcr.io/alice/greeter");
        assert!(exact.matches("ghcr.io/alice/greeter"));
        assert!(exact.matches("Ghcr.IO/alice/greeter"));
        assert!(!exact.matches("ghcr.io/alice/greeter2"));
        assert!(!exact.matches("ghcr.io/alice/Greeter"));
    }

    #[test]
    fn patterns_that_could_mean_more_than_meant_are_refused() {
        for (text, why) in [
            ("ghcr.io", "name the registry, then"),
            ("*/alice/*", "named in full"),
            ("ghcr.*/alice/*", "named in full"),
            ("/alice/*", "named in full"),
            ("ghcr.io/", "empty segment"),
            ("ghcr.io//x", "empty segment"),
            ("ghcr.io/alice/greeter:1.0", "not tags or digests"),
            ("ghcr.io/alice/greeter@sha256:00", "not tags or digests"),
            ("ghcr.io/alice/[x", "not a valid glob"),
            ("ghcr.io/alice/a b", "spaces"),
        ] {
            let e = RepositoryPattern::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            assert!(e.contains(text), "{text}: {e}");
        }
    }
}
