"""The gateway under attack: normal tenants' latency, failures and the server's memory
(issue 37 item 3). Loopback only; bounded in count and time.

One ``ditto-worker serve`` process (embedded runtime, SQLite) with ``maxInFlight`` N and
an identity rate of 50/s (burst 100), as a deployment would set it.
Three normal tenants call ``MEMORY.GET`` **open loop** (a call every 1/rate s whatever the
answers, each on its own keep-alive connection pool) for a quiet phase, then for an
attack phase while one token (allowed only ``MEMORY.GET``), from another process, runs at
once:

* **slow bodies**: 2 x N connections that send their headers and one byte of body, then
  a byte a second (each reopened when the server closes it);
* **slowloris**: 64 connections sending a header line a second, never finishing;
* **header bombs**: 4 at a time, an ``Authorization`` header of 1 to 50 MB each;
* **deep JSON**: bodies nested 1,000 deep, 2 at a time, back to back;
* **disconnect floods**: 4 at a time, headers and half a body, then gone.

The attacker process runs at the lowest CPU priority (``nice 19``): on loopback its own
client work would otherwise compete with the server for the same cores, which an
attacker on another machine does not.

It prints, per phase, the normal tenants' calls, failures (any answer but 200, or no
answer), p50 and p99 (ms), and the server's peak RSS (MB, from /proc), then the targets:
attack p99 <= 3 x quiet p99, no failures, RSS <= quiet + 100 MB.

    python bench/gateway_attack.py              # 20 s per phase, 10 calls/s
    python bench/gateway_attack.py --short      # 6 s per phase, 5 calls/s (the CI form)
    python bench/gateway_attack.py --json       # one JSON object instead of the table
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from ditto_worker.testing.gateway import GatewayServer

TENANTS = [f"normal-tenant-{i}" for i in range(3)]
ATTACKER = "attacker-token"
HOST = "127.0.0.1"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write_config(folder: Path, max_in_flight: int) -> None:
    tokens = "\n".join(f"    - {{sha256: {_sha(t)}, tenant: {t}, user: u}}" for t in TENANTS)
    (folder / "ditto.yaml").write_text(
        f"""
workers:
  infer: {{local: {{autoStart: false}}}}
plugins:
  sqlite: {{path: '{folder / "memory.sqlite"}'}}
gateway:
  maxInFlight: {max_in_flight}
  identityRatePerS: 50
  identityBurst: 100
  tokens:
{tokens}
    - {{sha256: {_sha(ATTACKER)}, tenant: evil, user: e, nodes: ["MEMORY.GET"]}}
""",
        encoding="utf-8",
    )


def rss_mb(pid: int) -> float:
    """The resident set of ``pid``, MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (Linux /proc)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """The peak RSS of a process, sampled every 0.2 s in a thread while in use."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            self._stop.wait(0.2)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def normal_tenants(url: str, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: one call every 1/rate s (spread over the tenants) for ``seconds``."""
    clients = [
        httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {t}"})
        for t in TENANTS
    ]
    latencies: list[float] = []
    failures: list[str] = []

    async def one(client: httpx.AsyncClient) -> None:
        started = time.perf_counter()
        try:
            answer = await client.post("/v1/nodes/MEMORY.GET", json={"keys": ["k"]})
            if answer.status_code != 200:
                failures.append(f"{answer.status_code} {answer.text[:120]}")
        except httpx.HTTPError as exc:
            failures.append(type(exc).__name__)
        latencies.append((time.perf_counter() - started) * 1000)

    tasks = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(clients[i % len(clients)])))
    await asyncio.gather(*tasks)
    for client in clients:
        await client.aclose()
    return {"calls": len(latencies), "failures": failures, "latencies": latencies}


