"""The retrieval pipeline as plain functions, each testable alone (STYLE.md "retrieval").

``run_pipeline`` = :func:`embed_query` → :func:`search_candidates` per strategy (the
source's ``keyword`` and ``vector`` searches, each without the metadata values the query
names: :func:`keyword_query`, :func:`vector_query`) → :func:`fuse_candidates` (weighted or rrf,
:mod:`.fusion`) → :func:`.scoring.mention_scores` → :func:`expand_neighbours` and
:func:`.scoring.context_scores` → :func:`.diversity.group_diversity` → optional
:class:`Reranker` → :func:`to_results`.

The *source* is any ``MemorySearchProvider`` whose ``search`` accepts a text query for its
keyword strategy and a vector (``list[float]`` of the embedder's ``dims``) for its vector
strategy — the SQLite store with an embedder does; neighbour expansion also needs its
``query`` (a ``MemoryStore``). Strategies ``keyword`` and ``vector`` pass straight through
to the source; ``hybrid`` runs every stage.

Result ``score`` of ``hybrid``: ``fused`` (in [0, 1], see :mod:`.fusion`) ``+ mention``
(``mention.weight`` or 0) ``+ context`` (``neighbourWeight × best neighbour`` ``+
groupWeight × group mean``, each of those scores in [0, 1 + mention.weight]); higher is
better; with the defaults (no mention or context fields) it is just ``fused``. A reranker
replaces it with its own score. ``metadata``: ``{"strategy", "rank", "fusion",
"scores": {"keyword"?, "vector"?, "fused", "final"}}`` (raw per-strategy scores: BM25
and cosine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ditto_worker.contracts import MemoryItem, MemorySearchInput, MemorySearchResult
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingProvider, MemoryCallOptions, check_vectors
from ditto_worker.memory.query_vectors import embed_text
from ditto_worker.memory.search.diversity import group_diversity
from ditto_worker.memory.search.fusion import fuse
from ditto_worker.memory.search.metric import VECTOR_OPTIONS, check_metric
from ditto_worker.memory.search.scoring import (
    context_scores,
    fetch_limit,
    mention_scores,
    mentioned_values,
    neighbour_filter,
    strip_mentions,
)
from ditto_worker.memory.search.settings import RetrievalConfig

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

DEFAULT_LIMIT = 10
Candidates = dict[str, list[MemorySearchResult]]
"""Strategy role (``keyword``/``vector``) -> the source's results, best first."""


@runtime_checkable
class Reranker(Protocol):
    """An optional last stage: reorders (and may rescore) the best fused results."""

    def rerank(self, query: str, results: Sequence[MemorySearchResult]) -> list[MemorySearchResult]:
        """Return ``results`` (a subset, reordered, rescored), best first."""
        ...


def embed_query(embedder: EmbeddingProvider, query: str) -> list[float]:
    """The query's vector: ``list[float]`` of ``embedder.identity.dims``.

    Raises:
        MemoryError: ``INVALID_INPUT`` for an empty query; the embedder's errors.
    """
    if not query.strip():
        raise MemoryError(ErrorCode.INVALID_INPUT, "the search query is empty")
    vectors = embed_text(embedder, query)  # a coalesced batch's vector, if made
    check_vectors(vectors, 1, embedder.identity.dims)
    return vectors[0]


def _results(raw: Sequence[Any]) -> list[MemorySearchResult]:
    return [r if isinstance(r, MemorySearchResult) else MemorySearchResult.model_validate(r)
            for r in raw]  # fmt: skip


def search_candidates(
    source: Any, strategy: str, query: Any, input: MemorySearchInput, limit: int,
    options: MemoryCallOptions | None,
) -> list[MemorySearchResult]:  # fmt: skip
    """One candidate list: ``source.search`` with ``strategy``, ``query``, the request's
    ``filter`` and ``options``, at most ``limit`` results (the source's order)."""
    extra = input.options
    if extra and not isinstance(query, list):  # a text leg: vector options are not its own
        extra = {k: v for k, v in extra.items() if k not in VECTOR_OPTIONS} or None
    request = MemorySearchInput(
        query=query, strategy=strategy, filter=input.filter, limit=limit, options=extra
    )
    return _results(source.search(request, options))


def fuse_candidates(
    candidates: Candidates, config: RetrievalConfig
) -> tuple[dict[str, float], dict[str, MemoryItem]]:
    """Fused scores (:mod:`.fusion`) and the memories, by id.

    A source may return results without a score (MEM-DATA-2). Such a score is unknown, not
    0: a list holding one is scored by its order instead (``n, n-1, …, 1`` for ``n``
    results, best first, as the source ranked them; MEM-SEARCH-3), so weighted fusion
    spaces it evenly from best to worst and rrf, which reads ranks only, is unchanged.
    """
    memories: dict[str, MemoryItem] = {}
    lists: dict[str, list[tuple[str, float]]] = {}
    for role, results in candidates.items():
        lists[role] = _raw_scores(results)
        for r in results:
            memories.setdefault(r.memory.id, r.memory)
    try:
        scores = fuse(config.fusion.method, lists, config.fusion.weights, config.fusion.rrf_k)
    except ValueError as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"retrieval fusion: {exc}") from None
    return scores, memories


