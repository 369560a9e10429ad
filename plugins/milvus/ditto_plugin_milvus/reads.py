"""GET, QUERY and the two candidate searches of the Milvus store (module docstring of
:mod:`ditto_plugin_milvus.store`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pymilvus import MilvusClient

from ditto_plugin_milvus.collection import MilvusCollection, Row, tiebreak
from ditto_plugin_milvus.expressions import CREATED, UPDATED, scope_expression
from ditto_plugin_milvus.keywords import query_text
from ditto_plugin_milvus.rows import OUTPUT, item
from ditto_worker.contracts import (
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
)
from ditto_worker.dockit import After, by_creation, ranked, time_order
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.native import Hit
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = ["MilvusReads"]

_MAX_TOPK: Final = 16_384
Fetch = Callable[..., list[Row]]


class MilvusReads(MilvusCollection):
    """The read half of :class:`~ditto_plugin_milvus.store.MilvusMemoryStore`."""

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ns = self._begin(options)
        by_id = {r["id"]: r for r in self._rows_by(ns, "id", input.ids or (), options)}
        by_key = self._rows_by(ns, "key", input.keys or (), options)
        return [item(r) for r in by_creation(by_id, by_key, tiebreak)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter`` in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY`` (more than one
                term, or a field other than ``createdAt``/``updatedAt``),
                ``INVALID_CURSOR``.
        """
        order = time_order(input, "Milvus")
        field = UPDATED if order.field == "updatedAt" else CREATED
        ns = self._begin(options)  # the cursor secret is the collection's
        expression = scope_expression(ns, order.node)
        after = order.after(input.cursor, self._cursor_secret(ns), ns)
        if after is not None:
            expression += f" and ({field} {'<=' if order.desc else '>='} {after[0]})"
        limit = input.limit or 100

        def sort_key(row: Row) -> After:
            return order.key(int(row[field]), *tiebreak(row))

        keys = sorted(self._query(ns, options, expression, ["id", CREATED, field]), key=sort_key)
        if after is not None:
            keys = [row for row in keys if sort_key(row) > after[1]]
        page = keys[:limit]
        full = {r["id"]: r for r in self._rows_by(ns, "id", [r["id"] for r in page], options)}
        rows = [full[r["id"]] for r in page if r["id"] in full]  # deleted meanwhile: skipped
        next_cursor = None
        if len(keys) > limit and rows:
            last = rows[-1]
            next_cursor = order.next_cursor(
                int(last[field]), str(last["id"]), int(last[CREATED]), self._cursor_secret(ns), ns
            )
        return MemoryQueryOutput(items=[item(r) for r in rows], next_cursor=next_cursor)

    # --- search -------------------------------------------------------------------------------

    def _ranked(self, fetch: Fetch, limit: int, options: MemoryCallOptions | None) -> list[Row]:
        """The best ``limit`` rows, ties in score by sequence (:func:`ditto_worker.dockit.
        ranked`; at most :data:`_MAX_TOPK` at once)."""
        return ranked(
            lambda n: self._conn.call(options, fetch, n),
            limit,
            lambda r: float(r["score"]),
            tiebreak,
            most=_MAX_TOPK,
        )

    def _search(self, ns: str, data: Any, field: str, metric: str, expression: str) -> Fetch:
        params = {"metric_type": metric}

        def fetch(client: MilvusClient, n: int, *, timeout: float) -> list[Row]:
            found = client.search(
                self.name_of(ns),
                data=[data],
                anns_field=field,
                filter=expression,
                limit=n,
                output_fields=OUTPUT,
                search_params=params,
                timeout=timeout,
            )
            # Milvus Lite reports a BM25 score negated (as a distance), a server positive
            sign = abs if metric == "BM25" else float
            return [{**hit["entity"], "score": sign(float(hit["distance"]))} for hit in found[0]]

        return fetch

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        node = parse_filter(input.filter)
        ns = self._begin(options)
        text = query_text(query)
        if not text:
            return []
        fetch = self._search(ns, text, "sparse", "BM25", scope_expression(ns, node))
        return [(item(r), r["score"]) for r in self._ranked(fetch, limit, options)]

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Hit]:
        node = parse_filter(input.filter)
        ns = self._begin(options)
        self._verify_current(ns, options)  # not moved to another identity by a reindex
        expression = f"(dv == true) and ({scope_expression(ns, node)})"
        fetch = self._search(ns, vector, "dense", "COSINE", expression)
        return [(item(r), r["score"]) for r in self._ranked(fetch, limit, options)]
