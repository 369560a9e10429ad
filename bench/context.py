"""What CONTEXT.UPDATE in cache mode costs over a bare Redis round trip, in one run.

One Redis (a throwaway ``redis-server`` unless ``--redis``), one context of ``--items``
items of ``--content-bytes`` each, one ingress item per update (replacing an item in
turn, so the context keeps its size). Printed, one caller, sequential:

  (a) bare redis-py ``GET`` + ``SET … PX`` of the context's JSON (what a hand-written
      read-modify-write costs at the least: two round trips, no merge, no checks);
  (b) ``CONTEXT.UPDATE`` through its handler (``create_context_worker(...)``, a
      NodeContext built here): input validation, limits, one EVALSHA, output parsing;
  (c) ``CONTEXT.LOAD`` through its handler;
  (d) ``CONTEXT.UPDATE`` through the fleet: ``Runtime.invoke`` (``create_ditto`` on the
      broker, the scope as the call's header) -> Redis (the broker on another database
      of the same server) -> a real worker process, ``python -m ditto_worker worker
      --nodes context`` (its own pool: threads, 8) -> the handler -> the cache -> the
      result back through Redis;

with calls/s, p50/p95 ms and the ratio to (a). Then the fleet with ``--writers``
concurrent callers (calls/s: what one context worker process serves), and 8 concurrent
writers on one key: the Lua update (b) against the alternative it replaced,
WATCH/GET/MULTI/SET/EXEC with the merge in Python (optimistic retries counted), calls/s
each.

    python bench/context.py                       # throwaway redis-server
    python bench/context.py --redis redis://127.0.0.1:6379/9 --calls 5000 --items 100

With ``--redis``, the given database is flushed at the end and the fleet's broker uses
the next one (``/10`` above).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from ditto_worker import create_ditto
from ditto_worker.config import load_runtime_config
from ditto_worker.context import ContextWorkerSettings, create_context_worker
from ditto_worker.memory.scope import Scope
from ditto_worker.runtime import NodeContext
from ditto_worker.testing.servers import RedisServer, log_tail, stop_process

Call = Callable[[int], Any]
"""One measured call; its argument is the call's sequence number."""


def measure(fn: Call, calls: int, warmup: int = 100) -> dict[str, float]:
    """p50/p95 latency (ms) and throughput (calls/s) of ``calls`` sequential calls."""
    for k in range(warmup):
        fn(k)
    samples = []
    start = time.perf_counter()
    for k in range(calls):
        t0 = time.perf_counter()
        fn(k)
        samples.append((time.perf_counter() - t0) * 1000)
    total = time.perf_counter() - start
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(0.95 * (len(samples) - 1))],
        "calls_per_s": calls / total,
    }


def item(k: int, content: str) -> dict[str, Any]:
    return {"id": f"memory:{k}", "sourceNode": "MEMORY.SEARCH", "content": content}


class Setup:
    """The shared facts of one run: Redis, the context's shape, the worker definition."""

    def __init__(self, url: str, items: int, content_bytes: int) -> None:
        self.url = url
        self.items = items
        self.content = "x" * content_bytes
        self.scope = Scope("bench", uuid.uuid4().hex[:8])
        self.definition = create_context_worker(
            ContextWorkerSettings(redis_url=url, max_items=max(1000, items))
        )
        self.update = self.definition.nodes["CONTEXT.UPDATE"].handler
        self.load = self.definition.nodes["CONTEXT.LOAD"].handler
        self.client = redis.Redis.from_url(url)
        self.cleanup: list[Callable[[], Any]] = []
        self.fleet: Any = None  # the fleet column's Runtime, for the concurrent figure

    def ctx(self) -> NodeContext:
        return NodeContext("bench", node="CONTEXT.UPDATE", scope=self.scope,
                           deadline=time.time() + 5)  # fmt: skip

    def fill(self, name: str) -> None:
        ingress = [item(k, self.content) for k in range(self.items)]
        self.update({"name": name, "ingress": ingress}, self.ctx())


