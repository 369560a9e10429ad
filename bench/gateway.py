"""The HTTP gateway's cost over the Python client, on the same fleet, in one run.

One throwaway Redis, ONE worker process (``ditto-worker worker --nodes memory``, threads
pool) and ONE gateway process (``ditto-worker serve`` with a broker: every call is
enqueued on the fleet through the same client Python callers use). MEMORY.GET of one
record is called five ways, in interleaved rounds so a noisy neighbour hits all alike
(each round starts with the next path, so none always runs right after the same one):

  (python) ``await runtime.ainvoke`` — the Python fleet client (``create_ditto`` with a
      broker), one client shared by every caller (as it is meant to be used);
  (asgi) the gateway app in this process over that same client, called through httpx's
      ``ASGITransport`` (no socket, no server process): the app's cost (auth, validation,
      JSON in and out, the FastAPI stack) plus httpx building the request and reading the
      response in this process;
  (http) ``POST /v1/nodes/MEMORY.GET`` to the ``ditto-worker serve`` process over
      keep-alive HTTP: each caller has its own httpx ``AsyncClient`` and keeps its one
      connection open, as independent callers do. (One client shared by 100 callers is
      not used: httpcore's pool walks every connection on each request, encode/httpx#3215,
      which at 100 callers cost this process ~7 ms of CPU per call against ~1.8 ms with
      a client per caller; the gateway sees the same 100 keep-alive connections either
      way.)
  (aiohttp) the same ``POST`` through aiohttp, the other established asyncio HTTP client
      (one ``ClientSession``, keep-alive connections, its C HTTP parser): httpx parses
      HTTP in pure Python (h11) and costs the calling process ~2 ms of CPU per call here,
      as much as the whole Python fleet client; aiohttp ~0.5 ms. The gateway answers both
      alike, so the difference between the two rows is the caller's HTTP library.
  (node) the same ``POST`` from a Node.js process through the TypeScript client
      (``clients/typescript``, built on first use; Node's fetch keeps connections alive):
      the seed's own callers are TypeScript services. ``bench/gateway_node.mjs`` runs one
      measurement per process (after a warm-up) and reports its own CPU.
  (raw) the same ``POST`` over a keep-alive connection per caller written and read by
      hand (the request in one write, the answer read by its ``Content-Length``): what
      the gateway costs without an HTTP client library's work in the caller's process.
      Not a client to use; the floor any HTTP client could reach.

At 1, 10 and 100 concurrent callers it prints p50/p99 latency (ms) and throughput
(calls/s) per path and the ratios to python. Targets (issue 26): HTTP p50 <= 1.3x the
direct client at 1 caller; throughput >= 0.5x at 100 callers. It also prints where the
CPU goes: CPU ms per call of this process (the callers: the Python client, or httpx),
the gateway process, the worker process and Redis (Linux: from /proc). On this 2-core
machine all four share the cores (with anything else running: the load average is
printed at the start and the end), so at 100 callers the HTTP path pays the gateway's
CPU and the HTTP client's on top of the fleet's.

    python bench/gateway.py                      # 5 rounds, 200 calls per level
    python bench/gateway.py --rounds 7 --calls 400
    python bench/gateway.py --gateway-workers 2  # serve --workers 2
    python bench/gateway.py --levels 1 --paths python,aiohttp   # a subset
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from ditto_worker.gateway.app import create_app
from ditto_worker.gateway.settings import load_gateway_settings
from ditto_worker.testing.gateway import GatewayServer
from ditto_worker.testing.servers import RedisServer, stop_process

TOKEN = "bench-gateway-token"
LEVELS = (1, 10, 100)
PATHS = ("python", "asgi", "http", "aiohttp", "node", "raw")
HTTP_PATHS = ("http", "aiohttp", "raw")
NODE_SCRIPT = Path(__file__).with_name("gateway_node.mjs")
CLIENT_DIR = Path(__file__).resolve().parents[1] / "clients" / "typescript"


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


Timed = tuple[list[float], float, float | None, int]
"""Latencies (ms), calls/s, the callers' own CPU ms when measured apart (``None``: this
process's) and the warm-up calls the servers also served meanwhile."""
Measure = Callable[[int], Awaitable[Timed]]
"""One measurement of a path at a number of concurrent callers."""


