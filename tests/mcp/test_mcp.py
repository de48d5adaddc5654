"""Cordon as an MCP server, driven by the official MCP Python SDK over stdio (`cordon mcp`)
and Streamable HTTP (`cordon serve`'s `/mcp`), on the current protocol (2026-07-28) and the
handshake era (initialize).

Run by `make mcp-test` (part of `make test`), or by hand after `make`:

    target/venv/bin/python -m pytest tests/mcp
"""

import json
import signal
import socket
import subprocess
import threading

import anyio
import httpx2
import jsonschema
import mcp.types as types
import pytest

from conftest import CORDON, MODES, TRANSPORTS, answering, http_client, wait_until

pytestmark = pytest.mark.anyio

BOTH = pytest.mark.parametrize("transport", TRANSPORTS)
ALL = [pytest.param(t, m, id=f"{t}-{m}") for t in TRANSPORTS for m in MODES]


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


def last_call(world, tool):
    calls = [r for r in world.audit() if r.get("tool") == tool]
    assert calls, f"no audit record of {tool}"
    return calls[-1]


@pytest.mark.parametrize("transport,mode", ALL)
async def test_tools_are_listed_with_what_cordon_proves(world, transport, mode):
    async with world.client(transport, mode) as c:
        assert c.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
        tools = {t.name: t for t in (await c.list_tools()).tools}
    # Three installs of the files plugin: their tools get qualified names.
    assert {"sql_query", "sql_execute", "run_python", "files__read_file", "fw__list_dir"} <= set(
        tools
    )
    # A read-write directory: not read-only, destructive; what the plugin claims does not count.
    rw = tools["fw__list_dir"].annotations
    assert (rw.read_only_hint, rw.destructive_hint, rw.open_world_hint) == (False, True, False)
    assert tools["fw__list_dir"].meta["cordon/grants"] == [f"fs:{world.scratch}:/scratch:rw"]
    # A read-only directory: read-only, not destructive, idempotent as the author declared.
    ro = tools["files__read_file"].annotations
    assert (ro.read_only_hint, ro.destructive_hint, ro.idempotent_hint) == (True, False, True)
    # No grants at all: read-only whatever it claims, never open world.
    py = tools["run_python"].annotations
    assert (py.read_only_hint, py.open_world_hint) == (True, False)
    assert tools["sql_query"].input_schema["required"] == ["database", "sql"]
    assert tools["sql_query"].title == "sql_query (sql)"
    assert "Python" in tools["run_python"].description
    # Tools that return one JSON object say its shape; text tools do not.
    structured = {n for n, t in tools.items() if t.output_schema is not None}
    assert {"sql_query", "sql_execute", "sql_schema", "run_python", "fw__list_dir"} <= structured
    assert {"files__find_files", "shaped"} <= structured
    assert not {"files__read_file", "files__search_text", "plain"} & structured
    assert tools["sql_query"].output_schema["required"] == [
        "columns",
        "row_count",
        "rows",
        "truncated",
    ]
    for tool in structured:
        jsonschema.Draft202012Validator.check_schema(tools[tool].output_schema)


@BOTH
async def test_a_tool_policy_denies_is_neither_listed_nor_callable(world, transport):
    async with world.client(transport, "2026-07-28") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "lc__list_dir" in names and "lc__read_file" not in names
        with pytest.raises(Exception) as refused:
            await c.call_tool("lc__read_file", {"path": "/x"})
        assert "there is no tool `lc__read_file`" in str(refused.value)


