# ruff: noqa: E501  (the policy rules are one line each, as users write them)
"""The per-call `[policy]` through `cordon mcp` (stdio), with the MCP SDK as the client: rules on
a path argument (compared normalised), on the client's name, counters, and the audit record
naming the rule and the policy digest."""

import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters

from conftest import CORDON

pytestmark = pytest.mark.anyio

POLICY = """
[approval.plugins]
sql = "auto"

[policy]
rules = [
  { id = "reports", tool = "fw.read_file", args = { path = { path = "/scratch/reports/**" } }, decision = "allow", reason = "reports are for reading" },
  { id = "secrets", tool = "fw.read_file", args = { path = { path = "/scratch/secret/**" } }, decision = "deny", reason = "secrets stay put" },
  { id = "nosy", client = "nosy-agent", plugin = "sql", decision = "deny", reason = "not for this client" },
  { id = "twice", tool = "fw.read_file", calls = { of = "rule:reports", within = "1h", at_least = 2 }, decision = "deny", reason = "two reports an hour" },
]
"""


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


def client(world, config, name):
    env = dict(world.env, CORDON_CONFIG=str(config))
    server = StdioServerParameters(command=str(CORDON), args=["mcp"], env=env, cwd=str(world.root))
    info = types.Implementation(name=name, version="1.0")
    return Client(server, mode="2026-07-28", read_timeout_seconds=60, client_info=info)


async def test_mcp_calls_are_decided_by_their_arguments_client_and_counts(world):
    config = world.root / "policy.toml"
    config.write_text(POLICY)
    (world.scratch / "reports").mkdir(exist_ok=True)
    (world.scratch / "secret").mkdir(exist_ok=True)
    (world.scratch / "reports" / "q3.txt").write_text("revenue up\n")
    (world.scratch / "secret" / "keys.txt").write_text("hunter2\n")
    async with client(world, config, "careful-agent") as c:
        r = await c.call_tool("fw__read_file", {"path": "/scratch/reports/q3.txt"})
        assert not r.is_error and "revenue up" in text(r), text(r)
        for path in ["/scratch/secret/keys.txt", "/scratch/reports/../secret/keys.txt"]:
            r = await c.call_tool("fw__read_file", {"path": path})
            assert r.is_error, text(r)
            assert "policy rule `secrets`" in text(r) and "hunter2" not in text(r), text(r)
        # The client's name reaches the rules: another client may use sql.
        r = await c.call_tool(
            "sql_execute",
            {"database": "/db/policy.db", "create": True, "sql": "CREATE TABLE IF NOT EXISTS t(x)"},
        )
        assert not r.is_error, text(r)
        # Counted in the store: the second report read of the hour is the last.
        r = await c.call_tool("fw__read_file", {"path": "/scratch/reports/q3.txt"})
        assert not r.is_error, text(r)
        r = await c.call_tool("fw__read_file", {"path": "/scratch/reports/q3.txt"})
        assert r.is_error and "policy rule `twice`" in text(r), text(r)
    async with client(world, config, "nosy-agent") as c:
        r = await c.call_tool("sql_query", {"database": "/db/policy.db", "sql": "SELECT 1"})
        assert r.is_error and "policy rule `nosy`" in text(r), text(r)
    records = [
        r
        for r in world.audit()
        if r.get("tool") in ("read_file", "sql_query") and r.get("policy_rule")
    ]
    rules = {r["policy_rule"].split(" ")[0] for r in records}
    assert {"reports", "secrets", "nosy", "twice"} <= rules, rules
    digests = {r["policy_digest"] for r in records}
    assert len(digests) == 1 and next(iter(digests)).startswith("sha256:"), digests
    secret = next(r for r in records if r["policy_rule"].startswith("secrets"))
    assert secret["decision"] == "deny" and secret["policy_rule"] == f"secrets ({config}:8)"


async def test_an_edited_cedar_file_decides_the_next_call_without_a_restart(world):
    config = world.root / "cedar-policy.toml"
    cedar = world.root / "team.cedar"
    cedar.write_text("// nothing yet\n")
    config.write_text('[approval.plugins]\nsql = "auto"\n\n[policy]\nfiles = ["team.cedar"]\n')
    create = {"database": "/db/cedar.db", "create": True, "sql": "CREATE TABLE IF NOT EXISTS t(x)"}
    async with client(world, config, "careful-agent") as c:
        r = await c.call_tool("sql_execute", create)
        assert not r.is_error, text(r)
        cedar.write_text(
            '@id("closed") @reason("the database is closed today")\n'
            'forbid(principal, action == Action::"sql.sql_execute", resource)\n'
            'when { context.caller.client == "careful-agent" };\n'
        )
        r = await c.call_tool("sql_execute", create)
        assert r.is_error, text(r)
        assert "policy rule `closed`" in text(r) and "closed today" in text(r), text(r)
