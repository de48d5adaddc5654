"""Tests of cordon_sdk under plain python3.

The adapter tests (``Exports``) run the exported ``Tools`` class against WIT bindings that
``componentize-py bindings`` generates into a temporary directory. They need componentize-py:
set ``COMPONENTIZE`` to its path, or run ``make toolchain`` so that target/venv has it.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))

import cordon_sdk
from cordon_sdk import (
    Denied,
    Failed,
    GrantedDirs,
    Hints,
    InvalidArguments,
    Json,
    NotFound,
    Plugin,
    Text,
    ToolDefinitionError,
    normalize,
    validate,
)

OBJECT = {"type": "object"}


def quiet():
    """Silences the SDK's stderr log fallback for tests that provoke logged errors."""
    return contextlib.redirect_stderr(io.StringIO())


class Declarations(unittest.TestCase):
    def test_bad_names_are_rejected(self):
        plugin = Plugin()
        for name in ("", "Upper", "1abc", "with-dash", "sp ace", None):
            with self.assertRaises(ToolDefinitionError, msg=repr(name)):
                plugin.add_tool(lambda a: None, name=name, description="d", input_schema=OBJECT)

    def test_duplicates_and_missing_description_are_rejected(self):
        plugin = Plugin()
        plugin.add_tool(lambda a: None, name="a", description="d", input_schema=OBJECT)
        with self.assertRaisesRegex(ToolDefinitionError, "declared twice"):
            plugin.add_tool(lambda a: None, name="a", description="d", input_schema=OBJECT)
        with self.assertRaisesRegex(ToolDefinitionError, "needs a description"):
            plugin.add_tool(lambda a: None, name="b", description="  ", input_schema=OBJECT)

    def test_schema_must_be_a_json_object_schema(self):
        plugin = Plugin()
        with self.assertRaisesRegex(ToolDefinitionError, '"type": "object"'):
            plugin.add_tool(
                lambda a: None, name="a", description="d", input_schema={"type": "string"}
            )
        with self.assertRaisesRegex(ToolDefinitionError, "not valid JSON"):
            plugin.add_tool(
                lambda a: None,
                name="a",
                description="d",
                input_schema={"type": "object", "default": {1, 2}},
            )
        with self.assertRaisesRegex(ToolDefinitionError, "must be a dict"):
            plugin.add_tool(lambda a: None, name="a", description="d", input_schema="{}")

    def test_descriptors_are_canonical_and_ordered(self):
        plugin = Plugin()
        schema = {"type": "object", "properties": {"b": {}, "a": {}}}
        plugin.add_tool(lambda a: None, name="zeta", description="z", input_schema=schema)
        plugin.add_tool(lambda a: None, name="alpha", description="a", input_schema=OBJECT)
        names = [d.name for d in plugin.descriptors()]
        self.assertEqual(names, ["zeta", "alpha"])
        self.assertEqual(
            plugin.descriptors()[0].input_schema, '{"properties":{"a":{},"b":{}},"type":"object"}'
        )
        schema["properties"]["c"] = {}  # later mutation must not change the descriptor
        self.assertNotIn('"c"', plugin.descriptors()[0].input_schema)

    def test_default_hints_are_cautious(self):
        self.assertEqual(
            Hints(), Hints(read_only=False, destructive=True, idempotent=False, open_world=True)
        )


