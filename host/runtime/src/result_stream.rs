//! `cordon:tool/result-stream` (WIT 0.1.4): what a call writes of its result as it goes,
//! kept in an unnamed file in the spool directory instead of memory. The call's output limit
//! bounds it, and the process's [`MAX_SPOOLED_BYTES`] bounds all calls' together until their
//! results are dropped (the spool shares its disk with the home's store and audit log); past
//! either, or on a write of the other kind, the write is refused with the reason, and the call
//! fails when it ends (a plugin that ignores the refusal gains nothing).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cordon_core::{Written, format_bytes};

use crate::bindings::cordon::tool::result_stream::PieceKind;

/// Bytes of written results the process holds at most, all calls together, until the
/// results are dropped.
pub(crate) const MAX_SPOOLED_BYTES: u64 = 4 << 30;

/// The process's spool: where written results go, and how many bytes of them are held.
#[derive(Debug)]
pub(crate) struct Spool {
    dir: PathBuf,
    held: AtomicU64,
    most: u64,
}

impl Spool {
    pub(crate) fn new(dir: PathBuf) -> Spool {
        Spool {
            dir,
            held: AtomicU64::new(0),
            most: MAX_SPOOLED_BYTES,
        }
    }

    /// Takes `bytes` more of the process's room, or says it is full.
    fn take(&self, bytes: u64) -> bool {
        let before = self.held.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > self.most {
            self.held.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn give_back(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The room a handed-on result takes in the spool, given back when the result is dropped.
#[derive(Debug)]
struct Held {
    spool: Arc<Spool>,
    bytes: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.spool.give_back(self.bytes);
    }
}

/// What one call has written so far.
#[derive(Debug)]
pub(crate) struct ResultSpool {
    /// Where the file is made, on the first write, and the room it takes.
    spool: Arc<Spool>,
    file: Option<File>,
    kind: Option<PieceKind>,
    bytes: u64,
    limit: u64,
    /// Why the written piece is no good, once a write was refused or failed.
    broken: Option<Broken>,
}

/// Why a call's written piece cannot be its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Broken {
    /// It would pass the output limit: the bytes the write would have made.
    OverLimit(u64),
    /// A write of the other kind came after the first.
    Mixed,
    /// The host could not keep it (its disk, say).
    Host(String),
}

impl ResultSpool {
    pub(crate) fn new(spool: Arc<Spool>, limit: u64) -> ResultSpool {
        ResultSpool {
            spool,
            file: None,
            kind: None,
            bytes: 0,
            limit,
            broken: None,
        }
    }

    /// Appends `chunk`; Err says why not (see the module docs).
    pub(crate) fn write(&mut self, kind: PieceKind, chunk: &str) -> Result<(), String> {
        if let Some(broken) = &self.broken {
            return Err(self.reason(broken));
        }
        match self.kind {
            Some(first) if first != kind => {
                self.broken = Some(Broken::Mixed);
                return Err(self.reason(&Broken::Mixed));
            }
            _ => self.kind = Some(kind),
        }
        let after = self.bytes.saturating_add(chunk.len() as u64);
        if after > self.limit {
            let broken = Broken::OverLimit(after);
            let reason = self.reason(&broken);
            self.broken = Some(broken);
            return Err(reason);
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if !self.spool.take(chunk.len() as u64) {
            let broken = Broken::Host(format!(
                "the host holds {} of written results being handed on, the most it holds; \
                 try again once they are done",
                format_bytes(self.spool.most)
            ));
            let reason = self.reason(&broken);
            self.broken = Some(broken);
            return Err(reason);
        }
        let written = match &mut self.file {
            Some(file) => file.write_all(chunk.as_bytes()),
            None => spool_file(&self.spool.dir).and_then(|mut file| {
                file.write_all(chunk.as_bytes())?;
                self.file = Some(file);
                Ok(())
            }),
        };
        // Taken before the write, so a failed write holds room until the call ends, which
        // gives it all back (see `Drop`).
        self.bytes = after;
        if let Err(e) = written {
            let broken = Broken::Host(format!(
                "the host could not keep the written result in {}: {e}",
                self.spool.dir.display()
            ));
            let reason = self.reason(&broken);
            self.broken = Some(broken);
            return Err(reason);
        }
        Ok(())
    }

    fn reason(&self, broken: &Broken) -> String {
        match broken {
            Broken::OverLimit(bytes) => format!(
                "the written result would be {bytes} bytes; the output limit is {}: stop writing",
                format_bytes(self.limit)
            ),
            Broken::Mixed => "the written result was started as one kind (text or json) and \
                              cannot go on as the other"
                .to_string(),
            Broken::Host(why) => why.clone(),
        }
    }

    /// What the call wrote once it ended: nothing, the piece, or why it cannot be used. Leaves
    /// the spool as if nothing had been written.
    pub(crate) fn finish(&mut self) -> Result<Option<Written>, Broken> {
        let (file, kind) = (self.file.take(), self.kind.take());
        let bytes = std::mem::take(&mut self.bytes);
        // The room the piece takes goes with it (or back now, if there is none).
        let held = Held {
            spool: self.spool.clone(),
            bytes,
        };
        if let Some(broken) = self.broken.take() {
            return Err(broken);
        }
        Ok(match (file, kind) {
            (Some(file), Some(kind)) => {
                Some(Written::new(file, bytes, kind == PieceKind::Json).holding(Arc::new(held)))
            }
            // A call that wrote only empty chunks wrote an empty piece.
            (None, Some(kind)) => spool_file(&self.spool.dir)
                .ok()
                .map(|file| Written::new(file, 0, kind == PieceKind::Json)),
            _ => None,
        })
    }
}

impl Drop for ResultSpool {
    /// A call that ended without its result being taken (stopped, failed) gives its room back.
    fn drop(&mut self) {
        self.spool.give_back(self.bytes);
    }
}

/// A file with no name in `dir`, made with `dir` if it is missing.
fn spool_file(dir: &std::path::Path) -> std::io::Result<File> {
    match tempfile::tempfile_in(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            tempfile::tempfile_in(dir)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_room_is_shared_and_given_back_with_the_results() {
        let spool = Arc::new(Spool {
            dir: std::env::temp_dir(),
            held: AtomicU64::new(0),
            most: 10,
        });
        let mut a = ResultSpool::new(spool.clone(), 100);
        a.write(PieceKind::Text, "123456").unwrap();
        let mut b = ResultSpool::new(spool.clone(), 100);
        let e = b.write(PieceKind::Text, "12345").unwrap_err();
        assert!(e.contains("10B of written results"), "{e}");
        // A call stopped before its result was taken gives its room back.
        drop(b);
        let piece = a.finish().unwrap().unwrap();
        assert_eq!(spool.held.load(Ordering::Relaxed), 6);
        let mut c = ResultSpool::new(spool.clone(), 100);
        assert!(c.write(PieceKind::Text, "12345").is_err());
        drop(c);
        // The room goes back once the result (and every clone of it) is dropped.
        let copy = piece.clone();
        drop(piece);
        assert_eq!(spool.held.load(Ordering::Relaxed), 6);
        drop(copy);
        assert_eq!(spool.held.load(Ordering::Relaxed), 0);
        let mut d = ResultSpool::new(spool.clone(), 100);
        d.write(PieceKind::Text, "1234567890").unwrap();
    }

    fn spool(limit: u64) -> ResultSpool {
        ResultSpool::new(Arc::new(Spool::new(std::env::temp_dir())), limit)
    }

    #[test]
    fn writes_become_one_piece_of_the_first_kind() {
        let mut s = spool(100);
        s.write(PieceKind::Json, "{\"a\":").unwrap();
        s.write(PieceKind::Json, "").unwrap();
        s.write(PieceKind::Json, "1}").unwrap();
        let w = s.finish().unwrap().unwrap();
        assert!(w.is_json());
        assert_eq!(w.to_text().unwrap(), "{\"a\":1}");
    }

    #[test]
    fn nothing_written_is_no_piece_and_empty_writes_an_empty_one() {
        assert!(spool(10).finish().unwrap().is_none());
        let mut s = spool(10);
        s.write(PieceKind::Text, "").unwrap();
        let w = s.finish().unwrap().unwrap();
        assert_eq!((w.len(), w.is_json()), (0, false));
    }

    #[test]
    fn the_limit_and_a_change_of_kind_are_refused_for_good() {
        let mut s = spool(5);
        s.write(PieceKind::Text, "abc").unwrap();
        let e = s.write(PieceKind::Text, "def").unwrap_err();
        assert!(e.contains("6 bytes") && e.contains("output limit"), "{e}");
        // Refused from then on, even a write that would fit.
        assert!(s.write(PieceKind::Text, "d").is_err());
        assert_eq!(s.finish().unwrap_err(), Broken::OverLimit(6));

        let mut s = spool(50);
        s.write(PieceKind::Text, "abc").unwrap();
        let e = s.write(PieceKind::Json, "1").unwrap_err();
        assert!(e.contains("kind"), "{e}");
        assert_eq!(s.finish().unwrap_err(), Broken::Mixed);
    }

    #[test]
    fn a_spool_directory_is_made_when_missing_and_a_failure_is_a_clear_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ResultSpool::new(Arc::new(Spool::new(dir.path().join("spool"))), 100);
        s.write(PieceKind::Text, "abc").unwrap();
        assert!(dir.path().join("spool").is_dir());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let mut s = ResultSpool::new(Arc::new(Spool::new(file.join("spool"))), 100);
        let e = s.write(PieceKind::Text, "abc").unwrap_err();
        assert!(e.contains("could not keep the written result"), "{e}");
        assert!(matches!(s.finish(), Err(Broken::Host(_))));
    }
}
