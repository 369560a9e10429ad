"""The Qdrant store's reading half: GET, QUERY pages and the two candidate searches.

QUERY orders by ``createdAt`` or ``updatedAt`` (Qdrant's ``order_by`` has no tie-break:
a page's last run of equal values is read whole); SEARCH's ``keyword`` and ``vector``
candidates feed :class:`~ditto_worker.memory.native.NativeSearch` (ties in score by
sequence, a tie run at the cut read whole). Semantics: :mod:`ditto_plugin_qdrant.store`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from qdrant_client import QdrantClient, models

from ditto_plugin_qdrant.collection import QdrantCollection
from ditto_plugin_qdrant.keywords import SPARSE_VECTOR, query_vector
from ditto_plugin_qdrant.payload import CREATED, MEMORY, UPDATED, namespace_filter
from ditto_plugin_qdrant.points import Point, chunks, item_of, point_id, tiebreak
from ditto_worker.contracts import (
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
)
from ditto_worker.dockit import After, by_creation, ranked, time_order
from ditto_worker.errors import MemoryError
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.native import Hit, NativeSearch
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.scope import namespace_of

__all__ = ["QdrantReads"]

_SCROLL_PAGE: Final = 1000
_LOCAL_PAGE: Final = 1 << 30
_LOCAL_KEY_SCAN: Final = 32  # local mode: more keys than this are checked in one pass


class QdrantReads(QdrantCollection, NativeSearch):
    """GET, QUERY and the keyword/vector candidates over the collection."""

    def _retrieve(
        self, ns: str, ids: Sequence[str], options: MemoryCallOptions | None, vectors: bool = False
    ) -> dict[str, Point]:
        wanted = [pid for pid in dict.fromkeys(ids) if point_id(pid) is not None]
        found: dict[str, Point] = {}
        for chunk in chunks(wanted):
            points = self._conn.call(
                options, QdrantClient.retrieve, self.collection, list(chunk),
                with_payload=True, with_vectors=vectors,
            )  # fmt: skip
            for point in points:
                payload = point.payload or {}
                if payload.get("rec") == MEMORY and payload.get("ns") == ns:
                    found[str(point.id)] = point
        return found

    def _scroll_all(
        self,
        flt: models.Filter,
        options: MemoryCallOptions | None,
        with_payload: bool | list[str] = True,
    ) -> list[Point]:
        out: list[Point] = []
        offset: Any = None
        # local mode evaluates the filter over every point on each request: one request
        page = _LOCAL_PAGE if self.local else _SCROLL_PAGE
        while True:
            points, offset = self._conn.call(
                options, QdrantClient.scroll, self.collection, scroll_filter=flt, limit=page,
                offset=offset, with_payload=with_payload,
            )  # fmt: skip
            out += points
            if offset is None:
                return out

    def _with_keys(
        self, ns: str, keys: Sequence[str], options: MemoryCallOptions | None, fields: Any = True
    ) -> list[Point]:
        """Memory points of ``ns`` holding one of ``keys``."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        if self.local and len(keys) > _LOCAL_KEY_SCAN:
            # brute force either way: one pass over the namespace (one condition, only the
            # keys copied) beats matching a list of keys on every point
            wanted = set(keys)
            scanned = self._scroll_all(namespace_filter(ns, None), options, ["key"])
            hits = [p for p in scanned if (p.payload or {}).get("key") in wanted]
            if fields == ["key"]:
                return hits
            return list(self._retrieve(ns, [str(p.id) for p in hits], options).values())
        out: list[Point] = []
        for chunk in chunks(keys):
            flt = namespace_filter(ns, None)
            condition = models.FieldCondition(key="key", match=models.MatchAny(any=list(chunk)))
            flt.must = [*(flt.must or []), condition]
            out += self._scroll_all(flt, options, fields)
        return out

    def namespaces(self) -> list[str]:
        """The namespaces holding at least one memory, sorted (``""``: the unscoped one;
        :attr:`ditto_worker.scope.Scope.namespace` otherwise). An operator's listing for
        ``ditto-worker export --all-scopes``, never reached by a node call. Reads
        the ``ns`` of every memory point."""
        memories = models.Filter(
            must=[models.FieldCondition(key="rec", match=models.MatchValue(value=MEMORY))]
        )
        points = self._scroll_all(memories, None, ["ns"])
        return sorted({str((point.payload or {}).get("ns", "")) for point in points})

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ns = self._begin(options)
        found = self._retrieve(ns, input.ids or (), options)
        by_key = self._with_keys(ns, input.keys or (), options)
        return [item_of(p.payload) for p in by_creation(found, by_key, tiebreak)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter`` in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY`` (more than one
                term, or a field other than ``createdAt``/``updatedAt``),
                ``INVALID_CURSOR``.
        """
        order = time_order(input, "Qdrant")
        field = UPDATED if order.field == "updatedAt" else CREATED
        ns = namespace_of(options)
        flt = namespace_filter(ns, order.node)
        self._begin(options)  # the cursor secret is the collection's
        after = order.after(input.cursor, self._cursor_secret, ns)
        limit = input.limit or 100
        place = None if after is None else after[1]
        rows = self._ordered(flt, field, order.desc, place, limit + 1, options)
        page = rows[:limit]
        next_cursor = None
        if len(rows) > limit:
            last = page[-1].payload
            next_cursor = order.next_cursor(
                int(last[field]), str(page[-1].id), int(last[CREATED]), self._cursor_secret, ns
            )
        return MemoryQueryOutput(items=[item_of(p.payload) for p in page], next_cursor=next_cursor)

    def _ordered(
        self,
        flt: models.Filter,
        field: str,
        desc: bool,
        after: After | None,
        n: int,
        options: MemoryCallOptions | None,
    ) -> list[Point]:
        """Up to ``n`` points of ``flt`` after ``after`` in (``field``, sequence, id) order.

        Qdrant's ``order_by`` orders by ``field`` alone, so a request asks for one point
        more than needed: when the last two differ, every run of equal values before the
        last is complete; otherwise the last run is read whole. The sort key of a point is
        ``(±field, seq, id)``.
        """

        def sort_key(point: Point) -> tuple[int, int, str]:
            value = int(point.payload[field])
            return (-value if desc else value, *tiebreak(point))

        out: list[Point] = []
        bound: int | None = None if after is None else (-after[0] if desc else after[0])
        strict = False
        direction = models.Direction.DESC if desc else models.Direction.ASC
        while len(out) < n:
            # one point more to see where a run ends; one more still after a cursor, whose
            # own row comes back first (non-strict bound) and is dropped
            want = n - len(out) + 1 + (after is not None)
            condition = flt
            if bound is not None:
                op = ("lt" if strict else "lte") if desc else ("gt" if strict else "gte")
                ranged = models.FieldCondition(key=field, range=models.Range(**{op: bound}))
                condition = models.Filter(must=[flt, ranged])
            batch: list[Point] = self._conn.call(
                options, QdrantClient.scroll, self.collection, scroll_filter=condition,
                limit=want, with_payload=True,
                order_by=models.OrderBy(key=field, direction=direction),
            )[0]  # fmt: skip
            full = len(batch) == want
            if full:
                last = int(batch[-1].payload[field])
                if int(batch[-2].payload[field]) != last:
                    batch, last = batch[:-1], int(batch[-2].payload[field])
                else:  # the run of `last` may go on past the cut: read it whole
                    same = models.FieldCondition(key=field, range=models.Range(gte=last, lte=last))
                    run = self._scroll_all(models.Filter(must=[flt, same]), options)
                    batch = [p for p in batch if int(p.payload[field]) != last] + run
            batch.sort(key=sort_key)
            if after is not None:
                batch = [p for p in batch if sort_key(p) > after]
            out += batch
            if not full:
                break
            bound, strict, after = last, True, None
        return out[:n]

    # --- search -------------------------------------------------------------------------------

    def _ranked(
        self, fetch: Callable[[QdrantClient, int], list[Point]], limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Point]:  # fmt: skip
        """The best ``limit`` points, ties in score by sequence (:func:`ditto_worker.dockit.
        ranked`)."""
        return ranked(
            lambda n: self._conn.call(options, fetch, n), limit, lambda p: p.score, tiebreak
        )

    def _search_filter(self, input: MemorySearchInput, options: MemoryCallOptions | None) -> Any:
        node = parse_filter(input.filter)
        return namespace_filter(self._begin(options), node)

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        flt = self._search_filter(input, options)
        vector = query_vector(query)
        if vector is None:
            return []
        # IDF over the call's own scope only: another tenant's writes change no score here
        corpus = namespace_filter(namespace_of(options), None)
        params = models.SearchParams(idf=models.IdfCorpusParams(corpus=corpus))

        def fetch(client: QdrantClient, n: int) -> list[Point]:
            return client.query_points(
                self.collection, query=vector, using=SPARSE_VECTOR, query_filter=flt,
                limit=n, with_payload=True, search_params=params,
            ).points  # fmt: skip

        return [(item_of(p.payload), float(p.score)) for p in self._ranked(fetch, limit, options)]

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Hit]:
        flt = self._search_filter(input, options)
        params = models.SearchParams(exact=True) if self._exact and not self.local else None

        def fetch(client: QdrantClient, n: int) -> list[Point]:
            return client.query_points(
                self.collection, query=vector, using=self._dense, query_filter=flt,
                limit=n, with_payload=True, search_params=params,
            ).points  # fmt: skip

        try:
            ranked = self._ranked(fetch, limit, options)
        except MemoryError as exc:
            raise self._switched(exc) from exc
        return [(item_of(p.payload), float(p.score)) for p in ranked]
