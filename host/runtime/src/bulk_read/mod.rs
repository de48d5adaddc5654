//! `cordon:tool/bulk-read`: whole files read on host threads while the plugin works.
//!
//! A component runs on one thread, so a plugin that reads thousands of files through
//! `wasi:filesystem` spends most of its time waiting for one system call after another (open,
//! stat, read, close per file). A reader takes the paths the plugin queues and reads them on
//! threads of its own, in order, at most [`BULK_READ_AHEAD_FILES`](crate::caps::BULK_READ_AHEAD_FILES) files or [`BULK_READ_AHEAD_BYTES`](crate::caps::BULK_READ_AHEAD_BYTES) of contents
//! ahead of what the plugin has taken (files held without contents, such as those a sifting
//! reader passed over, do not count), so the plugin's own work and the reading overlap.
//!
//! What a reader can reach is what the call's preopened directories reach, through the very
//! same directory handles: a guest path is matched to a preopen and opened below it with
//! cap-primitives' sandboxed `open` (the resolution wasmtime-wasi's own is derived from), which
//! refuses `..`, absolute symlinks and any link that leaves the directory. Only regular files
//! are read; FIFOs and devices are opened without blocking and refused.
//!
//! Everything a plugin could make the host hold outside its own memory limit is bounded:
//! - file contents: [`BULK_READ_AHEAD_BYTES`](crate::caps::BULK_READ_AHEAD_BYTES) read ahead, plus one file of at most that size per worker;
//!   a larger file (up to the reader's size limit, at most the call's memory limit) is read by
//!   the `take` that hands it over, alone, and a `take` hands over at most [`BULK_READ_AHEAD_BYTES`](crate::caps::BULK_READ_AHEAD_BYTES)
//!   otherwise;
//! - queued paths: [`MAX_BULK_READ_QUEUED_PATHS`](crate::caps::MAX_BULK_READ_QUEUED_PATHS) and [`MAX_BULK_READ_QUEUED_PATH_BYTES`](crate::caps::MAX_BULK_READ_QUEUED_PATH_BYTES) per call over all its
//!   readers, none longer than [`MAX_BULK_READ_PATH`](crate::caps::MAX_BULK_READ_PATH), and [`MAX_BULK_READERS_PER_CALL`](crate::caps::MAX_BULK_READERS_PER_CALL) readers per call;
//! - threads: one reader per call has workers (until they have all exited, not merely until it
//!   is dropped), at most [`MAX_BULK_READ_WORKERS_PER_READER`](crate::caps::MAX_BULK_READ_WORKERS_PER_READER) of them, and [`MAX_BULK_READ_WORKERS`](crate::caps::MAX_BULK_READ_WORKERS) in the process;
//!   other readers read on the calling thread when taken from. Each worker holds one file open
//!   at a time;
//! - needles of a sifting reader: [`MAX_NEEDLES`](crate::caps::MAX_NEEDLES), each at most [`MAX_NEEDLE_BYTES`](crate::caps::MAX_NEEDLE_BYTES), and
//!   [`MAX_ALL_NEEDLE_BYTES`](crate::caps::MAX_ALL_NEEDLE_BYTES) in all, passed as one flat list (so lifting the argument copies
//!   no more than the plugin's memory holds), searched for by a contiguous NFA of at most
//!   [`MAX_SIEVE_MEMORY`](crate::caps::MAX_SIEVE_MEMORY).
//!
//! A sifting reader (0.1.2) also searches each file it reads for the plugin's needles, on the
//! worker with native code, and keeps only the facts `take-sifted` hands over (size, first NUL)
//! of a file with none of them. A search tool then copies into its memory, and scans with its
//! slower WebAssembly code, only the files it can match in; which files those are is decided
//! by the plugin's needles and the files it could read anyway, so nothing new is reachable.
//!
//! This module knows nothing of the WIT bindings: it runs on any store data that is a
//! [`BulkReadView`], and has values of its own ([`File`], [`ReadError`], [`PassedOver`],
//! [`AddError`], mirroring the WIT types). The bindings name [`Reader`] as the `reader`
//! resource, and `crate::bulk_read_bindings` hands the calls of `host` to the guest as the WIT
//! functions, so the dependencies run bulk_read_bindings -> bindings -> bulk_read, never back.

use std::fs::File as HostFile;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use wasmtime::component::ResourceTable;

use crate::refusals::{Refusals, SharedRefusals};
use crate::wasi_overrides::filesystem_preopens::Preopen;

mod host;
mod paths;
mod queue;
mod sieve;

pub use queue::Reader;
pub(crate) use queue::Taken;
use sieve::Sieve;

/// Store data bulk-read can run on, as wasmtime-wasi's functions run on a `WasiView`: it lends
/// out what the calls touch. Only the sandbox's `HostState` implements it, so everything generic
/// over it is compiled once, for it.
pub(crate) trait BulkReadView: Send + 'static {
    /// Disjoint borrows (and copies) of what bulk-read touches.
    fn bulk_read(&mut self) -> BulkReadParts<'_>;
}

/// What [`BulkReadView::bulk_read`] lends out.
pub(crate) struct BulkReadParts<'a> {
    /// The call's resource table, where readers live.
    pub(crate) table: &'a mut ResourceTable,
    /// What readers of this call hold.
    pub(crate) budget: &'a mut CallBudget,
    /// The call's granted directories: a reader reads below these handles only.
    pub(crate) preopens: &'a [Preopen],
    /// The call's memory limit, the most a reader's size limit can be.
    pub(crate) memory_limit: u64,
    /// When the call's time runs out: a take waits no longer.
    pub(crate) deadline: Instant,
    /// What the call was refused, for its report; readers note paths they refuse through a
    /// handle of it, from their worker threads.
    pub(crate) refused: &'a mut Refusals,
}

/// Why one queued file was not read (the WIT `read-error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadError {
    NotGranted,
    NotFound,
    NotAFile,
    TooLarge(u64),
    Other(String),
}

/// One file read, or why not (the WIT `file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct File {
    pub(crate) path: String,
    pub(crate) contents: Result<Vec<u8>, ReadError>,
}

/// What `take-sifted` hands over for a file with none of the needles (the WIT `passed-over`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassedOver {
    pub(crate) size: u64,
    pub(crate) first_nul: Option<u64>,
}

/// Why `add` did not queue a path (the WIT `add-error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddError {
    QueueFull,
    PathTooLong,
}

/// What bulk-read has queued in one call, kept in the call's store.
#[derive(Default)]
pub(crate) struct CallBudget {
    readers: usize,
    paths: u64,
    path_bytes: u64,
    /// Whether a reader of this call has worker threads; cleared when the last of them exits.
    threaded: Arc<AtomicBool>,
}

/// A granted directory as the plugin sees it.
#[derive(Clone)]
struct Root {
    /// Guest path components, e.g. `["src"]` for `/src` (empty for `/`).
    guest: Vec<String>,
    dir: Arc<HostFile>,
}

/// What one reader reads with, shared with its workers.
struct Source {
    roots: Vec<Root>,
    max_size: u64,
    /// A sifting reader's needles.
    sieve: Option<Sieve>,
    /// Where paths refused as outside the grants are noted, for the call's report.
    refused: SharedRefusals,
}
