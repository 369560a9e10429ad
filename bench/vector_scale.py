"""SQLite vector search at scale: the approximate plan beside the exact one, in one run.

Issue 28 item 1 (:mod:`ditto_plugin_sqlite.nearest`): ``--n`` memories (default 100,000;
``--million`` for 1,000,000) written through ``SqliteMemoryStore.write`` with 384-dim
vectors; each vector is the ``HashingEmbedder`` vector of one of 20,000 texts drawn as
in ``bench/store_scale.py`` (Zipf-like LoCoMo vocabulary) plus seeded Gaussian noise
(cosine to its text's vector about 0.86), so 1M vectors need no hour of embedding.
Metadata ``{d10: i % 10, d100: i % 100, d10000: i % 10000}`` gives filters keeping 10 %,
1 % and 0.01 % of the records.

Queries (``--queries``, default 100, after 10 warm-up calls), limit 10, each answered
by the store (``approx``) and by the exact plan on the same file (``exact``: every
record passing the filter scored by sqlite-vec, the plan the store used before):

* ``text``: the hashing vector of 2-3 middle-frequency words (as store_scale's
  ``vector`` queries);
* ``near``: a perturbed copy of a stored text's vector;
* ``near`` with the 10 %, 1 % and 0.01 % filters.

Printed per kind: p50/p95 ms of both plans and their ratio, recall@10 of the store
against exact (a result counts when it scores at least the exact 10th score, so ties
are not misses; ann-benchmarks' rule), and the shortest answer against ``min(10,
matches)``. Beside the wall-clock p50/p95, the p50 of the process's CPU time per query
(on a shared machine it says what a query costs when the cores are free). Also the
open time (a file from before the index is migrated then), the first search (the
process loads its index) and the load average.

    python bench/vector_scale.py                 # 100k
    python bench/vector_scale.py --million       # 1M (about half an hour)
    python bench/vector_scale.py --n 20000 --queries 30
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import drafts, query_inputs, vocabulary  # noqa: E402

from ditto_plugin_sqlite import SqliteMemoryStore  # noqa: E402
from ditto_plugin_sqlite.nearest import exact_sql  # noqa: E402
from ditto_plugin_sqlite.sql import Sql, compile_filter, in_namespace  # noqa: E402
from ditto_worker.contracts import MemorySearchInput, MemoryWriteInput  # noqa: E402
from ditto_worker.memory.filters import parse_filter  # noqa: E402
from ditto_worker.memory.ports import EmbeddingIdentity  # noqa: E402
from ditto_worker.testing import HashingEmbedder  # noqa: E402

DIMS = 384
TEXTS = 20_000
NOISE = 0.03
BATCH = 1000


class PerturbedEmbedder:
    """``v <i>`` -> the hashing vector of text ``i % TEXTS`` plus noise seeded by ``i``."""

    identity = EmbeddingIdentity("bench", "perturbed-hashing", f"noise={NOISE}", DIMS, "l2")

    def __init__(self, base: np.ndarray[Any, Any], seed: int) -> None:
        self.base, self.seed = base, seed

    def vectors(self, rows: Sequence[int]) -> np.ndarray[Any, Any]:
        rng = np.random.default_rng([self.seed, rows[0] if rows else 0, len(rows)])
        points = self.base[np.asarray(rows) % TEXTS] + NOISE * rng.standard_normal(
            (len(rows), DIMS)
        )
        return points / np.linalg.norm(points, axis=1, keepdims=True)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        rows = [int(text.split()[1]) for text in texts]
        return [list(map(float, row)) for row in self.vectors(rows)]


def load(store: SqliteMemoryStore, n: int) -> float:
    """Write ``n`` memories in batches; memories/s."""
    start = time.perf_counter()
    for first in range(0, n, BATCH):
        batch = [
            {
                "content": f"v {i}",
                "metadata": {"d10": i % 10, "d100": i % 100, "d10000": i % 10000},
            }
            for i in range(first, min(n, first + BATCH))
        ]
        store.write(MemoryWriteInput.model_validate({"memories": batch}))
        if first and first % 100_000 == 0:
            print(f"  written {first}", flush=True)
    return n / (time.perf_counter() - start)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.95) - 1)]


def measure(
    store: SqliteMemoryStore, exact_conn: Any, queries: list[list[float]], flt: Any
) -> dict[str, Any]:
    approx_ms: list[float] = []
    exact_ms: list[float] = []
    approx_cpu: list[float] = []
    exact_cpu: list[float] = []
    found = short = expected = 0
    where = _where(flt)
    for vector in queries:
        start, cpu = time.perf_counter(), time.process_time()
        results = list(store.search(MemorySearchInput(
            query=vector, strategy="vector", limit=10, filter=flt
        )))  # fmt: skip
        approx_ms.append((time.perf_counter() - start) * 1000)
        approx_cpu.append((time.process_time() - cpu) * 1000)
        blob = np.asarray(vector, dtype="<f4").tobytes()
        start, cpu = time.perf_counter(), time.process_time()
        exact = exact_conn.execute(*exact_sql(blob, where, 10)).fetchall()
        exact_ms.append((time.perf_counter() - start) * 1000)
        exact_cpu.append((time.process_time() - cpu) * 1000)
        tenth = exact[-1][6] if exact else 0.0
        found += sum(r.score >= tenth - 1e-5 for r in results)
        short = max(short, len(exact) - len(results))
        expected += len(exact)
    return {
        "approx": percentiles(approx_ms),
        "exact": percentiles(exact_ms),
        "cpu": (statistics.median(approx_cpu), statistics.median(exact_cpu)),
        "recall": found / max(1, expected),
        "short": short,
    }


def _where(flt: Any) -> Sql:
    """The store's own filter SQL (unscoped)."""
    return in_namespace(compile_filter(parse_filter(flt)), "")


