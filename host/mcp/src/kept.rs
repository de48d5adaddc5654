//! Results too long to send whole over MCP. The client gets a preview (the result's first
//! and last lines, with its size) and a `resource_link` to `cordon://results/ID`, which it
//! reads with `resources/read`. The host keeps the whole text for the client that got it:
//! another client (another token, another name) cannot read it, and what is kept is bounded
//! in count and bytes, the oldest going first; a link whose result went says so.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The scheme and path every link starts with.
pub const URI_PREFIX: &str = "cordon://results/";

/// Results kept at most.
const MAX_KEPT: usize = 256;
/// Bytes kept at most, all results together; a single result larger than this is not kept
/// (its preview says so).
const MAX_KEPT_BYTES: usize = 256 << 20;

/// Who a result was given to: the token the call came with and the client's name.
pub type Owner = (Option<String>, String);

struct Entry {
    id: String,
    owner: Owner,
    text: Arc<str>,
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
}

impl Kept {
    /// Keeps `text` for `owner`; its link, or `None` when it is too large to keep.
    pub fn keep(&self, owner: Owner, text: String) -> Option<String> {
        if text.len() > MAX_KEPT_BYTES {
            return None;
        }
        let id = format!("{:016x}", rand::random::<u64>());
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes: usize = entries.iter().map(|e| e.text.len()).sum();
        while !entries.is_empty()
            && (entries.len() >= MAX_KEPT || bytes + text.len() > MAX_KEPT_BYTES)
        {
            if let Some(gone) = entries.pop_front() {
                bytes -= gone.text.len();
            }
        }
        entries.push_back(Entry {
            id: id.clone(),
            owner,
            text: text.into(),
        });
        Some(format!("{URI_PREFIX}{id}"))
    }

    /// The text behind `uri`, for `owner`.
    pub fn read(&self, uri: &str, owner: &Owner) -> Result<Arc<str>, Unreadable> {
        let id = uri.strip_prefix(URI_PREFIX).ok_or(Unreadable::NotOurs)?;
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .find(|e| e.id == id && e.owner == *owner)
            .map(|e| e.text.clone())
            .ok_or(Unreadable::Gone)
    }
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
}