def bare_get_set(s: Setup) -> Call:
    key = f"bench:bare:{uuid.uuid4().hex}"
    s.client.set(key, json.dumps([item(k, s.content) for k in range(s.items)]))

    def call(k: int) -> None:
        value = s.client.get(key)
        assert value is not None
        s.client.set(key, value, px=3_600_000)

    return call


def handler_update(s: Setup) -> Call:
    s.fill("update")

    def call(k: int) -> None:
        body = {"name": "update", "ingress": [item(k % s.items, s.content)]}
        s.update(body, s.ctx())

    return call


def handler_load(s: Setup) -> Call:
    s.fill("load")
    return lambda k: s.load({"name": "load"}, s.ctx())


def broker_url(cache_url: str) -> str:
    """The fleet's broker: the next database of the cache's Redis server."""
    base, _, db = cache_url.rpartition("/")
    return f"{base}/{(int(db or 0) + 1) % 16}"


def fleet_update(s: Setup) -> Call:
    """CONTEXT.UPDATE through the fleet (see the module docstring, column (d))."""
    broker = broker_url(s.url)
    env = {**os.environ, "DITTO_BROKER_URL": broker, "DITTO_RESULT_BACKEND": "",
           "DITTO_WORKER_CONTEXT_REDIS_URL": s.url}  # fmt: skip
    log = tempfile.NamedTemporaryFile(prefix="bench-context-worker-", suffix=".log")
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "context",
         "--loglevel", "WARNING", "--hostname", f"bench-context-{os.getpid()}@localhost"],
        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    s.cleanup.append(log.close)
    runtime = create_ditto(
        config=load_runtime_config({"fleet": {"brokerUrl": broker}}, env={}),
        scope={"tenant": s.scope.tenant, "user": s.scope.user},
    )
    s.fleet = runtime
    s.cleanup += [runtime.close, lambda: stop_process(worker)]
    s.fill("fleet")
    deadline = time.monotonic() + 120
    while runtime.invoke("CONTEXT.LOAD", {"name": "fleet"}, timeout=2).status != "success":
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the context worker did not start:\n" + log_tail(log.name))

    def call(k: int) -> None:
        body = {"name": "fleet", "ingress": [item(k % s.items, s.content)]}
        result = runtime.invoke("CONTEXT.UPDATE", body, timeout=10)
        if result.status != "success":
            raise SystemExit(f"fleet call failed: {result.error}")

    return call


