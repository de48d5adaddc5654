//! `search_text`: ripgrep's matcher and searcher over the shared walker, printed like
//! `rg -n` (`path:line:text`, context as `path-line-text`, groups split by `--`).

use std::collections::VecDeque;
use std::io;

use cordon_sdk::ToolError;
use cordon_sdk::bulk_read::{AddError, BulkReader, ReadError, Sifted};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};

use crate::args::{SearchTextArgs, cap};
use crate::find::{PathGlob, check_root, relative, walker};
use cordon_sdk::paths::{GrantedDirs, join};

/// Longest line printed; minified files would otherwise flood the answer.
const MAX_LINE_CHARS: usize = 400;

/// Collects one file's output; thrown away if the file turns out to be binary.
struct FileSink<'a> {
    path: &'a str,
    lines: Vec<String>,
    matches: usize,
    per_file: usize,
    remaining: usize,
    binary: bool,
}

fn printable(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches(['\n', '\r']);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}… [line cut, {} bytes in all]", &text[..cut], text.len()),
        None => text.to_owned(),
    }
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = m.line_number().unwrap_or(0);
        for (i, line) in m.lines().enumerate() {
            self.lines.push(format!(
                "{}:{}:{}",
                self.path,
                first + i as u64,
                printable(line)
            ));
        }
        self.matches += 1;
        Ok(self.matches < self.per_file && self.matches < self.remaining)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        let n = c.line_number().unwrap_or(0);
        self.lines
            .push(format!("{}-{}-{}", self.path, n, printable(c.bytes())));
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        self.lines.push("--".to_owned());
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// Files up to this size are read whole (by the host, ahead of the search) and searched in
/// memory; larger ones are streamed through the searcher.
const READ_WHOLE: u64 = 16 * 1024 * 1024;
/// Files queued with the host's reader before the search takes any: enough that its threads
/// stay busy while this one searches.
const READ_AHEAD: usize = 256;
/// Files taken from the reader at a time.
const TAKE: usize = 32;
/// How far into a file without a match grep-searcher looks for a NUL byte to call it binary
/// (its `DEFAULT_BUFFER_CAPACITY`, which it does not export; after that it checks only
/// matches). `the_binary_rule_for_files_passed_over_is_grep_searchers` pins it.
const BINARY_SNIFF_BYTES: u64 = 64 << 10;

/// Byte strings of which every match of `pattern` must contain one (each match begins with
/// one), for the host to sift files by; none when no such short, finite set is known, and
/// then every file is searched. Parsed as grep-regex parses it; where grep-regex narrows the
/// regex further (no line terminator in classes) it matches less, never more, so the literals
/// still cover every match.
pub fn needles(pattern: &str, literal: bool, ignore_case: bool) -> Vec<Vec<u8>> {
    let escaped;
    let pattern = if literal {
        escaped = regex_syntax::escape(pattern);
        &escaped
    } else {
        pattern
    };
    let Ok(hir) = regex_syntax::ParserBuilder::new()
        .case_insensitive(ignore_case)
        .utf8(false)
        .build()
        .parse(pattern)
    else {
        return Vec::new();
    };
    let prefixes = regex_syntax::hir::literal::Extractor::new().extract(&hir);
    match prefixes.literals() {
        Some(literals) if literals.iter().all(|l| !l.as_bytes().is_empty()) => {
            literals.iter().map(|l| l.as_bytes().to_vec()).collect()
        }
        // Infinite, or a match may begin with anything (an empty literal).
        _ => Vec::new(),
    }
}

/// The matcher for a search, as `run` and the tests of its sifting build it.
fn build_matcher(
    pattern: &str,
    literal: bool,
    ignore_case: bool,
) -> Result<grep_regex::RegexMatcher, grep_regex::Error> {
    RegexMatcherBuilder::new()
        .case_insensitive(ignore_case)
        .fixed_strings(literal)
        .line_terminator(Some(b'\n'))
        .build(pattern)
}

