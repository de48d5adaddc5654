//! Every fixed cap on what one call (or the process) may hold, in one place.
//!
//! The user-set limits (memory, time, output, log, arguments) are in `cordon_core::Limits`;
//! these are the bounds a user cannot change, each on host memory, descriptors or threads a
//! guest could otherwise take beyond its memory limit. A cap that is hit fails the guest's
//! request (or traps, for handles) rather than degrading the host.

// The instance.

/// Call stack a guest may use. Deep recursion traps here (reported as running out of call
/// stack) instead of taking the host's own stack.
pub(crate) const MAX_WASM_STACK: usize = 1 << 20;

/// Largest linear memory any limit may allow (the 32-bit address space).
pub(crate) const MAX_MEMORY: u64 = 4 << 30;

/// Elements a table may grow to. Tables hold function references; a million is far beyond
/// any real plugin.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Handles (of files, streams, sockets, HTTP requests, pollables …) a call's guest may hold at
/// once; one more traps. Each stands for host memory outside the guest's memory limit, and
/// wasmtime's default of 100,000 let a guest hold gigabytes. Resource types a guest can hold
/// many of, or large ones of, have tighter caps below.
pub(crate) const MAX_HANDLES_PER_CALL: usize = 4096;

/// Content pieces one result may have. Pieces are counted apart from the output limit's bytes:
/// four million empty pieces are no bytes of text, but over 100 MB of host memory and JSON.
pub(crate) const MAX_CONTENT_PIECES: usize = 1024;

/// Bytes a call's returned pieces may have together, whatever the output limit: they are held
/// in the plugin's memory and then the host's (JSON parsed, several times their size). A larger
/// result is written through `cordon:tool/result-stream`, which the host keeps in a file.
pub(crate) const MAX_RETURNED_BYTES: u64 = 16 << 20;

// wasi:filesystem.

/// Files one call may hold open at once (its preopens not counted). With the default pool of
/// 64 concurrent calls that is 16,384 at most, within a typical 20k–1M process limit.
pub(crate) const MAX_OPEN_FILES_PER_CALL: usize = 256;

/// File streams (read, write and append together) one call may hold at once: one for each
/// file it may hold open.
pub(crate) const MAX_FILE_STREAMS_PER_CALL: usize = MAX_OPEN_FILES_PER_CALL;

/// Host memory the listings a call holds may take, counted per entry as its name plus the
/// entry's own size (~100 bytes for a typical name). A listing is collected whole when the
/// directory is opened for listing and kept until the guest drops it, so without a bound a
/// plugin listing one large directory over and over holds gigabytes.
pub(crate) const MAX_LISTED_BYTES_PER_CALL: usize = 64 << 20;

/// Listings with more entries do not answer lookups (the set is a copy of the names).
pub(crate) const MAX_FRESH_LISTING_ENTRIES: usize = 4096;

// wasi:sockets.

/// TCP sockets one call may hold at once. With the default pool of 64 concurrent calls that
/// is 2,048 at most, beside the open-files cap's 16,384.
pub(crate) const MAX_TCP_SOCKETS_PER_CALL: usize = 32;

// wasi:http.

/// Connections one call may have open at once. Each is a socket of the host process that
/// would otherwise stay open as long as the plugin keeps its request or response (up to its
/// time limit), so a plugin with a network grant could exhaust the host's descriptors.
pub(crate) const MAX_HTTP_CONNECTIONS_PER_CALL: usize = 32;

/// Largest write an outgoing HTTP body takes at once.
pub(crate) const HTTP_OUTGOING_BODY_CHUNK: usize = 256 << 10;

/// Outgoing requests and responses (together) one call may hold at once.
pub(crate) const MAX_HTTP_MESSAGES_PER_CALL: usize = 64;

/// Header maps one call may hold at once, besides those of the messages themselves.
pub(crate) const MAX_HTTP_FIELDS_PER_CALL: usize = 256;

/// Bytes of all names and values in one header map (wasmtime-wasi-http's default is 128 KiB).
pub(crate) const MAX_HTTP_FIELDS_BYTES: usize = 64 << 10;

/// Longest method or scheme name.
pub(crate) const MAX_HTTP_TOKEN: usize = 64;

/// Longest authority (`user@host:port`).
pub(crate) const MAX_HTTP_AUTHORITY: usize = 1024;

/// Longest path with query.
pub(crate) const MAX_HTTP_PATH_WITH_QUERY: usize = 64 << 10;

// cordon:tool/bulk-read.

/// Files read whole but not yet taken, at most, before the workers wait. (Files a sifting
/// reader passed over, and files left for the take to read, hold only their paths, which the
/// queue's own bounds already count: the workers may run ahead over any number of them.)
pub(crate) const BULK_READ_AHEAD_FILES: usize = 64;

/// Bytes read but not yet taken, at most, before the workers wait; also the most one `take`
/// hands over, unless a single file is larger.
pub(crate) const BULK_READ_AHEAD_BYTES: u64 = 8 << 20;

/// Paths queued and not yet taken by one call, over all its readers.
pub(crate) const MAX_BULK_READ_QUEUED_PATHS: u64 = 4096;

/// Bytes of the paths queued and not yet taken by one call.
pub(crate) const MAX_BULK_READ_QUEUED_PATH_BYTES: u64 = 1 << 20;

/// Longest path `add` takes (Linux's PATH_MAX; no file has a longer one).
pub(crate) const MAX_BULK_READ_PATH: usize = 4096;

/// Readers one call may hold at once.
pub(crate) const MAX_BULK_READERS_PER_CALL: usize = 16;

/// Worker threads of one reader, at most.
pub(crate) const MAX_BULK_READ_WORKERS_PER_READER: usize = 3;

/// Worker threads in the whole process, at most; readers beyond it read inline.
pub(crate) const MAX_BULK_READ_WORKERS: usize = 64;

/// Needles one sifting reader takes, at most.
pub(crate) const MAX_NEEDLES: usize = 1024;

/// Longest needle.
pub(crate) const MAX_NEEDLE_BYTES: usize = 1024;

/// Bytes of all needles of one reader.
pub(crate) const MAX_ALL_NEEDLE_BYTES: usize = 64 << 10;

/// Host memory one reader's needle automaton may take (a contiguous NFA of 64 KiB of needles
/// takes a few MiB at most; a DFA could take 64 MiB, so none is built).
pub(crate) const MAX_SIEVE_MEMORY: usize = 16 << 20;

// The call's report.

/// Longest line one refusal takes in a call's report (the number of lines is capped by
/// `cordon_core::MAX_REFUSALS_RECORDED`). A line quotes what the guest asked for, and a guest
/// can ask to open a path of megabytes that is refused before the system sees it.
pub(crate) const MAX_REFUSAL_LINE_BYTES: usize = 1024;
