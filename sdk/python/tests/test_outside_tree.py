"""The SDK works outside the Cordon tree: it carries the WIT contract (``wit/``), and a
plugin copied from the template builds against a copy of the SDK in another directory.

Inside the tree, the SDK's ``wit/`` must equal the contract in the top-level ``wit/``. The
build test needs componentize-py (``COMPONENTIZE`` or the tree's ``target/venv``) and
``make``; it is skipped without them.
"""

import filecmp
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.abspath(os.path.join(HERE, ".."))
ROOT = os.path.abspath(os.path.join(SDK, "..", ".."))


def _componentize_py():
    candidate = os.environ.get("COMPONENTIZE") or os.path.join(
        ROOT, "target", "venv", "bin", "componentize-py"
    )
    return candidate if os.path.exists(candidate) else shutil.which("componentize-py")


def _wit_files(directory):
    return sorted(
        os.path.relpath(os.path.join(d, name), directory)
        for d, _, names in os.walk(directory)
        for name in names
    )


class VendoredWit(unittest.TestCase):
    @unittest.skipUnless(
        os.path.isdir(os.path.join(ROOT, "host")) and os.path.isdir(os.path.join(ROOT, "wit")),
        "not inside the Cordon tree: no contract to compare the SDK's WIT with",
    )
    def test_matches_the_contract(self):
        ours, contract = os.path.join(SDK, "wit"), os.path.join(ROOT, "wit")
        fix = "copy it: cp -r wit/. sdk/python/wit/"
        self.assertEqual(_wit_files(ours), _wit_files(contract), f"sdk/python/wit differs; {fix}")
        for name in _wit_files(contract):
            self.assertTrue(
                filecmp.cmp(os.path.join(ours, name), os.path.join(contract, name), shallow=False),
                f"sdk/python/wit/{name} differs from wit/{name}; {fix}",
            )


@unittest.skipUnless(_componentize_py(), "componentize-py not found; run `make toolchain`")
@unittest.skipUnless(shutil.which("make"), "make not found")
class OutsideTheTree(unittest.TestCase):
    def test_the_template_builds_against_a_copy_of_the_sdk(self):
        with tempfile.TemporaryDirectory() as tmp:
            ignore = shutil.ignore_patterns("__pycache__", "build", "tests", "template")
            shutil.copytree(SDK, os.path.join(tmp, "sdk"), ignore=ignore)
            tool = os.path.join(tmp, "my-tool")
            shutil.copytree(
                os.path.join(SDK, "template"),
                tool,
                ignore=shutil.ignore_patterns("__pycache__", "build"),
            )
            out = os.path.join(tool, "build", "t.wasm")
            subprocess.run(
                [
                    "make",
                    "-C",
                    tool,
                    f"COMPONENTIZE={os.path.abspath(_componentize_py())}",
                    f"SDK={os.path.join(tmp, 'sdk')}",
                    f"OUT={out}",
                ],
                check=True,
                capture_output=True,
                env={k: v for k, v in os.environ.items() if k not in ("WIT", "MAKEFLAGS")},
            )
            with open(out, "rb") as handle:
                # A component, not a core module: `\0asm`, then version 0x0d and layer 1.
                self.assertEqual(handle.read(8), b"\0asm\x0d\x00\x01\x00")


if __name__ == "__main__":
    unittest.main()