/// A file queued for reading: the path printed and the path to stream it from if it is large.
struct Queued {
    shown: String,
    path: std::path::PathBuf,
}

/// The search in progress: matcher, searcher, caps and everything counted so far.
struct Search<'m> {
    matcher: &'m grep_regex::RegexMatcher,
    searcher: Searcher,
    context: usize,
    per_file: usize,
    max_total: usize,
    out: Vec<String>,
    total: usize,
    files_matched: usize,
    files_searched: usize,
    binary_skipped: usize,
    capped_files: usize,
    unreadable: usize,
}

impl<'m> Search<'m> {
    /// A search with nothing counted yet, printing `context` lines around each match.
    fn new(
        matcher: &'m grep_regex::RegexMatcher,
        context: usize,
        per_file: usize,
        max_total: usize,
    ) -> Search<'m> {
        Search {
            matcher,
            searcher: SearcherBuilder::new()
                .line_number(true)
                .binary_detection(BinaryDetection::quit(0))
                .before_context(context)
                .after_context(context)
                .build(),
            context,
            per_file,
            max_total,
            out: Vec::new(),
            total: 0,
            files_matched: 0,
            files_searched: 0,
            binary_skipped: 0,
            capped_files: 0,
            unreadable: 0,
        }
    }

    fn full(&self) -> bool {
        self.total >= self.max_total
    }

    /// Searches one file, read whole (`contents`) or, if it was too large, streamed.
    fn file(&mut self, file: Queued, contents: Result<Vec<u8>, ReadError>) {
        let mut sink = FileSink {
            path: &file.shown,
            lines: Vec::new(),
            matches: 0,
            per_file: self.per_file,
            remaining: self.max_total - self.total,
            binary: false,
        };
        self.files_searched += 1;
        let searched = match contents {
            Ok(bytes) => self.searcher.search_slice(self.matcher, &bytes, &mut sink),
            Err(ReadError::TooLarge(_)) => {
                self.searcher
                    .search_path(self.matcher, &file.path, &mut sink)
            }
            Err(e) => Err(io::Error::other(e)),
        };
        if searched.is_err() {
            self.unreadable += 1;
            return;
        }
        if sink.binary {
            self.binary_skipped += 1;
            return;
        }
        if sink.matches == 0 {
            return;
        }
        if sink.matches >= self.per_file && sink.matches < self.max_total - self.total {
            self.capped_files += 1;
        }
        self.total += sink.matches;
        self.files_matched += 1;
        if self.context > 0 && !self.out.is_empty() {
            self.out.push("--".to_owned());
        }
        self.out.extend(sink.lines);
    }

    /// Counts a file the host passed over (none of the needles in it) as searching it would
    /// have: searched, without matches, and binary if grep-searcher would have seen a NUL.
    fn passed_over(&mut self, first_nul: Option<u64>) {
        self.files_searched += 1;
        if first_nul.is_some_and(|at| at < BINARY_SNIFF_BYTES) {
            self.binary_skipped += 1;
        }
    }

    /// Searches the next files the reader has read, in the order they were queued. Returns
    /// false once the match cap is reached.
    fn take(&mut self, reader: &mut BulkReader, queued: &mut VecDeque<Queued>) -> bool {
        for read in reader.take_sifted(TAKE) {
            if self.full() {
                return false;
            }
            let Some(file) = queued.pop_front() else {
                break;
            };
            match read.contents {
                Ok(Sifted::PassedOver { first_nul, .. }) => self.passed_over(first_nul),
                Ok(Sifted::Whole(bytes)) => self.file(file, Ok(bytes)),
                Err(e) => self.file(file, Err(e)),
            }
        }
        !self.full()
    }
}