async def timed(calls: int, callers: int, one: Any) -> Timed:
    """Latencies (ms) of ``calls`` calls made by ``callers`` concurrent callers in this
    process (caller ``i`` calls ``one(i)``), and the throughput (calls/s) of the batch."""
    latencies: list[float] = []
    per = max(1, calls // callers)

    async def caller(i: int) -> None:
        for _ in range(per):
            started = time.perf_counter()
            await one(i)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return latencies, len(latencies) / (time.perf_counter() - started), None, 0


async def timed_node(url: str, calls: int, callers: int) -> Timed:
    """:func:`timed` for the node path: ``bench/gateway_node.mjs`` in a Node.js process
    (the TypeScript client over Node's fetch); latencies (ms), calls/s, the CPU ms the
    Node process used while timed, and how many warm-up calls it made before."""
    proc = await asyncio.create_subprocess_exec(
        "node", str(NODE_SCRIPT), url, TOKEN, str(calls), str(callers),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"node path failed: {err.decode()[-2000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    latencies = [float(v) for v in result["latencies"]]
    rate = len(latencies) / result["seconds"]
    return latencies, rate, float(result["cpuMs"]), int(result["warmupCalls"])


def node_ready() -> str | None:
    """Why the node path cannot run (no ``node``, or the client not built and no
    ``npm`` to build it), or ``None`` once ``clients/typescript/dist`` is built."""
    import shutil

    if shutil.which("node") is None:
        return "no node on PATH"
    if (CLIENT_DIR / "dist" / "index.js").exists():
        return None
    if shutil.which("npm") is None:
        return "clients/typescript is not built and there is no npm"
    print("building clients/typescript (npm ci, npm run build) for the node path", flush=True)
    for step in (["npm", "ci", "--no-audit", "--no-fund"], ["npm", "run", "build"]):
        if subprocess.run(step, cwd=CLIENT_DIR, capture_output=True).returncode != 0:
            return f"{' '.join(step)} failed in clients/typescript"
    return None


def cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) so far of process ``pid`` and its children (the
    processes of ``serve --workers N``); ``None``: this process."""
    if pid is None:
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # not Linux (or gone): no per-process figures
        return math.nan
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_s(int(child)) for child in children)


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


class RawClients:
    """One keep-alive HTTP/1.1 connection per caller, written and read by hand: the
    request in one write, the answer read by its ``Content-Length``. Not a client to
    use; it shows what the gateway costs without an HTTP client library's own work."""

    def __init__(self, url: str, token: str, body: bytes) -> None:
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.request = (
            f"POST /v1/nodes/MEMORY.GET HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.streams: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def post(self, i: int) -> tuple[int, bytes]:
        if i not in self.streams:
            self.streams[i] = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams[i]
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(v.split(b":")[1]) for v in lines if v.lower().startswith(b"content-length:")
        )
        return int(lines[0].split()[1]), await reader.readexactly(length)

    def close(self) -> None:
        for _, writer in self.streams.values():
            writer.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    args: argparse.Namespace, gateway: GatewayServer, runtime: Any, folder: Path,
    pids: dict[str, int | None],
) -> None:  # fmt: skip
    scope = {"tenant": "bench", "user": "ada"}
    written = await runtime.ainvoke("MEMORY.WRITE", {"memories": [{"key": "k", "content": "v"}]},
                                    scope=scope, timeout=30)  # fmt: skip
    assert written.status == "success", written.error
    body = {"keys": ["k"]}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(runtime, load_gateway_settings(folder / "ditto.yaml"))
    in_process = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app",
                                   headers=headers, timeout=60)  # fmt: skip
    # one keep-alive client (one connection) per caller: the module docstring says why
    clients = [httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=60)
               for _ in range(max(args.levels))]  # fmt: skip
    async with contextlib.AsyncExitStack() as stack:
        for client in (in_process, *clients):
            await stack.enter_async_context(client)

        async def direct(_: int) -> None:
            result = await runtime.ainvoke("MEMORY.GET", body, scope=scope, timeout=60)
            assert result.status == "success" and result.output, result.error

        async def over_http(i: int) -> None:
            answer = await clients[i].post("/v1/nodes/MEMORY.GET", json=body)
            assert answer.status_code == 200 and answer.json()["output"], answer.text

        raw = RawClients(gateway.url, TOKEN, json.dumps(body).encode())

        async def over_raw(i: int) -> None:
            status, answer = await raw.post(i)
            assert status == 200 and json.loads(answer)["output"], answer

        async def over_asgi(_: int) -> None:
            answer = await in_process.post("/v1/nodes/MEMORY.GET", json=body)
            assert answer.status_code == 200 and answer.json()["output"], answer.text

        # aiohttp's one session pools its keep-alive connections in O(1) per request
        session = await stack.enter_async_context(aiohttp.ClientSession(
            gateway.url, headers=headers, connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=60)))  # fmt: skip

        async def over_aiohttp(_: int) -> None:
            async with session.post("/v1/nodes/MEMORY.GET", json=body) as answer:
                data = await answer.json()
                assert answer.status == 200 and data["output"], data

        every = {"python": direct, "asgi": over_asgi, "http": over_http,
                 "aiohttp": over_aiohttp, "raw": over_raw}  # fmt: skip
        calls = {name: every[name] for name in args.paths if name in every}
        for _ in range(20):  # warm every path (node warms up in each of its processes)
            for fn in calls.values():
                await fn(0)
        top = max(args.levels)  # open every caller's connection
        await asyncio.gather(*(fn(i) for i in range(top) for name, fn in calls.items()
                               if name in HTTP_PATHS))  # fmt: skip

        def measurer(name: str) -> Measure:
            if name == "node":
                return lambda callers: timed_node(gateway.url, args.calls, callers)
            return lambda callers: timed(args.calls, callers, calls[name])

        rows, cpu = await run_rounds(args, [(n, measurer(n)) for n in args.paths], pids)
        raw.close()
    report(rows, args)
    report_cpu(cpu, args.rounds)