@BOTH
async def test_the_bundled_tools_run_in_the_sandbox(world, transport):
    db = f"/db/{transport}.db"
    async with world.client(transport, "2026-07-28") as c:
        r = await c.call_tool(
            "sql_execute",
            {
                "database": db,
                "create": True,
                "sql": "CREATE TABLE t(x); INSERT INTO t VALUES (41), (1)",
            },
        )
        assert not r.is_error, text(r)
        r = await c.call_tool("sql_query", {"database": db, "sql": "SELECT sum(x) AS s FROM t"})
        assert not r.is_error, text(r)
        assert "42" in text(r)
        # JSON results also come as structuredContent, in the shape the tool declared.
        assert r.structured_content["columns"] == ["s"]
        assert r.structured_content["rows"] == [[42]]
        tools = {t.name: t for t in (await c.list_tools()).tools}
        jsonschema.validate(r.structured_content, tools["sql_query"].output_schema)
        r = await c.call_tool("files__read_file", {"path": "/data/hello.txt"})
        assert not r.is_error and "hello from the granted directory" in text(r), text(r)
        r = await c.call_tool("run_python", {"code": "sum(range(10))"})
        assert not r.is_error, text(r)
        assert r.structured_content["result"] == 45
        jsonschema.validate(r.structured_content, tools["run_python"].output_schema)
    assert (world.db / f"{transport}.db").exists()
    record = last_call(world, "run_python")
    assert record["origin"] == ("mcp" if transport == "stdio" else "mcp-http")
    assert record["client"].startswith("mcp ")
    if transport == "http":
        assert "token `default`" in record["client"]
        assert record["requested_by"] == {"token": "default"}
    else:
        assert "requested_by" not in record
    assert record["decision"] == "auto"
    assert record["outcome"]["status"] == "ok"


@BOTH
async def test_a_result_that_breaks_its_output_schema_is_an_error_result(world, transport):
    async with world.client(transport, "2026-07-28") as c:
        r = await c.call_tool("shaped", {"mode": "with_text"})
        assert not r.is_error, text(r)
        assert r.structured_content == {"n": 1}
        # The plugin promised {"n": integer}; Cordon does not pass on what breaks the promise.
        r = await c.call_tool("shaped", {"mode": "wrong_type"})
        assert r.is_error and r.structured_content is None, text(r)
        assert "does not match the output schema it declared" in text(r), text(r)


@BOTH
async def test_refusals_limits_and_bad_arguments_are_error_results(world, transport):
    async with world.client(transport, "2026-07-28") as c:
        r = await c.call_tool("files__read_file", {"path": "/etc/passwd"})
        assert r.is_error
        assert "outside the directories granted" in text(r), text(r)
        assert "cannot be widened" in text(r)
        r = await c.call_tool("run_python", {"code": "while True:\n    pass"})
        assert r.is_error
        assert "time limit of 4s" in text(r), text(r)
        assert "cordon limit" in text(r)
        # Refused before the sandbox starts, naming what is wrong.
        r = await c.call_tool("sql_query", {"database": "/db/x.db", "sql": 5})
        assert r.is_error
        assert "at /sql" in text(r) and "inputSchema" in text(r), text(r)
    bad = last_call(world, "sql_query")
    assert bad["decision"] == "invalid" and "report" not in bad
    limit = last_call(world, "run_python")
    assert limit["outcome"]["status"] == "error"
    assert limit["report"]["duration_ms"] >= 3900


@BOTH
async def test_a_cancelled_call_is_stopped_in_the_sandbox(world, transport):
    async with world.client(transport, "2026-07-28") as c:
        before = len(world.audit())
        started = anyio.current_time()
        # The caller gives up after a second: the SDK tells the server it cancelled.
        with anyio.move_on_after(1.0) as scope:
            await c.call_tool("run_python", {"code": "while True:\n    pass"})
        assert scope.cancelled_caught
        # The server stopped the guest (cancelled, not run to its 4 s limit) and says so.
        record = await anyio.to_thread.run_sync(
            lambda: wait_until(
                lambda: next(
                    (r for r in world.audit()[before:] if r["tool"] == "run_python"), None
                ),
                what="the cancelled call's audit record",
            )
        )
        assert record["outcome"]["kind"] == "cancelled", json.dumps(record)
        assert record["report"]["duration_ms"] < 3500, record
        assert anyio.current_time() - started < 3.5
        # The connection goes on serving.
        r = await c.call_tool("run_python", {"code": "1 + 1"})
        assert not r.is_error and r.structured_content["result"] == 2


