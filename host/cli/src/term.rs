//! Writing to the user's terminal. Most of what the CLI prints is text Cordon did not write: a
//! model's answer, a tool's arguments and result, a plugin's description, schema, log, stderr
//! and error messages, a file a tool read, a lock file, an install source. Written raw, such
//! text can act on the terminal instead of being shown: set the window title (OSC 0), write the
//! clipboard (OSC 52), hide what follows (`ESC[8m`, e.g. the real approval question after a fake
//! one), move the cursor back over a line (a bare CR) or reorder it (Unicode bidi controls).
//!
//! [`neutralise`] is the one place that makes text inert: every such character is shown as a
//! visible escape instead. Everything the CLI prints goes through the `outln!`/`errln!`/`err!`
//! macros (the crate denies `println!` and friends), which neutralise whatever they print when
//! their stream is a terminal; a pipe or file gets the text as is, because a program reading it
//! wants the data. JSON keeps its exact data either way: on a terminal [`json_for_terminal`]
//! writes as `\uXXXX` what JSON leaves raw. Log records, which go to stderr through `tracing`,
//! are neutralised by `crate::log_format`.
//!
//! `cordon-agent`'s `chat` example compiles this file too, so it needs nothing but std.

use std::borrow::Cow;
use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

/// Whether a terminal may act on `ch` rather than show it: C0 controls but newline and tab (ESC
/// starts every escape sequence, a bare CR lets text overwrite the start of its line), DEL, the
/// C1 controls (U+0080–U+009F, 8-bit forms of CSI, OSC and the like), the Unicode bidi controls
/// (which make a line read in another order than it is written) and the line and paragraph
/// separators (which some terminals and editors break lines at).
fn acts_on_terminal(ch: char) -> bool {
    match ch {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Unicode's Bidi_Control characters: ALM, LRM, RLM, LRE…RLO, LRI…PDI.
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            true
        }
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

/// Writes `text` to `out` with every character a terminal would act on shown as a visible
/// escape: `\xNN` for C0 controls and DEL (`\x1b`, `\x0d`, `\x7f`), `\u{N}` for the others
/// (`\u{9b}`, `\u{202e}`). Each character is handled on its own, so text may be written in
/// pieces (streamed deltas, formatter calls) without carrying anything over between them.
pub fn write_neutralised(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    let mut shown_up_to = 0;
    for (at, ch) in text.char_indices() {
        if !acts_on_terminal(ch) {
            continue;
        }
        out.write_str(&text[shown_up_to..at])?;
        let code = u32::from(ch);
        if code < 0x80 {
            write!(out, "\\x{code:02x}")?;
        } else {
            write!(out, "\\u{{{code:x}}}")?;
        }
        shown_up_to = at + ch.len_utf8();
    }
    out.write_str(&text[shown_up_to..])
}

/// `text` with every character a terminal would act on shown as a visible escape (see
/// [`write_neutralised`]); borrowed when there is none, as for almost all text.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 32);
    // Writing to a String cannot fail.
    let _ = write_neutralised(&mut shown, text);
    Cow::Owned(shown)
}

/// JSON text as serde_json writes it, with the characters JSON allows raw in strings but a
/// terminal acts on (DEL, C1 controls, bidi controls, line and paragraph separators) written
/// as `\uXXXX` escapes: the same JSON data, safe to show. serde_json already escapes C0
/// controls, and outside strings it writes no character a terminal acts on.
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    if !json.chars().any(acts_on_terminal) {
        return Cow::Borrowed(json);
    }
    let mut safe = String::with_capacity(json.len() + 32);
    for ch in json.chars() {
        if acts_on_terminal(ch) {
            // Every such character is in the Basic Multilingual Plane: one \u escape.
            safe.push_str(&format!("\\u{:04x}", u32::from(ch)));
        } else {
            safe.push(ch);
        }
    }
    Cow::Owned(safe)
}

