"""Native SEARCH of the SQLite store: ``keyword``/``bm25``, and with vectors ``vector`` and
``hybrid``.

* ``keyword`` (alias ``bm25``): FTS5 BM25 over the content's text
  (:mod:`ditto_plugin_sqlite.fts`); ``score = -bm25()``, positive, higher is better.
* ``vector``: cosine over the rows passing the filter, approximate but never short
  (:mod:`ditto_plugin_sqlite.nearest`); the query is a text (embedded by the store's
  provider) or a list of ``dims`` numbers; ``score = 1 - cosine distance``, the cosine
  similarity in [-1, 1], higher is better.
* ``hybrid``: the shared retrieval pipeline over this store's ``keyword`` and ``vector``
  searches (:class:`ditto_worker.memory.native.NativeSearch`), configured by the store's
  ``hybrid`` settings; score documented in :mod:`ditto_worker.memory.search.fusion`.

The strategy dispatch, query checks and result shape are the shared
:class:`~ditto_worker.memory.native.NativeSearch`; this module supplies the two candidate
searches. Results are ordered by descending score, the record sequence breaking ties.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import Any, Final

from ditto_plugin_sqlite import keyword_top
from ditto_plugin_sqlite.ann import SimHashIndex
from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.fts import KeywordPlan, keyword_plan
from ditto_plugin_sqlite.nearest import nearest_rows
from ditto_plugin_sqlite.sql import Sql, compile_filter, in_namespace
from ditto_worker.contracts import MemorySearchInput
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.native import Hit, NativeSearch
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.sqlkit.records import COLUMNS, WIDTH, chunks, marks, stored_item
from ditto_worker.sqlkit.settings import sql_capabilities

__all__ = ["KEYWORD_CAPABILITIES", "VECTOR_CAPABILITIES", "SearchMixin"]

_EXTRAS: Final = frozenset({"multi_process", "driver_cancel"})

KEYWORD_CAPABILITIES: Final = sql_capabilities(("keyword", "bm25"), _EXTRAS, vectors=False)
"""What a store without an embedding provider declares."""

VECTOR_CAPABILITIES: Final = sql_capabilities(("keyword", "bm25"), _EXTRAS, vectors=True)
"""What a store with an embedding provider declares (``vector`` and ``hybrid`` added)."""


def _keyword_sql(plan: KeywordPlan, where: Sql, limit: int) -> tuple[str, list[Any]]:
    """The page of a filtered keyword search by scoring every candidate: the scope's scored
    candidates (:mod:`.fts`) joined to their records, filtered (``where``:
    :func:`.sql.in_namespace` with ``lookup=False``), best first; every candidate's record
    is read."""
    sql = (
        f"{plan.sql}SELECT {COLUMNS}, s.score AS score FROM s "
        "JOIN memories AS m ON m.seq = s.seq "
        f"WHERE {where.text} "
        "ORDER BY score DESC, m.seq LIMIT ?"
    )
    return sql, [*plan.params, *where.params, limit]


def _best_rows(
    conn: Connection, plan: KeywordPlan, where: Sql, limit: int
) -> list[tuple[Any, ...]]:
    """The page of a keyword search without a ``filter``: the best ``limit`` candidates
    chosen before any record is read (:mod:`.keyword_top`, exact), then their records
    (``where`` stays a check: the postings are the scope's own); rows end with the score."""
    return _records(conn, keyword_top.best_records(conn, plan, limit), where)


def _filtered_rows(
    conn: Connection, plan: KeywordPlan, where: Sql, limit: int
) -> list[tuple[Any, ...]]:
    """The page of a keyword search with a ``filter``: the first ``limit`` candidates, in
    rank order, whose records pass it. The best ``limit`` x 4 candidates are ranked
    (:mod:`.keyword_top`) and their records checked, then as many more as the share that
    passed says are needed (twice that); each is a prefix of the whole ranking, so once
    ``limit`` of them pass (or every candidate was ranked) the page is exact. When more
    than ``limit`` x 64 would be needed, every candidate is scored (:func:`_keyword_sql`):
    a filter passed by fewer than about 1 in 30 records costs one small ranking more."""
    depth = limit * 4
    while depth <= limit * 64:
        best = keyword_top.best_records(conn, plan, depth)
        rows = _records(conn, best, where)
        if len(rows) >= limit or len(best) < depth:
            return rows[:limit]
        depth = depth * limit // max(len(rows), 1) * 2  # none passed: as if one had
    return conn.execute(*_keyword_sql(plan, where, limit)).fetchall()


def _records(conn: Connection, best: list[tuple[float, int]], where: Sql) -> list[tuple[Any, ...]]:
    """The records of ``best`` (``(score, seq)``) passing ``where``, best first; each row
    ends with its score."""
    scores = {seq: score for score, seq in best}
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks(list(scores)):
        sql = (
            f"SELECT {COLUMNS} FROM memories AS m WHERE m.seq IN ({marks(chunk)}) AND {where.text}"
        )
        rows += conn.execute(sql, [*chunk, *where.params]).fetchall()
    return sorted(((*row, scores[row[0]]) for row in rows), key=lambda r: (-r[WIDTH], r[0]))


class SearchMixin(NativeSearch):
    """The candidate searches of :class:`~ditto_plugin_sqlite.SqliteMemoryStore` (module
    doc); ``search`` itself is :class:`~ditto_worker.memory.native.NativeSearch`'s."""

    _ann: SimHashIndex | None = None
    _ann_pid: int = 0

    def _tx(
        self, options: MemoryCallOptions | None, write: bool
    ) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _verify_identity(self, conn: Connection) -> None:
        raise NotImplementedError

    def _where(
        self, input: MemorySearchInput, options: MemoryCallOptions | None, lookup: bool = True
    ) -> Sql:
        node = parse_filter(input.filter)
        return in_namespace(compile_filter(node), namespace_of(options), lookup)

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        where = self._where(input, options, lookup=False)
        with self._tx(options, write=False) as conn:
            plan = keyword_plan(conn, query, namespace_of(options), read=True)
            if plan is None:
                return []
            if input.filter is None:
                rows = _best_rows(conn, plan, where, limit)
            else:
                rows = _filtered_rows(conn, plan, where, limit)
        return [(stored_item(row), float(row[WIDTH])) for row in rows]

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Hit]:
        where, namespace = self._where(input, options), namespace_of(options)
        with self._tx(options, write=False) as conn:
            self._verify_identity(conn)
            rows = nearest_rows(
                conn, self._vector_index(len(vector)), namespace, vector, where, limit
            )
        return [(stored_item(row), float(row[WIDTH])) for row in rows]

    def _vector_index(self, dims: int) -> SimHashIndex:
        """This process's approximate index (:mod:`.ann`), made at its first use."""
        index = self._ann
        if index is None or index.dims != dims or self._ann_pid != os.getpid():
            index, self._ann_pid = SimHashIndex(dims), os.getpid()
            self._ann = index
        return index
