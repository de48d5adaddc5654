"""Native tests of the run_python tool as the host sees it: descriptor, arguments, results."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "sdk", "python"))

from cordon_sdk import InvalidArguments, Json, NotFound

import app


def call(arguments):
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    contents = app.plugin.call("run_python", text)
    assert len(contents) == 1 and isinstance(contents[0], Json), contents
    return json.loads(contents[0].to_json())


class Descriptor(unittest.TestCase):
    def test_one_tool_with_honest_hints(self):
        (d,) = app.plugin.descriptors()
        self.assertEqual(d.name, "run_python")
        self.assertTrue(d.hints.read_only)
        self.assertFalse(d.hints.destructive)
        self.assertFalse(d.hints.idempotent)
        self.assertFalse(d.hints.open_world)

    def test_schema_requires_code_and_describes_every_property(self):
        schema = json.loads(app.plugin.descriptors()[0].input_schema)
        self.assertEqual(schema["required"], ["code"])
        self.assertIs(schema["additionalProperties"], False)
        for name, prop in schema["properties"].items():
            self.assertTrue(prop.get("description"), name)

    def test_descriptor_is_stable(self):
        first = app.plugin.descriptors()
        call({"code": "1"})
        self.assertEqual(first, app.plugin.descriptors())

    def test_description_names_only_offered_modules(self):
        description = app.plugin.descriptors()[0].description
        for module in app.NAMED_MODULES:
            self.assertIn(module, app.OFFERED_MODULES)
            self.assertIn(module, description)

    def test_every_report_fits_the_output_schema(self):
        # The SDK checks each result against the declared schema; these reach every field.
        from cordon_sdk import validate

        schema = json.loads(app.plugin.descriptors()[0].output_schema)
        for code in (
            "1 + 1",
            "print('x')",
            "raise ValueError('v')",
            "def f(:",
            "import sys\nsys.exit(3)",
        ):
            validate(schema, call({"code": code}), "result")

    def test_the_exported_class_is_named_tools(self):
        self.assertEqual(app.Tools.__name__, "Tools")
        self.assertTrue(callable(getattr(app.Tools, "call_tool", None)))
        self.assertTrue(callable(getattr(app.Tools, "list_tools", None)))


class Arguments(unittest.TestCase):
    def assert_invalid(self, arguments, *fragments):
        with self.assertRaises(InvalidArguments) as caught:
            app.plugin.call("run_python", arguments)
        for fragment in fragments:
            self.assertIn(fragment, caught.exception.message)

    def test_missing_code(self):
        self.assert_invalid("{}", "missing required argument `code`", "Python 3 source")

    def test_code_of_the_wrong_type(self):
        self.assert_invalid('{"code": 5}', "`code` must be a string, got a number")
        self.assert_invalid('{"code": ["print(1)"]}', "got an array")

    def test_empty_and_blank_code(self):
        self.assert_invalid('{"code": ""}', "`code` must not be empty")
        self.assert_invalid('{"code": "  \\n"}', "only whitespace")

    def test_unknown_argument(self):
        self.assert_invalid('{"code": "1", "stdin": "x"}', "unknown argument `stdin`", "`code`")

    def test_not_json_and_not_an_object(self):
        self.assert_invalid("print(1)", "not valid JSON")
        self.assert_invalid('["1"]', "must be a JSON object, got an array")

    def test_unknown_tool(self):
        with self.assertRaises(NotFound) as caught:
            app.plugin.call("run_js", '{"code": "1"}')
        self.assertIn("run_python", caught.exception.message)


class Results(unittest.TestCase):
    def test_expression_value(self):
        self.assertEqual(call({"code": "1+1"})["result"], 2)

    def test_input_of_any_json_type(self):
        for value in ({"a": [1, 2]}, [1, "x"], "text", 3.5, True, None):
            report = call({"code": "input", "input": value})
            self.assertTrue(report["ok"])
            if value is None:
                self.assertNotIn("result", report)
            else:
                self.assertEqual(report["result"], value)

    def test_failure_is_a_result_with_ok_false(self):
        report = call({"code": "print('a')\nraise ValueError('row 3 is empty')"})
        self.assertFalse(report["ok"])
        self.assertEqual(report["error"]["message"], "row 3 is empty")
        self.assertEqual(report["stdout"], "a\n")

    def test_offered_modules_import(self):
        code = "\n".join(f"import {m}" for m in app.OFFERED_MODULES) + "\n'ok'"
        self.assertEqual(call({"code": code})["result"], "ok")


if __name__ == "__main__":
    unittest.main()
