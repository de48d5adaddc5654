//! `cordon:tool/bulk-read`: whole files read on host threads while the plugin works.
//!
//! A component runs on one thread, so a plugin that reads thousands of files through
//! `wasi:filesystem` spends most of its time waiting for one system call after another (open,
//! stat, read, close per file). A reader takes the paths the plugin queues and reads them on
//! threads of its own, in order, at most [`BULK_READ_AHEAD_FILES`] files or [`BULK_READ_AHEAD_BYTES`] of contents
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
//! - file contents: [`BULK_READ_AHEAD_BYTES`] read ahead, plus one file of at most that size per worker;
//!   a larger file (up to the reader's size limit, at most the call's memory limit) is read by
//!   the `take` that hands it over, alone, and a `take` hands over at most [`BULK_READ_AHEAD_BYTES`]
//!   otherwise;
//! - queued paths: [`MAX_BULK_READ_QUEUED_PATHS`] and [`MAX_BULK_READ_QUEUED_PATH_BYTES`] per call over all its
//!   readers, none longer than [`MAX_BULK_READ_PATH`], and [`MAX_BULK_READERS_PER_CALL`] readers per call;
//! - threads: one reader per call has workers (until they have all exited, not merely until it
//!   is dropped), at most [`MAX_BULK_READ_WORKERS_PER_READER`] of them, and [`MAX_BULK_READ_WORKERS`] in the process;
//!   other readers read on the calling thread when taken from. Each worker holds one file open
//!   at a time;
//! - needles of a sifting reader: [`MAX_NEEDLES`], each at most [`MAX_NEEDLE_BYTES`], and
//!   [`MAX_ALL_NEEDLE_BYTES`] in all, passed as one flat list (so lifting the argument copies
//!   no more than the plugin's memory holds), searched for by a contiguous NFA of at most
//!   [`MAX_SIEVE_MEMORY`].
//!
//! A sifting reader (0.1.2) also searches each file it reads for the plugin's needles, on the
//! worker with native code, and keeps only the facts `take-sifted` hands over (size, first NUL)
//! of a file with none of them. A search tool then copies into its memory, and scans with its
//! slower WebAssembly code, only the files it can match in; which files those are is decided
//! by the plugin's needles and the files it could read anyway, so nothing new is reachable.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File as HostFile;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use wasmtime::component::Resource;

use crate::bindings::cordon::tool::bulk_read::{
    self, AddError, File, PassedOver, ReadError, Sifted, SiftedFile,
};
use crate::caps::{
    BULK_READ_AHEAD_BYTES, BULK_READ_AHEAD_FILES, MAX_ALL_NEEDLE_BYTES, MAX_BULK_READ_PATH,
    MAX_BULK_READ_QUEUED_PATH_BYTES, MAX_BULK_READ_QUEUED_PATHS, MAX_BULK_READ_WORKERS,
    MAX_BULK_READ_WORKERS_PER_READER, MAX_BULK_READERS_PER_CALL, MAX_NEEDLE_BYTES, MAX_NEEDLES,
    MAX_SIEVE_MEMORY,
};
use crate::sandbox::HostState;

/// Worker threads alive in the process.
static LIVE_WORKERS: AtomicUsize = AtomicUsize::new(0);

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
}

/// The needles of a sifting reader, searched for in every file it reads.
#[derive(Debug)]
struct Sieve {
    needles: AhoCorasick,
}