pub fn run(fs_view: &GrantedDirs, args: SearchTextArgs) -> Result<String, ToolError> {
    let max_total = cap("max_matches", args.max_matches, 200, 5000)?;
    let per_file = cap("max_per_file", args.max_per_file, 20, 5000)?;
    let context = match args.context {
        None => 0,
        Some(n) if n <= 10 => n as usize,
        Some(n) => {
            return Err(ToolError::invalid(format!(
                "`context` is {n}; at most 10 lines are allowed (use read_file for more)"
            )));
        }
    };
    if args.pattern.is_empty() {
        return Err(ToolError::invalid(
            "`pattern` is empty; pass the text or regex to find",
        ));
    }
    let matcher = build_matcher(&args.pattern, args.literal, args.ignore_case).map_err(|e| {
            ToolError::invalid(format!(
                "`pattern` is not a valid regular expression ({e}); fix it, or pass \"literal\": true to search for the text as is"
            ))
        })?;
    let glob = args
        .glob
        .as_deref()
        .map(|g| PathGlob::new(g, "glob"))
        .transpose()?;
    let roots = fs_view.resolve_or_roots(args.path.as_deref(), "path")?;
    let mut search = Search::new(&matcher, context, per_file, max_total);

    // The walk queues files with the host's reader and searches them as they arrive, in the
    // walk's order, so reading and searching overlap.
    let needles = needles(&args.pattern, args.literal, args.ignore_case);
    // Needles are checked by the host as they are here; a refusal only costs the sifting.
    let mut reader =
        BulkReader::sifting(READ_WHOLE, &needles).unwrap_or_else(|_| BulkReader::new(READ_WHOLE));
    let mut queued: VecDeque<Queued> = VecDeque::new();
    let mut more_files = false;
    'roots: for root in &roots {
        check_root(fs_view, root)?;
        for entry in walker(root, args.hidden, args.no_ignore) {
            let Ok(entry) = entry else {
                search.unreadable += 1;
                continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let rel = relative(root, entry.path());
            if let Some(g) = &glob
                && !g.is_match(if rel.is_empty() { root } else { &rel })
            {
                continue;
            }
            if search.full() {
                more_files = true;
                break 'roots;
            }
            let file = Queued {
                shown: join(root, &rel),
                path: entry.into_path(),
            };
            let mut added = match file.path.to_str() {
                Some(p) => reader.add(p),
                // Not UTF-8 (only possible natively): cannot be queued.
                None => Err(AddError::PathTooLong),
            };
            // A full queue (not with READ_AHEAD below its size) only needs taking from.
            while added == Err(AddError::QueueFull) && !queued.is_empty() {
                if !search.take(&mut reader, &mut queued) {
                    break 'roots;
                }
                added = reader.add(file.path.to_str().unwrap_or_default());
            }
            if added.is_err() {
                // Search everything queued before it, then it, streamed.
                while search.take(&mut reader, &mut queued) && !queued.is_empty() {}
                if !search.full() {
                    search.file(file, Err(ReadError::TooLarge(0)));
                }
                continue;
            }
            queued.push_back(file);
            if reader.queued() >= READ_AHEAD && !search.take(&mut reader, &mut queued) {
                break 'roots;
            }
        }
    }
    while !queued.is_empty() && search.take(&mut reader, &mut queued) {}
    let truncated = more_files || !queued.is_empty();
    let Search {
        mut out,
        total,
        files_matched,
        files_searched,
        binary_skipped,
        capped_files,
        unreadable,
        ..
    } = search;
    let mut summary = format!(
        "{total} matching line(s) in {files_matched} file(s); {files_searched} file(s) searched"
    );
    if binary_skipped > 0 {
        summary.push_str(&format!(", {binary_skipped} binary file(s) skipped"));
    }
    if unreadable > 0 {
        summary.push_str(&format!(", {unreadable} unreadable"));
    }
    if capped_files > 0 {
        summary.push_str(&format!(
            ". {capped_files} file(s) stopped at {per_file} matches (raise max_per_file)"
        ));
    }
    if truncated || total >= max_total {
        summary.push_str(&format!(
            ". Stopped at {max_total} matches in total: narrow the pattern, path or glob, or raise max_matches"
        ));
    }
    if total == 0 {
        summary = format!("no matches; {summary}");
    }
    out.push(String::new());
    out.push(format!("[{summary}]"));
    Ok(out.join("\n").trim_start().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(pattern: &str, literal: bool, ignore_case: bool) -> grep_regex::RegexMatcher {
        build_matcher(pattern, literal, ignore_case).unwrap()
    }

    /// Whether searching `haystack` as `run` does finds a match, and whether it calls the
    /// file binary.
    fn search(m: &grep_regex::RegexMatcher, haystack: &[u8]) -> (bool, bool) {
        let mut sink = FileSink {
            path: "f",
            lines: Vec::new(),
            matches: 0,
            per_file: 1,
            remaining: 1,
            binary: false,
        };
        Search::new(m, 0, 1, 1)
            .searcher
            .search_slice(m, haystack, &mut sink)
            .unwrap();
        (sink.matches > 0, sink.binary)
    }

    #[test]
    fn the_binary_rule_for_files_passed_over_is_grep_searchers() {
        let m = matcher("needle", true, false);
        let window = BINARY_SNIFF_BYTES as usize;
        for (size, nul) in [
            (10, Some(0)),
            (10, Some(9)),
            (10, None),
            (window + 10, Some(window - 1)),
            (window + 10, Some(window)),
            (3 * window, Some(2 * window)),
            (window, Some(window - 1)),
        ] {
            let mut haystack = b"line of text\n".repeat(size / 13 + 1);
            haystack.truncate(size);
            if let Some(at) = nul {
                haystack[at] = 0;
            }
            let (matched, binary) = search(&m, &haystack);
            assert!(!matched);
            let mut counted = Search::new(&m, 0, 1, 1);
            counted.passed_over(nul.map(|at| at as u64));
            assert_eq!(counted.files_searched, 1);
            assert_eq!(
                counted.binary_skipped == 1,
                binary,
                "size {size}, NUL at {nul:?}"
            );
        }
    }

    #[test]
    fn every_match_contains_a_needle() {
        let haystacks: Vec<&[u8]> = vec![
            b"unsafe impl Send for X {}",
            b"UNSAFE IMPL SEND FOR",
            "unsafe impl \u{212A}end".as_bytes(),
            "the \u{212A}elvin sign folds to k".as_bytes(),
            "stra\u{df}e STRASSE".as_bytes(),
            b"fn main() { foo_bar(1); }",
            b"abc\nxyz",
            b"",
            b"\xff\xfe invalid utf-8 kk",
        ];
        let cases: &[(&str, bool, bool)] = &[
            ("unsafe impl Send for", true, false),
            ("unsafe impl Send for", true, true),
            ("kelvin", true, true),
            ("k", false, true),
            ("stra\u{df}e", false, true),
            ("foo_(bar|baz)\\(\\d\\)", false, false),
            ("[a-c]bc|xyz", false, false),
            ("a.c", false, false),
            ("(?i)main\\(\\)", false, false),
            ("x*", false, false),
            ("\\bfn\\b", false, false),
            ("\\w+", false, false),
            ("(?-u:\\xff)", false, false),
        ];
        for &(pattern, literal, ignore_case) in cases {
            let m = matcher(pattern, literal, ignore_case);
            let needles = needles(pattern, literal, ignore_case);
            for haystack in &haystacks {
                let (matched, _) = search(&m, haystack);
                let contains = needles.is_empty()
                    || needles
                        .iter()
                        .any(|n| haystack.windows(n.len()).any(|w| w == n.as_slice()));
                assert!(
                    !matched || contains,
                    "{pattern:?} matches {:?} but none of {needles:?} is in it",
                    String::from_utf8_lossy(haystack)
                );
            }
        }
        // The sifting does something for the searches it is for.
        assert_eq!(
            needles("unsafe impl", true, false),
            [b"unsafe impl".to_vec()]
        );
        assert!(!needles("unsafe impl", true, true).is_empty());
        assert!(needles("x*", false, false).is_empty());
        assert!(needles("\\w+", false, false).is_empty());
    }
}
