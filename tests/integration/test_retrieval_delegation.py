"""MEMORY.SEARCH delegated to RETRIEVAL.SEARCH on its own queue (MEM-RET-1/2/5).

Real worker, real Redis, real SQLite. The retrieval target here is the store's native
keyword search (``create_memory_retrieval_provider`` in the seed's terms); the embedding
pipeline plugs into the same target slot.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_plugin_sqlite.db import transaction
from ditto_worker import CancelToken, create_memory, create_memory_worker, to_wire
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.failures import node_result_of
from ditto_worker.fleet.results import RESULT_KEY_PREFIX
from ditto_worker.retrieval.delegation import RemoteRetrievalSearchProvider, create_retrieval_worker
from tests.conftest import EVENT_WAIT_S

pytestmark = pytest.mark.integration

ALL_QUEUES = [*NODE_QUEUES.values(), "retrieval.search"]
SLOW_SQL = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


class SlowSearchStore(SqliteMemoryStore):
    def search(self, input: Any, options: Any = None) -> Any:
        with transaction(self._conn(), options, write=False) as conn:
            conn.execute(SLOW_SQL).fetchone()
        return []


def test_memory_search_delegates_with_the_contract_unchanged(
    start_fleet_worker: Any, client: DittoClient, tmp_path: Path
) -> None:  # MEM-RET-2
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    direct = create_memory(store)
    direct.write({"memories": [
        {"content": "Jon lost his job as a banker", "metadata": {"speaker": "Jon"}},
        {"content": "Gina opened a dance studio", "metadata": {"speaker": "Gina"}},
        {"content": "Jon wants to open a dance studio too", "metadata": {"speaker": "Jon"}},
    ]})  # fmt: skip
    remote = RemoteRetrievalSearchProvider(target={"name": "memories"})  # worker's own client

    with start_fleet_worker(
        lambda: create_memory_worker(store, search=remote),
        queues=ALL_QUEUES,
        concurrency=4,
        retrieval_factory=lambda: create_retrieval_worker({"memories": store}),
    ):
        for payload in [
            {"query": "dance studio", "limit": 5},
            {"query": "dance studio", "filter": {"speaker": "Jon"}},
            {"query": "dance", "strategy": "graph"},
            {"query": "dance", "limit": 0},
        ]:
            delegated = to_wire(client.invoke("MEMORY.SEARCH", payload, timeout=10))
            native = to_wire(direct.search(payload))
            assert delegated.pop("executionId") and native.pop("executionId")
            assert delegated == native, payload
        retrieval = client.invoke(
            "RETRIEVAL.SEARCH", {"target": {"name": "memories"}, "query": "banker"}, timeout=10
        )
        assert retrieval.status == "success" and retrieval.node == "RETRIEVAL.SEARCH"
        assert [h.memory.content for h in retrieval.output] == ["Jon lost his job as a banker"]
        unknown = client.invoke(
            "RETRIEVAL.SEARCH", {"target": {"name": "x"}, "query": "a"}, timeout=10
        )
        assert unknown.status == "failed" and unknown.error.code == "UNKNOWN_TARGET"
        missing = client.invoke("RETRIEVAL.SEARCH", {"query": "a"}, timeout=10)
        assert missing.error.code == "INVALID_INPUT" and "target" in missing.error.message


def test_cancelling_memory_search_cancels_the_retrieval_sub_call(
    start_fleet_worker: Any, client: DittoClient, redis_client: redis.Redis, tmp_path: Path
) -> None:  # MEM-RET-5: revoking the outer call revokes the inner one
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    slow = SlowSearchStore(tmp_path / "m.sqlite")
    remote = RemoteRetrievalSearchProvider(target={"name": "memories"})
    with start_fleet_worker(
        lambda: create_memory_worker(store, search=remote),
        queues=ALL_QUEUES,
        concurrency=4,
        retrieval_factory=lambda: create_retrieval_worker({"memories": slow}),
    ):
        token = CancelToken()
        threading.Timer(0.8, token.cancel).start()
        outer = client.invoke("MEMORY.SEARCH", {"query": "x"}, timeout=30, cancel=token)
        assert outer.status == "cancelled"
        deadline = time.monotonic() + EVENT_WAIT_S
        inner: dict[str, Any] | None = None
        while inner is None and time.monotonic() < deadline:
            for key in redis_client.scan_iter(RESULT_KEY_PREFIX + "*"):
                meta = json.loads(redis_client.get(key) or "{}")
                result = node_result_of(meta.get("result")) or meta.get("result") or {}
                if isinstance(result, dict) and result.get("node") == "RETRIEVAL.SEARCH":
                    inner = result
            time.sleep(0.05)
        assert inner is not None, "the retrieval sub-call never ended"
        assert inner["status"] == "cancelled" and inner["error"]["code"] == "MEMORY_CANCELLED"
        # the retrieval worker is free again
        assert client.invoke("MEMORY.QUERY", {"limit": 1}, timeout=5).status == "success"


def test_retrieval_worker_runs_the_embedding_pipeline(
    start_fleet_worker: Any, client: DittoClient, tmp_path: Path
) -> None:  # MEM-RET-1: the embedding + search + fusion pipeline behind RETRIEVAL.SEARCH
    from ditto_worker.retrieval import MicroBatchingEmbedder, build_pipeline_provider
    from ditto_worker.testing import HashingEmbedder

    embedder = MicroBatchingEmbedder(HashingEmbedder())
    store = SqliteMemoryStore(tmp_path / "v.sqlite", embedder=embedder)
    create_memory(store).write({"memories": [
        {"content": "Jon lost his job as a banker", "metadata": {"speaker": "Jon"}},
        {"content": "Gina opened a dance studio", "metadata": {"speaker": "Gina"}},
    ]})  # fmt: skip
    pipeline = build_pipeline_provider(store, {"embedding": "store", "fusion": {"method": "rrf"}})
    with start_fleet_worker(
        lambda: create_memory_worker(store),
        queues=ALL_QUEUES,
        concurrency=4,
        retrieval_factory=lambda: create_retrieval_worker({"memories": pipeline}),
    ):
        for strategy in ("vector", "hybrid", "keyword"):
            result = client.invoke(
                "RETRIEVAL.SEARCH",
                {"target": {"name": "memories"}, "query": "dance studio", "strategy": strategy,
                 "limit": 2},
                timeout=30,
            )  # fmt: skip
            assert result.status == "success", (strategy, result.error)
            assert 1 <= len(result.output) <= 2
            if strategy != "vector":  # hashing vectors carry no meaning; the words do
                assert result.output[0].memory.content == "Gina opened a dance studio"
    embedder.close()
    store.close()