impl Sieve {
    /// The sieve for the needles in `flat` of `lengths` (none for no needles), or what is
    /// wrong with them.
    fn new(flat: &[u8], lengths: &[u32]) -> Result<Option<Sieve>, String> {
        if lengths.len() > MAX_NEEDLES {
            return Err(format!(
                "{} needles were given; a sifting reader takes at most {MAX_NEEDLES}: pass \
                 fewer, shorter ones (any one of which a match must contain), or none to take \
                 every file whole",
                lengths.len()
            ));
        }
        let total: u64 = lengths.iter().map(|&n| u64::from(n)).sum();
        if total != flat.len() as u64 {
            return Err(format!(
                "the needle lengths add up to {total} bytes but {} were given: pass the needles \
                 one after another and the length of each",
                flat.len()
            ));
        }
        let mut needles = Vec::with_capacity(lengths.len());
        let mut rest = flat;
        for &n in lengths {
            let (needle, after) = rest.split_at(n as usize);
            needles.push(needle);
            rest = after;
        }
        if needles.is_empty() {
            return Ok(None);
        }
        for (i, needle) in needles.iter().enumerate() {
            if needle.is_empty() {
                return Err(format!(
                    "needle {i} is empty, and every file contains the empty string: pass no \
                     needles to take every file whole"
                ));
            }
            if needle.len() > MAX_NEEDLE_BYTES {
                return Err(format!(
                    "needle {i} is {} bytes; a needle may have at most {MAX_NEEDLE_BYTES} (a \
                     prefix of it is a needle too)",
                    needle.len()
                ));
            }
        }
        if flat.len() > MAX_ALL_NEEDLE_BYTES {
            return Err(format!(
                "the needles have {} bytes in all; at most {MAX_ALL_NEEDLE_BYTES} are \
                 allowed: pass fewer or shorter ones",
                flat.len()
            ));
        }
        let needles = AhoCorasick::builder()
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .build(needles)
            .map_err(|e| format!("the needles cannot be searched for: {e}"))?;
        if needles.memory_usage() > MAX_SIEVE_MEMORY {
            return Err(format!(
                "searching for these needles would take {} bytes of host memory, more than \
                 {MAX_SIEVE_MEMORY}: pass fewer or shorter ones",
                needles.memory_usage()
            ));
        }
        Ok(Some(Sieve { needles }))
    }

    /// What `take-sifted` hands over instead of `contents`, if they contain no needle and do
    /// not begin with a byte-order mark (a reader may decode such a file before matching, so
    /// the needles, given as bytes of the decoded text, say nothing about its raw bytes).
    fn passes_over(&self, contents: &[u8]) -> Option<PassedOver> {
        if has_byte_order_mark(contents) || self.needles.is_match(contents) {
            return None;
        }
        Some(PassedOver {
            size: contents.len() as u64,
            first_nul: memchr::memchr(0, contents).map(|at| at as u64),
        })
    }
}

/// Whether `contents` begin with a UTF-8, UTF-16 LE or UTF-16 BE byte-order mark.
fn has_byte_order_mark(contents: &[u8]) -> bool {
    contents.starts_with(&[0xEF, 0xBB, 0xBF])
        || contents.starts_with(&[0xFF, 0xFE])
        || contents.starts_with(&[0xFE, 0xFF])
}

/// A file as a take hands it over, before it becomes a WIT `file` or `sifted-file`.
enum Taken {
    Whole(String, Result<Vec<u8>, ReadError>),
    PassedOver(String, PassedOver),
}

impl Taken {
    fn path(&self) -> &str {
        match self {
            Taken::Whole(path, _) | Taken::PassedOver(path, _) => path,
        }
    }

    /// `contents` of the file at `path` as handed over: sifted if `sifted` and the reader has
    /// needles.
    fn of(
        source: &Source,
        path: String,
        contents: Result<Vec<u8>, ReadError>,
        sifted: bool,
    ) -> Taken {
        if let (true, Some(sieve), Ok(bytes)) = (sifted, &source.sieve, &contents)
            && let Some(passed_over) = sieve.passes_over(bytes)
        {
            return Taken::PassedOver(path, passed_over);
        }
        Taken::Whole(path, contents)
    }
}

/// A reader as the plugin holds it.
pub struct Reader {
    source: Arc<Source>,
    /// Sequence numbers: paths queued so far, and files taken so far.
    added: u64,
    taken: u64,
    /// Bytes of the paths queued and not yet taken.
    queued_path_bytes: u64,
    mode: Mode,
}

enum Mode {
    /// Read by worker threads.
    Threaded(Arc<Shared>),
    /// Read on the calling thread when taken (a call's other readers, or no threads).
    Inline(VecDeque<String>),
}

struct Shared {
    queue: Mutex<Queue>,
    /// Workers wait here for paths or room.
    work: Condvar,
    /// The plugin waits here for files.
    ready: tokio::sync::Notify,
    /// The call's threaded-reader flag, cleared when the reader and all its workers are gone.
    slot: Arc<AtomicBool>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.slot.store(false, Ordering::Release);
    }
}

