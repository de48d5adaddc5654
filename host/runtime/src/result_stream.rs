//! `cordon:tool/result-stream` (WIT 0.1.4): what a call writes of its result as it goes,
//! kept in an unnamed file in the spool directory instead of memory. The call's output limit
//! bounds it; past the limit, or on a write of the other kind, the write is refused with the
//! reason, and the call fails when it ends (a plugin that ignores the refusal gains nothing).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use cordon_core::{Written, format_bytes};

use crate::bindings::cordon::tool::result_stream::PieceKind;

/// What one call has written so far.
#[derive(Debug)]
pub(crate) struct ResultSpool {
    /// Where the file is made, on the first write.
    dir: PathBuf,
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
    pub(crate) fn new(dir: PathBuf, limit: u64) -> ResultSpool {
        ResultSpool {
            dir,
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
        let written = match &mut self.file {
            Some(file) => file.write_all(chunk.as_bytes()),
            None => spool_file(&self.dir).and_then(|mut file| {
                file.write_all(chunk.as_bytes())?;
                self.file = Some(file);
                Ok(())
            }),
        };
        if let Err(e) = written {
            let broken = Broken::Host(format!(
                "the host could not keep the written result in {}: {e}",
                self.dir.display()
            ));
            let reason = self.reason(&broken);
            self.broken = Some(broken);
            return Err(reason);
        }
        self.bytes = after;
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
        if let Some(broken) = self.broken.take() {
            return Err(broken);
        }
        Ok(match (file, kind) {
            (Some(file), Some(kind)) => Some(Written::new(file, bytes, kind == PieceKind::Json)),
            // A call that wrote only empty chunks wrote an empty piece.
            (None, Some(kind)) => spool_file(&self.dir)
                .ok()
                .map(|file| Written::new(file, 0, kind == PieceKind::Json)),
            _ => None,
        })
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

    fn spool(limit: u64) -> ResultSpool {
        ResultSpool::new(std::env::temp_dir(), limit)
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
        let mut s = ResultSpool::new(dir.path().join("spool"), 100);
        s.write(PieceKind::Text, "abc").unwrap();
        assert!(dir.path().join("spool").is_dir());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let mut s = ResultSpool::new(file.join("spool"), 100);
        let e = s.write(PieceKind::Text, "abc").unwrap_err();
        assert!(e.contains("could not keep the written result"), "{e}");
        assert!(matches!(s.finish(), Err(Broken::Host(_))));
    }
}
