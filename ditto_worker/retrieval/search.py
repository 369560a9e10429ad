"""Search providers over the pipeline (MEM-RET-3).

* :func:`create_retrieval_memory_search_provider` — a ``MemorySearchProvider`` running
  the pipeline (:func:`.pipeline.run_pipeline`) in-process over a store; pass it as
  ``create_memory(store, search=…)`` or as a RETRIEVAL target.
* :func:`create_memory_retrieval_provider` — a store's native ``search`` exposed to
  RETRIEVAL unchanged.
* :func:`build_pipeline_provider` — what the RETRIEVAL worker builds for a target of
  ``workers.retrieval.targets`` with a non-empty ``pipeline``: the pipeline over the
  target's store, the query embedder wrapped in a :class:`.batching.MicroBatchingEmbedder`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ditto_worker.contracts import MemorySearchInput, MemorySearchResult
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.ports import MemoryCallOptions, MemorySearchProvider
from ditto_worker.memory.search.pipeline import Reranker, run_pipeline
from ditto_worker.memory.search.settings import RetrievalConfig
from ditto_worker.retrieval.batching import MicroBatchingEmbedder
from ditto_worker.retrieval.embed import (
    EMBEDDING_MISMATCH,
    EmbeddingProvider,
    create_embedding_provider,
)

__all__ = [
    "RetrievalSearchProvider",
    "build_pipeline_provider",
    "create_memory_retrieval_provider",
    "create_retrieval_memory_search_provider",
]


class RetrievalSearchProvider:
    """``MemorySearchProvider`` running the retrieval pipeline in-process.

    Args:
        source: the store searched for candidates (``keyword`` text search and
            ``vector`` search by a query vector; ``query`` for neighbour expansion).
        embedder: embeds queries; its identity must equal the source's (``source.embedder``
            when the source exposes one), else every call fails with
            ``EMBEDDING_MISMATCH``.
        config: pipeline settings (default ``RetrievalConfig()``).
        reranker: optional last stage.

    Strategies ``keyword``, ``vector``, ``hybrid`` (default ``config.strategy``); any other
    fails with ``UNSUPPORTED_STRATEGY``.
    """

    def __init__(
        self,
        source: Any,
        embedder: EmbeddingProvider,
        config: RetrievalConfig | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        if not callable(getattr(source, "search", None)):
            raise ConfigError(f"{type(source).__name__} has no search to take candidates from")
        self.source = source
        self.embedder = embedder
        self.config = config or RetrievalConfig()
        self.reranker = reranker
        self.capabilities = StoreCapabilities(
            search_strategies=("keyword", "vector", "hybrid"),
            default_strategy=self.config.strategy,
            keyword_strategy="keyword",
            # scoped calls pass options on to the source, which confines them
            scope=bool(getattr(getattr(source, "capabilities", None), "scope", False)),
            keyword_scope_statistics=bool(
                getattr(getattr(source, "capabilities", None), "keyword_scope_statistics", False)
            ),
            # options are passed on to the source's searches: it is the one that reads them
            search_options=getattr(
                getattr(source, "capabilities", None), "search_options", frozenset()
            ),
        )
        own = getattr(source, "embedder", None)
        self._mismatch: str | None = None
        if own is not None and own.identity != embedder.identity:
            self._mismatch = (
                f"the query embedder {embedder.identity.describe()} differs from the "
                f"store's {own.identity.describe()}"
            )

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemorySearchResult]:
        """Run the pipeline (see :func:`.pipeline.run_pipeline`).

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` (see class doc), ``UNSUPPORTED_STRATEGY``,
                ``INVALID_INPUT`` and the source's / embedder's errors.
        """
        if self._mismatch is not None:
            raise MemoryError(EMBEDDING_MISMATCH, self._mismatch)
        return run_pipeline(
            self.source, self.embedder, self.config, input, options, reranker=self.reranker
        )


def create_retrieval_memory_search_provider(
    store: Any,
    embedder: EmbeddingProvider,
    config: RetrievalConfig | Mapping[str, Any] | None = None,
    reranker: Reranker | None = None,
) -> RetrievalSearchProvider:
    """The pipeline over ``store`` as a ``MemorySearchProvider`` (MEM-RET-3).

    Raises:
        ConfigError: ``store`` has no ``search``, or ``config`` is invalid.
    """
    return RetrievalSearchProvider(store, embedder, RetrievalConfig.parse(config), reranker)


def create_memory_retrieval_provider(store: Any) -> MemorySearchProvider:
    """A store's native search as a RETRIEVAL provider (MEM-RET-3); the store is used as is.

    Raises:
        ConfigError: the store has no ``search``.
    """
    if not callable(getattr(store, "search", None)):
        raise ConfigError(f"store {type(store).__name__} has no native search")
    provider: MemorySearchProvider = store
    return provider


def build_pipeline_provider(
    store: Any, pipeline: Mapping[str, Any], config: Any = None
) -> RetrievalSearchProvider:
    """The RETRIEVAL target of ``workers.retrieval.targets.<name>.pipeline``.

    Args:
        store: the target's store (built from ``plugins.<store>``).
        pipeline: :class:`RetrievalConfig` settings (camelCase).
        config: the runtime config: its ``workers.retrieval.device`` is the query
            embedder's device (``None``: ``DITTO_WORKER_RETRIEVAL_DEVICE`` or cpu).

    Returns:
        A provider whose query embedder is ``store.embedder`` (``embedding: store``) or a
        new ``local``/``http`` provider, wrapped in a ``MicroBatchingEmbedder``.

    Raises:
        ConfigError: invalid settings, or ``embedding: store`` with a store that has no
            embedder.
    """
    settings = RetrievalConfig.parse(pipeline)
    if settings.embedding == "store":
        embedder = getattr(store, "embedder", None)
        if embedder is None:
            raise ConfigError("pipeline embedding 'store': the store has no embedding provider")
    else:
        env = dict(os.environ)
        if config is not None:
            env["DITTO_WORKER_RETRIEVAL_DEVICE"] = config.retrieval_worker.device
            env["DITTO_WORKER_RETRIEVAL_TORCH_THREADS"] = str(config.retrieval_worker.torch_threads)
        embedder = create_embedding_provider(settings.embedding, None, env)
    if embedder is None:  # not reachable: local/http always build one
        raise MemoryError(ErrorCode.SEARCH_UNAVAILABLE, "no query embedder")
    batcher = MicroBatchingEmbedder(
        embedder,
        max_batch_size=settings.micro_batch.max_batch_size,
        max_wait_ms=settings.micro_batch.max_wait_ms,
    )
    return RetrievalSearchProvider(store, batcher, settings)
