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
