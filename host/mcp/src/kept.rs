//! Results too long to send whole over MCP. The client gets a preview (the result's first
//! and last lines, with its size) and a `resource_link` to `cordon://results/ID`, which it
//! reads with `resources/read`. The host keeps the whole text for the client that got it:
//! another client (another token, another name) cannot read it, and what is kept is bounded
//! in count and bytes, the oldest going first; a link whose result went says so.
//!
//! A result the plugin wrote as it went (`result-stream`) stays in its file, never in memory:
//! one larger than [`MAX_WHOLE_READ`] is read in parts of [`PART_BYTES`], as `ID?part=N`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use cordon_core::Written;

/// The scheme and path every link starts with.
pub const URI_PREFIX: &str = "cordon://results/";

/// Results kept at most.
const MAX_KEPT: usize = 256;
/// Bytes kept at most, all results together; a single result larger than this is not kept
/// (its preview says so).
const MAX_KEPT_BYTES: usize = 256 << 20;
/// Bytes of written results kept at most (in their files, on disk).
const MAX_KEPT_WRITTEN_BYTES: u64 = 1 << 30;
/// The largest written result read whole; larger ones are read in parts.
pub const MAX_WHOLE_READ: u64 = 8 << 20;
/// What one part of a written result holds (less, to end between characters).
pub const PART_BYTES: u64 = 1 << 20;

/// Who a result was given to: the token the call came with and the client's name.
pub type Owner = (Option<String>, String);

struct Entry {
    id: String,
    owner: Owner,
    body: Body,
}

/// What a link reads.
#[derive(Clone)]
enum Body {
    Text(Arc<str>),
    Written(Written),
}

impl Entry {
    /// Its bytes in memory, and in a file.
    fn sizes(&self) -> (usize, u64) {
        match &self.body {
            Body::Text(t) => (t.len(), 0),
            Body::Written(w) => (0, w.len()),
        }
    }
}

/// The results kept for reading.
#[derive(Default)]
pub struct Kept {
    entries: Mutex<VecDeque<Entry>>,
}

/// Why a link cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// Not a link this host gives.
    NotOurs,
    /// Not kept (any more), or another client's.
    Gone,
    /// A written result too large to read whole: how many parts to read it in.
    InParts(u64),
    /// Past the last part: how many there are.
    NoSuchPart(u64),
    /// Its file could not be read.
    Failed(String),
}

impl Kept {
    /// Keeps `text` for `owner`; its link, or `None` when it is too large to keep.
    pub fn keep(&self, owner: Owner, text: String) -> Option<String> {
        if text.len() > MAX_KEPT_BYTES {
            return None;
        }
        Some(self.push(owner, Body::Text(text.into())))
    }

    /// Keeps a written result for `owner`, in its file; its link, or `None` when it is too
    /// large to keep.
    pub fn keep_written(&self, owner: Owner, written: Written) -> Option<String> {
        if written.len() > MAX_KEPT_WRITTEN_BYTES {
            return None;
        }
        Some(self.push(owner, Body::Written(written)))
    }

    fn push(&self, owner: Owner, body: Body) -> String {
        let id = format!("{:016x}", rand::random::<u64>());
        let entry = Entry {
            id: id.clone(),
            owner,
            body,
        };
        let (memory, file) = entry.sizes();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let (mut held, mut filed) = entries
            .iter()
            .map(Entry::sizes)
            .fold((0, 0), |(a, b), (m, f)| (a + m, b + f));
        while !entries.is_empty()
            && (entries.len() >= MAX_KEPT
                || held + memory > MAX_KEPT_BYTES
                || filed + file > MAX_KEPT_WRITTEN_BYTES)
        {
            if let Some(gone) = entries.pop_front() {
                let (m, f) = gone.sizes();
                held -= m;
                filed -= f;
            }
        }
        entries.push_back(entry);
        format!("{URI_PREFIX}{id}")
    }

    /// The text behind `uri` for `owner`: a result kept whole, or a part (`ID?part=N`) of a
    /// written one (whole only up to [`MAX_WHOLE_READ`]).
    pub fn read(&self, uri: &str, owner: &Owner) -> Result<Arc<str>, Unreadable> {
        let rest = uri.strip_prefix(URI_PREFIX).ok_or(Unreadable::NotOurs)?;
        let (id, part) = match rest.split_once("?part=") {
            Some((id, n)) => (id, Some(n.parse::<u64>().map_err(|_| Unreadable::Gone)?)),
            None => (rest, None),
        };
        let body = {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries
                .iter()
                .find(|e| e.id == id && e.owner == *owner)
                .map(|e| e.body.clone())
                .ok_or(Unreadable::Gone)?
        };
        match (body, part) {
            (Body::Text(text), None) => Ok(text),
            (Body::Text(_), Some(_)) => Err(Unreadable::Gone),
            (Body::Written(w), None) if w.len() <= MAX_WHOLE_READ => w
                .to_text()
                .map(Arc::from)
                .map_err(|e| Unreadable::Failed(e.to_string())),
            (Body::Written(w), None) => Err(Unreadable::InParts(parts_of(&w))),
            (Body::Written(w), Some(n)) if n >= parts_of(&w) => {
                Err(Unreadable::NoSuchPart(parts_of(&w)))
            }
            (Body::Written(w), Some(n)) => part_of(&w, n)
                .map(Arc::from)
                .map_err(|e| Unreadable::Failed(e.to_string())),
        }
    }
}

