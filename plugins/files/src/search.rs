//! `search_text`: ripgrep's matcher and searcher over the shared walker, printed like
//! `rg -n` (`path:line:text`, context as `path-line-text`, groups split by `--`).

use std::io;

use cordon_sdk::ToolError;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};

use crate::args::{SearchTextArgs, cap};
use crate::fastread::FileReader;
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

/// Files up to this size are read in one go and searched in memory: every read is a call
/// out of the sandbox, so fewer, larger reads are much faster than the searcher's 64 KiB ones.
const READ_WHOLE: usize = 16 * 1024 * 1024;

fn search_file(
    reader: &FileReader,
    searcher: &mut Searcher,
    matcher: &grep_regex::RegexMatcher,
    path: &std::path::Path,
    sink: &mut FileSink<'_>,
) -> io::Result<()> {
    let small = match path.to_str() {
        Some(p) => reader.read_small(p, READ_WHOLE)?,
        None => None,
    };
    match small {
        Some(bytes) => searcher.search_slice(matcher, &bytes, sink),
        None => searcher.search_path(matcher, path, sink),
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
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.ignore_case)
        .fixed_strings(args.literal)
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|e| {
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
    let reader = FileReader::new();
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .before_context(context)
        .after_context(context)
        .build();

    let mut out: Vec<String> = Vec::new();
    let (mut total, mut files_matched, mut files_searched, mut binary_skipped) = (0, 0, 0, 0);
    let (mut capped_files, mut unreadable) = (0usize, 0usize);
    let mut truncated = false;
    'roots: for root in &roots {
        check_root(fs_view, root)?;
        for entry in walker(root, args.hidden, args.no_ignore) {
            let Ok(entry) = entry else {
                unreadable += 1;
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
            if total >= max_total {
                truncated = true;
                break 'roots;
            }
            let path = join(root, &rel);
            let mut sink = FileSink {
                path: &path,
                lines: Vec::new(),
                matches: 0,
                per_file,
                remaining: max_total - total,
                binary: false,
            };
            files_searched += 1;
            if search_file(&reader, &mut searcher, &matcher, entry.path(), &mut sink).is_err() {
                unreadable += 1;
                continue;
            }
            if sink.binary {
                binary_skipped += 1;
                continue;
            }
            if sink.matches == 0 {
                continue;
            }
            if sink.matches >= per_file && sink.matches < max_total - total {
                capped_files += 1;
            }
            total += sink.matches;
            files_matched += 1;
            if context > 0 && !out.is_empty() {
                out.push("--".to_owned());
            }
            out.extend(sink.lines);
        }
    }
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