Rows = dict[tuple[int, str], list[tuple[float, float, float]]]
"""(callers, path) -> per round (p50 ms, p99 ms, calls/s)."""


async def run_rounds(
    args: argparse.Namespace, paths: list[tuple[str, Measure]], pids: dict[str, int | None]
) -> tuple[Rows, dict[tuple[int, str], dict[str, float]]]:
    """Every level and path, ``args.rounds`` times: the rows and the CPU ms per call of
    each process (summed over rounds)."""
    rows: Rows = {}
    cpu: dict[tuple[int, str], dict[str, float]] = {}
    for round_no in range(args.rounds):
        # each round starts with another path: no path always follows the same one
        turn = round_no % len(paths)
        for callers in args.levels:
            for name, fn in paths[turn:] + paths[:turn]:
                before = {who: cpu_s(pid) for who, pid in pids.items()}
                lat, rate, caller_ms, warm = await fn(callers)
                spent = cpu.setdefault((callers, name), dict.fromkeys(pids, 0.0))
                for who, pid in pids.items():
                    if who == "callers" and caller_ms is not None:  # Node's own, timed part
                        spent[who] += caller_ms / len(lat)
                    else:  # the servers also served the node path's warm-up calls
                        spent[who] += (cpu_s(pid) - before[who]) * 1000 / (len(lat) + warm)
                rows.setdefault((callers, name), []).append((pct(lat, 0.5), pct(lat, 0.99), rate))
        print(f"round {round_no + 1}/{args.rounds} done ({load()})", flush=True)
    return rows, cpu


