//! What the person types into `cordon chat`, and their answers to approval questions.
//!
//! On a terminal a line editor (rustyline) reads it: arrows and the usual Emacs keys, a
//! history kept in the home across chats, Ctrl-R to search it, Tab to complete `/commands` and
//! tool names, and messages of several lines (Alt-Enter, or Enter after a trailing `\`, starts
//! a new line; a paste keeps its lines). Otherwise (stdin or stdout a pipe or a file) plain
//! lines are read as they come and nothing but text is written, as scripts expect.
//!
//! One thread owns the terminal's input and reads one line at a time, on request: the chat
//! prompt and an approval question asked during a turn never read at once, and keys typed
//! ahead stay in the editor's buffer for whichever read comes next.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::config::{BellStyle, CompletionType, Config};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{
    Cmd, ConditionalEventHandler, Editor, Event, EventContext, EventHandler, Helper, KeyCode,
    KeyEvent, Modifiers, RepeatCount,
};
use tokio::sync::{mpsc, oneshot};

use crate::term::errln;

/// Lines kept in the history file; older ones are dropped as new ones come.
const HISTORY_LINES: usize = 1000;

/// What one read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// What was typed, without the final newline (a message of several lines keeps the
    /// newlines between them).
    Line(String),
    /// Ctrl-C in the editor: what was typed is dropped.
    Interrupted,
    /// Ctrl-D on an empty line, or the input ended.
    End,
}

/// Where lines come from: the line editor's thread, or plain lines read from stdin.
pub struct Input(Source);

enum Source {
    Editor(std::sync::mpsc::Sender<Request>),
    Lines {
        lines: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
        /// Whether a person types them (stdin is a terminal), so prompts are worth showing.
        typed: bool,
    },
}

/// One read asked of the editor's thread.
struct Request {
    prompt: String,
    /// The tool names to complete for a chat message; `None` for an answer to a question,
    /// which completes nothing and is kept out of the history.
    message_tools: Option<Vec<String>>,
    reply: oneshot::Sender<Read>,
}

impl Input {
    /// Plain lines from stdin, whatever it is (`cordon run`, which has no prompt).
    pub fn lines() -> Input {
        Input(Source::Lines {
            lines: tokio::sync::Mutex::new(stdin_lines()),
            typed: std::io::stdin().is_terminal(),
        })
    }

    /// The line editor when stdin and stdout are both a terminal, with its history in
    /// `history` (none kept when `None`) and `commands` completed at the start of a line;
    /// plain lines otherwise.
    pub fn for_chat(history: Option<&Path>, commands: &'static [&'static str]) -> Input {
        if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
            return Input::lines();
        }
        match editor(history, commands) {
            Ok(editing) => {
                let (tx, rx) = std::sync::mpsc::channel();
                let spawned = std::thread::Builder::new()
                    .name("line-editor".into())
                    .spawn(move || serve(editing, rx));
                match spawned {
                    Ok(_) => Input(Source::Editor(tx)),
                    Err(e) => {
                        errln!("warning: cannot start the line editor ({e}); reading plain lines");
                        Input::lines()
                    }
                }
            }
            Err(e) => {
                errln!("warning: cannot start the line editor ({e}); reading plain lines");
                Input::lines()
            }
        }
    }

    /// Whether lines are read with the line editor.
    pub fn edits(&self) -> bool {
        matches!(self.0, Source::Editor(_))
    }

    /// The next chat message or command, after `prompt`; `tools` are the names Tab completes.
    pub async fn message(&self, prompt: &str, tools: Vec<String>) -> Read {
        self.read(prompt, Some(tools)).await
    }

    /// An answer to `question`, asked during a turn.
    pub async fn answer(&self, question: &str) -> Read {
        self.read(question, None).await
    }

    async fn read(&self, prompt: &str, message_tools: Option<Vec<String>>) -> Read {
        match &self.0 {
            Source::Editor(requests) => {
                let (reply, answer) = oneshot::channel();
                let request = Request {
                    prompt: prompt.to_string(),
                    message_tools,
                    reply,
                };
                if requests.send(request).is_err() {
                    return Read::End;
                }
                answer.await.unwrap_or(Read::End)
            }
            Source::Lines { lines, typed } => {
                // A question is asked whoever answers it; a prompt only for a person.
                if *typed || message_tools.is_none() {
                    crate::term::ask(prompt);
                }
                match lines.lock().await.recv().await {
                    Some(line) => Read::Line(line),
                    None => Read::End,
                }
            }
        }
    }
}

/// Lines from stdin, read on one thread so the prompt and approval questions share them; a
/// read given up (a question whose turn was cancelled) leaves its line for the next.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .send(line.trim_end_matches(['\n', '\r']).to_string())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    rx
}

type ChatEditor = Editor<ChatHelper, FileHistory>;