/// A queued file the workers are done with.
enum Slot {
    Read(File),
    /// Larger than [`BULK_READ_AHEAD_BYTES`]: read by the `take` that hands it over.
    Later(String),
    /// Read, with none of a sifting reader's needles in it: only what `take-sifted` hands
    /// over is kept (a plain `take` reads it again).
    PassedOver(String, PassedOver),
}

impl Slot {
    /// Host memory the slot holds.
    fn bytes(&self) -> u64 {
        match self {
            Slot::Read(file) => {
                file.path.len() as u64 + file.contents.as_ref().map_or(0, |c| c.len() as u64)
            }
            Slot::Later(path) | Slot::PassedOver(path, _) => path.len() as u64,
        }
    }

    /// Whether it holds a file's contents (counted by the [`BULK_READ_AHEAD_FILES`] bound).
    fn holds_contents(&self) -> bool {
        matches!(self, Slot::Read(_))
    }

    /// Bytes of contents a `take` (`take-sifted` if `sifted`) hands over for it. A file the
    /// take itself reads counts as too many to share a batch: it may have grown since.
    fn handed_over(&self, sifted: bool) -> u64 {
        match self {
            Slot::Read(file) => file.contents.as_ref().map_or(0, |c| c.len() as u64),
            Slot::PassedOver(_, _) if sifted => 0,
            Slot::Later(_) | Slot::PassedOver(_, _) => u64::MAX,
        }
    }

    /// What the take hands over: a file read only now is read (and sifted) on the calling
    /// thread.
    fn into_taken(self, source: &Source, sifted: bool) -> Taken {
        match self {
            Slot::Read(File { path, contents }) => Taken::Whole(path, contents),
            Slot::PassedOver(path, passed_over) if sifted => Taken::PassedOver(path, passed_over),
            Slot::Later(path) | Slot::PassedOver(path, _) => {
                let contents = read_file(source, &path);
                Taken::of(source, path, contents, sifted)
            }
        }
    }
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<(u64, String)>,
    finished: BTreeMap<u64, Slot>,
    finished_bytes: u64,
    /// How many of `finished` hold contents ([`Slot::holds_contents`]).
    finished_read: usize,
    /// The next sequence number the plugin will take.
    next: u64,
    /// How many files the waiting `take` wants, and whether it is `take-sifted`, if one waits.
    want: Option<(usize, bool)>,
    /// Workers waiting for paths or room (only they need waking: a wake is a system call).
    idle: usize,
    /// Files being read by a worker right now.
    in_flight: usize,
    closed: bool,
}

/// How many of the files at the front of the queue, all read and in a row (`ready`, each with
/// the bytes it hands over), one `take` of `want` hands over now: `want` of them, or fewer when
/// the next would pass [`BULK_READ_AHEAD_BYTES`] (at least one: a large file comes alone), or as many as
/// there are when nothing more will come (`no_more`: the workers wait at the read-ahead bound
/// for this `take`). `None`: wait for more.
fn batch(ready: impl Iterator<Item = u64>, want: usize, no_more: bool) -> Option<usize> {
    let (mut n, mut bytes) = (0, 0u64);
    for size in ready.take(want) {
        if n > 0 && bytes.saturating_add(size) > BULK_READ_AHEAD_BYTES {
            return Some(n);
        }
        n += 1;
        bytes = bytes.saturating_add(size);
        if bytes > BULK_READ_AHEAD_BYTES {
            return Some(n);
        }
    }
    (n == want || (n > 0 && no_more)).then_some(n)
}

impl Queue {
    fn takeable(&self, want: usize, sifted: bool) -> Option<usize> {
        let ready = (self.next..)
            .map_while(|seq| self.finished.get(&seq))
            .map(|slot| slot.handed_over(sifted));
        // Nothing more comes before this take when the workers wait at the read-ahead bound
        // and none is still reading (a read in flight may fill a gap before the bound).
        let at_bound = !self.has_room();
        batch(ready, want, at_bound && self.in_flight == 0)
    }

