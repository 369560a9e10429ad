"""Pruning the Qdrant store's ledgers (:mod:`ditto_worker.memory.retention`).

Operation records (``rec: "operation"``) older than twice ``operationRetentionS`` and
execution records (``rec: "execution"``) older than ``executionRetentionS`` are deleted
by their ``at`` (:mod:`ditto_plugin_qdrant.executions`): a batch of ids is scrolled by
the filter, then deleted by id, so one request deletes at most ``batch`` points and
writers (point upserts, never blocked by a delete in Qdrant) go on meanwhile. The store
prunes one batch of each at most once a minute after a mutation; ``ditto-worker prune``
(:meth:`QdrantRetention.prune_ledgers`) prunes until nothing is left.
"""

from __future__ import annotations

import time

from qdrant_client import QdrantClient, models

from ditto_plugin_qdrant import executions as ex
from ditto_plugin_qdrant.payload import EXECUTION
from ditto_plugin_qdrant.reads import QdrantReads
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.retention import BACKGROUND_BATCH, PRUNE_BATCH, PruneReport

__all__ = ["QdrantRetention"]


class QdrantRetention(QdrantReads):
    """The pruning side of :class:`~ditto_plugin_qdrant.store.QdrantMemoryStore`."""

    def _prune_one(
        self, rec: str, retention_s: float, batch: int, options: MemoryCallOptions | None
    ) -> int:
        """Delete at most ``batch`` records of kind ``rec`` older than ``retention_s``
        by the retention's clock; the count."""
        old = ex.expired_filter(retention_s, rec, self.retention.clock())
        points, _ = self._conn.call(
            options, QdrantClient.scroll, self.collection, scroll_filter=old, limit=batch,
            with_payload=False, with_vectors=False,
        )  # fmt: skip
        ids = [point.id for point in points]
        if ids:
            self._conn.call(
                options, QdrantClient.delete, self.collection,
                models.PointIdsList(points=ids), wait=True, check_cancel=False,
            )  # fmt: skip
        return len(ids)

    def _prune_batch(self, options: MemoryCallOptions | None) -> None:
        """The background prune: one bounded batch of each ledger."""
        self._prune_one(ex.OPERATION, 2 * self.retention.operation_s, BACKGROUND_BATCH, options)
        self._prune_one(EXECUTION, self.retention.execution_s, BACKGROUND_BATCH, options)

    def prune_ledgers(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """Delete every forgotten operation record and expired execution record,
        ``batch`` points per request."""
        self._open(None)
        counts: dict[str, int] = {ex.OPERATION: 0, EXECUTION: 0}
        batches, longest = 0, 0.0
        for rec, retention_s in (
            (ex.OPERATION, 2 * self.retention.operation_s),
            (EXECUTION, self.retention.execution_s),
        ):
            while True:
                started = time.perf_counter()
                deleted = self._prune_one(rec, retention_s, batch, None)
                batches, longest = batches + 1, max(longest, time.perf_counter() - started)
                counts[rec] += deleted
                if deleted < batch:
                    break
        return PruneReport(counts[ex.OPERATION], counts[EXECUTION], batches, longest)