/// The editor and what its thread needs beside it.
struct Editing {
    editor: ChatEditor,
    /// The history file, unless none is kept.
    history: Option<PathBuf>,
    /// Where the line being read was continued after a trailing backslash.
    continued: Continued,
}

/// The byte offsets of the backslashes a line was continued after, in the order typed.
type Continued = Arc<Mutex<Vec<usize>>>;

/// The editor, with its history loaded from `history` (created owner-only if missing); the
/// history is not kept if the file cannot be used, which is said once.
fn editor(history: Option<&Path>, commands: &'static [&'static str]) -> rustyline::Result<Editing> {
    let config = Config::builder()
        .max_history_size(HISTORY_LINES)?
        .history_ignore_dups(true)?
        // A line typed with a leading space is not kept, as in bash: a way to type a secret.
        .history_ignore_space(true)
        .auto_add_history(false)
        .completion_type(CompletionType::List)
        .bell_style(BellStyle::None)
        .build();
    let mut editor = ChatEditor::with_config(config)?;
    editor.set_helper(Some(ChatHelper {
        commands,
        tools: None,
    }));
    editor.bind_sequence(
        KeyEvent(KeyCode::Enter, Modifiers::ALT),
        EventHandler::Simple(Cmd::Newline),
    );
    let continued = Continued::default();
    for enter in [
        KeyEvent(KeyCode::Enter, Modifiers::NONE),
        KeyEvent::ctrl('J'),
    ] {
        let handler = ContinueAfterBackslash(continued.clone());
        editor.bind_sequence(enter, EventHandler::Conditional(Box::new(handler)));
    }
    let history = history.and_then(|path| match open_history(path) {
        Ok(()) => match editor.load_history(path) {
            Ok(()) => Some(path.to_path_buf()),
            Err(e) => {
                history_warning(path, &e);
                None
            }
        },
        Err(e) => {
            history_warning(path, &e);
            None
        }
    });
    Ok(Editing {
        editor,
        history,
        continued,
    })
}

fn history_warning(path: &Path, error: &dyn std::fmt::Display) {
    errln!(
        "warning: cannot use the chat history {}: {error}; this chat's lines are not kept",
        path.display()
    );
}

/// Makes sure the history file exists and only its owner can read it: what people type may be
/// a secret. A file left readable by others (made by hand, or copied) is made owner-only. A
/// symbolic link there is refused: the lines would go (and its target's mode change) wherever
/// it points.
fn open_history(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::other(
            "it is a symbolic link; remove it and chat makes a file of its own",
        ));
    }
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let file = options.open(path)?;
        let mut permissions = file.metadata()?.permissions();
        if permissions.mode() & 0o077 != 0 {
            permissions.set_mode(0o600);
            file.set_permissions(permissions)?;
        }
    }
    #[cfg(not(unix))]
    options.open(path)?;
    Ok(())
}

/// The editor's thread: answers each request with one line read on the terminal.
fn serve(mut editing: Editing, requests: std::sync::mpsc::Receiver<Request>) {
    let editor = &mut editing.editor;
    for request in requests {
        let message = request.message_tools.is_some();
        if let Some(helper) = editor.helper_mut() {
            helper.tools = request.message_tools;
        }
        if let Ok(mut at) = editing.continued.lock() {
            at.clear();
        }
        let read = match editor.readline(&request.prompt) {
            Ok(line) => {
                let line = match editing.continued.lock() {
                    Ok(at) => without_continuations(line, &at),
                    Err(_) => line,
                };
                if message {
                    keep(editor, &line, &mut editing.history);
                }
                Read::Line(line)
            }
            Err(ReadlineError::Interrupted) => Read::Interrupted,
            Err(ReadlineError::Eof) => Read::End,
            Err(e) => {
                errln!("cannot read the terminal: {e}");
                Read::End
            }
        };
        let _ = request.reply.send(read);
    }
}

/// Adds a message to the history and appends it to the file at once, so a chat that is killed
/// loses nothing and two chats in the same home both keep their lines.
fn keep(editor: &mut ChatEditor, line: &str, history: &mut Option<PathBuf>) {
    if line.trim().is_empty() {
        return;
    }
    match editor.add_history_entry(line) {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            errln!("warning: cannot add to the chat history: {e}");
            return;
        }
    }
    if let Some(path) = history.as_deref()
        && let Err(e) = editor.append_history(path)
    {
        history_warning(path, &e);
        *history = None;
    }
}

/// Enter at the end of a line that ends with a backslash starts a new line instead of sending,
/// as in a shell. The backslash stays on the screen while the message is typed and is taken
/// out when it is sent (see [`without_continuations`]); where it was is noted here, so a
/// backslash before a line break that came in a paste is kept.
struct ContinueAfterBackslash(Continued);