    fn has_room(&self) -> bool {
        self.finished_read < BULK_READ_AHEAD_FILES && self.finished_bytes < BULK_READ_AHEAD_BYTES
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Queue> {
    // A worker never panics while holding the lock (reading happens outside it); recover the
    // queue anyway rather than poisoning the call.
    shared.queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a worker in [`LIVE_WORKERS`] while it lives.
struct WorkerPermit;

impl WorkerPermit {
    fn acquire() -> Option<WorkerPermit> {
        LIVE_WORKERS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_BULK_READ_WORKERS).then_some(n + 1)
            })
            .ok()
            .map(|_| WorkerPermit)
    }
}

impl Drop for WorkerPermit {
    fn drop(&mut self) {
        LIVE_WORKERS.fetch_sub(1, Ordering::AcqRel);
    }
}

fn worker(shared: Arc<Shared>, source: Arc<Source>, _permit: WorkerPermit) {
    loop {
        let (seq, path) = {
            let mut queue = lock(&shared);
            loop {
                if queue.closed {
                    return;
                }
                if queue.has_room()
                    && let Some(next) = queue.pending.pop_front()
                {
                    queue.in_flight += 1;
                    break next;
                }
                queue.idle += 1;
                queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
                queue.idle -= 1;
            }
        };
        let slot = match open_regular(&source, &path) {
            Ok((_, size)) if size > BULK_READ_AHEAD_BYTES => Slot::Later(path),
            Ok((file, size)) => {
                let contents = read_contents(&file, size);
                drop(file);
                match Taken::of(&source, path, contents, true) {
                    Taken::PassedOver(path, passed_over) => Slot::PassedOver(path, passed_over),
                    Taken::Whole(path, contents) => Slot::Read(File { path, contents }),
                }
            }
            Err(e) => Slot::Read(File {
                path,
                contents: Err(e),
            }),
        };
        let mut queue = lock(&shared);
        queue.in_flight -= 1;
        if queue.closed {
            return;
        }
        queue.finished_bytes += slot.bytes();
        queue.finished_read += usize::from(slot.holds_contents());
        queue.finished.insert(seq, slot);
        if let Some((want, sifted)) = queue.want
            && queue.takeable(want, sifted).is_some()
        {
            queue.want = None;
            shared.ready.notify_one();
        }
    }
}

/// Starts up to `workers` worker threads; returns how many started.
fn start_workers(shared: &Arc<Shared>, source: &Arc<Source>, workers: usize) -> usize {
    let mut started = 0;
    for _ in 0..workers {
        let Some(permit) = WorkerPermit::acquire() else {
            break;
        };
        let (shared, source) = (shared.clone(), source.clone());
        let spawned = std::thread::Builder::new()
            .name("cordon-bulk-read".into())
            .spawn(move || worker(shared, source, permit));
        if spawned.is_ok() {
            started += 1;
        }
    }
    started
}

impl Reader {
    fn new(state: &mut HostState, max_size: u64, sieve: Option<Sieve>) -> wasmtime::Result<Reader> {
        let source = Arc::new(Source {
            roots: roots(state),
            max_size: max_size.min(state.limiter.limit()),
            sieve,
        });
        let slot = state.bulk_read.threaded.clone();
        let mut mode = Mode::Inline(VecDeque::new());
        if slot
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let shared = Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                work: Condvar::new(),
                ready: tokio::sync::Notify::new(),
                slot,
            });
            let workers = std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1))
                .clamp(1, MAX_BULK_READ_WORKERS_PER_READER);
            // With no worker (the process is at its limit) `shared` is dropped here, which
            // frees the call's slot again, and this reader reads inline.
            if start_workers(&shared, &source, workers) > 0 {
                mode = Mode::Threaded(shared);
            }
        }
        Ok(Reader {
            source,
            added: 0,
            taken: 0,
            queued_path_bytes: 0,
            mode,
        })
    }

    fn add(&mut self, path: String) {
        self.queued_path_bytes += path.len() as u64;
        match &mut self.mode {
            Mode::Threaded(shared) => {
                let mut queue = lock(shared);
                queue.pending.push_back((self.added, path));
                if queue.idle > 0 {
                    shared.work.notify_one();
                }
            }
            Mode::Inline(pending) => pending.push_back(path),
        }
        self.added += 1;
    }

    /// The next files (see the WIT), sifted for `take-sifted`; an inline reader stops reading
    /// more once `deadline`, the call's, has passed.
    async fn take(&mut self, max: u32, deadline: Instant, sifted: bool) -> Vec<Taken> {
        let want = (max as u64).min(self.added - self.taken) as usize;
        let want = want.min(BULK_READ_AHEAD_FILES);
        if want == 0 {
            return Vec::new();
        }
        let files = match &mut self.mode {
            Mode::Inline(pending) => take_inline(&self.source, pending, want, deadline, sifted),
            Mode::Threaded(shared) => {
                let slots = loop {
                    let ready = shared.ready.notified();
                    {
                        let mut queue = lock(shared);
                        if let Some(n) = queue.takeable(want, sifted) {
                            let mut slots = Vec::with_capacity(n);
                            for _ in 0..n {
                                let seq = queue.next;
                                let slot =
                                    queue.finished.remove(&seq).expect("takeable checked it");
                                queue.finished_bytes -= slot.bytes();
                                queue.finished_read -= usize::from(slot.holds_contents());
                                queue.next += 1;
                                slots.push(slot);
                            }
                            queue.want = None;
                            if queue.idle > 0 {
                                shared.work.notify_all();
                            }
                            break slots;
                        }
                        queue.want = Some((want, sifted));
                    }
                    ready.await;
                };
                slots
                    .into_iter()
                    .map(|slot| slot.into_taken(&self.source, sifted))
                    .collect()
            }
        };
        self.taken += files.len() as u64;
        self.queued_path_bytes -= files.iter().map(|f| f.path().len() as u64).sum::<u64>();
        files
    }
}

