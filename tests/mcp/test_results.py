"""What MCP clients act on, checked as they act on it: the structured result some clients give
the model instead of the text, the annotations some approve calls on, the instructions and
stderr a user sees when the server has nothing to offer, progress that keeps a client waiting
for an approval, `always` answers that hold for one program only, and the small HTTP and list
answers SDKs expect.

Run by `make mcp-test`, or by hand after `make`:

    target/venv/bin/python -m pytest tests/mcp/test_results.py
"""

import json
import logging
import re
import subprocess
import tempfile

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import CORDON, PLUGINS, answering, http_client, wait_until

pytestmark = pytest.mark.anyio

BOTH = pytest.mark.parametrize("transport", ["stdio", "http"])


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


def model_sees(result):
    """What Claude Code and Codex give the model: `structuredContent` alone when a result has
    it, else the text of its content."""
    if result.structured_content is not None:
        return json.dumps(result.structured_content)
    return text(result)


# Each bundled tool, a call of it, and what the model must learn from the result. The sql
# tools read the database `sql_execute` writes; each case writes it again first.
SETUP = (
    "sql_execute",
    {"database": "/db/answers.db", "create": True,
     "sql": "DROP TABLE IF EXISTS t; CREATE TABLE t(name, n); "
            "INSERT INTO t VALUES ('answer', 42), ('other', 1)"},
)  # fmt: skip
BUNDLED = {
    "sql_execute": (SETUP[1], ['"changes": 2']),
    "sql_schema": ({"database": "/db/answers.db"}, ['"t"', '"name"', '"n"']),
    "sql_query": (
        {"database": "/db/answers.db", "sql": "SELECT name, n FROM t WHERE n > 40"},
        ['[["answer", 42]]'],
    ),
    "files__list_dir": ({"path": "/data"}, ["hello.txt"]),
    "files__find_files": ({"pattern": "*.txt", "path": "/data"}, ["/data/hello.txt"]),
    "files__search_text": (
        {"pattern": "granted", "path": "/data"},
        ["hello from the granted directory"],
    ),
    "files__read_file": ({"path": "/data/hello.txt"}, ["hello from the granted directory"]),
    "run_python": ({"code": "print('printed ' + 'this')\n6 * 7"}, ['"result": 42', "printed this"]),
}


@pytest.mark.parametrize("tool", sorted(BUNDLED))
@BOTH
async def test_a_bundled_tool_answers_through_what_clients_give_the_model(world, transport, tool):
    """Claude Code and Codex give the model only `structuredContent` when a result has it: it
    must hold the answer (or there must be none, and the text does)."""
    arguments, answers = BUNDLED[tool]
    async with world.client(transport, "2026-07-28") as c:
        if tool.startswith("sql_"):
            r = await c.call_tool(*SETUP)
            assert not r.is_error, text(r)
        r = await c.call_tool(tool, arguments)
        assert not r.is_error, text(r)
        seen = model_sees(r)
        for answer in answers:
            assert answer in seen, f"the model sees only {seen[:500]}"
        listed = {t.name: t for t in (await c.list_tools()).tools}
    if listed[tool].output_schema is not None:
        assert r.structured_content is not None


async def test_every_bundled_tool_is_checked_for_what_clients_give_the_model(world):
    async with world.client("stdio", "2026-07-28") as c:
        listed = (await c.list_tools()).tools
    bundled = {t.name for t in listed if t.meta["cordon/plugin"] in ("files", "sql", "python")}
    assert bundled == set(BUNDLED)


def fresh_home(world, name):
    """A home of its own, with the world's other settings."""
    root = world.root / name
    root.mkdir()
    return root / "home", {**world.env, "CORDON_HOME": str(root / "home")}


