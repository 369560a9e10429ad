"""Native SEARCH of the SQLite store: ``keyword``/``bm25``, and with vectors ``vector`` and
``hybrid``.

* ``keyword`` (alias ``bm25``): FTS5 BM25 over the content's text
  (:mod:`ditto_plugin_sqlite.fts`); ``score = -bm25()``, positive, higher is better.
* ``vector``: exact cosine over the rows passing the filter
  (:mod:`ditto_plugin_sqlite.vectors`); the query is a text (embedded by the store's
  provider) or a list of ``dims`` numbers; ``score = 1 - cosine distance``, the cosine
  similarity in [-1, 1], higher is better.
* ``hybrid``: the retrieval pipeline (:func:`ditto_worker.retrieval.pipeline.run_pipeline`)
  over this store's ``keyword`` and ``vector`` searches, configured by the store's
  ``hybrid`` settings; score documented in :mod:`ditto_worker.retrieval.fusion`.

Every result's ``metadata`` is ``{"strategy": <strategy>, "rank": <1-based position>}``
(hybrid adds its per-stage scores). Results are ordered by descending score, the record
sequence breaking ties.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Any, Final

from ditto_plugin_sqlite.fts import match_expression
from ditto_plugin_sqlite.rows import COLUMNS, row_item
from ditto_plugin_sqlite.sql import Sql, compile_filter, in_namespace
from ditto_plugin_sqlite.vectors import query_blob
from ditto_worker.capabilities import StoreCapabilities
from ditto_worker.contracts import MemorySearchInput, MemorySearchResult
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.filters import parse_filter
from ditto_worker.ports import MemoryCallOptions
from ditto_worker.retrieval.embed import EmbeddingProvider
from ditto_worker.scope import namespace_of

__all__ = ["KEYWORD_CAPABILITIES", "VECTOR_CAPABILITIES", "SearchMixin"]

DEFAULT_SEARCH_LIMIT: Final = 10
_EXTRAS: Final = frozenset({"multi_process", "driver_cancel"})

KEYWORD_CAPABILITIES: Final = StoreCapabilities(
    search_strategies=("keyword", "bm25"),
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
    search_strategies=("keyword", "bm25", "vector", "hybrid"),
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
"""What a store with an embedding provider declares (``vector`` and ``hybrid`` added)."""


def _keyword_sql(query: Any, where: Sql, limit: int) -> tuple[str, list[Any]] | None:
    if not isinstance(query, str):
        raise MemoryError(ErrorCode.INVALID_INPUT, "keyword search needs a text query")
    expression = match_expression(query)
    if expression is None:
        return None
    sql = (
        f"SELECT {COLUMNS}, -bm25(memories_fts) AS score FROM memories_fts "
        "JOIN memories AS m ON m.seq = memories_fts.rowid "
        f"WHERE memories_fts MATCH ? AND {where.text} ORDER BY score DESC, m.seq LIMIT ?"
    )
    return sql, [expression, *where.params, limit]


def _vector_sql(blob: bytes, where: Sql, limit: int) -> tuple[str, list[Any]]:
    sql = (
        f"SELECT {COLUMNS}, 1.0 - vec_distance_cosine(v.embedding, ?) AS score "
        "FROM memory_vectors AS v JOIN memories AS m ON m.seq = v.seq "
        f"WHERE {where.text} ORDER BY score DESC, m.seq LIMIT ?"
    )
    return sql, [blob, *where.params, limit]


class SearchMixin:
    """``search`` of :class:`~ditto_plugin_sqlite.SqliteMemoryStore` (see module doc)."""

    search_strategies: tuple[str, ...]
    _embedder: EmbeddingProvider | None
    _hybrid_settings: Any

    def _tx(
        self, options: MemoryCallOptions | None, write: bool
    ) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _check_identity(self) -> None:
        raise NotImplementedError

    def _strategy(self, input: MemorySearchInput) -> str:
        strategy = input.strategy or "keyword"
        if strategy not in self.search_strategies:
            names = ", ".join(repr(name) for name in self.search_strategies)
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
            score. A keyword query without any word (only punctuation) gives ``[]``. A
            filtered vector search returns ``min(limit, matching records with vectors)``.

        Raises:
            MemoryError: ``UNSUPPORTED_STRATEGY`` for a strategy the store does not have
                (``vector``/``hybrid`` need an embedder); ``INVALID_INPUT`` for a query
                the strategy cannot use; ``UNSUPPORTED_FILTER`` for a bad filter;
                ``EMBEDDING_MISMATCH`` / ``EMBEDDING_UNAVAILABLE`` from the embedder.
        """
        strategy = self._strategy(input)
        if strategy == "hybrid":
            return self._hybrid(input, options)
        where = in_namespace(compile_filter(parse_filter(input.filter)), namespace_of(options))
        limit = input.limit or DEFAULT_SEARCH_LIMIT
        if strategy == "vector" and self._embedder is not None:
            self._check_identity()
            statement = _vector_sql(query_blob(self._embedder, input.query), where, limit)
        else:
            found = _keyword_sql(input.query, where, limit)
            if found is None:
                return []
            statement = found
        with self._tx(options, write=False) as conn:
            rows = conn.execute(*statement).fetchall()
        return [
            MemorySearchResult(
                memory=row_item(row),
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