class Dispatch(unittest.TestCase):
    def setUp(self):
        self.plugin = Plugin()

        @self.plugin.tool(
            name="echo",
            description="Echoes.",
            input_schema={
                "type": "object",
                "properties": {
                    "v": {"description": "anything"},
                    "n": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
            },
        )
        def echo(args):
            return args.get("v")

        self.echo = echo

    def test_decorator_returns_the_handler(self):
        self.assertIs(self.echo({"v": 1}), 1)

    def test_a_structured_tool_must_return_one_object_its_schema_accepts(self):
        plugin = Plugin()
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        }

        @plugin.tool(
            name="count",
            description="Counts.",
            input_schema={"type": "object", "properties": {"give": {}}},
            output_schema=schema,
        )
        def count(args):
            return args["give"]

        (d,) = plugin.descriptors()
        self.assertEqual(json.loads(d.output_schema), schema)
        self.assertEqual(plugin.call("count", '{"give": {"n": 2}}'), [Json({"n": 2})])

        @plugin.tool(
            name="told",
            description="Counts and says so.",
            input_schema={"type": "object"},
            output_schema=schema,
        )
        def told(args):
            return [Text("two"), Json({"n": 2})]

        self.assertEqual(plugin.call("told", "{}"), [Text("two"), Json({"n": 2})])
        for give, fragment in [
            ('{"n": "2"}', "does not match its output schema: `result.n` must be"),
            ("{}", "does not match its output schema"),
            ("[1]", "exactly one JSON object; it returned 1 JSON pieces (an array)"),
            ("null", "it returned 0 JSON pieces"),
        ]:
            with self.subTest(give), self.assertRaises(Failed) as caught:
                plugin.call("count", f'{{"give": {give}}}')
            self.assertIn(fragment, caught.exception.message)
        self.assertIsNone(self.plugin.descriptors()[0].output_schema)

    def test_output_schema_must_be_an_object_schema(self):
        for bad in ({"type": "array"}, [], {"type": "object", "x": float("nan")}):
            with self.subTest(bad), self.assertRaises(ToolDefinitionError):
                Plugin().add_tool(
                    lambda a: a,
                    name="t",
                    description="d",
                    input_schema={"type": "object"},
                    output_schema=bad,
                )

    def test_return_value_conversion(self):
        cases = [
            ("hi", [Text("hi")]),
            ({"a": 1}, [Json({"a": 1})]),
            ([1, 2], [Json([1, 2])]),
            (None, []),
            (0, [Json(0)]),
        ]
        for value, expected in cases:
            self.assertEqual(self.plugin.call("echo", json.dumps({"v": value})), expected)

    def test_content_objects_pass_through(self):
        plugin = Plugin()
        plugin.add_tool(
            lambda a: [Text("a"), Json([1])], name="t", description="d", input_schema=OBJECT
        )
        self.assertEqual(plugin.call("t", "{}"), [Text("a"), Json([1])])

    def test_bad_return_values_are_failed_errors(self):
        for bad in (
            lambda a: [Text("a"), 1],
            lambda a: {1, 2},
            lambda a: Text(5),
            lambda a: float("inf"),
        ):
            plugin = Plugin()
            plugin.add_tool(bad, name="t", description="d", input_schema=OBJECT)
            with self.assertRaises(Failed) as caught:
                plugin.call("t", "{}")
            self.assertIn("bug in the tool", caught.exception.message)

    def test_unknown_tool_lists_offered_tools(self):
        with self.assertRaisesRegex(NotFound, "no tool named 'nope'; it offers: echo"):
            self.plugin.call("nope", "{}")

    def test_argument_errors(self):
        with self.assertRaisesRegex(InvalidArguments, "not valid JSON"):
            self.plugin.call("echo", "{")
        with self.assertRaisesRegex(InvalidArguments, "must be a JSON object, got a string"):
            self.plugin.call("echo", '"x"')
        with self.assertRaisesRegex(InvalidArguments, "nested too deeply"):
            self.plugin.call("echo", '{"v": ' + "[" * 100_000 + "]" * 100_000 + "}")
        with self.assertRaisesRegex(InvalidArguments, "`n` must be an integer, got a string"):
            self.plugin.call("echo", '{"n": "3"}')
        with self.assertRaisesRegex(InvalidArguments, "`n` must be at least 0, got -1"):
            self.plugin.call("echo", '{"n": -1}')
        only = "unknown argument `x`; the arguments accept only: `n`, `v`"
        with self.assertRaisesRegex(InvalidArguments, only):
            self.plugin.call("echo", '{"x": 1}')

    def test_tool_errors_pass_through_unchanged(self):
        for cls in (InvalidArguments, NotFound, Denied, Failed):
            plugin = Plugin()

            def handler(args, cls=cls):
                raise cls("precise message")

            plugin.add_tool(handler, name="t", description="d", input_schema=OBJECT)
            with self.assertRaises(cls) as caught:
                plugin.call("t", "{}")
            self.assertEqual(caught.exception.message, "precise message")

    def test_unexpected_exceptions_are_mapped(self):
        cases = [
            (FileNotFoundError(2, "No such file or directory"), NotFound, "inside a granted"),
            (PermissionError(13, "Permission denied"), Denied, "outside the directories"),
            (ZeroDivisionError("division by zero"), Failed, "ZeroDivisionError: division by zero"),
            (SystemExit(3), Failed, "SystemExit"),
        ]
        for exc, cls, fragment in cases:
            plugin = Plugin()

            def handler(args, exc=exc):
                raise exc

            plugin.add_tool(handler, name="t", description="d", input_schema=OBJECT)
            with quiet() as log, self.assertRaises(cls) as caught:
                plugin.call("t", "{}")
            self.assertIn(fragment, caught.exception.message)
            self.assertIn("Traceback", log.getvalue())  # the traceback goes to the log


