"""Runs the built python.wasm component and checks tests/component_cases.json against it.

Native tests cannot show that a module or codec exists inside the component (componentize-py
keeps only modules imported at build time), so these cases run the real component in
wasmtime-py (PyPI ``wasmtime``, independent of the Cordon host) through the SDK's
``cordon_testing``: a fresh instance per call, WASI with no preopens, an epoch deadline and a
memory limit.

Skipped unless ``wasmtime`` is importable and the component exists (``PYTHON_WASM``, default
target/plugins/python.wasm). Run it with a Python that has wasmtime installed, e.g.:

    python3 -m venv /tmp/wt && /tmp/wt/bin/pip install wasmtime==50.0.1
    /tmp/wt/bin/python -m unittest plugins/python/tests/test_component.py
"""

import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
WASM = os.environ.get("PYTHON_WASM", os.path.join(ROOT, "target", "plugins", "python.wasm"))

import cordon_testing
from cordon_sdk import InvalidArguments, Json
from cordon_testing import ComponentHost, ComponentTrap


def run(host, arguments, **limits):
    """Returns the run_python report; raises ToolError / ComponentTrap."""
    (content,) = host.call("run_python", arguments, **limits)
    assert isinstance(content, Json), content
    return content.value


@unittest.skipIf(cordon_testing.wasmtime is None, "the wasmtime package is not installed")
@unittest.skipUnless(os.path.exists(WASM), f"{WASM} is not built; run `make python-plugin`")
class Component(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.host = ComponentHost(WASM, timeout_s=20)

    @classmethod
    def tearDownClass(cls):
        cls.host.close()

    def test_list_tools(self):
        (descriptor,) = self.host.list_tools()
        self.assertEqual(descriptor.name, "run_python")
        self.assertTrue(descriptor.hints.read_only)
        self.assertEqual(json.loads(descriptor.input_schema)["required"], ["code"])
        # Exported through tool-outputs, as the host reads it.
        output = json.loads(descriptor.output_schema)
        self.assertEqual(output["type"], "object")
        self.assertEqual(output["required"], ["ok", "stdout", "stderr"])

    def test_cases(self):
        with open(os.path.join(HERE, "component_cases.json"), encoding="utf-8") as handle:
            cases = json.load(handle)
        for case in cases:
            with self.subTest(case["name"]):
                expect = case["expect"]
                if "tool_error" in expect:
                    self.assertEqual(expect["tool_error"], "invalid-arguments")
                    with self.assertRaises(InvalidArguments) as caught:
                        run(self.host, case["arguments"])
                    self.assertIn(expect["message_contains"], caught.exception.message)
                    continue
                report = run(self.host, case["arguments"])
                self.assertEqual(report["ok"], expect["ok"], report)
                if "result" in expect:
                    self.assertEqual(report["result"], expect["result"])
                if "stdout" in expect:
                    self.assertEqual(report["stdout"], expect["stdout"])
                if "error_type" in expect:
                    self.assertEqual(report["error"]["type"], expect["error_type"])
                if "stdout_max_chars" in expect:
                    self.assertLessEqual(len(report["stdout"]), expect["stdout_max_chars"])
                if "notes_contain" in expect:
                    self.assertTrue(any(expect["notes_contain"] in n for n in report["notes"]))

    def test_infinite_loop_is_stopped_by_the_deadline(self):
        started = time.monotonic()
        with self.assertRaises(ComponentTrap):
            run(self.host, {"code": "while True: pass"}, timeout_s=1)
        self.assertLess(time.monotonic() - started, 10)

    def test_memory_bomb_is_contained(self):
        # Without trap-on-grow-failure (which the Cordon host sets, turning this into a
        # trap) memory.grow fails softly and CPython raises MemoryError.
        report = run(
            self.host,
            {"code": "blocks = []\nwhile True: blocks.append(bytearray(1 << 20))"},
            memory_bytes=128 << 20,
        )
        self.assertEqual(report["error"]["type"], "MemoryError")

    def test_files_only_inside_a_grant(self):
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "data.csv"), "w", encoding="utf-8") as handle:
                handle.write("a,b\n1,2\n")
            grant = [(directory, "/data", False)]
            code = "import csv\nlist(csv.DictReader(open('/data/data.csv')))"
            report = run(self.host, {"code": code}, preopens=grant)
            self.assertEqual(report["result"], [{"a": "1", "b": "2"}])
            # SQLite under a read-only grant: the default VFS wants a lock file beside the
            # database, so only an immutable open works (the tool description says so).
            db = os.path.join(directory, "x.db")
            with contextlib.closing(sqlite3.connect(db)) as conn, conn:
                conn.execute("create table t(a)")
                conn.execute("insert into t values (7)")
            code = (
                "import sqlite3\n"
                "c = sqlite3.connect('file:/data/x.db?immutable=1', uri=True)\n"
                "c.execute('select a from t').fetchall()"
            )
            self.assertEqual(run(self.host, {"code": code}, preopens=grant)["result"], [[7]])
            # A read-only grant refuses writes.
            write = {"code": "open('/data/new.txt', 'w').write('x')"}
            self.assertEqual(
                run(self.host, write, preopens=grant)["error"]["type"], "PermissionError"
            )
            self.assertFalse(os.path.exists(os.path.join(directory, "new.txt")))
            # A read-write grant allows them.
            rw = [(directory, "/data", True)]
            self.assertTrue(run(self.host, write, preopens=rw)["ok"])
            with open(os.path.join(directory, "new.txt"), encoding="utf-8") as handle:
                self.assertEqual(handle.read(), "x")


if __name__ == "__main__":
    unittest.main()
