"""What the fleet costs per call, measured side by side in one run.

One Redis and one worker process (the same pool, concurrency and task-events setting for
everything measured) serve both a raw Celery no-op task and the six MEMORY tasks. Printed:

Sequential (one caller), round-trip p50/p95 and throughput of
  (a) a raw Celery no-op task (``send_task`` + ``AsyncResult.get``),
  (b) MEMORY.GET of one record through the fleet (``DittoClient.invoke``),
  (c) the same MEMORY.GET through the direct SDK (``create_memory``, no broker),
with the ratios b/a (our envelope, validation and store over Celery itself) and b/c (the
queue over an in-process call).

Concurrent callers (1, 10, 100): throughput of
  (d) raw Celery no-op, one thread per concurrent caller (Celery has no awaitable result),
  (e) MEMORY.GET through ``await DittoClient.ainvoke`` on one event loop,
with the peak thread count of this process and the peak number of Redis connections.

    python bench/fleet_overhead.py                       # throwaway redis-server
    python bench/fleet_overhead.py --redis redis://127.0.0.1:6379/9 --calls 2000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from ditto_worker.testing.servers import RedisServer

NOOP = "bench.noop"


def measure(fn: Callable[[], Any], calls: int, warmup: int = 50) -> dict[str, float]:
    """p50/p95 latency (ms) and throughput (calls/s) of ``calls`` sequential calls."""
    for _ in range(warmup):
        fn()
    samples = []
    start = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    total = time.perf_counter() - start
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(0.95 * (len(samples) - 1))],
        "calls_per_s": calls / total,
    }


def noop(input: Any = None) -> None:
    """The raw Celery task: does nothing."""


def worker_app(redis_url: str, db_path: str) -> Any:
    """The fleet's worker app with a raw no-op task added on its own queue."""
    from kombu.entity import Exchange, Queue

    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory_worker
    from ditto_worker.config import load_runtime_config
    from ditto_worker.fleet.launch import create_worker_app

    config = load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={})
    app = create_worker_app(config, [lambda: create_memory_worker(SqliteMemoryStore(db_path))])
    app.task(name=NOOP, shared=False)(noop)
    app.conf.task_queues = [*app.conf.task_queues, Queue(NOOP, Exchange(NOOP), NOOP)]
    app.conf.task_routes = {**app.conf.task_routes, NOOP: {"queue": NOOP}}
    return app


def serve(redis_url: str, db_path: str, pool: str, concurrency: int) -> None:
    """Run the benchmark's worker (in its own process)."""
    from ditto_worker.contracts import NODE_QUEUES

    app = worker_app(redis_url, db_path)
    app.worker_main([
        "worker", "-P", pool, "-c", str(concurrency), "-l", "WARNING", "-E",
        "-Q", ",".join([*NODE_QUEUES.values(), NOOP]), "-n", f"bench-{os.getpid()}@%h",
    ])  # fmt: skip


class Peaks:
    """Samples this process's threads and Redis's connected clients every 20 ms."""

    def __init__(self, redis_url: str) -> None:
        self._redis = redis.Redis.from_url(redis_url)
        self.threads = self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.threads = max(self.threads, threading.active_count() - 1)
            clients = int(self._redis.info("clients")["connected_clients"]) - 1
            self.connections = max(self.connections, clients)
            time.sleep(0.02)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._redis.close()


def concurrent_raw(app: Any, callers: int, per_caller: int) -> float:
    def caller() -> None:
        for _ in range(per_caller):
            app.send_task(NOOP, kwargs={"input": None}, queue=NOOP).get(timeout=30)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return callers * per_caller / (time.perf_counter() - start)


def concurrent_fleet(client: Any, callers: int, per_caller: int, record_id: str) -> float:
    async def caller() -> None:
        for _ in range(per_caller):
            result = await client.ainvoke("MEMORY.GET", {"ids": [record_id]}, timeout=30)
            assert result.status == "success", result.error

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        return callers * per_caller / (time.perf_counter() - start)

    return asyncio.run(run())


def _start_redis() -> RedisServer:
    try:
        return RedisServer().start()
    except RuntimeError as exc:
        raise SystemExit(f"{exc}: pass --redis URL or install redis-server") from None


def _print_rows(rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"{'path':<34}{'p50 ms':>9}{'p95 ms':>9}{'calls/s':>10}")
    for name, row in rows:
        print(f"{name:<34}{row['p50_ms']:>9.3f}{row['p95_ms']:>9.3f}{row['calls_per_s']:>10.0f}")


def run(redis_url: str, calls: int, pool: str, concurrency: int, per_caller: int) -> None:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    folder = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    db_path = str(folder / "bench.sqlite")
    direct = create_memory(SqliteMemoryStore(db_path))
    record_id = (
        direct.write({"memories": [{"key": "pref", "content": {"lang": "en"}}]}).output[0].id
    )
    worker = subprocess.Popen(
        [sys.executable, __file__, "--serve", redis_url, db_path, pool, str(concurrency)]
    )
    raw_app = worker_app(redis_url, db_path)
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    get_input = {"ids": [record_id]}
    try:
        raw_app.send_task(NOOP, queue=NOOP).get(timeout=60)  # wait until the worker is up
        a = measure(
            lambda: raw_app.send_task(NOOP, kwargs={"input": get_input}, queue=NOOP).get(
                timeout=10
            ),
            calls,
        )
        b = measure(lambda: client.invoke("MEMORY.GET", get_input, timeout=10), calls)
        c = measure(lambda: direct.get(get_input), calls)
        print(f"fleet overhead: one worker process, pool={pool} -c {concurrency}, task events on")
        print(f"sequential, {calls} calls each")
        _print_rows([
            ("(a) raw Celery no-op", a),
            ("(b) MEMORY.GET via fleet", b),
            ("(c) MEMORY.GET via direct SDK", c),
        ])  # fmt: skip
        for label, x, y in (("b/a", b, a), ("b/c", b, c)):
            print(
                f"ratio {label}: p50 latency {x['p50_ms'] / y['p50_ms']:.2f}x, "
                f"throughput {y['calls_per_s'] / x['calls_per_s']:.2f}x lower"
            )
        print(f"\nconcurrent callers, {per_caller} calls each (threads/connections: peaks "
              "in this process / on Redis, worker included)")  # fmt: skip
        print(f"{'callers':>8}{'(d) raw thr/s':>15}{'thr':>5}{'conn':>6}"
              f"{'(e) ainvoke/s':>15}{'thr':>5}{'conn':>6}{'e/d':>7}")  # fmt: skip
        for callers in (1, 10, 100):
            # the fleet first: raw Celery leaves a result connection per caller thread open
            with Peaks(redis_url) as pe:
                e = concurrent_fleet(client, callers, per_caller, record_id)
            with Peaks(redis_url) as pd:
                d = concurrent_raw(raw_app, callers, per_caller)
            print(f"{callers:>8}{d:>15.0f}{pd.threads:>5}{pd.connections:>6}"
                  f"{e:>15.0f}{pe.threads:>5}{pe.connections:>6}{e / d:>7.2f}")  # fmt: skip
    finally:
        client.close()
        raw_app.close()
        worker.terminate()
        worker.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", help="Redis URL (default: start a throwaway redis-server)")
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per path")
    parser.add_argument("--per-caller", type=int, default=20, help="calls per concurrent caller")
    parser.add_argument("--pool", default="threads", choices=["solo", "threads", "prefork"])
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    server = None
    url = args.redis
    if url is None:
        server = _start_redis()
        url = server.url + "/0"
    try:
        run(url, args.calls, args.pool, args.concurrency, args.per_caller)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
