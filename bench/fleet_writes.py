"""Bulk WRITE into SQLite through the fleet vs the direct SDK, side by side in one run.

Batches of ``--batch`` (1,000) small memories (``bench/store_scale.py``'s drafts: 12-30
words, five metadata fields; no embedding provider, so no vectors) are written, one batch
at a time by one caller, alternately:

* SDK: ``create_memory(SqliteMemoryStore(...)).write`` in this process;
* fleet: ``DittoClient.invoke("MEMORY.WRITE", ...)`` through a real Redis to a real
  ``ditto-worker worker --nodes writes`` process (``--pools``: each ``pool:concurrency``
  measured on its own worker, one after the other) writing its own SQLite file.

Each batch goes to both paths back to back, so a noisy neighbour on a shared machine hits
both alike. Printed per pool: memories/s of each (median per-batch time), the ratio
fleet/SDK per round (median and range; target >= 0.7, issue 28) and where the time goes:
CPU ms per batch of this process (SDK; the fleet client's send + reply parse), of the
worker (every process of it) and of Redis, and the wall time no CPU of ours explains
(waiting for a core: the load average is printed). Then the parts of the fleet's extra
work, timed alone in this process (CPU ms per batch): the reply's wire JSON, its JSON
encoding and decoding, the client's validation of the reply.

    python bench/fleet_writes.py                          # throwaway redis-server
    python bench/fleet_writes.py --pools prefork:2,solo:1 --rounds 5 --batches 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_scale import drafts, vocabulary  # noqa: E402

from ditto_worker.testing.servers import RedisServer, log_tail, stop_process  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its live children, from ``/proc``."""
    total = 0.0
    for proc in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{proc}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class Worker:
    """``ditto-worker worker --nodes writes`` on ``redis_url``, in its own folder."""

    def __init__(self, folder: Path, redis_url: str, pool: str, concurrency: int) -> None:
        self.log = folder / f"worker-{pool}.log"
        env = {**os.environ, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / f"fleet-{pool}.db"),
               "DITTO_WORKER_MEMORY_SQLITE_EMBEDDING": "none"}  # fmt: skip
        args = ["--nodes", "writes", "-P", pool, "-c", str(concurrency), "--broker", redis_url,
                "-l", "WARNING", "-n", f"bench-writes-{pool}@%h"]  # fmt: skip
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ditto_worker", "worker", *args],
                cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def close(self) -> None:
        stop_process(self.proc)


def batches(count: int, size: int, seed: int, words: list[str]) -> Iterator[list[dict[str, Any]]]:
    """``count`` batches of drafts with distinct keys."""
    stream = drafts(count * size, seed, words)
    for b in range(count):
        batch = [next(stream) for _ in range(size)]
        for draft in batch:
            draft["key"] = f"{seed}:{b}:{draft['key']}"
        yield batch


class Tally:
    """Per-path wall seconds per batch and CPU seconds per place, over a run."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {"sdk": [], "fleet": []}
        self.cpu: dict[str, float] = {"sdk": 0.0, "client": 0.0, "worker": 0.0, "redis": 0.0}
        self.count = 0


def write_both(sdk: Any, client: Any, batch: list[dict[str, Any]], worker: int,
               r: redis.Redis, tally: Tally) -> None:  # fmt: skip
    """One batch through the SDK, then the same batch through the fleet."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = sdk.write({"memories": batch})
    t1, cpu1 = time.perf_counter(), time.process_time()
    if result.status != "success":
        raise SystemExit(f"SDK WRITE failed: {result.error}")
    w0, r0 = tree_cpu_s(worker), redis_cpu_s(r)
    cpu2, t2 = time.process_time(), time.perf_counter()
    result = client.invoke("MEMORY.WRITE", {"memories": batch}, timeout=120)
    t3, cpu3 = time.perf_counter(), time.process_time()
    if result.status != "success" or len(result.output) != len(batch):
        raise SystemExit(f"fleet WRITE failed: {result.error}")
    tally.wall["sdk"].append(t1 - t0)
    tally.wall["fleet"].append(t3 - t2)
    tally.cpu["sdk"] += cpu1 - cpu0
    tally.cpu["client"] += cpu3 - cpu2
    tally.cpu["worker"] += tree_cpu_s(worker) - w0
    tally.cpu["redis"] += redis_cpu_s(r) - r0
    tally.count += 1