def _exact_connection(path: Path) -> Any:
    import sqlite_vec

    from ditto_plugin_sqlite import driver  # the process's one SQLite library (pysqlite3)

    conn = driver.connect(path, isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    return conn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--million", action="store_true", help="--n 1000000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--warmup", type=int, default=10, help="warm-up queries per kind")
    parser.add_argument(
        "--kinds", help="only these kinds: text,near,10%%,1%%,0.01%% (default: all)"
    )
    parser.add_argument(
        "--file", type=Path, help="database file: written (and kept) unless it exists, then reused"
    )
    args = parser.parse_args()
    n = 1_000_000 if args.million else args.n
    words = vocabulary()
    texts = [d["content"] for d in drafts(TEXTS, args.seed, words)]
    hashing = HashingEmbedder(DIMS)
    base = np.asarray(hashing.embed(texts), dtype=np.float64)
    embedder = PerturbedEmbedder(base, args.seed)
    rng = random.Random(args.seed)
    near = embedder.vectors([rng.randrange(10**9) for _ in range(args.queries + 10)])
    near_queries = [list(map(float, row)) for row in near]
    search_inputs = query_inputs(args.queries + 10, args.seed, words)["search"]
    text_queries = hashing.embed([q["query"] for q in search_inputs])
    with tempfile.TemporaryDirectory(prefix="vector-scale-") as folder:
        path = args.file or Path(folder) / "v.sqlite"
        reuse = path.exists()
        start = time.perf_counter()
        store = SqliteMemoryStore(path, embedder=embedder)
        if reuse:  # a file from before the index is migrated here (its vectors coded)
            print(f"open: {time.perf_counter() - start:.2f} s")
        if not reuse:
            rate = load(store, n)
            print(f"n={n} written at {rate:,.0f} memories/s")
        size = sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())
        print(f"file {path.name}: {size / 2**20:,.0f} MiB")
        start = time.perf_counter()
        store.search(MemorySearchInput(query=near_queries[0], strategy="vector", limit=10))
        print(f"first search (builds the index): {time.perf_counter() - start:.2f} s")
        exact_conn = _exact_connection(path)
        cases = [
            ("text", text_queries, None),
            ("near", near_queries, None),
            ("near d10=3 (10%)", near_queries, {"d10": 3}),
            ("near d100=7 (1%)", near_queries, {"d100": 7}),
            ("near d10000=9 (0.01%)", near_queries, {"d10000": 9}),
        ]
        print(f"{'kind':24} {'approx p50/p95 ms':>18} {'exact p50/p95 ms':>18} "
              f"{'x faster':>8} {'cpu ms approx/exact':>20} {'R@10':>6} {'short':>5}")  # fmt: skip
        for name, queries, flt in cases:
            if args.kinds and name.split()[-1].strip("()") not in args.kinds.split(","):
                continue
            measure(store, exact_conn, queries[: args.warmup], flt)
            m = measure(store, exact_conn, queries[10 : 10 + args.queries], flt)
            (a50, a95), (e50, e95), (ac, ec) = m["approx"], m["exact"], m["cpu"]
            print(f"{name:24} {a50:8.1f} /{a95:7.1f} {e50:9.1f} /{e95:7.1f} "
                  f"{e50 / a50:8.1f} {ac:9.1f} /{ec:8.1f} {m['recall']:6.3f} {m['short']:5d}",
                  flush=True)  # fmt: skip
        print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
        exact_conn.close()
        store.close()


if __name__ == "__main__":
    main()
