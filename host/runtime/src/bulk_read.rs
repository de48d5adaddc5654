//! `cordon:tool/bulk-read`: whole files read on host threads while the plugin works.
//!
//! A component runs on one thread, so a plugin that reads thousands of files through
//! `wasi:filesystem` spends most of its time waiting for one system call after another (open,
//! stat, read, close per file). A reader takes the paths the plugin queues and reads them on
//! threads of its own, in order, at most [`AHEAD_FILES`] files or [`AHEAD_BYTES`] ahead of what
//! the plugin has taken, so the plugin's own work and the reading overlap.
//!
//! What a reader can reach is what the call's preopened directories reach, through the very
//! same directory handles: a guest path is matched to a preopen and opened below it with
//! cap-primitives' sandboxed `open` (the resolution wasmtime-wasi's own is derived from), which
//! refuses `..`, absolute symlinks and any link that leaves the directory. Only regular files
//! are read; FIFOs and devices are opened without blocking and refused.
//!
//! Everything a plugin could make the host hold outside its own memory limit is bounded:
//! - file contents: [`AHEAD_BYTES`] read ahead, plus one file of at most that size per worker;
//!   a larger file (up to the reader's size limit, at most the call's memory limit) is read by
//!   the `take` that hands it over, alone, and a `take` hands over at most [`AHEAD_BYTES`]
//!   otherwise;
//! - queued paths: [`MAX_QUEUED_PATHS`] and [`MAX_QUEUED_PATH_BYTES`] per call over all its
//!   readers, none longer than [`MAX_PATH`], and [`MAX_READERS`] readers per call;
//! - threads: one reader per call has workers (until they have all exited, not merely until it
//!   is dropped), at most [`MAX_WORKERS`] of them, and [`MAX_PROCESS_WORKERS`] in the process;
//!   other readers read on the calling thread when taken from. Each worker holds one file open
//!   at a time.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File as HostFile;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;

use crate::bindings::cordon::tool::bulk_read::{self, AddError, File, ReadError};
use crate::sandbox::HostState;

/// Files read but not yet taken, at most, before the workers wait.
const AHEAD_FILES: usize = 64;
/// Bytes read but not yet taken, at most, before the workers wait; also the most one `take`
/// hands over, unless a single file is larger.
const AHEAD_BYTES: u64 = 8 << 20;
/// Paths queued and not yet taken by one call, over all its readers.
const MAX_QUEUED_PATHS: u64 = 4096;
/// Bytes of the paths queued and not yet taken by one call.
const MAX_QUEUED_PATH_BYTES: u64 = 1 << 20;
/// Longest path `add` takes (Linux's PATH_MAX; no file has a longer one).
const MAX_PATH: usize = 4096;
/// Readers one call may hold at once.
const MAX_READERS: usize = 16;
/// Worker threads of one reader, at most.
const MAX_WORKERS: usize = 3;
/// Worker threads in the whole process, at most; readers beyond it read inline.
const MAX_PROCESS_WORKERS: usize = 64;

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
    /// Larger than [`AHEAD_BYTES`]: read by the `take` that hands it over.
    Later(String),
}

impl Slot {
    /// Host memory the slot holds.
    fn bytes(&self) -> u64 {
        match self {
            Slot::Read(file) => {
                file.path.len() as u64 + file.contents.as_ref().map_or(0, |c| c.len() as u64)
            }
            Slot::Later(path) => path.len() as u64,
        }
    }

    /// Bytes of contents a `take` hands over for it (a later file counts as too many to share
    /// a batch).
    fn handed_over(&self) -> u64 {
        match self {
            Slot::Read(file) => file.contents.as_ref().map_or(0, |c| c.len() as u64),
            Slot::Later(_) => u64::MAX,
        }
    }
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<(u64, String)>,
    finished: BTreeMap<u64, Slot>,
    finished_bytes: u64,
    /// The next sequence number the plugin will take.
    next: u64,
    /// How many files the waiting `take` wants, if one waits.
    want: Option<usize>,
    /// Workers waiting for paths or room (only they need waking: a wake is a system call).
    idle: usize,
    /// Files being read by a worker right now.
    in_flight: usize,
    closed: bool,
}

/// How many of the files at the front of the queue, all read and in a row (`ready`, each with
/// the bytes it hands over), one `take` of `want` hands over now: `want` of them, or fewer when
/// the next would pass [`AHEAD_BYTES`] (at least one: a large file comes alone), or as many as
/// there are when nothing more will come (`no_more`: the workers wait at the read-ahead bound
/// for this `take`). `None`: wait for more.
fn batch(ready: impl Iterator<Item = u64>, want: usize, no_more: bool) -> Option<usize> {
    let (mut n, mut bytes) = (0, 0u64);
    for size in ready.take(want) {
        if n > 0 && bytes.saturating_add(size) > AHEAD_BYTES {
            return Some(n);
        }
        n += 1;
        bytes = bytes.saturating_add(size);
        if bytes > AHEAD_BYTES {
            return Some(n);
        }
    }
    (n == want || (n > 0 && no_more)).then_some(n)
}

impl Queue {
    fn takeable(&self, want: usize) -> Option<usize> {
        let ready = (self.next..)
            .map_while(|seq| self.finished.get(&seq))
            .map(Slot::handed_over);
        // Nothing more comes before this take when the workers wait at the read-ahead bound
        // and none is still reading (a read in flight may fill a gap before the bound).
        let at_bound = self.finished.len() >= AHEAD_FILES || self.finished_bytes >= AHEAD_BYTES;
        batch(ready, want, at_bound && self.in_flight == 0)
    }