/// Reads the next files of an inline reader on the calling thread, as a threaded `take` would
/// hand them over (by [`batch`]'s rule), stopping early once the call's time is up.
fn take_inline(
    source: &Source,
    pending: &mut VecDeque<String>,
    want: usize,
    deadline: Instant,
    sifted: bool,
) -> Vec<Taken> {
    let mut files: Vec<Taken> = Vec::new();
    let mut bytes = 0u64;
    while files.len() < want
        && let Some(path) = pending.front()
    {
        if !files.is_empty() && Instant::now() >= deadline {
            break;
        }
        let contents = match open_regular(source, path) {
            Ok((file, size)) => {
                let handed_over = if size > BULK_READ_AHEAD_BYTES {
                    u64::MAX
                } else {
                    size
                };
                if !files.is_empty() && bytes.saturating_add(handed_over) > BULK_READ_AHEAD_BYTES {
                    break;
                }
                bytes = bytes.saturating_add(handed_over);
                read_contents(&file, size)
            }
            Err(e) => Err(e),
        };
        let path = pending.pop_front().expect("front checked");
        files.push(Taken::of(source, path, contents, sifted));
        if bytes > BULK_READ_AHEAD_BYTES {
            break;
        }
    }
    files
}

/// The call's granted directories, the same handles the plugin's preopens wrap.
fn roots(state: &HostState) -> Vec<Root> {
    state
        .preopens
        .iter()
        .map(|p| Root {
            guest: components(&p.guest_path).map(str::to_owned).collect(),
            dir: p.dir.dir.clone(),
        })
        .collect()
}

/// The non-empty, non-`.` components of a path.
fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// The preopen with the longest guest path containing `path`, and the rest of the path below
/// it; `None` unless `path` is absolute, free of `..` and inside a preopen.
fn resolve<'a>(roots: &'a [Root], path: &str) -> Option<(&'a Root, String)> {
    if !path.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = components(path).collect();
    if parts.contains(&"..") {
        return None;
    }
    let root = roots
        .iter()
        .filter(|r| r.guest.len() <= parts.len() && r.guest.iter().zip(&parts).all(|(a, b)| a == b))
        .max_by_key(|r| r.guest.len())?;
    let mut below = parts[root.guest.len()..].join("/");
    // A trailing slash names a directory, as in POSIX: keep it for the open to check.
    if !below.is_empty() && (path.ends_with('/') || path.ends_with("/.")) {
        below.push('/');
    }
    Some((root, below))
}

fn read_file(source: &Source, path: &str) -> Result<Vec<u8>, ReadError> {
    let (file, size) = open_regular(source, path)?;
    read_contents(&file, size)
}

