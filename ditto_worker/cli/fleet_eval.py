"""``ditto-worker eval locomo``: the LoCoMo evaluation through the fleet.

Same measurement as :mod:`ditto_worker.cli.eval` (evidence recall@5/@10 overall and
per category, search latency p50/p95), but every write and every search is a node call:
MEMORY.WRITE batches on ``memory.write`` and MEMORY.SEARCH per strategy on
``memory.search``, through a :class:`~ditto_worker.fleet.client.DittoClient` and a real Celery
worker (the in-process one: kombu's ``memory://`` transport, the same tasks, routing and
JSON serialization as a Redis fleet). The worker's store is a fresh SQLite file per
conversation with the local embedding model (one process-wide instance, micro-batched);
MEMORY.SEARCH runs the hybrid pipeline in the worker
(``create_retrieval_memory_search_provider``, MEM-RET-3). Latencies are client round trips.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ditto_worker.cli.demo import load_conversation
from ditto_worker.cli.eval import (
    CONVERSATION_PIPELINE,
    INDEX_FIELDS,
    STRATEGIES,
    EvalReport,
    evaluate_strategy,
    ingest,
)
from ditto_worker.config import RuntimeConfig, load_runtime_config
from ditto_worker.contracts import NodeResult
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.launch import open_fleet
from ditto_worker.memory.worker import MemoryWorker, create_memory_worker
from ditto_worker.retrieval.embed import EmbeddingProvider
from ditto_worker.retrieval.search import create_retrieval_memory_search_provider
from ditto_worker.retrieval.settings import RetrievalConfig

__all__ = ["FleetMemory", "evaluate_on_fleet"]


class FleetMemory:
    """The two SDK calls the evaluation makes, sent as node calls through ``client``."""

    def __init__(self, client: DittoClient, timeout_s: float = 120.0) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def write(self, input: dict[str, Any]) -> NodeResult[Any]:
        """MEMORY.WRITE on the ``memory.write`` queue."""
        return self.client.invoke("MEMORY.WRITE", input, timeout=self.timeout_s)

    def search(self, input: dict[str, Any]) -> NodeResult[Any]:
        """MEMORY.SEARCH on the ``memory.search`` queue."""
        return self.client.invoke("MEMORY.SEARCH", input, timeout=self.timeout_s)


def evaluate_on_fleet(
    path: str | Path,
    embedder: EmbeddingProvider,
    pipeline: RetrievalConfig | None = None,
    strategies: Sequence[str] = STRATEGIES,
    config: RuntimeConfig | None = None,
    index_fields: Sequence[str] = INDEX_FIELDS,
) -> EvalReport:
    """Ingest one conversation through the fleet and search every question per strategy.

    Args:
        path: a LoCoMo conversation file.
        embedder: the embedding provider of the worker's store and of its pipeline.
        pipeline: hybrid settings (default :data:`CONVERSATION_PIPELINE`).
        strategies: ``keyword``, ``vector``, ``hybrid``.
        config: runtime config (default: in-process fleet, built-in defaults).
        index_fields: the store's ``indexFields`` (default ``speaker``).

    Raises:
        EvalError: a node call did not succeed.
    """
    from ditto_plugin_sqlite import SqliteMemoryStore

    conv = load_conversation(path)
    config = config or load_runtime_config(None, env={})
    with tempfile.TemporaryDirectory(prefix="ditto-eval-") as folder:
        store = SqliteMemoryStore(
            Path(folder) / "eval.sqlite", embedder=embedder, index_fields=index_fields
        )
        search = create_retrieval_memory_search_provider(
            store, embedder, pipeline or CONVERSATION_PIPELINE
        )

        def worker() -> MemoryWorker:
            return create_memory_worker(store, search=search)

        try:
            with open_fleet(config, workers=[worker]) as client:
                memory = FleetMemory(client)
                start = time.perf_counter()
                dia_by_id = ingest(memory, conv)
                report = EvalReport(conv.name, len(conv.turns), time.perf_counter() - start)
                for strategy in strategies:
                    report.strategies[strategy] = evaluate_strategy(
                        memory, conv, dia_by_id, strategy
                    )
        finally:
            store.close()
    return report