class ExpectedPathErrors(unittest.TestCase):
    """A missing or refused path is an outcome, not a bug in the tool: mapped as the Rust SDK
    maps it, and logged as one line."""

    def call(self, exc):
        plugin = Plugin()

        def handler(args):
            raise exc

        plugin.add_tool(handler, name="t", description="d", input_schema=OBJECT)
        stderr = io.StringIO()  # not a terminal
        with contextlib.redirect_stderr(stderr), self.assertRaises(cordon_sdk.ToolError) as caught:
            plugin.call("t", "{}")
        return caught.exception, stderr.getvalue()

    def test_not_found_is_logged_without_a_traceback(self):
        err, logged = self.call(FileNotFoundError(2, "No such file or directory", "/d/x.txt"))
        self.assertIsInstance(err, NotFound)
        self.assertIn("/d/x.txt does not exist", err.message)
        self.assertNotIn("Traceback", logged)
        self.assertEqual(len(logged.splitlines()), 1, logged)

    def test_no_colour_codes_when_stderr_is_not_a_terminal(self):
        _, logged = self.call(ValueError("\x1b[31mboom\x1b[0m"))
        self.assertIn("ValueError: boom", logged)
        self.assertNotIn("\x1b", logged)
        with quiet() as err:
            cordon_sdk.log.warn("\x1b[1;31mred\x1b[0m", field="\x1b[32mgreen\x1b[0m")
        self.assertEqual(err.getvalue(), "[warn] red field=green\n")

    def test_in_a_component_a_path_outside_the_grants_is_denied(self):
        # Simulates the component: Python cannot list the preopens, and nothing outside them
        # exists; /data is granted read-only, /out read-write.
        grants = {"/data": False, "/out": True}

        def fake_stat(path):
            if not any(path == g or path.startswith(g + "/") for g in grants):
                raise FileNotFoundError(44, "No such file or directory", path)
            return os.stat_result((0o40755, 0, 0, 1, 0, 0, 0, 0, 0, 0))

        def fake_access(path, mode):
            return grants.get(path, False) or mode != os.W_OK

        with (
            mock.patch.object(cordon_sdk.sys, "platform", "wasi"),
            mock.patch.object(cordon_sdk.os, "stat", fake_stat),
            mock.patch.object(cordon_sdk.os, "access", fake_access),
        ):
            err, logged = self.call(FileNotFoundError(44, "No such file", "/etc/passwd"))
            self.assertIsInstance(err, Denied)
            self.assertIn("/etc/passwd is outside the directories granted", err.message)
            self.assertNotIn("Traceback", logged)
            err, _ = self.call(FileNotFoundError(44, "No such file", "/data/../etc/passwd"))
            self.assertIsInstance(err, Denied)
            err, _ = self.call(FileNotFoundError(44, "No such file", "/data/missing.txt"))
            self.assertIsInstance(err, NotFound)
            # A write under the read-only grant: WASI says "not permitted".
            err, _ = self.call(PermissionError(63, "Operation not permitted", "/data/new.txt"))
            self.assertIsInstance(err, Denied)
            self.assertIn("/data is granted read-only", err.message)
            err, _ = self.call(PermissionError(63, "Operation not permitted", "/out/link"))
            self.assertIn("link leading outside", err.message)
            self.assertNotIn("read-only", err.message)
            dirs = GrantedDirs.from_env()
            self.assertIsNone(dirs.roots)
            self.assertEqual(dirs.resolve("/data/a/../b.txt"), "/data/b.txt")
            with self.assertRaisesRegex(Denied, "outside the directories granted"):
                dirs.resolve("/etc/passwd")
            with self.assertRaisesRegex(InvalidArguments, "absolute path"):
                dirs.resolve("b.txt")


