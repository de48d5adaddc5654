"""A result too long to send whole, through `cordon mcp` (stdio) and `cordon serve` (/mcp): the
client gets a preview (the first and last lines, the size) and a `resource_link`, reads the
whole result with `resources/read`, and no other client can read it."""

import mcp.types as types
import pytest

pytestmark = pytest.mark.anyio

BOTH = pytest.mark.parametrize("transport", ["stdio", "http"])


@BOTH
async def test_a_long_result_is_a_preview_and_a_link_only_its_client_reads(world, transport):
    lines = [f"line {i}: " + "x" * 40 for i in range(1, 8001)]
    (world.data / "big.txt").write_text("\n".join(lines) + "\n")
    me = types.Implementation(name=f"pager-{transport}", version="1.0")
    async with world.client(transport, "2026-07-28", client_info=me) as c:
        r = await c.call_tool("files__read_file", {"path": "/data/big.txt", "max_bytes": 1048576})
        assert not r.is_error
        texts = [b for b in r.content if b.type == "text"]
        links = [b for b in r.content if b.type == "resource_link"]
        assert len(texts) == 1 and len(links) == 1, r.content
        preview = texts[0].text
        assert len(preview) < 40_000, len(preview)
        assert "line 1: " in preview and "line 8000: " in preview
        assert "line 4321: " not in preview
        link = links[0]
        assert link.uri.startswith("cordon://results/") and link.uri in preview
        assert link.size > 400_000 and link.mime_type == "text/plain"
        whole = await c.read_resource(link.uri)
        assert "line 4321: " in whole.contents[0].text
        assert whole.contents[0].text.count("\n") >= 8000
        with pytest.raises(Exception, match="not a resource of this server"):
            await c.read_resource("file:///etc/passwd")
    other = types.Implementation(name="someone-else", version="1.0")
    async with world.client(transport, "2026-07-28", client_info=other) as c:
        with pytest.raises(Exception, match="not kept for this client"):
            await c.read_resource(link.uri)


@BOTH
async def test_a_large_written_result_is_read_in_parts_only_by_its_client(world, transport):
    # 10 MB written by the plugin as it goes: never held whole, read in 1 MiB parts.
    line = "x" * 99 + "\n"
    me = types.Implementation(name=f"parts-{transport}", version="1.0")
    async with world.client(transport, "2026-07-28", client_info=me) as c:
        r = await c.call_tool(
            "write", {"kind": "text", "first": "start\n", "chunk": line, "times": 100_000}
        )
        assert not r.is_error, r.content
        texts = [b for b in r.content if b.type == "text"]
        links = [b for b in r.content if b.type == "resource_link"]
        assert len(texts) == 1 and len(links) == 1, r.content
        link = links[0]
        size = 6 + 100 * 100_000
        assert link.size == size and link.mime_type == "text/plain"
        parts = -(-size // (1 << 20))
        preview = texts[0].text
        assert len(preview) < 40_000 and "100001 lines" in preview, preview[:300]
        assert f"{link.uri}?part=0" in preview and f"{link.uri}?part={parts - 1}" in preview
        with pytest.raises(Exception, match=f"read it in {parts} parts"):
            await c.read_resource(link.uri)
        whole = ""
        for i in range(parts):
            got = await c.read_resource(f"{link.uri}?part={i}")
            whole += got.contents[0].text
        assert whole == "start\n" + line * 100_000
        with pytest.raises(Exception, match=f"has {parts} parts"):
            await c.read_resource(f"{link.uri}?part={parts}")
    other = types.Implementation(name="someone-else", version="1.0")
    async with world.client(transport, "2026-07-28", client_info=other) as c:
        with pytest.raises(Exception, match="not kept for this client"):
            await c.read_resource(f"{link.uri}?part=0")


@BOTH
async def test_a_structured_result_too_large_to_send_whole_says_where_it_is(world, transport):
    # sql_query has an output schema: sent whole as structured content up to 16 MiB, and past
    # that an error naming the resource that holds it (clients check structured content).
    import sqlite3

    db = world.db / f"rows-{transport}.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE r(id INTEGER PRIMARY KEY, pad TEXT)")
        conn.executemany(
            "INSERT INTO r VALUES (?, ?)", ((i, f"{i:0150d}") for i in range(1, 110_001))
        )
    query = {"database": f"/db/{db.name}", "max_rows": 1_000_000, "max_bytes": 62_914_560}
    async with world.client(transport, "2026-07-28") as c:
        small = await c.call_tool("sql_query", {**query, "sql": "SELECT * FROM r WHERE id < 3000"})
        assert not small.is_error and small.structured_content["row_count"] == 2999
        big = await c.call_tool("sql_query", {**query, "sql": "SELECT * FROM r ORDER BY id"})
        assert big.is_error
        said = big.content[0].text
        assert "more than the 16 MiB sent as structured content" in said, said
        link = next(b for b in big.content if b.type == "resource_link")
        assert link.mime_type == "application/json" and link.size > 16 << 20
        last = await c.read_resource(f"{link.uri}?part={-(-link.size // (1 << 20)) - 1}")
        assert '"row_count":110000' in last.contents[0].text