/// Opens the regular file at guest path `path` and returns it with its size, if it may be
/// read whole.
fn open_regular(source: &Source, path: &str) -> Result<(HostFile, u64), ReadError> {
    let (root, below) = resolve(&source.roots, path).ok_or(ReadError::NotGranted)?;
    if below.is_empty() {
        // The granted directory itself.
        return Err(ReadError::NotAFile);
    }
    let mut options = cap_primitives::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use cap_primitives::fs::OpenOptionsExt;
        // A FIFO would block the open until a writer came; a terminal must not become ours.
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        options.custom_flags(flags.bits() as i32);
    }
    let file =
        cap_primitives::fs::open(&root.dir, Path::new(&below), &options).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        return Err(ReadError::NotAFile);
    }
    let size = metadata.len();
    if size > source.max_size {
        return Err(ReadError::TooLarge(size));
    }
    Ok((file, size))
}

fn read_contents(file: &HostFile, size: u64) -> Result<Vec<u8>, ReadError> {
    // The size `stat` reported, read straight into the buffer without zeroing it first and
    // without a further read to find the end. A file that grows meanwhile is read as it was;
    // one that shrinks, up to its end.
    let mut contents = Vec::with_capacity(size as usize);
    while (contents.len() as u64) < size {
        match read_into_spare(file, &mut contents) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_error(e)),
        }
    }
    Ok(contents)
}

/// One read into the unused capacity of `buf`, extending it by what was read.
#[cfg(unix)]
fn read_into_spare(file: &HostFile, buf: &mut Vec<u8>) -> io::Result<usize> {
    Ok(rustix::io::read(file, rustix::buffer::spare_capacity(buf))?)
}

#[cfg(not(unix))]
fn read_into_spare(mut file: &HostFile, buf: &mut Vec<u8>) -> io::Result<usize> {
    let start = buf.len();
    buf.resize(buf.capacity(), 0);
    let n = file.read(&mut buf[start..]);
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    n
}

fn read_error(e: io::Error) -> ReadError {
    match e.kind() {
        io::ErrorKind::NotFound => ReadError::NotFound,
        io::ErrorKind::IsADirectory | io::ErrorKind::NotADirectory => ReadError::NotAFile,
        // Leaving the directory (`..` through a link, an absolute link) is refused as not
        // granted, like a path outside every grant: by the kernel (EXDEV from
        // RESOLVE_BENEATH), or by cap-primitives' own resolution (a permission error that
        // did not come from the system).
        io::ErrorKind::PermissionDenied if e.raw_os_error().is_none() => ReadError::NotGranted,
        #[cfg(unix)]
        _ if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => {
            ReadError::NotGranted
        }
        _ => ReadError::Other(e.to_string()),
    }
}

impl bulk_read::Host for HostState {}

impl HostState {
    fn push_reader(
        &mut self,
        max_size: u64,
        sieve: Option<Sieve>,
    ) -> wasmtime::Result<Resource<Reader>> {
        if self.bulk_read.readers >= MAX_BULK_READERS_PER_CALL {
            wasmtime::bail!(
                "the plugin holds {MAX_BULK_READERS_PER_CALL} bulk-read readers at once, the most one call \
                 may hold; it must drop one before creating another"
            );
        }
        let reader = Reader::new(self, max_size, sieve)?;
        let reader = self.table.push(reader)?;
        self.bulk_read.readers += 1;
        Ok(reader)
    }

    async fn take_files(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
        sifted: bool,
    ) -> wasmtime::Result<Vec<Taken>> {
        let deadline = self.deadline;
        let files = self
            .table
            .get_mut(&reader)?
            .take(max, deadline, sifted)
            .await;
        self.bulk_read.paths -= files.len() as u64;
        self.bulk_read.path_bytes -= files.iter().map(|f| f.path().len() as u64).sum::<u64>();
        Ok(files)
    }
}

impl bulk_read::HostReader for HostState {
    fn new(&mut self, max_size: u64) -> wasmtime::Result<Resource<Reader>> {
        self.push_reader(max_size, None)
    }

    fn sifting(
        &mut self,
        max_size: u64,
        needles: Vec<u8>,
        lengths: Vec<u32>,
    ) -> wasmtime::Result<Result<Resource<Reader>, String>> {
        match Sieve::new(&needles, &lengths) {
            Ok(sieve) => Ok(Ok(self.push_reader(max_size, sieve)?)),
            Err(why) => Ok(Err(why)),
        }
    }

