"""Crash kills: SIGKILL a real worker at random points of WRITE and UPDATE batches until
``--kills`` kills landed, then check that nothing was lost and nothing doubled (issue 7).

One real ``ditto-worker worker --nodes writes --store <store>`` (prefork, one pool
process, ``fleet.visibilityTimeoutS`` from ``--visibility``) on a real Redis and a real
database (a fresh SQLite file, or a fresh schema of ``--postgres-url``). A caller thread
sends WRITE batches and, after each, an UPDATE of that batch's records (new content and
metadata), every call with a fixed execution id (``<run>w-N`` / ``<run>u-N``, unique to
the run: ids shared with another fleet on the same Redis server could be cancelled by
its client through the server-wide ``ditto:cancel`` channel). The main thread
watches the worker's log and, for each call the worker receives, kills at a random point
— after a random delay (usually mid-batch), or right after the call's COMMIT (polling
the store's execution record; the kill then falls before the acknowledgement):

* mostly the pool process (SIGKILL; its main process requeues the message at once);
* sometimes (``--main-share``) the main process and its pool together (``killpg``); the
  message then waits in the transport's unacked set until the visibility timeout has
  passed, and a fresh worker is started, which restores it.

A kill *landed* when the call was delivered again afterwards. Before the run a trigger is
installed in the database that records every row each committed transaction inserts or
updates. Checked at the end:

* every acknowledged WRITE: all its records present, each exactly once (``missing``,
  ``duplicates``); every batch all-or-nothing (``partial batches``);
* every acknowledged UPDATE: its records carry its content and metadata, and each was
  updated by exactly one committed transaction (``double updates``); each record was
  inserted by exactly one (``double inserts``);
* an UPDATE that was not acknowledged changed all of its batch or none of it
  (``partial updates``);
* ``unanswered calls``: calls whose caller got no success (reported, not counted as lost:
  nothing was acknowledged). Seen here only after a main-process kill that fell between
  the previous call's result and the next message's registration: kombu's Redis
  transport pops a message (BRPOP) before it records it as unacknowledged, so a worker
  killed in between loses it; the caller gets ``timeout``/``MEMORY_TIMEOUT`` at its
  deadline, the message is gone, nothing was applied, and a retry with the same
  execution id is safe.

    python bench/crash_kills.py --store both                # throwaway redis-server
    python bench/crash_kills.py --store postgres --kills 20 \\
        --redis-url redis://127.0.0.1:6379/9 --postgres-url postgresql://u:p@host/db

Exit status 0 when nothing acknowledged was lost and nothing was doubled or partial, 1
otherwise. With problems, the worker's log and ``events.log`` (kills, restarts) are kept.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from ditto_plugin_sqlite import driver
from ditto_worker.testing.effects import (
    count_postgres_effects,
    count_sqlite_effects,
    effects_sql,
    tally,
)
from ditto_worker.testing.servers import RedisServer

RECEIVED = re.compile(r"Task (MEMORY\.\w+)\[([^\]]+)\] received")


# --- the database under test -------------------------------------------------------------


class Target:
    """A fresh database of one store kind, with an ``effects(op, id)`` trigger table."""

    name = ""

    def worker_env(self) -> dict[str, str]:
        raise NotImplementedError

    def committed(self, execution_id: str) -> bool:
        raise NotImplementedError

    def effects(self) -> Counter[tuple[str, str]]:
        raise NotImplementedError

    def memories(self) -> list[tuple[str, Any, Any]]:
        """Every stored record as ``(id, content, metadata)``."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop what was created."""


class SqliteTarget(Target):
    name = "sqlite"

    def __init__(self, folder: Path) -> None:
        from ditto_plugin_sqlite import SqliteMemoryStore

        self.path = folder / "crash.sqlite"
        SqliteMemoryStore(self.path).close()  # the schema
        with driver.connect(self.path) as conn:
            count_sqlite_effects(conn)
        conn.close()

    def worker_env(self) -> dict[str, str]:
        return {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(self.path)}

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        conn = driver.connect(self.path, timeout=30)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def committed(self, execution_id: str) -> bool:
        return bool(self._rows("SELECT 1 FROM executions WHERE execution_id = ?", (execution_id,)))

    def effects(self) -> Counter[tuple[str, str]]:
        return tally(self._rows(effects_sql()))

    def memories(self) -> list[tuple[str, Any, Any]]:
        import json

        rows = self._rows("SELECT id, content, metadata FROM memories")
        return [(i, json.loads(c), None if m is None else json.loads(m)) for i, c, m in rows]


