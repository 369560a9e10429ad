"""The adapters' cost (issue 33 "Figures"), measured side by side in one run.

MCP rows (:func:`mcp_rows`): one MEMORY.GET of one record, called in alternating rounds
(each round starts with the next path, so a noisy neighbour hits all alike) as

  (v1-nodes) ``POST /v1/nodes/MEMORY.GET`` to ``ditto-worker serve`` (embedded runtime,
      a static token), one keep-alive httpx client: the plain HTTP call;
  (mcp-http) ``tools/call memory_get`` to ``/mcp`` of that same server, through the
      official ``mcp`` client (streamable HTTP, stateless, JSON responses; its own httpx2
      keep-alive client, the bearer header);
  (mcp-stdio) ``tools/call memory_get`` to ``ditto-worker mcp --scope …`` over stdio
      (the official client launched it; embedded runtime on the same SQLite file);
  (mcp-raw) the same ``tools/call`` as one JSON-RPC POST to ``/mcp`` by the plain httpx
      client of v1-nodes (no MCP client: what the server side and the transport cost);
  (v1-jwt, mcp-jwt) v1-nodes and mcp-http with a JWT (HS256) instead of the static token
      (the JWT is verified once per request, by the gateway's guard).

It prints p50 and p99 latency (ms) per path and each path's p50 over the v1-nodes p50.
One caller at a time (an MCP host calls its tools one by one). The load average is
printed at the start and the end (a 2-core machine shared with others).

    python bench/integrations.py mcp                      # 5 rounds of 200 calls
    python bench/integrations.py mcp --rounds 7 --calls 300

LangGraph rows (``python bench/integrations.py langgraph [--n 10000]``): put / get /
search through our ``DittoStore`` beside our SDK and LangGraph's ``SqliteStore``
(bench/integrations_langgraph.py says how).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-integrations-token"
JWT_KEY = "bench-integrations-hmac-key-of-32-bytes!"
SCOPE = "tenant=bench,user=alice"

Call = Callable[[], Awaitable[None]]


def _config(folder: Path) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    (folder / "ditto.yaml").write_text(
        f"workers:\n  infer: {{local: {{autoStart: false}}}}\n"
        f"plugins:\n  sqlite: {{path: '{folder / 'memory.sqlite'}'}}\n"
        f"gateway:\n  tokens:\n    - {{sha256: {digest}, tenant: bench, user: alice}}\n"
        f"  jwt: {{keyEnv: BENCH_JWT_KEY, algorithms: [HS256]}}\n",
        encoding="utf-8",
    )


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _rounds(paths: dict[str, Call], rounds: int, calls: int) -> dict[str, list[float]]:
    """Each path ``calls`` times per round, paths rotated each round; ms per call."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for name in names:  # warm-up
        for _ in range(20):
            await paths[name]()
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call = paths[name]
            for _ in range(calls):
                start = time.perf_counter()
                await call()
                times[name].append((time.perf_counter() - start) * 1000)
    return times


async def _mcp_measure(folder: Path, url: str, rounds: int, calls: int) -> dict[str, list[float]]:
    import jwt
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {TOKEN}"}
    claims = {"tenant": "bench", "sub": "alice", "exp": int(time.time()) + 3600}
    jwt_headers = {"Authorization": f"Bearer {jwt.encode(claims, JWT_KEY, 'HS256')}"}
    rpc_headers = {**headers, "Accept": "application/json, text/event-stream"}
    stdio = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ditto_worker", "mcp", "--scope", SCOPE],
        env={
            **os.environ,
            "DITTO_BROKER_URL": "",
            "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "memory.sqlite"),
        },  # fmt: skip
        cwd=str(folder),
    )
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as plain,
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as over_http,
        httpx.AsyncClient(base_url=url, headers=jwt_headers, timeout=60) as plain_jwt,
        create_mcp_http_client(headers=jwt_headers) as http_jwt,
        Client(streamable_http_client(f"{url}/mcp", http_client=http_jwt)) as over_jwt,
        Client(stdio) as over_stdio,
    ):
        wrote = await over_http.call_tool(
            "memory_write", {"memories": [{"key": "k", "content": "tea"}]}
        )
        assert wrote.structured_content and wrote.structured_content["status"] == "success"
        args = {"keys": ["k"]}

        def v1(client: httpx.AsyncClient) -> Call:
            async def call() -> None:
                answer = await client.post("/v1/nodes/MEMORY.GET", json=args)
                assert answer.status_code == 200 and answer.json()["output"], answer.text

            return call

        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "memory_get", "arguments": args}}  # fmt: skip

        async def raw() -> None:
            answer = await plain.post("/mcp", json=rpc, headers=rpc_headers)
            assert answer.json()["result"]["structuredContent"]["output"], answer.text

        def tool(client: Any) -> Call:
            async def call() -> None:
                result = await client.call_tool("memory_get", args)
                assert not result.is_error and result.structured_content["output"], result

            return call

        paths = {"v1-nodes": v1(plain), "mcp-http": tool(over_http),
                 "mcp-stdio": tool(over_stdio), "mcp-raw": raw, "v1-jwt": v1(plain_jwt),
                 "mcp-jwt": tool(over_jwt)}  # fmt: skip
        return await _rounds(paths, rounds, calls)


def mcp_rows(rounds: int, calls: int) -> list[tuple[str, float, float, float]]:
    """``(path, p50 ms, p99 ms, p50 / v1-nodes p50)`` for the MCP-related paths."""
    from ditto_worker.testing.gateway import GatewayServer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _config(folder)
        env = {"DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": "", "BENCH_JWT_KEY": JWT_KEY}
        with GatewayServer(folder, env=env) as server:
            times = asyncio.run(_mcp_measure(folder, server.url, rounds, calls))
    base = statistics.median(times["v1-nodes"])
    return [(name, statistics.median(t), _p(t, 0.99), statistics.median(t) / base)
            for name, t in times.items()]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["mcp", "langgraph"], help="which rows to measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per path per round")
    parser.add_argument("--n", type=int, default=10_000, help="langgraph: items loaded first")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    if args.what == "langgraph":  # bench/integrations_langgraph.py
        from integrations_langgraph import langgraph_rows, print_langgraph

        print(f"{args.n} items per side, 1 caller, {args.rounds} x {args.calls} calls per op")
        print_langgraph(langgraph_rows(args.n, args.rounds, args.calls))
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        return
    rows = mcp_rows(args.rounds, args.calls)
    print(f"MEMORY.GET of one record, 1 caller, {args.rounds} x {args.calls} calls per path")
    print(f"{'path':<10} {'p50 ms':>8} {'p99 ms':>8} {'p50 / v1-nodes':>15}")
    for name, p50, p99, ratio in rows:
        print(f"{name:<10} {p50:>8.2f} {p99:>8.2f} {ratio:>15.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
