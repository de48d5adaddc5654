//! A reader's queue of paths and the worker threads that read ahead of the plugin's takes
//! (within the read-ahead caps), or the inline reading of readers without workers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::paths::{open_regular, read_contents, read_file, roots};
use super::sieve::Sieve;
use super::{BulkReadParts, File, PassedOver, ReadError, Source};
use crate::caps::{
    BULK_READ_AHEAD_BYTES, BULK_READ_AHEAD_FILES, MAX_BULK_READ_WORKERS,
    MAX_BULK_READ_WORKERS_PER_READER,
};

/// Worker threads alive in the process.
static LIVE_WORKERS: AtomicUsize = AtomicUsize::new(0);

/// A file as a take hands it over, before it becomes a WIT `file` or `sifted-file`.
pub(crate) enum Taken {
    Whole(String, Result<Vec<u8>, ReadError>),
    PassedOver(String, PassedOver),
}

impl Taken {
    pub(super) fn path(&self) -> &str {
        match self {
            Taken::Whole(path, _) | Taken::PassedOver(path, _) => path,
        }
    }

    /// `contents` of the file at `path` as handed over: sifted if `sifted` and the reader has
    /// needles.
    pub(super) fn of(
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
    pub(super) source: Arc<Source>,
    /// Sequence numbers: paths queued so far, and files taken so far.
    pub(super) added: u64,
    pub(super) taken: u64,
    /// Bytes of the paths queued and not yet taken.
    pub(super) queued_path_bytes: u64,
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
    pub(super) fn new(
        parts: &mut BulkReadParts<'_>,
        max_size: u64,
        sieve: Option<Sieve>,
    ) -> wasmtime::Result<Reader> {
        let source = Arc::new(Source {
            roots: roots(parts.preopens),
            max_size: max_size.min(parts.memory_limit),
            sieve,
            refused: parts.refused.shared(),
        });
        let slot = parts.budget.threaded.clone();
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

    pub(super) fn add(&mut self, path: String) {
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
    pub(super) async fn take(&mut self, max: u32, deadline: Instant, sifted: bool) -> Vec<Taken> {
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
}