    fn has_room(&self) -> bool {
        self.finished.len() < AHEAD_FILES && self.finished_bytes < AHEAD_BYTES
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
                (n < MAX_PROCESS_WORKERS).then_some(n + 1)
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
            Ok((_, size)) if size > AHEAD_BYTES => Slot::Later(path),
            Ok((file, size)) => Slot::Read(File {
                contents: read_contents(&file, size),
                path,
            }),
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
        queue.finished.insert(seq, slot);
        if let Some(want) = queue.want
            && queue.takeable(want).is_some()
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
    fn new(state: &mut HostState, max_size: u64) -> wasmtime::Result<Reader> {
        let source = Arc::new(Source {
            roots: roots(state)?,
            max_size: max_size.min(state.limiter.limit()),
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
                .clamp(1, MAX_WORKERS);
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

    /// The next files (see the WIT); an inline reader stops reading more once `deadline`, the
    /// call's, has passed.
    async fn take(&mut self, max: u32, deadline: Instant) -> Vec<File> {
        let want = (max as u64).min(self.added - self.taken) as usize;
        let want = want.min(AHEAD_FILES);
        if want == 0 {
            return Vec::new();
        }
        let files = match &mut self.mode {
            Mode::Inline(pending) => take_inline(&self.source, pending, want, deadline),
            Mode::Threaded(shared) => {
                let slots = loop {
                    let ready = shared.ready.notified();
                    {
                        let mut queue = lock(shared);
                        if let Some(n) = queue.takeable(want) {
                            let mut slots = Vec::with_capacity(n);
                            for _ in 0..n {
                                let seq = queue.next;
                                let slot =
                                    queue.finished.remove(&seq).expect("takeable checked it");
                                queue.finished_bytes -= slot.bytes();
                                queue.next += 1;
                                slots.push(slot);
                            }
                            queue.want = None;
                            if queue.idle > 0 {
                                shared.work.notify_all();
                            }
                            break slots;
                        }
                        queue.want = Some(want);
                    }
                    ready.await;
                };
                slots
                    .into_iter()
                    .map(|slot| match slot {
                        Slot::Read(file) => file,
                        Slot::Later(path) => File {
                            contents: read_file(&self.source, &path),
                            path,
                        },
                    })
                    .collect()
            }
        };
        self.taken += files.len() as u64;
        self.queued_path_bytes -= files.iter().map(|f| f.path.len() as u64).sum::<u64>();
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
) -> Vec<File> {
    let mut files: Vec<File> = Vec::new();
    let mut bytes = 0u64;
    while files.len() < want
        && let Some(path) = pending.front()
    {
        if !files.is_empty() && Instant::now() >= deadline {
            break;
        }
        let contents = match open_regular(source, path) {
            Ok((file, size)) => {
                let handed_over = if size > AHEAD_BYTES { u64::MAX } else { size };
                if !files.is_empty() && bytes.saturating_add(handed_over) > AHEAD_BYTES {
                    break;
                }
                bytes = bytes.saturating_add(handed_over);
                read_contents(&file, size)
            }
            Err(e) => Err(e),
        };
        let path = pending.pop_front().expect("front checked");
        files.push(File { path, contents });
        if bytes > AHEAD_BYTES {
            break;
        }
    }
    files
}

/// The call's preopened directories, the same handles wasmtime-wasi gives the plugin.
fn roots(state: &mut HostState) -> wasmtime::Result<Vec<Root>> {
    let preopens = state.filesystem().get_directories()?;
    let mut roots = Vec::with_capacity(preopens.len());
    for (descriptor, guest) in preopens {
        let descriptor: Resource<Descriptor> = descriptor;
        if let Descriptor::Dir(dir) = state.table.delete(descriptor)? {
            roots.push(Root {
                guest: components(&guest).map(str::to_owned).collect(),
                dir: dir.dir.clone(),
            });
        }
    }
    Ok(roots)
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

impl bulk_read::HostReader for HostState {
    fn new(&mut self, max_size: u64) -> wasmtime::Result<Resource<Reader>> {
        if self.bulk_read.readers >= MAX_READERS {
            wasmtime::bail!(
                "the plugin holds {MAX_READERS} bulk-read readers at once, the most one call \
                 may hold; it must drop one before creating another"
            );
        }
        let reader = Reader::new(self, max_size)?;
        let reader = self.table.push(reader)?;
        self.bulk_read.readers += 1;
        Ok(reader)
    }

    fn add(
        &mut self,
        reader: Resource<Reader>,
        path: String,
    ) -> wasmtime::Result<Result<(), AddError>> {
        if path.len() > MAX_PATH {
            return Ok(Err(AddError::PathTooLong));
        }
        let budget = &mut self.bulk_read;
        let len = path.len() as u64;
        if budget.paths >= MAX_QUEUED_PATHS || budget.path_bytes + len > MAX_QUEUED_PATH_BYTES {
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
        let deadline = self.deadline;
        let files = self.table.get_mut(&reader)?.take(max, deadline).await;
        self.bulk_read.paths -= files.len() as u64;
        self.bulk_read.path_bytes -= files.iter().map(|f| f.path.len() as u64).sum::<u64>();
        Ok(files)
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
        for seq in std::iter::once(0).chain(2..=AHEAD_FILES as u64) {
            queue.finished.insert(seq, small(seq));
        }
        queue.in_flight = 1;
        assert_eq!(queue.takeable(2), None);
        queue.in_flight = 0;
        assert_eq!(queue.takeable(2), Some(1));
        queue.finished.insert(1, small(1));
        assert_eq!(queue.takeable(2), Some(2));
    }
}
