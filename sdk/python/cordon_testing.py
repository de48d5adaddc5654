"""Test a built Cordon plugin component from Python, the way the Cordon host runs it.

Native unit tests of a Python plugin cannot catch the most common componentize-py mistake: a
module that was not imported at build time, so it is missing inside the component (including
modules the standard library imports lazily, such as ``heapq`` for ``Counter.most_common``).
Only running the built ``.wasm`` shows that. This module runs it in wasmtime-py (``pip
install wasmtime``), with a fresh instance per call, no ambient authority (no environment,
no preopens unless given, no network), an epoch deadline and a memory limit::

    from cordon_testing import ComponentHost

    with ComponentHost("build/my_tool.wasm") as host:
        [descriptor] = host.list_tools()
        contents = host.call("my_tool", {"x": 1})           # [Text(...)] / [Json(...)]
        host.call("my_tool", {}, preopens=[("/tmp/d", "/data", False)])

Tool errors come back as the SDK's ``InvalidArguments`` / ``NotFound`` / ``Denied`` /
``Failed`` exceptions, and traps (time limit, memory, stack) as :class:`ComponentTrap`.
It is a test aid, not the Cordon host: grants, approval and caching are the host's job.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import threading
import types
from typing import Any

import cordon_sdk
from cordon_sdk import Hints, Json, Text, ToolDescriptor, ToolError

try:
    import wasmtime
    from wasmtime import component as _wc
except ImportError:  # checked in ComponentHost so that importing this module never fails
    wasmtime = None

_TICK_S = 0.01
_INTERFACE = "cordon:tool/tools@0.1.5"
_OUTPUTS = "cordon:tool/tool-outputs@0.1.5"
_LOG = "cordon:tool/log@0.1.5"
_BULK_READ = "cordon:tool/bulk-read@0.1.5"
_RESULT_STREAM = "cordon:tool/result-stream@0.1.5"
_GRANT_WANTED = "cordon:tool/grant-wanted@0.1.5"
#: Grants one call may say it lacked, as the host counts them.
_MAX_WANTED = 8
_READER = 1  # the host resource type of bulk-read's `reader`
_MAX_QUEUED = 4096
_MAX_QUEUED_BYTES = 1 << 20
_MAX_PATH = 4096
_MAX_READERS = 16
_NOT_DIR = "not a directory"
_LOOP = "too many levels of symbolic links"
_BATCH_BYTES = 8 << 20


def _beneath(root: str, parts: list[str]) -> str | None:
    """``parts`` resolved below ``root`` as the host's RESOLVE_BENEATH open does: symbolic
    links are followed while they stay inside; an absolute link, or a ``..`` above ``root``
    (also one that would come back in), gives None. A missing component on the way gives the
    path of what is missing, a component on the way that is not a directory ``_NOT_DIR``, a
    link loop ``_LOOP``."""
    below: list[str] = []
    todo = list(parts)
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not below:
                return None
            below.pop()
            continue
        candidate = os.path.join(root, *below, part)
        if not os.path.lexists(candidate):
            return candidate
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                return _LOOP
            target = os.readlink(candidate)
            if target.startswith("/"):
                return None
            todo = target.split("/") + todo
            continue
        # Anything after it (another component, or a trailing slash) needs a directory.
        if todo and not os.path.isdir(candidate):
            return _NOT_DIR
        below.append(part)
    return os.path.join(root, *below)


def _read_opened(opened: Any) -> Any:
    """The contents of an ``(fd, size)`` from ``_open_granted`` (closing it), or its error."""
    if not isinstance(opened, tuple):
        return opened
    fd, size = opened
    with os.fdopen(fd, "rb") as file:
        return file.read(size)


_ERRORS = {
    "invalid-arguments": cordon_sdk.InvalidArguments,
    "not-found": cordon_sdk.NotFound,
    "denied": cordon_sdk.Denied,
    "failed": cordon_sdk.Failed,
}


class ComponentTrap(Exception):
    """The instance trapped: deadline reached, memory limit, stack exhausted or a guest bug."""


class ComponentHost:
    """Compiles one component once and runs each call in a fresh, limited instance."""

    def __init__(
        self,
        wasm_path: str,
        *,
        timeout_s: float = 10.0,
        memory_bytes: int = 256 << 20,
    ) -> None:
        if wasmtime is None:
            raise RuntimeError("cordon_testing needs the wasmtime package: pip install wasmtime")
        config = wasmtime.Config()
        config.epoch_interruption = True
        config.cache = True  # compiling a CPython component takes 10-20 s; reuse it
        self._engine = wasmtime.Engine(config)
        self._component = _wc.Component.from_file(self._engine, wasm_path)
        self._linker = _wc.Linker(self._engine)
        self._linker.add_wasip2()
        #: ``(level, message, fields)`` records the plugin wrote through ``cordon:tool/log``.
        self.logs: list[tuple[str, str, list[tuple[str, str]]]] = []
        with self._linker.root() as root:
            with root.add_instance(_LOG) as log:
                log.add_func("write", self._log)
            with root.add_instance(_BULK_READ) as bulk:
                bulk.add_resource("reader", _wc.ResourceType.host(_READER), self._reader_drop)
                bulk.add_func("[constructor]reader", self._reader_new)
                bulk.add_func("[method]reader.add", self._reader_add)
                bulk.add_func("[method]reader.queued", self._reader_queued)
                bulk.add_func("[method]reader.take", self._reader_take)
                bulk.add_func("[static]reader.sifting", self._reader_sifting)
                bulk.add_func("[method]reader.take-sifted", self._reader_take_sifted)
            with root.add_instance(_RESULT_STREAM) as stream:
                stream.add_func("write", self._write_result)
            with root.add_instance(_GRANT_WANTED) as wanted:
                wanted.add_func("want", self._want)
        #: The grants the last call said it lacked (``cordon:tool/grant-wanted``), in order.
        self.wanted: list[str] = []
        # What the running call wrote of its result: its kind (the first write's) and chunks.
        self._written: tuple[str, list[str]] | None = None
        # bulk-read readers of the running call: rep -> (size limit, queued paths).
        self._readers: dict[int, tuple[int, list[str]]] = {}
        # The needles of the sifting ones among them.
        self._needles: dict[int, list[bytes]] = {}
        self._reader_ids = itertools.count(1)
        self._preopens: list[tuple[str, str, bool]] = []
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="cordon-test-epoch", daemon=True)
        self._ticker.start()

    def __enter__(self) -> ComponentHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops the epoch ticker thread."""
        self._stop.set()
        self._ticker.join()

    def list_tools(self) -> list[ToolDescriptor]:
        """Calls ``list-tools`` on a fresh instance, and ``output-schemas`` when the component
        exports ``tool-outputs``, as the host does."""
        store, func = self._export("list-tools", None, self.timeout_s, self.memory_bytes)
        records = self._run(func, store)
        outputs: dict[str, str] = {}
        try:
            store, func = self._export(
                "output-schemas", None, self.timeout_s, self.memory_bytes, _OUTPUTS
            )
        except ComponentTrap:
            pass  # a plugin of the world `plugin`: no output schemas
        else:
            outputs = {o.tool: o.schema for o in self._run(func, store)}
        return [
            ToolDescriptor(
                name=r.name,
                description=r.description,
                input_schema=getattr(r, "input-schema"),
                hints=Hints(
                    read_only=getattr(r.hints, "read-only"),
                    destructive=r.hints.destructive,
                    idempotent=r.hints.idempotent,
                    open_world=getattr(r.hints, "open-world"),
                ),
                output_schema=outputs.get(r.name),
            )
            for r in records
        ]

    def call(
        self,
        name: str,
        arguments: dict | str,
        *,
        preopens: list[tuple[str, str, bool]] = (),
        timeout_s: float | None = None,
        memory_bytes: int | None = None,
    ) -> list[Text | Json]:
        """Calls ``call-tool`` on a fresh instance and returns its contents.

        ``arguments`` is a dict (serialised here) or JSON text passed as is. ``preopens``
        are ``(host_dir, guest_dir, writable)`` grants. Raises the SDK's ``ToolError``
        subclasses for tool errors and :class:`ComponentTrap` for traps.
        """
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        store, func = self._export(
            "call-tool",
            preopens,
            self.timeout_s if timeout_s is None else timeout_s,
            self.memory_bytes if memory_bytes is None else memory_bytes,
        )
        self._written = None
        self.wanted = []
        result = self._run(func, store, name, text)
        if isinstance(result, list):
            written = []
            if self._written is not None:
                kind, chunks = self._written
                whole = "".join(chunks)
                written = [Json(json.loads(whole)) if kind == "json" else Text(whole)]
            return written + [
                Text(c.payload) if c.tag == "text" else Json(json.loads(c.payload)) for c in result
            ]
        raise _ERRORS.get(result.tag, ToolError)(result.payload)

    def _export(self, func_name, preopens, timeout_s, memory_bytes, interface_name=_INTERFACE):
        store = wasmtime.Store(self._engine)
        self._preopens = list(preopens or ())
        self._readers.clear()  # a call's readers end with it, even if it trapped
        self._memory_bytes = memory_bytes
        wasi = wasmtime.WasiConfig()
        for host_dir, guest_dir, writable in preopens or ():
            wasi.preopen_dir(host_dir, guest_dir, writable)
        store.set_wasi(wasi)
        store.set_limits(memory_size=memory_bytes)
        store.set_epoch_deadline(max(1, round(timeout_s / _TICK_S)))
        instance = self._linker.instantiate(store, self._component)
        interface = instance.get_export_index(store, interface_name)
        if interface is None:
            raise ComponentTrap(f"the component does not export {interface_name}")
        func = instance.get_func(store, instance.get_export_index(store, func_name, interface))
        return store, func

    @staticmethod
    def _run(func, store, *args: Any) -> Any:
        try:
            return func(store, *args)
        except wasmtime.WasmtimeError as err:
            raise ComponentTrap(str(err)) from None

    def _log(self, _store: Any, level: Any, message: str, fields: list) -> None:
        self.logs.append((str(level), message, [tuple(f) for f in fields]))

    def _write_result(self, _store: Any, kind: Any, chunk: str) -> str | None:
        """cordon:tool/result-stream's ``write``: the chunks make one piece, of the first
        write's kind, as the host keeps them."""
        kind = str(getattr(kind, "name", kind)).lower()
        if self._written is None:
            self._written = (kind, [])
        elif self._written[0] != kind:
            return "the written result was started as one kind and cannot go on as the other"
        self._written[1].append(chunk)
        return None

    def _want(self, _store: Any, grant: str) -> str | None:
        """cordon:tool/grant-wanted's ``want``: noted for :attr:`wanted`, at most as many a
        call as the host notes (the grant's syntax is the host's to check)."""
        if len(self.wanted) >= _MAX_WANTED:
            return f"this call already said it lacked {_MAX_WANTED} grants; no more are noted"
        self.wanted.append(grant)
        return None

    # cordon:tool/bulk-read, read on the calling thread when taken: the same files and
    # answers as the host, without its read-ahead threads.

    def _reader_new(self, _store: Any, max_size: int) -> Any:
        if len(self._readers) >= _MAX_READERS:
            raise RuntimeError(
                f"the plugin holds {_MAX_READERS} bulk-read readers at once, the most one call "
                "may hold; it must drop one before creating another"
            )
        rep = next(self._reader_ids)
        self._readers[rep] = (min(max_size, self._memory_bytes), [])
        return _wc.ResourceHost.own(rep, _READER)

    def _reader_sifting(self, store: Any, max_size: int, flat: bytes, lengths: list) -> Any:
        flat = bytes(flat)
        if len(lengths) <= 1024 and sum(lengths) != len(flat):
            return (
                f"the needle lengths add up to {sum(lengths)} bytes but {len(flat)} were given: "
                "pass the needles one after another and the length of each"
            )
        offsets = list(itertools.accumulate(lengths, initial=0))
        needles = [flat[a:b] for a, b in itertools.pairwise(offsets)]
        problem = cordon_sdk._needle_problem(needles)
        if problem is not None:
            return problem
        reader = self._reader_new(store, max_size)
        self._needles[reader.rep] = needles
        return reader

    def _reader_drop(self, _store: Any, rep: int) -> None:
        self._readers.pop(rep, None)
        self._needles.pop(rep, None)

    def _reader(self, store: Any, handle: Any) -> tuple[int, list[str]]:
        return self._readers[handle.to_host(store).rep]

    def _reader_add(self, store: Any, handle: Any, path: str) -> Any:
        _, queued = self._reader(store, handle)
        if len(path.encode()) > _MAX_PATH:
            return "path-too-long"
        waiting = [p for _, q in self._readers.values() for p in q]
        if (
            len(waiting) >= _MAX_QUEUED
            or sum(len(p.encode()) for p in waiting) + len(path.encode()) > _MAX_QUEUED_BYTES
        ):
            return "queue-full"
        queued.append(path)
        return None

    def _reader_queued(self, store: Any, handle: Any) -> int:
        return len(self._reader(store, handle)[1])

    def _reader_take(self, store: Any, handle: Any, count: int) -> list:
        return self._take(handle.to_host(store).rep, count)

    def _take(self, rep: int, count: int) -> list:
        """Up to ``count`` files of reader ``rep``, by the host's rule: at most 8 MiB a batch,
        a larger file alone."""
        max_size, queued = self._readers[rep]
        files: list = []
        total = 0
        while queued and len(files) < min(count, 64):
            # The size decides before the file is read, so one left for the next take is
            # read only then.
            opened = self._open_granted(queued[0], max_size)
            size = opened[1] if isinstance(opened, tuple) else 0
            if files and (size > _BATCH_BYTES or total + size > _BATCH_BYTES):
                if isinstance(opened, tuple):
                    os.close(opened[0])
                break
            contents = _read_opened(opened)
            files.append(types.SimpleNamespace(path=queued.pop(0), contents=contents))
            total += size
            if size > _BATCH_BYTES:
                break
        return files

    def _reader_take_sifted(self, store: Any, handle: Any, count: int) -> list:
        """``take``, with the files that contain none of the reader's needles (and begin with
        no byte-order mark) passed over: their size and first NUL instead of their bytes.

        wasmtime-py lowers a variant whose cases it can tell apart by Python type without a
        tag: ``result<sifted, read-error>`` takes the bytes (``whole``), a ``Record``
        (``passed-over``) or the read-error ``Variant`` as they are.
        """
        # A borrowed handle converts once per call.
        rep = handle.to_host(store).rep
        needles = self._needles.get(rep, [])
        files = self._take(rep, count)
        for file in files:
            if isinstance(file.contents, _wc.Variant):
                continue
            facts = cordon_sdk._passed_over(file.contents, needles)
            if facts is None:
                continue
            passed_over = _wc.Record()
            # Record fields go by their WIT names.
            passed_over.size, first_nul = facts
            setattr(passed_over, "first-nul", first_nul)
            file.contents = passed_over
        return files

    def _read_granted(self, path: str, max_size: int) -> Any:
        """A file's bytes, or the read-error variant the host would answer with."""
        return _read_opened(self._open_granted(path, max_size))

    def _open_granted(self, path: str, max_size: int) -> Any:
        """``(fd, size)`` of the regular file at guest ``path`` if it may be read whole, or the
        read-error variant the host would answer with."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not path.startswith("/") or ".." in parts:
            return _wc.Variant("not-granted", None)
        best = None
        for host_dir, guest_dir, _writable in self._preopens:
            guest = [p for p in guest_dir.split("/") if p not in ("", ".")]
            if parts[: len(guest)] == guest and (best is None or len(guest) > len(best[1])):
                best = (host_dir, guest)
        if best is None:
            return _wc.Variant("not-granted", None)
        host_dir, guest = best
        if len(parts) == len(guest):
            return _wc.Variant("not-a-file", None)
        below = parts[len(guest) :]
        # A trailing "/" or "/." names a directory, as the host keeps it for its open.
        if path.endswith("/") or path.endswith("/."):
            below.append("")
        full = _beneath(os.path.realpath(host_dir), below)
        if full is None:
            return _wc.Variant("not-granted", None)
        if full == _NOT_DIR:
            return _wc.Variant("not-a-file", None)
        if full == _LOOP:
            return _wc.Variant("other", _LOOP)
        if not os.path.lexists(full):
            return _wc.Variant("not-found", None)
        if os.path.isdir(full):
            return _wc.Variant("not-a-file", None)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
        except OSError as err:
            return _wc.Variant("other", str(err))
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_size:
            os.close(fd)
            if not stat.S_ISREG(info.st_mode):
                return _wc.Variant("not-a-file", None)
            return _wc.Variant("too-large", info.st_size)
        return fd, info.st_size

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            self._engine.increment_epoch()
