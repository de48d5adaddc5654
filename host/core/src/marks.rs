//! What a person says of a grant beyond what it lets a plugin reach: whether what is read
//! through it is public, whether a network origin is trusted, whether a read-write directory
//! is shared with others. Marks never widen a grant; they only tell the session labels (see
//! [`crate::labels`]) how to label what passes through it.
//!
//! Written as suffixes after the grant (`fs:/srv/www:/www:ro:public`, `env:REGION:public`,
//! `net:https://docs.rs:trusted`, `fs:/sync:/sync:rw:shared`), in any order, each at most
//! once.

use std::fmt;

/// The marks of one grant. The default (no mark) is the cautious reading: what a directory
/// or variable gives is private, what a network origin gives is untrusted, and a read-write
/// directory is not a way out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Marks {
    /// `:public` (directories and variables): what is read through the grant is not private.
    pub public: bool,
    /// `:trusted` (network origins): what the origin sends is not untrusted content.
    pub trusted: bool,
    /// `:shared` (read-write directories): what is written there leaves the user's hands (a
    /// synced or shared folder), so the tool can send data out.
    pub shared: bool,
}

/// The kinds of grant a mark can be put on, for messages and checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marked {
    ReadOnlyDir,
    ReadWriteDir,
    Env,
    Config,
    Network,
}

impl Marks {
    /// Takes the marks off the end of `text`: the grant without them, and the marks; an error
    /// (the reason) for a mark given twice.
    pub(crate) fn strip(text: &str) -> Result<(&str, Marks), String> {
        let mut marks = Marks::default();
        let mut rest = text;
        loop {
            let (flag, word): (&mut bool, &str) = if rest.ends_with(":public") {
                (&mut marks.public, "public")
            } else if rest.ends_with(":trusted") {
                (&mut marks.trusted, "trusted")
            } else if rest.ends_with(":shared") {
                (&mut marks.shared, "shared")
            } else {
                return Ok((rest, marks));
            };
            let before = &rest[..rest.len() - word.len() - 1];
            // `env:public` names a variable: a mark follows a whole grant, never its kind.
            if !before.contains(':') {
                return Ok((rest, marks));
            }
            if *flag {
                return Err(format!("the mark `:{word}` is given twice"));
            }
            *flag = true;
            rest = before;
        }
    }

    /// Why these marks cannot go on a grant of kind `on`, if they cannot.
    pub(crate) fn misplaced(self, on: Marked) -> Option<String> {
        let kind = match on {
            Marked::ReadOnlyDir => "a read-only directory",
            Marked::ReadWriteDir => "a read-write directory",
            Marked::Env => "an environment variable",
            Marked::Config => "a configuration value",
            Marked::Network => "a network grant",
        };
        if self.public && on == Marked::Network {
            return Some(format!(
                "`:public` marks a directory or variable whose contents are not private, not {kind}; \
                 mark an origin whose content you trust `:trusted`"
            ));
        }
        if self.trusted && on != Marked::Network {
            return Some(format!(
                "`:trusted` marks a network origin whose content you trust, not {kind}"
            ));
        }
        if self.shared && on != Marked::ReadWriteDir {
            return Some(format!(
                "`:shared` marks a read-write directory whose contents leave your hands (a synced \
                 or shared folder), not {kind}"
            ));
        }
        None
    }

    /// Whether no mark is set.
    pub fn is_empty(self) -> bool {
        self == Marks::default()
    }
}

impl fmt::Display for Marks {
    /// The suffixes, in a fixed order (`:public:shared`, `:trusted`), or nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.public {
            f.write_str(":public")?;
        }
        if self.shared {
            f.write_str(":shared")?;
        }
        if self.trusted {
            f.write_str(":trusted")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_come_off_the_end_in_any_order() {
        let (rest, m) = Marks::strip("fs:/a:/b:rw:shared:public").unwrap();
        assert_eq!(rest, "fs:/a:/b:rw");
        assert!(m.public && m.shared && !m.trusted);
        let (rest, m) = Marks::strip("net:https://x:8443:trusted").unwrap();
        assert_eq!(rest, "net:https://x:8443");
        assert!(m.trusted);
        // A guest path named like a mark is a path, not a mark.
        let (rest, m) = Marks::strip("fs:/a:/public").unwrap();
        assert_eq!(rest, "fs:/a:/public");
        assert!(m.is_empty());
        assert!(
            Marks::strip("env:A:public:public")
                .unwrap_err()
                .contains("twice")
        );
        // A variable named like a mark is a name.
        assert_eq!(
            Marks::strip("env:public").unwrap(),
            ("env:public", Marks::default())
        );
        let (rest, m) = Marks::strip("env:shared:public").unwrap();
        assert_eq!((rest, m.public), ("env:shared", true));
    }

    #[test]
    fn each_mark_goes_only_where_it_means_something() {
        let public = Marks {
            public: true,
            ..Marks::default()
        };
        let trusted = Marks {
            trusted: true,
            ..Marks::default()
        };
        let shared = Marks {
            shared: true,
            ..Marks::default()
        };
        assert_eq!(public.misplaced(Marked::ReadOnlyDir), None);
        assert_eq!(public.misplaced(Marked::Env), None);
        assert!(public.misplaced(Marked::Network).is_some());
        assert_eq!(trusted.misplaced(Marked::Network), None);
        assert!(trusted.misplaced(Marked::ReadWriteDir).is_some());
        assert_eq!(shared.misplaced(Marked::ReadWriteDir), None);
        assert!(
            shared
                .misplaced(Marked::ReadOnlyDir)
                .unwrap()
                .contains("read-only directory")
        );
        assert_eq!(
            format!(
                "{}",
                Marks {
                    public: true,
                    shared: true,
                    trusted: false
                }
            ),
            ":public:shared"
        );
    }
}
