"""Soak: a fixed-rate mixed load over the six MEMORY nodes against a real worker fleet.

The script starts the fleet itself — three ``ditto-worker worker`` subprocesses, one per
queue group of ``ditto.yaml``'s defaults (``reads``: GET + QUERY, ``writes``: WRITE +
UPDATE + DELETE, ``search``: SEARCH) — on a fresh SQLite file (or ``--store postgres``, a
schema of its own), seeds ``--seed`` memories, then issues calls open-loop: call *i* is
sent at ``start + i / rate`` whether or not earlier calls have finished (all through
``await DittoClient.ainvoke`` on one event loop). The mix (GET 30 %, QUERY 15 %, SEARCH
20 %, WRITE 15 %, UPDATE 10 %, DELETE 10 %) keeps the store near its seeded size: WRITE
adds two memories, DELETE removes one written during the run, UPDATE and GET touch seeded
records only, so every call is expected to succeed.

Latency is measured from the call's scheduled send time to its result (a late send counts
against the call, so a stalled client cannot hide its backlog). Printed: a progress line
per ``--report-s``; at the end p50/p99/max per node and overall, error counts by code,
calls issued and finished, and at start and end the worker RSS (every worker process and
its pool children), the client's RSS, and Redis ``used_memory``, ``connected_clients``,
``PUBSUB CHANNELS`` (and how many are result channels), ``PUBSUB NUMSUB ditto:cancel``
and ``PUBSUB NUMPAT``. Exit 1 when a call failed or did not finish.

    python bench/soak.py                                 # 10 min, throwaway redis-server
    python bench/soak.py --duration-s 60 --rate 40 --redis-url redis://127.0.0.1:6379/1
    python bench/soak.py --store postgres --postgres-url postgresql://u:p@127.0.0.1:5432/db
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from ditto_worker.testing.servers import RedisServer

NODES = ("MEMORY.GET", "MEMORY.QUERY", "MEMORY.SEARCH", "MEMORY.WRITE", "MEMORY.UPDATE",
         "MEMORY.DELETE")  # fmt: skip
MIX = (30, 15, 20, 15, 10, 10)
GROUPS = ("reads", "writes", "search")
CANCEL_CHANNEL = "ditto:cancel"
RESULT_CHANNEL_PREFIX = "celery-task-meta-"

_WORDS = (
    "coffee tea hiking piano chess sushi jazz python garden cycling winter beach novel "
    "camera violin marathon pasta museum sailing yoga dentist birthday meeting airport "
    "project budget invoice recipe weekend holiday concert"
).split()
_PEOPLE = ("Jon", "Gina", "Maria", "Ahmed", "Li", "Sofia", "Ravi", "Anna")
KINDS = ("preference", "fact", "event", "plan")


# --- fleet and services ---------------------------------------------------------------------


def start_redis() -> RedisServer:
    """A throwaway ``redis-server`` on a free loopback port (closed by the caller)."""
    try:
        return RedisServer().start()
    except RuntimeError as exc:
        raise SystemExit(f"{exc}: pass --redis-url or install redis-server") from None


def process_tree_rss(pids: list[int]) -> int:
    """Bytes of resident memory of ``pids`` and all their descendants."""
    try:
        import psutil
    except ImportError:
        return sum(_proc_rss(pid) for pid in _proc_tree(pids))
    total = 0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def _proc_tree(pids: list[int]) -> set[int]:
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                pass
    return seen


def _proc_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Fleet:
    """One ``ditto-worker worker --nodes <group>`` subprocess per queue group."""

    def __init__(
        self, redis_url: str, folder: Path, store: str, env: dict[str, str], pool: str | None
    ) -> None:
        self.redis_url = redis_url
        self.folder = folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.names = {g: f"soak-{g}-{os.getpid()}@{socket.gethostname()}" for g in GROUPS}
        for group in GROUPS:
            log = folder / f"worker-{group}.log"
            self.logs[group] = log
            cmd = [sys.executable, "-m", "ditto_worker", "worker", "--nodes", group,
                   "--broker", redis_url, "--store", store, "--loglevel", "WARNING",
                   "--hostname", self.names[group]]  # fmt: skip
            if pool:
                cmd += ["--pool", pool]
            with log.open("wb") as out:
                self.procs[group] = subprocess.Popen(
                    cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT
                )

    def wait_ready(self, timeout_s: float = 90) -> None:
        """Until every worker answers a control ping."""
        from ditto_worker.config import FleetSettings
        from ditto_worker.fleet.celery_app import create_celery_app

        app = create_celery_app(FleetSettings(broker_url=self.redis_url), results=False)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                for group, proc in self.procs.items():
                    if proc.poll() is not None:
                        raise SystemExit(
                            f"worker {group} exited: {self.logs[group].read_text()[-2000:]}"
                        )
                with app.connection_for_write() as conn:  # closed after: no leftover sockets
                    replies = app.control.ping(timeout=1.0, connection=conn) or []
                answered = {name for reply in replies for name in reply}
                if set(self.names.values()) <= answered:
                    return
        finally:
            app.close()
        raise SystemExit("the workers did not answer a ping in time")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def error_lines(self) -> list[str]:
        lines = []
        for group, log in self.logs.items():
            for line in log.read_text(errors="replace").splitlines():
                if "ERROR" in line or "CRITICAL" in line or line.startswith("Traceback"):
                    lines.append(f"{group}: {line}")
        return lines

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@dataclass
class Snapshot:
    """Memory and connection figures at one moment."""

    worker_rss: int
    client_rss: int
    used_memory: int
    connected_clients: int
    channels: int
    result_channels: int
    cancel_subscribers: int
    patterns: int


def snapshot(r: redis.Redis, fleet: Fleet) -> Snapshot:
    channels = [c.decode() if isinstance(c, bytes) else str(c) for c in r.pubsub_channels()]
    numsub = dict(r.pubsub_numsub(CANCEL_CHANNEL))
    return Snapshot(
        worker_rss=process_tree_rss(fleet.pids),
        client_rss=_proc_rss(os.getpid()),
        used_memory=int(r.info("memory")["used_memory"]),
        connected_clients=int(r.info("clients")["connected_clients"]),
        channels=len(channels),
        result_channels=sum(c.startswith(RESULT_CHANNEL_PREFIX) for c in channels),
        cancel_subscribers=int(numsub.get(CANCEL_CHANNEL.encode(), numsub.get(CANCEL_CHANNEL, 0))),
        patterns=int(r.pubsub_numpat()),
    )


# --- the load --------------------------------------------------------------------------------


def sentence(rng: random.Random) -> str:
    who = rng.choice(_PEOPLE)
    a, b = rng.sample(_WORDS, 2)
    return f"{who} mentioned {a} and {b} on day {rng.randint(1, 365)}"


def draft(rng: random.Random, key: str | None = None) -> dict[str, Any]:
    memory: dict[str, Any] = {
        "content": sentence(rng),
        "metadata": {"kind": rng.choice(KINDS), "speaker": rng.choice(_PEOPLE)},
    }
    if key is not None:
        memory["key"] = key
    return memory


@dataclass
class Load:
    """The load's state: ids to read and update, ids to delete, and what was measured."""

    seed_ids: list[str]
    seed_keys: list[str]
    rng: random.Random
    deletable: deque[str] = field(default_factory=deque)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    window: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    issued: int = 0
    finished: int = 0
    max_lag_s: float = 0.0
    updates: int = 0

    def input_for(self, node: str) -> dict[str, Any]:
        rng = self.rng
        if node == "MEMORY.GET":
            return {"ids": rng.sample(self.seed_ids, 3), "keys": [rng.choice(self.seed_keys)]}
        if node == "MEMORY.QUERY":
            return {"filter": {"kind": rng.choice(KINDS)}, "limit": 20}
        if node == "MEMORY.SEARCH":
            return {"query": " ".join(rng.sample(_WORDS, 2)), "limit": 10}
        if node == "MEMORY.WRITE":
            return {"memories": [draft(rng), draft(rng)]}
        if node == "MEMORY.UPDATE":
            self.updates += 1
            entry = {"id": rng.choice(self.seed_ids), "content": sentence(rng),
                     "metadata": {"kind": rng.choice(KINDS), "rev": self.updates}}  # fmt: skip
            return {"memories": [entry]}
        ids = [self.deletable.popleft()] if self.deletable else [f"absent-{rng.random()}"]
        return {"ids": ids}


