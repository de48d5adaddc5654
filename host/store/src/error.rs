//! What can go wrong with the store, each saying what was wrong and what to do.

/// Errors of the session store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no backend Cordon knows.
    #[error(
        "`{url}` is not a session store Cordon can use: give `sqlite:PATH` or `postgres://USER@HOST/DB`"
    )]
    BadUrl {
        /// The URL as given (its password hidden).
        url: String,
    },
    /// The store could not be reached or opened.
    #[error(
        "cannot open the session store {url}: {source}; check the URL and that the server is running and reachable"
    )]
    Open {
        /// The store (its password hidden).
        url: String,
        /// Why.
        source: sqlx::Error,
    },
    /// The SQLite file's directory could not be made or the file not created.
    #[error("cannot create the session store at {path}: {source}")]
    Create {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store's tables could not be brought to this version.
    #[error(
        "cannot prepare the session store {url} (its tables may come from a newer Cordon): {source}"
    )]
    Migrate {
        /// The store (its password hidden).
        url: String,
        /// Why.
        source: sqlx::migrate::MigrateError,
    },
    /// A query failed (the server went away, the disk is full, …).
    #[error("the session store {url} failed: {source}")]
    Database {
        /// The store (its password hidden).
        url: String,
        /// Why.
        source: sqlx::Error,
    },
    /// No session has that id.
    #[error("there is no session `{id}`; `cordon sessions list` shows the sessions")]
    UnknownSession {
        /// The id asked for.
        id: String,
    },
    /// A session with that id exists already.
    #[error("a session `{id}` exists already; choose another name or continue it")]
    SessionExists {
        /// The id.
        id: String,
    },
    /// A session name that cannot be used.
    #[error(
        "`{id}` cannot name a session: {reason} (use 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit)"
    )]
    BadSessionId {
        /// The name.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No question waits under this id.
    #[error(
        "no tool call waits for an answer under `{id}`; list the waiting ones with `cordon approve --list`"
    )]
    UnknownApproval {
        /// The id given.
        id: String,
    },
    /// The question was answered already (or its asker stopped waiting).
    #[error("the call `{id}` was already answered ({earlier})")]
    ApprovalAnswered {
        /// The question.
        id: String,
        /// The first answer and who gave it.
        earlier: String,
    },
    /// Nobody answered in time; the call was denied.
    #[error("the call `{id}` is no longer waiting: nobody answered in time, so it was denied")]
    ApprovalExpired {
        /// The question.
        id: String,
    },
    /// Another host drives the session now.
    #[error(
        "session `{id}` is being driven by {holder} for {seconds} s more; wait for it, or for its lease to expire if that host is gone"
    )]
    Busy {
        /// The session.
        id: String,
        /// Who holds the lease.
        holder: String,
        /// Seconds until the lease expires unless renewed.
        seconds: i64,
    },
    /// This host's lease on the session was taken by another (it expired), or the session
    /// changed under it.
    #[error("session `{id}` is now driven by {holder}; this host stopped driving it")]
    LeaseLost {
        /// The session.
        id: String,
        /// Who drives it now.
        holder: String,
    },
    /// The session is in the middle of a turn and cannot be changed that way now.
    #[error("session `{id}` is {state}; {what}")]
    NotIdle {
        /// The session.
        id: String,
        /// Where its turn stands.
        state: String,
        /// What to do.
        what: String,
    },
    /// What the store holds for a session cannot be read back.
    #[error("session `{id}` cannot be read: {reason}")]
    Corrupt {
        /// The session.
        id: String,
        /// Why.
        reason: String,
    },
    /// A session keeps as many bytes of results apart as it may.
    #[error(
        "session `{id}` already keeps {used} bytes of results apart, and keeps at most {limit}; \
         fork it or start another session to keep more"
    )]
    KeptFull {
        /// The session.
        id: String,
        /// What it keeps.
        used: u64,
        /// The most it may keep.
        limit: u64,
    },
    /// A result to keep could not be read from where the host held it (its spool file).
    #[error("the result of call `{id}` could not be read to keep it: {source}")]
    Unkept {
        /// The call.
        id: String,
        /// Why.
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the error means the store itself is unreachable or failing (rather than a
    /// request that does not fit), so the work can be tried again once it is back.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Database { .. } | StoreError::Open { .. })
    }
}