@BOTH
async def test_a_long_call_reports_progress(world, transport):
    seen = []

    async def progress(value, total, message):
        seen.append((value, message))

    async with world.client(transport, "2026-07-28") as c:
        r = await c.call_tool(
            "run_python",
            {"code": "import time\ntime.sleep(2.5)\n'done'"},
            progress_callback=progress,
        )
    assert not r.is_error, text(r)
    assert len(seen) >= 2, seen
    assert seen[0][0] >= 1 and "has run for" in seen[0][1]
    assert [v for v, _ in seen] == sorted(v for v, _ in seen)


@pytest.mark.parametrize("transport,mode", ALL)
async def test_ask_tools_are_asked_through_the_client(world, transport, mode):
    (world.scratch / "note.txt").write_text("x")
    asked, on_elicit = answering("once")
    async with world.client(transport, mode, elicitation_callback=on_elicit) as c:
        r = await c.call_tool("fw__list_dir", {"path": "/scratch"})
        assert not r.is_error and "note.txt" in text(r), text(r)
        assert len(asked) == 1
        message = asked[0].message
        assert "`list_dir` of plugin `fw`" in message
        assert f"fs:{world.scratch}:/scratch:rw" in message
        assert '{"path":"/scratch"}' in message
        schema = asked[0].requested_schema
        assert schema["properties"]["answer"]["enum"] == ["once", "always", "deny"]
        # `once` holds for one call.
        await c.call_tool("fw__list_dir", {"path": "/scratch"})
        assert len(asked) == 2
    record = last_call(world, "list_dir")
    assert record["decision"] == "yes" and "the user of MCP client" in record["decided_by"]

    asked, on_elicit = answering("decline")
    async with world.client(transport, mode, elicitation_callback=on_elicit) as c:
        r = await c.call_tool("fw__list_dir", {"path": "/scratch"})
        assert r.is_error and "did not run" in text(r), text(r)
    record = last_call(world, "list_dir")
    assert record["decision"] == "no" and record["outcome"]["status"] == "not_run"

    asked, on_elicit = answering("always")
    async with world.client(transport, mode, elicitation_callback=on_elicit) as c:
        for _ in range(3):
            r = await c.call_tool("fw__list_dir", {"path": "/scratch"})
            assert not r.is_error
        assert len(asked) == 1


async def test_an_approval_cannot_be_replayed_for_other_arguments(world):
    """On 2026-07-28 the answer comes back with the retried call: it is bound to that call."""
    _asked, on_elicit = answering("once")
    async with world.client("stdio", "2026-07-28", elicitation_callback=on_elicit) as c:
        first = await c.session.call_tool(
            "fw__list_dir", {"path": "/scratch"}, allow_input_required=True
        )
        assert first.result_type == "input_required", first
        state = first.request_state
        key = next(iter(first.input_requests))
        answer = {key: {"action": "accept", "content": {"answer": "once"}}}
        # The same approval for other arguments is refused, and is used up by the try.
        other = await c.session.call_tool(
            "fw__list_dir",
            {"path": "/scratch/../.."},
            input_responses=answer,
            request_state=state,
            allow_input_required=True,
        )
        assert other.is_error and "another call" in text(other), other
        again = await c.session.call_tool(
            "fw__list_dir",
            {"path": "/scratch"},
            input_responses=answer,
            request_state=state,
            allow_input_required=True,
        )
        assert again.is_error and "already used" in text(again), again
        forged = await c.session.call_tool(
            "fw__list_dir",
            {"path": "/scratch"},
            input_responses=answer,
            request_state="0" * 32,
            allow_input_required=True,
        )
        assert forged.is_error