async def one_call(client: Any, load: Load, node: str, scheduled: float, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        result = await client.ainvoke(node, load.input_for(node), timeout=timeout_s)
    except Exception as exc:  # the client should never raise; count it if it does
        load.errors[f"{node} raised {type(exc).__name__}"] += 1
        load.finished += 1
        return
    elapsed_ms = (loop.time() - scheduled) * 1000
    load.finished += 1
    load.latencies[node].append(elapsed_ms)
    load.window.append(elapsed_ms)
    if result.status != "success":
        code = result.error.code if result.error else result.status
        load.errors[f"{node} {code}"] += 1
    elif node == "MEMORY.WRITE":
        load.deletable.extend(m.id for m in result.output)


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


async def run_load(
    client: Any, load: Load, fleet: Fleet, r: redis.Redis, args: argparse.Namespace
) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    start = loop.time()

    async def report() -> None:
        snap = await loop.run_in_executor(None, snapshot, r, fleet)
        window, load.window = load.window, []
        print(
            f"[{loop.time() - start:6.0f} s] issued {load.issued} finished {load.finished} "
            f"in flight {len(tasks)} | last {len(window)}: p50 {pct(window, 0.5):.1f} ms "
            f"p99 {pct(window, 0.99):.1f} ms | errors {sum(load.errors.values())} | "
            f"worker RSS {mb(snap.worker_rss)} MB, redis {mb(snap.used_memory)} MB, "
            f"{snap.connected_clients} clients, {snap.channels} channels",
            flush=True,
        )

    async def reporter() -> None:  # its own task: the schedule never waits for it
        while True:
            await asyncio.sleep(args.report_s)
            await report()

    reporting = asyncio.create_task(reporter())
    i = 0
    node_rng = random.Random(args.seed_rng + 1)
    while True:
        scheduled = start + i / args.rate
        if scheduled - start >= args.duration_s:
            break
        delay = scheduled - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        load.max_lag_s = max(load.max_lag_s, loop.time() - scheduled)
        node = node_rng.choices(NODES, weights=MIX)[0]
        task = asyncio.create_task(one_call(client, load, node, scheduled, args.timeout_s))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        load.issued += 1
        i += 1
    if tasks:
        await asyncio.wait(set(tasks), timeout=args.timeout_s + 10)
    reporting.cancel()
    await report()


def seed(client: Any, load_rng: random.Random, count: int) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    keys: list[str] = []
    for start in range(0, count, 100):
        drafts = [draft(load_rng, key=f"seed-{n}") for n in range(start, min(count, start + 100))]
        result = client.invoke("MEMORY.WRITE", {"memories": drafts}, timeout=60)
        if result.status != "success":
            raise SystemExit(f"seeding failed: {result.error}")
        ids.extend(m.id for m in result.output)
        keys.extend(m.key for m in result.output if m.key)
    return ids, keys


async def warm_up(client: Any, load: Load, calls: int, timeout_s: float) -> None:
    """Closed-loop calls of the mix, so every pool process has built its store and its
    connections before the start figures are taken; not counted in the results."""
    rng = random.Random(0)
    nodes = rng.choices(NODES, weights=MIX, k=calls)
    gate = asyncio.Semaphore(16)

    async def call(node: str) -> None:
        async with gate:
            result = await client.ainvoke(node, load.input_for(node), timeout=timeout_s)
            if result.status == "success" and node == "MEMORY.WRITE":
                load.deletable.extend(m.id for m in result.output)

    await asyncio.gather(*(call(n) for n in nodes))


def print_report(load: Load, before: Snapshot, after: Snapshot, fleet: Fleet) -> None:
    print(f"\ncalls issued {load.issued}, finished {load.finished}, "
          f"max send lag {load.max_lag_s * 1000:.1f} ms")  # fmt: skip
    print(f"{'node':<15}{'calls':>8}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    every: list[float] = []
    for node in NODES:
        samples = load.latencies.get(node, [])
        every.extend(samples)
        errs = sum(n for k, n in load.errors.items() if k.startswith(node + " "))
        print(f"{node:<15}{len(samples):>8}{errs:>8}{pct(samples, 0.5):>9.1f}"
              f"{pct(samples, 0.99):>9.1f}{max(samples, default=float('nan')):>9.1f}")  # fmt: skip
    print(f"{'all':<15}{len(every):>8}{sum(load.errors.values()):>8}{pct(every, 0.5):>9.1f}"
          f"{pct(every, 0.99):>9.1f}{max(every, default=float('nan')):>9.1f}")  # fmt: skip
    by_code: Counter[str] = Counter()
    for key, n in load.errors.items():
        by_code[key.split(" ", 1)[1]] += n
    print("errors by code: " + (", ".join(f"{c} {n}" for c, n in by_code.most_common()) or "none"))
    if load.errors:
        print("errors by node and code: "
              + ", ".join(f"{k} {n}" for k, n in load.errors.most_common()))  # fmt: skip
    rows = (
        ("worker RSS MB (all processes)", mb(before.worker_rss), mb(after.worker_rss)),
        ("client RSS MB", mb(before.client_rss), mb(after.client_rss)),
        ("redis used_memory MB", mb(before.used_memory), mb(after.used_memory)),
        ("redis connected_clients", before.connected_clients, after.connected_clients),
        ("PUBSUB CHANNELS", before.channels, after.channels),
        ("  of them result channels", before.result_channels, after.result_channels),
        (f"PUBSUB NUMSUB {CANCEL_CHANNEL}", before.cancel_subscribers, after.cancel_subscribers),
        ("PUBSUB NUMPAT", before.patterns, after.patterns),
    )
    print(f"\n{'':<32}{'start':>10}{'end':>10}")
    for label, a, b in rows:
        print(f"{label:<32}{a!s:>10}{b!s:>10}")
    problems = fleet.error_lines()
    print(f"worker log lines with ERROR/CRITICAL/Traceback: {len(problems)}")
    for line in problems[:10]:
        print("  " + line[:200])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=600.0, help="load duration")
    parser.add_argument("--rate", type=float, default=40.0, help="calls per second (open loop)")
    parser.add_argument("--redis-url", help="Redis URL (default: a throwaway redis-server)")
    parser.add_argument("--store", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--postgres-url", help="PostgreSQL URL for --store postgres")
    parser.add_argument("--pool", choices=["prefork", "threads", "solo"],
                        help="worker pool (default: ditto.yaml's, prefork)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1000, help="memories written before the load")
    parser.add_argument("--warmup", type=int, default=300, help="calls before the start figures")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="timeout of each call")
    parser.add_argument("--report-s", type=float, default=60.0, help="progress line interval")
    parser.add_argument("--seed-rng", type=int, default=7, help="random seed of the load")
    args = parser.parse_args()
    if args.store == "postgres" and not args.postgres_url:
        parser.error("--store postgres needs --postgres-url")

    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    server = None
    url = args.redis_url
    if url is None:
        server = start_redis()
        url = server.url + "/0"
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    env = {**os.environ, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(folder / "soak.sqlite")}
    schema = f"soak_{os.getpid()}"
    if args.store == "postgres":
        env["DITTO_WORKER_MEMORY_POSTGRES_URL"] = args.postgres_url
        env["DITTO_WORKER_MEMORY_POSTGRES_SCHEMA"] = schema
    for var in ("DITTO_BROKER_URL", "DITTO_RESULT_BACKEND"):
        env.pop(var, None)
    r = redis.Redis.from_url(url)
    fleet = Fleet(url, folder, args.store, env, args.pool)
    client = None
    try:
        fleet.wait_ready()
        client = DittoClient.from_fleet(FleetSettings(broker_url=url, result_backend=url))
        rng = random.Random(args.seed_rng)
        seed_ids, seed_keys = seed(client, rng, args.seed)
        load = Load(seed_ids, seed_keys, rng)
        asyncio.run(warm_up(client, load, args.warmup, args.timeout_s))
        print(
            f"soak: {args.duration_s:.0f} s at {args.rate:g} calls/s (open loop), store "
            f"{args.store}, workers {', '.join(GROUPS)} (pool {args.pool or 'prefork'}), "
            f"{args.seed} seeded memories, {args.warmup} warm-up calls, "
            f"call timeout {args.timeout_s:g} s",
            flush=True,
        )
        before = snapshot(r, fleet)
        asyncio.run(run_load(client, load, fleet, r, args))
        after = snapshot(r, fleet)
        print_report(load, before, after, fleet)
        ok = load.finished == load.issued and not load.errors
    finally:
        if client is not None:
            client.close()
        fleet.stop()
        r.close()
        if args.store == "postgres":
            _drop_schema(args.postgres_url, schema)
        shutil.rmtree(folder, ignore_errors=True)
        if server is not None:
            server.close()
    raise SystemExit(0 if ok else 1)


def _drop_schema(url: str, schema: str) -> None:
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except Exception as exc:  # the figures are printed already; say what was left behind
        print(f"could not drop schema {schema}: {type(exc).__name__}")


if __name__ == "__main__":
    main()
