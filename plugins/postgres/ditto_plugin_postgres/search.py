"""Native SEARCH of the PostgreSQL store: ``keyword``, and with vectors ``vector`` and
``hybrid``.

* ``keyword``: the terms of :mod:`ditto_worker.memory.text`; ``score`` = sum of the BM25
  IDF of the matched query terms over the call's scope + ``0.01 * ts_rank_cd``
  (:mod:`ditto_plugin_postgres.text`), a positive float, higher is better: one match in
  a one-record scope scores about 0.1, a rare word in a large scope 5-10.
* ``vector``: pgvector cosine over the rows passing the filter
  (:func:`ditto_plugin_postgres.vectors.vector_search`); the query is a text (embedded by
  the store's provider) or a list of ``dims`` numbers; ``score = 1 - cosine distance``,
  the cosine similarity in [-1, 1], higher is better; ``min(limit, matches)`` results.
* ``hybrid``: the shared retrieval pipeline over this store's ``keyword`` and ``vector``
  searches (:class:`ditto_worker.memory.native.NativeSearch`), configured by the store's
  ``hybrid`` settings; score documented in :mod:`ditto_worker.memory.search.fusion`.

The strategy dispatch, query checks and result shape are the shared
:class:`~ditto_worker.memory.native.NativeSearch`; this module supplies the two candidate
searches. Results are in descending score, creation order breaking ties.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Final

import psycopg

from ditto_plugin_postgres.keywords import scope_stats
from ditto_plugin_postgres.rows import WIDTH, Row, item
from ditto_plugin_postgres.sql import Sql, compile_filter, in_namespace
from ditto_plugin_postgres.text import prefixed_query_terms
from ditto_plugin_postgres.vectors import identity_gate, to_literal, vector_search
from ditto_worker.contracts import MemorySearchInput
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.native import Hit, NativeSearch
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.text import bm25_idf
from ditto_worker.sqlkit.settings import sql_capabilities

__all__ = [
    "COLUMNS",
    "EXACT_SCOPE_RECORDS",
    "KEYWORD_CAPABILITIES",
    "VECTOR_CAPABILITIES",
    "SearchMixin",
]

EXACT_SCOPE_RECORDS: Final = 5000
"""A ``vector`` search in a namespace of at most this many records (with text) ranks
them all exactly instead of scanning the HNSW index (issue 19: at 100 tenants the index
scan visits ``hnsw.max_scan_tuples`` mostly other tenants' vectors, then falls back to
the exact scan anyway)."""

COLUMNS: Final = (
    "m.seq, m.id, m.key, m.content::text, m.metadata::text, m.operation_id, m.created_at, "
    "m.updated_at"
)
"""The record columns every reader selects first (``rows.WIDTH`` of them)."""
_EXTRAS: Final = frozenset({"multi_process", "driver_cancel", "deadline"})

KEYWORD_CAPABILITIES: Final = sql_capabilities(("keyword",), _EXTRAS, vectors=False)
"""What a store without an embedding provider declares."""

VECTOR_CAPABILITIES: Final = sql_capabilities(("keyword",), _EXTRAS, vectors=True)
"""What a store with an embedding provider declares: ``vector`` returns ``min(limit,
matches)`` (an exact scan completes a short HNSW page), hence exhaustive."""


class SearchMixin(NativeSearch):
    """The candidate searches of :class:`~ditto_plugin_postgres.PostgresMemoryStore`
    (module doc); ``search`` itself is :class:`~ditto_worker.memory.native.NativeSearch`'s."""

    _table: str
    _quoted: str
    _iterative: bool
    _identity_text: str | None
    _mismatch: str | None

    def _tx(self, options: MemoryCallOptions | None) -> AbstractContextManager[psycopg.Connection]:
        raise NotImplementedError

    def _verify_identity(self, conn: psycopg.Connection) -> str | None:
        raise NotImplementedError

    def _ranked(
        self, conn: psycopg.Connection, terms: list[str], records: int, where: Sql, limit: int
    ) -> list[Row]:
        """Rows holding any of ``terms`` (tsquery literals of one scope) and passing
        ``where``, best first (see :mod:`.text`): two statements, the terms' frequencies
        in the scope, then the page: candidates by IDF score (the best ``max(5 * limit,
        50)``), re-ranked with ``0.01 * ts_rank_cd`` added. Both find rows through the
        GIN index only: the terms are the scope's own."""
        queries = ["%s::tsquery"] * len(terms)
        any_term = "(" + " || ".join(queries) + ")"
        counts = ", ".join(f"count(*) FILTER (WHERE m.tsv @@ {q})" for q in queries)
        stats = (
            conn.execute(
                f"SELECT {counts} FROM {self._table} AS m WHERE m.tsv @@ {any_term}",
                [*terms, *terms],
            ).fetchone()
            or ()
        )
        weights = [bm25_idf(records, int(df)) for df in stats]
        score = " + ".join(f"%s * (m.tsv @@ {q})::int" for q in queries)
        sql = (
            "SELECT c.seq, c.id, c.key, c.content, c.metadata, c.operation_id, c.created_at, "
            f"c.updated_at, c.score + 0.01 * "
            f"ts_rank_cd(c.tsv, {any_term}) AS score FROM (SELECT {COLUMNS}, m.tsv, "
            f"({score}) AS score FROM {self._table} AS m WHERE m.tsv @@ {any_term} "
            f"AND {where.text} ORDER BY score DESC, m.seq LIMIT %s) AS c "
            "ORDER BY score DESC, c.seq LIMIT %s"
        )
        params: list[Any] = [*terms]
        params += [x for w, t in zip(weights, terms, strict=True) for x in (w, t)]
        params += [*terms, *where.params, max(limit * 5, 50), limit]
        return conn.execute(sql, params).fetchall()

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        ns = namespace_of(options)
        where = in_namespace(compile_filter(parse_filter(input.filter)), ns, lookup=False)
        with self._tx(options) as conn:
            scope = scope_stats(conn, self._quoted, ns)
            terms = [] if scope is None else prefixed_query_terms(query, scope[0])
            if scope is None or not terms:
                return []
            rows = self._ranked(conn, terms, scope[1], where, limit)
        return [(item(row), float(row[WIDTH])) for row in rows]

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Hit]:
        requested = compile_filter(parse_filter(input.filter))
        # a filter or a scope may select few rows: the index scan gives up early then
        selective = requested.text != "true" or getattr(options, "scope", None) is not None
        ns = namespace_of(options)
        where = in_namespace(requested, ns)
        with self._tx(options) as conn:
            gate = self._identity_text  # the identity the query vector was made in
            if gate is not None:
                check = identity_gate(self._quoted, gate)
                where = Sql(f"{where.text} AND {check.text}", [*where.params, *check.params])
            # a scope of few records: rank them all (the namespace index finds them), no
            # index scan that would filter out the other tenants' nearest vectors
            scope = scope_stats(conn, self._quoted, ns)
            exact = scope is not None and scope[1] <= EXACT_SCOPE_RECORDS
            rows = vector_search(conn, self._quoted, COLUMNS, to_literal(vector), where, limit,
                                 self._iterative, selective, exact)  # fmt: skip
            if not rows and gate is not None and self._verify_identity(conn) is not None:
                raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, str(self._mismatch))
        return [(item(row), float(row[WIDTH])) for row in rows]
