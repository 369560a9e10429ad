"""Coalescing on vs off vs raw Celery, and where each call's CPU goes (issue 36 Figures).

One Redis and ONE worker process (``prefork -c 4``, task events on: what ``ditto.yaml``
ships for the MEMORY read group) serve MEMORY.GET, MEMORY.SEARCH and a raw Celery no-op
task (``RAW.NOOP``, bench/fleet_overhead.py's). Paths, measured in interleaved rounds:

* ``on``  — ``DittoClient.ainvoke`` with ``fleet.coalescing.enabled`` (``inFlight`` 4 =
  the worker's pool);
* ``off`` — the same client with coalescing off (one message per call);
* ``raw`` — Celery's own client, one ``send_task`` + ``AsyncResult.get`` per call, one
  thread per caller (Celery has no awaitable result);
* ``sdk`` — the ceiling: the same call through the SDK in this process, one caller.

Closed loop (each caller sends its next call when the last one answered) at 1, 10 and 100
callers: p50 and p99 latency and calls/s, median over rounds. Then open loop: ``--rate``
calls/s offered for ``--seconds`` from 500 callers (a call is sent at its scheduled time
whether or not earlier ones answered; latency from that time): lost calls, p50, p99.
Then the capacity model's inputs (``--capacity``): for MEMORY.GET at 100 callers, on and
off, CPU ms per call in the client (this process), the worker (main + pool processes,
``/proc``) and Redis (``INFO cpu``), Redis commands and bytes per call (``INFO stats``),
and calls/s per worker core.

    python bench/coalescing.py                       # throwaway redis-server
    python bench/coalescing.py --rounds 9 --capacity
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_overhead import RAW, client_table, worker_app  # noqa: E402
from loops import in_threads, median_row, redis_option, with_redis  # noqa: E402

RECORDS = 1000
NODES = {"GET": "MEMORY.GET", "SEARCH": "MEMORY.SEARCH"}


def inputs(node: str, i: int) -> dict[str, Any]:
    """The i-th call's input: a GET of one key, or a keyword SEARCH of one word."""
    if node == "MEMORY.GET":
        return {"keys": [f"k{i % RECORDS}"]}
    return {"query": f"topic{i % 50}", "limit": 5}


def summary(latencies: list[float], seconds: float) -> tuple[float, float, float]:
    """``(p50 ms, p99 ms, calls/s)``."""
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000, len(ordered) / seconds


async def closed_async(client: Any, node: str, callers: int, per: int) -> tuple[float, ...]:
    latencies: list[float] = []

    async def caller(c: int) -> None:
        for n in range(per):
            t0 = time.perf_counter()
            result = await client.ainvoke(node, inputs(node, c * per + n), timeout=60)
            assert result.status == "success", result.error
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(callers)))
    return summary(latencies, time.perf_counter() - start)


def closed_raw(app: Any, callers: int, per: int) -> tuple[float, ...]:
    latencies: list[float] = []

    def caller() -> None:
        for _ in range(per):
            t0 = time.perf_counter()
            app.send_task(RAW, kwargs={"input": None}, queue=RAW.lower()).get(timeout=60)
            latencies.append(time.perf_counter() - t0)

    return summary(latencies, in_threads(callers, caller))


def closed_sdk(direct: Any, node: str, calls: int) -> tuple[float, ...]:
    latencies = []
    start = time.perf_counter()
    for n in range(calls):
        t0 = time.perf_counter()
        direct.execute(node, inputs(node, n))
        latencies.append(time.perf_counter() - t0)
    return summary(latencies, time.perf_counter() - start)


