"""Runs a snippet of Python the way a REPL cell does, and reports everything it did.

This is the core of the ``run_python`` tool, kept free of WIT and SDK code so the same logic
runs (and is tested) under a normal ``python3`` and inside the component.

What a model needs back from running code is: what it printed, the value of its last
expression, and - when it fails - the traceback pointing into *its* code, together with
whatever it printed before failing. A bare tool error would lose the output, so failures of
the code itself (syntax errors, exceptions, ``sys.exit`` with a non-zero status) come back as
a normal result with ``ok: false``; only malformed tool arguments are tool errors.

Output is captured in memory and capped per stream so a print loop produces a truncated
result with a note instead of exhausting the instance's memory. The caps bound what is kept,
not how long the code runs: wall time and memory are limited by the host runtime.

When the host stops the code at a limit, nothing of the report comes back, so output can also
be echoed to the real streams (``mirrors``): the host keeps the last lines it saw and quotes
them in the time- or memory-limit error, which tells a model how far its code got.
"""

from __future__ import annotations

import ast
import builtins
import codecs
import collections
import io
import json
import linecache
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, TextIO

#: The file name user code is compiled under; tracebacks show it.
CODE_FILENAME = "<code>"

#: Echoing output to the host: each finished line is sent at once, up to this many sends per
#: window; past that (a print flood) lines are queued and sent when the next window opens. So
#: at a limit the host has seen every line, or at worst all but the last window's worth.
MIRROR_WINDOW_SECONDS = 0.05
MIRROR_SENDS_PER_WINDOW = 64


@dataclass(frozen=True)
class Limits:
    """How much of each part of the result is kept, in characters."""

    stdout_chars: int = 20_000
    stderr_chars: int = 20_000
    result_chars: int = 20_000
    traceback_chars: int = 8_000


class _CappedBytes:
    """``sys.stdout.buffer`` stand-in: decodes UTF-8 incrementally into the text stream."""

    def __init__(self, owner: CappedWriter) -> None:
        self._owner = owner
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: Any) -> int:
        raw = bytes(data)
        self._owner.write(self._decoder.decode(raw))
        return len(raw)

    def flush(self) -> None:
        self._owner.write(self._decoder.decode(b"", final=True))

    def writable(self) -> bool:
        return True


class CappedWriter(io.TextIOBase):
    """A text stream that keeps the first and the last part of what is written.

    At most ``limit`` characters are kept: the first half and a rolling last half, because
    a flood of output usually has its setup at the start and its outcome (a summary, the
    final error) at the end. Everything between is counted in ``dropped``.
    """

    def __init__(self, limit: int, mirror: TextIO | None = None) -> None:
        super().__init__()
        self._mirror = mirror
        self._pending: list[str] = []
        self._window_start = time.monotonic()
        self._sends = 0
        limit = max(0, limit)
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head: list[str] = []
        self._head_len = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_len = 0
        self.written = 0
        self.buffer = _CappedBytes(self)

    @property
    def dropped(self) -> int:
        """How many characters were written but not kept."""
        return self.written - self._head_len - self._tail_len

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "strict"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: Any) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        count = len(text)
        self.written += count
        if self._mirror is not None:
            self._echo(text)
        room = self._head_limit - self._head_len
        if room > 0:
            piece = text[:room]
            self._head.append(piece)
            self._head_len += len(piece)
            text = text[room:]
        if not text or self._tail_limit == 0:
            return count
        if len(text) >= self._tail_limit:
            self._tail.clear()
            text = text[len(text) - self._tail_limit :]
            self._tail_len = 0
        self._tail.append(text)
        self._tail_len += len(text)
        while self._tail_len > self._tail_limit:
            excess = self._tail_len - self._tail_limit
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                self._tail_len -= len(first)
            else:
                self._tail[0] = first[excess:]
                self._tail_len -= excess
        return count

    def _echo(self, text: str) -> None:
        """Queues ``text`` for the mirror and sends the queue at line ends, within the budget
        of ``MIRROR_SENDS_PER_WINDOW`` sends per ``MIRROR_WINDOW_SECONDS``.

        Inside the component a write to the real stream costs ~1 us and reading the clock
        ~0.35 us, against ~0.1 us for an append: queueing, and looking at the clock only at
        line ends, keeps a print flood ~10% slower instead of ~60%.
        """
        pending = self._pending
        pending.append(text)
        if "\n" not in text:
            return
        now = time.monotonic()
        if now - self._window_start >= MIRROR_WINDOW_SECONDS:
            self._window_start = now
            self._sends = 0
        if self._sends < MIRROR_SENDS_PER_WINDOW or len(pending) >= 1024:
            self._sends += 1
            self._send()

    def _send(self) -> None:
        mirror = self._mirror
        if mirror is not None and self._pending:
            try:
                mirror.write("".join(self._pending))
                mirror.flush()
            except Exception:  # the echo is best effort and must never break the user's code
                self._mirror = None
        self._pending.clear()

    def close_mirror(self) -> None:
        """Sends what is still queued and stops echoing."""
        self._send()
        self._mirror = None

    def getvalue(self) -> str:
        """The kept text, with a marker where characters were dropped."""
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self.dropped:
            return f"{head}\n[... {self.dropped} characters dropped ...]\n{tail}"
        return head + tail


