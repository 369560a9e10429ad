"""What the fleet costs per call over Celery itself, measured in interleaved rounds.

One Redis and ONE worker process (the same pool, concurrency and task-events setting for
everything measured) serve a raw Celery task and the fleet's nodes. Each round measures
every path once, in a fixed order, and the rounds repeat (``--rounds``, at least 5), so a
noisy neighbour on this shared machine hits every path alike; medians over rounds are
reported.

Sequential (one caller), p50 latency per path:
  (a)  raw Celery task: ``send_task`` + ``AsyncResult.get`` (Celery's own client);
  (a') the same raw task through ``DittoClient.invoke`` (our client, no runtime envelope);
  (e)  ``BENCH.NOOP``, a worker kind whose handler returns ``{}``, through ``invoke``
       (our client + the runtime envelope: NodeContext, cancel flag, run_node);
  (b)  ``MEMORY.GET`` of one record through ``invoke`` (+ the SDK and the SQLite store);
  (c)  the same MEMORY.GET through the direct SDK in this process (SDK + store only).
Where the time goes: client = a' - a; envelope = e - a'; SDK + store + output = b - e
(of which SDK + store alone: c). Target: b / a <= 1.25 (issue 12).

Concurrent callers (1, 10, 100), calls/s:
  (d) raw Celery task, one thread per caller (Celery has no awaitable result);
  (f) MEMORY.GET through ``await DittoClient.ainvoke`` on one event loop.
Targets: f / d >= 0.9 at 10 callers and >= 1.0 at 100.

Each pool is measured with its own worker process, one after the other, in the same run:
``prefork -c 4`` (what ``ditto.yaml`` ships for the MEMORY read group) and ``threads -c 8``
(one process; its tasks share the GIL with the worker's main thread, which acks, publishes
task events and re-arms BRPOP while a task runs: a task that releases the GIL, as every
SQLite call does, waits for that work; a no-op task does not). The raw task runs on the
same worker, so the same transport (kombu's Redis transport, :mod:`ditto_worker.fleet.transport`).

    python bench/fleet_overhead.py                         # throwaway redis-server
    python bench/fleet_overhead.py --rounds 9 --calls 300 --pools threads:8,solo:1,prefork:2
    python bench/fleet_overhead.py --pools prefork:4 --events on,off,on,off   # task events' cost

``--events``: ``fleet.taskEvents`` of the worker and the client, one table each, in turn
(``on,off,on,off`` alternates them, for a noisy host).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loops import in_threads, p50_ms, redis_option, round_row, run_worker, with_redis  # noqa: E402

RAW = "RAW.NOOP"
"""The raw Celery task: answers a NodeResult-shaped dict with no runtime envelope."""


def raw_noop(self: Any, input: Any = None) -> dict[str, Any]:
    return {"executionId": self.request.id, "node": RAW, "status": "success", "output": {}}


def bench_kind() -> Any:
    from ditto_worker.runtime import NodeSpec, WorkerDefinition

    return WorkerDefinition.of("BENCH", [NodeSpec("BENCH.NOOP", lambda input, ctx: {})])


def definitions(db_path: str) -> list[Any]:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory_worker

    return [lambda: create_memory_worker(SqliteMemoryStore(db_path)), bench_kind]


def worker_app(redis_url: str, db_path: str, events: bool = True) -> Any:
    """The fleet's worker app (MEMORY + BENCH) with the raw task on its own queue;
    ``events``: ``fleet.taskEvents``."""
    from kombu.entity import Exchange, Queue

    from ditto_worker.config import load_runtime_config
    from ditto_worker.fleet.launch import create_worker_app

    fleet = {"brokerUrl": redis_url, "taskEvents": events}
    config = load_runtime_config({"fleet": fleet}, env={})
    app = create_worker_app(config, definitions(db_path))
    app.task(name=RAW, bind=True, shared=False)(raw_noop)
    queue = RAW.lower()
    app.conf.task_queues = [*app.conf.task_queues, Queue(queue, Exchange(queue), queue)]
    app.conf.task_routes = {**app.conf.task_routes, RAW: {"queue": queue}}
    return app


def serve(redis_url: str, db_path: str, pool: str, concurrency: int, events: bool) -> None:
    """Run the benchmark's one worker process (``-E`` with task events, as
    ``ditto-worker worker`` does)."""
    run_worker(worker_app(redis_url, db_path, events), pool, concurrency, "bench", events)


def client_table(db_path: str) -> dict[str, Any]:
    """The client's node table: the fleet's nodes plus the raw task as a node."""
    from ditto_worker.runtime import NodeSpec, WorkerDefinition
    from ditto_worker.runtime.registry import node_table

    raw = WorkerDefinition.of("RAW", [NodeSpec(RAW, lambda input, ctx: {})])
    built = [d() if callable(d) else d for d in definitions(db_path)]
    return dict(node_table([*built, raw]))


def concurrent_raw(app: Any, callers: int, per_caller: int) -> float:
    def caller() -> None:
        for _ in range(per_caller):
            app.send_task(RAW, kwargs={"input": None}, queue=RAW.lower()).get(timeout=30)

    return callers * per_caller / in_threads(callers, caller)


def concurrent_fleet(client: Any, callers: int, per_caller: int, get_input: Any) -> float:
    async def caller() -> None:
        for _ in range(per_caller):
            result = await client.ainvoke("MEMORY.GET", get_input, timeout=30)
            assert result.status == "success", result.error

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        return callers * per_caller / (time.perf_counter() - start)

    return asyncio.run(run())


def run(redis_url: str, args: argparse.Namespace) -> None:
    """One table per ``pool:concurrency`` of ``--pools``, each on its own worker process."""
    for spec in args.pools.split(","):
        pool, _, concurrency = spec.partition(":")
        if pool not in ("solo", "threads", "prefork"):
            raise SystemExit(f"unknown pool {pool!r} in --pools (solo, threads, prefork)")
        for events in args.events.split(","):
            if events not in ("on", "off"):
                raise SystemExit(f"unknown --events {events!r} (on, off)")
            measure(redis_url, args, pool, int(concurrency or 1), events == "on")
            print()


def measure(
    redis_url: str, args: argparse.Namespace, pool: str, concurrency: int, events: bool = True
) -> None:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    folder = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    db_path = str(folder / "bench.sqlite")
    direct = create_memory(SqliteMemoryStore(db_path))
    record = direct.write({"memories": [{"key": "pref", "content": {"lang": "en"}}]}).output[0]
    get_input = {"ids": [record.id]}
    worker = subprocess.Popen([sys.executable, __file__, "--serve", redis_url, db_path,
                               pool, str(concurrency), "on" if events else "off"])  # fmt: skip
    raw_app = worker_app(redis_url, db_path, events)
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url, task_events=events),
                                    nodes=client_table(db_path))  # fmt: skip
    paths: dict[str, Callable[[], Any]] = {
        "a": lambda: raw_app.send_task(RAW, kwargs={"input": get_input}, queue=RAW.lower()).get(
            timeout=10
        ),  # fmt: skip
        "a'": lambda: client.invoke(RAW, get_input, timeout=10),
        "e": lambda: client.invoke("BENCH.NOOP", get_input, timeout=10),
        "b": lambda: client.invoke("MEMORY.GET", get_input, timeout=10),
        "c": lambda: direct.get(get_input),
    }
    try:
        raw_app.send_task(RAW, queue=RAW.lower()).get(timeout=600)  # the worker is up
        for fn in paths.values():  # warm up every path
            for _ in range(50):
                fn()
        rounds: dict[str, list[float]] = {key: [] for key in paths}
        for _ in range(args.rounds):
            for key, fn in paths.items():
                rounds[key].append(p50_ms(fn, args.calls))
        ratio = [b / a for a, b in zip(rounds["a"], rounds["b"], strict=True)]
        setup = f"pool={pool} -c {concurrency}, task events {'on' if events else 'off'}"
        print(f"fleet overhead: one worker process, {setup}; {args.rounds} interleaved rounds "
              f"of {args.calls} calls per path")  # fmt: skip
        print(f"{'path (p50 per round; median of rounds)':<44}{'median':>10} {'':<7}"
              f"{'range':>18}")  # fmt: skip
        labels = {
            "a": "(a)  raw Celery task, Celery's client",
            "a'": "(a') raw Celery task, DittoClient.invoke",
            "e": "(e)  BENCH.NOOP (runtime envelope)",
            "b": "(b)  MEMORY.GET via the fleet",
            "c": "(c)  MEMORY.GET, direct SDK in-process",
        }
        for key, label in labels.items():
            print(round_row(label, rounds[key], "ms"))
        print(round_row("ratio b/a per round (target <= 1.25)", ratio, "x"))
        med = {key: statistics.median(values) for key, values in rounds.items()}
        ours = med["a'"]
        print("where the time goes (medians, ms):")
        print(f"  broker + Celery worker + result, raw   {med['a']:>8.3f}  (a)")
        print(f"  our client instead of Celery's         {ours - med['a']:>+8.3f}  (a' - a)")
        print(f"  runtime envelope (context, flag, run)  {med['e'] - ours:>+8.3f}  (e - a')")
        print(f"  SDK + store + output                   {med['b'] - med['e']:>+8.3f}  (b - e)")
        print(f"    of which SDK + store in-process      {med['c']:>8.3f}  (c)")
        print(f"\nconcurrent callers, {args.per_caller} calls each, calls/s "
              f"(median of {args.rounds} interleaved rounds)")  # fmt: skip
        print(f"{'callers':>8}{'(d) raw/s':>12}{'(f) ainvoke/s':>15}{'f/d':>7}  target")
        for callers in (1, 10, 100):
            raw_rates, fleet_rates = [], []
            for _ in range(args.rounds):
                fleet_rates.append(concurrent_fleet(client, callers, args.per_caller, get_input))
                raw_rates.append(concurrent_raw(raw_app, callers, args.per_caller))
            d, f = statistics.median(raw_rates), statistics.median(fleet_rates)
            target = {10: ">= 0.9", 100: ">= 1.0"}.get(callers, "")
            print(f"{callers:>8}{d:>12.0f}{f:>15.0f}{f / d:>7.2f}  {target}")
    finally:
        client.close()
        raw_app.close()
        worker.terminate()
        worker.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6] == "on")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    redis_option(parser)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (>= 5)")
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per path/round")
    parser.add_argument("--per-caller", type=int, default=10, help="calls per concurrent caller")
    parser.add_argument(
        "--events",
        default="on",
        help="fleet.taskEvents per table: on, off or on,off (both, in turn)",
    )
    parser.add_argument("--pools", default="prefork:4,threads:8",
                        help="pool:concurrency list, each measured on its own worker")  # fmt: skip
    args = parser.parse_args()
    with_redis(args.redis, lambda url: run(url, args))


if __name__ == "__main__":
    main()
