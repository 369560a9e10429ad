"""Retrieval: embeddings, candidate search, fusion, context, rerank (MEM-RET, MEM-SEARCH).

Importing this package loads no model and no torch: providers import their libraries when
built. Modules: :mod:`.embed` (identity, local provider), :mod:`.http` (HTTP provider),
:mod:`.batching` (micro-batching), :mod:`.search` (providers over a store),
:mod:`.delegation` (RETRIEVAL.SEARCH), :mod:`.config` (the worker from ``ditto.yaml``).
The pipeline the stores share — stages, fusion, mention and context scoring,
``RetrievalConfig`` — lives below, in :mod:`ditto_worker.memory.search`; the old module
paths :mod:`.pipeline`, :mod:`.fusion`, :mod:`.context` and :mod:`.settings` re-export it.
"""

from __future__ import annotations

from ditto_worker.memory.search.fusion import rrf, weighted
from ditto_worker.memory.search.pipeline import Reranker, run_pipeline
from ditto_worker.memory.search.settings import (
    ContextSettings,
    FusionSettings,
    MentionSettings,
    MicroBatchSettings,
    RetrievalConfig,
)
from ditto_worker.retrieval.batching import BatchStats, MicroBatchingEmbedder
from ditto_worker.retrieval.embed import (
    EMBEDDING_MISMATCH,
    EMBEDDING_UNAVAILABLE,
    EmbeddingIdentity,
    EmbeddingProvider,
    LocalEmbeddingProvider,
    create_embedding_provider,
)
from ditto_worker.retrieval.http import HttpEmbeddingProvider
from ditto_worker.retrieval.search import (
    RetrievalSearchProvider,
    build_pipeline_provider,
    create_memory_retrieval_provider,
    create_retrieval_memory_search_provider,
)

__all__ = [
    "EMBEDDING_MISMATCH",
    "EMBEDDING_UNAVAILABLE",
    "BatchStats",
    "ContextSettings",
    "EmbeddingIdentity",
    "EmbeddingProvider",
    "FusionSettings",
    "HttpEmbeddingProvider",
    "LocalEmbeddingProvider",
    "MentionSettings",
    "MicroBatchSettings",
    "MicroBatchingEmbedder",
    "Reranker",
    "RetrievalConfig",
    "RetrievalSearchProvider",
    "build_pipeline_provider",
    "create_embedding_provider",
    "create_memory_retrieval_provider",
    "create_retrieval_memory_search_provider",
    "rrf",
    "run_pipeline",
    "weighted",
]
