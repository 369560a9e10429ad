"""RETRIEVAL.SEARCH through the queue vs the same pipeline in-process vs ``model.encode``.

One RETRIEVAL worker process (threads pool, ``--concurrency`` threads; default the
shipped ``workers.retrieval.concurrency``) serves a target whose pipeline is ``vector``
search over a small SQLite store with all-MiniLM-L6-v2 behind a ``MicroBatchingEmbedder``,
so each RETRIEVAL.SEARCH is dominated by embedding its query. For each number of callers N
(``--callers``), side by side in one run:

* queue: N callers on one event loop send single-question ``RETRIEVAL.SEARCH`` calls with
  ``await DittoClient.ainvoke`` through a real Redis;
* in-process: N threads run the same pipeline (same provider, store and micro-batcher
  settings, its own model) through ``Memory.execute("MEMORY.SEARCH")`` in this process;
* encode: ``model.encode`` of the same texts in this process at batch size N (what perfect
  coalescing of N concurrent queries would give).

Printed: queries/s of each, the ratios queue/in-process (target >= 0.8 at 8 and 32
callers, issue 28 item 5) and queue/encode, and where the time goes: mean texts per model
batch (how well concurrent calls coalesced into one encode) and the model's busy time per
query, in the worker and in-process (``BatchStats``; the worker's are read with a
``BENCH.STATS`` node on its own queue); the rest of a queued call's time is the
transport, the pipeline around the model and waiting for a core (the load average is
printed).

    python bench/retrieval_queue.py [--callers 1 8 32] [--queries 16] [--concurrency N]

Without ``--redis`` it starts a throwaway ``redis-server`` on a free loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ditto_worker.testing.servers import RedisServer

TOPICS = ["coffee", "hiking", "tax", "dance", "guitar", "garden", "python", "travel"]
STATS = "BENCH.STATS"


def _pipeline(db_path: str, max_wait_ms: float | None = None) -> tuple[Any, Any]:
    """(the SDK over the vector pipeline of ``db_path``, its micro-batcher); the shipped
    micro-batch settings unless ``max_wait_ms`` is given."""
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker.memory.core import Memory
    from ditto_worker.memory.search.settings import RetrievalConfig
    from ditto_worker.retrieval import (
        LocalEmbeddingProvider,
        MicroBatchingEmbedder,
        create_retrieval_memory_search_provider,
    )
    from ditto_worker.retrieval.delegation import search_only

    micro = RetrievalConfig().micro_batch  # the shipped batching settings
    embedder = MicroBatchingEmbedder(LocalEmbeddingProvider(),
                                     max_batch_size=micro.max_batch_size,
                                     max_wait_ms=micro.max_wait_ms if max_wait_ms is None
                                     else max_wait_ms)  # fmt: skip
    store = SqliteMemoryStore(db_path, embedder=embedder)
    provider = create_retrieval_memory_search_provider(store, embedder, {"strategy": "vector"})
    memory: Memory = search_only({"memories": provider}, None)["memories"]
    return memory, embedder


def _worker_app(redis_url: str, db_path: str, max_wait_ms: float | None = None) -> Any:
    from kombu.entity import Exchange, Queue

    from ditto_worker.config import load_runtime_config
    from ditto_worker.fleet.launch import create_worker_app
    from ditto_worker.retrieval.delegation import retrieval_definition
    from ditto_worker.runtime import NodeSpec, WorkerDefinition

    built: dict[str, Any] = {}

    def targets() -> dict[str, Any]:
        if not built:
            built["memory"], built["embedder"] = _pipeline(db_path, max_wait_ms)
        return {"memories": built["memory"]}

    def bench() -> Any:
        def stats(input: Any, ctx: Any) -> dict[str, Any]:
            targets()
            return asdict(built["embedder"].stats)

        return WorkerDefinition.of("BENCH", [NodeSpec(STATS, stats)])

    config = load_runtime_config({"fleet": {"brokerUrl": redis_url}}, env={})
    app = create_worker_app(config, [lambda: retrieval_definition(targets), bench])
    queue = STATS.lower()
    app.conf.task_queues = [*app.conf.task_queues, Queue(queue, Exchange(queue), queue)]
    return app


def serve(redis_url: str, db_path: str, concurrency: int, max_wait_ms: float | None) -> None:
    """The benchmark's retrieval worker (its own process)."""
    _worker_app(redis_url, db_path, max_wait_ms).worker_main([
        "worker", "-P", "threads", "-c", str(concurrency), "-l", "WARNING", "-E",
        "-Q", f"retrieval.search,{STATS.lower()}", "-n", "bench-retrieval@%h",
    ])  # fmt: skip


def _questions(callers: int, queries: int) -> list[list[str]]:
    return [[f"What did person {i} say about {TOPICS[(i + j) % len(TOPICS)]} on day {j}?"
             for j in range(queries)] for i in range(callers)]  # fmt: skip


def _search_input(text: str) -> dict[str, Any]:
    return {"query": text, "strategy": "vector", "limit": 3}