async def open_loop(client: Any, node: str, rate: float, seconds: float) -> tuple[Any, ...]:
    """``rate`` calls/s for ``seconds`` from 500 callers: (lost, p50 ms, p99 ms, calls/s)."""
    total = int(rate * seconds)
    latencies: list[float] = []
    lost = 0
    gate = asyncio.Semaphore(500)  # 500 callers: at most 500 calls outstanding

    async def one(i: int, at: float) -> None:
        nonlocal lost
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        async with gate:
            result = await client.ainvoke(node, inputs(node, i), timeout=30)
        if result.status != "success":
            lost += 1
        latencies.append(time.perf_counter() - at)

    start = time.perf_counter() + 0.2
    await asyncio.gather(*(one(i, start + i / rate) for i in range(total)))
    p50, p99, _ = summary(latencies, 1.0)
    return lost, p50, p99, total / (time.perf_counter() - start)


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live children (``/proc``)."""
    tick = 100.0
    total = 0.0
    pids = [str(pid)]
    for task in Path(f"/proc/{pid}/task").iterdir():
        pids += (task / "children").read_text().split()
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def redis_counters(client: Any) -> dict[str, float]:
    cpu, stats = client.info("cpu"), client.info("stats")
    return {
        "cpu": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        "commands": float(stats["total_commands_processed"]),
        "bytes": float(stats["total_net_input_bytes"]) + float(stats["total_net_output_bytes"]),
    }


def capacity(clients: dict[str, Any], worker_pid: int, url: str, calls: int) -> None:
    """CPU ms per call in client, worker and Redis; Redis commands and bytes per call."""
    import redis

    r = redis.Redis.from_url(url)
    print(f"\ncapacity inputs: MEMORY.GET, 100 callers, {calls} calls per path")
    print(f"{'path':<6}{'calls/s':>9}{'client ms':>11}{'worker ms':>11}{'redis ms':>10}"
          f"{'cmds':>7}{'bytes':>8}{'calls/s per worker core':>25}")  # fmt: skip
    for label, client in clients.items():
        before = (time.process_time(), proc_cpu_s(worker_pid), redis_counters(r))
        t0 = time.perf_counter()
        asyncio.run(closed_async(client, "MEMORY.GET", 100, calls // 100))
        wall = time.perf_counter() - t0
        after = (time.process_time(), proc_cpu_s(worker_pid), redis_counters(r))
        client_ms = (after[0] - before[0]) * 1000 / calls
        worker_ms = (after[1] - before[1]) * 1000 / calls
        rd = {k: (after[2][k] - before[2][k]) / calls for k in before[2]}
        per_core = 1000 / worker_ms if worker_ms > 0 else float("inf")
        print(f"{label:<6}{calls / wall:>9.0f}{client_ms:>11.3f}{worker_ms:>11.3f}"
              f"{rd['cpu'] * 1000:>10.3f}{rd['commands']:>7.1f}{rd['bytes']:>8.0f}"
              f"{per_core:>25.0f}")  # fmt: skip
    r.close()


def measure(url: str, args: argparse.Namespace) -> None:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory
    from ditto_worker.config import FleetSettings
    from ditto_worker.config.fleet import CoalescingSettings
    from ditto_worker.fleet import DittoClient

    folder = Path(tempfile.mkdtemp(prefix="bench-coalescing-"))
    db_path = str(folder / "bench.sqlite")
    direct = create_memory(SqliteMemoryStore(db_path))
    direct.write({"memories": [{"key": f"k{i}", "content": f"note {i} about topic{i % 50}"}
                               for i in range(RECORDS)]})  # fmt: skip
    here = str(Path(__file__).resolve().parent / "fleet_overhead.py")
    worker = subprocess.Popen([sys.executable, here, "--serve", url, db_path, "prefork", "4", "on"])
    raw_app = worker_app(url, db_path)
    table = client_table(db_path)
    on = CoalescingSettings(enabled=True, in_flight=4, max_calls=args.max_calls,
                            max_wait_us=args.max_wait_us)  # fmt: skip
    off = CoalescingSettings(enabled=False)
    clients = {
        "on": DittoClient.from_fleet(FleetSettings(broker_url=url, coalescing=on), nodes=table),
        "off": DittoClient.from_fleet(FleetSettings(broker_url=url, coalescing=off), nodes=table),
    }
    try:
        raw_app.send_task(RAW, queue=RAW.lower()).get(timeout=600)  # the worker is up
        for client in clients.values():
            for node in NODES.values():
                asyncio.run(closed_async(client, node, 10, 20))  # warm up
        load = " ".join(f"{x:.1f}" for x in __import__("os").getloadavg())
        print(f"coalescing bench: worker prefork -c 4, task events on; {args.rounds} "
              f"interleaved rounds; load average at start {load}")  # fmt: skip
        for short, node in NODES.items():
            closed_table(short, node, clients, raw_app, direct, args)
        ratio_rounds(clients, args)
        print(f"\nopen loop: {args.rate:.0f} calls/s offered for {args.seconds:.0f} s from 500 "
              "callers (latency from each call's scheduled time)")  # fmt: skip
        print(f"{'node':<8}{'path':<6}{'lost':>6}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>9}")
        for short, node in NODES.items():
            for label, client in clients.items():
                lost, p50, p99, rate = asyncio.run(open_loop(client, node, args.rate, args.seconds))
                print(f"{short:<8}{label:<6}{lost:>6}{p50:>9.1f}{p99:>9.1f}{rate:>9.0f}")
        if args.capacity:
            capacity(clients, worker.pid, url, args.capacity_calls)
    finally:
        for client in clients.values():
            client.close()
        raw_app.close()
        worker.terminate()
        worker.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def closed_table(short: str, node: str, clients: dict[str, Any], raw_app: Any, direct: Any,
                 args: argparse.Namespace) -> None:  # fmt: skip
    print(f"\n{node}, closed loop (median of {args.rounds} rounds): p50 ms / p99 ms / calls/s")
    print(f"{'callers':>8}{'on':>24}{'off':>24}{'raw Celery':>24}{'on/off calls/s':>16}")
    sdk = closed_sdk(direct, node, 500)
    for callers in (1, 10, 100):
        per = {1: args.calls, 10: max(1, args.calls // 5), 100: max(1, args.calls // 20)}[callers]
        rows: dict[str, list[tuple[float, ...]]] = {"on": [], "off": [], "raw": []}
        for _ in range(args.rounds):
            for label, client in clients.items():
                rows[label].append(asyncio.run(closed_async(client, node, callers, per)))
            rows["raw"].append(closed_raw(raw_app, callers, per))
        med = {k: median_row(v) for k, v in rows.items()}
        cells = "".join(f"{m[0]:>8.2f}/{m[1]:>7.2f}/{m[2]:>7.0f}" for m in med.values())
        print(f"{callers:>8}{cells}{med['on'][2] / med['off'][2]:>15.2f}x")
    print(f"{'sdk':>8}{sdk[0]:>8.3f}/{sdk[1]:>7.3f}/{sdk[2]:>7.0f}  (in-process, 1 caller)")


def ratio_rounds(clients: dict[str, Any], args: argparse.Namespace) -> None:
    """1 caller: the on/off p50 ratio per round, over ``max(9, rounds)`` rounds."""
    ratios = []
    for _ in range(max(9, args.rounds)):
        on = asyncio.run(closed_async(clients["on"], "MEMORY.GET", 1, args.calls))[0]
        off = asyncio.run(closed_async(clients["off"], "MEMORY.GET", 1, args.calls))[0]
        ratios.append(on / off)
    print(f"\nMEMORY.GET, 1 caller: p50 on/off per round, median of {len(ratios)}: "
          f"{statistics.median(ratios):.3f}x (range {min(ratios):.3f}-{max(ratios):.3f}; "
          "target <= 1.10x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    redis_option(parser)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=200, help="calls per round at 1 caller")
    parser.add_argument("--rate", type=float, default=1000.0, help="open loop calls/s")
    parser.add_argument("--seconds", type=float, default=5.0, help="open loop duration")
    parser.add_argument("--max-calls", type=int, default=64, help="fleet.coalescing.maxCalls")
    parser.add_argument("--max-wait-us", type=int, default=2000,
                        help="fleet.coalescing.maxWaitUs")  # fmt: skip
    parser.add_argument("--capacity", action="store_true", help="print the capacity inputs")
    parser.add_argument("--capacity-calls", type=int, default=3000)
    args = parser.parse_args()
    with_redis(args.redis, lambda url: measure(url, args))


if __name__ == "__main__":
    main()