def _raw_scores(results: Sequence[MemorySearchResult]) -> list[tuple[str, float]]:
    """``(id, raw score)`` best first; by rank when any score is unknown (``None``)."""
    scored = [(r.memory.id, float(r.score)) for r in results if r.score is not None]
    if len(scored) == len(results):
        return scored
    return [(r.memory.id, float(len(results) - i)) for i, r in enumerate(results)]


def expand_neighbours(
    source: Any, scores: Mapping[str, float], memories: dict[str, MemoryItem],
    input: MemorySearchInput, config: RetrievalConfig, options: MemoryCallOptions | None,
) -> None:  # fmt: skip
    """Add the ±window neighbours of the ``context.expand`` best candidates to
    ``memories`` (one ``source.query``; the request's filter applies). No-op when context
    is off, ``expand`` is 0, or the source has no ``query``."""
    settings = config.context
    if settings.group_field is None or settings.expand == 0 or not hasattr(source, "query"):
        return
    best = sorted(scores, key=lambda key: -scores[key])[: settings.expand]
    where = neighbour_filter([memories[key] for key in best], settings, input.filter)
    if where is None:
        return
    from ditto_worker.contracts import MemoryQueryInput, MemoryQueryOutput

    request = MemoryQueryInput(filter=where, limit=fetch_limit(len(best), settings))
    page = source.query(request, options)
    page = page if isinstance(page, MemoryQueryOutput) else MemoryQueryOutput.model_validate(page)
    for item in page.items:
        memories.setdefault(item.id, item)


def to_results(
    final: Mapping[str, float], memories: Mapping[str, MemoryItem], candidates: Candidates,
    fused: Mapping[str, float], limit: int, method: str,
) -> list[MemorySearchResult]:  # fmt: skip
    """The best ``limit`` by final score (ties: first-seen order), with stage metadata."""
    raw = {role: {r.memory.id: r.score for r in results} for role, results in candidates.items()}
    order = {key: index for index, key in enumerate(memories)}
    ranked = sorted(final, key=lambda key: (-final[key], order.get(key, 0)))[:limit]
    out = []
    for position, key in enumerate(ranked, start=1):
        scores: dict[str, float] = {
            role: float(value) for role, values in raw.items()
            if (value := values.get(key)) is not None
        }  # fmt: skip
        scores |= {"fused": fused.get(key, 0.0), "final": final[key]}
        metadata = {"strategy": "hybrid", "rank": position, "fusion": method, "scores": scores}
        out.append(MemorySearchResult(memory=memories[key], score=final[key], metadata=metadata))
    return out


def _hybrid_candidates(
    source: Any, embedder: EmbeddingProvider, config: RetrievalConfig,
    input: MemorySearchInput, options: MemoryCallOptions | None,
) -> Candidates:  # fmt: skip
    if not isinstance(input.query, str):
        raise MemoryError(ErrorCode.INVALID_INPUT, "hybrid search needs a text query")
    roles = [role for role in ("keyword", "vector") if config.fusion.weights.get(role, 0) > 0]
    if not roles:
        raise MemoryError(ErrorCode.INVALID_INPUT, "retrieval fusion: no strategy has a weight")
    candidates: Candidates = {}
    if "keyword" in roles:
        candidates["keyword"] = search_candidates(
            source, config.keyword_strategy, input.query, input, config.candidates, options
        )
    found = dict(candidates)  # the query as given: where both legs find the mentioned values
    stripped = keyword_query(input.query, found, config)
    if "keyword" in roles and stripped != input.query:
        candidates["keyword"] = search_candidates(
            source, config.keyword_strategy, stripped, input, config.candidates, options
        )
    if "vector" in roles:
        vector = embed_query(embedder, vector_query(input.query, found, config))
        candidates["vector"] = search_candidates(
            source, config.vector_strategy, vector, input, config.candidates, options
        )
    return candidates


def _without_mentions(query: str, candidates: Candidates, config: RetrievalConfig) -> str:
    """``query`` without the values of ``mention.fields`` that the ``candidates``'
    metadata holds and the query names (:func:`.scoring.strip_mentions`)."""
    memories = {r.memory.id: r.memory for results in candidates.values() for r in results}
    return strip_mentions(query, mentioned_values(memories, query, config.mention))


def vector_query(query: str, candidates: Candidates, config: RetrievalConfig) -> str:
    """The text to embed: ``query`` without the metadata values it mentions (see
    :func:`.scoring.strip_mentions`) when ``mention.stripFromVectorQuery`` is on."""
    mention = config.mention
    if not mention.fields or not mention.strip_from_vector_query:
        return query
    return _without_mentions(query, candidates, config)


