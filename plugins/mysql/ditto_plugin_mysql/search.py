"""Native SEARCH of the MySQL store: ``keyword``, and with vectors ``vector`` and ``hybrid``.

* ``keyword``: per-scope BM25 over the terms table (:mod:`ditto_plugin_mysql.keywords`);
  ``score`` positive, higher is better (one match in a one-record scope about 0.1).
* ``vector``: an exact cosine scan in the plugin over the rows passing the filter
  (:mod:`ditto_plugin_mysql.vectors`); the query is a text (embedded by the store's
  provider) or a list of ``dims`` numbers; ``score`` the cosine similarity in [-1, 1];
  ``min(limit, matches)`` results.
* ``hybrid``: the shared retrieval pipeline over this store's ``keyword`` and ``vector``
  searches (:class:`ditto_worker.memory.native.NativeSearch`), configured by the store's
  ``hybrid`` settings; score documented in :mod:`ditto_worker.memory.search.fusion`.

Results are in descending score, creation order breaking ties.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Final

import pymysql

from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.keywords import keyword_plan
from ditto_plugin_mysql.rows import COLUMNS, WIDTH, item, marks
from ditto_plugin_mysql.sql import Sql, compile_filter
from ditto_plugin_mysql.vectors import live_table, nearest
from ditto_worker.contracts import MemorySearchInput
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.native import Hit, NativeSearch
from ditto_worker.memory.ports import EmbeddingIdentity, MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.sqlkit.settings import sql_capabilities

__all__ = ["KEYWORD_CAPABILITIES", "VECTOR_CAPABILITIES", "SearchMixin"]

_EXTRAS: Final = frozenset({"multi_process", "driver_cancel", "deadline"})

KEYWORD_CAPABILITIES: Final = sql_capabilities(("keyword",), _EXTRAS, vectors=False)
"""What a store without an embedding provider declares."""

VECTOR_CAPABILITIES: Final = sql_capabilities(("keyword",), _EXTRAS, vectors=True)
"""What a store with an embedding provider declares (the vector scan is exact)."""


class SearchMixin(NativeSearch):
    """The candidate searches of :class:`~ditto_plugin_mysql.MysqlMemoryStore` (module
    doc); ``search`` itself is :class:`~ditto_worker.memory.native.NativeSearch`'s."""

    def _read(self, options: MemoryCallOptions | None) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    def _scope_id(self, conn: Conn, namespace: str, create: bool) -> int | None:
        raise NotImplementedError

    _mismatch: str | None

    def _compare(self, stored: EmbeddingIdentity | None) -> None:
        raise NotImplementedError

    def _nearest(
        self, conn: Conn, vector: list[float], scope: int, where: Sql, limit: int
    ) -> list[tuple[int, float]]:
        """:func:`.vectors.nearest` over the live table, in this store's identity:
        ``EMBEDDING_MISMATCH`` when a reindex switched the database to another one (read
        before the scan, and again when the scanned table was dropped under it)."""
        table, stored = live_table(conn, lock=False)
        self._compare(stored)
        try:
            if self._mismatch is None:
                return nearest(conn, vector, scope, where, limit, table)
        except pymysql.err.ProgrammingError:
            self._compare(live_table(conn, lock=False)[1])
            if self._mismatch is None:
                raise
        raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, str(self._mismatch))

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        where = compile_filter(parse_filter(input.filter))
        with self._read(options) as conn:
            scope = self._scope_id(conn, namespace_of(options), create=False)
            plan = None if scope is None else keyword_plan(conn, query, scope)
            if scope is None or plan is None:
                return []
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT {COLUMNS}, s.score FROM {plan.sql} AS s JOIN memories AS m ON "
                    f"m.seq = s.seq WHERE m.scope = %s AND {where.text} "
                    "ORDER BY s.score DESC, m.seq LIMIT %s",
                    [*plan.params, scope, *where.params, limit],
                )
                rows = cur.fetchall()
        return [(item(row), float(row[WIDTH])) for row in rows]

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Hit]:
        where: Sql = compile_filter(parse_filter(input.filter))
        with self._read(options) as conn:
            scope = self._scope_id(conn, namespace_of(options), create=False)
            if scope is None:
                return []
            hits = self._nearest(conn, vector, scope, where, limit)
            if not hits:
                return []
            seqs = [seq for seq, _ in hits]
            with conn.cursor() as cur:
                cur.execute(f"SELECT {COLUMNS} FROM memories AS m WHERE m.seq IN ({marks(seqs)})",
                            seqs)  # fmt: skip
                found = {int(row[0]): row for row in cur.fetchall()}
        return [(item(found[seq]), score) for seq, score in hits if seq in found]