_NO_VALUE = object()


def run_code(
    code: str,
    input_value: Any = None,
    limits: Limits = Limits(),
    mirrors: tuple[TextIO, TextIO] | None = None,
) -> dict:
    """Runs ``code`` in a fresh namespace and returns a JSON-ready report.

    The namespace holds ``input`` (``input_value``, ``None`` when not given; it shadows the
    ``input()`` builtin, which has no stdin to read from in a tool anyway). If the last
    statement is an expression its value is returned like a REPL would show it.

    The report always has ``ok`` (bool), ``stdout`` and ``stderr`` (str). It has
    ``result_repr`` (and ``result``, when the value is JSON-serialisable) when the code ends
    in an expression whose value is not ``None``; ``error`` (``type``, ``message``, ``line``,
    ``traceback``) when ``ok`` is false; and ``notes`` when something was truncated or
    omitted. With ``mirrors`` (stdout, stderr), what the code prints is also echoed there.
    """
    out = CappedWriter(limits.stdout_chars, mirrors[0] if mirrors else None)
    err = CappedWriter(limits.stderr_chars, mirrors[1] if mirrors else None)
    notes: list[str] = []
    report: dict[str, Any] = {"ok": True}
    value: Any = _NO_VALUE

    # Lets tracebacks quote the offending source line, as they do for files.
    linecache.cache[CODE_FILENAME] = (len(code), None, code.splitlines(True), CODE_FILENAME)
    try:
        tree = ast.parse(code, CODE_FILENAME, "exec")
    # ValueError: the source holds a NUL byte; RecursionError/MemoryError: nesting too deep.
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        report["ok"] = False
        report["error"] = _describe_error(exc, limits, syntax=True)
        return _finish(report, out, err, notes)

    final = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        final = ast.Expression(tree.body.pop().value)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "input": input_value,
    }
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        exec(compile(tree, CODE_FILENAME, "exec"), namespace)  # the tool's purpose
        if final is not None:
            value = eval(compile(final, CODE_FILENAME, "eval"), namespace)
    except SystemExit as exc:
        status = exc.code
        if status is None or status == 0:
            notes.append(f"the code called sys.exit({'' if status is None else status})")
        else:
            report["ok"] = False
            report["error"] = {
                "type": "SystemExit",
                "message": (
                    f"the code exited with status {status}"
                    if isinstance(status, int)
                    else f"the code exited: {status}"
                ),
                "line": _last_code_line(exc),
                "traceback": "",
            }
    except BaseException as exc:  # every failure of user code is reported
        report["ok"] = False
        report["error"] = _describe_error(exc, limits)
    finally:
        try:
            out.buffer.flush()
            err.buffer.flush()
            out.close_mirror()
            err.close_mirror()
        finally:
            sys.stdout, sys.stderr = saved

    if value is not _NO_VALUE and value is not None:
        _add_value(report, value, limits, notes)
    return _finish(report, out, err, notes)


