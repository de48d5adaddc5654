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
//! Memory outside the plugin's own limit is bounded: at most [`AHEAD_BYTES`] read ahead, plus
//! one file of at most that size per worker; larger files (up to the reader's size limit, at
//! most the call's memory limit) are read when the plugin takes them.
//! Threads are bounded too: one call has at most one reader with worker threads; further readers
//! of the same call read on the calling thread when taken from.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File as HostFile;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;

use crate::bindings::cordon::tool::bulk_read::{self, File, ReadError};
use crate::sandbox::HostState;

/// Files read but not yet taken, at most, before the workers wait.
pub(crate) const AHEAD_FILES: usize = 64;
/// Bytes read but not yet taken, at most, before the workers wait.
const AHEAD_BYTES: u64 = 8 << 20;
/// Paths queued and not yet taken, at most; `add` refuses more.
pub(crate) const MAX_QUEUED: u64 = 4096;
/// Worker threads of one reader, at most.
const MAX_WORKERS: usize = 3;

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
    mode: Mode,
}

enum Mode {
    /// Read by worker threads.
    Threaded(Arc<Shared>),
    /// Read on the calling thread when taken (a call's second reader, or no threads).
    Inline(VecDeque<String>),
}

struct Shared {
    queue: Mutex<Queue>,
    /// Workers wait here for paths or room.
    work: Condvar,
    /// The plugin waits here for files.
    ready: tokio::sync::Notify,
    /// Set once by whoever owns the threaded slot of the call, cleared when the reader goes.
    slot: Arc<AtomicBool>,
}

/// A queued file the workers are done with.
enum Slot {
    Read(File),
    /// Larger than the read-ahead bound: read by `take` itself when its turn comes, so the
    /// host never holds more than the bound of read-ahead data plus a bound-sized file per
    /// worker.
    Later(String),
}

impl Slot {
    fn bytes(&self) -> u64 {
        match self {
            Slot::Read(file) => file.contents.as_ref().map_or(0, |c| c.len() as u64),
            Slot::Later(_) => 0,
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
    closed: bool,
}

impl Queue {
    /// How many files from the front can be taken now by a `take` of `want`: all of them once
    /// they are read, or as many as are read in a row when the workers have stopped at the
    /// read-ahead bound (they wait for this `take`, so waiting for more would never end).
    fn takeable(&self, want: usize) -> Option<usize> {
        let in_a_row = (self.next..)
            .take(want)
            .take_while(|seq| self.finished.contains_key(seq))
            .count();
        let at_bound = self.finished.len() >= AHEAD_FILES || self.finished_bytes >= AHEAD_BYTES;
        (in_a_row == want || (in_a_row > 0 && at_bound)).then_some(in_a_row)
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

fn worker(shared: Arc<Shared>, source: Arc<Source>) {
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

impl Reader {
    fn new(state: &mut HostState, max_size: u64) -> wasmtime::Result<Reader> {
        let source = Arc::new(Source {
            roots: roots(state)?,
            max_size: max_size.min(state.limiter.limit()),
        });
        let slot = state.threaded_reader.clone();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get().saturating_sub(1))
            .clamp(1, MAX_WORKERS);
        let mode = if slot
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let shared = Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                work: Condvar::new(),
                ready: tokio::sync::Notify::new(),
                slot,
            });
            let mut started = 0;
            for _ in 0..workers {
                let (shared, source) = (shared.clone(), source.clone());
                let spawned = std::thread::Builder::new()
                    .name("cordon-bulk-read".into())
                    .spawn(move || worker(shared, source));
                if spawned.is_ok() {
                    started += 1;
                }
            }
            if started > 0 {
                Mode::Threaded(shared)
            } else {
                // No thread could be started (the process is at its limit): read inline.
                drop(shared);
                Mode::Inline(VecDeque::new())
            }
        } else {
            Mode::Inline(VecDeque::new())
        };
        Ok(Reader {
            source,
            added: 0,
            taken: 0,
            mode,
        })
    }

    fn add(&mut self, path: String) -> bool {
        if self.added - self.taken >= MAX_QUEUED {
            return false;
        }
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
        true
    }

    async fn take(&mut self, max: u32) -> Vec<File> {
        let want = (max as u64).min(self.added - self.taken) as usize;
        let want = want.min(AHEAD_FILES);
        if want == 0 {
            return Vec::new();
        }
        let files: Vec<File> = match &mut self.mode {
            Mode::Inline(pending) => pending
                .drain(..want)
                .map(|path| File {
                    contents: read_file(&self.source, &path),
                    path,
                })
                .collect(),
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
        files
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Mode::Threaded(shared) = &self.mode {
            lock(shared).closed = true;
            shared.work.notify_all();
            shared.slot.store(false, Ordering::Release);
        }
    }
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
        let reader = Reader::new(self, max_size)?;
        Ok(self.table.push(reader)?)
    }

    fn add(&mut self, reader: Resource<Reader>, path: String) -> wasmtime::Result<bool> {
        Ok(self.table.get_mut(&reader)?.add(path))
    }

    fn queued(&mut self, reader: Resource<Reader>) -> wasmtime::Result<u32> {
        let reader = self.table.get(&reader)?;
        Ok((reader.added - reader.taken) as u32)
    }

    async fn take(&mut self, reader: Resource<Reader>, max: u32) -> wasmtime::Result<Vec<File>> {
        Ok(self.table.get_mut(&reader)?.take(max).await)
    }

    fn drop(&mut self, reader: Resource<Reader>) -> wasmtime::Result<()> {
        self.table.delete(reader)?;
        Ok(())
    }
}
