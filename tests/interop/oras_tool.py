"""Another OCI tool's side of the interoperability tests: the `oras` Python SDK (from PyPI)
pushes a Wasm component artifact as `wkg oci push` lays it out, and reads back one that Cordon
pushed, printing its manifest.

    oras_tool.py push HOST:PORT/REPO:TAG COMPONENT.wasm
    oras_tool.py read HOST:PORT/REPO:TAG OUT.wasm      (prints the manifest as JSON)
"""

import json
import os
import sys
import tempfile

import oras.client


def push(target: str, component: str) -> None:
    client = oras.client.OrasClient(insecure=True)
    with tempfile.TemporaryDirectory() as work:
        config = os.path.join(work, "config.json")
        with open(config, "w") as f:
            json.dump({"architecture": "wasm", "os": "wasip2"}, f)
        # oras names the layer after the path it is given, relative to the working directory.
        os.chdir(os.path.dirname(os.path.abspath(component)))
        client.push(
            target=target,
            files=[f"{os.path.basename(component)}:application/wasm"],
            manifest_config=f"{config}:application/vnd.wasm.config.v0+json",
            disable_path_validation=True,
            quiet=True,
        )


def read(target: str, out: str) -> None:
    client = oras.client.OrasClient(insecure=True)
    manifest = client.get_manifest(target)
    container = client.get_container(target)
    wasm = [
        layer
        for layer in manifest["layers"]
        if layer["mediaType"] == "application/wasm"
    ]
    if len(wasm) != 1:
        raise SystemExit(
            f"expected one application/wasm layer, found {manifest['layers']}"
        )
    blob = client.get_blob(container, wasm[0]["digest"])
    blob.raise_for_status()
    with open(out, "wb") as f:
        f.write(blob.content)
    print(json.dumps(manifest))


if __name__ == "__main__":
    command, target, path = sys.argv[1:4]
    {"push": push, "read": read}[command](target, path)
