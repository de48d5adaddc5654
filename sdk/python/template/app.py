"""Example Cordon tool plugin in Python: text statistics for a string or a granted file.

Copy this directory to start a plugin. It shows the parts every plugin has:

* imports of every standard-library module the code needs at run time (componentize-py keeps
  only modules imported while it pre-initialises the app);
* a ``Plugin`` with tools declared by name, description, JSON Schema and hints;
* handlers that raise ``InvalidArguments`` / ``NotFound`` / ``Denied`` / ``Failed`` for
  failures the model should act on (``FileNotFoundError`` and ``PermissionError`` are mapped
  for you);
* ``Tools = plugin.exports()`` at the end, which is what componentize-py looks for.
"""

# Counter.most_common imports heapq lazily: without importing it here it is missing at run time.
import collections
import heapq  # noqa: F401
import re

from cordon_sdk import Hints, InvalidArguments, Json, Plugin, log

plugin = Plugin()

# Letters, with inner apostrophes (ASCII or typographic) kept: "don't" is one word.
WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")


@plugin.tool(
    name="text_stats",
    description=(
        "Counts lines, words and characters of a text and lists its most frequent words. "
        "Give either `text` directly or `path` to a UTF-8 file inside a directory the user "
        "has granted to this tool."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The text to analyse."},
            "path": {
                "type": "string",
                "description": "Path of a UTF-8 text file inside a granted directory.",
            },
            "top": {
                "type": "integer",
                "minimum": 0,
                "maximum": 100,
                "description": "How many of the most frequent words to list (default 5).",
            },
        },
        "additionalProperties": False,
    },
    # It only reads, the same input always gives the same answer, and it reaches nothing
    # beyond the granted paths.
    hints=Hints(read_only=True, destructive=False, idempotent=True, open_world=False),
)
def text_stats(args: dict) -> Json:
    """Counts what the model asked about; the SDK has already checked the argument types."""
    if ("text" in args) == ("path" in args):
        raise InvalidArguments("give exactly one of `text` or `path`")
    if "path" in args:
        # A missing file becomes a not-found error and a path outside the grants a denied
        # error, with a hint for the model; no try/except needed here.
        with open(args["path"], encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    else:
        text = args["text"]
    words = [w.lower() for w in WORD.findall(text)]
    log.debug("counted words", words=len(words))
    return Json(
        {
            "lines": len(text.splitlines()),
            "words": len(words),
            "characters": len(text),
            "most_common": collections.Counter(words).most_common(args.get("top", 5)),
        }
    )


Tools = plugin.exports()