/// `text` as it may be written to a stream that is (or is not) a terminal: neutralised for a
/// terminal, exact for a pipe or file.
pub fn shown_on(terminal: bool, text: &str) -> Cow<'_, str> {
    if terminal {
        neutralise(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// JSON text as it may be written to a stream that is (or is not) a terminal (see
/// [`json_for_terminal`]); the data is the same either way.
pub fn json_shown_on(terminal: bool, json: &str) -> Cow<'_, str> {
    if terminal {
        json_for_terminal(json)
    } else {
        Cow::Borrowed(json)
    }
}

/// One of the CLI's output streams, each decided on its own: `cordon call … > file` on a
/// terminal writes exact data to the file and inert messages to the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// Whether the stream is a terminal, asked once per process (it cannot change).
    pub fn is_terminal(self) -> bool {
        static STDOUT: OnceLock<bool> = OnceLock::new();
        static STDERR: OnceLock<bool> = OnceLock::new();
        match self {
            Stream::Stdout => *STDOUT.get_or_init(|| std::io::stdout().is_terminal()),
            Stream::Stderr => *STDERR.get_or_init(|| std::io::stderr().is_terminal()),
        }
    }

    /// Text Cordon did not write, as it may be written to this stream.
    pub fn show(self, text: &str) -> Cow<'_, str> {
        shown_on(self.is_terminal(), text)
    }

    /// JSON text, as it may be written to this stream.
    pub fn show_json(self, json: &str) -> Cow<'_, str> {
        json_shown_on(self.is_terminal(), json)
    }

    /// Resets the terminal's text attributes (colour, hidden, reverse…), written by Cordon
    /// itself before it asks a question so the question is shown plainly whatever came before;
    /// nothing on a pipe or file.
    pub fn reset_attributes(self) {
        if !self.is_terminal() {
            return;
        }
        const RESET: &[u8] = b"\x1b[0m";
        let _ = match self {
            Stream::Stdout => std::io::stdout().write_all(RESET),
            Stream::Stderr => std::io::stderr().write_all(RESET),
        };
    }
}

/// Writes a question on stderr, where the answer is typed after it, and shows it at once.
pub fn ask(question: &str) {
    err!("{question}");
    let _ = std::io::stderr().flush();
}

/// What the `outln!`, `errln!` and `err!` macros call: formats, neutralises for a terminal, and
/// prints as `println!`/`eprintln!`/`eprint!` do.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn print(stream: Stream, args: fmt::Arguments<'_>, newline: bool) {
    let text = match args.as_str() {
        Some(text) => Cow::Borrowed(text),
        None => Cow::Owned(args.to_string()),
    };
    let text = stream.show(&text);
    match (stream, newline) {
        (Stream::Stdout, true) => println!("{text}"),
        (Stream::Stdout, false) => print!("{text}"),
        (Stream::Stderr, true) => eprintln!("{text}"),
        (Stream::Stderr, false) => eprint!("{text}"),
    }
}

/// Prints one line of JSON on stdout, with the same data whether stdout is a terminal or not
/// (see [`json_for_terminal`]).
#[allow(clippy::print_stdout)]
pub fn print_json_line(json: &str) {
    println!("{}", Stream::Stdout.show_json(json));
}

/// `println!` for the CLI: on a terminal, what it prints is neutralised.
macro_rules! outln {
    () => {
        $crate::term::print($crate::term::Stream::Stdout, format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::term::print($crate::term::Stream::Stdout, format_args!($($arg)*), true)
    };
}

/// `eprintln!` for the CLI: on a terminal, what it prints is neutralised.
macro_rules! errln {
    () => {
        $crate::term::print($crate::term::Stream::Stderr, format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::term::print($crate::term::Stream::Stderr, format_args!($($arg)*), true)
    };
}

/// `eprint!` for the CLI: on a terminal, what it prints is neutralised.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::term::print($crate::term::Stream::Stderr, format_args!($($arg)*), false)
    };
}

