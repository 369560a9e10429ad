"""Native SEARCH of the PostgreSQL store: ``keyword``, and with vectors ``vector`` and
``hybrid``.

* ``keyword``: English stems and CJK bigrams; ``score`` = sum of the BM25 IDF of the
  matched query terms + ``0.01 * ts_rank_cd`` (:mod:`ditto_plugin_postgres.text`), a
  positive float, higher is better.
* ``vector``: pgvector cosine over the rows passing the filter
  (:func:`ditto_plugin_postgres.vectors.vector_search`); the query is a text (embedded by
  the store's provider) or a list of ``dims`` numbers; ``score = 1 - cosine distance``,
  the cosine similarity in [-1, 1], higher is better; ``min(limit, matches)`` results.
* ``hybrid``: the retrieval pipeline (:func:`ditto_worker.retrieval.pipeline.run_pipeline`)
  over this store's ``keyword`` and ``vector`` searches, configured by the store's
  ``hybrid`` settings; score documented in :mod:`ditto_worker.retrieval.fusion`.

Every result's ``metadata`` is ``{"strategy": <strategy>, "rank": <1-based position>}``
(hybrid adds its per-stage scores). Results are in descending score, creation order
breaking ties.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Final

import psycopg

from ditto_plugin_postgres.rows import Row, bm25_idf, item, term_queries
from ditto_plugin_postgres.sql import Sql, compile_filter, in_namespace
from ditto_plugin_postgres.text import query_terms
from ditto_plugin_postgres.vectors import query_vector, vector_search
from ditto_worker.capabilities import StoreCapabilities
from ditto_worker.contracts import MemorySearchInput, MemorySearchResult
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.filters import parse_filter
from ditto_worker.ports import MemoryCallOptions
from ditto_worker.retrieval.embed import EmbeddingProvider
from ditto_worker.scope import namespace_of

__all__ = ["COLUMNS", "KEYWORD_CAPABILITIES", "VECTOR_CAPABILITIES", "SearchMixin"]

COLUMNS: Final = "m.seq, m.id, m.key, m.content::text, m.metadata::text"
DEFAULT_SEARCH_LIMIT: Final = 10
_EXTRAS: Final = frozenset({"multi_process", "driver_cancel", "deadline"})

KEYWORD_CAPABILITIES: Final = StoreCapabilities(
    search_strategies=("keyword",),
    default_strategy="keyword",
    keyword_strategy="keyword",
    keyword_cjk=True,
    key_conflict="error",
    batch_atomic=True,
    cancel=True,
    scope=True,
    extras=_EXTRAS,
)
"""What a store without an embedding provider declares."""

VECTOR_CAPABILITIES: Final = StoreCapabilities(
    search_strategies=("keyword", "vector", "hybrid"),
    default_strategy="keyword",
    keyword_strategy="keyword",
    keyword_cjk=True,
    exhaustive_strategies=("vector",),
    key_conflict="error",
    batch_atomic=True,
    cancel=True,
    scope=True,
    extras=_EXTRAS | {"embed_on_write"},
)
"""What a store with an embedding provider declares: ``vector`` returns ``min(limit,
matches)`` (an exact scan completes a short HNSW page), hence exhaustive."""


class SearchMixin:
    """``search`` of :class:`~ditto_plugin_postgres.PostgresMemoryStore` (module doc)."""

    capabilities: StoreCapabilities
    _table: str
    _quoted: str
    _embedder: EmbeddingProvider | None
    _hybrid_settings: Any
    _iterative: bool

    def _tx(self, options: MemoryCallOptions | None) -> AbstractContextManager[psycopg.Connection]:
        raise NotImplementedError

    def _check_identity(self) -> None:
        raise NotImplementedError

    def _ranked(
        self, conn: psycopg.Connection, terms: list[Sql], where: Sql, limit: int
    ) -> list[Row]:
        """Rows matching any term and ``where``, best first (see :mod:`.text`): two
        statements, term frequencies, then the page: candidates by IDF score (the best
        ``max(5 * limit, 50)``), re-ranked with ``0.01 * ts_rank_cd`` added."""
        any_term = Sql(
            "(" + " || ".join(t.text for t in terms) + ")", [x for t in terms for x in t.params]
        )
        counts = ", ".join(f"count(*) FILTER (WHERE m.tsv @@ {t.text})" for t in terms)
        total = (
            "(SELECT CASE WHEN c.reltuples >= 10000 THEN c.reltuples::bigint ELSE "
            f"(SELECT count(*) FROM {self._table}) END FROM pg_class AS c "
            "WHERE c.oid = %s::regclass)"
        )
        stats = conn.execute(
            f"SELECT {total}, {counts} FROM {self._table} AS m WHERE m.tsv @@ {any_term.text}",
            [self._table, *(x for t in terms for x in t.params), *any_term.params],
        ).fetchone() or (0,)
        weights = bm25_idf(int(stats[0] or 0), [int(df) for df in stats[1:]])
        score = " + ".join(f"%s * (m.tsv @@ {t.text})::int" for t in terms)
        sql = (
            f"SELECT c.seq, c.id, c.key, c.content, c.metadata, c.score + 0.01 * "
            f"ts_rank_cd(c.tsv, {any_term.text}) AS score FROM (SELECT {COLUMNS}, m.tsv, "
            f"({score}) AS score FROM {self._table} AS m WHERE m.tsv @@ {any_term.text} "
            f"AND {where.text} ORDER BY score DESC, m.seq LIMIT %s) AS c "
            "ORDER BY score DESC, c.seq LIMIT %s"
        )
        params = [*any_term.params]
        params += [x for w, t in zip(weights, terms, strict=True) for x in (w, *t.params)]
        params += [*any_term.params, *where.params, max(limit * 5, 50), limit]
        return conn.execute(sql, params).fetchall()

    def _strategy(self, input: MemorySearchInput) -> str:
        strategy = input.strategy or "keyword"
        if strategy not in self.capabilities.search_strategies:
            names = ", ".join(repr(name) for name in self.capabilities.search_strategies)
            raise MemoryError(
                ErrorCode.UNSUPPORTED_STRATEGY,
                f"unsupported search strategy {strategy[:40]!r}; use one of {names}",
            )
        return strategy

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> list[MemorySearchResult]:
        """Search by ``strategy`` (default ``keyword``); see the module docstring.

        Returns:
            At most ``limit`` (default 10) results matching ``filter``, by descending
            score. A keyword query without any word gives ``[]``. A filtered vector
            search returns ``min(limit, matching records with vectors)``.

        Raises:
            MemoryError: ``UNSUPPORTED_STRATEGY`` for a strategy the store does not have
                (``vector``/``hybrid`` need an embedder); ``INVALID_INPUT`` for a query
                the strategy cannot use; ``UNSUPPORTED_FILTER``; ``EMBEDDING_MISMATCH`` /
                ``EMBEDDING_UNAVAILABLE`` from the embedder.
        """
        strategy = self._strategy(input)
        if strategy == "hybrid":
            return self._hybrid(input, options)
        limit = input.limit or DEFAULT_SEARCH_LIMIT
        if strategy == "vector" and self._embedder is not None:
            self._check_identity()
            requested = compile_filter(parse_filter(input.filter))
            # a filter or a scope may select few rows: the index scan gives up early then
            selective = requested.text != "true" or getattr(options, "scope", None) is not None
            where = in_namespace(requested, namespace_of(options))
            literal = query_vector(self._embedder, input.query)
            with self._tx(options) as conn:
                rows = vector_search(conn, self._quoted, COLUMNS, literal, where, limit,
                                     self._iterative, selective)  # fmt: skip
        else:
            if not isinstance(input.query, str):
                raise MemoryError(ErrorCode.INVALID_INPUT, "keyword search needs a text query")
            where = in_namespace(compile_filter(parse_filter(input.filter)), namespace_of(options))
            terms = term_queries(query_terms(input.query))
            if not terms:
                return []
            with self._tx(options) as conn:
                rows = self._ranked(conn, terms, where, limit)
        return [
            MemorySearchResult(
                memory=item(row),
                score=float(row[5]),
                metadata={"strategy": strategy, "rank": position},
            )
            for position, row in enumerate(rows, start=1)
        ]

    def _hybrid(
        self, input: MemorySearchInput, options: MemoryCallOptions | None
    ) -> list[MemorySearchResult]:
        from ditto_worker.retrieval.pipeline import RetrievalConfig, run_pipeline

        if self._embedder is None:  # not reachable: hybrid is declared with an embedder
            raise MemoryError(ErrorCode.UNSUPPORTED_STRATEGY, "hybrid search needs an embedder")
        self._check_identity()
        if not isinstance(self._hybrid_settings, RetrievalConfig):
            self._hybrid_settings = RetrievalConfig.parse(self._hybrid_settings)
        config = self._hybrid_settings
        return run_pipeline(self, self._embedder, config, input, options, strategy="hybrid")