    fn add(
        &mut self,
        reader: Resource<Reader>,
        path: String,
    ) -> wasmtime::Result<Result<(), AddError>> {
        if path.len() > MAX_BULK_READ_PATH {
            return Ok(Err(AddError::PathTooLong));
        }
        let budget = &mut self.bulk_read;
        let len = path.len() as u64;
        if budget.paths >= MAX_BULK_READ_QUEUED_PATHS
            || budget.path_bytes + len > MAX_BULK_READ_QUEUED_PATH_BYTES
        {
            return Ok(Err(AddError::QueueFull));
        }
        self.table.get_mut(&reader)?.add(path);
        budget.paths += 1;
        budget.path_bytes += len;
        Ok(Ok(()))
    }

    fn queued(&mut self, reader: Resource<Reader>) -> wasmtime::Result<u32> {
        let reader = self.table.get(&reader)?;
        Ok((reader.added - reader.taken) as u32)
    }

    async fn take(&mut self, reader: Resource<Reader>, max: u32) -> wasmtime::Result<Vec<File>> {
        let source = self.table.get(&reader)?.source.clone();
        let files = self.take_files(reader, max, false).await?;
        Ok(files
            .into_iter()
            .map(|taken| match taken {
                Taken::Whole(path, contents) => File { path, contents },
                // A plain take sifts nothing; were a file passed over, it is read again.
                Taken::PassedOver(path, _) => File {
                    contents: read_file(&source, &path),
                    path,
                },
            })
            .collect())
    }

    async fn take_sifted(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
    ) -> wasmtime::Result<Vec<SiftedFile>> {
        let files = self.take_files(reader, max, true).await?;
        Ok(files
            .into_iter()
            .map(|taken| match taken {
                Taken::Whole(path, contents) => SiftedFile {
                    path,
                    contents: contents.map(Sifted::Whole),
                },
                Taken::PassedOver(path, passed_over) => SiftedFile {
                    path,
                    contents: Ok(Sifted::PassedOver(passed_over)),
                },
            })
            .collect())
    }