pub(crate) use {err, errln, outln};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every kind of sequence a hostile model or plugin writes, as in the `escapes` fixture.
    pub(crate) const HOSTILE: &str = "\u{1b}]0;pwned-title\u{7}\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[8mhidden\u{1b}[0m\u{9b}31mred\rback\u{202e}desrever";
    /// [`HOSTILE`] as a terminal is shown it.
    pub(crate) const HOSTILE_SHOWN: &str = r"\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07\x1b[8mhidden\x1b[0m\u{9b}31mred\x0dback\u{202e}desrever";

    /// The characters of `text` a terminal would act on.
    fn acting(text: &str) -> Vec<char> {
        text.chars().filter(|&c| acts_on_terminal(c)).collect()
    }

    #[test]
    fn every_c0_control_but_newline_and_tab_is_shown_as_hex() {
        for code in 0u8..0x20 {
            let ch = char::from(code);
            let shown = neutralise(&format!("a{ch}b")).into_owned();
            if ch == '\n' || ch == '\t' {
                assert_eq!(shown, format!("a{ch}b"), "{code:#04x} must stay as it is");
            } else {
                assert_eq!(shown, format!("a\\x{code:02x}b"), "{code:#04x}");
            }
        }
        assert_eq!(neutralise("\u{1b}[8m"), r"\x1b[8m");
        assert_eq!(neutralise("over\rwrite"), r"over\x0dwrite");
        assert_eq!(neutralise("\u{7f}"), r"\x7f");
    }

    #[test]
    fn every_c1_control_is_shown_as_a_code_point() {
        for code in 0x80u32..=0x9f {
            let ch = char::from_u32(code).unwrap();
            assert_eq!(neutralise(&ch.to_string()), format!("\\u{{{code:x}}}"));
        }
        // The first and last printable characters around the C1 block stay.
        assert_eq!(neutralise("~\u{a0}"), "~\u{a0}");
    }

    #[test]
    fn bidi_controls_and_line_separators_are_shown_as_code_points() {
        let controls = [
            0x61c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068,
            0x2069, 0x2028, 0x2029,
        ];
        for code in controls {
            let ch = char::from_u32(code).unwrap();
            assert_eq!(
                neutralise(&format!("x{ch}y")),
                format!("x\\u{{{code:x}}}y"),
                "{code:#x}"
            );
        }
        // Their neighbours are ordinary characters.
        for code in [0x61b, 0x200d, 0x2010, 0x2027, 0x202f, 0x2065, 0x206a] {
            let text = char::from_u32(code).unwrap().to_string();
            assert!(matches!(neutralise(&text), Cow::Borrowed(_)), "{code:#x}");
        }
    }

    #[test]
    fn nothing_that_acts_on_a_terminal_survives() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        assert_eq!(acting(&neutralise(&all)), Vec::<char>::new());
        assert_eq!(neutralise(HOSTILE), HOSTILE_SHOWN);
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "Grüße, 世界 🦀\n\tcolumns\u{a0}and a C:\\path";
        assert!(matches!(neutralise(text), Cow::Borrowed(t) if t == text));
        assert!(matches!(json_for_terminal(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn text_split_anywhere_is_neutralised_as_a_whole() {
        let text = format!("say {HOSTILE}\u{2028}é\u{2067}done\n");
        let whole = neutralise(&text).into_owned();
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|&&b| b >= a) {
                let pieces = [&text[..a], &text[a..b], &text[b..]];
                let streamed: String = pieces.iter().map(|p| neutralise(p)).collect();
                assert_eq!(streamed, whole, "split at {a} and {b}");
            }
        }
        // The same through a formatter that receives the text one character at a time.
        let mut written = String::new();
        for ch in text.chars() {
            write_neutralised(&mut written, &ch.to_string()).unwrap();
        }
        assert_eq!(written, whole);
    }

    #[test]
    fn json_keeps_its_data_and_loses_what_acts_on_a_terminal() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let value = serde_json::json!({"text": all, "hostile": [HOSTILE]});
        for json in [
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            let safe = json_for_terminal(&json);
            assert_eq!(acting(&safe), Vec::<char>::new());
            let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
            assert_eq!(back, value);
        }
        assert_eq!(
            json_for_terminal("\"a\u{9b}b\u{202e}c\u{7f}\""),
            r#""a\u009bb\u202ec\u007f""#
        );
    }

    #[test]
    fn only_a_terminal_gets_neutralised_text() {
        assert_eq!(shown_on(true, HOSTILE), HOSTILE_SHOWN);
        assert_eq!(shown_on(false, HOSTILE), HOSTILE);
        let json = serde_json::to_string(HOSTILE).unwrap();
        assert_eq!(json_shown_on(false, &json), json);
        assert_eq!(acting(&json_shown_on(true, &json)), Vec::<char>::new());
    }
}
