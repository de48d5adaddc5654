//! `cordon chat` on a pseudo-terminal, typed into as a person types: the line editor (arrows,
//! a history kept in the home across chats, Ctrl-R, Tab completion, messages of several lines),
//! Ctrl-C at the prompt and during a turn, and approval questions read by the same editor. Every
//! wait has a timeout; what the model received is read from its request log.

use std::path::Path;
use std::time::{Duration, Instant};

use cordon_scripted_llm::Step;
use cordon_tests::TestHome;
use cordon_tests::support::probe_home;
use rexpect::process::WaitStatus;
use rexpect::reader::Options;
use rexpect::session::{PtySession, spawn_with_options};
use serde_json::json;

use crate::model::{Model, call};

/// How long any one thing may take to show on the terminal (a chat with the probe plugin
/// compiles it on a cold cache).
const WAIT_MS: u64 = 90_000;

/// The keys a terminal sends.
const ENTER: &str = "\r";
const UP: &str = "\u{1b}[A";
const ALT_ENTER: &str = "\u{1b}\r";
const TAB: &str = "\t";
const PASTE_START: &str = "\u{1b}[200~";
const PASTE_END: &str = "\u{1b}[201~";

/// `cordon chat` in `home` against `model` on a new pseudo-terminal, with the banner shown.
fn chat(home: &TestHome, model: &Model) -> PtySession {
    let mut command = home.cordon_command(&["chat"]);
    command
        .current_dir(home.scratch("cwd"))
        .env("CORDON_LLM_URL", model.url())
        .env("CORDON_MODEL", "scripted")
        // A terminal the line editor supports, whatever the test itself runs in.
        .env("TERM", "xterm-256color")
        .env("NO_COLOR", "1");
    let options = Options::new()
        .timeout_ms(Some(WAIT_MS))
        .strip_ansi_escape_codes(true);
    let mut session = spawn_with_options(command, options).expect("start cordon chat on a pty");
    expect(&mut session, "Ctrl-D to leave.");
    session
}

/// Waits for `text` on the terminal; fails with what was shown instead.
#[track_caller]
fn expect(session: &mut PtySession, text: &str) {
    if let Err(e) = session.exp_string(text) {
        panic!("the terminal did not show {text:?}: {e}");
    }
}

/// Types `keys` as they are.
#[track_caller]
fn press(session: &mut PtySession, keys: &str) {
    session.send(keys).expect("type into the terminal");
    session.flush().expect("type into the terminal");
}

/// Waits for `answer` and the prompt after it.
#[track_caller]
fn answered(session: &mut PtySession, answer: &str) {
    expect(session, answer);
    expect(session, "> ");
}

/// Leaves with Ctrl-D at an empty prompt and asserts the chat exited 0.
#[track_caller]
fn leave(mut session: PtySession) {
    session.send_control('d').expect("press Ctrl-D");
    let shown = session
        .exp_eof()
        .unwrap_or_else(|e| panic!("chat did not end: {e}"));
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    loop {
        match session.process().status() {
            Some(WaitStatus::Exited(_, code)) => {
                assert_eq!(code, 0, "chat exited {code}:\n{shown}");
                return;
            }
            Some(WaitStatus::StillAlive) | None if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => panic!("chat did not exit cleanly ({other:?}):\n{shown}"),
        }
    }
}

/// The last user message of request `n` (0-based) the model received.
fn user_message(model: &Model, n: usize) -> String {
    model
        .messages(n)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("request {n} has no user message"))
        .to_string()
}

