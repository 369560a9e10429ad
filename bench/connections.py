"""Connections and result subscriptions over 10,000 calls: do they stay bounded?

One :class:`DittoClient` against a real fleet (the three worker groups of
``bench/soak.py``, started here): each block of ``--block`` calls is half ``invoke`` from
``--threads`` threads and half ``await ainvoke`` (``--concurrency`` at a time) on one event
loop, all six nodes in the soak's mix. After every block, with the block's calls all
finished, it records Redis ``CLIENT LIST`` (every connection to the server: client and
workers), ``PUBSUB CHANNELS`` (and how many are result channels, which must be released
when a call ends), ``PUBSUB NUMSUB ditto:cancel``, and this process's threads and open
file descriptors. The verdict: every series ends within ``--slack`` of its value after
the warm-up and never exceeds it by more; exit 1 if not, or if any call failed.

    python bench/connections.py                       # 10,000 calls, throwaway redis-server
    python bench/connections.py --redis-url redis://127.0.0.1:6379/2 --calls 20000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from soak import MIX, NODES, RESULT_CHANNEL_PREFIX, Fleet, Load, seed, start_redis, warm_up


def measure(r: redis.Redis) -> dict[str, int]:
    channels = [c.decode() if isinstance(c, bytes) else str(c) for c in r.pubsub_channels()]
    return {
        "CLIENT LIST": len(r.client_list()),
        "PUBSUB CHANNELS": len(channels),
        "result channels": sum(c.startswith(RESULT_CHANNEL_PREFIX) for c in channels),
        "NUMSUB cancel": int(dict(r.pubsub_numsub("ditto:cancel")).get(b"ditto:cancel", 0)),
        "client threads": threading.active_count(),
        "client fds": len(os.listdir("/proc/self/fd")),
    }


class Mix:
    """The soak's inputs, shared by threads and the event loop (one lock)."""

    def __init__(self, load: Load, seed_rng: int) -> None:
        self.load = load
        self.lock = threading.Lock()
        self.rng = random.Random(seed_rng)
        self.outcomes: Counter[str] = Counter()

    def next(self) -> tuple[str, dict[str, Any]]:
        with self.lock:
            node = self.rng.choices(NODES, weights=MIX)[0]
            return node, self.load.input_for(node)

    def record(self, node: str, result: Any) -> None:
        with self.lock:
            if result.status == "success":
                self.outcomes["success"] += 1
                if node == "MEMORY.WRITE":
                    self.load.deletable.extend(m.id for m in result.output)
            else:
                code = result.error.code if result.error else result.status
                self.outcomes[f"{node} {code}"] += 1


def run_block(client: Any, mix: Mix, calls: int, threads: int, concurrency: int) -> None:
    """``calls`` calls: half ``invoke`` from ``threads`` threads, half ``ainvoke``."""
    sync_calls = calls // 2
    shares = [sync_calls // threads + (1 if i < sync_calls % threads else 0)
              for i in range(threads)]  # fmt: skip

    def caller(n: int) -> None:
        for _ in range(n):
            node, payload = mix.next()
            mix.record(node, client.invoke(node, payload, timeout=30))

    async def async_calls(n: int) -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                node, payload = mix.next()
                mix.record(node, await client.ainvoke(node, payload, timeout=30))

        await asyncio.gather(*(one() for _ in range(n)))

    workers = [threading.Thread(target=caller, args=(n,)) for n in shares]
    for t in workers:
        t.start()
    asyncio.run(async_calls(calls - sync_calls))
    for t in workers:
        t.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=1_000, help="calls between measurements")
    parser.add_argument("--threads", type=int, default=4, help="threads calling invoke")
    parser.add_argument("--concurrency", type=int, default=32, help="ainvoke calls at a time")
    parser.add_argument("--slack", type=int, default=4, help="allowed growth of each series")
    parser.add_argument("--redis-url", help="Redis URL (default: a throwaway redis-server)")
    parser.add_argument("--seed-rng", type=int, default=11)
    args = parser.parse_args()

    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    server = None
    url = args.redis_url
    if url is None:
        server = start_redis()
        url = server.url + "/0"
    folder = Path(tempfile.mkdtemp(prefix="connections-"))
    env = {**os.environ, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "conn.sqlite")}
    for var in ("DITTO_BROKER_URL", "DITTO_RESULT_BACKEND"):
        env.pop(var, None)
    r = redis.Redis.from_url(url)
    fleet = Fleet(url, folder, "sqlite", env, None)
    client = None
    series: list[tuple[int, dict[str, int]]] = []
    try:
        fleet.wait_ready()
        client = DittoClient.from_fleet(FleetSettings(broker_url=url, result_backend=url))
        rng = random.Random(args.seed_rng)
        load = Load(*seed(client, rng, 200), rng)
        asyncio.run(warm_up(client, load, 300, 30))
        mix = Mix(load, args.seed_rng + 1)
        series.append((0, measure(r)))
        done = 0
        while done < args.calls:
            n = min(args.block, args.calls - done)
            run_block(client, mix, n, args.threads, args.concurrency)
            done += n
            series.append((done, measure(r)))
            print(f"{done:>6} calls: " + ", ".join(f"{k} {v}" for k, v in series[-1][1].items()),
                  flush=True)  # fmt: skip
    finally:
        if client is not None:
            client.close()
        fleet.stop()
        if series:
            series.append((-1, measure(r)))  # after close: what the client released
        r.close()
        shutil.rmtree(folder, ignore_errors=True)
        if server is not None:
            server.close()

    keys = list(series[0][1])
    print(f"\n{'calls':>8}" + "".join(f"{k:>18}" for k in keys))
    for done, row in series:
        label = "closed" if done < 0 else str(done)
        print(f"{label:>8}" + "".join(f"{row[k]:>18}" for k in keys))
    running = [row for done, row in series if done >= 0]
    failures = []
    for k in keys:
        values = [row[k] for row in running]
        if max(values) - values[0] > args.slack or values[-1] - values[0] > args.slack:
            failures.append(f"{k} {values[0]} -> max {max(values)}, last {values[-1]}")
    outcomes = mix.outcomes
    failed = {k: v for k, v in outcomes.items() if k != "success"}
    print(f"\ncalls: {sum(outcomes.values())}, success {outcomes['success']}, "
          f"failed {sum(failed.values())} {failed or ''}")  # fmt: skip
    if failures or failed:
        print("VERDICT: GROWTH or failures: " + "; ".join(failures))
        raise SystemExit(1)
    print(f"VERDICT: bounded — every series stays within {args.slack} of its post-warm-up "
          f"value over {args.calls} calls")  # fmt: skip


if __name__ == "__main__":
    main()