class PostgresTarget(Target):
    name = "postgres"

    def __init__(self, url: str) -> None:
        import psycopg

        from ditto_plugin_postgres import PostgresMemoryStore

        self.url, self.schema = url, f"crash_{uuid.uuid4().hex[:12]}"
        store = PostgresMemoryStore(url, schema=self.schema)
        store.migrate()
        store.close()
        self.conn = psycopg.connect(url, autocommit=True)
        count_postgres_effects(self.conn, self.schema)

    def worker_env(self) -> dict[str, str]:
        return {
            "DITTO_WORKER_MEMORY_POSTGRES_URL": self.url,
            "DITTO_WORKER_MEMORY_POSTGRES_SCHEMA": self.schema,
        }

    def committed(self, execution_id: str) -> bool:
        sql = f'SELECT 1 FROM "{self.schema}".executions WHERE execution_id = %s'
        return self.conn.execute(sql, [execution_id]).fetchone() is not None

    def effects(self) -> Counter[tuple[str, str]]:
        return tally(self.conn.execute(effects_sql(self.schema)).fetchall())

    def memories(self) -> list[tuple[str, Any, Any]]:
        sql = f'SELECT id, content, metadata FROM "{self.schema}".memories'
        return [(str(i), c, m) for i, c, m in self.conn.execute(sql).fetchall()]

    def close(self) -> None:
        self.conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        self.conn.close()


# --- the worker --------------------------------------------------------------------------


