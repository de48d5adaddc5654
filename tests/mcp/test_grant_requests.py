"""Grant requests through MCP, with the MCP SDK as the client: the `probe` fixture is granted
one local server and asked to fetch from another. Its sandbox refuses; Cordon asks the client's
user (a form) whether to grant that origin, and for how long; granted, the call runs again and
its result is what the client gets. Refused for good, the session is not asked again."""

import http.server
import shutil
import tempfile
import threading
from pathlib import Path
from typing import ClassVar

import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters

from conftest import CORDON, FIXTURES, World, answering, cordon_env

pytestmark = pytest.mark.anyio


class Other(http.server.BaseHTTPRequestHandler):
    """A server the plugin was not granted; remembers every request target."""

    asked: ClassVar[list] = []

    def do_GET(self):
        Other.asked.append(self.path)
        body = b"the other server's page"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def world():
    root = Path(tempfile.mkdtemp(prefix="cordon-grants-"))
    granted, granted_origin = serve()
    other, other_origin = serve()
    w = World(
        root=root,
        home=root / "home",
        data=root / "data",
        scratch=root / "scratch",
        db=root / "db",
        config=root / "cordon.toml",
        env={},
    )
    w.config.write_text('[approval.tools]\n"probe.http" = "auto"\n')
    w.env = cordon_env(w)
    w.cordon("plugin", "install", str(FIXTURES / "probe.wasm"), "--grant", f"net:{granted_origin}")
    Other.asked.clear()
    try:
        yield w, other_origin
    finally:
        granted.shutdown()
        other.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


def client(world, on_elicit):
    server = StdioServerParameters(
        command=str(CORDON), args=["mcp"], env=world.env, cwd=str(world.root)
    )
    return Client(
        server,
        mode="legacy",
        read_timeout_seconds=60,
        client_info=types.Implementation(name="grants", version="1.0"),
        elicitation_callback=on_elicit,
    )


async def test_a_refused_origin_granted_for_an_hour_runs_again_and_is_kept_in_the_lock(world):
    w, origin = world
    asked, on_elicit = answering("hour")
    async with client(w, on_elicit) as c:
        r = await c.call_tool("http", {"url": f"{origin}/page"})
        assert not r.is_error, text(r)
        assert "the other server's page" in text(r)
        assert len(asked) == 1, asked
        assert f"net:{origin}" in asked[0].message, asked[0].message
        # Kept in the lock for an hour: the next call needs no question.
        r = await c.call_tool("http", {"url": f"{origin}/again"})
        assert not r.is_error, text(r)
        assert len(asked) == 1, asked
    assert Other.asked == ["/page", "/again"]
    inspect = w.cordon("plugin", "inspect", "probe")
    assert "for a while:" in inspect.stdout and f"net:{origin}" in inspect.stdout, inspect.stdout
    audit = w.cordon("audit")
    assert "for 60 minutes" in audit.stdout, audit.stdout


async def test_a_grant_refused_for_good_is_not_asked_again_in_the_session(world):
    w, origin = world
    asked, on_elicit = answering("never")
    async with client(w, on_elicit) as c:
        r = await c.call_tool("http", {"url": f"{origin}/one"})
        assert r.is_error and "will not be asked again" in text(r), text(r)
        r = await c.call_tool("http", {"url": f"{origin}/two"})
        assert r.is_error, text(r)
        assert len(asked) == 1, asked
    assert Other.asked == []
    assert f"net:{origin}" not in (w.home / "plugins.toml").read_text()
