#!/usr/bin/env python3
"""The web console of `cordon serve`, in a real browser.

Debian's headless Chromium, driven through chromium-driver by selenium, against the real
`cordon serve` (built by `make`), the real probe component in the sandbox, and the scripted
stand-in for a model (`scripted-llm`). Nothing is mocked. Run by `make browser-test` (part of
`make test`), or by hand after `make`:

    target/venv/bin/python tests/browser/test_console.py

What it does, as a user would, only through the page:

1. logs in by typing the token;
2. creates a session and sends a message; the model asks to write a file with the probe's `fs`
   tool; the approval shows the tool, its arguments, its grants and why it asks; Approve; the
   tool's result and the model's answer appear in the transcript as they happen; the file is
   on disk;
3. a second message whose call is answered Deny: nothing is written, and the model's next
   request carries the refusal;
4. an answer holding markup and control characters streams in and is shown as text (no element
   is made from it, the page title is unchanged); after a reload, the stored transcript is
   drawn exactly as the live one was;
5. the audit tab lists both calls with who decided (`API token `default``) and their outcomes,
   and its filters (tool, session, kind, time) work; the tools tab lists the probe's tools;
6. a token handed over in the URL's fragment logs in and leaves the URL;
7. on a host that takes an OpenID provider's tokens (oidc-provider from npm, on 127.0.0.1), the
   console's button sends the user to the provider's login and back, signed in under their
   name (authorization code with PKCE).

Every process it starts is stopped, also when it fails; everything listens on 127.0.0.1; every
wait is bounded. On failure it prints the page's state and the servers' logs, and keeps a
screenshot in target/browser-test/.
"""

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import (
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options as ChromeOptions
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
CORDON = ROOT / "target/debug/cordon"
SCRIPTED_LLM = ROOT / "target/debug/scripted-llm"
PROBE = ROOT / "target/fixtures/probe.wasm"
ARTIFACTS = ROOT / "target/browser-test"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

# The flags this machine needs (see the machine notes): no sandbox as root, no GPU, and no
# background connections to Google's hosts, which the closed network refuses.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
]

WAIT = 30  # seconds: the longest any one step may take (a debug build on a busy machine)
START_WAIT = 60  # seconds: for a server to start (compiling the probe's code on first use)

SESSION = "browser-1"
FIRST_CONTENT = "written by <b>the console</b> test"
FIRST_ANSWER = "The note is in /data/x.txt."
SECOND_ANSWER = "You said no, so /data/denied.txt was not written."
# Markup, a script, an OSC title sequence (ESC ] 0 ; x BEL) and other control characters.
HOSTILE_ANSWER = (
    "Look: <img src=x onerror=\"document.title='pwned'\"> "
    "<script>document.title='pwned'</script>"
    "\u001b]0;x\u0007 and \u001b[31mred\u001b[0m &amp; done."
)
PAGE_TITLE = "Cordon"
# An origin nothing listens on, never granted: its fetch is refused by the sandbox first.
UNGRANTED = "http://127.0.0.1:9"
FOURTH_ANSWER = "Nothing answered there."

SCRIPT = {
    "steps": [
        # Turn 1: a write, approved.
        {
            "kind": "tool_calls",
            "content": "I'll write the note.",
            "calls": [
                {
                    "id": "call_approved",
                    "name": "fs",
                    "arguments": {
                        "op": "write",
                        "path": "/data/x.txt",
                        "content": FIRST_CONTENT,
                    },
                }
            ],
        },
        {"kind": "text", "text": FIRST_ANSWER},
        # Turn 2: a write, denied.
        {
            "kind": "tool_calls",
            "content": "Now a second file.",
            "calls": [
                {
                    "id": "call_denied",
                    "name": "fs",
                    "arguments": {
                        "op": "write",
                        "path": "/data/denied.txt",
                        "content": "must not exist",
                    },
                }
            ],
        },
        {"kind": "text", "text": SECOND_ANSWER},
        # Turn 3: hostile text, streamed in 5-character pieces 20 ms apart.
        {"kind": "text", "text": HOSTILE_ANSWER, "chunk": 5, "delay_ms": 20},
        # Turn 4: a fetch from an origin the probe was not granted: a grant request.
        {
            "kind": "tool_calls",
            "content": "Fetching it.",
            "calls": [
                {
                    "id": "call_fetch",
                    "name": "http",
                    "arguments": {"url": f"{UNGRANTED}/page"},
                }
            ],
        },
        {"kind": "text", "text": FOURTH_ANSWER},
    ]
}


class Failure(AssertionError):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---- processes ---------------------------------------------------------------------------