def fleet_concurrent(s: Setup, callers: int, per_caller: int) -> float:
    """calls/s of ``callers`` threads sending CONTEXT.UPDATE through the fleet (each on a
    context of its own), served by the one worker process of column (d)."""
    runtime = s.fleet
    for c in range(callers):
        s.fill(f"fleet-{c}")

    def body(c: int) -> None:
        for i in range(per_caller):
            body = {"name": f"fleet-{c}", "ingress": [item(i % s.items, s.content)]}
            assert runtime.invoke("CONTEXT.UPDATE", body, timeout=30).status == "success"

    threads = [threading.Thread(target=body, args=(c,)) for c in range(callers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return callers * per_caller / (time.perf_counter() - start)


COLUMNS: list[tuple[str, Callable[[Setup], Call]]] = [
    ("(a) bare GET+SET", bare_get_set),
    ("(b) UPDATE handler", handler_update),
    ("(c) LOAD handler", handler_load),
    ("(d) UPDATE fleet", fleet_update),
]


# --- 8 writers on one key: the Lua script vs WATCH/MULTI ----------------------------------


def watch_update(client: redis.Redis, key: str, new: dict[str, Any], retries: list[int]) -> None:
    """The alternative design: optimistic read-modify-write, merge in Python."""
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                raw = pipe.get(key)
                state = json.loads(raw) if raw else {"v": 0, "items": []}
                items = state["items"]
                for at, old in enumerate(items):
                    if old["id"] == new["id"]:
                        items[at] = new
                        break
                else:
                    items.append(new)
                pipe.multi()
                pipe.set(key, json.dumps({"v": state["v"] + 1, "items": items}), px=3_600_000)
                pipe.execute()
                return
            except redis.WatchError:
                retries[0] += 1


def contended(s: Setup, writers: int, per_writer: int) -> dict[str, float]:
    """calls/s of ``writers`` threads updating one key, Lua vs WATCH/MULTI."""
    out: dict[str, float] = {}
    name = f"contended-{uuid.uuid4().hex[:6]}"
    s.fill(name)
    key = f"bench:watch:{uuid.uuid4().hex}"
    seed = [item(k, s.content) for k in range(s.items)]
    s.client.set(key, json.dumps({"v": 0, "items": seed}))
    retries = [0]

    def lua(w: int) -> None:
        for i in range(per_writer):
            s.update({"name": name, "ingress": [item(i % s.items, s.content)]}, s.ctx())

    def watch(w: int) -> None:
        client = redis.Redis.from_url(s.url)
        for i in range(per_writer):
            watch_update(client, key, item(i % s.items, s.content), retries)
        client.close()

    for label, body in (("lua", lua), ("watch", watch)):
        threads = [threading.Thread(target=body, args=(w,)) for w in range(writers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out[f"{label}_calls_per_s"] = writers * per_writer / (time.perf_counter() - start)
    out["watch_retries"] = retries[0]
    final = json.loads(s.client.get(key) or b"{}")
    out["watch_version"] = final.get("v", 0)
    out["lua_version"] = s.load({"name": name}, s.ctx()).version - 1  # minus the fill
    return out


def run(url: str, calls: int, items: int, content_bytes: int, writers: int) -> None:
    s = Setup(url, items, content_bytes)
    print(f"context: {items} items x {content_bytes} content bytes; {calls} calls per column")
    print(f"{'column':<22}{'calls/s':>10}{'p50 ms':>9}{'p95 ms':>9}{'x p50 (a)':>11}")
    base: dict[str, float] | None = None
    for label, make in COLUMNS:
        try:
            fn = make(s)
        except NotImplementedError as exc:
            print(f"{label:<22}{'n/a':>10}   ({exc})")
            continue
        got = measure(fn, calls)
        base = base or got
        print(
            f"{label:<22}{got['calls_per_s']:>10.0f}{got['p50_ms']:>9.3f}{got['p95_ms']:>9.3f}"
            f"{got['p50_ms'] / base['p50_ms']:>11.2f}"
        )
    per_writer = max(1, calls // writers)
    if s.fleet is not None:
        rate = fleet_concurrent(s, writers, per_writer)
        print(f"(d) UPDATE fleet, {writers} concurrent callers (one context each): "
              f"{rate:.0f} calls/s")  # fmt: skip
    c = contended(s, writers, per_writer)
    print(
        f"{writers} writers x {per_writer} updates on one key: Lua {c['lua_calls_per_s']:.0f} "
        f"calls/s (version +{c['lua_version']}); WATCH/MULTI {c['watch_calls_per_s']:.0f} "
        f"calls/s, {c['watch_retries']:.0f} retries (version {c['watch_version']:.0f})"
    )
    for cleanup in reversed(s.cleanup):
        cleanup()
    s.client.flushdb()
    s.client.close()
    if s.definition.close is not None:
        s.definition.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="", help="Redis URL (default: a throwaway server)")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--items", type=int, default=10, help="items in the context")
    parser.add_argument("--content-bytes", type=int, default=200)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    if args.redis:
        run(args.redis, args.calls, args.items, args.content_bytes, args.writers)
        return
    with RedisServer() as server:
        run(f"{server.url}/0", args.calls, args.items, args.content_bytes, args.writers)


if __name__ == "__main__":
    main()