async def test_a_tool_that_cannot_change_anything_is_not_called_destructive(world):
    """`sql_execute` is declared destructive; under a read-only grant it cannot change
    anything, so clients (which approve read-only tools without asking) are told read-only and
    not destructive; the author's claim is in `_meta`."""
    _home, env = fresh_home(world, "hints")
    subprocess.run(
        [str(CORDON), "plugin", "install", str(PLUGINS / "sql.wasm"),
         "--grant", f"fs:{world.db}:/db:ro"],
        env=env, cwd=world.root, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    server = StdioServerParameters(command=str(CORDON), args=["mcp"], env=env, cwd=str(world.root))
    async with Client(server, mode="2026-07-28", read_timeout_seconds=60) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    ro = tools["sql_execute"]
    assert (ro.annotations.read_only_hint, ro.annotations.destructive_hint) == (True, False)
    assert ro.meta["cordon/declaredHints"]["destructiveHint"] is True
    assert ro.meta["cordon/declaredHints"]["readOnlyHint"] is False
    # With the world's read-write grant the same tool is destructive, as declared.
    async with world.client("stdio", "2026-07-28") as c:
        rw = {t.name: t for t in (await c.list_tools()).tools}
    annotations = rw["sql_execute"].annotations
    assert (annotations.read_only_hint, annotations.destructive_hint) == (False, True)
    for listing in (tools, rw):
        for name, t in listing.items():
            a = t.annotations
            assert not (a.read_only_hint and a.destructive_hint), name


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_home_without_plugins_is_named_on_stderr_and_in_the_instructions(world, mode):
    home, _ = fresh_home(world, f"empty-{mode}")
    # As the README's snippets start it: the home named, no CORDON_HOME.
    env = {k: v for k, v in world.env.items() if k != "CORDON_HOME"}
    with tempfile.TemporaryFile("w+") as stderr:
        server = StdioServerParameters(
            command=str(CORDON), args=["mcp", "--home", str(home)], env=env, cwd=str(world.root)
        )
        async with Client(stdio_client(server, errlog=stderr), mode=mode) as c:
            assert (await c.list_tools()).tools == []
            instructions = c.instructions
        stderr.seek(0)
        said = stderr.read()
    for told in (said, instructions):
        assert f"the Cordon home {home} has no plugins installed" in told, told
        assert "--home DIR" in told, told


@BOTH
async def test_a_call_waiting_for_approval_reports_progress(world, transport):
    """A person may take longer to answer than a client waits without news (the TypeScript
    SDK gives up after 60 s unless progress resets its timeout): progress comes while the
    question waits for `cordon approve`."""
    seen = []

    async def progress(value, total, message):
        seen.append((value, message))

    result = {}
    me = types.Implementation(name=f"progress-{transport}", version="1")
    async with world.client(transport, "2026-07-28", client_info=me) as c:

        async def call():
            result["r"] = await c.call_tool(
                "fw__list_dir", {"path": "/scratch"}, progress_callback=progress
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.to_thread.run_sync(
                lambda: wait_until(
                    lambda: len([m for _, m in seen if "waiting for approval" in m]) >= 2,
                    what="progress while the call waits",
                )
            )

            def answer():
                listed = world.cordon("approve", "--list").stdout
                call_id = re.search(rf"MCP client `{me.name} 1.*?` call (\S+):", listed)
                assert call_id, listed
                return world.cordon("approve", "mcp:", call_id.group(1), "yes")

            await anyio.to_thread.run_sync(answer)
    assert not result["r"].is_error, text(result["r"])
    values = [v for v, _ in seen]
    assert values == sorted(values) and values[0] >= 1, seen
    assert "`fw__list_dir` is waiting for approval" in seen[0][1], seen


def _audit_for(world, client_prefix):
    return [r for r in world.audit() if r.get("client", "").startswith(client_prefix)]


async def test_an_always_holds_for_one_program_not_for_another_with_the_same_name(world):
    """Two programs over HTTP on 2026-07-28 (no MCP session), with the same token and the SDK's
    default client name: what the first one's user answered `always` must not approve the
    second one's calls."""
    asked_a, always = answering("always")
    async with http_client(world.serve_url, world.token, "2026-07-28",
                           elicitation_callback=always) as a:  # fmt: skip
        for _ in range(2):
            r = await a.call_tool("fw__list_dir", {"path": "/scratch"})
            assert not r.is_error, text(r)
        assert len(asked_a) == 1, [p.message for p in asked_a]
        # Another program, while the first is still connected.
        asked_b, deny = answering("decline")
        async with http_client(world.serve_url, world.token, "2026-07-28",
                               elicitation_callback=deny) as b:  # fmt: skip
            r = await b.call_tool("fw__list_dir", {"path": "/scratch"})
            assert len(asked_b) == 1, "the second program was not asked"
            assert r.is_error and "did not run" in text(r), text(r)
    records = [r for r in _audit_for(world, "mcp 0.1.0") if r["tool"] == "list_dir"][-3:]
    first, second, third = records
    assert first["decision"] == "always", first
    # The call the earlier answer let run says which answer: who, when, for which call.
    assert second["decision"] == "auto", second
    by = second["decided_by"]
    assert by.startswith("an earlier answer: the user of MCP client `mcp 0.1.0"), by
    assert "answered `always` at 20" in by, by
    assert f"call {first['call_id']} (arguments sha256 {first['arguments_sha256']})" in by, by
    assert third["decision"] == "no", third


async def test_no_always_is_kept_for_a_proxys_connection(world):
    """Behind a proxy that pools its connections to `cordon serve`, one connection carries
    many programs' requests: an `always` answered over it must not approve the next call."""
    asked, always = answering("always")
    proxied = {"Via": "1.1 haproxy"}
    async with http_client(world.serve_url, world.token, "2026-07-28", headers=proxied,
                           elicitation_callback=always) as c:  # fmt: skip
        for _ in range(2):
            r = await c.call_tool("fw__list_dir", {"path": "/scratch"})
            assert not r.is_error, text(r)
    assert len(asked) == 2, "the second call through the proxy was not asked"


async def test_cordon_approve_finds_the_running_server_by_itself(world):
    """`cordon serve` records where it listens in the home; `cordon approve`, with no --url,
    talks to it and says so (before, it tried 127.0.0.1:8420 and the home's token)."""
    result = {}
    me = types.Implementation(name="approve-finds", version="1")
    async with world.client("stdio", "2026-07-28", client_info=me) as c:

        async def call():
            result["r"] = await c.call_tool("fw__list_dir", {"path": "/scratch"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)

            def listed():
                done = world.cordon("approve", "--list")
                return done if "approve-finds 1" in done.stdout else None

            done = await anyio.to_thread.run_sync(
                lambda: wait_until(listed, what="the question in `cordon approve --list`")
            )
            said = re.search(r"talking to cordon serve at (http://127\.0\.0\.1:\d+) \((.*)\)",
                             done.stderr)  # fmt: skip
            assert said, done.stderr
            assert f"recorded itself in {world.home}" in said.group(2), done.stderr
            assert httpx2.get(said.group(1) + "/api/v1/health").status_code == 200
            call_id = re.search(r"MCP client `approve-finds 1.*?` call (\S+):", done.stdout)
            answered = await anyio.to_thread.run_sync(
                lambda: world.cordon("approve", "mcp:", call_id.group(1), "yes")
            )
            assert "Answered yes" in answered.stdout, answered.stdout
    assert not result["r"].is_error, text(result["r"])
    record = _audit_for(world, "approve-finds 1")[-1]
    # Answered through the server's approvals API, with the token it recorded.
    assert record["decision"] == "yes" and "API token `" in record["decided_by"], record


async def test_ending_a_session_answers_what_sdks_expect(world, caplog):
    url = world.serve_url + "/mcp"
    headers = {
        "Authorization": f"Bearer {world.token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    init = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}},
    }  # fmt: skip
    opened = httpx2.post(url, json=init, headers=headers, timeout=30)
    session = opened.headers["mcp-session-id"]
    with_session = {**headers, "Mcp-Session-Id": session}
    closed = httpx2.delete(url, headers=with_session, timeout=30)
    assert closed.status_code in (200, 204), closed.status_code
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    gone = httpx2.post(url, json=listing, headers=with_session, timeout=30)
    assert gone.status_code == 404, gone.text
    # The Python SDK ends its session on leaving, and says when that failed.
    with caplog.at_level(logging.WARNING):
        async with world.client("http", "legacy") as c:
            await c.list_tools()
    failed = [r.getMessage() for r in caplog.records if "termination" in r.getMessage()]
    assert failed == []


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_prompts_and_resources_are_empty_lists(world, transport, mode):
    """Cordon offers tools only; clients that list prompts and resources anyway (several do, on
    every server) get empty lists, not an error."""
    async with world.client(transport, mode) as c:
        assert (await c.list_prompts()).prompts == []
        assert (await c.list_resources()).resources == []
        assert (await c.list_resource_templates()).resource_templates == []
        assert c.server_capabilities.prompts is None
        assert (await c.list_tools()).tools