def _die_with_parent():
    """In the child: receive SIGKILL if this test process dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        # Not Linux: the processes are still stopped by the test's own clean-up.
        pass


class Process:
    """A child process whose output goes to files in the work directory."""

    def __init__(self, name, argv, env, cwd, logs):
        self.name = name
        self.stdout_path = logs / f"{name}.stdout"
        self.stderr_path = logs / f"{name}.stderr"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(
                [str(a) for a in argv],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                preexec_fn=_die_with_parent,
            )
        log(f"started {name} (pid {self.popen.pid})")

    def wait_for(self, path, pattern, timeout):
        """The first match of `pattern` in the output file `path`, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, path.read_text(errors="replace"))
            if match:
                return match
            if self.popen.poll() is not None:
                raise Failure(
                    f"{self.name} exited with {self.popen.returncode} before printing /{pattern}/"
                )
            time.sleep(0.05)
        raise Failure(f"{self.name} printed no /{pattern}/ within {timeout} s")

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Asks it to stop with `sig`, kills it after `timeout`; returns its exit status."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(sig)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop within {timeout} s: killing it")
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode

    def output(self):
        text = ""
        for path in (self.stdout_path, self.stderr_path):
            if path.exists() and path.stat().st_size:
                tail = path.read_text(errors="replace")[-4000:]
                text += f"--- {path.name} (last 4000 characters)\n{tail}\n"
        return text


def child_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORDON_") and k != "RUST_LOG"}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update({k: str(v) for k, v in extra.items()})
    return env


# ---- the browser -------------------------------------------------------------------------


