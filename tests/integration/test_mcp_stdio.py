"""``ditto-worker mcp`` over stdio, driven by the official ``mcp`` Python client: every
tool, the scope from ``--scope`` only, the host config of docs/integrations-mcp.md, and
the same server on a fleet (issue 33 item 3)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from tests.integration._mcp_kit import (  # noqa: E402
    BIN,
    call,
    check_every_tool,
    check_other_scope_unreachable,
    check_scope_arguments_refused,
    stdio_params,
)

REPO = Path(__file__).resolve().parents[2]
ALICE = "tenant=acme,user=alice"
BOB = "tenant=acme,user=bob"


def test_every_tool_over_stdio(tmp_path: Path) -> None:
    async def main() -> None:
        async with Client(stdio_params(ALICE, tmp_path / "m.sqlite")) as client:
            await check_every_tool(client)

    anyio.run(main)


def test_scope_comes_from_the_command_line_only(tmp_path: Path) -> None:
    db = tmp_path / "m.sqlite"

    async def main() -> None:
        async with Client(stdio_params(ALICE, db)) as alice:
            await check_scope_arguments_refused(alice)
            async with Client(stdio_params(BOB, db)) as bob:
                await check_other_scope_unreachable(alice, bob)
            async with Client(stdio_params("tenant=other,user=alice", db)) as other:
                await check_other_scope_unreachable(alice, other)

    anyio.run(main)


def host_config() -> dict[str, object]:
    """The ``mcpServers`` JSON block of docs/integrations-mcp.md (the one a host reads)."""
    text = (REPO / "docs" / "integrations-mcp.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    configs = [json.loads(b) for b in blocks if '"mcpServers"' in b]
    assert len(configs) == 1, "docs/integrations-mcp.md has one mcpServers block"
    servers = configs[0]["mcpServers"]
    assert isinstance(servers, dict) and len(servers) == 1
    entry: dict[str, object] = next(iter(servers.values()))
    return entry


def test_the_documented_host_config_launches_a_working_server(tmp_path: Path) -> None:
    entry = host_config()
    command, args, env = entry["command"], entry["args"], entry["env"]
    assert command == "ditto-worker" and isinstance(args, list) and isinstance(env, dict)
    assert args[:2] == ["mcp", "--scope"]
    # the host runs exactly this; only the store's file moves into the test's folder
    assert set(env) == {"DITTO_WORKER_MEMORY_SQLITE_PATH"}
    params = StdioServerParameters(
        command=str(BIN / command),
        args=args,
        env={
            "PATH": os.environ["PATH"],
            "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "m.db"),
            "HOME": str(tmp_path),
        },  # fmt: skip
        cwd=str(tmp_path),
    )

    async def main() -> None:
        async with Client(params) as client:
            wrote = await call(client, "memory_write", {"memories": [{"content": "hi"}]})
            assert wrote["status"] == "success", wrote
            got = await call(client, "memory_get", {"ids": [wrote["output"][0]["id"]]})
            assert [i["content"] for i in got["output"]] == ["hi"]

    anyio.run(main)


def test_a_malformed_scope_is_refused_before_serving(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ditto_worker", "mcp", "--scope", "tenant=acme"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "mcp: --scope: user missing (give tenant=ID,user=ID)"
    far = subprocess.run(
        [sys.executable, "-m", "ditto_worker", "mcp", "--scope", ALICE, "--transport", "http",
         "--host", "0.0.0.0"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert far.returncode == 2 and "loopback only" in far.stderr


@pytest.mark.integration
def test_every_tool_over_stdio_on_a_fleet(redis_url: str, tmp_path: Path) -> None:
    db = tmp_path / "fleet.sqlite"
    env = {**os.environ, "DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": redis_url,
           "DITTO_WORKER_MEMORY_SQLITE_PATH": str(db)}  # fmt: skip
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "memory", "--pool", "solo",
         "--loglevel", "INFO"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "ready." not in (tmp_path / "worker.log").read_text():
            assert worker.poll() is None and time.monotonic() < deadline, "worker did not start"
            time.sleep(0.2)
        # the server's own store path points nowhere: only the fleet's worker has the data
        fleet = {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": redis_url}

        async def main() -> None:
            async with Client(stdio_params(ALICE, tmp_path / "unused.sqlite", **fleet)) as c:
                await check_every_tool(c)
                async with Client(stdio_params(BOB, tmp_path / "unused.sqlite", **fleet)) as b:
                    await check_other_scope_unreachable(c, b)

        anyio.run(main)
        assert not (tmp_path / "unused.sqlite").exists()
        assert db.exists()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        log.close()
