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

import json
import threading
from typing import Any

import cordon_sdk
from cordon_sdk import Hints, Json, Text, ToolDescriptor, ToolError

try:
    import wasmtime
    from wasmtime import component as _wc
except ImportError:  # checked in ComponentHost so that importing this module never fails
    wasmtime = None

_TICK_S = 0.01
_INTERFACE = "cordon:tool/tools@0.1.0"
_LOG = "cordon:tool/log@0.1.0"
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
        with self._linker.root() as root, root.add_instance(_LOG) as log:
            log.add_func("write", self._log)
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
        """Calls ``list-tools`` on a fresh instance."""
        store, func = self._export("list-tools", None, self.timeout_s, self.memory_bytes)
        records = self._run(func, store)
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
        result = self._run(func, store, name, text)
        if isinstance(result, list):
            return [
                Text(c.payload) if c.tag == "text" else Json(json.loads(c.payload)) for c in result
            ]
        raise _ERRORS.get(result.tag, ToolError)(result.payload)

    def _export(self, func_name, preopens, timeout_s, memory_bytes):
        store = wasmtime.Store(self._engine)
        wasi = wasmtime.WasiConfig()
        for host_dir, guest_dir, writable in preopens or ():
            wasi.preopen_dir(host_dir, guest_dir, writable)
        store.set_wasi(wasi)
        store.set_limits(memory_size=memory_bytes)
        store.set_epoch_deadline(max(1, round(timeout_s / _TICK_S)))
        instance = self._linker.instantiate(store, self._component)
        interface = instance.get_export_index(store, _INTERFACE)
        if interface is None:
            raise ComponentTrap(f"the component does not export {_INTERFACE}")
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

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            self._engine.increment_epoch()