class GrantsWanted(unittest.TestCase):
    """What the host is told a call lacked (`cordon:tool/grant-wanted`), as the Rust SDK's
    `grants` tests check it."""

    def setUp(self):
        cordon_sdk.SAID.clear()

    def test_a_missing_variable_is_said_and_refused(self):
        with mock.patch.dict(os.environ, {"CORDON_SDK_TEST_SET": "v"}):
            self.assertEqual(cordon_sdk.env_var("CORDON_SDK_TEST_SET"), "v")
            self.assertEqual(cordon_sdk.SAID, [])
            with self.assertRaisesRegex(Denied, "`env:CORDON_SDK_TEST_UNSET`"):
                cordon_sdk.env_var("CORDON_SDK_TEST_UNSET")
        self.assertEqual(cordon_sdk.SAID, ["env:CORDON_SDK_TEST_UNSET"])

    def test_a_file_outside_the_grants_says_its_directory(self):
        dirs = GrantedDirs(["/data"])
        with self.assertRaisesRegex(Denied, "`fs:/home/ann/notes:ro`"):
            dirs.resolve("/home/ann/notes/a.txt")
        # Nothing to ask for: a file at the root, a path with `:`.
        for nothing in ["/x.txt", "/a:b/c"]:
            with self.assertRaises(Denied):
                dirs.resolve(nothing)
        self.assertEqual(cordon_sdk.SAID, ["fs:/home/ann/notes:ro"])


