//! A result piece a plugin wrote through `cordon:tool/result-stream` (WIT 0.1.4): kept in an
//! unnamed temporary file while the call's result is handed on, so that a large result (a
//! query's 50 MB of rows) is never held whole in the host's memory. Whoever takes the result
//! reads the piece in parts: the conversation keeps it in its store, MCP serves it as a
//! resource, `cordon call` copies it out.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A written piece: its bytes in a file no other process can name, and what it is. Clones
/// share the file; it is removed when the last clone goes (it was never linked).
#[derive(Debug, Clone)]
pub struct Written {
    file: Arc<File>,
    bytes: u64,
    json: bool,
    /// What the piece holds while it lives (the room it takes in the host's spool), dropped
    /// with the last clone.
    held: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl PartialEq for Written {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
    }
}

impl Written {
    /// The piece of `bytes` bytes held in `file` (from its start), JSON when `json`.
    pub fn new(file: File, bytes: u64, json: bool) -> Written {
        Written {
            file: Arc::new(file),
            bytes,
            json,
            held: None,
        }
    }

    /// The same piece, holding `held` until its last clone is dropped.
    pub fn holding(mut self, held: Arc<dyn std::any::Any + Send + Sync>) -> Written {
        self.held = Some(held);
        self
    }

    /// The piece's length in bytes.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether the piece is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Whether the piece is a JSON document (else plain text).
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// A reader of the whole piece from its start. Readers are independent of each other
    /// (each keeps its own position), so several may read the same piece at once.
    pub fn reader(&self) -> WrittenReader {
        WrittenReader {
            file: self.file.clone(),
            at: 0,
            end: self.bytes,
        }
    }

    /// Up to `length` bytes from `offset`; fewer at the end.
    pub fn read_at(&self, offset: u64, length: usize) -> io::Result<Vec<u8>> {
        let length = length.min(self.bytes.saturating_sub(offset) as usize);
        let mut buf = vec![0; length];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// The whole piece as text. Only for callers that hold results in memory anyway: the
    /// output limit bounds it, but a large piece is best read in parts.
    pub fn to_text(&self) -> io::Result<String> {
        let mut text = String::with_capacity(self.bytes as usize);
        self.reader().read_to_string(&mut text)?;
        Ok(text)
    }
}

/// Reads a [`Written`] piece from its start; see [`Written::reader`].
#[derive(Debug)]
pub struct WrittenReader {
    file: Arc<File>,
    at: u64,
    end: u64,
}

impl Read for WrittenReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = (self.end - self.at).min(buf.len() as u64) as usize;
        if room == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..room], self.at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a written result piece is shorter than its recorded length",
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn piece(text: &str) -> Written {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        Written::new(file, text.len() as u64, false)
    }

    #[test]
    fn readers_are_independent_and_stop_at_the_length() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"hello world and more").unwrap();
        // Bytes past the recorded length are not part of the piece.
        let w = Written::new(file, 11, false);
        let mut a = w.reader();
        let mut first = [0u8; 5];
        a.read_exact(&mut first).unwrap();
        assert_eq!(w.to_text().unwrap(), "hello world");
        let mut rest = String::new();
        a.read_to_string(&mut rest).unwrap();
        assert_eq!((&first, rest.as_str()), (b"hello", " world"));
        assert_eq!(w.read_at(6, 100).unwrap(), b"world");
        assert_eq!(w.read_at(50, 10).unwrap(), b"");
    }

    #[test]
    fn clones_share_the_file() {
        let w = piece("abc");
        let c = w.clone();
        assert_eq!(w, c);
        assert_ne!(w, piece("abc"));
        drop(w);
        assert_eq!(c.to_text().unwrap(), "abc");
    }
}
