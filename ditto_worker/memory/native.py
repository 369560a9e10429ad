"""A store plugin's native SEARCH, written once (the plugin kit's search half).

A store supplies two candidate searches over its own index — keyword and, with an
embedding provider, vector — and :class:`NativeSearch` does the rest for every plugin:
the strategy check, the query checks, the result shape, and ``hybrid``, which runs the
shared retrieval pipeline (fusion, mention boost, context expansion, rerank;
:func:`ditto_worker.memory.search.pipeline.run_pipeline`) over the store's own two searches.
The same pipeline serves RETRIEVAL.SEARCH, so a native ``hybrid`` and a delegated one
rank alike.

Result shape (MEM-SEARCH-3): at most ``limit`` results, best first, each with
``metadata = {"strategy": <strategy>, "rank": <1-based position>}`` (``hybrid`` adds its
per-stage scores; see :mod:`ditto_worker.memory.search.fusion`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ditto_worker.contracts import MemoryItem, MemorySearchInput, MemorySearchResult
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.ports import EmbeddingProvider, MemoryCallOptions
from ditto_worker.memory.search.metric import VECTOR_OPTIONS, check_metric
from ditto_worker.memory.vectors import query_values

__all__ = ["DEFAULT_SEARCH_LIMIT", "VECTOR_OPTIONS", "Hit", "NativeSearch", "check_metric"]

DEFAULT_SEARCH_LIMIT: Final = 10
"""Results of a native search called without ``limit`` (the SDK always passes one)."""

Hit = tuple[MemoryItem, float]
"""A candidate: the full record and its score (higher is better)."""


class NativeSearch:
    """``search()`` for a store plugin that supplies keyword and vector candidates.

    A plugin class mixes it in and provides:

    * ``capabilities`` — its :class:`StoreCapabilities` (``search_strategies`` lists
      what it serves; ``vector``/``hybrid`` only with an embedding provider);
    * ``_embedder`` — the provider, or ``None``; ``_hybrid_settings`` — the ``hybrid``
      pipeline settings (a ``RetrievalConfig`` or its mapping);
    * ``_check_identity()`` — raises ``EMBEDDING_MISMATCH`` when the provider is not the
      one the store's vectors were made with (MEM-RET-4);
    * ``_keyword_hits(query, input, limit, options)`` — at most ``limit`` hits for a text
      query under ``input.filter`` and the call's scope, best first; ``[]`` when the
      query has no searchable word;
    * ``_vector_hits(vector, input, limit, options)`` — the ``limit`` nearest records for
      a unit-length query vector, best first (score = cosine similarity in [-1, 1]).
    """

    capabilities: StoreCapabilities
    _embedder: EmbeddingProvider | None
    _hybrid_settings: Any

    def _check_identity(self) -> None:
        raise NotImplementedError

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> Sequence[Hit]:
        raise NotImplementedError

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> Sequence[Hit]:
        raise NotImplementedError

    def _search_strategy(self, input: MemorySearchInput) -> str:
        strategies = self.capabilities.search_strategies
        strategy = input.strategy or self.capabilities.default_strategy or strategies[0]
        if strategy not in strategies:
            names = ", ".join(repr(name) for name in strategies)
            raise MemoryError(
                ErrorCode.UNSUPPORTED_STRATEGY,
                f"unsupported search strategy {strategy[:40]!r}; use one of {names}",
            )
        return strategy

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> list[MemorySearchResult]:
        """Search by ``strategy`` (default: the store's ``default_strategy``).

        Returns:
            At most ``limit`` (default 10) results matching ``filter`` in the call's
            scope, best first (module docstring). A keyword query without any word gives
            ``[]``.

        Raises:
            MemoryError: ``UNSUPPORTED_STRATEGY`` for a strategy the store does not serve;
                ``INVALID_INPUT`` for a query the strategy cannot use;
                ``UNSUPPORTED_FILTER`` for a bad filter; ``EMBEDDING_MISMATCH`` /
                ``EMBEDDING_UNAVAILABLE`` from the embedding provider.
        """
        strategy = self._search_strategy(input)
        check_metric(input, strategy)
        if strategy == "hybrid":
            return self._hybrid(input, options)
        limit = input.limit or DEFAULT_SEARCH_LIMIT
        if strategy == "vector":
            embedder = self._require_embedder()
            hits = self._vector_hits(query_values(embedder, input.query), input, limit, options)
        else:
            if not isinstance(input.query, str):
                raise MemoryError(ErrorCode.INVALID_INPUT, "keyword search needs a text query")
            hits = self._keyword_hits(input.query, input, limit, options)
        return [
            MemorySearchResult(
                memory=memory, score=float(score), metadata={"strategy": strategy, "rank": rank}
            )
            for rank, (memory, score) in enumerate(hits, start=1)
        ]

    def _require_embedder(self) -> EmbeddingProvider:
        if self._embedder is None:  # not reachable: vector/hybrid need an embedder
            raise MemoryError(ErrorCode.UNSUPPORTED_STRATEGY, "this store has no embedder")
        self._check_identity()
        return self._embedder

    def _hybrid(
        self, input: MemorySearchInput, options: MemoryCallOptions | None
    ) -> list[MemorySearchResult]:
        from ditto_worker.memory.search.pipeline import run_pipeline  # pydantic models: on use
        from ditto_worker.memory.search.settings import RetrievalConfig

        embedder = self._require_embedder()
        if not isinstance(self._hybrid_settings, RetrievalConfig):
            self._hybrid_settings = RetrievalConfig.parse(self._hybrid_settings)
        return run_pipeline(
            self, embedder, self._hybrid_settings, input, options, strategy="hybrid"
        )