/// How many parts a written result is read in.
pub fn parts_of(written: &Written) -> u64 {
    written.len().div_ceil(PART_BYTES).max(1)
}

/// Part `n`: the bytes from `n` × [`PART_BYTES`] to the next part's start, each moved back to
/// the start of the character it falls in, so the parts put together are the whole result.
fn part_of(written: &Written, n: u64) -> std::io::Result<String> {
    let start = char_start(written, n * PART_BYTES)?;
    let end = char_start(written, (n + 1) * PART_BYTES)?;
    let bytes = written.read_at(start, (end - start) as usize)?;
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `at`, or the start of the character `at` falls in (at most 3 bytes back); the end at or
/// past the end.
fn char_start(written: &Written, at: u64) -> std::io::Result<u64> {
    if at >= written.len() {
        return Ok(written.len());
    }
    let from = at.saturating_sub(3);
    let bytes = written.read_at(from, (at - from + 1) as usize)?;
    // Continuation bytes are 10xxxxxx.
    let back = bytes
        .iter()
        .rev()
        .take_while(|&&b| b & 0xC0 == 0x80)
        .count() as u64;
    Ok(at - back)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> Owner {
        (Some("ops".into()), name.into())
    }

    #[test]
    fn a_result_is_read_by_the_client_it_was_given_to_only() {
        let kept = Kept::default();
        let link = kept.keep(owner("a"), "whole text".into()).unwrap();
        assert!(link.starts_with(URI_PREFIX));
        assert_eq!(&*kept.read(&link, &owner("a")).unwrap(), "whole text");
        assert_eq!(kept.read(&link, &owner("b")).unwrap_err(), Unreadable::Gone);
        assert_eq!(
            kept.read(&link, &(None, "a".into())).unwrap_err(),
            Unreadable::Gone
        );
        assert_eq!(
            kept.read("file:///etc/passwd", &owner("a")).unwrap_err(),
            Unreadable::NotOurs
        );
    }

    #[test]
    fn what_is_kept_is_bounded_the_oldest_going_first() {
        let kept = Kept::default();
        let first = kept.keep(owner("a"), "x".into()).unwrap();
        for _ in 0..MAX_KEPT {
            kept.keep(owner("a"), "y".into()).unwrap();
        }
        assert_eq!(
            kept.read(&first, &owner("a")).unwrap_err(),
            Unreadable::Gone
        );
        assert_eq!(kept.entries.lock().unwrap().len(), MAX_KEPT);
        let big = "z".repeat(MAX_KEPT_BYTES / 2 + 1);
        let one = kept.keep(owner("a"), big.clone()).unwrap();
        let two = kept.keep(owner("a"), big).unwrap();
        assert!(kept.read(&one, &owner("a")).is_err() && kept.read(&two, &owner("a")).is_ok());
        assert_eq!(kept.keep(owner("a"), "w".repeat(MAX_KEPT_BYTES + 1)), None);
    }

    #[test]
    fn a_large_written_result_is_read_in_parts_that_make_it_whole() {
        use std::io::Write;
        // Three-byte characters across every part boundary.
        let text = "€".repeat((MAX_WHOLE_READ as usize / 3) + 1000);
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let written = Written::new(file, text.len() as u64, false);
        let kept = Kept::default();
        let link = kept.keep_written(owner("a"), written.clone()).unwrap();
        let n = parts_of(&written);
        assert_eq!(
            kept.read(&link, &owner("a")).unwrap_err(),
            Unreadable::InParts(n)
        );
        let mut whole = String::new();
        for i in 0..n {
            whole.push_str(&kept.read(&format!("{link}?part={i}"), &owner("a")).unwrap());
        }
        assert_eq!(whole, text);
        assert_eq!(
            kept.read(&format!("{link}?part={n}"), &owner("a"))
                .unwrap_err(),
            Unreadable::NoSuchPart(n)
        );
        assert_eq!(
            kept.read(&format!("{link}?part=0"), &owner("b"))
                .unwrap_err(),
            Unreadable::Gone
        );
    }
}
