"""The ``run_python`` tool: Python code run in a fresh CPython-in-WebAssembly instance.

Written with the Cordon Python SDK (``sdk/python/cordon_sdk.py``) the way a third-party author
would. The execution logic lives in ``pyrunner`` so it can be tested under plain ``python3``.

Only modules imported while ``componentize-py`` pre-initialises this app exist at run time,
so every standard-library module the tool offers is imported below (``OFFERED_MODULES``).
Each is checked at build time: a module that the WebAssembly CPython lacks fails the build
instead of a user's call.
"""

import importlib
import sys

from cordon_sdk import Hints, InvalidArguments, Json, Plugin

import pyrunner

#: Standard-library modules user code can import. Keep this list and the tool description in
#: step: the description tells the model what it may use. Imported for the side effect of
#: being loaded into the pre-initialised snapshot.
OFFERED_MODULES = tuple(
    """
    abc array base64 binascii bisect calendar cmath codecs collections collections.abc
    colorsys contextlib copy csv dataclasses datetime decimal difflib enum fnmatch
    fractions functools glob graphlib gzip hashlib heapq hmac html html.parser inspect
    io ipaddress itertools json keyword logging math numbers operator os os.path pathlib
    pprint random re reprlib secrets shlex shutil sqlite3 statistics string struct sys
    textwrap time tomllib traceback types typing unicodedata urllib.parse uuid warnings
    weakref xml.etree.ElementTree zipfile zlib
    """.split()
)

#: Modules the standard library imports only on first use (``datetime.strptime`` needs
#: ``_strptime``; ``zipfile`` needs the cp437 codec; ``str.encode`` looks codecs up lazily).
#: Found by running common operations inside the component; see tests/component_cases.json.
LAZY_MODULES = (
    "_strptime",
    *(
        f"encodings.{codec}"
        for codec in """
        ascii base64_codec big5 charmap cp037 cp1250 cp1251 cp1252 cp1253 cp1254
        cp1255 cp1256 cp1257 cp1258 cp437 cp850 cp852 cp866 cp932 cp949 cp950 euc_jp
        euc_kr gb18030 gb2312 gbk hex_codec idna iso2022_jp iso8859_1 iso8859_2
        iso8859_5 iso8859_7 iso8859_9 iso8859_15 koi8_r koi8_u latin_1 mac_roman
        palmos punycode quopri_codec raw_unicode_escape rot_13 shift_jis
        unicode_escape utf_16 utf_16_be utf_16_le utf_32 utf_32_be utf_32_le utf_7
        utf_8 utf_8_sig uu_codec zlib_codec
        """.split()
    ),
)

for _module in (*OFFERED_MODULES, *LAZY_MODULES):
    importlib.import_module(_module)

#: The modules the description names: the common ones, so the tool list stays short (every
#: token of it is sent with every request). Each must be offered; the others are there too.
NAMED_MODULES = tuple(
    """
    math statistics random decimal fractions datetime time calendar json csv re string
    textwrap difflib collections itertools functools dataclasses sqlite3 hashlib base64
    zipfile gzip pathlib xml.etree.ElementTree urllib.parse
    """.split()
)

MODULE_LIST = ", ".join(NAMED_MODULES)

DESCRIPTION = f"""\
Runs Python 3 code in a fresh sandbox; returns its output, its last expression's value or the \
traceback. Use it for arithmetic, dates, parsing and data work instead of guessing. Nothing \
persists between calls.

Much of the standard library ({MODULE_LIST}, …); no third-party packages (numpy, pandas), \
network, subprocesses, threads, asyncio or zoneinfo. Files only under granted directories, by \
absolute path (SQLite under a read-only grant: \
`sqlite3.connect('file:/abs/path.db?immutable=1', uri=True)`). Time and memory are limited; \
print progress."""

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "minLength": 1,
            "description": (
                "Python 3 source, e.g. `sum(x['n'] for x in input)`: a last expression's "
                "value is returned."
            ),
        },
        "input": {
            "description": (
                "Any JSON value, the variable `input` in the code (None when left out)."
            ),
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}

#: What ``run_python`` returns (``pyrunner.run_code``'s report), for clients that use the
#: result's fields (MCP's ``outputSchema``).
OUTPUT_SCHEMA = {
    "type": "object",
    "description": "What running the code did.",
    "properties": {
        "ok": {
            "type": "boolean",
            "description": "Whether the code ran to the end without an exception.",
        },
        "result": {
            "description": (
                "The value of the last statement when it is an expression, as JSON (left out "
                "when it is None, not JSON, or too large; see result_repr)."
            ),
        },
        "result_repr": {
            "type": "string",
            "description": "repr() of that value, possibly truncated.",
        },
        "stdout": {"type": "string", "description": "What the code printed."},
        "stderr": {"type": "string", "description": "What the code wrote to stderr."},
        "error": {
            "type": "object",
            "description": "The exception that stopped the code, when ok is false.",
            "properties": {
                "type": {"type": "string", "description": "The exception's class name."},
                "message": {"type": "string"},
                "line": {
                    "type": ["integer", "null"],
                    "description": "The line of the code where it was raised, if known.",
                },
                "traceback": {"type": "string"},
            },
            "required": ["type", "message", "line", "traceback"],
        },
        "notes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "What was cut or left out of this report, and why.",
        },
    },
    "required": ["ok", "stdout", "stderr"],
    "additionalProperties": False,
}

plugin = Plugin()


@plugin.tool(
    name="run_python",
    description=DESCRIPTION,
    input_schema=INPUT_SCHEMA,
    # Read-only and not destructive: the tool itself changes nothing; code can write only
    # through a read-write directory grant, and the host decides approval from grants.
    # Not idempotent: under such a grant the same code (e.g. appending to a file) has an
    # effect each time, so a caller must not retry it blindly.
    hints=Hints(read_only=True, destructive=False, idempotent=False, open_world=False),
    output_schema=OUTPUT_SCHEMA,
)
def run_python(args: dict) -> Json:
    """Runs ``args['code']`` with ``args.get('input')`` bound to ``input``."""
    code = args["code"]
    if not code.strip():
        raise InvalidArguments(
            '`code` is only whitespace; pass the Python source to run, e.g. "print(1 + 1)"'
        )
    # Echo prints to the component's real stdout/stderr too: if the host stops the code at a
    # limit, its error quotes the last lines, so the model learns how far the code got.
    mirrors = (sys.__stdout__, sys.__stderr__)
    if mirrors[0] is None or mirrors[1] is None:
        mirrors = None
    return Json(pyrunner.run_code(code, args.get("input"), mirrors=mirrors))


Tools = plugin.exports()
ToolOutputs = plugin.output_exports()