@BOTH
async def test_without_elicitation_the_call_waits_for_cordon_approve(world, transport):
    """A client that cannot ask its user: the question waits in the store, for `cordon approve`
    (stdio) or the approvals API of `cordon serve` (HTTP)."""
    result = {}
    # A client of its own name, to find its question among others.
    me = types.Implementation(name="no-elicitation", version="1")
    async with world.client(transport, "2026-07-28", client_info=me) as c:

        async def call():
            result["r"] = await c.call_tool("fw__list_dir", {"path": "/scratch"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            pending = await anyio.to_thread.run_sync(
                lambda: wait_until(
                    lambda: json.loads(
                        httpx2.get(
                            world.serve_url + "/api/v1/approvals",
                            headers={"Authorization": f"Bearer {world.token}"},
                        ).text
                    )["pending"],
                    what="the question in the approvals API",
                )
            )
            question = pending[0]
            assert question["session"] == "mcp:"
            assert question["tool"] == "list_dir" and question["plugin"] == "fw"
            assert question["client"].startswith("no-elicitation 1")
            if transport == "stdio":
                done = await anyio.to_thread.run_sync(
                    lambda: world.cordon("approve", "mcp:", question["call_id"], "yes")
                )
                assert "Answered yes" in done.stdout
            else:
                answered = httpx2.post(
                    f"{world.serve_url}/api/v1/approvals/mcp:/{question['call_id']}",
                    headers={"Authorization": f"Bearer {world.token}"},
                    json={"answer": "yes"},
                )
                assert answered.status_code == 200, answered.text
    assert not result["r"].is_error, text(result["r"])
    record = last_call(world, "list_dir")
    assert record["decision"] == "yes"
    # `cordon approve` found the running `cordon serve` (which recorded itself in the home)
    # and answered through its approvals API, as the HTTP client's user did.
    assert "API token `default`" in record["decided_by"], record


@pytest.mark.parametrize("transport,mode", ALL)
async def test_list_changed_after_a_grant(world, transport, mode):
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    grant = f"fs:{world.scratch}:/x:rw"
    async with world.client(transport, mode, message_handler=on_message) as c:
        before = {t.name: t for t in (await c.list_tools()).tools}
        assert before["lc__list_dir"].annotations.read_only_hint is True
        if mode == "legacy":
            await anyio.to_thread.run_sync(lambda: world.cordon("grant", "lc", grant))
            with anyio.fail_after(15):
                await changed.wait()
        else:
            async with c.listen(tools_list_changed=True) as sub:
                await anyio.to_thread.run_sync(lambda: world.cordon("grant", "lc", grant))
                with anyio.fail_after(15):
                    async for _event in sub:
                        break
        try:
            after = {t.name: t for t in (await c.list_tools()).tools}
            assert after["lc__list_dir"].annotations.read_only_hint is False
            assert after["lc__list_dir"].annotations.destructive_hint is True
        finally:
            await anyio.to_thread.run_sync(lambda: world.cordon("revoke", "lc", grant))


async def test_concurrent_calls_all_succeed_and_the_server_goes_on(world):
    results = []
    async with world.client("http", "2026-07-28") as c:

        async def one(i):
            r = await c.call_tool("run_python", {"code": f"{i} * 2"})
            results.append((i, r))

        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(one, i)
    assert len(results) == 100
    for i, r in results:
        assert not r.is_error, text(r)
        assert r.structured_content["result"] == i * 2


@BOTH
def test_the_inspector_cli_lists_and_calls_tools(world, inspector, transport):
    """The MCP Inspector (npm), in its CLI mode, over stdio and Streamable HTTP."""
    listed = json.loads(inspector(world, transport, "--method", "tools/list"))
    tools = {t["name"]: t for t in listed["tools"]}
    assert tools["fw__list_dir"]["annotations"]["readOnlyHint"] is False
    called = json.loads(
        inspector(
            world,
            transport,
            "--method",
            "tools/call",
            "--tool-name",
            "run_python",
            "--tool-arg",
            "code=6*7",
        )
    )
    assert called["isError"] is False
    assert called["structuredContent"]["result"] == 42


def _serve_is_alive(world):
    r = httpx2.get(world.serve_url + "/api/v1/health")
    return r.status_code == 200


def test_bad_http_requests_get_the_right_errors(world):
    url = world.serve_url + "/mcp"
    auth = {"Authorization": f"Bearer {world.token}"}
    headers = {
        **auth,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }

    def post(body, extra=None):
        return httpx2.post(url, content=body, headers={**headers, **(extra or {})})

    r = httpx2.post(url, content=b"{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 401
    r = post(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', {"Authorization": "Bearer nope"})
    assert r.status_code == 401
    r = post(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', {"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = post(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', {"Host": "evil.example"})
    assert r.status_code == 421
    r = post(b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == -32700
    r = post(b'{"id": 5, "hello": "there"}')
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600
    assert r.json()["id"] == 5
    r = post(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', {"MCP-Protocol-Version": "1999-01-01"}
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == -32022 and "2025-06-18" in error["data"]["supported"]
    assert _serve_is_alive(world)


def _initialize(version):
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "1"},
            },
        }
    )


class RawStdio:
    """`cordon mcp` spoken to line by line, for what no SDK would send."""

    def __init__(self, world):
        self.proc = subprocess.Popen(
            [str(CORDON), "mcp"],
            env=world.env,
            cwd=world.root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(json.loads(line))
                self.cond.notify_all()

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def reply(self, predicate, timeout=10):
        with self.cond:
            ok = self.cond.wait_for(lambda: any(predicate(m) for m in self.lines), timeout)
            assert ok, f"no such reply; got {self.lines}"
            return next(m for m in self.lines if predicate(m))

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_bad_stdio_input_gets_the_right_errors(world, version):
    raw = RawStdio(world)
    try:
        raw.send(_initialize(version))
        init = raw.reply(lambda m: m.get("id") == 1)
        assert init["result"]["protocolVersion"] == version
        raw.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        raw.send("{not json")
        assert raw.reply(lambda m: m.get("error", {}).get("code") == -32700)["id"] is None
        raw.send('{"jsonrpc":"2.0","id":2,"methd":"tools/list"}')
        assert raw.reply(lambda m: m.get("id") == 2)["error"]["code"] == -32600
        raw.send('{"jsonrpc":"2.0","id":3,"method":"no/such/method"}')
        assert raw.reply(lambda m: m.get("id") == 3)["error"]["code"] == -32601
        raw.send(
            '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope","arguments":{}}}'
        )
        unknown = raw.reply(lambda m: m.get("id") == 4)["error"]
        assert unknown["code"] == -32602 and "run_python" in unknown["message"]
        raw.send('{"jsonrpc":"2.0","id":5,"method":"tools/list"}')
        assert raw.reply(lambda m: m.get("id") == 5)["result"]["tools"]
    finally:
        raw.close()


def test_an_unknown_protocol_version_is_answered_with_one_cordon_speaks(world):
    raw = RawStdio(world)
    try:
        raw.send(_initialize("1999-01-01"))
        init = raw.reply(lambda m: m.get("id") == 1)
        assert init["result"]["protocolVersion"] == "2025-11-25"
    finally:
        raw.close()


def test_a_server_stopped_by_sigterm_records_its_calls_and_exits(world):
    raw = RawStdio(world)
    try:
        raw.send(_initialize("2025-11-25").replace("raw-test", "sigterm-test"))
        raw.reply(lambda m: m.get("id") == 1)
        raw.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        raw.send(
            '{"jsonrpc":"2.0","id":2,"method":"tools/call",'
            '"params":{"name":"run_python","arguments":{"code":"6 * 7"}}}'
        )
        assert "42" in json.dumps(raw.reply(lambda m: m.get("id") == 2))
        # Stopped at once after its answer: the record queued for the audit log is written.
        raw.proc.send_signal(signal.SIGTERM)
        assert raw.proc.wait(10) == 0
    finally:
        raw.close()
    records = [r for r in world.audit() if r.get("client") == "sigterm-test 1"]
    assert len(records) == 1 and records[0]["outcome"]["status"] == "ok"


def _headers(token, session=None):
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return headers


def _sse_messages(response):
    """The JSON-RPC messages in a Server-Sent Events body."""
    return [
        json.loads(line[len("data:") :])
        for line in response.text.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]


def test_a_session_is_unknown_to_other_tokens(two_tokens):
    """An MCP session, and with it the `always` answers its user gave and the questions it is
    asked, belongs to the token that opened it: another token presenting its id is answered
    as for a session that does not exist."""
    url, alice, bob = two_tokens.url + "/mcp", two_tokens.alice, two_tokens.bob
    opened = httpx2.post(
        url, content=_initialize("2025-11-25"), headers=_headers(alice), timeout=30
    )
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    done = httpx2.post(
        url,
        content='{"jsonrpc":"2.0","method":"notifications/initialized"}',
        headers=_headers(alice, session),
        timeout=30,
    )
    assert done.status_code == 202, done.text
    listing = '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
    mine = httpx2.post(url, content=listing, headers=_headers(alice, session), timeout=30)
    assert mine.status_code == 200 and _sse_messages(mine)[-1]["result"]["tools"], mine.text

    theirs = httpx2.post(url, content=listing, headers=_headers(bob, session), timeout=30)
    assert theirs.status_code == 404, theirs.text[:300]
    assert "Session not found" in theirs.json()["error"]["message"]
    # Nor can the other token follow its stream (the questions to its user) or close it.
    stream = httpx2.get(
        url, headers={**_headers(bob, session), "Accept": "text/event-stream"}, timeout=30
    )
    assert stream.status_code == 404, stream.text
    closed = httpx2.delete(url, headers=_headers(bob, session), timeout=30)
    assert closed.status_code == 404, closed.text
    # A session nobody opened is answered alike.
    unknown = httpx2.post(url, content=listing, headers=_headers(bob, "0" * 32), timeout=30)
    assert (unknown.status_code, unknown.json()) == (theirs.status_code, theirs.json())

    still = httpx2.post(url, content=listing, headers=_headers(alice, session), timeout=30)
    assert still.status_code == 200 and _sse_messages(still)[-1]["result"]["tools"], still.text
    assert httpx2.delete(url, headers=_headers(alice, session), timeout=30).status_code == 204


async def test_an_approval_handle_is_unknown_to_other_tokens(two_tokens):
    """On 2026-07-28 the question travels in an `InputRequiredResult`; its handle answers
    only a call with the token that was asked."""
    call = ("fw__list_dir", {"path": "/scratch"})
    _asked, on_elicit = answering("once")
    ask = {"elicitation_callback": on_elicit}
    async with http_client(two_tokens.url, two_tokens.alice, "2026-07-28", **ask) as a:
        first = await a.session.call_tool(*call, allow_input_required=True)
        assert first.result_type == "input_required", first
        key = next(iter(first.input_requests))
        answer = {key: {"action": "accept", "content": {"answer": "once"}}}
        retry = {
            "input_responses": answer,
            "request_state": first.request_state,
            "allow_input_required": True,
        }
        async with http_client(two_tokens.url, two_tokens.bob, "2026-07-28", **ask) as b:
            stolen = await b.session.call_tool(*call, **retry)
            assert stolen.is_error and "unknown" in text(stolen), stolen
        # The other token's try did not use it up.
        mine = await a.session.call_tool(*call, **retry)
        assert not mine.is_error, mine


async def test_a_question_in_the_store_is_its_tokens(two_tokens):
    """A question an MCP client's call waits on in the store belongs to the token the client
    came with, as a session's questions belong to its creator: another named token neither
    sees it nor can answer it (told it does not exist), the token's own user needs
    `approve:own` to approve its own call, and a token with every scope answers it."""
    url = two_tokens.url
    me = types.Implementation(name="no-elicitation-alice", version="1")

    def approvals(token):
        got = httpx2.get(url + "/api/v1/approvals", headers={"Authorization": f"Bearer {token}"})
        assert got.status_code == 200, got.text
        return [p for p in got.json()["pending"] if p.get("client", "").startswith(me.name)]

    def answer(token, call_id):
        return httpx2.post(
            f"{url}/api/v1/approvals/mcp:/{call_id}",
            headers={"Authorization": f"Bearer {token}"},
            json={"answer": "yes"},
        )

    result = {}
    async with http_client(url, two_tokens.alice, "2026-07-28", client_info=me) as a:

        async def call():
            result["r"] = await a.call_tool("fw__list_dir", {"path": "/scratch"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            mine = await anyio.to_thread.run_sync(
                lambda: wait_until(
                    lambda: approvals(two_tokens.alice), what="the question, to Alice"
                )
            )
            question = mine[0]
            assert question["session"] == "mcp:"
            assert question["owner"] == "alice" and question["asked_by"] == "alice"
            assert question["may_answer"] is False, question
            call_id = question["call_id"]
            # Bob does not see it, and answering it is answering a question that does not
            # exist; Alice may not approve her own call.
            assert approvals(two_tokens.bob) == []
            theirs = answer(two_tokens.bob, call_id)
            unknown = answer(two_tokens.bob, "0" * 24)
            assert theirs.status_code == 404, theirs.text
            said = theirs.json()["error"]["message"].replace(call_id, "ID")
            assert said == unknown.json()["error"]["message"].replace("0" * 24, "ID")
            own = answer(two_tokens.alice, call_id)
            assert own.status_code == 403 and "approve:own" in own.text, own.text
            [seen] = approvals(two_tokens.operator)
            assert seen["may_answer"] is True
            done = answer(two_tokens.operator, call_id)
            assert done.status_code == 200, done.text
    assert not result["r"].is_error, text(result["r"])


def test_a_line_over_16_mib_is_refused_and_the_server_goes_on(world):
    raw = RawStdio(world)
    try:
        raw.send(_initialize("2025-11-25"))
        raw.reply(lambda m: m.get("id") == 1)
        raw.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        raw.send(
            '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"pad":"'
            + "x" * (17 << 20)
            + '"}}'
        )
        refused = raw.reply(lambda m: m.get("error", {}).get("code") == -32600, timeout=60)
        assert "16 MiB" in refused["error"]["message"], refused
        raw.send('{"jsonrpc":"2.0","id":3,"method":"tools/list"}')
        assert raw.reply(lambda m: m.get("id") == 3)["result"]["tools"]
    finally:
        raw.close()


def test_a_body_over_the_cap_is_refused_naming_the_setting(world):
    url = world.serve_url + "/mcp"
    headers = _headers(world.token)
    code = "x" * (2 << 20)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "run_python", "arguments": {"code": code}},
        }
    ).encode()

    def refused(r):
        assert r.status_code == 413, r.text
        error = r.json()["error"]
        assert error["code"] == -32600
        assert "1 MiB" in error["message"], error
        assert "[serve] mcp_max_message_bytes" in error["message"], error
        return True

    # With its size declared, and streamed without one.
    assert refused(httpx2.post(url, content=body, headers=headers, timeout=30))
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    assert refused(httpx2.post(url, content=iter(chunks), headers=headers, timeout=30))
    # A declared size over the cap is refused before any of the body is read: the answer
    # comes though the body never does.
    host, port = world.serve_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + f"Content-Length: {100 << 20}\r\n\r\n"
        )
        s.sendall(head.encode() + b'{"jsonrpc":')
        answer = b""
        while b"\r\n\r\n" not in answer:
            got = s.recv(65536)
            assert got, f"the connection closed without an answer: {answer!r}"
            answer += got
        assert answer.startswith(b"HTTP/1.1 413"), answer
    assert _serve_is_alive(world)
