"""Retrieval: embeddings, candidate search, fusion, context, rerank (MEM-RET, MEM-SEARCH).

Importing this package loads no model and no torch: providers import their libraries when
built. Modules: :mod:`.embed` (identity, local provider), :mod:`.http` (HTTP provider),
:mod:`.batching` (micro-batching), :mod:`.fusion` (weighted / rrf, the score's meaning),
:mod:`.context` (mentions and neighbours), :mod:`.pipeline` (the stages), :mod:`.search`
(providers over a store), :mod:`.settings` (``RetrievalConfig``), :mod:`.eval` (LoCoMo
evidence recall).
"""

from __future__ import annotations

from ditto_worker.retrieval.batching import BatchStats, MicroBatchingEmbedder
from ditto_worker.retrieval.embed import (
    EMBEDDING_MISMATCH,
    EMBEDDING_UNAVAILABLE,
    EmbeddingIdentity,
    EmbeddingProvider,
    LocalEmbeddingProvider,
    create_embedding_provider,
)
from ditto_worker.retrieval.fusion import rrf, weighted
from ditto_worker.retrieval.http import HttpEmbeddingProvider
from ditto_worker.retrieval.pipeline import Reranker, run_pipeline
from ditto_worker.retrieval.search import (
    RetrievalSearchProvider,
    build_pipeline_provider,
    create_memory_retrieval_provider,
    create_retrieval_memory_search_provider,
)
from ditto_worker.retrieval.settings import (
    ContextSettings,
    FusionSettings,
    MentionSettings,
    MicroBatchSettings,
    RetrievalConfig,
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
