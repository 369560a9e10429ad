"""Retrieval benchmarks, in process: micro-batched embedding throughput, and SQLite and
PostgreSQL vector / hybrid search latency at scale.

1. Embedding: N caller threads each embed single queries with all-MiniLM-L6-v2, through a
   ``MicroBatchingEmbedder`` and one at a time (the provider's lock serializes them), vs
   direct ``model.encode`` of the same texts at the batcher's mean batch size. Texts/s and
   the ratios.
2. SQLite at ``--memories`` records (384-dim vectors from the deterministic hashing
   embedder, so writing 100k takes seconds, not the model's minutes; search cost does not
   depend on where vectors come from): p50/p95 latency of keyword, vector (unfiltered,
   10 % filter, 50-row filter) and hybrid searches, limit 10.
3. PostgreSQL (``DITTO_TEST_POSTGRES_URL``, e.g. ``scripts/postgres.sh``; a throwaway
   schema): the same data and searches through ``PostgresMemoryStore`` (pgvector HNSW,
   maintained while writing).

Run: ``python bench/retrieval.py [--memories 100000] [--callers 16] [--queries 20]
[--sections embedding,sqlite,postgres] [--device cpu|cuda|auto]``. Section 1 starts with
bulk embedding through the provider vs raw ``encode`` on the same device (target >= 0.95x)
and one query's p50 through the micro-batcher (the GPU goal: <= 3 ms with
``--device cuda``; no GPU could be had for this work, so that line is unmeasured). The
RETRIEVAL queue's own overhead (Celery round trip) is measured by the fleet benchmarks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.contracts import MemorySearchInput, MemoryWriteInput
from ditto_worker.retrieval import LocalEmbeddingProvider, MicroBatchingEmbedder
from ditto_worker.retrieval.pipeline import run_pipeline
from ditto_worker.retrieval.settings import RetrievalConfig
from ditto_worker.testing import HashingEmbedder

TOPICS = ["coffee", "hiking", "tax", "dance", "guitar", "garden", "python", "travel", "dogs",
          "painting"]  # fmt: skip


def _threads(callers: int, work: Callable[[int], None]) -> float:
    """Run ``work(i)`` in ``callers`` threads started together; wall seconds."""
    barrier = threading.Barrier(callers + 1)

    def run(index: int) -> None:
        barrier.wait()
        work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def bench_bulk(local: LocalEmbeddingProvider, texts: int = 1000, rounds: int = 5) -> None:
    """Bulk embedding through the provider vs the raw ``SentenceTransformer.encode`` of the
    same texts on the same device, interleaved rounds (issue 28 item 6: >= 0.95x), and one
    query's p50 through the micro-batcher."""
    flat = [f"memory {i} about {TOPICS[i % 10]} and {TOPICS[(i * 3) % 10]}" for i in range(texts)]
    raw_s, ours_s = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        local.model.encode(flat, batch_size=64, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)  # fmt: skip
        raw_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        local.embed(flat)
        ours_s.append(time.perf_counter() - start)
    raw, ours = statistics.median(raw_s), statistics.median(ours_s)
    print(f"bulk embedding on {local.device}: {texts} texts, median of {rounds} rounds")
    print(f"  raw encode  {texts / raw:8.1f} texts/s")
    print(f"  provider    {texts / ours:8.1f} texts/s   provider/raw {raw / ours:.3f}x")
    batcher = MicroBatchingEmbedder(local, max_batch_size=64, max_wait_ms=2)
    one = []
    for i in range(50):
        start = time.perf_counter()
        batcher.embed([flat[i]])
        one.append((time.perf_counter() - start) * 1000)
    batcher.close()
    print(f"  one query through the micro-batcher: p50 {statistics.median(one):.2f} ms")


def bench_embedding(callers: int, queries: int, device: str = "cpu") -> None:
    """Section 1 (see module doc)."""
    local = LocalEmbeddingProvider(device=device)
    bench_bulk(local)
    texts = [[f"What did person {i} say about {TOPICS[(i + j) % 10]} on day {j}?"
              for j in range(queries)] for i in range(callers)]  # fmt: skip
    local.embed(texts[0][:4])  # warm up
    batcher = MicroBatchingEmbedder(local, max_batch_size=64, max_wait_ms=2)
    batched = _threads(callers, lambda i: [batcher.embed([t]) for t in texts[i]])
    single = _threads(callers, lambda i: [local.embed([t]) for t in texts[i]])
    total = callers * queries
    size = max(1, round(batcher.stats.texts / max(1, batcher.stats.batches)))
    flat = [t for row in texts for t in row]
    start = time.perf_counter()
    for at in range(0, total, size):
        local.model.encode(flat[at : at + size], batch_size=size, normalize_embeddings=True)
    direct = time.perf_counter() - start
    batcher.close()
    print(f"embedding: {callers} callers x {queries} single-text queries ({total} texts)")
    print(
        f"  micro-batched      {total / batched:8.1f} texts/s  "
        f"({batcher.stats.batches} batches, mean {size}, largest {batcher.stats.largest})"
    )
    print(f"  one at a time      {total / single:8.1f} texts/s")
    print(f"  direct encode({size:>2}) {total / direct:8.1f} texts/s")
    print(f"  batched / one-at-a-time {single / batched:.2f}x; "
          f"batched / direct {direct / batched:.2f}")  # fmt: skip