class GrantedDirsLikeRust(unittest.TestCase):
    """The cases of the Rust SDK's `paths` tests, with the same answers."""

    def test_normalize_resolves_dots_textually(self):
        self.assertEqual(normalize("/data/./a//b/"), "/data/a/b")
        self.assertEqual(normalize("/data/../etc/passwd"), "/etc/passwd")
        self.assertEqual(normalize("/../../x"), "/x")
        self.assertEqual(normalize("/"), "/")
        self.assertEqual(normalize("a/../.."), "..")
        self.assertEqual(normalize("//data"), "/data")

    def test_resolve_keeps_paths_inside_grants(self):
        dirs = GrantedDirs.with_roots(["/data", "/src/"])
        self.assertEqual(dirs.resolve("/data/x/../y"), "/data/y")
        self.assertEqual(dirs.resolve("/"), "/")
        for bad in ("/etc/passwd", "/data/../etc", "/database", "../etc"):
            with self.assertRaises(Denied, msg=bad) as caught:
                dirs.resolve(bad)
            self.assertIn("/data, /src", caught.exception.message)
        with self.assertRaises(InvalidArguments):
            dirs.resolve("")
        with self.assertRaises(NotFound):
            dirs.resolve("nowhere.txt")
        one = GrantedDirs.with_roots(["/data"])
        self.assertEqual(one.resolve("a/b.txt"), "/data/a/b.txt")

    def test_relative_paths_take_the_grant_where_they_exist(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            with open(os.path.join(b, "here.txt"), "w") as handle:
                handle.write("x")
            dirs = GrantedDirs.with_roots([a, b])
            self.assertEqual(dirs.resolve("here.txt"), normalize(os.path.join(b, "here.txt")))

    def test_a_write_under_a_read_only_grant_says_the_grant_is_read_only(self):
        refused = PermissionError(63, "Operation not permitted")
        dirs = GrantedDirs.with_roots(["/data", "/out"], read_only=["/data"])
        err = dirs.os_error("/data/new.txt", refused)
        self.assertIsInstance(err, Denied)
        self.assertIn("/data is granted read-only", err.message)
        self.assertNotIn("link", err.message)  # nothing there: it was a write
        err = dirs.os_error("/out/new.txt", refused)
        self.assertIn("link", err.message)
        self.assertNotIn("read-only", err.message)
        with tempfile.TemporaryDirectory() as grant:
            os.symlink("/elsewhere", os.path.join(grant, "link"))
            dirs = GrantedDirs.with_roots([grant], read_only=[grant])
            err = dirs.os_error(os.path.join(grant, "link"), refused)
            self.assertIn("may be a link leading outside", err.message)
            self.assertIn("granted read-only", err.message)
            self.assertNotIn("ask the user for a read-write grant", err.message)
        nested = GrantedDirs.with_roots(["/data", "/data/drop"], read_only=["/data"])
        self.assertEqual(nested.grant_of("/data/drop/x"), "/data/drop")
        self.assertFalse(nested.is_read_only("/data/drop/x"))
        self.assertTrue(nested.is_read_only("/data/x"))

    def test_os_errors_map_like_rust(self):
        dirs = GrantedDirs.with_roots(["/data"])
        err = dirs.os_error("/data/x", FileNotFoundError(2, "No such file or directory"))
        self.assertEqual(err.message, "/data/x does not exist (granted directories: /data)")
        self.assertIsInstance(dirs.os_error("/etc/x", FileNotFoundError(2, "gone")), Denied)
        self.assertIsInstance(
            dirs.os_error("/data/d", IsADirectoryError(21, "Is a directory")), InvalidArguments
        )
        self.assertIsInstance(dirs.os_error("/data/x", OSError(5, "I/O error")), Failed)


class Documentation(unittest.TestCase):
    """`pydoc cordon_sdk` documents every public name: hints, errors, contents, paths, the bulk
    reader and the logger, with their public methods."""

    def test_every_public_item_has_a_docstring(self):
        import inspect

        import cordon_testing

        items = [(f"cordon_sdk.{n}", getattr(cordon_sdk, n)) for n in cordon_sdk.__all__]
        items += [("cordon_sdk.Plugin().exports()", Plugin().exports())]
        items += [("cordon_testing.ComponentHost", cordon_testing.ComponentHost)]
        items += [("cordon_testing.ComponentTrap", cordon_testing.ComponentTrap)]
        missing = []
        for label, obj in items:
            target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
            if not inspect.getdoc(target):
                missing.append(label)
            if not inspect.isclass(target):
                continue
            for name, member in vars(target).items():
                if name.startswith("_"):
                    continue
                function = member.fget if isinstance(member, property) else member
                function = getattr(function, "__func__", function)
                if inspect.isfunction(function) and not function.__doc__:
                    missing.append(f"{label}.{name}")
        self.assertEqual(missing, [])


class Validation(unittest.TestCase):
    def check(self, schema, value):
        validate(schema, value)

    def fails(self, schema, value, fragment):
        with self.assertRaises(InvalidArguments) as caught:
            validate(schema, value)
        self.assertIn(fragment, caught.exception.message)

    def test_types(self):
        self.check({"type": "integer"}, 3)
        self.check({"type": "integer"}, 3.0)
        self.fails({"type": "integer"}, 3.5, "must be an integer")
        self.fails({"type": "integer"}, True, "got a boolean")
        self.fails({"type": "number"}, False, "got a boolean")
        self.check({"type": ["string", "null"]}, None)
        self.fails({"type": ["string", "null"]}, 1, "must be a string or null")

    def test_enum_and_const_distinguish_bool_from_int(self):
        self.fails({"enum": [1, 2]}, True, "must be one of 1, 2")
        self.check({"enum": [1, 2]}, 1)
        self.check({"enum": [1, 2]}, 1.0)
        self.fails({"const": False}, 0, "must be false")

    def test_nested_paths(self):
        schema = {
            "type": "object",
            "properties": {
                "rows": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id"],
                        "properties": {"id": {"type": "integer"}},
                    },
                }
            },
        }
        self.fails(schema, {"rows": [{"id": 1}, {}]}, "missing required argument `rows[1].id`")
        self.fails(schema, {"rows": [{"id": "x"}]}, "`rows[0].id` must be an integer")

    def test_strings_and_arrays(self):
        self.fails({"maxLength": 2}, "abc", "is 3 characters long; the limit is 2")
        self.fails({"pattern": "^[a-z]+$"}, "A", "must match the pattern")
        self.fails({"minItems": 1}, [], "at least 1 items")
        self.fails({"maxItems": 1}, [1, 2], "at most 1 items")

    def test_additional_properties_schema(self):
        schema = {"type": "object", "additionalProperties": {"type": "string"}}
        self.check(schema, {"a": "x"})
        self.fails(schema, {"a": 1}, "`a` must be a string")
        self.fails({"type": "object", "properties": {"a": False}}, {"a": 1}, "`a` is not allowed")


class Logging(unittest.TestCase):
    def test_falls_back_to_stderr_outside_a_component(self):
        with quiet() as err:
            cordon_sdk.log.info("loaded", rows=3)
        self.assertIn("[info] loaded rows=3", err.getvalue())

    def test_unknown_level_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "unknown log level 'loud'"):
            cordon_sdk.log.write("loud", "x")


