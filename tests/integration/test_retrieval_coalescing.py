"""Concurrent RETRIEVAL.SEARCH calls held by one retrieval worker share one encode
(issue 28 item 5, MEM-RET-1).

A real Celery worker (threads pool) on real Redis serves a vector pipeline over SQLite
whose query embedder is a :class:`MicroBatchingEmbedder` in front of a model that takes
1 s per batch. Sixteen callers send one RETRIEVAL.SEARCH each at once: while the first
call's batch is in the model, the others are held by the worker's pool and wait in the
batcher, so they reach the model together — a few batches, not sixteen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory, create_memory_worker
from ditto_worker.fleet.client import DittoClient
from ditto_worker.retrieval import MicroBatchingEmbedder, create_retrieval_memory_search_provider
from ditto_worker.retrieval.delegation import create_retrieval_worker
from ditto_worker.testing import HashingEmbedder
from tests.conftest import EVENT_WAIT_S

pytestmark = pytest.mark.integration

CALLERS = 16


class SlowModel(HashingEmbedder):
    """A hashing embedder whose every batch takes ``delay_s``, like a model forward pass;
    it records the size of each batch it is given."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.sizes: list[int] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.sizes.append(len(texts))
        time.sleep(self.delay_s)
        return super().embed(texts)


def test_calls_held_by_one_worker_coalesce_into_one_encode(
    start_fleet_worker: Any, client: DittoClient, tmp_path: Path
) -> None:
    model = SlowModel(delay_s=1.0)
    batcher = MicroBatchingEmbedder(model)
    store = SqliteMemoryStore(tmp_path / "r.sqlite", embedder=batcher)
    create_memory(store).write({"memories": [{"content": f"note {i}"} for i in range(20)]})
    pipeline = create_retrieval_memory_search_provider(store, batcher, {"strategy": "vector"})

    async def search_all() -> list[Any]:
        return await asyncio.gather(*(
            client.ainvoke("RETRIEVAL.SEARCH", {"target": {"name": "memories"},
                           "query": f"what about note {i}?", "limit": 2}, timeout=60)
            for i in range(CALLERS)
        ))  # fmt: skip

    with start_fleet_worker(
        lambda: create_memory_worker(store),
        queues=["retrieval.search"],
        concurrency=CALLERS,
        retrieval_factory=lambda: create_retrieval_worker({"memories": pipeline}),
    ):
        model.sizes.clear()
        calls_before = batcher.stats.calls
        results = asyncio.run(search_all())
    assert [r.status for r in results] == ["success"] * CALLERS, [r.error for r in results]
    assert all(len(r.output) == 2 for r in results)
    assert batcher.stats.calls - calls_before == CALLERS
    assert sum(model.sizes) == CALLERS  # one text per call, none embedded twice
    # the first call may open a batch alone; the other 15 waited for it and went together
    assert len(model.sizes) <= 4, model.sizes
    assert max(model.sizes) >= CALLERS // 2, model.sizes
    batcher.close()
    store.close()


def test_a_retrieval_worker_holds_32_calls_by_default(redis_url: str, tmp_path: Path) -> None:
    """``ditto-worker worker --nodes retrieval`` with the shipped settings: a threads pool
    of 32 (``workers.retrieval.concurrency``) and as many messages reserved, so 32
    concurrent callers are all held by the worker and can share the model's batches."""
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet.celery_app import create_celery_app
    from tests.integration._procs import WorkerProc

    db = tmp_path / "memory.sqlite"
    create_memory(SqliteMemoryStore(db)).write({"memories": [{"content": "x"}]})
    (tmp_path / "ditto.yaml").write_text(
        "workers:\n  retrieval:\n    targets:\n      memories: {store: sqlite, pipeline: {}}\n"
    )
    env = {"DITTO_BROKER_URL": redis_url, "DITTO_RESULT_BACKEND": "",
           "DITTO_WORKER_MEMORY_SQLITE_PATH": str(db)}  # fmt: skip
    worker = WorkerProc(tmp_path, ["--nodes", "retrieval", "-n", "held@%h"], env)
    app = create_celery_app(FleetSettings(broker_url=redis_url))
    try:
        worker.wait_ready()
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + EVENT_WAIT_S
        while not stats and time.monotonic() < deadline:
            stats = app.control.inspect(timeout=1).stats() or {}
        (info,) = stats.values()
        assert info["pool"]["implementation"].endswith("thread:TaskPool")
        assert info["pool"]["max-concurrency"] == 32
        assert info["prefetch_count"] == 32  # prefetch multiplier 1: one message per thread
    finally:
        app.close()
        worker.stop()