def _head(path: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {ATTACKER}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


Stop = Any  # a multiprocessing Event: set when the attack should end


async def _send(
    port: int, chunks: list[bytes], pause_s: float, stop: Stop, opened: asyncio.Event
) -> None:
    """One connection: each chunk, ``pause_s`` apart, until the server closes or ``stop``
    is set (the first chunk always goes); ``opened`` is set once the connect ended."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        return
    finally:
        opened.set()
    try:
        for n, chunk in enumerate(chunks):
            if n and (stop.is_set() or reader.at_eof()):
                break
            writer.write(chunk)
            await writer.drain()
            if pause_s:
                await asyncio.sleep(pause_s)
    except OSError:
        pass
    finally:
        writer.close()


async def _repeat(
    port: int, make: Any, stop: Stop, limit: int, pause_s: float, opened: asyncio.Event
) -> int:
    """Reopen a connection ``make()`` describes, until ``stop`` or ``limit`` connections
    (at least one: ``opened`` is set once it is open)."""
    count = 0
    while count == 0 or (not stop.is_set() and count < limit):
        count += 1
        await _send(port, make(), pause_s, stop, opened)
    return count


async def attack(port: int, max_in_flight: int, stop: Stop, started: Any) -> dict[str, int]:
    """The attacker's load (see the module docstring) until ``stop`` is set; ``started``
    is set once every attacking coroutine has opened its first connection (an event, so a
    busy machine's slow start never shortens the attack). Connections opened per kind."""
    path = "/v1/nodes/MEMORY.GET"
    deep = b'{"keys": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    rng = random.Random(37)

    def slow_body() -> list[bytes]:
        return [_head(path, 1000) + b"{"] + [b" "] * 900

    def slowloris() -> list[bytes]:
        return [b"POST /v1/nodes/MEMORY.GET HTTP/1.1\r\n"] + [b"X-A: b\r\n"] * 900

    def bomb() -> list[bytes]:
        size = rng.randint(1, 50) << 20
        start = b"GET /healthz HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
        return [start] + [b"a" * (1 << 20)] * (size >> 20) + [b"\r\n\r\n"]

    def deep_json() -> list[bytes]:
        return [_head(path, len(deep)) + deep]

    def disconnect() -> list[bytes]:
        return [_head(path, 200) + b'{"keys": ["a", "b"']

    plan = [(slow_body, 2 * max_in_flight, 1.0), (slowloris, 64, 1.0), (bomb, 4, 0.0),
            (deep_json, 2, 0.0), (disconnect, 4, 0.0)]  # fmt: skip
    opened = [asyncio.Event() for kind, width, _ in plan for _ in range(width)]
    runs = [(kind.__name__, _repeat(port, kind, stop, 2000, pause, next(each)))
            for each in [iter(opened)] for kind, width, pause in plan
            for _ in range(width)]  # fmt: skip
    gathered = asyncio.gather(*(run for _, run in runs))
    for event in opened:
        await event.wait()
    started.set()
    counts = await gathered
    totals: dict[str, int] = {}
    for (name, _), count in zip(runs, counts, strict=True):
        totals[name] = totals.get(name, 0) + count
    return totals


def _attack_process(port: int, max_in_flight: int, stop: Stop, started: Any, out: Any) -> None:
    import os

    # the attacker's own client work is a loopback artefact (a real one runs elsewhere):
    # at the lowest priority it takes the CPU the server and the tenants leave
    os.nice(19)
    opened: dict[str, Any] = asyncio.run(attack(port, max_in_flight, stop, started))
    out.put({**opened, "attackerCpuS": round(time.process_time(), 1)})


def phase(server: GatewayServer, rate: float, seconds: float) -> dict[str, Any]:
    assert server.process is not None
    cpu_before = cpu_s(server.process.pid)
    with RssSampler(server.process.pid) as rss:
        result = asyncio.run(normal_tenants(server.url, rate, seconds))
    server_cpu = cpu_s(server.process.pid) - cpu_before
    latencies = sorted(result["latencies"])
    return {
        "calls": result["calls"],
        "failures": len(result["failures"]),
        "failureSamples": result["failures"][:5],
        "p50Ms": round(statistics.median(latencies), 2),
        "p99Ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
        "rssMb": round(rss.peak, 1),
        "serverCpuS": round(server_cpu, 1),
    }


def run(seconds: float, rate: float, max_in_flight: int) -> dict[str, Any]:
    """Both phases on one fresh server; the report (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="gateway-attack-") as tmp:
        folder = Path(tmp)
        write_config(folder, max_in_flight)
        with GatewayServer(folder) as server:
            asyncio.run(normal_tenants(server.url, rate, 2.0))  # warm-up
            quiet = phase(server, rate, seconds)
            spawn = multiprocessing.get_context("spawn")
            queue: Any = spawn.Queue()
            stop, started = spawn.Event(), spawn.Event()
            attacker = spawn.Process(
                target=_attack_process, args=(server.port, max_in_flight, stop, started, queue)
            )
            attacker.start()
            # the attack is under way (every attacking connection opened once) before the
            # tenants start again; generous: the attacker runs at nice 19 on a busy machine
            if not started.wait(600):
                raise RuntimeError("the attacker never opened its connections")
            loud = phase(server, rate, seconds)
            stop.set()
            attacker.join(120)
            opened = queue.get(timeout=10) if attacker.exitcode == 0 else {}
            log = server.log()
    ratio = loud["p99Ms"] / quiet["p99Ms"] if quiet["p99Ms"] else float("inf")
    return {
        "seconds": seconds, "ratePerS": rate, "maxInFlight": max_in_flight,
        "quiet": quiet, "attack": loud, "attackConnections": opened,
        "p99Ratio": round(ratio, 2),
        "targets": {"p99": ratio <= 3.0, "failures": loud["failures"] == 0,
                    "rss": loud["rssMb"] <= quiet["rssMb"] + 100},
        "tracebacks": log.count("Traceback"),
    }  # fmt: skip


def table(report: dict[str, Any]) -> str:
    rows = ["| phase | calls | failures | p50 ms | p99 ms | server RSS MB | server CPU s |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name in ("quiet", "attack"):
        p = report[name]
        rows.append(f"| {name} | {p['calls']} | {p['failures']} | {p['p50Ms']} | "
                    f"{p['p99Ms']} | {p['rssMb']} | {p['serverCpuS']} |")  # fmt: skip
    t = report["targets"]
    rows.append(f"\nattack/quiet p99: {report['p99Ratio']}x (target <= 3x: "
                f"{'met' if t['p99'] else 'MISSED'}); failures: "
                f"{'none' if t['failures'] else report['attack']['failureSamples']}; RSS "
                f"+{report['attack']['rssMb'] - report['quiet']['rssMb']:.1f} MB (target <= "
                f"100: {'met' if t['rss'] else 'MISSED'})")  # fmt: skip
    rows.append(f"attacker connections (and its own CPU s): {report['attackConnections']}")
    load = Path("/proc/loadavg").read_text().split()[:3]
    rows.append(f"machine load average at the end: {' '.join(load)}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="6 s per phase (the CI form)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=10.0, help="normal calls per second")
    parser.add_argument("--max-in-flight", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    seconds, rate = (6.0, min(args.rate, 5.0)) if args.short else (args.seconds, args.rate)
    report = run(seconds, rate, args.max_in_flight)
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
