"""Bulk WRITE into SQLite through the fleet vs the direct SDK, side by side in one run.

Batches of ``--batch`` (1,000) small memories (``bench/store_scale.py``'s drafts: 12-30
words, five metadata fields; no embedding provider, so no vectors) are written, one batch
at a time by one caller:

* SDK: ``create_memory(SqliteMemoryStore(...)).write`` in this process;
* fleet: ``DittoClient.invoke("MEMORY.WRITE", ...)`` through a real Redis to a real
  ``ditto-worker worker --nodes writes`` process writing its own SQLite file, one worker
  per ``--pools`` entry (``pool:concurrency``), all running at once, each on its own
  Redis database.

Each batch goes through the SDK, then through every pool (the order rotates from batch to
batch), so a noisy neighbour on a shared machine hits every path alike. Printed: memories/s
of each path (median per-batch time), the ratio fleet/SDK per round for each pool (median
and range; target >= 0.7, issue 28) and where the time goes: CPU ms per batch of this
process (SDK; the fleet client's send + reply parse), of the worker (every process of it)
and of Redis, and the wall time no CPU of ours explains (waiting for a core, wake-ups:
the load average is printed). Then the parts of the fleet's extra work, timed alone in
this process (CPU ms per batch): the input's and the reply's JSON, the reply's wire form,
the client's validation of the reply.

    python bench/fleet_writes.py                          # throwaway redis-server
    python bench/fleet_writes.py --pools prefork:2,threads:1 --rounds 5 --batches 10
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

    def __init__(self, folder: Path, redis_url: str, spec: str) -> None:
        pool, _, concurrency = spec.partition(":")
        name = f"{pool}-{concurrency or 1}"
        self.log = folder / f"worker-{name}.log"
        env = {**os.environ, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / f"fleet-{name}.db"),
               "DITTO_WORKER_MEMORY_SQLITE_EMBEDDING": "none"}  # fmt: skip
        args = ["--nodes", "writes", "-P", pool, "-c", concurrency or "1", "--broker", redis_url,
                "-l", "WARNING", "-n", f"bench-writes-{name}@%h"]  # fmt: skip
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
    """One path's wall seconds per batch and CPU seconds per place, over a run."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: dict[str, float] = {"caller": 0.0, "worker": 0.0, "redis": 0.0}
        self.round_s: list[float] = []  # wall seconds of each round


class Fleet:
    """One pool's worker (on its own Redis database), its client and its tally."""

    def __init__(self, spec: str, redis_url: str, folder: Path) -> None:
        from ditto_worker.config import FleetSettings
        from ditto_worker.fleet import DittoClient

        self.spec = spec
        self.worker = Worker(folder, redis_url, spec)
        self.client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
        self.tally = Tally()

    def write(self, batch: list[dict[str, Any]], r: redis.Redis) -> float:
        """Write ``batch`` through the fleet; returns the wall seconds."""
        w0, r0 = tree_cpu_s(self.worker.proc.pid), redis_cpu_s(r)
        cpu0, t0 = time.process_time(), time.perf_counter()
        result = self.client.invoke("MEMORY.WRITE", {"memories": batch}, timeout=120)
        t1, cpu1 = time.perf_counter(), time.process_time()
        if result.status != "success" or len(result.output) != len(batch):
            raise SystemExit(f"fleet WRITE failed ({self.spec}): {result.error}")
        self.tally.cpu["caller"] += cpu1 - cpu0
        self.tally.cpu["worker"] += tree_cpu_s(self.worker.proc.pid) - w0
        self.tally.cpu["redis"] += redis_cpu_s(r) - r0
        self.tally.wall.append(t1 - t0)
        return t1 - t0

    def close(self) -> None:
        self.client.close()
        self.worker.close()


def sdk_write(sdk: Any, batch: list[dict[str, Any]], tally: Tally) -> float:
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = sdk.write({"memories": batch})
    t1, cpu1 = time.perf_counter(), time.process_time()
    if result.status != "success":
        raise SystemExit(f"SDK WRITE failed: {result.error}")
    tally.cpu["caller"] += cpu1 - cpu0
    tally.wall.append(t1 - t0)
    return t1 - t0


def database_url(base: str, db: int) -> str:
    """``base`` (a ``redis://host:port[/db]`` URL) on database ``db``."""
    head, _, tail = base.rpartition("/")
    return f"{head}/{db}" if tail.isdigit() and head.count("/") >= 2 else f"{base}/{db}"