def start_browser(work, logs):
    options = ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = work / "chromium-profile"
    profile.mkdir()
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium keeps its crash database and caches under the XDG directories: in the work
    # directory, so nothing is left in the user's home.
    xdg = {name: work / name.lower() for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    for path in xdg.values():
        path.mkdir()
    service = ChromeService(
        # A driver path given here means selenium never runs Selenium Manager (no downloads).
        executable_path=CHROMEDRIVER,
        log_output=str(logs / "chromedriver.log"),
        env=child_env(**xdg),
        popen_kw={"preexec_fn": _die_with_parent},
    )
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


# What the test reads off the page, as textContent (WebDriver's .text leaves out what is not
# rendered, control characters among them).
JS_TRANSCRIPT = """
return [...document.querySelectorAll('#transcript .msg')].map(m => [
  m.className, m.querySelector('.who').textContent, m.querySelector('.body').textContent]);
"""
JS_AUDIT_ROWS = """
return [...document.querySelectorAll('#audit-table tbody tr')].map(r => ({
  kind: r.dataset.kind, cells: [...r.children].map(c => c.textContent)}));
"""
JS_TOOL_ROWS = """
return [...document.querySelectorAll('#tool-table tbody tr')].map(
  r => [...r.children].map(c => c.textContent));
"""
JS_PAGE_STATE = """
const t = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
return {
  status: t('status'),
  login_hidden: document.getElementById('login').hidden,
  login_error: t('login-error'),
  app_hidden: document.getElementById('app').hidden,
  active_tab: (document.querySelector('.tab.active') || {}).id,
  session_title: t('session-title'),
  sessions: t('session-list'),
  approvals: t('approval-list'),
  session_approvals: t('session-approvals'),
  audit_error: t('audit-error'),
  images: document.images.length,
  scripts: document.scripts.length,
};
"""
# Records every text the newest answer in the transcript shows, to see it grow as it streams.
JS_WATCH_ANSWER = """
window.seenAnswers = [];
new MutationObserver(() => {
  const body = [...document.querySelectorAll('#transcript .msg.assistant .body')].pop();
  if (body && window.seenAnswers.at(-1) !== body.textContent) {
    window.seenAnswers.push(body.textContent);
  }
}).observe(document.getElementById('transcript'),
  {childList: true, subtree: true, characterData: true});
"""
# What the audit page's charts show: the calls and refusals they count, the tools they rank.
JS_CHARTS = """
const buckets = [...document.querySelectorAll('#chart-calls g.bucket')];
const sum = (k) => buckets.reduce((n, b) => n + Number(b.dataset[k]), 0);
return {
  hidden: document.getElementById('audit-charts').hidden,
  calls: sum('calls'),
  refused: sum('refused'),
  slowest: [...document.querySelectorAll('#chart-slowest g.tool')]
    .map(g => ({tool: g.dataset.tool, ms: g.dataset.medianMs})),
};
"""
# Elements inside the places where text from models, tools and plugins is shown: there must be
# none.
JS_MADE_ELEMENTS = """
return [...document.querySelectorAll(
  '#transcript .body *, #transcript .who *, .approval pre *, .approval strong *,' +
  ' .approval .grants *, .approval .why *, #audit-table td *, #tool-table td *,' +
  ' #audit-charts text *')
].map(e => e.outerHTML);
"""


class Console:
    """The page, as a user sees and uses it."""

    def __init__(self, driver, base):
        self.d = driver
        self.base = base

    def wait(self, condition, what, timeout=WAIT):
        """Waits until `condition()` is truthy (stale elements count as not yet) and returns it."""

        def attempt(_):
            try:
                return condition()
            except StaleElementReferenceException:
                return False

        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(attempt)
        except TimeoutException:
            raise Failure(f"timed out after {timeout} s waiting for {what}") from None

    def find(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def one(self, css):
        found = self.find(css)
        return found[0] if found else None

    def visible(self, css):
        e = self.one(css)
        return e if e is not None and e.is_displayed() else None

    def text_of(self, css):
        """textContent, exactly (WebDriver's .text drops what is not rendered)."""
        return self.d.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            css,
        )

    def click(self, css, what):
        """Clicks the element when it is there and visible, retrying if it is redrawn meanwhile."""

        def attempt():
            e = self.visible(css)
            if e is None or not e.is_enabled():
                return False
            e.click()
            return True

        self.wait(attempt, f"{what} ({css}) to be clickable")

    def type_into(self, css, text, what):
        e = self.wait(lambda: self.visible(css), f"{what} ({css})")
        e.clear()
        e.send_keys(text)

    def transcript_messages(self):
        """The transcript as (class, who, body) triples, bodies by textContent."""
        return self.d.execute_script(JS_TRANSCRIPT)

    def wait_transcript(self, predicate, what, timeout=WAIT):
        return self.wait(
            lambda: predicate(self.transcript_messages()),
            f"the transcript to show {what}",
            timeout,
        )

    def audit_rows(self):
        return self.d.execute_script(JS_AUDIT_ROWS)

    def state(self):
        """What the page shows, for a failure report."""
        parts = []
        try:
            parts.append(f"url: {self.d.current_url}")
            parts.append(f"title: {self.d.title!r}")
            page = self.d.execute_script(JS_PAGE_STATE)
            parts.append("page state: " + json.dumps(page, indent=1))
            parts.append(
                "transcript:\n"
                + "\n".join(f"  {c:>16} | {w} | {b!r}" for c, w, b in self.transcript_messages())
            )
            parts.append("audit table:\n" + "\n".join(f"  {r}" for r in self.audit_rows()))
        except WebDriverException as e:
            parts.append(f"(cannot read the page: {e.msg})")
        try:
            entries = self.d.get_log("browser")
            parts.append(
                "browser console:\n" + "\n".join(f"  {e['level']} {e['message']}" for e in entries)
            )
        except Exception as e:
            parts.append(f"(no browser console log: {e})")
        try:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "failure.png"
            self.d.save_screenshot(str(shot))
            (ARTIFACTS / "failure.html").write_text(self.d.page_source)
            parts.append(f"screenshot: {shot}, page source: {ARTIFACTS / 'failure.html'}")
        except Exception as e:
            parts.append(f"(no screenshot: {e})")
        return "\n".join(parts)


# ---- the scenario ------------------------------------------------------------------------


def has(messages, cls=None, who=None, body=None, exact=False):
    """Whether some message matches: its class contains `cls`, `who` is its label, `body` is in
    (or with `exact`, is) its text."""
    for c, w, b in messages:
        if cls is not None and cls not in c.split():
            continue
        if who is not None and w != who:
            continue
        if body is not None and (b != body if exact else body not in b):
            continue
        return True
    return False


def scenario(console, work, data, token, home):
    c = console
    d = c.d

    log("open the console: it asks for the token")
    d.get(c.base + "/")
    c.wait(lambda: c.visible("#token-input"), "the login form")
    check(d.title == PAGE_TITLE, f"the page title is {d.title!r}")

    log("a wrong token is refused")
    c.type_into("#token-input", "not-the-token-0123456789", "the token field")
    c.click("#token-save", "Use token")
    c.wait(lambda: "not accepted" in (c.text_of("#login-error") or ""), "the login error")
    check(not c.visible("#app"), "the app is shown after a wrong token")

    log("log in by typing the token")
    c.type_into("#token-input", token, "the token field")
    c.click("#token-save", "Use token")
    c.wait(lambda: c.visible("#app") and not c.visible("#login"), "the app after login")
    c.wait(lambda: c.text_of("#status") == "connected", "the status 'connected'")
    who = c.text_of("#who")
    check(
        who.startswith("signed in as default (sessions, sessions:all, approve, approve:own"),
        f"the console does not say who is signed in: {who!r}",
    )
    check(c.visible("#tab-audit") is not None, "the audit tab is hidden from the admin token")

    log("create a session from the UI")
    c.type_into("#new-session-id", SESSION, "the new session name")
    c.click("#new-session", "New")
    c.wait(lambda: c.text_of("#session-title") == SESSION, "the new session to be selected")
    c.wait(
        lambda: c.one(f'#session-list li[data-session="{SESSION}"].selected'),
        "the session in the list",
    )

    # ---- turn 1: approved ----
    log("send a message from the composer")
    c.type_into("#message", "Write me a note.", "the composer")
    c.click("#send", "Send")
    c.wait_transcript(
        lambda m: has(m, "user", "you", "Write me a note.", exact=True),
        "the user's message",
    )

    log("the approval appears, with the tool, its arguments, its grants and why it asks")
    card_css = f'#session-approvals .approval[data-session="{SESSION}"]'
    card = c.wait(lambda: c.visible(card_css), "the approval in the session view")
    call_id = card.get_attribute("data-call")
    card_text = c.text_of(card_css)
    check(
        "fs" in c.text_of(card_css + " strong"),
        f"the approval names no tool: {card_text!r}",
    )
    check("plugin probe" in card_text, f"the approval names no plugin: {card_text!r}")
    shown_args = json.loads(c.text_of(card_css + " pre.arguments"))
    check(
        shown_args == {"op": "write", "path": "/data/x.txt", "content": FIRST_CONTENT},
        f"the approval shows other arguments: {shown_args!r}",
    )
    check_inert(c)
    grant = f"fs:{data}:/data:rw"
    check(
        grant in c.text_of(card_css + " .grants"),
        f"the approval does not show the grant {grant}: {card_text!r}",
    )
    check(
        "declares itself destructive" in c.text_of(card_css + " .why"),
        f"the approval does not say why it asks: {card_text!r}",
    )
    check(
        [b.get_attribute("data-answer") for b in c.find(card_css + " button[data-answer]")]
        == ["yes", "no", "always"],
        "the approval's buttons are not Approve, Deny, Always",
    )
    log("the Approvals tab lists it too, with a count")
    c.wait(lambda: c.text_of("#approval-count") == "1", "the approval count 1")
    c.click("#tab-approvals", "the Approvals tab")
    c.wait(
        lambda: c.visible(f'#approval-list .approval[data-call="{call_id}"]'),
        "the approval in the Approvals tab",
    )
    c.click("#tab-sessions", "the Sessions tab")
    check(not os.path.exists(data / "x.txt"), "the file was written before the approval")

    log(f"approve call {call_id}")
    c.click(f'{card_css}[data-call="{call_id}"] button[data-answer="yes"]', "Approve")

    log("the tool's result and the model's answer appear, live")
    c.wait_transcript(lambda m: has(m, "tool", "→ fs", '"written"'), "the tool's result")
    c.wait_transcript(
        lambda m: has(m, "assistant", "model", FIRST_ANSWER, exact=True),
        "the model's answer",
    )
    c.wait(lambda: not c.find("#session-approvals .approval"), "the approval to go away")
    c.wait(lambda: c.text_of("#approval-count") == "0", "the approval count 0")
    log("the session's labels show, live: the probe reads a directory, so it saw private data")
    c.wait(lambda: c.visible("#session-labels"), "the session's labels")
    labels = c.text_of("#session-labels")
    check(
        "private (probe.fs through fs:" in labels and "Rule of Two" not in labels,
        f"the labels line says {labels!r}",
    )
    messages = c.transcript_messages()
    check(
        not any("error" in cls.split() for cls, _, _ in messages),
        f"the first turn shows an error: {messages!r}",
    )
    written = data / "x.txt"
    check(written.exists(), f"{written} was not written")
    check(written.read_text() == FIRST_CONTENT, f"{written} holds {written.read_text()!r}")
    log("more tools are installed than a request offers: the console says which, and why")
    c.wait(lambda: c.visible("#session-tools"), "the offered tools")
    offered = c.text_of("#session-tools")
    check(
        "The last request offered 12 of " in offered and "fs (called earlier)" in offered,
        f"the offered tools line says {offered!r}",
    )
    check_inert(c)

    # ---- turn 2: denied ----
    log("a second message; its call is denied")
    c.type_into("#message", "Write another one.", "the composer")
    c.click("#send", "Send")
    c.wait(
        lambda: (e := c.visible(card_css)) is not None and e.get_attribute("data-call") != call_id,
        "the second approval",
    )
    denied_call = c.one(card_css).get_attribute("data-call")
    check(
        json.loads(c.text_of(card_css + " pre.arguments"))["path"] == "/data/denied.txt",
        "the second approval is not for /data/denied.txt",
    )
    log(f"deny call {denied_call}")
    c.click(f'{card_css}[data-call="{denied_call}"] button[data-answer="no"]', "Deny")
    c.wait_transcript(lambda m: has(m, "error", "✗ fs", "declined"), "the denial")
    c.wait_transcript(
        lambda m: has(m, "assistant", "model", SECOND_ANSWER, exact=True),
        "the answer after the denial",
    )
    check(not (data / "denied.txt").exists(), "the denied call wrote its file")
    check(
        sorted(os.listdir(data)) == ["x.txt"],
        f"the data directory holds {sorted(os.listdir(data))}",
    )

    # ---- turn 3: hostile text ----
    log("an answer with markup and control characters streams in, as text")
    d.execute_script(JS_WATCH_ANSWER)
    c.type_into("#message", "Say something odd.", "the composer")
    c.click("#send", "Send")
    c.wait_transcript(
        lambda m: has(m, "assistant", "model", HOSTILE_ANSWER, exact=True),
        "the hostile answer, whole",
    )
    seen = d.execute_script("return window.seenAnswers")
    check(
        any(0 < len(t) < len(HOSTILE_ANSWER) and HOSTILE_ANSWER.startswith(t) for t in seen),
        f"the answer was not shown as it streamed in; the transcript showed {seen!r}",
    )
    check_inert(c)

    live = c.transcript_messages()
    log("after a reload, the stored transcript is shown as text too (the token stays in the tab)")
    d.refresh()
    c.wait(lambda: c.visible("#app"), "the app after the reload, without logging in again")
    c.click(f'#session-list li[data-session="{SESSION}"]', "the session in the list")
    c.wait_transcript(
        lambda m: has(m, "assistant", "model", HOSTILE_ANSWER, exact=True),
        "the stored hostile answer",
    )
    messages = c.transcript_messages()
    stored_labels = c.text_of("#session-labels")
    check(stored_labels == labels, f"after a reload the labels say {stored_labels!r}")
    check(
        messages == live,
        "the transcript drawn live differs from the stored one:\n"
        + "\n".join(f"  live:   {m!r}" for m in live)
        + "\n"
        + "\n".join(f"  stored: {m!r}" for m in messages),
    )
    for expected in (
        "Write me a note.",
        FIRST_ANSWER,
        "Write another one.",
        SECOND_ANSWER,
        "Say something odd.",
    ):
        check(
            any(expected in b for _, _, b in messages),
            f"the stored transcript lacks {expected!r}: {messages!r}",
        )
    check(
        has(messages, "error", "✗ fs", "declined"),
        f"the stored transcript lacks the denial: {messages!r}",
    )
    check(
        has(messages, "tool", "→ fs", '"written"'),
        f"the stored transcript lacks the result: {messages!r}",
    )
    check_inert(c)

    # ---- the audit log ----
    log("the audit tab lists both calls, who decided and how they ended")
    c.click("#tab-audit", "the Audit log tab")

    def tool_rows():
        return [r["cells"] for r in c.audit_rows() if r["kind"] == "tool_call"]

    rows = c.wait(
        lambda: len(tool_rows()) == 2 and tool_rows(),
        "two tool calls in the audit table",
    )
    # Columns: time, origin, session, what, decision, by, outcome, duration, memory, refused.
    by_decision = {r[4]: r for r in rows}
    check(set(by_decision) == {"yes", "no"}, f"the decisions are {[r[4] for r in rows]}")
    for r in rows:
        check(
            r[1] == "serve" and r[2] == SESSION and r[3] == "probe.fs",
            f"an audit row says {r!r}",
        )
        check(
            r[5] == "API token `default`",
            f"an audit row says it was decided by {r[5]!r}",
        )
    check(
        by_decision["yes"][6] == "ok",
        f"the approved call's outcome is {by_decision['yes'][6]!r}",
    )
    check(
        by_decision["yes"][7].endswith(" ms"),
        f"the approved call shows no duration: {by_decision['yes']!r}",
    )
    check(
        by_decision["no"][6].startswith("not run:") and "declined" in by_decision["no"][6],
        f"the denied call's outcome is {by_decision['no'][6]!r}",
    )
    check(
        any(
            r["kind"] == "home_change" and "install probe" in r["cells"][3] for r in c.audit_rows()
        ),
        "the audit table lacks the probe's installation",
    )

    log("the charts above the table count the same calls")
    charts = c.d.execute_script(JS_CHARTS)
    check(not charts["hidden"], "the charts are hidden though the table shows calls")
    check(
        (charts["calls"], charts["refused"]) == (2, 1),
        f"the calls chart counts {charts['calls']} calls and {charts['refused']} refused, "
        "not the two calls of which one was declined",
    )
    check(
        [t["tool"] for t in charts["slowest"]] == ["probe.fs"]
        and float(charts["slowest"][0]["ms"]) > 0,
        f"the slowest tools chart shows {charts['slowest']!r}, not the call that ran",
    )

    log("filter by tool")
    c.type_into("#audit-tool", "probe.fs", "the tool filter")
    c.click("#audit-apply", "Filter")
    c.wait(
        lambda: (
            (rows := c.audit_rows())
            and len(rows) == 2
            and all(r["cells"][3] == "probe.fs" for r in rows)
        ),
        "only the two probe.fs calls",
    )
    c.type_into("#audit-tool", "echo", "the tool filter")
    c.click("#audit-apply", "Filter")
    c.wait(lambda: c.audit_rows() == [], "no rows for a tool never called")
    c.type_into("#audit-tool", "fs", "the tool filter")
    c.click("#audit-apply", "Filter")
    c.wait(lambda: len(c.audit_rows()) == 2, "the two calls for the bare tool name")

    log("filter by session, kind and time")
    c.type_into("#audit-tool", "", "the tool filter")
    c.type_into("#audit-session", "no-such-session", "the session filter")
    c.click("#audit-apply", "Filter")
    c.wait(lambda: c.audit_rows() == [], "no rows for another session")
    c.type_into("#audit-session", SESSION, "the session filter")
    c.click("#audit-apply", "Filter")
    c.wait(lambda: len(c.audit_rows()) == 2, "the session's two calls")
    c.type_into("#audit-session", "", "the session filter")
    c.d.execute_script("document.getElementById('audit-kind').value = 'home_change'")
    c.click("#audit-apply", "Filter")
    c.wait(
        lambda: (rows := c.audit_rows()) and all(r["kind"] == "home_change" for r in rows),
        "only home changes",
    )
    c.d.execute_script("document.getElementById('audit-kind').value = ''")
    c.type_into("#audit-since", "yesterday", "the time filter")
    c.click("#audit-apply", "Filter")
    c.wait(
        lambda: "is not a time" in (c.text_of("#audit-error") or ""),
        "the error for a bad time",
    )
    c.type_into("#audit-since", "1h", "the time filter")
    c.click("#audit-apply", "Filter")
    c.wait(
        lambda: not c.text_of("#audit-error") and len(c.audit_rows()) >= 3,
        "the last hour's records",
    )

    log("the tools tab lists the probe's tools with their policy")
    c.click("#tab-tools", "the Tools tab")
    c.wait(
        lambda: any(
            cells[:3] == ["fs", "probe", "ask"] for cells in c.d.execute_script(JS_TOOL_ROWS)
        ),
        "the fs tool in the Tools tab",
    )
    check_inert(c)

    log("a token handed over in the URL's fragment logs in, and is taken out of the URL")
    d.execute_script("sessionStorage.clear()")
    d.get("about:blank")
    d.get(c.base + "/#token=" + token)
    c.wait(
        lambda: c.visible("#app") and not c.visible("#login"),
        "the app after a login by fragment",
    )
    c.wait(
        lambda: c.one(f'#session-list li[data-session="{SESSION}"]'),
        "the session list after a login by fragment",
    )
    check(token not in d.current_url, f"the token stays in the URL: {d.current_url}")
    check(
        d.execute_script("return sessionStorage.getItem('cordon-token')") == token,
        "the token was not kept in the tab",
    )

    # ---- turn 4: a grant request ----
    log("a fetch the sandbox refuses becomes a grant request with the origin and its choices")
    c.click(f'#session-list li[data-session="{SESSION}"]', "the session in the list")
    c.wait(lambda: c.text_of("#session-title") == SESSION, "the session to be selected")
    c.type_into("#message", "Fetch the page.", "the composer")
    c.click("#send", "Send")
    card_css = f'#session-approvals .approval[data-session="{SESSION}"]'
    grant_css = card_css + " pre.requested-grants"
    # The probe's `http` may first be asked about as a call; approved, its refusal follows.
    for _ in range(2):
        c.wait(lambda: c.visible(card_css), "a question in the session view")
        if c.one(grant_css):
            break
        asked = f'{card_css}[data-call="{c.one(card_css).get_attribute("data-call")}"]'
        c.click(asked + ' button[data-answer="yes"]', "Approve")
        c.wait(
            lambda asked=asked: c.one(grant_css) or not c.one(asked),
            "the approval to go",
        )
    c.wait(lambda: c.visible(grant_css), "the grant request")
    wanted = c.text_of(grant_css)
    check(wanted == f"net:{UNGRANTED}", f"the grant request asks for {wanted!r}")
    card_text = c.text_of(card_css)
    check("refused by its sandbox" in card_text, f"the card says {card_text!r}")
    answers = [b.get_attribute("data-answer") for b in c.find(card_css + " button[data-answer]")]
    check(
        answers == ["yes", "always", "for 1h", "forever", "no", "never"],
        f"the grant request offers {answers!r}",
    )
    call = c.one(card_css).get_attribute("data-call")
    c.click(f'{card_css}[data-call="{call}"] button[data-answer="yes"]', "Grant for this call")
    c.wait_transcript(
        lambda m: has(m, "assistant", "model", FOURTH_ANSWER, exact=True),
        "the answer after the grant",
    )
    lock = (home / "plugins.toml").read_text()
    check(UNGRANTED not in lock, "a grant for one call was written to the lock")


def check_inert(c):
    """Nothing the model wrote became markup or ran."""
    d = c.d
    check(d.title == PAGE_TITLE, f"the page title changed to {d.title!r}")
    images = d.execute_script("return document.images.length")
    check(images == 0, f"the page holds {images} img element(s)")
    scripts = d.execute_script("return [...document.scripts].map(s => s.getAttribute('src'))")
    check(scripts == ["/console.js"], f"the page holds scripts {scripts!r}")
    made = d.execute_script(JS_MADE_ELEMENTS)
    check(not made, f"text became markup: {made!r}")


# ---- main --------------------------------------------------------------------------------


OIDC_MODULES = ROOT / "target/npm-oidc"


def sign_in_with_the_identity_provider(c, work, home, logs):
    """A host taking an OpenID provider's tokens (the certified oidc-provider package, run here
    on 127.0.0.1): the console's button sends the user to sign in there (authorization code with
    PKCE) and back, signed in under the name they gave. Returns the two processes."""
    log("sign in with the identity provider: the console's button, the provider's login, back")
    check(
        (OIDC_MODULES / "node_modules/oidc-provider").is_dir(),
        f"oidc-provider is not installed in {OIDC_MODULES}: `make test` installs it",
    )
    shutil.copy(ROOT / "tests/oidc/provider.mjs", OIDC_MODULES / "provider.mjs")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    config = work / "sso.toml"
    config.write_text(
        f'[serve.oidc]\nissuer = "{issuer}"\naudience = "http://cordon.test"\n'
        'console_client_id = "console"\n'
    )
    sso = Process(
        "cordon-serve-sso",
        [CORDON, "serve", "--listen", "127.0.0.1:0", "--config", config],
        child_env(CORDON_HOME=home, RUST_LOG="cordon_serve=info,warn"),
        work,
        logs,
    )
    base = sso.wait_for(
        sso.stderr_path, r"cordon serve: listening on (http://127\.0\.0\.1:\d+)", START_WAIT
    ).group(1)
    provider = Process(
        "oidc-provider",
        ["node", OIDC_MODULES / "provider.mjs", port, "console-key"],
        child_env(CONSOLE_REDIRECT=base + "/"),
        work,
        logs,
    )
    provider.wait_for(provider.stdout_path, r"listening on", START_WAIT)
    c.d.execute_script("sessionStorage.clear()")
    c.d.get(base + "/")
    button = c.wait(
        lambda: (b := c.visible("#sign-in")) and issuer in b.text and b,
        f"a button to sign in with {issuer}",
    )
    button.click()
    c.wait(lambda: c.d.current_url.startswith(issuer), "the provider's sign-in page")
    login = c.wait(lambda: c.visible("input[name=login]"), "the provider's login form")
    login.send_keys("carol")
    c.one("input[name=password]").send_keys("any")
    c.one("button[type=submit]").click()
    # The provider may ask to confirm what the console asks for.
    deadline = time.monotonic() + WAIT
    while not c.d.current_url.startswith(base) and time.monotonic() < deadline:
        buttons = c.find("button.login-submit")
        if buttons and c.d.current_url.startswith(issuer):
            try:
                buttons[0].click()
            except (StaleElementReferenceException, WebDriverException):
                pass
        time.sleep(0.2)
    try:
        who = c.wait(
            lambda: (
                (c.text_of("#who") or "").startswith("signed in as oidc:carol")
                and c.text_of("#who")
            ),
            "signed in as oidc:carol",
        )
    except Failure:
        print(sso.output() + provider.output(), file=sys.stderr)
        raise
    check("sessions" in who, f"the console says {who!r}")
    check("code=" not in c.d.current_url, f"the code stayed in the URL: {c.d.current_url}")
    return provider, sso


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    for f in (CORDON, SCRIPTED_LLM, PROBE):
        if not f.exists():
            print(f"missing {f}: run `make` first", file=sys.stderr)
            return 2
    for f in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(f):
            print(
                f"missing {f}: run `make browser-test` (it installs chromium and chromium-driver)",
                file=sys.stderr,
            )
            return 2

    # SIGTERM and SIGHUP end the test like Ctrl-C does, through the clean-up below.
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="cordon-browser-"))
    logs = work / "logs"
    logs.mkdir()
    home = work / "home"
    data = work / "data"
    data.mkdir()
    record = work / "requests.jsonl"
    (work / "script.json").write_text(json.dumps(SCRIPT))
    model = server = driver = console = None
    ok = False
    try:
        log(f"work directory {work}")
        env = child_env(CORDON_HOME=home)
        install = subprocess.run(
            [
                str(CORDON),
                "plugin",
                "install",
                str(PROBE),
                "--grant",
                f"fs:{data}:/data:rw",
            ],
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_WAIT * 3,
        )
        check(
            install.returncode == 0,
            f"cordon plugin install failed:\n{install.stdout}{install.stderr}",
        )

        model = Process(
            "scripted-llm",
            [
                SCRIPTED_LLM,
                "--script",
                work / "script.json",
                "--addr",
                "127.0.0.1:0",
                "--record",
                record,
            ],
            child_env(),
            work,
            logs,
        )
        llm_url = model.wait_for(
            model.stdout_path, r"^(http://127\.0\.0\.1:\d+/v1)\s*$", START_WAIT
        ).group(1)
        log(f"scripted model at {llm_url}")

        server = Process(
            "cordon-serve",
            [CORDON, "serve", "--listen", "127.0.0.1:0"],
            child_env(CORDON_HOME=home, CORDON_LLM_URL=llm_url, CORDON_MODEL="scripted"),
            work,
            logs,
        )
        base = server.wait_for(
            server.stderr_path,
            r"cordon serve: listening on (http://127\.0\.0\.1:\d+)",
            START_WAIT,
        ).group(1)
        token = (home / "serve-token").read_text().strip()
        log(f"cordon serve at {base}")

        driver = start_browser(work, logs)
        console = Console(driver, base)
        scenario(console, work, data, token, home)

        log("the model's request after the denial carries the refusal")
        check(model.stop(signal.SIGINT) == 0, "scripted-llm did not stop cleanly")
        requests = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
        check(
            len(requests) == len(SCRIPT["steps"]),
            f"the model got {len(requests)} requests, not {len(SCRIPT['steps'])}",
        )
        after_denial = requests[3]["body"]["messages"]
        tool_messages = [m for m in after_denial if m["role"] == "tool"]
        check(
            tool_messages and tool_messages[-1]["tool_call_id"] == "call_denied",
            f"the last tool message is not the denied call's: {tool_messages!r}",
        )
        check(
            "declined" in tool_messages[-1]["content"],
            f"the model was told {tool_messages[-1]['content']!r} about the denied call",
        )
        check(
            '"written"' in tool_messages[0]["content"],
            f"the model was told {tool_messages[0]['content']!r} about the write",
        )

        log("stop cordon serve")
        check(server.stop(signal.SIGTERM) == 0, "cordon serve did not stop cleanly")

        provider, sso = sign_in_with_the_identity_provider(console, work, home, logs)
        for p in (sso, provider):
            p.stop()
        ok = True
    except (
        Failure,
        WebDriverException,
        subprocess.SubprocessError,
        OSError,
        KeyboardInterrupt,
    ) as e:
        print(
            "\nFAILED: "
            + (str(e) if isinstance(e, (Failure, KeyboardInterrupt)) else traceback.format_exc()),
            file=sys.stderr,
        )
        if isinstance(e, Failure):
            print("".join(traceback.format_tb(e.__traceback__)[-2:]), file=sys.stderr)
        if console is not None:
            print("\n" + console.state(), file=sys.stderr)
    finally:
        if driver is not None:
            try:
                driver.quit()
            except Exception as e:
                log(f"cannot quit the browser: {e}")
        for p in (server, model):
            if p is not None:
                p.stop()
        if not ok:
            for p in (server, model):
                if p is not None:
                    print(p.output(), file=sys.stderr)
            chromedriver_log = logs / "chromedriver.log"
            if driver is None and chromedriver_log.exists():
                tail = chromedriver_log.read_text(errors="replace")[-2000:]
                print(
                    f"--- chromedriver.log (last 2000 characters)\n{tail}",
                    file=sys.stderr,
                )
        shutil.rmtree(work, ignore_errors=True)
    log(f"{'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
