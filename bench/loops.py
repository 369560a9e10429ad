"""The loops the fleet benches share (bench/coalescing.py, bench/fleet_overhead.py,
bench/graph.py): a throwaway Redis unless one is given, the bench's one worker process,
per-call latencies and calls/s from caller threads or one event loop, and medians over
interleaved rounds.

Times are wall clock (``time.perf_counter``); latencies in milliseconds, rates in calls
per second. Nothing here asserts a speed: the benches print figures side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ditto_worker.testing.servers import RedisServer

__all__ = [
    "in_threads",
    "median_row",
    "p50_ms",
    "p50_ms_async",
    "redis_option",
    "round_row",
    "run_worker",
    "with_redis",
]


def redis_option(parser: argparse.ArgumentParser) -> None:
    """``--redis URL`` (default: a throwaway ``redis-server``, :func:`with_redis`)."""
    parser.add_argument("--redis", help="Redis URL (default: start a throwaway redis-server)")


def with_redis(url: str | None, run: Callable[[str], None]) -> None:
    """``run(url)``, on a throwaway ``redis-server`` (database 0) when ``url`` is None."""
    if url is not None:
        run(url)
        return
    try:
        server = RedisServer().start()
    except RuntimeError as exc:
        raise SystemExit(f"{exc}: pass --redis URL or install redis-server") from None
    try:
        run(server.url + "/0")
    finally:
        server.close()


def run_worker(app: Any, pool: str, concurrency: int, name: str, events: bool = True) -> None:
    """Run the bench's one worker process on every queue of ``app`` (``-E`` with task
    events, as ``ditto-worker worker`` does); ``name``: the hostname's prefix."""
    queues = [q.name for q in app.conf.task_queues]
    app.worker_main([
        "worker", "-P", pool, "-c", str(concurrency), "-l", "WARNING", *(["-E"] if events else []),
        "-Q", ",".join(queues), "-n", f"{name}-{os.getpid()}@%h",
    ])  # fmt: skip


def _succeeded(result: Any) -> None:
    status = getattr(result, "status", "success")
    assert status == "success", result


def p50_ms(fn: Callable[[], Any], calls: int) -> float:
    """Median milliseconds of ``calls`` sequential calls of ``fn``; a result with a
    ``status`` must be ``success``."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - start) * 1000)
        _succeeded(result)
    return statistics.median(samples)


def p50_ms_async(make: Callable[[], Awaitable[Any]], calls: int) -> float:
    """:func:`p50_ms` of ``await make()`` on one event loop."""

    async def run() -> float:
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            result = await make()
            samples.append((time.perf_counter() - start) * 1000)
            _succeeded(result)
        return statistics.median(samples)

    return asyncio.run(run())


def in_threads(callers: int, caller: Callable[[], None]) -> float:
    """Run ``caller`` once in each of ``callers`` threads, all at once; the wall seconds
    until the last one ends."""
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def median_row(rows: list[tuple[float, ...]]) -> tuple[float, ...]:
    """The median of each column of ``rows`` (one row a round)."""
    return tuple(statistics.median(column) for column in zip(*rows, strict=True))


def round_row(
    label: str, values: list[float], unit: str, digits: int = 3, widths: tuple[int, int] = (44, 7)
) -> str:
    """One printed row: ``label``, the median of ``values`` (one a round), ``unit`` and
    the range (``widths``: of the label and the unit columns)."""
    spread = f"{min(values):.{digits}f}-{max(values):.{digits}f}"
    median = statistics.median(values)
    return f"{label:<{widths[0]}}{median:>10.{digits}f} {unit:<{widths[1]}}{spread:>18}"
