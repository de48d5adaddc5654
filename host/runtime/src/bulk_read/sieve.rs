//! A sifting reader's needles: searched for on the workers, so that only files with one
//! of them are handed over whole.

use aho_corasick::{AhoCorasick, AhoCorasickKind};

use super::PassedOver;
use crate::caps::{MAX_ALL_NEEDLE_BYTES, MAX_NEEDLE_BYTES, MAX_NEEDLES, MAX_SIEVE_MEMORY};

/// The needles of a sifting reader, searched for in every file it reads.
#[derive(Debug)]
pub(super) struct Sieve {
    needles: AhoCorasick,
}

impl Sieve {
    /// The sieve for the needles in `flat` of `lengths` (none for no needles), or what is
    /// wrong with them.
    pub(super) fn new(flat: &[u8], lengths: &[u32]) -> Result<Option<Sieve>, String> {
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
    pub(super) fn passes_over(&self, contents: &[u8]) -> Option<PassedOver> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