def _componentize_py():
    candidate = os.environ.get("COMPONENTIZE") or os.path.join(
        ROOT, "target", "venv", "bin", "componentize-py"
    )
    return candidate if os.path.exists(candidate) else shutil.which("componentize-py")


@unittest.skipUnless(_componentize_py(), "componentize-py not found; run `make toolchain`")
class Exports(unittest.TestCase):
    """The exported class against real generated WIT bindings."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        subprocess.run(
            [
                _componentize_py(),
                "-d",
                os.path.join(HERE, "..", "wit"),
                "-w",
                "plugin-with-outputs",
                "bindings",
                cls.tmp.name,
            ],
            check=True,
            capture_output=True,
        )
        sys.path.insert(0, cls.tmp.name)
        from componentize_py_types import Err
        from wit_world.exports import tool_outputs
        from wit_world.imports import types as wit

        cls.Err, cls.wit, cls.tool_outputs = Err, wit, tool_outputs

        plugin = Plugin()

        @plugin.tool(
            name="greet",
            description="Greets.",
            hints=Hints(read_only=True),
            input_schema={
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}},
            },
        )
        def greet(args):
            if args["name"] == "ghost":
                raise NotFound("no such person 'ghost'")
            if args["name"] == "crash":
                raise RuntimeError("unexpected")
            if args["name"] == "surrogate":
                return [Text("a\udc80b"), Json({"s": "\ud800"})]
            return f"Hello, {args['name']}!"

        @plugin.tool(
            name="size",
            description="Sizes a word.",
            input_schema={"type": "object", "properties": {"w": {"type": "string"}}},
            output_schema={
                "type": "object",
                "properties": {"length": {"type": "integer"}},
                "required": ["length"],
            },
        )
        def size(args):
            return {"length": len(args.get("w", ""))}

        cls.tools = plugin.exports()()
        cls.outputs = plugin.output_exports()()

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.tmp.name)
        cls.tmp.cleanup()

    def test_output_schemas_are_listed_for_structured_tools_only(self):
        (o,) = self.outputs.output_schemas()
        self.assertIsInstance(o, self.tool_outputs.OutputSchema)
        self.assertEqual(o.tool, "size")
        self.assertEqual(json.loads(o.schema)["required"], ["length"])
        self.assertEqual(
            self.tools.call_tool("size", '{"w": "abc"}'), [self.wit.Content_Json('{"length": 3}')]
        )

    def test_list_tools(self):
        d, _ = self.tools.list_tools()
        self.assertIsInstance(d, self.wit.ToolDescriptor)
        self.assertEqual(d.name, "greet")
        self.assertEqual(
            d.hints,
            self.wit.ToolHints(read_only=True, destructive=True, idempotent=False, open_world=True),
        )
        self.assertEqual(json.loads(d.input_schema)["required"], ["name"])

    def test_call_ok(self):
        self.assertEqual(
            self.tools.call_tool("greet", '{"name": "Ada"}'), [self.wit.Content_Text("Hello, Ada!")]
        )

    def test_errors_become_wit_variants(self):
        cases = [
            ('{"name": "ghost"}', self.wit.ToolError_NotFound, "no such person"),
            ("{}", self.wit.ToolError_InvalidArguments, "missing required argument `name`"),
            ('{"name": "crash"}', self.wit.ToolError_Failed, "RuntimeError: unexpected"),
        ]
        for arguments, variant, fragment in cases:
            with quiet(), self.assertRaises(self.Err) as caught:
                self.tools.call_tool("greet", arguments)
            self.assertIsInstance(caught.exception.value, variant)
            self.assertIn(fragment, caught.exception.value.value)

    def test_strings_crossing_the_boundary_are_valid_utf8(self):
        text, doc = self.tools.call_tool("greet", '{"name": "surrogate"}')
        text.value.encode("utf-8")
        doc.value.encode("utf-8")
        self.assertEqual(text.value, "a\ufffdb")
        # Not "\\ud800": strict parsers (serde_json) reject lone surrogate escapes.
        self.assertEqual(json.loads(doc.value), {"s": "\ufffd"})


class BulkReaderOutsideAComponent(unittest.TestCase):
    """Under plain Python the reader reads with ``open`` when taken, with the host's answers."""

    def test_take_and_take_sifted(self):
        from cordon_sdk import BulkReader, QueueFull

        with tempfile.TemporaryDirectory() as directory:
            files = {
                "hit": b"a needle",
                "miss": b"hay\0hay",
                "marked": b"\xff\xfehay",
                "big": b"x" * 50,
            }
            for name, body in files.items():
                with open(os.path.join(directory, name), "wb") as handle:
                    handle.write(body)
            paths = [os.path.join(directory, n) for n in [*files, "missing"]] + [directory]
            with BulkReader(20, needles=[b"needle"]) as reader:
                for path in paths:
                    reader.add(path)
                self.assertEqual(reader.queued(), 6)
                got = reader.take_sifted(10)
            self.assertEqual(got[0].contents, b"a needle")
            self.assertEqual((got[1].passed_over, got[1].size, got[1].first_nul), (True, 7, 3))
            self.assertEqual(got[2].contents, b"\xff\xfehay")
            self.assertEqual((got[3].error.kind, got[3].error.size), ("too-large", 50))
            self.assertEqual([f.error.kind for f in got[4:]], ["not-found", "not-a-file"])
            # A plain take hands everything whole; a reader without needles sifts nothing.
            for reader, take in [
                (BulkReader(100, needles=[b"needle"]), "take"),
                (BulkReader(100), "take_sifted"),
            ]:
                reader.add(paths[1])
                (file,) = getattr(reader, take)(1)
                self.assertEqual(file.contents, b"hay\0hay")
            reader = BulkReader(1)
            for _ in range(4096):
                reader.add("/x")
            with self.assertRaises(QueueFull):
                reader.add("/x")
            with self.assertRaises(ValueError):
                reader.add("/" + "x" * 4096)

    def test_paths_the_host_refuses_and_a_closed_reader(self):
        from cordon_sdk import BulkReader

        with BulkReader(10) as reader:
            for path in ["relative.txt", "/tmp/../etc/hostname", "/nul\0byte"]:
                reader.add(path)
            kinds = [f.error.kind for f in reader.take(3)]
        self.assertEqual(kinds, ["not-granted", "not-granted", "other"])
        with self.assertRaisesRegex(ValueError, "closed"):
            reader.add("/x")
        with self.assertRaisesRegex(TypeError, "list of byte strings"):
            BulkReader(1, needles=b"text")
        with self.assertRaisesRegex(TypeError, "list of byte strings"):
            BulkReader(1, needles=["text"])

    def test_needles_are_checked_as_the_host_checks_them(self):
        from cordon_sdk import BulkReader

        for needles, problem in [
            ([b"ok", b""], "needle 1 is empty"),
            ([b"n" * 1025], "needle 0 is 1025 bytes"),
            ([b"n"] * 1025, "1025 needles"),
            ([b"n" * 1000] * 66, "66000 bytes in all"),
        ]:
            with self.assertRaisesRegex(ValueError, problem):
                BulkReader(1, needles=needles)


