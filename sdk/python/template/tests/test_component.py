"""Runs the built component (build/text_stats.wasm) in wasmtime, the way Cordon runs it.

Only this catches modules missing from the component: componentize-py keeps only what was
imported at build time. Needs `pip install wasmtime`; skipped without it or before `make`.
"""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.environ.get("CORDON_SDK", os.path.join(HERE, "..", ".."))
sys.path.insert(0, SDK)
WASM = os.environ.get("PLUGIN_WASM", os.path.join(HERE, "..", "build", "text_stats.wasm"))

import cordon_testing
from cordon_sdk import Denied, InvalidArguments, NotFound
from cordon_testing import ComponentHost


@unittest.skipIf(cordon_testing.wasmtime is None, "pip install wasmtime to run component tests")
@unittest.skipUnless(os.path.exists(WASM), f"{WASM} is not built; run `make` first")
class Component(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.host = ComponentHost(WASM)

    @classmethod
    def tearDownClass(cls):
        cls.host.close()

    def test_descriptor(self):
        tools = self.host.list_tools()
        self.assertEqual([t.name for t in tools], ["text_stats", "find_text"])
        self.assertTrue(all(t.hints.read_only for t in tools))

    def test_finds_text_through_the_hosts_bulk_reader(self):
        with tempfile.TemporaryDirectory() as directory:
            for name, body in [("a.txt", "x needle\nno\nneedle y\n"), ("b.txt", "nothing")]:
                with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
                    handle.write(body)
            os.mkdir(os.path.join(directory, "sub"))
            grant = [(directory, "/data", False)]
            paths = ["/data/a.txt", "/data/b.txt", "/data/missing", "/data/sub", "/elsewhere"]
            (content,) = self.host.call(
                "find_text", {"text": "needle", "paths": paths}, preopens=grant
            )
            self.assertEqual(content.value["lines_with_text"], {"/data/a.txt": 2})
            self.assertEqual(
                sorted(content.value["unreadable"].items()),
                [
                    ("/data/missing", "not found"),
                    ("/data/sub", "not a regular file"),
                    ("/elsewhere", "not inside a granted directory"),
                ],
            )
            with self.assertRaisesRegex(InvalidArguments, "at most 1024"):
                self.host.call("find_text", {"text": "n" * 1025, "paths": []}, preopens=grant)

    def test_counts_text(self):
        (content,) = self.host.call("text_stats", {"text": "b a b", "top": 1})
        self.assertEqual(content.value["most_common"], [["b", 2]])
        self.assertIn(("debug", "counted words", [("words", "3")]), self.host.logs)

    def test_reads_only_granted_files(self):
        logged_before = len(self.host.logs)
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "t.txt"), "w", encoding="utf-8") as handle:
                handle.write("one two two")
            grant = [(directory, "/data", False)]
            (content,) = self.host.call("text_stats", {"path": "/data/t.txt"}, preopens=grant)
            self.assertEqual(content.value["words"], 3)
            with self.assertRaises(NotFound):
                self.host.call("text_stats", {"path": "/data/missing.txt"}, preopens=grant)
            # A host path is outside the grants (here there are none): denied, as in Rust.
            with self.assertRaisesRegex(Denied, "outside the directories granted"):
                self.host.call("text_stats", {"path": os.path.join(directory, "t.txt")})
            with self.assertRaisesRegex(Denied, "outside the directories granted"):
                self.host.call("text_stats", {"path": "/etc/passwd"}, preopens=grant)
            # The expected errors are logged as one line each, without a traceback.
            logged = self.host.logs[logged_before:]
            self.assertTrue(logged)
            self.assertFalse([r for r in logged if "Traceback" in str(r)], logged)

    def test_argument_errors(self):
        with self.assertRaisesRegex(InvalidArguments, "exactly one of"):
            self.host.call("text_stats", {})


if __name__ == "__main__":
    unittest.main()