fn history_file(home: &TestHome) -> std::path::PathBuf {
    home.path().join("chat-history")
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Up recalls the line typed before, and the model gets that text, not the arrow's escape
/// sequence; the history is in the home, owner-only, and a chat started later recalls it.
/// `n` text answers, `answer one`, `answer two`, …: what each test's turns get back.
fn answers(n: usize) -> Vec<Step> {
    ["one", "two", "three", "four"][..n]
        .iter()
        .map(|w| Step::text(&format!("answer {w}")))
        .collect()
}

#[test]
fn up_recalls_the_last_line_also_in_a_later_chat() {
    let home = TestHome::new();
    let model = Model::new(answers(3));
    let mut first = chat(&home, &model);
    press(&mut first, &format!("what is in the box{ENTER}"));
    answered(&mut first, "answer one");
    press(&mut first, &format!("{UP}{ENTER}"));
    answered(&mut first, "answer two");
    leave(first);
    assert_eq!(user_message(&model, 0), "what is in the box");
    assert_eq!(
        user_message(&model, 1),
        "what is in the box",
        "Up did not recall the line"
    );

    let history = history_file(&home);
    #[cfg(unix)]
    assert_eq!(mode(&history), 0o600, "the history is readable by others");

    let mut again = chat(&home, &model);
    press(&mut again, &format!("{UP}{ENTER}"));
    answered(&mut again, "answer three");
    leave(again);
    assert_eq!(
        user_message(&model, 2),
        "what is in the box",
        "a new chat in the same home did not recall the line"
    );
}

/// Ctrl-R searches the history back for what is typed, Enter sends what it found; a line
/// typed with a leading space is not kept.
#[test]
fn ctrl_r_finds_an_earlier_line_and_a_line_after_a_space_is_not_kept() {
    let home = TestHome::new();
    let model = Model::new(answers(4));
    let mut session = chat(&home, &model);
    press(&mut session, &format!("alpha question{ENTER}"));
    answered(&mut session, "answer one");
    press(&mut session, &format!("beta question{ENTER}"));
    answered(&mut session, "answer two");
    press(&mut session, &format!(" my token is hunter2{ENTER}"));
    answered(&mut session, "answer three");
    session.send_control('r').expect("press Ctrl-R");
    press(&mut session, &format!("alp{ENTER}"));
    answered(&mut session, "answer four");
    leave(session);
    assert_eq!(user_message(&model, 2), "my token is hunter2");
    assert_eq!(
        user_message(&model, 3),
        "alpha question",
        "Ctrl-R did not find the earlier line"
    );
    let kept = std::fs::read_to_string(history_file(&home)).unwrap();
    assert!(
        kept.contains("alpha question") && kept.contains("beta question"),
        "{kept}"
    );
    assert!(
        !kept.contains("hunter2"),
        "a line after a space was kept: {kept}"
    );
}

/// Tab completes a /command at the start of the line and a tool name within a message.
#[test]
fn tab_completes_commands_and_tool_names() {
    let (home, _data) = probe_home(&[]);
    let model = Model::new(vec![Step::text("answer one")]);
    let mut session = chat(&home, &model);
    press(&mut session, &format!("/he{TAB}{ENTER}"));
    expect(&mut session, "this help");
    expect(&mut session, "> ");
    press(&mut session, &format!("please call bulk_r{TAB} now{ENTER}"));
    answered(&mut session, "answer one");
    leave(session);
    assert_eq!(user_message(&model, 0), "please call bulk_read now");
    let offered = model.server.requests()[0].tool_names();
    assert!(
        offered.iter().any(|t| t == "bulk_read"),
        "completed a name the model is not offered: {offered:?}"
    );
}

/// Alt-Enter, Enter after a trailing backslash, and a paste each make one message of several
/// lines.
#[test]
fn a_message_of_several_lines_arrives_as_one() {
    let home = TestHome::new();
    let model = Model::new(answers(4));
    let mut session = chat(&home, &model);
    press(
        &mut session,
        &format!("first line{ALT_ENTER}second line{ENTER}"),
    );
    answered(&mut session, "answer one");
    press(&mut session, &format!("top \\{ENTER}bottom{ENTER}"));
    answered(&mut session, "answer two");
    press(
        &mut session,
        &format!("{PASTE_START}pasted one\rpasted \\\rtwo{PASTE_END}{ENTER}"),
    );
    answered(&mut session, "answer three");
    // The first message comes back from the history whole.
    session.send_control('r').expect("press Ctrl-R");
    press(&mut session, &format!("first{ENTER}"));
    answered(&mut session, "answer four");
    leave(session);
    assert_eq!(user_message(&model, 0), "first line\nsecond line");
    assert_eq!(user_message(&model, 1), "top \nbottom");
    // A backslash that came in a paste stays.
    assert_eq!(user_message(&model, 2), "pasted one\npasted \\\ntwo");
    assert_eq!(user_message(&model, 3), "first line\nsecond line");
    assert_eq!(
        model.server.requests().len(),
        4,
        "a line was sent on its own"
    );
}

/// Ctrl-C during a slow answer cancels the turn and the chat goes on; Ctrl-C at the prompt
/// drops what was typed without leaving.
#[test]
fn ctrl_c_cancels_a_slow_answer_and_clears_the_line() {
    let home = TestHome::new();
    let model = Model::new(vec![
        Step::Text {
            text: "zebras graze while this answer takes a long time to arrive in full".into(),
            chunk: Some(4),
            delay_ms: Some(300),
            usage: None,
        },
        Step::text("answer two"),
    ]);
    let mut session = chat(&home, &model);
    press(&mut session, &format!("tell me slowly{ENTER}"));
    // Words of the answer, not of the line typed (which the editor shows): Ctrl-C must come
    // while the answer streams.
    expect(&mut session, "zebras");
    session.send_control('c').expect("press Ctrl-C");
    expect(&mut session, "(cancelled)");
    expect(&mut session, "> ");
    press(&mut session, "half a thought");
    session.send_control('c').expect("press Ctrl-C");
    expect(&mut session, "> ");
    press(&mut session, &format!("and now{ENTER}"));
    answered(&mut session, "answer two");
    leave(session);
    assert_eq!(model.server.requests().len(), 2);
    assert_eq!(user_message(&model, 1), "and now");
    let second = serde_json::to_string(&model.server.requests()[1].messages()).unwrap();
    assert!(
        !second.contains("in full"),
        "the cancelled answer was not cut short: {second}"
    );
}

/// The probe's `fs` call that writes `written` to `/data/<file>`.
fn write(id: &str, file: &str) -> cordon_scripted_llm::ScriptedCall {
    call(
        id,
        "fs",
        json!({"op": "write", "path": format!("/data/{file}"), "content": "written"}),
    )
}

/// An approval question during a turn is answered in the same editor: `y` runs the call (the
/// file is written), Ctrl-C at the question cancels that turn, and the chat goes on.
#[test]
fn approval_questions_are_answered_on_the_terminal_and_ctrl_c_cancels_them() {
    let (home, data) = probe_home(&[]);
    let model = Model::new(vec![
        Step::tool_calls(vec![write("c1", "yes.txt")]),
        Step::text("wrote it"),
        Step::tool_calls(vec![write("c2", "never.txt")]),
        Step::text("answer after"),
    ]);
    let mut session = chat(&home, &model);
    press(&mut session, &format!("write yes.txt{ENTER}"));
    expect(&mut session, "Allow?");
    press(&mut session, &format!("y{ENTER}"));
    answered(&mut session, "wrote it");
    assert_eq!(
        std::fs::read_to_string(data.join("yes.txt")).unwrap(),
        "written"
    );
    press(&mut session, &format!("write never.txt{ENTER}"));
    expect(&mut session, "Allow?");
    session.send_control('c').expect("press Ctrl-C");
    expect(&mut session, "(cancelled)");
    expect(&mut session, "> ");
    press(&mut session, &format!("something else{ENTER}"));
    answered(&mut session, "answer after");
    leave(session);
    assert!(
        !data.join("never.txt").exists(),
        "a call whose question was cancelled ran"
    );
    assert_eq!(model.server.requests().len(), 4);
    assert_eq!(user_message(&model, 3), "something else");
    // Answers to questions are not chat lines.
    let kept = std::fs::read_to_string(history_file(&home)).unwrap();
    assert!(kept.contains("write yes.txt"), "{kept}");
    assert!(
        !kept.lines().any(|l| l == "y"),
        "an answer was kept: {kept}"
    );
}

/// A write under a read-only grant is refused by the sandbox and becomes a grant request on
/// the terminal: the narrowest grant (that file's directory, read-write) is offered, `always`
/// gives it for the rest of the chat, and the call runs again with it; the directory beside it
/// stays read-only, and the lock is not changed.
#[test]
fn a_refused_write_becomes_a_grant_request_answered_on_the_terminal() {
    let home = TestHome::new();
    let data = home.scratch("data");
    std::fs::create_dir_all(data.join("out")).unwrap();
    std::fs::create_dir_all(data.join("keep")).unwrap();
    let probe = cordon_tests::fixture("probe");
    let grant = cordon_tests::support::grant_fs(&data, "/data", "ro");
    home.cordon(&[
        "plugin",
        "install",
        probe.to_str().unwrap(),
        "--grant",
        &grant,
    ])
    .ok();
    let model = Model::new(vec![
        Step::tool_calls(vec![write("c1", "out/a.txt")]),
        Step::text("wrote a"),
        Step::tool_calls(vec![write("c2", "out/b.txt"), write("c3", "keep/c.txt")]),
        Step::text("wrote b"),
    ]);
    let mut session = chat(&home, &model);
    press(&mut session, &format!("write a{ENTER}"));
    // The tool declares itself destructive: approved to run first, for the whole chat.
    expect(&mut session, "Allow?");
    press(&mut session, &format!("a{ENTER}"));
    expect(&mut session, "was refused by its sandbox");
    let host = std::fs::canonicalize(&data).unwrap();
    expect(
        &mut session,
        &format!("+ fs:{}/out:/data/out:rw", host.display()),
    );
    expect(&mut session, "Grant?");
    press(&mut session, &format!("sometime{ENTER}"));
    expect(&mut session, "is not an answer");
    press(&mut session, &format!("a{ENTER}"));
    answered(&mut session, "wrote a");
    assert_eq!(
        std::fs::read_to_string(data.join("out/a.txt")).unwrap(),
        "written"
    );
    // Given for the chat: the next write there runs unasked; one beside it is asked about.
    press(&mut session, &format!("write b{ENTER}"));
    expect(
        &mut session,
        &format!("+ fs:{}/keep:/data/keep:rw", host.display()),
    );
    expect(&mut session, "Grant?");
    press(&mut session, &format!("n{ENTER}"));
    answered(&mut session, "wrote b");
    leave(session);
    assert_eq!(
        std::fs::read_to_string(data.join("out/b.txt")).unwrap(),
        "written"
    );
    assert!(!data.join("keep/c.txt").exists());
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains(":rw"), "{lock}");
}
