"""What the MCP tests share: drive every tool through the official ``mcp`` client, and try
to reach another scope through tool arguments.

Imported as ``tests.integration._mcp_kit``. ``client`` is an entered ``mcp.Client`` (stdio
or streamable HTTP); each check asserts on the NodeResult in ``structuredContent``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

__all__ = [
    "TOOLS",
    "call",
    "check_every_tool",
    "check_other_scope_unreachable",
    "check_scope_arguments_refused",
    "http_client",
    "operator_http",
    "stdio_params",
]

TOOLS = ["memory_get", "memory_query", "memory_search", "memory_write", "memory_update",
         "memory_delete"]  # fmt: skip

BIN = Path(sys.executable).parent


@asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    """The official client over streamable HTTP at ``url``, with ``token`` as its bearer."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def stdio_params(scope: str, db: Path, *args: str, **env: str) -> StdioServerParameters:
    """``ditto-worker mcp --scope SCOPE [ARGS]`` on the SQLite file ``db``, embedded."""
    return StdioServerParameters(
        command=str(BIN / "ditto-worker"),
        args=["mcp", "--scope", scope, *args],
        env={
            **os.environ,
            "DITTO_BROKER_URL": "",
            "DITTO_RESULT_BACKEND": "",
            "DITTO_WORKER_MEMORY_SQLITE_PATH": str(db),
            **env,
        },  # fmt: skip
        cwd=str(db.parent),
    )


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The NodeResult a tool answered; ``isError`` agrees with its status, and the text
    block carries the same JSON."""
    result = await client.call_tool(tool, arguments)
    wire = result.structured_content
    assert isinstance(wire, dict), result
    assert result.is_error == (wire["status"] != "success"), wire
    assert json.loads(result.content[0].text) == wire  # type: ignore[union-attr]
    return wire


async def check_every_tool(client: Client) -> None:
    """Each of the six tools once, with the outputs a MEMORY node gives; bad input is
    ``INVALID_INPUT`` naming the field."""
    listed = await client.list_tools()
    assert sorted(t.name for t in listed.tools) == sorted(TOOLS)
    write_schema = next(t for t in listed.tools if t.name == "memory_write").input_schema
    assert "memories" in write_schema["properties"] and write_schema["required"] == ["memories"]
    drafts = [
        {"key": "drink", "content": "Alice drinks green tea", "metadata": {"topic": "food"}},
        {"key": "city", "content": "Alice lives in Lyon", "metadata": {"topic": "home"}},
    ]
    wrote = await call(client, "memory_write", {"memories": drafts})
    assert wrote["status"] == "success", wrote
    tea, lyon = (item["id"] for item in wrote["output"])
    got = await call(client, "memory_get", {"keys": ["drink", "city"]})
    assert sorted(i["content"] for i in got["output"]) == sorted(d["content"] for d in drafts)
    page = await call(client, "memory_query", {"filter": {"topic": "home"}, "limit": 5})
    assert [i["id"] for i in page["output"]["items"]] == [lyon]
    hits = await call(client, "memory_search", {"query": "green tea", "limit": 3})
    assert hits["output"][0]["memory"]["id"] == tea, hits
    updated = await call(client, "memory_update", {"memories": [{"id": tea, "content": "oolong"}]})
    assert updated["output"][0]["content"] == "oolong", updated
    deleted = await call(client, "memory_delete", {"ids": [lyon, "no-such-id"]})
    assert deleted["output"] == {"deleted": [lyon]}
    bad = await call(client, "memory_get", {"ids": "drink"})
    assert bad["status"] == "failed" and bad["error"]["code"] == "INVALID_INPUT", bad
    assert "ids" in bad["error"]["message"]


SCOPE_ARGUMENTS: list[dict[str, Any]] = [
    {"tenant": "bob-co"},
    {"user": "bob"},
    {"scope": {"tenant": "bob-co", "user": "bob"}},
    {"namespace": ["bob-co", "bob"]},
    {"space": "task:t1"},
]
"""Tool arguments that try to choose the scope: each is an unknown input field."""


async def check_scope_arguments_refused(client: Client) -> None:
    """A tenant, user, scope, namespace or space in any tool's arguments is
    ``INVALID_INPUT`` and writes nothing."""
    base: dict[str, dict[str, Any]] = {
        "memory_write": {"memories": [{"key": "planted", "content": "x"}]},
        "memory_get": {"keys": ["planted"]},
        "memory_query": {},
        "memory_search": {"query": "x"},
        "memory_update": {"memories": [{"id": "planted", "content": "y"}]},
        "memory_delete": {"ids": ["planted"]},
    }
    for tool, arguments in base.items():
        for extra in SCOPE_ARGUMENTS:
            answer = await call(client, tool, {**arguments, **extra})
            assert answer["error"]["code"] == "INVALID_INPUT", (tool, extra, answer)
            assert next(iter(extra)) in answer["error"]["message"], answer
    nothing = await call(client, "memory_get", {"keys": ["planted"]})
    assert nothing["output"] == []


async def check_other_scope_unreachable(mine: Client, theirs: Client) -> None:
    """What ``mine`` writes, ``theirs`` (another scope, same store) can neither read, find,
    list, change nor delete."""
    key = f"secret-{uuid.uuid4().hex[:8]}"
    wrote = await call(mine, "memory_write", {"memories": [{"key": key, "content": "s3cret"}]})
    secret = wrote["output"][0]["id"]
    assert (await call(theirs, "memory_get", {"keys": [key], "ids": [secret]}))["output"] == []
    assert (await call(theirs, "memory_search", {"query": "s3cret"}))["output"] == []
    assert (await call(theirs, "memory_query", {}))["output"]["items"] == []
    changed = await call(theirs, "memory_update", {"memories": [{"id": secret, "content": "x"}]})
    assert changed["error"]["code"] == "NOT_FOUND", changed
    assert (await call(theirs, "memory_delete", {"ids": [secret]}))["output"] == {"deleted": []}
    still = await call(mine, "memory_get", {"ids": [secret]})
    assert [i["content"] for i in still["output"]] == ["s3cret"]


@contextmanager
def operator_http(folder: Path, scope: str, *args: str) -> Iterator[str]:
    """``ditto-worker mcp --scope SCOPE --transport http`` on a free loopback port, embedded
    on ``folder/m.sqlite``; yields its ``/mcp`` URL once it answers."""
    from ditto_worker.testing.servers import free_port, stop_process

    port = free_port()
    params = stdio_params(scope, folder / "m.sqlite")
    log = (folder / "mcp-http.log").open("a")
    proc = subprocess.Popen(
        [params.command, *params.args, "--transport", "http", "--port", str(port), *args],
        cwd=folder, env=params.env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (folder / "mcp-http.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)
        log.close()
