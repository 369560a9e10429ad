"""Pruning the Milvus store's ledgers (:mod:`ditto_worker.memory.retention`).

The operation ledgers (``<collection>_ops``) lose their entries older than twice
``operationRetentionS``, the execution ledgers (``<collection>_exec``) theirs older than
``executionRetentionS``, by the ``at`` of each row (:mod:`ditto_plugin_milvus.operations`).
A step deletes at most ``batch`` entries: the part-0 rows found first (an entry is gone
the moment its part 0 is), then the other parts of those entries; parts left behind by a
run that died before its part 0 are deleted by age once no part 0 is left. Milvus has no
transaction to hold: writers go on meanwhile. After a finished mutation the store prunes
one step of each ledger it has opened, at most once a minute; ``ditto-worker prune``
(:meth:`MilvusRetention.prune_ledgers`) prunes every ledger of the collection until
nothing is left. A ledger made before ``at`` existed is left alone (kept, no expiry).
"""

from __future__ import annotations

import re
import time
from typing import Any

from pymilvus import MilvusClient

from ditto_plugin_milvus.collection import IDS_PER_REQUEST
from ditto_plugin_milvus.expressions import quote
from ditto_plugin_milvus.operations import (
    EXECUTION_SUFFIX,
    LEDGER_SUFFIX,
    MilvusOperations,
    part_id,
)
from ditto_worker.memory.operations import Operation
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.retention import BACKGROUND_BATCH, PRUNE_BATCH, PruneReport

__all__ = ["MilvusRetention"]


class MilvusRetention(MilvusOperations):
    """The pruning side of :class:`~ditto_plugin_milvus.store.MilvusMemoryStore`."""

    def _before(self, ledger: str) -> float:
        """Rows of ``ledger`` written before this time (epoch s) are pruned."""
        if ledger.endswith(EXECUTION_SUFFIX):
            return self.retention.executions_before()
        return self.retention.forget_before()

    def _prune_step(self, ledger: str, batch: int, options: MemoryCallOptions | None) -> int:
        """Delete at most ``batch`` old entries of ``ledger`` (or, when none is left,
        ``batch`` old orphan parts); the entries deleted, ``-1`` for orphans only and
        ``0`` when nothing was old."""
        old = f"at < {self._before(ledger)!r}"
        firsts = self._conn.call(
            options, MilvusClient.query, ledger, filter=f"{old} and part == 0",
            output_fields=["id", "ns", "op", "parts"], limit=batch,
        )  # fmt: skip
        ids = [
            part_id(str(r["ns"]), str(r["op"]), p) for r in firsts for p in range(int(r["parts"]))
        ]
        if not ids:
            orphans = self._conn.call(
                options, MilvusClient.query, ledger, filter=f"{old} and part > 0",
                output_fields=["id"], limit=batch,
            )  # fmt: skip
            ids = [str(r["id"]) for r in orphans]
        for start in range(0, len(ids), IDS_PER_REQUEST):
            chunk = ", ".join(quote(i) for i in ids[start : start + IDS_PER_REQUEST])
            self._conn.call(
                options, MilvusClient.delete, ledger, filter=f"id in [{chunk}]",
                check_cancel=False,
            )  # fmt: skip
        return len(firsts) if firsts else (-1 if ids else 0)

    def _record_operation(
        self, ns: str, op: Operation | None, output: Any, options: MemoryCallOptions | None,
        pending: bool = False,
    ) -> None:  # fmt: skip
        """Write ``op``'s entry; after a finished mutation, now and then, the background
        prune of every timed ledger this store has opened (one step each)."""
        super()._record_operation(ns, op, output, options, pending)
        if op is None or pending or not self.retention.due():
            return
        for ledger, (_, timed) in list(self._ledgers.items()):
            if timed:
                self._prune_step(ledger, BACKGROUND_BATCH, options)

    def _timed_ledgers(self) -> list[str]:
        """Every ledger of this store's collections whose rows carry ``at``."""
        names = self._conn.call(None, MilvusClient.list_collections)
        # exactly this store's ledgers: another store's collection "memories_x" has ledgers
        # that also start with "memories_" (its retention is its own)
        scoped = "_[0-9a-f]{16}" if self.collection_per_scope else ""
        suffixes = f"(?:{re.escape(LEDGER_SUFFIX)}|{re.escape(EXECUTION_SUFFIX)})"
        ours = re.compile(re.escape(self.collection) + scoped + suffixes)
        found: list[str] = []
        for name in sorted(str(n) for n in names):
            if not ours.fullmatch(name):
                continue
            info = self._conn.call(None, MilvusClient.describe_collection, name)
            if any(field.get("name") == "at" for field in info.get("fields", [])):
                self._conn.call(None, MilvusClient.load_collection, name)
                found.append(name)
        return found

    def prune_ledgers(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """Delete every forgotten operation entry and expired execution entry of this
        store's collections, at most ``batch`` entries per step."""
        counts = {LEDGER_SUFFIX: 0, EXECUTION_SUFFIX: 0}
        steps, longest = 0, 0.0
        for ledger in self._timed_ledgers():
            kind = EXECUTION_SUFFIX if ledger.endswith(EXECUTION_SUFFIX) else LEDGER_SUFFIX
            while True:
                started = time.perf_counter()
                deleted = self._prune_step(ledger, batch, None)
                steps, longest = steps + 1, max(longest, time.perf_counter() - started)
                counts[kind] += max(deleted, 0)
                if deleted == 0:
                    break
        return PruneReport(counts[LEDGER_SUFFIX], counts[EXECUTION_SUFFIX], steps, longest)