def measure_pool(redis_url: str, folder: Path, spec: str, args: argparse.Namespace,
                 words: list[str]) -> None:  # fmt: skip
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    pool, _, conc = spec.partition(":")
    worker = Worker(folder, redis_url, pool, int(conc or 1))
    sdk = create_memory(SqliteMemoryStore(str(folder / f"sdk-{pool}.db")))
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    r = redis.Redis.from_url(redis_url)
    try:
        for warm in batches(2, args.batch, 999, words):  # waits for the worker; warms both
            result = client.invoke("MEMORY.WRITE", {"memories": warm}, timeout=120)
            if result.status != "success":
                raise SystemExit(f"worker not serving: {result.error}\n{log_tail(str(worker.log))}")
            sdk.write({"memories": warm})
        ratios, tally = [], Tally()
        for round_ in range(args.rounds):
            one = Tally()
            for batch in batches(args.batches, args.batch, round_, words):
                write_both(sdk, client, batch, worker.proc.pid, r, one)
            ratios.append(sum(one.wall["sdk"]) / sum(one.wall["fleet"]))
            for key in tally.wall:
                tally.wall[key] += one.wall[key]
            for key in tally.cpu:
                tally.cpu[key] += one.cpu[key]
            tally.count += one.count
        report(spec, args, ratios, tally)
    finally:
        client.close()
        r.close()
        worker.close()


def report(spec: str, args: argparse.Namespace, ratios: list[float], tally: Tally) -> None:
    sdk_s, fleet_s = (statistics.median(tally.wall[k]) for k in ("sdk", "fleet"))
    per = {k: 1000 * v / tally.count for k, v in tally.cpu.items()}
    print(f"\npool {spec}: {args.rounds} rounds x {args.batches} batches of {args.batch}")
    print(f"  SDK    {args.batch / sdk_s:>8,.0f} memories/s  ({1000 * sdk_s:6.1f} ms/batch)")
    print(f"  fleet  {args.batch / fleet_s:>8,.0f} memories/s  ({1000 * fleet_s:6.1f} ms/batch)")
    print(f"  ratio fleet/SDK per round: median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.70)")  # fmt: skip
    ours = per["client"] + per["worker"] + per["redis"]
    print("  where the time goes (ms per batch; CPU is summed over the run / batches):")
    print(f"    SDK wall {1000 * sdk_s:6.1f}   CPU of this process        {per['sdk']:6.1f}")
    print(f"    fleet wall {1000 * fleet_s:6.1f} CPU client (send + parse)  {per['client']:6.1f}")
    print(f"                      CPU worker (all processes) {per['worker']:6.1f}"
          f"  (beyond the SDK's CPU: {per['worker'] - per['sdk']:+.1f})")  # fmt: skip
    print(f"                      CPU Redis                  {per['redis']:6.1f}")
    print(
        f"                      wall not spent on our CPU  {1000 * fleet_s - ours:6.1f}"
        "  (waiting for a core, wake-ups)"
    )


def parts(words: list[str], size: int) -> None:
    """The fleet's extra work on one reply, timed alone (CPU ms, median of 9)."""
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory
    from ditto_worker.contracts import MemoryItem, NodeResult, to_wire

    folder = Path(tempfile.mkdtemp(prefix="bench-writes-parts-"))
    try:
        memory = create_memory(SqliteMemoryStore(str(folder / "parts.db")))
        batch = next(batches(1, size, 7, words))
        result = memory.write({"memories": batch})
        wire = to_wire(result)
        body = json.dumps(wire)
        steps: dict[str, Callable[[], Any]] = {
            "input JSON encode (client)": lambda: json.dumps({"input": {"memories": batch}}),
            "input JSON decode (worker)": lambda: json.loads(json.dumps({"memories": batch})),
            "reply wire JSON: to_wire (worker)": lambda: to_wire(result),
            "reply JSON encode (worker, result backend)": lambda: json.dumps(wire),
            "reply JSON decode (client)": lambda: json.loads(body),
            "reply validation (client)": lambda: NodeResult[list[MemoryItem]].model_validate(wire),
        }
        print(f"\nparts of the fleet's extra work, one batch of {size}, CPU ms (median of 9):")
        for label, step in steps.items():
            print(f"  {label:<46}{_cpu_ms(step):7.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _cpu_ms(step: Callable[[], Any]) -> float:
    samples = []
    for _ in range(9):
        start = time.process_time()
        step()
        samples.append(1000 * (time.process_time() - start))
    return statistics.median(samples)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", help="Redis URL (default: start a throwaway redis-server)")
    parser.add_argument("--pools", default="prefork:2,solo:1",
                        help="pool:concurrency list, each on its own worker")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=10, help="batches per round")
    parser.add_argument("--batch", type=int, default=1000, help="memories per batch")
    args = parser.parse_args()
    server = None if args.redis else RedisServer().start()
    url = args.redis or f"{server.url}/0"  # type: ignore[union-attr]
    folder = Path(tempfile.mkdtemp(prefix="bench-fleet-writes-"))
    words = vocabulary()
    try:
        print(f"bulk WRITE into SQLite, fleet vs direct SDK; load average {_load()} "
              f"on {os.cpu_count()} cores")  # fmt: skip
        for spec in args.pools.split(","):
            measure_pool(url, folder, spec, args, words)
        parts(words, args.batch)
        print(f"load average at the end {_load()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
