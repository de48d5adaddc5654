"""Native tests of the run_python execution logic (``pyrunner``), under plain python3."""

import io
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pyrunner
from pyrunner import CappedWriter, Limits, run_code


class FinalExpression(unittest.TestCase):
    def test_last_expression_value_is_returned_as_json_and_repr(self):
        report = run_code("x = 20\nx + 22")
        self.assertEqual(report["ok"], True)
        self.assertEqual(report["result"], 42)
        self.assertEqual(report["result_repr"], "42")
        self.assertEqual(report["stdout"], "")

    def test_non_json_value_has_repr_only(self):
        report = run_code("import decimal\ndecimal.Decimal('1.10')")
        self.assertNotIn("result", report)
        self.assertEqual(report["result_repr"], "Decimal('1.10')")

    def test_nan_is_not_json(self):
        report = run_code("float('nan')")
        self.assertNotIn("result", report)
        self.assertEqual(report["result_repr"], "nan")

    def test_none_and_statements_give_no_result(self):
        for code in ("None", "x = 1", "print('hi')", "def f():\n    return 1\n"):
            report = run_code(code)
            self.assertTrue(report["ok"], code)
            self.assertNotIn("result", report, code)
            self.assertNotIn("result_repr", report, code)

    def test_expression_inside_block_is_not_a_final_expression(self):
        report = run_code("if True:\n    41 + 1")
        self.assertNotIn("result_repr", report)

    def test_final_expression_sees_earlier_definitions(self):
        report = run_code("def sq(n):\n    return n * n\n[sq(i) for i in range(4)]")
        self.assertEqual(report["result"], [0, 1, 4, 9])

    def test_huge_result_is_truncated_with_a_note(self):
        report = run_code("'a' * 50", limits=Limits(result_chars=10))
        self.assertNotIn("result", report)
        self.assertEqual(len(report["result_repr"]), 10)
        self.assertTrue(any("result omitted" in n for n in report["notes"]))
        self.assertTrue(any("result_repr truncated" in n for n in report["notes"]))

    def test_integers_beyond_64_bits_are_repr_only(self):
        report = run_code("[2**64, 1]")
        self.assertNotIn("result", report)
        self.assertEqual(report["result_repr"], "[18446744073709551616, 1]")
        self.assertTrue(any("beyond 64 bits" in n for n in report["notes"]))

    def test_deeply_nested_value_is_repr_only(self):
        build = "x = []\nfor _ in range({n}):\n    x = [x]\nx"
        report = run_code(build.format(n=pyrunner.MAX_RESULT_DEPTH - 1))
        self.assertIn("result", report)
        report = run_code(build.format(n=pyrunner.MAX_RESULT_DEPTH))
        self.assertNotIn("result", report)
        self.assertTrue(report["result_repr"].startswith("[[[["), report)
        self.assertTrue(any("nests deeper than" in n for n in report["notes"]), report)
        self.assertEqual(
            run_code("{'n': 2**64 - 1, 'm': -(2**63)}")["result"], {"n": 2**64 - 1, "m": -(2**63)}
        )

    def test_failing_repr_is_reported_not_raised(self):
        code = "class A:\n    def __repr__(self):\n        raise RuntimeError('boom')\nA()"
        report = run_code(code)
        self.assertTrue(report["ok"])
        self.assertIn("repr() failed: RuntimeError: boom", report["result_repr"])


