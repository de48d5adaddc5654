//! Reading a tool result by pages — lines, bytes, or the matches of a pattern — whether the
//! conversation holds it whole or the journal keeps it in parts (a result written through
//! `result-stream`, too large to hold in memory). The pages of `read_result` (see
//! [`crate::spill`]) are made here.
//!
//! A kept result is stored as [`KeptPart`]s of about [`PART_BYTES`], each ending at the end of
//! a line, unless a line is longer than a part (then it is cut between characters and goes on
//! in the next part). Reading touches only the parts a page needs; a search reads them one
//! after another, so the memory it takes is a part's, whatever the result's size.

use std::collections::VecDeque;
use std::io::{self, Read};

use async_trait::async_trait;
use cordon_core::Written;

/// About how large a kept part is.
pub const PART_BYTES: usize = 1 << 20;

/// Lines a page holds at most, whatever the budget.
pub(crate) const MAX_PAGE_LINES: usize = 1_000;
/// Matches a search returns at most.
const MAX_MATCHES: usize = 200;
/// Bytes shown either side of a match.
const AROUND: usize = 100;

/// One part of a kept result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptPart {
    /// Its place among the result's parts, from 0.
    pub index: u64,
    /// The byte offset of its start in the result.
    pub offset: u64,
    /// The line (1-based) its first byte is on.
    pub first_line: u64,
    /// Whether it starts a line (else it goes on with a line longer than a part).
    pub starts_line: bool,
    /// Its text.
    pub text: String,
}

/// Which part of a kept result to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptAt {
    /// The part with this index.
    Index(u64),
    /// The part holding this byte offset.
    Byte(u64),
    /// The part the line with this number (1-based) starts in.
    Line(u64),
}

/// Splits a written piece into the parts a journal keeps, reading it from its start; also
/// counts its lines.
pub struct Parts {
    reader: io::BufReader<cordon_core::WrittenReader>,
    carry: Vec<u8>,
    index: u64,
    offset: u64,
    line: u64,
    starts_line: bool,
    done: bool,
}

impl Parts {
    /// The parts of `written`.
    pub fn of(written: &Written) -> Parts {
        Parts {
            reader: io::BufReader::with_capacity(64 << 10, written.reader()),
            carry: Vec::new(),
            index: 0,
            offset: 0,
            line: 1,
            starts_line: true,
            done: false,
        }
    }

    fn next_part(&mut self) -> io::Result<Option<KeptPart>> {
        if self.done {
            return Ok(None);
        }
        let mut buf = std::mem::take(&mut self.carry);
        let want = PART_BYTES.saturating_sub(buf.len());
        let got = (&mut self.reader).take(want as u64).read_to_end(&mut buf)?;
        let at_end = got < want;
        if buf.is_empty() {
            self.done = true;
            return Ok(None);
        }
        // Cut after the last newline; without one, between characters; at the end, nowhere.
        let cut = if at_end {
            buf.len()
        } else if let Some(nl) = memchr_last(&buf) {
            nl + 1
        } else {
            match std::str::from_utf8(&buf) {
                Ok(_) => buf.len(),
                Err(e) => e.valid_up_to(),
            }
        };
        self.carry = buf.split_off(cut);
        let text = String::from_utf8(buf).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidData, "a written result is not UTF-8")
        })?;
        let part = KeptPart {
            index: self.index,
            offset: self.offset,
            first_line: self.line,
            starts_line: self.starts_line,
            text,
        };
        self.index += 1;
        self.offset += part.text.len() as u64;
        self.line += part.text.bytes().filter(|&b| b == b'\n').count() as u64;
        self.starts_line = part.text.ends_with('\n');
        if at_end && self.carry.is_empty() {
            self.done = true;
        }
        Ok(Some(part))
    }

    /// The lines of what was read so far: call after the last part.
    pub fn lines(&self) -> u64 {
        // A last line without a newline counts as a line.
        if self.starts_line {
            self.line - 1
        } else {
            self.line
        }
    }
}

