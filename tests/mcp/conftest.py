"""Shared set-up of the MCP tests: one Cordon home with the bundled tools, `cordon mcp` on
stdio, and `cordon serve` with `/mcp` over Streamable HTTP, all on 127.0.0.1.

The clients are the official MCP Python SDK (`mcp` from PyPI): nothing here speaks MCP by
itself except the tests of malformed input, which must send what no SDK would.
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
CORDON = ROOT / "target/debug/cordon"
PLUGINS = ROOT / "target/plugins"
FIXTURES = ROOT / "target/fixtures"

# Modern (2026-07-28, no initialize) and handshake-era (initialize, 2025-11-25) connections.
MODES = ["2026-07-28", "legacy"]
TRANSPORTS = ["stdio", "http"]

CONFIG = """
[approval.plugins]
sql = "auto"

[approval.tools]
"lc.read_file" = "deny"

[serve]
approval_timeout_secs = 20
"""


def cordon_env(world):
    """The environment Cordon runs in for `world`: its home and config, nothing inherited
    but `PATH`."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(world.root),
        "USER": "tester",
        "CORDON_HOME": str(world.home),
        "CORDON_CONFIG": str(world.config),
        "NO_COLOR": "1",
        "RUST_LOG": "warn",
    }


@dataclass
class World:
    root: Path
    home: Path
    data: Path
    scratch: Path
    db: Path
    config: Path
    env: dict
    serve_url: str = ""
    token: str = ""
    serve: subprocess.Popen | None = None
    serve_log: list = field(default_factory=list)

    def cordon(self, *args, check=True, timeout=60):
        """Runs the cordon CLI on this home; returns the completed process."""
        done = subprocess.run(
            [str(CORDON), *args],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"cordon {' '.join(args)} failed: {done.stderr}")
        return done

    def audit(self):
        """The audit log's tool calls, oldest first, once the records of calls just made are
        written (MCP calls' records are written in the background within milliseconds: two
        reads 150 ms apart must agree)."""
        last = None
        for _ in range(40):
            out = self.cordon("audit", "--kind", "tool_call", "--json", "--limit", "100000").stdout
            records = [json.loads(line) for line in out.splitlines() if line.strip()]
            if records == last:
                return records
            last = records
            time.sleep(0.15)
        raise AssertionError("the audit log kept changing")

    def client(self, transport, mode, **kwargs):
        """An MCP SDK client connected to Cordon over `transport`."""
        if transport == "stdio":
            server = StdioServerParameters(
                command=str(CORDON),
                args=["mcp"],
                env=self.env,
                cwd=str(self.root),
            )
        else:
            return http_client(self.serve_url, self.token, mode, **kwargs)
        return Client(server, mode=mode, read_timeout_seconds=60, **kwargs)