class Output(unittest.TestCase):
    def test_stdout_and_stderr_are_captured_separately(self):
        report = run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)")
        self.assertEqual(report["stdout"], "out\n")
        self.assertEqual(report["stderr"], "err\n")

    def test_streams_are_restored_after_the_run(self):
        before = sys.stdout, sys.stderr
        run_code("print('x')")
        run_code("1/0")
        self.assertEqual((sys.stdout, sys.stderr), before)

    def test_print_flood_keeps_head_and_tail_and_notes_the_drop(self):
        report = run_code("for i in range(10000):\n    print(i)", limits=Limits(stdout_chars=100))
        out = report["stdout"]
        self.assertTrue(out.startswith("0\n1\n2\n"))
        self.assertTrue(out.endswith("9998\n9999\n"))
        self.assertIn("characters dropped", out)
        written = sum(len(f"{i}\n") for i in range(10000))
        self.assertIn(
            f"stdout truncated: {written} characters were written; "
            f"{written - 100} from the middle were dropped",
            report["notes"],
        )

    def test_binary_writes_to_stdout_buffer_are_decoded(self):
        report = run_code(
            "import sys\nsys.stdout.buffer.write('é'.encode()[:1])\n"
            "sys.stdout.buffer.write('é'.encode()[1:])"
        )
        self.assertEqual(report["stdout"], "é")

    def test_output_before_an_error_is_kept(self):
        report = run_code("print('step 1')\nraise ValueError('bad row 7')")
        self.assertFalse(report["ok"])
        self.assertEqual(report["stdout"], "step 1\n")


class CappedWriterUnit(unittest.TestCase):
    def test_keeps_everything_under_the_limit(self):
        w = CappedWriter(10)
        self.assertEqual(w.write("abc"), 3)
        self.assertEqual(w.write("defgh"), 5)
        self.assertEqual(w.getvalue(), "abcdefgh")
        self.assertEqual(w.dropped, 0)

    def test_exact_head_and_tail(self):
        w = CappedWriter(6)
        for ch in "abcdefghij":
            w.write(ch)
        self.assertEqual(w.dropped, 4)
        self.assertEqual(w.getvalue(), "abc\n[... 4 characters dropped ...]\nhij")

    def test_one_big_write(self):
        w = CappedWriter(4)
        self.assertEqual(w.write("0123456789"), 10)
        self.assertEqual(w.getvalue(), "01\n[... 6 characters dropped ...]\n89")

    def test_rejects_bytes(self):
        with self.assertRaises(TypeError):
            CappedWriter(4).write(b"x")


class Errors(unittest.TestCase):
    def test_exception_gives_traceback_into_user_code_only(self):
        report = run_code("x = 1\n\ndef f():\n    return 1 / 0\nf()")
        self.assertFalse(report["ok"])
        err = report["error"]
        self.assertEqual(err["type"], "ZeroDivisionError")
        self.assertEqual(err["message"], "division by zero")
        self.assertEqual(err["line"], 4)
        self.assertTrue(
            err["traceback"].startswith(
                'Traceback (most recent call last):\n  File "<code>", line 5'
            )
        )
        self.assertIn("return 1 / 0", err["traceback"])  # source line is quoted
        self.assertNotIn("pyrunner", err["traceback"])

    def test_error_in_final_expression(self):
        report = run_code("d = {}\nd['missing']")
        self.assertEqual(report["error"]["type"], "KeyError")
        self.assertEqual(report["error"]["line"], 2)

    def test_syntax_error(self):
        report = run_code("x = 1\ndef f(:\n    pass")
        err = report["error"]
        self.assertFalse(report["ok"])
        self.assertEqual(err["type"], "SyntaxError")
        self.assertEqual(err["line"], 2)
        self.assertIn("def f(:", err["traceback"])

    def test_compile_time_syntax_error_quotes_the_line(self):
        report = run_code("x = 1\nreturn x")
        err = report["error"]
        self.assertEqual((err["type"], err["line"]), ("SyntaxError", 2))
        self.assertIn("'return' outside function", err["message"])
        self.assertIn("return x", err["traceback"])

    def test_sys_exit_with_a_message(self):
        report = run_code("raise SystemExit('no input rows')")
        self.assertEqual(report["error"]["message"], "the code exited: no input rows")

    def test_nul_byte_in_source(self):
        report = run_code("x = 1\x00")
        self.assertFalse(report["ok"])
        self.assertIn("null", report["error"]["message"])

    def test_sys_exit_nonzero_fails_and_zero_succeeds(self):
        report = run_code("import sys\nprint('bye')\nsys.exit(2)")
        self.assertFalse(report["ok"])
        self.assertEqual(report["error"]["type"], "SystemExit")
        self.assertIn("status 2", report["error"]["message"])
        self.assertEqual(report["stdout"], "bye\n")
        ok = run_code("import sys\nsys.exit(0)")
        self.assertTrue(ok["ok"])
        self.assertIn("the code called sys.exit(0)", ok["notes"])

    def test_long_traceback_keeps_the_end(self):
        report = run_code(
            "def f(n):\n    return f(n + 1)\nf(0)", limits=Limits(traceback_chars=300)
        )
        tb = report["error"]["traceback"]
        self.assertEqual(report["error"]["type"], "RecursionError")
        self.assertTrue(tb.startswith("["))
        self.assertIn("characters of traceback dropped", tb)
        self.assertTrue(tb.rstrip().endswith("maximum recursion depth exceeded"))

    def test_chained_exception_is_shown(self):
        code = "try:\n    int('x')\nexcept ValueError as e:\n    raise KeyError('k') from e"
        tb = run_code(code)["error"]["traceback"]
        self.assertIn("ValueError", tb)
        self.assertIn("direct cause", tb)


