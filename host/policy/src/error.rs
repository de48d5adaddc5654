//! Why a policy does not load.

/// A policy that cannot be used; the host keeps the last good one (or refuses to start).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A `[policy]` rule is wrong.
    #[error("policy rule `{id}` ({at}): {message}")]
    Rule {
        /// The rule's id.
        id: String,
        /// Where it is written, `file:line`.
        at: String,
        /// What is wrong and what to write.
        message: String,
    },
    /// A rule's example does not give what it says.
    #[error("policy rule `{id}` ({at}): example {example} {message}")]
    Example {
        /// The rule's id.
        id: String,
        /// Where it is written.
        at: String,
        /// Which example: `match[0]`, `not_match[2]`.
        example: String,
        /// What happened instead.
        message: String,
    },
    /// A Cedar policy file cannot be read.
    #[error("cannot read the policy file {path}: {cause}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        cause: std::io::Error,
    },
    /// Cedar text does not parse.
    #[error("the policy file {path} is not valid Cedar: {message}")]
    Parse {
        /// The file.
        path: String,
        /// Cedar's message.
        message: String,
    },
    /// A policy does not type-check against the schema of the installed tools.
    #[error("policy rule `{id}` ({at}) does not fit the installed tools: {message}")]
    Invalid {
        /// The policy's id.
        id: String,
        /// Where it is written.
        at: String,
        /// Cedar's validator's message.
        message: String,
    },
    /// Something else in `[policy]` is wrong (the time zone, a counter).
    #[error("[policy] {0}")]
    Config(String),
}