def http_client(url, token, mode, headers=None, **kwargs):
    """An MCP SDK client connected to the `/mcp` of the `cordon serve` at `url` with `token`
    (and `headers`)."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}", **(headers or {})}, timeout=60
    )
    server = streamable_http_client(url + "/mcp", http_client=http)
    return Client(server, mode=mode, read_timeout_seconds=60, **kwargs)


def start_serve(world, log, *args):
    """Starts `cordon serve` on `world`'s home on a free port of 127.0.0.1, its stderr kept in
    `log`; returns the process and its URL."""
    proc = subprocess.Popen(
        [str(CORDON), "serve", "--listen", "127.0.0.1:0", *args],
        env=world.env,
        cwd=world.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    found = threading.Event()
    url = []

    def read():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                url.append(m.group(1))
                found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(60):
        proc.kill()
        raise AssertionError("cordon serve did not start:\n" + "".join(log))
    return proc, url[0]


def stop_serve(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def _start_serve(world):
    world.serve, world.serve_url = start_serve(world, world.serve_log)
    text = (world.home / "serve-token").read_text()
    world.token = text.split()[-1]


@pytest.fixture(scope="session")
def world():
    root = Path(tempfile.mkdtemp(prefix="cordon-mcp-"))
    w = World(
        root=root,
        home=root / "home",
        data=root / "data",
        scratch=root / "scratch",
        db=root / "db",
        config=root / "cordon.toml",
        env={},
    )
    for d in (w.data, w.scratch, w.db):
        d.mkdir()
    (w.data / "hello.txt").write_text("hello from the granted directory\n")
    w.config.write_text(CONFIG)
    w.env = cordon_env(w)
    w.cordon("plugin", "install", str(PLUGINS / "sql.wasm"), "--grant", f"fs:{w.db}:/db:rw")
    w.cordon("plugin", "install", str(PLUGINS / "files.wasm"), "--grant", f"fs:{w.data}:/data:ro")
    w.cordon(
        "plugin", "install", str(PLUGINS / "files.wasm"), "--name", "fw",
        "--grant", f"fs:{w.scratch}:/scratch:rw",
    )  # fmt: skip
    w.cordon("plugin", "install", str(PLUGINS / "files.wasm"), "--name", "lc")
    w.cordon("plugin", "install", str(PLUGINS / "python.wasm"), "--limit", "time=4s")
    # Declares an output schema and breaks it on request.
    w.cordon("plugin", "install", str(FIXTURES / "outputs.wasm"))
    # Writes its result as it goes (`result-stream`), as long as asked.
    w.cordon("plugin", "install", str(FIXTURES / "writer.wasm"))
    _start_serve(w)
    try:
        yield w
    finally:
        if w.serve is not None:
            stop_serve(w.serve)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class TwoTokens:
    """A `cordon serve` on the world's home whose token file holds two named tokens."""

    url: str
    alice: str
    bob: str
    # The unnamed token: every scope.
    operator: str


@pytest.fixture(scope="session")
def two_tokens(world):
    alice, bob, operator = (secrets.token_hex(16) for _ in range(3))
    tokens = world.root / "two-tokens"
    # The operator's token (unnamed: every scope) first, as `cordon approve` answers with the
    # first token of the file; Alice and Bob with a named token's scopes.
    tokens.write_text(f"{operator}\nalice {alice}\nbob {bob}\n")
    tokens.chmod(0o600)
    proc, url = start_serve(world, [], "--token-file", str(tokens))
    try:
        yield TwoTokens(url=url, alice=alice, bob=bob, operator=operator)
    finally:
        stop_serve(proc)


@pytest.fixture
def anyio_backend():
    return "asyncio"


def answering(answer):
    """An elicitation callback that gives `answer` (or declines, for "decline") to every
    question, and the list of the questions it was asked."""
    asked = []

    async def on_elicit(context, params):
        asked.append(params)
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"answer": answer})

    return asked, on_elicit


def wait_until(predicate, timeout=15.0, what="the condition"):
    """Polls `predicate` until it returns something true, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


INSPECTOR = ROOT / "target/npm/node_modules/.bin/mcp-inspector"


@pytest.fixture(scope="session")
def inspector():
    """Runs the MCP Inspector's CLI mode (installed by `make mcp-test`) against Cordon."""
    if not INSPECTOR.exists():
        pytest.fail(f"the MCP Inspector is not installed at {INSPECTOR}; run `make mcp-test`")

    def run(world, transport, *args):
        if transport == "stdio":
            target = [
                "-e", f"CORDON_HOME={world.home}",
                "-e", f"CORDON_CONFIG={world.config}",
                str(CORDON), "mcp",
            ]  # fmt: skip
        else:
            target = [
                world.serve_url + "/mcp",
                "--transport", "http",
                "--header", f"Authorization: Bearer {world.token}",
            ]  # fmt: skip
        done = subprocess.run(
            [str(INSPECTOR), "--cli", *target, *args],
            env={**world.env, "HOME": str(world.root)},
            cwd=world.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"inspector failed: {done.stdout}\n{done.stderr}"
        return done.stdout

    return run
