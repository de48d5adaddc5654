"""Example Cordon tool plugin in Python: text statistics for a string or a granted file.

Copy this directory to start a plugin. It shows the parts every plugin has:

* imports of every standard-library module the code needs at run time (componentize-py keeps
  only modules imported while it pre-initialises the app);
* a ``Plugin`` with tools declared by name, description, JSON Schema and hints;
* handlers that raise ``InvalidArguments`` / ``NotFound`` / ``Denied`` / ``Failed`` for
  failures the model should act on (``FileNotFoundError`` and ``PermissionError`` are mapped
  for you), and ``GrantedDirs`` to check a path argument against the grants;
* ``BulkReader`` when a tool reads many files: the host reads them on its own threads (and,
  given the text searched for, passes over the files without it) while the tool works;
* ``Tools = plugin.exports()`` at the end, which is what componentize-py looks for.
"""

# Counter.most_common imports heapq lazily: without importing it here it is missing at run time.
import collections
import heapq  # noqa: F401
import re

from cordon_sdk import (
    BulkReader,
    GrantedDirs,
    Hints,
    InvalidArguments,
    Json,
    Plugin,
    QueueFull,
    log,
)

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
        # A path outside the grants is denied here; a missing file becomes not-found when
        # open raises, with no try/except needed.
        path = GrantedDirs.from_env().resolve(args["path"])
        with open(path, encoding="utf-8", errors="replace") as handle:
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


@plugin.tool(
    name="find_text",
    description=(
        "Counts the lines containing `text` (exact, case-sensitive) in each of `paths`, files "
        "inside directories the user has granted to this tool. Lists only the files with at "
        "least one such line, and the paths that could not be read with the reason."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "The text to look for."},
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": 1000,
                "description": "Paths of the files to look in, inside granted directories.",
            },
        },
        "required": ["text", "paths"],
        "additionalProperties": False,
    },
    hints=Hints(read_only=True, destructive=False, idempotent=True, open_world=False),
)
def find_text(args: dict) -> Json:
    """Reads the files through the host in one go; only those containing the text come back
    whole, so a thousand files cost little more than the few that match."""
    needle = args["text"].encode()
    counts, unreadable = {}, {}
    try:
        reader = BulkReader(16 << 20, needles=[needle])
    except ValueError as err:  # e.g. a text longer than 1024 bytes
        raise InvalidArguments(f"`text` cannot be searched for: {err}") from None

    def take_some() -> None:
        for file in reader.take_sifted(64):
            if file.error is not None:
                unreadable[file.path] = str(file.error)
            elif not file.passed_over:
                lines = lines_containing(file.contents, needle)
                if lines:
                    counts[file.path] = lines

    with reader:
        for path in args["paths"]:
            while True:
                try:
                    reader.add(path)
                    break
                except QueueFull:  # many long paths: take what is queued first
                    take_some()
                except ValueError as err:  # longer than any path can be
                    unreadable[path] = str(err)
                    break
        while reader.queued():
            take_some()
    return Json({"lines_with_text": counts, "unreadable": unreadable})


def lines_containing(data: bytes, needle: bytes) -> int:
    """How many newline-separated lines of ``data`` contain ``needle``, without splitting a
    large file into a list of lines first."""
    count, at = 0, data.find(needle)
    while at >= 0:
        count += 1
        end = data.find(b"\n", at + len(needle))
        if end < 0:
            break
        at = data.find(needle, end + 1)
    return count


Tools = plugin.exports()
