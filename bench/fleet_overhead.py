"""What the fleet costs per call, measured side by side in one run.

Against one Redis and one worker (the same pool, concurrency and task-events setting for
all), this prints the round-trip latency p50/p95 and sequential throughput of:

  (a) a raw Celery no-op task (``send_task`` + ``get``),
  (b) MEMORY.GET of one record through the fleet (``DittoClient.invoke``),
  (c) the same MEMORY.GET through the direct SDK (``create_memory``, no broker),

and the ratios b/a (what our envelope, validation and store cost over Celery itself) and
b/c (what the queue costs over an in-process call).

    python bench/fleet_overhead.py --redis redis://127.0.0.1:6379/9 --calls 2000

Without ``--redis`` it starts a throwaway ``redis-server`` on a free loopback port.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery.contrib.testing.worker import start_worker

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory, create_memory_worker
from ditto_worker.client import DittoClient
from ditto_worker.config import load_runtime_config
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet import create_worker_app

NOOP_QUEUE = "bench.noop"


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


def _start_redis() -> tuple[str, subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tempfile.mkdtemp(prefix="bench-redis-")
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: pass --redis URL or install redis-server")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0", proc, folder


def run(redis_url: str, calls: int, pool: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    store = SqliteMemoryStore(folder / "bench.sqlite")
    direct = create_memory(store)
    record_id = (
        direct.write({"memories": [{"key": "pref", "content": {"lang": "en"}}]}).output[0].id
    )
    config = load_runtime_config(
        {"fleet": {"brokerUrl": redis_url, "resultBackend": redis_url}}, env={}
    )
    app = create_worker_app(config, lambda: create_memory_worker(store))

    @app.task(name="bench.noop")
    def noop(input: Any = None) -> None:
        return None

    from kombu import Exchange, Queue

    app.conf.task_queues = [
        *app.conf.task_queues,
        Queue(NOOP_QUEUE, Exchange(NOOP_QUEUE), NOOP_QUEUE),
    ]
    app.conf.task_routes = {**app.conf.task_routes, "bench.noop": {"queue": NOOP_QUEUE}}
    client = DittoClient(app)
    get_input = {"ids": [record_id]}

    def raw() -> None:
        app.send_task("bench.noop", kwargs={"input": get_input}, queue=NOOP_QUEUE).get(
            timeout=10, interval=0.01
        )

    def fleet() -> None:
        result = client.invoke("MEMORY.GET", get_input, timeout=10)
        assert result.status == "success" and result.output[0].id == record_id

    def sdk() -> None:
        result = direct.get(get_input)
        assert result.status == "success"

    with start_worker(
        app,
        pool=pool,
        concurrency=1,
        perform_ping_check=False,
        loglevel="WARNING",
        queues=[*NODE_QUEUES.values(), NOOP_QUEUE],
    ):
        a = measure(raw, calls)
        b = measure(fleet, calls)
    c = measure(sdk, calls)
    print(
        f"fleet overhead, {calls} sequential calls each, pool={pool}, task events on, {redis_url}"
    )
    print(f"{'path':<34}{'p50 ms':>9}{'p95 ms':>9}{'calls/s':>10}")
    for name, row in (
        ("(a) raw Celery no-op", a),
        ("(b) MEMORY.GET via fleet", b),
        ("(c) MEMORY.GET via direct SDK", c),
    ):
        print(f"{name:<34}{row['p50_ms']:>9.3f}{row['p95_ms']:>9.3f}{row['calls_per_s']:>10.0f}")
    for label, x, y in (("b/a", b, a), ("b/c", b, c)):
        print(
            f"ratio {label}: p50 latency {x['p50_ms'] / y['p50_ms']:.2f}x, "
            f"throughput {y['calls_per_s'] / x['calls_per_s']:.2f}x lower"
        )
    store.close()
    shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", help="Redis URL (default: start a throwaway redis-server)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--pool", default="solo", choices=["solo", "threads", "prefork"])
    args = parser.parse_args()
    proc = None
    folder = None
    url = args.redis
    if url is None:
        url, proc, folder = _start_redis()
    try:
        run(url, args.calls, args.pool)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(folder or "", ignore_errors=True)


if __name__ == "__main__":
    main()
