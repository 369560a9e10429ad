"""Embedding throughput through the retrieval queue vs direct ``model.encode``.

One RETRIEVAL worker process (threads pool, ``--concurrency`` threads sharing one
all-MiniLM-L6-v2 behind a ``MicroBatchingEmbedder``) serves a target whose pipeline is
``vector`` search over a small SQLite store, so each RETRIEVAL.SEARCH is dominated by
embedding its query. N callers on one event loop send single-question
``RETRIEVAL.SEARCH`` calls with ``await DittoClient.ainvoke`` through a real Redis.
Compared with ``model.encode`` of the same texts in this process at batch size N (what
perfect coalescing of N concurrent queries would give): queries/s and the ratio.

    python bench/retrieval_queue.py [--callers 1 8 32] [--queries 16] [--concurrency 8]

Without ``--redis`` it starts a throwaway ``redis-server`` on a free loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ditto_worker.testing.servers import RedisServer

TOPICS = ["coffee", "hiking", "tax", "dance", "guitar", "garden", "python", "travel"]


def _worker_app(redis_url: str, db_path: str) -> Any:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker.config import load_runtime_config
    from ditto_worker.fleet.launch import create_worker_app
    from ditto_worker.retrieval import (
        LocalEmbeddingProvider,
        MicroBatchingEmbedder,
        create_retrieval_memory_search_provider,
    )
    from ditto_worker.retrieval.delegation import create_retrieval_worker

    def retrieval() -> Any:
        embedder = MicroBatchingEmbedder(LocalEmbeddingProvider(), max_batch_size=64)
        store = SqliteMemoryStore(db_path, embedder=embedder)
        provider = create_retrieval_memory_search_provider(store, embedder, {"strategy": "vector"})
        return create_retrieval_worker({"memories": provider})

    config = load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={})
    return create_worker_app(config, [retrieval])


def serve(redis_url: str, db_path: str, concurrency: int) -> None:
    """The benchmark's retrieval worker (its own process)."""
    _worker_app(redis_url, db_path).worker_main([
        "worker", "-P", "threads", "-c", str(concurrency), "-l", "WARNING", "-E",
        "-Q", "retrieval.search", "-n", "bench-retrieval@%h",
    ])  # fmt: skip


def _questions(callers: int, queries: int) -> list[list[str]]:
    return [[f"What did person {i} say about {TOPICS[(i + j) % len(TOPICS)]} on day {j}?"
             for j in range(queries)] for i in range(callers)]  # fmt: skip


async def _through_queue(client: Any, texts: list[list[str]]) -> float:
    async def caller(row: list[str]) -> None:
        for text in row:
            result = await client.ainvoke(
                "RETRIEVAL.SEARCH",
                {"target": {"name": "memories"}, "query": text, "strategy": "vector", "limit": 3},
                timeout=60,
            )
            assert result.status == "success", result.error

    start = time.perf_counter()
    await asyncio.gather(*(caller(row) for row in texts))
    return time.perf_counter() - start


def _direct(model: Any, texts: list[list[str]]) -> float:
    callers = len(texts)
    flat = [t for step in zip(*texts, strict=True) for t in step]  # one batch per "round"
    start = time.perf_counter()
    for at in range(0, len(flat), callers):
        model.encode(flat[at : at + callers], batch_size=callers, normalize_embeddings=True)
    return time.perf_counter() - start


def _start_redis() -> RedisServer:
    try:
        return RedisServer().start()
    except RuntimeError as exc:
        raise SystemExit(f"{exc}: pass --redis URL or install redis-server") from None


def run(redis_url: str, callers_list: list[int], queries: int, concurrency: int) -> None:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker.config import FleetSettings
    from ditto_worker.contracts import MemoryDraft, MemoryWriteInput
    from ditto_worker.fleet import DittoClient
    from ditto_worker.retrieval import LocalEmbeddingProvider

    folder = Path(tempfile.mkdtemp(prefix="bench-retrieval-queue-"))
    db_path = str(folder / "r.sqlite")
    local = LocalEmbeddingProvider()
    with SqliteMemoryStore(db_path, embedder=local) as store:
        drafts = [MemoryDraft(content=f"{t} note {i}") for i, t in enumerate(TOPICS * 25)]
        store.write(MemoryWriteInput(memories=drafts))
    worker = subprocess.Popen(
        [sys.executable, __file__, "--serve", redis_url, db_path, str(concurrency)]
    )
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url))
    try:
        warm = _questions(1, 2)
        asyncio.run(_through_queue(client, warm))  # waits for the worker and its model
        print(
            f"embedding through the retrieval queue: 1 worker process, threads -c "
            f"{concurrency}, micro-batched; {queries} single-question calls per caller"
        )
        print(f"{'callers':>8}{'queue q/s':>11}{'direct encode q/s':>19}{'queue/direct':>14}")
        for callers in callers_list:
            texts = _questions(callers, queries)
            queued = _through_queue(client, texts)
            queue_s = asyncio.run(queued)
            direct_s = _direct(local.model, texts)
            total = callers * queries
            print(f"{callers:>8}{total / queue_s:>11.1f}{total / direct_s:>19.1f}"
                  f"{direct_s / queue_s:>14.2f}")  # fmt: skip
    finally:
        client.close()
        worker.terminate()
        worker.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", help="Redis URL (default: a throwaway redis-server)")
    parser.add_argument("--callers", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--queries", type=int, default=16, help="calls per caller")
    parser.add_argument("--concurrency", type=int, default=8, help="retrieval worker threads")
    args = parser.parse_args()
    server = None
    url = args.redis
    if url is None:
        server = _start_redis()
        url = server.url + "/0"
    try:
        run(url, args.callers, args.queries, args.concurrency)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
