"""``ditto-worker eval locomo``: the LoCoMo evaluation through the fleet.

Same measurement as :mod:`ditto_worker.cli.eval` (evidence recall@5/@10 overall and
per category, search latency p50/p95), but every write and every search is a node call:
MEMORY.WRITE batches on ``memory.write`` and MEMORY.SEARCH per strategy on
``memory.search``, through a :class:`~ditto_worker.fleet.client.DittoClient` and a real Celery
worker (the in-process one: kombu's ``memory://`` transport, the same tasks, routing and
JSON serialization as a Redis fleet). The worker's store is, by default, a fresh SQLite
file per conversation with the local embedding model (one process-wide instance,
micro-batched). ``store=<name>`` runs on any installed store plugin instead (an entry
point of ``ditto_worker.stores``: ``postgres``, ``qdrant``, ``mysql``, …), built through
its entry point from its environment (``DITTO_WORKER_MEMORY_<STORE>_*``: URL, database)
with ``embedding: local`` and the run's ``indexFields``; each conversation is written in a
fresh tenant scope (``eval-<random>``) and its records are deleted when it is done, so the
run leaves the store as it found it. MEMORY.SEARCH runs the hybrid pipeline in the worker
(``create_retrieval_memory_search_provider``, MEM-RET-3). Latencies are client round trips.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ditto_worker.cli.demo import load_conversation
from ditto_worker.cli.eval import (
    CONVERSATION_PIPELINE,
    INDEX_FIELDS,
    STRATEGIES,
    EvalError,
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
from ditto_worker.scope import Scope

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


@contextmanager
def _eval_store(
    name: str, embedder: EmbeddingProvider, index_fields: Sequence[str]
) -> Iterator[tuple[Any, Scope | None]]:
    """The store of one conversation and the scope to run it in (module docstring)."""
    if name == "sqlite":
        from ditto_plugin_sqlite import SqliteMemoryStore

        with tempfile.TemporaryDirectory(prefix="ditto-eval-") as folder:
            store = SqliteMemoryStore(
                Path(folder) / "eval.sqlite", embedder=embedder, index_fields=index_fields
            )
            try:
                yield store, None
            finally:
                store.close()
        return
    from ditto_worker.runtime.registry import build_store

    settings = {"embedding": "local", "indexFields": list(index_fields)}
    config = load_runtime_config({"plugins": {name: settings}}, env={})
    store = build_store(config, name, env=os.environ)
    try:
        yield store, Scope(tenant=f"eval-{uuid.uuid4().hex[:12]}", user="locomo")
    finally:
        if callable(getattr(store, "close", None)):
            store.close()


def _forget(memory: FleetMemory, ids: Sequence[str], batch_size: int = 500) -> None:
    """Delete the conversation's records (a run on a shared store leaves nothing behind)."""
    for start in range(0, len(ids), batch_size):
        result = memory.client.invoke(
            "MEMORY.DELETE", {"ids": list(ids[start : start + batch_size])},
            timeout=memory.timeout_s,
        )  # fmt: skip
        if result.status != "success":
            raise EvalError(f"MEMORY.DELETE {result.status}: {result.error}")


def evaluate_on_fleet(
    path: str | Path,
    embedder: EmbeddingProvider,
    pipeline: RetrievalConfig | None = None,
    strategies: Sequence[str] = STRATEGIES,
    config: RuntimeConfig | None = None,
    index_fields: Sequence[str] = INDEX_FIELDS,
    store: str = "sqlite",
) -> EvalReport:
    """Ingest one conversation through the fleet and search every question per strategy.

    Args:
        path: a LoCoMo conversation file.
        embedder: the embedding provider of the pipeline (and of the SQLite store).
        pipeline: hybrid settings (default :data:`CONVERSATION_PIPELINE`).
        strategies: ``keyword``, ``vector``, ``hybrid``.
        config: runtime config (default: in-process fleet, built-in defaults).
        index_fields: the store's ``indexFields`` (default ``speaker``).
        store: the store plugin (default ``sqlite``: a fresh file); another installed
            one runs in a fresh scope of the store its environment names (module doc).

    Raises:
        EvalError: a node call did not succeed.
        ConfigError: no store plugin has that name, or its settings are incomplete.
    """
    conv = load_conversation(path)
    config = config or load_runtime_config(None, env={})
    with _eval_store(store, embedder, index_fields) as (plugin, scope):
        search = create_retrieval_memory_search_provider(
            plugin, embedder, pipeline or CONVERSATION_PIPELINE
        )

        def worker() -> MemoryWorker:
            return create_memory_worker(plugin, search=search)

        with open_fleet(config, workers=[worker], scope=scope) as client:
            memory = FleetMemory(client)
            start = time.perf_counter()
            dia_by_id = ingest(memory, conv)
            report = EvalReport(conv.name, len(conv.turns), time.perf_counter() - start)
            try:
                for strategy in strategies:
                    report.strategies[strategy] = evaluate_strategy(
                        memory, conv, dia_by_id, strategy
                    )
            finally:
                if scope is not None:
                    _forget(memory, list(dia_by_id))
    if store != "sqlite":
        report.conversation = f"{report.conversation}@{store}"
    return report