async def _through_queue(client: Any, texts: list[list[str]]) -> float:
    async def caller(row: list[str]) -> None:
        for text in row:
            result = await client.ainvoke(
                "RETRIEVAL.SEARCH", {"target": {"name": "memories"}, **_search_input(text)},
                timeout=300,
            )  # fmt: skip
            assert result.status == "success", result.error

    start = time.perf_counter()
    await asyncio.gather(*(caller(row) for row in texts))
    return time.perf_counter() - start


def _in_process(memory: Any, texts: list[list[str]]) -> float:
    def caller(row: list[str]) -> None:
        for text in row:
            result = memory.execute("MEMORY.SEARCH", _search_input(text))
            assert result.status == "success", result.error

    with ThreadPoolExecutor(len(texts)) as pool:
        start = time.perf_counter()
        list(pool.map(caller, texts))
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


def _worker_stats(client: Any) -> dict[str, Any]:
    result = client.invoke(STATS, {}, timeout=300)
    assert result.status == "success", result.error
    stats: dict[str, Any] = result.output
    return stats


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in ("calls", "batches", "embed_s")}


def _shape(d: dict[str, float], queries: int) -> str:
    per_batch = d["calls"] / d["batches"] if d["batches"] else float("nan")
    return f"{per_batch:5.1f} {1000 * d['embed_s'] / queries:7.1f}"


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _write_store(db_path: str) -> None:
    from ditto_plugin_sqlite import SqliteMemoryStore
    from ditto_worker.contracts import MemoryDraft, MemoryWriteInput
    from ditto_worker.retrieval import LocalEmbeddingProvider

    with SqliteMemoryStore(db_path, embedder=LocalEmbeddingProvider()) as store:
        drafts = [MemoryDraft(content=f"{t} note {i}") for i, t in enumerate(TOPICS * 25)]
        store.write(MemoryWriteInput(memories=drafts))


def run(redis_url: str, args: argparse.Namespace) -> None:
    from ditto_worker.config import FleetSettings, load_runtime_config
    from ditto_worker.fleet import DittoClient
    from ditto_worker.fleet.client_base import installed_nodes
    from ditto_worker.runtime import NodeSpec, WorkerDefinition
    from ditto_worker.runtime.registry import node_table

    concurrency = args.concurrency or load_runtime_config(None).retrieval_worker.concurrency
    folder = Path(tempfile.mkdtemp(prefix="bench-retrieval-queue-"))
    db_path = str(folder / "r.sqlite")
    _write_store(db_path)
    memory, embedder = _pipeline(db_path, args.max_wait_ms)
    wait = "" if args.max_wait_ms is None else str(args.max_wait_ms)
    worker = subprocess.Popen([sys.executable, __file__, "--serve", redis_url, db_path,
                               str(concurrency), wait])  # fmt: skip
    stats_kind = WorkerDefinition.of("BENCH", [NodeSpec(STATS, lambda i, c: {})])
    table = {**installed_nodes(), **node_table([stats_kind])}
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_url), nodes=table)
    try:
        asyncio.run(_through_queue(client, _questions(1, 2)))  # waits for worker and model
        _in_process(memory, _questions(1, 2))
        print(f"RETRIEVAL.SEARCH (vector) through the queue vs in-process vs encode: 1 worker "
              f"process, threads -c {concurrency}, batch window {embedder.max_wait_s * 1000:g} "
              f"ms; {args.queries} calls per caller; load "
              f"average {_loadavg()} on {os.cpu_count()} cores")  # fmt: skip
        print(f"{'':>8}{'queries/s':^30}{'ratio queue to':^20}"
              f"{'texts/batch, model ms/query':^30}")  # fmt: skip
        print(f"{'callers':>8}{'queue':>10}{'in-proc':>10}{'encode':>10}{'in-proc':>10}"
              f"{'encode':>10}{'worker':>15}{'in-process':>15}")  # fmt: skip
        for callers in args.callers:
            texts = _questions(callers, args.queries)
            total = callers * args.queries
            before = _worker_stats(client)
            queue_s = asyncio.run(_through_queue(client, texts))
            held = _delta(_worker_stats(client), before)
            local_before = asdict(embedder.stats)
            local_s = _in_process(memory, texts)
            local = _delta(asdict(embedder.stats), local_before)
            encode_s = _direct(embedder.provider.model, texts)
            print(f"{callers:>8}{total / queue_s:>10.1f}{total / local_s:>10.1f}"
                  f"{total / encode_s:>10.1f}{local_s / queue_s:>10.2f}{encode_s / queue_s:>10.2f}"
                  f"{_shape(held, total):>15}{_shape(local, total):>15}")  # fmt: skip
        print(f"load average at the end {_loadavg()}")
    finally:
        client.close()
        embedder.close()
        worker.terminate()
        worker.wait(60)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        wait = float(sys.argv[5]) if sys.argv[5] else None
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), wait)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", help="Redis URL (default: a throwaway redis-server)")
    parser.add_argument("--callers", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--queries", type=int, default=16, help="calls per caller")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="worker threads (default: workers.retrieval.concurrency)")  # fmt: skip
    parser.add_argument("--max-wait-ms", type=float, default=None,
                        help="micro-batch window, both sides (default: shipped)")  # fmt: skip
    args = parser.parse_args()
    server = None
    url = args.redis
    if url is None:
        server = _start_redis()
        url = server.url + "/0"
    try:
        run(url, args)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