impl Iterator for Parts {
    type Item = io::Result<KeptPart>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_part() {
            Ok(part) => part.map(Ok),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

fn memchr_last(buf: &[u8]) -> Option<usize> {
    buf.iter().rposition(|&b| b == b'\n')
}

/// The lines of a written piece (a last line without a newline counts), read through once.
pub fn line_count(written: &Written) -> io::Result<u64> {
    let mut reader = written.reader();
    let mut buf = vec![0u8; 64 << 10];
    let (mut newlines, mut last) = (0u64, b'\n');
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        newlines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok(newlines + u64::from(last != b'\n'))
}

/// The first and last bytes of a written piece, for its preview: up to `room` bytes of each,
/// the start cut between characters, the end starting at a line's start (empty when its last
/// `room` bytes hold no line's start).
pub fn ends_of(written: &Written, room: usize) -> io::Result<(String, String)> {
    let mut head = written.read_at(0, room)?;
    if let Err(e) = std::str::from_utf8(&head) {
        head.truncate(e.valid_up_to());
    }
    let head = String::from_utf8(head).unwrap_or_default();
    let from = written.len().saturating_sub(room as u64);
    let bytes = written.read_at(from, room)?;
    let tail = if from == 0 {
        String::from_utf8(bytes).unwrap_or_default()
    } else {
        // From the first line start within it.
        match bytes.iter().position(|&b| b == b'\n') {
            Some(nl) => String::from_utf8(bytes[nl + 1..].to_vec()).unwrap_or_default(),
            None => String::new(),
        }
    };
    Ok((head, tail))
}

/// Results kept in their files for the life of the process: what a journal without a store
/// keeps (`cordon run` without a session), so that a large result is never held in memory
/// there either. The files have no names and go when the result does; the oldest results go
/// first past [`MAX_IN_FILES`] bytes.
#[derive(Debug, Default)]
pub struct InFiles {
    kept: VecDeque<InFile>,
}

/// Bytes of results [`InFiles`] keeps at most, all together.
pub const MAX_IN_FILES: u64 = 1 << 30;
/// Results [`InFiles`] keeps at most: each holds a file open.
pub const MAX_IN_FILES_COUNT: usize = 256;

#[derive(Debug)]
struct InFile {
    id: String,
    written: Written,
    /// Each part's offset, first line, whether it starts a line, and length.
    parts: Vec<(u64, u64, bool, usize)>,
}

impl InFiles {
    /// Keeps `written` under `id` (in place of one kept under it before); its lines.
    pub fn keep(&mut self, id: &str, written: &Written) -> io::Result<u64> {
        let mut split = Parts::of(written);
        let mut parts = Vec::new();
        for part in split.by_ref() {
            let p = part?;
            parts.push((p.offset, p.first_line, p.starts_line, p.text.len()));
        }
        self.kept.retain(|k| k.id != id);
        let mut held: u64 = self.kept.iter().map(|k| k.written.len()).sum();
        while (held + written.len() > MAX_IN_FILES || self.kept.len() >= MAX_IN_FILES_COUNT)
            && let Some(gone) = self.kept.pop_front()
        {
            held -= gone.written.len();
        }
        self.kept.push_back(InFile {
            id: id.to_string(),
            written: written.clone(),
            parts,
        });
        Ok(split.lines())
    }

    /// The part at `at` of the result kept under `id`.
    pub fn part(&self, id: &str, at: KeptAt) -> io::Result<Option<KeptPart>> {
        let Some(kept) = self.kept.iter().find(|k| k.id == id) else {
            return Ok(None);
        };
        let index = match at {
            KeptAt::Index(i) => usize::try_from(i).ok().filter(|&i| i < kept.parts.len()),
            KeptAt::Byte(b) => kept
                .parts
                .iter()
                .rposition(|p| p.0 <= b)
                .filter(|_| b < kept.written.len()),
            KeptAt::Line(l) => kept
                .parts
                .iter()
                .rposition(|p| p.1 < l || (p.1 == l && p.2)),
        };
        let Some(i) = index else {
            return Ok(None);
        };
        let (offset, first_line, starts_line, len) = kept.parts[i];
        let text = String::from_utf8(kept.written.read_at(offset, len)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(Some(KeptPart {
            index: i as u64,
            offset,
            first_line,
            starts_line,
            text,
        }))
    }
}

/// What keeps results apart from the conversation: the journal, as the driver lends it.
#[async_trait]
pub trait KeptParts: Send {
    /// The part at `at` of the result kept under `id`, or None past its end (or when nothing
    /// is kept under `id`); Err says why it could not be read.
    async fn kept_part(&mut self, id: &str, at: KeptAt) -> Result<Option<KeptPart>, String>;
}

/// Keeps nothing: for conversations whose results are all held whole.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoParts;

#[async_trait]
impl KeptParts for NoParts {
    async fn kept_part(&mut self, _: &str, _: KeptAt) -> Result<Option<KeptPart>, String> {
        Ok(None)
    }
}

/// Where a page is read from.
#[async_trait]
pub trait Source: Send {
    /// The result's length in bytes.
    fn bytes(&self) -> u64;
    /// Its lines (a last line without a newline counts).
    fn lines(&self) -> u64;
    /// The part at `at`, or None past the end.
    async fn part(&mut self, at: KeptAt) -> Result<Option<KeptPart>, String>;
}

/// A result the conversation holds whole: one part.
pub struct Whole<'a> {
    text: &'a str,
    lines: u64,
}

impl<'a> Whole<'a> {
    /// `text` as a source.
    pub fn new(text: &'a str) -> Whole<'a> {
        Whole {
            text,
            lines: text.lines().count() as u64,
        }
    }
}

#[async_trait]
impl Source for Whole<'_> {
    fn bytes(&self) -> u64 {
        self.text.len() as u64
    }

    fn lines(&self) -> u64 {
        self.lines
    }

    async fn part(&mut self, at: KeptAt) -> Result<Option<KeptPart>, String> {
        let first = match at {
            KeptAt::Index(i) => i == 0,
            KeptAt::Byte(b) => b < self.text.len() as u64,
            KeptAt::Line(l) => l >= 1 && l <= self.lines.max(1),
        };
        // A copy: results held whole are at most what a plugin may return at once (16 MiB).
        Ok(first.then(|| KeptPart {
            index: 0,
            offset: 0,
            first_line: 1,
            starts_line: true,
            text: self.text.to_string(),
        }))
    }
}

/// Pages of `source`: lines `from`.. (1-based, `want` of them), each with its number, within
/// `room` bytes.
pub async fn lines(
    source: &mut dyn Source,
    from: u64,
    want: u64,
    room: usize,
) -> Result<String, String> {
    let total = source.lines();
    if from > total {
        return Err(format!(
            "the result has {total} lines; `from_line` is past its end"
        ));
    }
    let want = want.clamp(1, MAX_PAGE_LINES as u64);
    let mut out = String::new();
    let mut last = from - 1;
    let mut part = source.part(KeptAt::Line(from)).await?;
    'parts: while let Some(p) = part {
        let text = &p.text;
        let mut number = p.first_line;
        let mut at = p.offset;
        let mut segments = text.split_inclusive('\n').peekable();
        if !p.starts_line {
            // The end of a line that began in an earlier part.
            if let Some(s) = segments.next() {
                at += s.len() as u64;
                number += 1;
            }
        }
        while let Some(segment) = segments.next() {
            let start = at;
            at += segment.len() as u64;
            let i = number;
            number += 1;
            if i < from {
                continue;
            }
            if i >= from + want {
                break 'parts;
            }
            // A line going on in the next part is longer than a part, so than any page.
            let cut_off =
                segments.peek().is_none() && !segment.ends_with('\n') && at < source.bytes();
            let line = segment.trim_end_matches(['\n', '\r']);
            let entry = format!("{i}: {line}\n");
            if cut_off || out.len() + entry.len() > room {
                if out.is_empty() {
                    return Err(format!(
                        "line {i} is longer than a page; read it by bytes from `offset` {start}"
                    ));
                }
                break 'parts;
            }
            out.push_str(&entry);
            last = i;
        }
        part = source.part(KeptAt::Index(p.index + 1)).await?;
    }
    if last < total {
        out.push_str(&format!("[lines {}-{total} follow]\n", last + 1));
    }
    Ok(out)
}

/// Bytes `offset`..`offset + length` (cut to whole characters), within `room`.
pub async fn bytes(
    source: &mut dyn Source,
    offset: u64,
    length: Option<u64>,
    room: usize,
) -> Result<String, String> {
    let total = source.bytes();
    if offset >= total {
        return Err(format!(
            "the result has {total} bytes; `offset` is past its end"
        ));
    }
    let length = length.unwrap_or(room as u64).min(room as u64) as usize;
    let mut taken = String::new();
    let mut start = None;
    let mut part = source.part(KeptAt::Byte(offset)).await?;
    while let Some(p) = part {
        let text = &p.text;
        let mut from = match start {
            None => (offset - p.offset) as usize,
            Some(_) => 0,
        };
        while !text.is_char_boundary(from) {
            from -= 1;
        }
        start.get_or_insert(p.offset + from as u64);
        let mut end = (from + length - taken.len()).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        taken.push_str(&text[from..end]);
        if taken.len() >= length || end < text.len() {
            break;
        }
        part = source.part(KeptAt::Index(p.index + 1)).await?;
    }
    let start = start.unwrap_or(offset);
    Ok(format!(
        "[bytes {start}-{} of {total}]\n{taken}",
        start + taken.len() as u64
    ))
}

/// Each match of `pattern` with up to [`AROUND`] bytes either side (within its part), its
/// byte offset and line; a match too long for a page is named by its offset and length. A
/// match cannot span two parts.
pub async fn search(source: &mut dyn Source, pattern: &str, room: usize) -> Result<String, String> {
    let re = regex::RegexBuilder::new(pattern)
        .multi_line(true)
        // A pattern is the model's: its compiled size is bounded.
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| format!("`pattern` is not a regular expression (or too large): {e}"))?;
    let mut out = String::new();
    let mut found = 0;
    let mut part = source.part(KeptAt::Index(0)).await?;
    'parts: while let Some(p) = part {
        let content = &p.text;
        let mut line = p.first_line;
        let mut counted_to = 0;
        for m in re.find_iter(content) {
            if found == MAX_MATCHES {
                out.push_str("[more matches; narrow the pattern]\n");
                break 'parts;
            }
            line += content[counted_to..m.start()].matches('\n').count() as u64;
            counted_to = m.start();
            let mut from = m.start().saturating_sub(AROUND);
            while !content.is_char_boundary(from) {
                from -= 1;
            }
            let mut to = (m.end() + AROUND).min(content.len());
            while !content.is_char_boundary(to) {
                to -= 1;
            }
            let offset = p.offset + m.start() as u64;
            let mut entry = format!(
                "offset {offset} (line {line}): {}\n",
                content[from..to].replace('\n', "⏎")
            );
            if entry.len() > room.saturating_sub(out.len()) && m.len() + 2 * AROUND > room / 2 {
                // The match itself is too long to show here.
                entry = format!(
                    "offset {offset} (line {line}): a match of {} bytes; read it by bytes\n",
                    m.len()
                );
            }
            if out.len() + entry.len() > room {
                out.push_str("[more matches; narrow the pattern]\n");
                break 'parts;
            }
            out.push_str(&entry);
            found += 1;
        }
        part = source.part(KeptAt::Index(p.index + 1)).await?;
    }
    if found == 0 && out.is_empty() {
        return Ok(format!(
            "nothing in the {} bytes matches `{pattern}`",
            source.bytes()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn written(text: &str) -> Written {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        Written::new(file, text.len() as u64, false)
    }

    /// A result kept in its file, read as a journal hands it back.
    struct Kept {
        files: InFiles,
        parts: Vec<KeptPart>,
        bytes: u64,
        lines: u64,
    }

    impl Kept {
        fn of(text: &str) -> Kept {
            let w = written(text);
            let mut files = InFiles::default();
            let lines = files.keep("c1", &w).unwrap();
            let parts = Parts::of(&w).collect::<io::Result<Vec<_>>>().unwrap();
            Kept {
                files,
                parts,
                bytes: w.len(),
                lines,
            }
        }
    }

    #[async_trait]
    impl Source for Kept {
        fn bytes(&self) -> u64 {
            self.bytes
        }
        fn lines(&self) -> u64 {
            self.lines
        }
        async fn part(&mut self, at: KeptAt) -> Result<Option<KeptPart>, String> {
            self.files.part("c1", at).map_err(|e| e.to_string())
        }
    }

    fn rows(n: usize) -> String {
        (1..=n)
            .map(|i| format!("row-{i}|{}\n", "x".repeat(40)))
            .collect()
    }

    #[test]
    fn parts_end_at_lines_and_count_them() {
        let text = rows(60_000); // ~3 MiB
        let kept = Kept::of(&text);
        assert!(kept.parts.len() >= 3, "{}", kept.parts.len());
        assert_eq!(kept.lines, 60_000);
        let mut offset = 0;
        let mut line = 1;
        for p in &kept.parts {
            assert!(p.text.ends_with('\n') && p.starts_line);
            assert_eq!((p.offset, p.first_line), (offset, line));
            offset += p.text.len() as u64;
            line += p.text.matches('\n').count() as u64;
        }
        assert_eq!(offset, text.len() as u64);
        // A line longer than a part is cut between characters and goes on.
        let long = format!("a\n{}\nb", "é".repeat(PART_BYTES));
        let kept = Kept::of(&long);
        assert_eq!(kept.lines, 3);
        // "a\n" alone (the window's last newline), then the long line in two parts.
        assert_eq!(kept.parts[0].text, "a\n");
        assert!(kept.parts[1].starts_line && kept.parts[1].first_line == 2);
        assert!(!kept.parts[2].starts_line && kept.parts[2].first_line == 2);
        assert_eq!(
            kept.parts
                .iter()
                .map(|p| p.text.as_str())
                .collect::<String>(),
            long
        );
    }

    #[tokio::test]
    async fn kept_parts_page_like_a_whole_result() {
        let text = rows(60_000);
        let mut kept = Kept::of(&text);
        let mut whole = Whole::new(&text);
        for (from, want) in [(1, 3), (25_000, 5), (59_999, 10)] {
            let a = lines(&mut kept, from, want, 10_000).await.unwrap();
            let b = lines(&mut whole, from, want, 10_000).await.unwrap();
            assert_eq!(a, b);
            assert!(a.starts_with(&format!("{from}: row-{from}|")), "{a}");
        }
        // A page that starts in one part and ends in the next.
        let boundary = kept.parts[1].first_line - 2;
        let page = lines(&mut kept, boundary, 4, 10_000).await.unwrap();
        assert_eq!(page.lines().count(), 5, "{page}");
        for at in [0u64, kept.parts[1].offset - 10, text.len() as u64 - 5] {
            let a = bytes(&mut kept, at, Some(50), 10_000).await.unwrap();
            let b = bytes(&mut whole, at, Some(50), 10_000).await.unwrap();
            assert_eq!(a, b);
        }
        let a = search(&mut kept, "^row-45678\\|", 10_000).await.unwrap();
        let b = search(&mut whole, "^row-45678\\|", 10_000).await.unwrap();
        assert_eq!(a, b);
        assert!(a.contains("(line 45678)"), "{a}");
        assert!(lines(&mut kept, 60_001, 1, 1_000).await.is_err());
        assert!(
            bytes(&mut kept, text.len() as u64, None, 1_000)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_line_longer_than_a_part_is_read_by_bytes() {
        let long = format!("a\n{}\nb\n", "é".repeat(PART_BYTES));
        let mut kept = Kept::of(&long);
        let e = lines(&mut kept, 2, 1, 10_000).await.unwrap_err();
        assert!(
            e.contains("line 2 is longer than a page") && e.contains("`offset` 2"),
            "{e}"
        );
        let last = lines(&mut kept, 3, 1, 10_000).await.unwrap();
        assert_eq!(last, "3: b\n");
    }

    #[test]
    fn ends_are_the_start_and_whole_last_lines() {
        let text = rows(10_000);
        let w = written(&text);
        let (head, tail) = ends_of(&w, 1_000).unwrap();
        assert!(head.starts_with("row-1|") && head.len() == 1_000);
        assert!(
            tail.starts_with("row-") && tail.contains("row-10000|"),
            "{tail}"
        );
        assert!(tail.len() <= 1_000);
    }
}