    fn drop(&mut self, reader: Resource<Reader>) -> wasmtime::Result<()> {
        let reader = self.table.delete(reader)?;
        self.bulk_read.readers -= 1;
        self.bulk_read.paths -= reader.added - reader.taken;
        self.bulk_read.path_bytes -= reader.queued_path_bytes;
        Ok(())
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Mode::Threaded(shared) = &self.mode {
            // Free what was queued and read at once; a worker still reading keeps only its
            // file until the read returns.
            let mut queue = lock(shared);
            queue.closed = true;
            queue.pending.clear();
            queue.finished.clear();
            queue.finished_bytes = 0;
            queue.finished_read = 0;
            drop(queue);
            shared.work.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_take_hands_over_what_is_read_in_a_row_up_to_the_byte_cap() {
        // All wanted files read: all of them.
        assert_eq!(batch([10, 10, 10].into_iter(), 3, false), Some(3));
        // Fewer read than wanted: wait, unless nothing more comes before this take.
        assert_eq!(batch([10, 10].into_iter(), 3, false), None);
        assert_eq!(batch([10, 10].into_iter(), 3, true), Some(2));
        assert_eq!(batch([].into_iter(), 3, true), None);
        // The byte cap ends a batch early; a large file comes alone, also when it is first.
        assert_eq!(
            batch([3 * MIB, 3 * MIB, 3 * MIB].into_iter(), 3, false),
            Some(2)
        );
        assert_eq!(batch([u64::MAX, 10].into_iter(), 2, false), Some(1));
        assert_eq!(batch([10, u64::MAX].into_iter(), 2, false), Some(1));
        assert_eq!(batch([9 * MIB, 10].into_iter(), 2, false), Some(1));
    }

    #[test]
    fn a_take_waits_for_a_gap_still_being_read_even_at_the_bound() {
        let small = |seq: u64| {
            Slot::Read(File {
                path: format!("/d/{seq}"),
                contents: Ok(vec![0; 10]),
            })
        };
        // File 1 is being read; 0 and 2..=64 are read, which fills the read-ahead bound.
        let mut queue = Queue::default();
        for seq in std::iter::once(0).chain(2..=BULK_READ_AHEAD_FILES as u64) {
            queue.finished.insert(seq, small(seq));
        }
        queue.finished_read = BULK_READ_AHEAD_FILES;
        queue.in_flight = 1;
        assert_eq!(queue.takeable(2, false), None);
        queue.in_flight = 0;
        assert_eq!(queue.takeable(2, false), Some(1));
        queue.finished.insert(1, small(1));
        assert_eq!(queue.takeable(2, false), Some(2));
    }

    #[test]
    fn a_file_passed_over_hands_over_no_bytes_to_take_sifted() {
        let passed_over = |size| {
            Slot::PassedOver(
                "/d/f".into(),
                PassedOver {
                    size,
                    first_nul: None,
                },
            )
        };
        let mut queue = Queue::default();
        for seq in 0..3 {
            queue.finished.insert(seq, passed_over(5 * MIB));
        }
        // take-sifted gets all three; a plain take reads each again, alone (it may have
        // grown past the batch bound since).
        assert_eq!(queue.takeable(3, true), Some(3));
        assert_eq!(queue.takeable(3, false), Some(1));
        assert_eq!(queue.finished[&0].handed_over(false), u64::MAX);
        assert_eq!(queue.finished[&0].handed_over(true), 0);
        // Holding only paths, any number of them leaves the workers room to read on.
        for seq in 3..10 * BULK_READ_AHEAD_FILES as u64 {
            queue.finished.insert(seq, passed_over(1));
        }
        assert!(queue.has_room());
        queue.finished_read = BULK_READ_AHEAD_FILES;
        assert!(!queue.has_room());
    }

    #[test]
    fn needles_are_bounded_and_bytes() {
        let sieve = |needles: &[&[u8]]| {
            let lengths: Vec<u32> = needles.iter().map(|n| n.len() as u32).collect();
            Sieve::new(&needles.concat(), &lengths)
        };
        assert!(sieve(&[]).unwrap().is_none());
        let some = sieve(&[b"needle", b"\xff\x00"]).unwrap().unwrap();
        assert!(some.passes_over(b"a needle").is_none());
        assert!(some.passes_over(b"bin \xff\x00").is_none());
        // No case folding: bytes as given.
        let p = some.passes_over(b"NEEDLE\x00").unwrap();
        assert_eq!((p.size, p.first_nul), (7, Some(6)));
        for marked in [&b"\xEF\xBB\xBFx"[..], b"\xFF\xFEx", b"\xFE\xFFx"] {
            assert!(some.passes_over(marked).is_none());
        }
        assert!(some.passes_over(b"\xFEx\xFF").is_some());
        assert!(sieve(&[b""]).unwrap_err().contains("needle 0 is empty"));
        let long = vec![b'n'; MAX_NEEDLE_BYTES + 1];
        assert!(
            sieve(&[&long])
                .unwrap_err()
                .contains("needle 0 is 1025 bytes")
        );
        let many = vec![&b"n"[..]; MAX_NEEDLES + 1];
        assert!(sieve(&many).unwrap_err().contains("1025 needles"));
        let wide = vec![&[b'n'; 1000][..]; 66];
        assert!(sieve(&wide).unwrap_err().contains("66000 bytes in all"));
        // Lengths must cover the bytes exactly.
        assert!(
            Sieve::new(b"abc", &[2])
                .unwrap_err()
                .contains("add up to 2 bytes but 3")
        );
        assert!(
            Sieve::new(b"abc", &[2, 2])
                .unwrap_err()
                .contains("add up to 4")
        );
        assert!(Sieve::new(b"ab", &[u32::MAX, u32::MAX]).is_err());
        // The largest needle set allowed stays far below the memory bound.
        let random: Vec<u8> = (0..MAX_ALL_NEEDLE_BYTES as u64)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let lengths = vec![(MAX_ALL_NEEDLE_BYTES / 64) as u32; 64];
        let largest = Sieve::new(&random, &lengths).unwrap().unwrap();
        assert!(largest.needles.memory_usage() < MAX_SIEVE_MEMORY / 2);
    }
}
