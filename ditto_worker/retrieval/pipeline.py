"""The retrieval pipeline: moved to :mod:`ditto_worker.memory.search.pipeline` (issue 24).

The SDK's layer holds it now, so store plugins and RETRIEVAL both reach it downward;
this old path re-exports its names, the same objects.
"""

from __future__ import annotations

from ditto_worker.memory.search.pipeline import (
    Candidates,
    Reranker,
    RetrievalConfig,
    embed_query,
    expand_neighbours,
    fuse_candidates,
    keyword_query,
    run_pipeline,
    search_candidates,
    to_results,
    vector_query,
)

__all__ = [
    "Candidates",
    "Reranker",
    "RetrievalConfig",
    "embed_query",
    "expand_neighbours",
    "fuse_candidates",
    "keyword_query",
    "run_pipeline",
    "search_candidates",
    "to_results",
    "vector_query",
]
