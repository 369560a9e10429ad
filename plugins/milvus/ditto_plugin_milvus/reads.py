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
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import (
    SortValue,
    decode_cursor,
    encode_cursor,
    parse_filter,
    parse_order_by,
    query_fingerprint,
)
from ditto_worker.memory.native import Hit
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = ["MilvusReads"]

_TIE_CAP: Final = 10_000
_MAX_TOPK: Final = 16_384
Fetch = Callable[..., list[Row]]


class MilvusReads(MilvusCollection):
    """The read half of :class:`~ditto_plugin_milvus.store.MilvusMemoryStore`."""

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ns = self._begin(options)
        found = {r["id"]: r for r in self._rows_by(ns, "id", input.ids or (), options)}
        for row in self._rows_by(ns, "key", input.keys or (), options):
            found.setdefault(row["id"], row)
        return [item(r) for r in sorted(found.values(), key=tiebreak)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter`` in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY`` (more than one
                term, or a field other than ``createdAt``/``updatedAt``),
                ``INVALID_CURSOR``.
        """
        node = parse_filter(input.filter)
        terms = parse_order_by(input.order_by)
        if len(terms) > 1 or any(
            t.field.name not in ("createdAt", "updatedAt") or not t.field.reserved for t in terms
        ):
            raise MemoryError(
                ErrorCode.UNSUPPORTED_ORDER_BY,
                "the Milvus store orders by one field, createdAt or updatedAt",
            )
        field = UPDATED if terms and terms[0].field.name == "updatedAt" else CREATED
        desc = bool(terms) and terms[0].descending
        fingerprint = query_fingerprint(input.filter, input.order_by)
        ns = self._begin(options)  # the cursor secret is the collection's
        expression = scope_expression(ns, node)
        after: tuple[int, int, str] | None = None
        if input.cursor:
            cursor = decode_cursor(
                input.cursor, fingerprint, 2, self._cursor_secret(ns), namespace=ns
            )
            (rank, value), (id_rank, last_id) = cursor.values
            if rank != 1 or id_rank != 2 or not isinstance(value, int):
                raise MemoryError(ErrorCode.INVALID_CURSOR, "invalid cursor: malformed")
            after = ((-value if desc else value), cursor.seq, str(last_id))
            expression += f" and ({field} {'<=' if desc else '>='} {value})"
        limit = input.limit or 100

        def sort_key(row: Row) -> tuple[int, int, str]:
            value = int(row[field])
            return (-value if desc else value, *tiebreak(row))

        keys = sorted(self._query(ns, options, expression, ["id", CREATED, field]), key=sort_key)
        if after is not None:
            keys = [row for row in keys if sort_key(row) > after]
        page = keys[:limit]
        full = {r["id"]: r for r in self._rows_by(ns, "id", [r["id"] for r in page], options)}
        rows = [full[r["id"]] for r in page if r["id"] in full]  # deleted meanwhile: skipped
        next_cursor = None
        if len(keys) > limit and rows:
            last = rows[-1]
            values: list[SortValue] = [(1, int(last[field])), (2, str(last["id"]))]
            next_cursor = encode_cursor(
                fingerprint, values, int(last[CREATED]), self._cursor_secret(ns), namespace=ns
            )
        return MemoryQueryOutput(items=[item(r) for r in rows], next_cursor=next_cursor)

    # --- search -------------------------------------------------------------------------------

    def _ranked(self, fetch: Fetch, limit: int, options: MemoryCallOptions | None) -> list[Row]:
        """The best ``limit`` rows, ties in score by sequence: a tie run at the cut is read
        whole (up to :data:`_TIE_CAP` more rows)."""
        n = min(limit + 1, _MAX_TOPK)
        while True:
            rows = self._conn.call(options, fetch, n)
            if len(rows) < n or rows[-1]["score"] != rows[limit - 1]["score"]:
                break
            if n > limit + _TIE_CAP or n >= _MAX_TOPK:
                break
            n = min(n * 4, _MAX_TOPK)
        rows.sort(key=lambda r: (-r["score"], *tiebreak(r)))
        return rows[:limit]

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