class Input(unittest.TestCase):
    def test_input_is_bound(self):
        report = run_code("sum(r['n'] for r in input)", [{"n": 1}, {"n": 2}])
        self.assertEqual(report["result"], 3)

    def test_input_defaults_to_none(self):
        self.assertEqual(run_code("input is None")["result"], True)

    def test_fresh_namespace_per_run(self):
        run_code("leak = 1")
        report = run_code("leak")
        self.assertEqual(report["error"]["type"], "NameError")


class ReportShape(unittest.TestCase):
    def test_report_is_json_with_stable_key_order(self):
        report = run_code("print(1)\n[1, 2]")
        self.assertEqual(list(report), ["ok", "result", "result_repr", "stdout", "stderr"])
        json.dumps(report)
        failed = run_code("1/0")
        self.assertEqual(list(failed), ["ok", "stdout", "stderr", "error"])

    def test_code_filename_constant(self):
        self.assertEqual(pyrunner.CODE_FILENAME, "<code>")


class Mirrors(unittest.TestCase):
    """Output echoed to the real streams, so a host that stops the code still saw it."""

    def test_prints_are_echoed_and_still_reported(self):
        out, err = io.StringIO(), io.StringIO()
        report = run_code(
            "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\n7",
            mirrors=(out, err),
        )
        self.assertEqual(report["stdout"], "to out\n")
        self.assertEqual(report["stderr"], "to err\n")
        self.assertEqual(report["result"], 7)
        self.assertEqual(out.getvalue(), "to out\n")
        self.assertEqual(err.getvalue(), "to err\n")

    def test_each_line_is_sent_at_once_and_a_flood_in_batches(self):
        sent = []

        class Recorder(io.StringIO):
            def flush(self):
                sent.append(self.getvalue())
                super().flush()

        # A line then a long silence: the line is out before the silence.
        out = Recorder()
        run_code(
            "import time\nprint('starting')\ntime.sleep(0.2)\nprint('end')",
            mirrors=(out, io.StringIO()),
        )
        self.assertEqual(sent[0], "starting\n")
        self.assertEqual(sent[-1], "starting\nend\n")

        # A flood: every line arrives, in far fewer sends than lines.
        sent.clear()
        out = Recorder()
        run_code("for i in range(5000):\n    print(i)", mirrors=(out, io.StringIO()))
        self.assertEqual(out.getvalue(), "".join(f"{i}\n" for i in range(5000)))
        self.assertLess(len(sent), 1000, len(sent))

    def test_a_broken_mirror_never_breaks_the_code(self):
        class Broken(io.StringIO):
            def write(self, text):
                raise OSError("stream closed")

        report = run_code("print('still fine')\n1 + 1", mirrors=(Broken(), Broken()))
        self.assertTrue(report["ok"], report)
        self.assertEqual(report["stdout"], "still fine\n")
        self.assertEqual(report["result"], 2)


if __name__ == "__main__":
    unittest.main()
