"""While one call spins in `cordon mcp` (stdio), how long do other calls take? 20 `fine` calls of
the `runaway` fixture one after another, alone, then during each of two spins (its time limit
3 s); p50 and max of each. From the repository's root, after `make plugins` and `make
test-services` (the private virtualenv with the MCP SDK):
`target/venv/bin/python tests/bench/mcp_spin.py target/release/cordon`."""

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

CORDON = sys.argv[1]
home = tempfile.mkdtemp(prefix="spin-")
env = {"PATH": os.environ["PATH"], "CORDON_HOME": home, "HOME": home, "NO_COLOR": "1"}
subprocess.run(
    [
        CORDON,
        "plugin",
        "install",
        "target/fixtures/runaway.wasm",
        "--limit",
        "time=3s",
        "--yes",
    ],
    env=env,
    check=True,
    capture_output=True,
)
cfg = os.path.join(home, "cordon.toml")
with open(cfg, "w") as f:
    f.write('[approval.plugins]\nrunaway = "auto"\n')
env["CORDON_CONFIG"] = cfg


async def main():
    params = StdioServerParameters(command=CORDON, args=["mcp"], env=env)
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()

        async def timed():
            t = time.perf_counter()
            await s.call_tool("fine", {})
            return time.perf_counter() - t

        alone = [await timed() for _ in range(20)]
        runs = []
        for _ in range(2):
            spin = asyncio.create_task(s.call_tool("spin", {}))
            await asyncio.sleep(0.2)
            runs.append([await timed() for _ in range(20)])
            await spin
        for name, xs in (
            ("alone", alone),
            ("first spin", runs[0]),
            ("second spin", runs[1]),
        ):
            print(
                f"{name:>14}: p50 {statistics.median(xs) * 1000:7.2f} ms, max {max(xs) * 1000:7.2f} ms"
            )


asyncio.run(main())
shutil.rmtree(home, ignore_errors=True)
