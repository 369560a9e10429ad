"""Pruning the operation ledger at a million rows, beside a running writer (issue 37 item 4).

For each store (SQLite, PostgreSQL): a fresh store whose ``operations`` ledger is filled
with ``--rows`` forgotten rows (claimed 70 days ago: older than twice the default 30-day
``operationRetentionS``) and ``--young`` rows inside the window, written straight into the
table (SQLite: one ``executemany``; PostgreSQL: ``COPY``), each with a 300-byte output
like a small WRITE's. Then one writer thread calls MEMORY.WRITE (one record, its own
operation id: a ledger claim per call) through the direct SDK as fast as it can:

* ``quiet``: ``--quiet-s`` seconds of writes alone (the writer's own latencies);
* ``pruning``: ``store.prune_ledgers(batch=--batch)`` (what ``ditto-worker prune`` runs)
  while the writer goes on; the writer's latencies during it.

Reported per store: rows deleted, rows/s, transactions and the longest one, and the
writer's calls, p50 / p99 / max latency in both phases — the max during pruning is the
longest writer stall. The young rows are checked to be all left. Figures carry the
1-minute load average (2 shared cores here).

    python bench/prune.py                       # 1,000,000 rows, SQLite and PostgreSQL
    python bench/prune.py --rows 100000 --stores sqlite --batch 5000

The PostgreSQL URL is ``DITTO_TEST_POSTGRES_URL`` (``bash scripts/postgres.sh start``);
the bench works in a schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ditto_worker.memory.core import create_memory

DAY = 86400.0
OUTPUT = json.dumps([{"id": "0" * 32, "key": None, "content": "x" * 200, "metadata": None}])


def _rows(rows: int, young: int) -> Iterator[tuple[str, str, str, str, str, float]]:
    old_at, young_at = time.time() - 70 * DAY, time.time() - DAY
    for i in range(rows + young):
        at = old_at + i * 1e-3 if i < rows else young_at
        yield ("", f"bench-{i}", "MEMORY.WRITE", f"{i:064x}", OUTPUT, at)


@contextmanager
def sqlite_store(rows: int, young: int) -> Iterator[Any]:
    from ditto_plugin_sqlite import SqliteMemoryStore

    with (
        tempfile.TemporaryDirectory() as folder,
        SqliteMemoryStore(Path(folder) / "prune.sqlite") as store,
    ):
        conn = store._conn()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO operations (namespace, operation_id, node, digest, output, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            _rows(rows, young),
        )
        conn.execute("COMMIT")
        yield store


@contextmanager
def postgres_store(rows: int, young: int) -> Iterator[Any]:
    import psycopg

    from ditto_plugin_postgres import PostgresMemoryStore

    url = os.environ.get("DITTO_TEST_POSTGRES_URL", "")
    if not url:
        raise SystemExit("DITTO_TEST_POSTGRES_URL is needed (bash scripts/postgres.sh start)")
    schema = f"bench_prune_{os.getpid()}"
    store = PostgresMemoryStore(url, schema=schema)
    try:
        store.migrate()
        with psycopg.connect(url) as conn, conn.cursor() as cur:
            copy = (
                f"COPY {schema}.operations (namespace, operation_id, node, digest, output, "
                "created_at) FROM STDIN"
            )
            with cur.copy(copy) as pipe:
                for ns, op, node, digest, output, at in _rows(rows, young):
                    pipe.write_row((ns, op, node, digest, output, datetime.fromtimestamp(at, UTC)))
            cur.execute(f"ANALYZE {schema}.operations")
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Writer(threading.Thread):
    """MEMORY.WRITE calls one after another; latencies (s) by phase."""

    def __init__(self, store: Any) -> None:
        super().__init__(daemon=True)
        self.memory = create_memory(store)
        self.phase = "quiet"
        self.latencies: dict[str, list[float]] = {"quiet": [], "pruning": []}
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            body = {"memories": [{"content": f"note {n}"}]}
            phase, started = self.phase, time.perf_counter()
            result = self.memory.execute("MEMORY.WRITE", body, operation_id=f"w-{n}")
            self.latencies[phase].append(time.perf_counter() - started)
            self.failures += result.status != "success"
            n += 1


def _summary(latencies: list[float]) -> dict[str, Any]:
    if not latencies:
        return {"calls": 0}
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"calls": len(ordered), "p50 ms": round(statistics.median(ordered) * 1000, 1),
            "p99 ms": round(p99 * 1000, 1), "max ms": round(ordered[-1] * 1000, 1)}  # fmt: skip


def measure(name: str, store: Any, args: argparse.Namespace) -> dict[str, Any]:
    writer = Writer(store)
    writer.start()
    time.sleep(args.quiet_s)  # the quiet phase is a duration, not a wait for an event
    writer.phase = "pruning"
    started = time.perf_counter()
    report = store.prune_ledgers(batch=args.batch)
    elapsed = time.perf_counter() - started
    writer.stop.set()
    writer.join()
    left = count_young(name, store)
    return {
        "store": name,
        "deleted": report.operations,
        "rows/s": round(report.operations / elapsed),
        "prune s": round(elapsed, 1),
        "transactions": report.batches,
        "longest tx ms": round(report.longest_batch_s * 1000, 1),
        "young left": left,
        "writer quiet": _summary(writer.latencies["quiet"]),
        "writer pruning": _summary(writer.latencies["pruning"]),
        "writer failures": writer.failures,
        "load": round(os.getloadavg()[0], 1),
    }


def count_young(name: str, store: Any) -> int:
    sql = "SELECT count(*) FROM {t} WHERE operation_id LIKE 'bench-%'"
    if name == "sqlite":
        return int(store._conn().execute(sql.format(t="operations")).fetchone()[0])
    with store._tx(None) as conn:
        return int(conn.execute(sql.format(t=f"{store._quoted}.operations")).fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="forgotten ledger rows")
    parser.add_argument("--young", type=int, default=100_000, help="rows inside the window")
    parser.add_argument("--batch", type=int, default=1000, help="rows per prune transaction")
    parser.add_argument("--quiet-s", type=float, default=5.0, help="writer alone first, s")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    makers = {"sqlite": sqlite_store, "postgres": postgres_store}
    results = []
    for name in args.stores.split(","):
        loaded = time.perf_counter()
        with makers[name](args.rows, args.young) as store:
            print(f"{name}: {args.rows + args.young:,} ledger rows loaded in "
                  f"{time.perf_counter() - loaded:.0f} s", flush=True)  # fmt: skip
            result = measure(name, store, args)
        assert result["young left"] == args.young, result
        print(json.dumps(result), flush=True)
        results.append(result)
    print("\n| store | rows deleted | rows/s | transactions | longest tx ms | writer p50/p99/max "
          "ms quiet | writer p50/p99/max ms pruning | load |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        q, p = r["writer quiet"], r["writer pruning"]
        print(f"| {r['store']} | {r['deleted']:,} | {r['rows/s']:,} | {r['transactions']} | "
              f"{r['longest tx ms']} | {q.get('p50 ms')}/{q.get('p99 ms')}/{q.get('max ms')} | "
              f"{p.get('p50 ms')}/{p.get('p99 ms')}/{p.get('max ms')} | {r['load']} |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