def _has_wasmtime():
    try:
        import wasmtime  # noqa: F401
    except ImportError:
        return False
    return True


@unittest.skipUnless(_has_wasmtime(), "wasmtime (PyPI) not installed; run `make toolchain`")
class TestingHostBulkRead(unittest.TestCase):
    """cordon_testing answers cordon:tool/bulk-read as the Cordon host does: only regular files
    inside the preopens, by guest path, within the size limit."""

    def setUp(self):
        import cordon_testing

        self.tmp = tempfile.TemporaryDirectory()
        base = os.path.realpath(self.tmp.name)
        granted, outside = os.path.join(base, "granted"), os.path.join(base, "outside")
        os.makedirs(os.path.join(granted, "sub"))
        os.makedirs(outside)
        for path, text in [
            (os.path.join(granted, "a.txt"), "inside"),
            (os.path.join(granted, "sub", "b.txt"), "nested"),
            (os.path.join(outside, "secret.txt"), "SECRET"),
        ]:
            with open(path, "w") as f:
                f.write(text)
        os.symlink("a.txt", os.path.join(granted, "link_in"))
        os.symlink(os.path.join(outside, "secret.txt"), os.path.join(granted, "link_out"))
        os.symlink("../outside/secret.txt", os.path.join(granted, "link_rel_out"))
        # Leaves the directory and comes back in: refused as the host's open refuses it.
        os.symlink("../granted/a.txt", os.path.join(granted, "link_out_and_in"))
        os.symlink("../a.txt", os.path.join(granted, "sub", "link_up_in"))
        os.mkfifo(os.path.join(granted, "pipe"))
        os.symlink("missing/../a.txt", os.path.join(granted, "link_via_missing"))
        os.symlink("a.txt/", os.path.join(granted, "link_file_as_dir"))
        os.symlink("loop_b", os.path.join(granted, "loop_a"))
        os.symlink("loop_a", os.path.join(granted, "loop_b"))
        self.host = cordon_testing.ComponentHost.__new__(cordon_testing.ComponentHost)
        self.host._preopens = [(granted, "/d", False)]

    def tearDown(self):
        self.tmp.cleanup()

    def answer(self, path, max_size=1 << 20):
        result = self.host._read_granted(path, max_size)
        if isinstance(result, bytes):
            return result.decode()
        return result.tag if result.payload is None else f"{result.tag}:{result.payload}"

    def test_only_regular_files_inside_the_grants(self):
        cases = {
            "/d/a.txt": "inside",
            "//d/./sub//b.txt": "nested",
            "/d/link_in": "inside",
            "/d/link_out": "not-granted",
            "/d/link_rel_out": "not-granted",
            "/d/link_out_and_in": "not-granted",
            "/d/sub/link_up_in": "inside",
            "/d/../outside/secret.txt": "not-granted",
            "/outside/secret.txt": "not-granted",
            "d/a.txt": "not-granted",
            "/d": "not-a-file",
            "/d/sub": "not-a-file",
            "/d/sub/": "not-a-file",
            "/d/pipe": "not-a-file",
            "/d/missing": "not-found",
            "/d/missing/": "not-found",
            "/d/a.txt/.": "not-a-file",
            "/d/a.txt/x": "not-a-file",
            "/d/link_via_missing": "not-found",
            "/d/link_file_as_dir": "not-a-file",
            "/d/loop_a": "other:too many levels of symbolic links",
        }
        for path, expected in cases.items():
            self.assertEqual(self.answer(path), expected, path)
        self.assertEqual(self.answer("/d/a.txt", max_size=3), "too-large:6")

    def test_take_sifted_passes_over_files_without_a_needle(self):
        import itertools
        import types

        import cordon_testing

        granted = self.host._preopens[0][0]
        for name, body in [
            ("hit.txt", b"a needle"),
            ("miss.bin", b"hay\0hay"),
            ("marked.txt", b"\xff\xfeh\0a\0y\0"),
            ("empty.txt", b""),
        ]:
            with open(os.path.join(granted, name), "wb") as f:
                f.write(body)
        host = self.host
        host._readers, host._needles, host._reader_ids = {}, {}, itertools.count(1)
        host._memory_bytes = 1 << 20
        self.assertIn(
            "needle 1 is empty, and every file contains the empty string",
            host._reader_sifting(None, 100, b"ok", [2, 0]),
        )
        self.assertIn("add up to 3 bytes but 2", host._reader_sifting(None, 100, b"ok", [3]))
        reader = host._reader_sifting(None, 100, b"needlepin", [6, 3])
        # Like a borrowed handle, it converts once per call.
        conversions = []

        def to_host(_store):
            conversions.append(1)
            return reader

        handle = types.SimpleNamespace(to_host=to_host)
        for name in ["hit.txt", "miss.bin", "marked.txt", "empty.txt", "missing"]:
            self.assertIsNone(host._reader_add(None, handle, f"/d/{name}"))
        got = []
        conversions.clear()
        taken = host._reader_take_sifted(None, handle, 10)
        self.assertEqual(len(conversions), 1)
        for file in taken:
            contents = file.contents
            if isinstance(contents, cordon_testing._wc.Variant):
                got.append(("err", contents.tag))
            elif isinstance(contents, bytes):
                got.append(("whole", contents))
            else:
                got.append(("passed-over", contents.size, getattr(contents, "first-nul")))
        self.assertEqual(
            got,
            [
                ("whole", b"a needle"),
                ("passed-over", 7, 3),
                ("whole", b"\xff\xfeh\0a\0y\0"),
                ("passed-over", 0, None),
                ("err", "not-found"),
            ],
        )


if __name__ == "__main__":
    unittest.main()
