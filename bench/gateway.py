"""The HTTP gateway's cost over the Python client, on the same fleet, in one run.

One throwaway Redis, ONE worker process (``ditto-worker worker --nodes memory``, threads
pool) and ONE gateway process (``ditto-worker serve`` with a broker: every call is
enqueued on the fleet through the same client Python callers use). MEMORY.GET of one
record is called three ways, in interleaved rounds so a noisy neighbour hits all alike:

  (python) ``await runtime.ainvoke`` — the Python fleet client (``create_ditto`` with a
      broker);
  (asgi) the gateway app in this process over that same client, called through httpx's
      ``ASGITransport`` (no socket, no server process): what the app itself costs (auth,
      validation, JSON in and out, the FastAPI stack);
  (http) ``POST /v1/nodes/MEMORY.GET`` to the ``ditto-worker serve`` process through
      httpx's keep-alive ``AsyncClient``.

At 1, 10 and 100 concurrent callers it prints p50/p99 latency (ms) and throughput
(calls/s) per path and the ratios to python. Targets (issue 26): HTTP p50 <= 1.3x the
direct client at 1 caller; throughput >= 0.5x at 100 callers. asgi - python is the app's
share of the difference; http - asgi is the HTTP transport's (the socket both ways,
uvicorn's parsing, one more process to wake on a shared machine). On this 2-core machine
the gateway process, the worker, Redis and the callers share the cores, so at 100
callers the HTTP path also pays the HTTP client's and the gateway's CPU.

    python bench/gateway.py                      # 5 rounds, 200 calls per level
    python bench/gateway.py --rounds 7 --calls 400
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ditto_worker.gateway.app import create_app
from ditto_worker.gateway.settings import load_gateway_settings
from ditto_worker.testing.gateway import GatewayServer
from ditto_worker.testing.servers import RedisServer, stop_process

TOKEN = "bench-gateway-token"
LEVELS = (1, 10, 100)


def write_config(folder: Path, redis_url: str) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    (folder / "ditto.yaml").write_text(
        f"""
fleet: {{brokerUrl: '{redis_url}', resultBackend: '{redis_url}'}}
workers:
  infer: {{local: {{autoStart: false}}}}
plugins:
  sqlite: {{path: '{folder / "memory.sqlite"}'}}
gateway:
  maxInFlight: 1000
  tokens:
    - {{sha256: {digest}, tenant: bench, user: ada}}
""",
        encoding="utf-8",
    )


async def timed(calls: int, callers: int, one: Any) -> tuple[list[float], float]:
    """Latencies (ms) of ``calls`` calls made by ``callers`` concurrent callers, and the
    throughput (calls/s) of the whole batch."""
    latencies: list[float] = []
    per = max(1, calls // callers)

    async def caller() -> None:
        for _ in range(per):
            started = time.perf_counter()
            await one()
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return latencies, len(latencies) / (time.perf_counter() - started)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    args: argparse.Namespace, gateway: GatewayServer, runtime: Any, folder: Path
) -> None:
    scope = {"tenant": "bench", "user": "ada"}
    written = await runtime.ainvoke("MEMORY.WRITE", {"memories": [{"key": "k", "content": "v"}]},
                                    scope=scope, timeout=30)  # fmt: skip
    assert written.status == "success", written.error
    body = {"keys": ["k"]}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(runtime, load_gateway_settings(folder / "ditto.yaml"))
    in_process = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app",
                                   headers=headers, timeout=60)  # fmt: skip
    async with in_process, httpx.AsyncClient(base_url=gateway.url, limits=limits,
                                             headers=headers, timeout=60) as http:  # fmt: skip

        async def direct() -> None:
            result = await runtime.ainvoke("MEMORY.GET", body, scope=scope, timeout=60)
            assert result.status == "success" and result.output, result.error

        async def over_http() -> None:
            answer = await http.post("/v1/nodes/MEMORY.GET", json=body)
            assert answer.status_code == 200 and answer.json()["output"], answer.text

        async def over_asgi() -> None:
            answer = await in_process.post("/v1/nodes/MEMORY.GET", json=body)
            assert answer.status_code == 200 and answer.json()["output"], answer.text

        paths = (("python", direct), ("asgi", over_asgi), ("http", over_http))
        for _ in range(20):  # warm every path (connections, pools)
            for _name, fn in paths:
                await fn()
        rows: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
        for round_no in range(args.rounds):
            for callers in LEVELS:
                for name, fn in paths:
                    lat, rate = await timed(args.calls, callers, fn)
                    rows.setdefault((callers, name), []).append(
                        (pct(lat, 0.5), pct(lat, 0.99), rate)
                    )
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    report(rows)


def report(rows: dict[tuple[int, str], list[tuple[float, float, float]]]) -> None:
    print("\nMEMORY.GET on one fleet (medians over rounds)")
    print(f"{'callers':>7} {'path':>6} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>9}")
    for callers in LEVELS:
        med = {}
        for name in ("python", "asgi", "http"):
            p50, p99, rate = (
                statistics.median(v[i] for v in rows[(callers, name)]) for i in range(3)
            )
            med[name] = (p50, p99, rate)
            print(f"{callers:>7} {name:>6} {p50:>8.2f} {p99:>8.2f} {rate:>9.0f}")
        (p50p, _, ratep) = med["python"]
        for name, label in (("asgi", "a/p"), ("http", "h/p")):
            p50, _, rate = med[name]
            print(f"{callers:>7} {label:>6} {p50 / p50p:>7.2f}x {'':>8} {rate / ratep:>8.2f}x")
        app_ms, transport_ms = med["asgi"][0] - p50p, med["http"][0] - med["asgi"][0]
        print(f"{callers:>7} p50 added: app {app_ms:.2f} ms, HTTP hop {transport_ms:.2f} ms")
    print("targets: p50 h/p <= 1.3x at 1 caller; throughput h/p >= 0.5x at 100 callers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per level and path")
    parser.add_argument("--concurrency", type=int, default=8, help="the worker's threads")
    args = parser.parse_args()
    from ditto_worker.config import load_runtime_config_file
    from ditto_worker.runtime import create_ditto

    with RedisServer() as redis_server, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url = f"{redis_server.url}/0"
        write_config(folder, url)
        worker = subprocess.Popen(
            [sys.executable, "-m", "ditto_worker", "worker", "--config", "ditto.yaml",
             "--nodes", "memory", "--pool", "threads", "--concurrency", str(args.concurrency)],
            cwd=folder, stdout=(folder / "worker.log").open("w"), stderr=subprocess.STDOUT,
            env={**os.environ},
        )  # fmt: skip
        try:
            with GatewayServer(folder) as gateway:
                runtime = create_ditto(None, load_runtime_config_file(folder / "ditto.yaml"))
                try:
                    asyncio.run(measure(args, gateway, runtime, folder))
                finally:
                    runtime.close()
        finally:
            stop_process(worker)


if __name__ == "__main__":
    main()
