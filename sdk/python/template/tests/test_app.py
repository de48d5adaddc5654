"""Tests the example tool under plain python3 by calling the plugin's dispatch directly."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.environ.get("CORDON_SDK", os.path.join(HERE, "..", "..")))

import app

from cordon_sdk import InvalidArguments, NotFound


def call(arguments: dict) -> dict:
    (content,) = app.plugin.call("text_stats", json.dumps(arguments))
    return json.loads(content.to_json())


class FindText(unittest.TestCase):
    def test_counts_lines_with_the_text_and_reports_unreadable_paths(self):
        with tempfile.TemporaryDirectory() as directory:
            a, b = os.path.join(directory, "a.txt"), os.path.join(directory, "b.txt")
            for path, body in [(a, "needle\nneedle needle\nhay\n"), (b, "hay")]:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(body)
            missing = os.path.join(directory, "missing")
            (content,) = app.plugin.call(
                "find_text", json.dumps({"text": "needle", "paths": [a, b, missing, directory]})
            )
            result = json.loads(content.to_json())
        self.assertEqual(result["lines_with_text"], {a: 2})
        self.assertEqual(
            result["unreadable"],
            {missing: "not found", directory: "not a regular file"},
        )

    def test_a_path_no_file_can_have_is_reported_not_raised(self):
        long_path = "/" + "x" * 5000
        (content,) = app.plugin.call("find_text", json.dumps({"text": "a", "paths": [long_path]}))
        result = json.loads(content.to_json())
        self.assertEqual(result["unreadable"], {long_path: "the path is longer than 4096 bytes"})

    def test_lines_are_counted_once_however_often_they_hold_the_text(self):
        self.assertEqual(app.lines_containing(b"a a\nb\na\n\na", b"a"), 3)
        self.assertEqual(app.lines_containing(b"", b"a"), 0)
        self.assertEqual(app.lines_containing(b"xx\nxxx", b"xx"), 2)


class TextStats(unittest.TestCase):
    def test_counts_text(self):
        result = call({"text": "The cat saw the dog.\nThe end", "top": 1})
        self.assertEqual(result["lines"], 2)
        self.assertEqual(result["words"], 7)
        self.assertEqual(result["most_common"], [["the", 3]])

    def test_reads_a_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
            handle.write("one two two")
        try:
            self.assertEqual(call({"path": handle.name})["most_common"][0], ["two", 2])
        finally:
            os.unlink(handle.name)

    def test_needs_exactly_one_source(self):
        for arguments in ({}, {"text": "a", "path": "b"}):
            with self.assertRaisesRegex(InvalidArguments, "exactly one of"):
                app.plugin.call("text_stats", json.dumps(arguments))

    def test_missing_file_is_not_found(self):
        # The SDK logs the expected error as one line (to stderr outside a component).
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(NotFound) as caught:
            app.plugin.call("text_stats", '{"path": "/no/such/file.txt"}')
        self.assertIn("/no/such/file.txt does not exist", caught.exception.message)

    def test_top_is_checked_against_the_schema(self):
        with self.assertRaisesRegex(InvalidArguments, "`top` must be at most 100"):
            app.plugin.call("text_stats", '{"text": "a", "top": 1000}')


if __name__ == "__main__":
    unittest.main()