class Worker:
    """The worker subprocess (restarted after a main-process kill), logging to one file."""

    def __init__(self, target: Target, redis_url: str, folder: Path, visibility_s: float):
        self.target, self.redis_url, self.folder = target, redis_url, folder
        (folder / "ditto.yaml").write_text(f"fleet:\n  visibilityTimeoutS: {visibility_s}\n")
        self.log = folder / "worker.log"
        self.log.touch()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._offset, self._ready = 0, 0
        self._received: list[tuple[str, str]] = []

    def start(self) -> None:
        self._read()
        seen = self._ready
        env = {**os.environ, "DITTO_BROKER_URL": self.redis_url, **self.target.worker_env()}
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "writes",
                 "--store", self.target.name, "--pool", "prefork", "--concurrency", "1",
                 "--loglevel", "INFO"],
                cwd=self.folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            self._read()
            if self._ready > seen:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the worker did not start:\n" + self.text()[-3000:])
            time.sleep(0.05)
        self.starts += 1

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def _read(self) -> bool:
        """Parse the log's new complete lines; False when there were none."""
        with self.log.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        if not end:
            return False
        self._offset += end
        text = chunk[:end].decode(errors="replace")
        self._received.extend(RECEIVED.findall(text))
        self._ready += text.count(" ready.")
        return True

    def received(self) -> list[tuple[str, str]]:
        """Every ``(node, id)`` the worker logged as received, in order (all starts)."""
        self._read()
        return self._received

    def pool(self) -> list[int]:
        """The pids of the pool processes."""
        assert self.proc is not None
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill_all(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# --- one run -----------------------------------------------------------------------------


@dataclass
class Run:
    """What happened in one store's run."""

    store: str
    prefix: str = ""  # of this run's execution ids: never shared with another run
    kills_sent: int = 0
    landed: Counter[str] = field(default_factory=Counter)  # "pool/mid" … "main/commit"
    writes: dict[int, Any] = field(default_factory=dict)
    updates: dict[int, Any] = field(default_factory=dict)
    redelivery_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    problems: Counter[str] = field(default_factory=Counter)
    failures: list[Any] = field(default_factory=list)
    memories: int = 0


def caller(
    client: Any, run: Run, batch: int, stop: threading.Event, timeout_s: float, prefix: str
) -> None:
    """WRITE batch n, then UPDATE its records, until ``stop`` is set."""
    n = 0
    while not stop.is_set():
        drafts = [{"content": f"c-{n}-{i}", "metadata": {"batch": n}} for i in range(batch)]
        written = client.invoke(
            "MEMORY.WRITE", {"memories": drafts}, timeout=timeout_s, execution_id=f"{prefix}w-{n}"
        )
        run.writes[n] = written
        if written.status == "success":
            changes = [
                {"id": m.id, "content": f"{m.content}-u", "metadata": {"batch": n, "u": 1}}
                for m in written.output
            ]
            run.updates[n] = client.invoke(
                "MEMORY.UPDATE",
                {"memories": changes},
                timeout=timeout_s,
                execution_id=f"{prefix}u-{n}",
            )
        n += 1


@dataclass
class Kill:
    """A kill sent while ``eid`` ran; it landed if the worker receives ``eid`` again."""

    node: str
    eid: str
    kind: str  # "pool/mid" … "main/commit"
    received_before: int
    at: float


def resolve(worker: Worker, run: Run, pending: list[Kill]) -> None:
    """Move the pending kills whose call was delivered again to ``run.landed``. (A kill
    between the result and the ack lands too: the caller has its answer and may have
    sent the next call before the redelivered copy arrives.)"""
    received = worker.received()
    for kill in list(pending):
        if received.count((kill.node, kill.eid)) > kill.received_before:
            pending.remove(kill)
            note(worker.folder, f"landed: {kill.eid} delivered again")
            run.landed[kill.kind] += 1
            run.redelivery_s.append(time.monotonic() - kill.at)


def note(folder: Path, text: str) -> None:
    """One timestamped line in ``events.log`` beside the worker's log."""
    with (folder / "events.log").open("a") as out:
        out.write(f"{time.time():.3f} {text}\n")


def restart_after_visibility(worker: Worker, broker: redis.Redis, visibility_s: float) -> None:
    """Start a fresh worker once every unacked message's visibility timeout has passed
    (a starting worker restores those; docs/fleet.md, "Calls on the fleet", has the running
    worker's sweep)."""
    unacked = broker.zrange("unacked_index", 0, -1, withscores=True)
    note(worker.folder, f"unacked after the kill: {unacked}")
    scores = [s for _, s in unacked]
    if scores:
        time.sleep(max(0.0, max(scores) + visibility_s + 0.3 - time.time()))
    worker.start()


def run_store(target: Target, args: argparse.Namespace, redis_url: str, folder: Path) -> Run:
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient

    run = Run(target.name, prefix=f"{target.name[:2]}{uuid.uuid4().hex[:6]}-")
    rng = random.Random(args.seed)
    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    worker = Worker(target, redis_url, folder, args.visibility)
    worker.start()
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    stop = threading.Event()
    thread = threading.Thread(
        target=caller,
        args=(client, run, args.batch, stop, args.call_timeout, run.prefix),
        daemon=True,
    )
    started = time.monotonic()
    thread.start()
    aimed: set[str] = set()
    pending: list[Kill] = []
    shown = 0
    try:
        while run.landed.total() < args.kills and thread.is_alive():
            resolve(worker, run, pending)
            if run.landed.total() >= shown + 10:
                shown = run.landed.total()
                print(f"  {target.name}: {shown} kills landed", file=sys.stderr, flush=True)
            received = worker.received()
            if not received or received[-1][1] in aimed:
                time.sleep(0.005)
                continue
            node, eid = received[-1]
            aimed.add(eid)
            main = rng.random() < args.main_share
            pool = worker.pool()  # looked up first: a kill after COMMIT follows it at once
            if not main and not pool:
                continue
            if rng.random() < args.commit_share:
                deadline = time.monotonic() + args.call_timeout
                while not target.committed(eid) and time.monotonic() < deadline:
                    time.sleep(0.002)  # right after COMMIT, before the ack (usually)
            else:
                time.sleep(rng.uniform(0.0, args.max_delay))
            before = received.count((node, eid))
            killed_at = time.monotonic()
            if main:
                worker.kill_all()
            else:
                try:
                    for pid in pool:
                        os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # that pool process is gone already
                    continue
            run.kills_sent += 1
            when = "commit" if target.committed(eid) else "mid"
            kind = f"{'main' if main else 'pool'}/{when}"
            pending.append(Kill(node, eid, kind, before, killed_at))
            note(folder, f"kill {kind} while {eid} ran")
            if main:
                restart_after_visibility(worker, broker, args.visibility)
        stop.set()
        thread.join(args.call_timeout * 2 + 30)
        resolve(worker, run, pending)
    finally:
        stop.set()
        worker.stop()
        client.close()
        broker.close()
    run.elapsed_s = time.monotonic() - started
    verify(run, target, args.batch)
    return run


def verify(run: Run, target: Target, batch: int) -> None:
    """Count what was lost or doubled (see the module docstring)."""
    stored = target.memories()
    run.memories = len(stored)
    effects = target.effects()
    contents = Counter(str(c).removesuffix("-u") for _, c, _ in stored)
    per_batch = Counter(int(str(c).split("-")[1]) for _, c, _ in stored)
    p = run.problems
    p["duplicates"] = sum(n - 1 for n in contents.values() if n > 1)
    p["double inserts"] = sum(n - 1 for (op, _), n in effects.items() if op == "INSERT" and n > 1)
    p["double updates"] = sum(n - 1 for (op, _), n in effects.items() if op == "UPDATE" and n > 1)
    p["partial batches"] = sum(1 for n in per_batch.values() if n not in (0, batch))
    by_id = {i: (c, m) for i, c, m in stored}
    for result in run.writes.values():
        if result.status != "success":
            run.failures.append(result)
            continue
        for item in result.output:
            if item.id not in by_id:
                p["missing"] += 1
    for n, result in run.updates.items():
        if result.status != "success":
            run.failures.append(result)
            updated = [str(c).endswith("-u") for _, c, m in stored if (m or {}).get("batch") == n]
            p["partial updates"] += any(updated) and not all(updated)
            continue
        for item in result.output:
            content, metadata = by_id.get(item.id, (None, None))
            if content != item.content or metadata != {"batch": n, "u": 1}:
                p["missing updates"] += 1


def report(run: Run) -> None:
    calls = len(run.writes) + len(run.updates)
    delays = sorted(run.redelivery_s)
    median = delays[len(delays) // 2] if delays else 0.0
    landed = ", ".join(f"{k} {v}" for k, v in sorted(run.landed.items()))
    print(f"[{run.store}]")
    print(f"  kills landed      {run.landed.total()} of {run.kills_sent} sent ({landed})")
    print(f"  calls             {calls} ({len(run.writes)} WRITE, {len(run.updates)} UPDATE)")
    print(f"  memories          {run.memories}")
    for name in ("duplicates", "double inserts", "double updates", "missing",
                 "missing updates", "partial batches", "partial updates"):  # fmt: skip
        print(f"  {name:<17} {run.problems[name]}")
    print(f"  unanswered calls  {len(run.failures)}")
    print(f"  kill→redelivery   median {median:.1f} s, max {delays[-1] if delays else 0:.1f} s")
    print(f"  elapsed           {run.elapsed_s:.0f} s")
    for result in run.failures:
        error = result.error
        print(f"  unanswered: {result.execution_id} {result.status} {error.code}: {error.message}")


def throwaway_redis() -> RedisServer:
    try:
        return RedisServer().start()
    except RuntimeError as exc:
        raise SystemExit(f"{exc}: pass --redis-url") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100, help="kills that must land per store")
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--redis-url", help="Redis URL (default: a throwaway redis-server)")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("DITTO_TEST_POSTGRES_URL", ""),
        help="PostgreSQL URL (default: $DITTO_TEST_POSTGRES_URL); a fresh schema is used",
    )
    parser.add_argument("--batch", type=int, default=500, help="records per WRITE/UPDATE call")
    parser.add_argument("--main-share", type=float, default=0.15,
                        help="share of kills that take the main process too")  # fmt: skip
    parser.add_argument("--commit-share", type=float, default=0.4,
                        help="share of kills right after the call's COMMIT")  # fmt: skip
    parser.add_argument("--max-delay", type=float, default=0.4,
                        help="other kills: random delay after the call is received, s")  # fmt: skip
    parser.add_argument("--visibility", type=float, default=3.0,
                        help="fleet.visibilityTimeoutS of the worker, s")  # fmt: skip
    parser.add_argument("--call-timeout", type=float, default=120.0, help="invoke timeout, s")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    if "postgres" in stores and not args.postgres_url:
        parser.error("--postgres-url (or DITTO_TEST_POSTGRES_URL) is needed for postgres")
    own = None
    redis_url = args.redis_url
    if not redis_url:
        own = throwaway_redis()
        redis_url = own.url + "/0"
    bad = 0
    try:
        for store in stores:
            folder = Path(tempfile.mkdtemp(prefix=f"crash-{store}-"))
            target: Target = (
                SqliteTarget(folder) if store == "sqlite" else PostgresTarget(args.postgres_url)
            )
            try:
                run = run_store(target, args, redis_url, folder)
            finally:
                target.close()
            report(run)
            bad += sum(run.problems.values())
            if sum(run.problems.values()) or run.failures:
                print(f"  worker log kept: {folder / 'worker.log'}")
            else:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if own is not None:
            own.close()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