def _fill(store: SqliteMemoryStore, count: int) -> None:
    batch = 2000
    for start in range(0, count, batch):
        drafts = [{"content": f"memory {i} about {TOPICS[i % 10]} and {TOPICS[(i * 7) % 10]} "
                              f"number {i % 997}",
                   "metadata": {"g": i % 10, "u": i % 2000}}
                  for i in range(start, min(count, start + batch))]  # fmt: skip
        store.write(MemoryWriteInput.model_validate({"memories": drafts}))


def _latency(run: Callable[[int], Any], rounds: int) -> str:
    times = []
    for i in range(rounds):
        start = time.perf_counter()
        run(i)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    return f"{statistics.median(times):8.1f} / {p95:8.1f}"


def _searches(store: Any, embedder: HashingEmbedder, count: int, rounds: int) -> None:
    """The search rows of sections 2 and 3 (same queries on both stores)."""
    config = RetrievalConfig()

    def search(strategy: str, flt: dict[str, Any] | None = None) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            request = MemorySearchInput(query=f"what about {TOPICS[i % 10]} number {i}",
                                        strategy=strategy, filter=flt, limit=10)  # fmt: skip
            if strategy == "hybrid":
                return run_pipeline(store, embedder, config, request)
            return store.search(request)

        return run

    print("  search (limit 10)            p50 ms / p95 ms")
    for name, run in (
        ("keyword", search("keyword")),
        ("vector", search("vector")),
        ("vector, filter 10 %", search("vector", {"g": 3})),
        (f"vector, filter {count // 2000} rows", search("vector", {"u": 7})),
        ("hybrid (candidates 100)", search("hybrid")),
        ("hybrid, filter 10 %", search("hybrid", {"g": 3})),
    ):
        print(f"  {name:<28} {_latency(run, rounds)}")


def bench_sqlite(count: int, rounds: int) -> None:
    """Section 2 (see module doc)."""
    embedder = HashingEmbedder(dims=384)
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteMemoryStore(Path(folder) / "bench.sqlite", embedder=embedder)
        start = time.perf_counter()
        _fill(store, count)
        print(f"sqlite: wrote {count} memories with vectors in {time.perf_counter() - start:.1f} s")
        _searches(store, embedder, count, rounds)
        store.close()


def bench_postgres(url: str, count: int, rounds: int) -> None:
    """Section 3 (see module doc): the same data and queries on PostgreSQL + pgvector."""
    import uuid

    import psycopg

    from ditto_plugin_postgres import PostgresMemoryStore

    embedder = HashingEmbedder(dims=384)
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    store = PostgresMemoryStore(url, schema=schema, embedder=embedder)
    try:
        start = time.perf_counter()
        _fill(store, count)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'VACUUM ANALYZE "{schema}".memories')
            conn.execute(f'VACUUM ANALYZE "{schema}".memory_vectors')
        took = time.perf_counter() - start
        print(f"postgres: wrote {count} memories with vectors (HNSW kept) in {took:.1f} s")
        _searches(store, embedder, count, rounds)
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--queries", type=int, default=20, help="queries per caller")
    parser.add_argument("--rounds", type=int, default=20, help="searches per row")
    parser.add_argument(
        "--device", default="cpu",
        help="embedding device: cpu, cuda, cuda:N or auto (as workers.retrieval.device)",
    )  # fmt: skip
    parser.add_argument(
        "--sections", default="embedding,sqlite,postgres",
        help="comma-separated: embedding, sqlite, postgres (needs DITTO_TEST_POSTGRES_URL)",
    )  # fmt: skip
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    if "embedding" in sections:
        bench_embedding(args.callers, args.queries, args.device)
    if "sqlite" in sections:
        bench_sqlite(args.memories, args.rounds)
    url = os.environ.get("DITTO_TEST_POSTGRES_URL", "")
    if "postgres" in sections and url:
        bench_postgres(url, args.memories, args.rounds)
    elif "postgres" in sections:
        print('postgres: skipped (eval "$(bash scripts/postgres.sh start)" first)')


if __name__ == "__main__":
    main()