def keyword_query(query: str, candidates: Candidates, config: RetrievalConfig) -> str:
    """The text of ``hybrid``'s keyword leg: ``query`` without the metadata values it
    mentions when ``mention.stripFromKeywordQuery`` is on, else ``query``.

    The values are found in the first keyword search's ``candidates`` (the query as
    given); when any is named, the keyword leg searches again without them and that
    second list is fused. Why (issue 28 item 7): in a conversation each speaker's turns
    name the other speaker ("Thanks, Jon!"), so a name in the question matched turns that
    *address* the person rather than what the person said; the mention boost scores the
    named speaker's memories instead. Measured on LoCoMo (docs/retrieval.md "Names in the
    keyword query"): leave-one-out hybrid R@10 0.781 -> 0.806 (30.json), 0.780 -> 0.810
    (26.json); plain RRF 0.719 -> 0.719, 0.667 -> 0.695.
    """
    mention = config.mention
    if not mention.fields or not mention.strip_from_keyword_query:
        return query
    return _without_mentions(query, candidates, config)


def _single(
    source: Any, embedder: EmbeddingProvider, config: RetrievalConfig, strategy: str,
    input: MemorySearchInput, limit: int, options: MemoryCallOptions | None,
) -> list[MemorySearchResult]:  # fmt: skip
    if strategy == "keyword":
        return search_candidates(source, config.keyword_strategy, input.query, input, limit,
                                 options)  # fmt: skip
    query = input.query
    if isinstance(query, str):
        query = embed_query(embedder, _stripped_query(source, config, input, options))
    return search_candidates(source, config.vector_strategy, query, input, limit, options)


def _stripped_query(
    source: Any, config: RetrievalConfig, input: MemorySearchInput,
    options: MemoryCallOptions | None,
) -> str:  # fmt: skip
    """The text a ``vector`` search embeds: as in ``hybrid`` (:func:`vector_query`), the
    query without the metadata values it mentions, found in the keyword candidates' metadata
    (one keyword search); the query itself when mention stripping is off (issue 28 item 7:
    the vector strategy embedded names that ``hybrid`` strips, LoCoMo R@10 0.43 -> 0.62)."""
    query = str(input.query)
    mention = config.mention
    if not mention.fields or not mention.strip_from_vector_query:
        return query
    candidates = {
        "keyword": search_candidates(
            source, config.keyword_strategy, query, input, config.candidates, options
        )
    }
    return vector_query(query, candidates, config)


def run_pipeline(
    source: Any, embedder: EmbeddingProvider, config: RetrievalConfig,
    input: MemorySearchInput, options: MemoryCallOptions | None = None, *,
    strategy: str | None = None, reranker: Reranker | None = None,
) -> list[MemorySearchResult]:  # fmt: skip
    """Run the pipeline for one search request (see the module docstring).

    Args:
        source: the candidate source (e.g. ``SqliteMemoryStore`` with an embedder).
        embedder: embeds the query; must have the source's embedding identity.
        config: the pipeline settings.
        input: the request; ``strategy`` (if ``None``, ``input.strategy`` or
            ``config.strategy``) picks ``keyword``, ``vector`` or ``hybrid``.
        options: cancel token / deadline, passed to every source call.
        reranker: optional last stage over the best ``config.rerank_depth`` results.

    Returns:
        At most ``input.limit`` (default 10) results, best first.

    Raises:
        MemoryError: ``UNSUPPORTED_STRATEGY`` for another strategy; ``INVALID_INPUT``
            for a query the strategy cannot use; the source's and embedder's errors.
    """
    strategy = strategy or input.strategy or config.strategy
    check_metric(input, strategy)
    limit = input.limit or DEFAULT_LIMIT
    if strategy in ("keyword", "vector"):
        return _single(source, embedder, config, strategy, input, limit, options)
    if strategy != "hybrid":
        raise MemoryError(
            ErrorCode.UNSUPPORTED_STRATEGY,
            f"unsupported search strategy {strategy[:40]!r}; use keyword, vector or hybrid",
        )
    candidates = _hybrid_candidates(source, embedder, config, input, options)
    fused, memories = fuse_candidates(candidates, config)
    boosted = mention_scores(fused, memories, input.query, config.mention)
    final = boosted
    if config.context.group_field is not None:
        expand_neighbours(source, boosted, memories, input, config, options)
        final = context_scores(boosted, memories, config.context)
    depth = max(limit, config.rerank_depth) if reranker is not None else limit
    if config.context.group_field is not None:
        final = group_diversity(final, memories, config.context, depth)
    results = to_results(final, memories, candidates, fused, depth, config.fusion.method)
    if reranker is not None:
        results = reranker.rerank(input.query, results)[:limit]
    return results
