"""``ditto-worker reindex``: how long writers and searchers wait while it runs, in one run.

MEM-RET-4 (:mod:`ditto_plugin_sqlite.reembed`, :mod:`ditto_plugin_postgres.reembed`,
:mod:`ditto_plugin_mysql.reembed`). ``--n`` memories (default 100,000) are written with
the 64-dim ``HashingEmbedder`` (seed 0), then re-embedded with the 384-dim one (seed 7)
by ``reembed_embeddings`` while two threads use other store objects of the old identity
(workers not restarted yet): one writes a memory every 5 ms, one runs a ``vector``
search every 5 ms; each call is timed. Printed: the reindex's wall time, the longest
write and search seen while it ran (SQLite's switch holds the write lock: a write waits
for it up to the 5 s busy timeout, then fails), the calls that failed by error code
(``EMBEDDING_MISMATCH`` after the switch is expected: those threads keep the old model),
and the load average.

    python bench/reindex_switch.py                          # SQLite, 100k
    python bench/reindex_switch.py --store postgres --n 20000   # DITTO_TEST_POSTGRES_URL
    python bench/reindex_switch.py --store mysql --n 20000      # DITTO_TEST_MYSQL_URL
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any

from ditto_worker.contracts import MemorySearchInput, MemoryWriteInput
from ditto_worker.errors import MemoryError
from ditto_worker.memory.ports import EmbeddingProvider
from ditto_worker.testing import HashingEmbedder

Make = Callable[[EmbeddingProvider], Any]
OLD = HashingEmbedder(dims=64, seed=0)


@contextmanager
def _backend(store: str) -> Iterator[Make]:
    """``make(embedder)`` on a fresh file, schema or database, removed afterwards."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    if store == "sqlite":
        from ditto_plugin_sqlite import SqliteMemoryStore

        with tempfile.TemporaryDirectory() as folder:
            yield lambda e: SqliteMemoryStore(os.path.join(folder, "m.sqlite"), embedder=e)
    elif store == "postgres":
        import psycopg

        from ditto_plugin_postgres import PostgresMemoryStore

        url = os.environ["DITTO_TEST_POSTGRES_URL"]
        try:
            yield lambda e: PostgresMemoryStore(url, schema=name, embedder=e)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    else:
        from ditto_plugin_mysql import MysqlMemoryStore

        url = os.environ["DITTO_TEST_MYSQL_URL"]
        try:
            yield lambda e: MysqlMemoryStore(url, database=name, embedder=e)
        finally:
            with closing(MysqlMemoryStore(url, database=name)) as plain:
                with plain._direct() as conn, conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _fill(make: Make, n: int) -> None:
    words = [f"w{i}" for i in range(5000)]
    with closing(make(OLD)) as store:
        for start in range(0, n, 1000):
            drafts = [
                {"content": " ".join(words[(i * k) % len(words)] for k in (1, 7, 31, 97))}
                for i in range(start, min(n, start + 1000))
            ]
            store.write(MemoryWriteInput.model_validate({"memories": drafts}))


def _loop(make: Make, call: Callable[[Any], Any], stop: threading.Event,
          waits: list[float], failed: list[str]) -> None:  # fmt: skip
    with closing(make(OLD)) as store:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                call(store)
            except MemoryError as exc:
                failed.append(str(exc.code))
            waits.append(time.perf_counter() - started)
            time.sleep(0.005)


def _write(store: Any) -> Any:
    return store.write(MemoryWriteInput.model_validate({"memories": [{"content": "w1 w7"}]}))


def _search(store: Any) -> Any:
    return store.search(MemorySearchInput(query="w3 w21", strategy="vector", limit=10))


def main() -> None:
    """Run the bench (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--store", choices=("sqlite", "postgres", "mysql"), default="sqlite")
    args = parser.parse_args()
    with _backend(args.store) as make:
        started = time.perf_counter()
        _fill(make, args.n)
        print(f"{args.store}: filled {args.n} memories in {time.perf_counter() - started:.1f} s")
        stop = threading.Event()
        results: dict[str, tuple[list[float], list[str]]] = {"write": ([], []), "search": ([], [])}
        threads = [
            threading.Thread(target=_loop, args=(make, fn, stop, *results[kind]))
            for kind, fn in (("write", _write), ("search", _search))
        ]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            started = time.perf_counter()
            with closing(make(HashingEmbedder(dims=384, seed=7))) as new:
                done = new.reembed_embeddings(batch_size=512)
            took = time.perf_counter() - started
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    print(f"reindex: {done} memories embedded in {took:.1f} s")
    for kind, (waits, failed) in results.items():
        codes = {code: failed.count(code) for code in sorted(set(failed))}
        print(f"{kind}: {len(waits)} calls, longest {max(waits) * 1000:.0f} ms, "
              f"failed: {codes or 'none'}")  # fmt: skip
    print("(EMBEDDING_MISMATCH after the switch is expected: those threads keep the old model)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