def report(rows: Rows,
           args: argparse.Namespace) -> None:  # fmt: skip
    print("\nMEMORY.GET on one fleet (medians over rounds)")
    print(f"{'callers':>7} {'path':>7} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>9}")
    for callers in args.levels:
        med = {}
        for name in args.paths:
            p50, p99, rate = (
                statistics.median(v[i] for v in rows[(callers, name)]) for i in range(3)
            )
            med[name] = (p50, p99, rate)
            print(f"{callers:>7} {name:>7} {p50:>8.2f} {p99:>8.2f} {rate:>9.0f}")
        if "python" not in med:
            continue
        (p50p, _, ratep) = med["python"]
        for name in args.paths[1:] if args.paths[0] == "python" else args.paths:
            if name == "python":
                continue
            p50, _, rate = med[name]
            label = f"{name[:7]}/py"
            print(f"{callers:>7} {label:>10} {p50 / p50p:>4.2f}x {'':>8} {rate / ratep:>8.2f}x")
        if "raw" in med:
            print(f"{callers:>7} p50 added by the gateway and its hop (raw - python): "
                  f"{med['raw'][0] - p50p:.2f} ms")  # fmt: skip
    print("targets: p50 HTTP/python <= 1.3x at 1 caller; throughput >= 0.5x at 100 callers")


def report_cpu(cpu: dict[tuple[int, str], dict[str, float]], rounds: int) -> None:
    """CPU ms per call of each process, averaged over rounds (the callers' process runs
    the Python client, the in-process app, or httpx)."""
    print("\nCPU ms per call (mean over rounds)")
    whos = list(next(iter(cpu.values())))
    print(f"{'callers':>7} {'path':>6} " + " ".join(f"{w:>9}" for w in whos) + f" {'total':>8}")
    for (callers, name), spent in cpu.items():
        per = [spent[w] / rounds for w in whos]
        cells = " ".join(f"{v:>9.2f}" for v in per)
        print(f"{callers:>7} {name:>6} {cells} {sum(per):>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per level and path")
    parser.add_argument("--concurrency", type=int, default=8, help="the worker's threads")
    parser.add_argument("--gateway-workers", type=int, default=1,
                        help="gateway processes (serve --workers N)")  # fmt: skip
    parser.add_argument(
        "--levels",
        type=lambda v: [int(x) for x in v.split(",")],
        default=list(LEVELS),
        help="concurrent callers, e.g. 1,10,100",
    )
    parser.add_argument("--paths", type=lambda v: v.split(","), default=list(PATHS),
                        help=f"a subset of {','.join(PATHS)} (python first)")  # fmt: skip
    args = parser.parse_args()
    if unknown := set(args.paths) - set(PATHS):
        parser.error(f"--paths: unknown {sorted(unknown)}")
    if "node" in args.paths and (why := node_ready()) is not None:
        print(f"skipping the node path: {why}", flush=True)
        args.paths.remove("node")
    from ditto_worker.config import load_runtime_config_file
    from ditto_worker.runtime import create_ditto

    print(f"start: {load()} on {os.cpu_count()} cores", flush=True)
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
            with GatewayServer(folder, args=["--workers", str(args.gateway_workers)]) as gateway:
                runtime = create_ditto(None, load_runtime_config_file(folder / "ditto.yaml"))
                try:
                    pids = {"callers": None, "gateway": gateway.process.pid,  # type: ignore[union-attr]
                            "worker": worker.pid,
                            "redis": redis_server.proc.pid}  # type: ignore[union-attr]  # fmt: skip
                    asyncio.run(measure(args, gateway, runtime, folder, pids))
                finally:
                    runtime.close()
        finally:
            stop_process(worker)
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