impl ConditionalEventHandler for ContinueAfterBackslash {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        let line = ctx.line();
        if ctx.pos() != line.len() || !line.ends_with('\\') {
            return None;
        }
        if let Ok(mut at) = self.0.lock() {
            at.push(line.len() - 1);
        }
        Some(Cmd::Insert(1, "\n".into()))
    }
}

/// `line` without the backslashes it was continued after (byte offsets `at`, in the order
/// typed). One no longer followed by its line break (the text before it was edited since) is
/// left as it is.
fn without_continuations(mut line: String, at: &[usize]) -> String {
    for &i in at.iter().rev() {
        if line.get(i..i + 2) == Some("\\\n") {
            line.remove(i);
        }
    }
    line
}

/// Completes `/commands` at the start of a message and tool names anywhere in it.
struct ChatHelper {
    commands: &'static [&'static str],
    /// The tools offered now; `None` while an approval question is asked.
    tools: Option<Vec<String>>,
}

impl ChatHelper {
    /// Where the word before `pos` starts, and the candidates for it.
    fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let Some(tools) = &self.tools else {
            return (pos, Vec::new());
        };
        let before = &line[..pos];
        let start = before
            .rfind(|c: char| c.is_whitespace() || "`'\"(,".contains(c))
            .map(|i| i + before[i..].chars().next().map_or(1, char::len_utf8))
            .unwrap_or(0);
        let word = &before[start..];
        if word.is_empty() {
            return (start, Vec::new());
        }
        let mut found: Vec<String> = if start == 0 && word.starts_with('/') {
            self.commands
                .iter()
                .filter(|c| c.starts_with(word))
                .map(|c| c.to_string())
                .collect()
        } else {
            tools
                .iter()
                .filter(|t| t.starts_with(word))
                .cloned()
                .collect()
        };
        found.sort();
        found.dedup();
        (start, found)
    }
}

impl Completer for ChatHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, found) = self.candidates(line, pos);
        let pairs = found
            .into_iter()
            .map(|c| Pair {
                display: c.clone(),
                replacement: c,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {}

impl Validator for ChatHelper {}

impl Helper for ChatHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMANDS: &[&str] = &["/help", "/history", "/quit"];

    fn helper(tools: &[&str]) -> ChatHelper {
        ChatHelper {
            commands: COMMANDS,
            tools: Some(tools.iter().map(|t| t.to_string()).collect()),
        }
    }

    #[test]
    fn commands_complete_at_the_start_only() {
        let h = helper(&["read_file"]);
        assert_eq!(h.candidates("/he", 3), (0, vec!["/help".to_string()]));
        assert_eq!(
            h.candidates("/h", 2),
            (0, vec!["/help".to_string(), "/history".to_string()])
        );
        // A slash later in a message is text, not a command.
        assert_eq!(h.candidates("see /he", 7), (4, vec![]));
    }

    #[test]
    fn tool_names_complete_anywhere_in_a_message() {
        let h = helper(&["read_file", "read_dir", "write_file"]);
        assert_eq!(
            h.candidates("please use read_f", 17),
            (11, vec!["read_file".to_string()])
        );
        assert_eq!(
            h.candidates("`rea", 4),
            (1, vec!["read_dir".to_string(), "read_file".to_string()])
        );
        assert_eq!(h.candidates("use  ", 5), (5, vec![]));
        // Only the word before the cursor counts.
        assert_eq!(
            h.candidates("wri and more", 3),
            (0, vec!["write_file".to_string()])
        );
    }

    #[test]
    fn only_the_backslashes_typed_before_enter_go() {
        // "a \" Enter "b\" Enter "c": both typed continuations go.
        assert_eq!(
            without_continuations("a \\\nb\\\nc".into(), &[2, 5]),
            "a \nb\nc"
        );
        // A pasted "x \\\n y" keeps its backslash; the typed one after it goes.
        assert_eq!(
            without_continuations("x \\\ny\\\nz".into(), &[5]),
            "x \\\ny\nz"
        );
        // Text edited before a continuation since: nothing is taken out at a stale offset.
        assert_eq!(without_continuations("ab\\\nc".into(), &[1]), "ab\\\nc");
        assert_eq!(without_continuations("no breaks".into(), &[]), "no breaks");
    }

    #[test]
    fn an_approval_question_completes_nothing() {
        let h = ChatHelper {
            commands: COMMANDS,
            tools: None,
        };
        assert_eq!(h.candidates("/he", 3), (3, vec![]));
    }

    #[cfg(unix)]
    #[test]
    fn the_history_file_is_made_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home").join("chat-history");
        open_history(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        // One left readable by others is tightened, its lines kept.
        std::fs::write(&path, "#V2\nsecret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_history(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "#V2\nsecret\n");
        // A link planted there is refused, and its target left alone.
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let linked = dir.path().join("home").join("linked-history");
        std::os::unix::fs::symlink(&target, &linked).unwrap();
        let e = open_history(&linked).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(mode(&target), 0o644);
    }
}