def _add_value(report: dict, value: Any, limits: Limits, notes: list[str]) -> None:
    try:
        text = repr(value)
    except Exception as exc:  # a user-defined __repr__ may raise
        text = f"<repr() failed: {type(exc).__name__}: {exc}>"
    if len(text) > limits.result_chars:
        notes.append(
            f"result_repr truncated: {len(text) - limits.result_chars} more characters "
            "dropped; print or return a summary instead"
        )
        text = text[: limits.result_chars]
    try:
        as_json = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError, OverflowError):
        as_json = None
    if as_json is not None:
        if len(as_json) > limits.result_chars:
            notes.append(
                f"result omitted: its JSON is {len(as_json)} characters, over the "
                f"{limits.result_chars} limit; see result_repr (truncated)"
            )
        elif (trouble := _json_trouble(value)) is not None:
            notes.append(trouble)
        else:
            report["result"] = value
    report["result_repr"] = text


#: Deepest nesting of a returned value kept as JSON. The host reads at most 128 levels (the
#: report itself is one), and a model cannot use a structure that deep anyway.
MAX_RESULT_DEPTH = 100


def _json_trouble(value: Any) -> str | None:
    """Why a JSON-serialisable value should not go back as JSON, or ``None`` if it can.

    An int outside the 64-bit range: JSON readers such as serde_json turn it into a float and
    silently lose digits. Nesting deeper than ``MAX_RESULT_DEPTH``: the host refuses it. Only
    called on values whose JSON fits the result limit, so the walk is short.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -(2**63) <= item < 2**64:
                return (
                    "result omitted: it holds integers beyond 64 bits, which JSON readers "
                    "round; see result_repr for the exact value"
                )
        elif isinstance(item, (dict, list, tuple)):
            if depth > MAX_RESULT_DEPTH:
                return (
                    f"result omitted: it nests deeper than {MAX_RESULT_DEPTH} levels; see "
                    "result_repr, or return a flatter summary"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def _finish(report: dict, out: CappedWriter, err: CappedWriter, notes: list[str]) -> dict:
    report["stdout"] = out.getvalue()
    report["stderr"] = err.getvalue()
    for name, stream in (("stdout", out), ("stderr", err)):
        if stream.dropped:
            notes.append(
                f"{name} truncated: {stream.written} characters were written; "
                f"{stream.dropped} from the middle were dropped"
            )
    if notes:
        report["notes"] = notes
    # The order a model reads best: verdict, value, output, then error details.
    order = ("ok", "result", "result_repr", "stdout", "stderr", "error", "notes")
    return {key: report[key] for key in order if key in report}


def _describe_error(exc: BaseException, limits: Limits, syntax: bool = False) -> dict:
    if isinstance(exc, SyntaxError) and exc.text is None and exc.filename == CODE_FILENAME:
        # compile() of an AST (e.g. 'return' outside a function) leaves out the source line.
        lines = linecache.getlines(CODE_FILENAME)
        if exc.lineno and 0 < exc.lineno <= len(lines):
            exc.text = lines[exc.lineno - 1]
    tb = exc.__traceback__
    if not syntax:
        # Drop the runner's own frames: the traceback starts in the user's code.
        while tb is not None and tb.tb_frame.f_code.co_filename != CODE_FILENAME:
            tb = tb.tb_next
    try:
        lines = traceback.format_exception(type(exc), exc, tb if not syntax else None)
        text = "".join(lines)
    except Exception as fmt_exc:  # never lose the original error
        text = f"{type(exc).__name__} (formatting the traceback failed: {fmt_exc!r})\n"
    if len(text) > limits.traceback_chars:
        # Keep the end: the innermost frames and the exception line matter most.
        cut = len(text) - limits.traceback_chars
        text = f"[{cut} characters of traceback dropped]\n" + text[cut:]
    if isinstance(exc, SyntaxError):
        message = exc.msg or str(exc)
        line = exc.lineno
    else:
        try:
            message = str(exc)
        except Exception:
            message = "<str() of the exception failed>"
        line = _last_code_line(exc)
    return {"type": type(exc).__name__, "message": message, "line": line, "traceback": text}


def _last_code_line(exc: BaseException) -> int | None:
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == CODE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