def measure(base_url: str, folder: Path, specs: list[str], args: argparse.Namespace,
            words: list[str]) -> None:  # fmt: skip
    """Every pool's worker at once; each batch through the SDK, then each pool in turn
    (the order rotates per batch), so the machine's load hits every path alike."""
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory

    fleets = [Fleet(spec, database_url(base_url, i), folder) for i, spec in enumerate(specs)]
    sdk = create_memory(SqliteMemoryStore(str(folder / "sdk.db")))
    sdk_tally = Tally()
    r = redis.Redis.from_url(base_url)
    try:
        for fleet in fleets:  # waits for each worker; warms both paths
            for warm in batches(2, args.batch, 999, words):
                result = fleet.client.invoke("MEMORY.WRITE", {"memories": warm}, timeout=120)
                if result.status != "success":
                    raise SystemExit(f"worker {fleet.spec} not serving: {result.error}\n"
                                     f"{log_tail(str(fleet.worker.log))}")  # fmt: skip
        for warm in batches(2, args.batch, 998, words):
            sdk.write({"memories": warm})
        turn = 0
        for round_ in range(args.rounds):
            sums = [0.0] * (len(fleets) + 1)
            for batch in batches(args.batches, args.batch, round_, words):
                sums[0] += sdk_write(sdk, batch, sdk_tally)
                for k in range(len(fleets)):
                    i = (k + turn) % len(fleets)
                    sums[i + 1] += fleets[i].write(batch, r)
                turn += 1
            sdk_tally.round_s.append(sums[0])
            for i, fleet in enumerate(fleets):
                fleet.tally.round_s.append(sums[i + 1])
        report(args, sdk_tally, fleets)
    finally:
        r.close()
        for fleet in fleets:
            fleet.close()


def report(args: argparse.Namespace, sdk: Tally, fleets: list[Fleet]) -> None:
    count = len(sdk.wall)
    sdk_s = statistics.median(sdk.wall)
    sdk_cpu = 1000 * sdk.cpu["caller"] / count
    print(f"\n{args.rounds} rounds x {args.batches} batches of {args.batch}; each batch through "
          "the SDK, then every pool (order rotating)")  # fmt: skip
    print(f"  SDK              {args.batch / sdk_s:>7,.0f} memories/s "
          f"({1000 * sdk_s:6.1f} ms/batch)"
          f"  CPU {sdk_cpu:6.1f} ms/batch")  # fmt: skip
    for fleet in fleets:
        t = fleet.tally
        wall = statistics.median(t.wall)
        ratios = [s / f for s, f in zip(sdk.round_s, t.round_s, strict=True)]
        per = {k: 1000 * v / count for k, v in t.cpu.items()}
        ours = per["caller"] + per["worker"] + per["redis"]
        print(f"  fleet {fleet.spec:<10} {args.batch / wall:>7,.0f} memories/s "
              f"({1000 * wall:6.1f} ms/batch)  fleet/SDK per round: median "
              f"{statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}; "
              "target >= 0.70)")  # fmt: skip
        print(f"      CPU ms/batch: client {per['caller']:5.1f}  worker {per['worker']:6.1f} "
              f"(beyond the SDK's: {per['worker'] - sdk_cpu:+.1f})  Redis {per['redis']:4.1f}"
              f"  sum / SDK CPU {ours / sdk_cpu:.2f}; wall not on our CPU "
              f"{1000 * wall - ours:6.1f}")  # fmt: skip


def parts(words: list[str], size: int) -> None:
    """The fleet's extra work on one reply, timed alone (CPU ms, median of 9)."""
    from kombu.utils.json import dumps, loads

    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker import create_memory
    from ditto_worker.contracts import MemoryItem, NodeResult, to_wire
    from ditto_worker.fleet.redaction import Reply
    from ditto_worker.fleet.replies import encode_result_meta

    folder = Path(tempfile.mkdtemp(prefix="bench-writes-parts-"))
    try:
        memory = create_memory(SqliteMemoryStore(str(folder / "parts.db")))
        batch = next(batches(1, size, 7, words))
        result = memory.write({"memories": batch})
        message = [[], {"input": {"memories": batch}}, {"callbacks": None, "errbacks": None}]
        text = dumps(message)
        meta = {"status": "SUCCESS", "traceback": None, "children": [], "task_id": "t"}
        body = dumps({**meta, "result": to_wire(result)})
        steps: dict[str, Callable[[], Any]] = {
            "input JSON encode (client, kombu)": lambda: dumps(message),
            "input JSON decode (worker, kombu)": lambda: loads(text),
            "reply as before: to_wire + kombu JSON (worker)": (
                lambda: dumps({**meta, "result": to_wire(result)})
            ),
            "reply now: one pass from the model (worker)": (
                lambda: encode_result_meta({**meta, "result": Reply(result)})
            ),
            "reply JSON decode (client)": lambda: json.loads(body),
            "reply validation (client)": (
                lambda: NodeResult[list[MemoryItem]].model_validate(json.loads(body)["result"])
            ),
        }
        print(f"\nparts of the fleet's extra work, one batch of {size}, CPU ms (median of 9):")
        for label, step in steps.items():
            print(f"  {label:<50}{_cpu_ms(step):7.2f}")
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
    parser.add_argument("--pools", default="prefork:2,threads:1,solo:1",
                        help="pool:concurrency list, one worker each, side by side")  # fmt: skip
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
        measure(url, folder, args.pools.split(","), args, words)
        parts(words, args.batch)
        print(f"load average at the end {_load()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
