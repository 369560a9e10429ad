"""Fusion of per-strategy candidate lists into one score per memory; what the score means.

Each strategy (``keyword``, ``vector``) returns a ranked candidate list with raw scores
on its own scale (BM25 is unbounded and positive, cosine is in [-1, 1]), so the raw
scores are not comparable. Two fusions:

* **weighted** (default; "convex combination", Bruch et al., *An Analysis of Fusion
  Functions for Hybrid Retrieval*, ACM TOIS 2023): each strategy's scores are min-max
  normalized over its own candidate list to [0, 1] (best candidate 1, worst 0), and
  ``fused = Σ_s w_s · norm_s`` with the weights scaled to sum to 1. A memory missing from
  a strategy's list gets 0 from it. **Meaning:** ``fused`` is in [0, 1]; 1.0 = the top
  candidate of every strategy; 0.5 with weights keyword 0.75 / vector 0.25 could be e.g.
  "2/3 of the way from the worst to the best keyword candidate, not among the vector ones".
* **rrf** (reciprocal rank fusion, Cormack, Clarke & Büttcher, SIGIR 2009):
  ``Σ_s w_s / (k + rank_s)`` over the lists holding the memory (rank 1-based, ``k`` = 60
  by default), divided by its maximum ``Σ_s w_s / (k + 1)``. **Meaning:** in (0, 1];
  1.0 = ranked first by every strategy; only ranks count, never score gaps.
* **dbsf** (distribution-based score fusion, as Qdrant names it; a z-score normalization,
  cf. Bruch et al. 2023): each strategy's scores are calibrated *per query* by their own
  candidate list's mean μ and standard deviation σ, ``norm = (s - (μ - 3σ)) / 6σ`` clipped
  to [0, 1], then combined as in weighted. Nothing is chosen on data: a list whose best
  candidates stand far above its mean counts for more in that query, a flat list for less
  (one extreme score does not squash the rest, as min-max lets it). **Meaning:** ``fused``
  is in [0, 1]; a candidate 3σ above its list's mean in every strategy scores 1.0.

On the LoCoMo sample, rrf of BM25 and all-MiniLM-L6-v2 finds less evidence than BM25
alone (0.54 vs 0.60 recall@10): rank-only fusion gives the weak dense list as much say as
the strong keyword list. Weighted fusion keeps score gaps and lets the weights say how
much each strategy is trusted (see ``ditto_worker.cli.eval`` for the measurements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["dbsf", "fuse", "minmax", "normalized_weights", "rrf", "weighted", "zscale"]


def normalized_weights(weights: Mapping[str, float], strategies: Sequence[str]) -> dict[str, float]:
    """The weights of ``strategies`` scaled to sum to 1 (missing weights count as 0).

    Raises:
        ValueError: a negative weight, or all weights 0.
    """
    chosen = {name: float(weights.get(name, 0.0)) for name in strategies}
    if any(value < 0 for value in chosen.values()):
        raise ValueError("fusion weights must be >= 0")
    total = sum(chosen.values())
    if total <= 0:
        raise ValueError("at least one fusion weight must be > 0")
    return {name: value / total for name, value in chosen.items()}


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Scores mapped linearly to [0, 1] (max -> 1, min -> 0); all equal -> all 1.0."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high <= low:
        return {key: 1.0 for key in scores}
    return {key: (value - low) / (high - low) for key, value in scores.items()}


def zscale(scores: Mapping[str, float], spread: float = 3.0) -> dict[str, float]:
    """Scores mapped to [0, 1] by their own distribution: ``(s - (μ - spread·σ)) /
    (2·spread·σ)`` clipped (μ, σ: mean and population standard deviation of ``scores``);
    all equal -> all 1.0."""
    if not scores:
        return {}
    values = list(scores.values())
    mean = sum(values) / len(values)
    sigma = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    if sigma <= 0:
        return {key: 1.0 for key in scores}
    low, span = mean - spread * sigma, 2 * spread * sigma
    return {key: min(1.0, max(0.0, (value - low) / span)) for key, value in scores.items()}


def dbsf(
    lists: Mapping[str, Mapping[str, float]], weights: Mapping[str, float]
) -> dict[str, float]:
    """Distribution-based score fusion (see module doc): :func:`zscale` per list, then the
    weighted sum.

    Args:
        lists: strategy -> {memory id: raw score, higher is better}.
        weights: strategy -> weight (>= 0; scaled to sum 1 over ``lists``' strategies).

    Returns:
        {memory id: fused score in [0, 1]} for every id of any list.
    """
    scale = normalized_weights(weights, list(lists))
    fused: dict[str, float] = {}
    for strategy, scores in lists.items():
        for key, value in zscale(scores).items():
            fused[key] = fused.get(key, 0.0) + scale[strategy] * value
    return fused


def weighted(
    lists: Mapping[str, Mapping[str, float]], weights: Mapping[str, float]
) -> dict[str, float]:
    """Weighted score fusion (see module doc).

    Args:
        lists: strategy -> {memory id: raw score, higher is better}.
        weights: strategy -> weight (>= 0; scaled to sum 1 over ``lists``' strategies).

    Returns:
        {memory id: fused score in [0, 1]} for every id of any list.
    """
    scale = normalized_weights(weights, list(lists))
    fused: dict[str, float] = {}
    for strategy, scores in lists.items():
        for key, value in minmax(scores).items():
            fused[key] = fused.get(key, 0.0) + scale[strategy] * value
    return fused


def rrf(
    lists: Mapping[str, Sequence[str]], weights: Mapping[str, float], k: int = 60
) -> dict[str, float]:
    """Weighted reciprocal rank fusion, normalized to (0, 1] (see module doc).

    Args:
        lists: strategy -> memory ids, best first.
        weights: strategy -> weight (>= 0; scaled to sum 1).
        k: the RRF constant (60 in Cormack et al.); must be >= 0.

    Returns:
        {memory id: fused score in (0, 1]}.
    """
    if k < 0:
        raise ValueError("rrf k must be >= 0")
    scale = normalized_weights(weights, list(lists))
    top = sum(scale.values()) / (k + 1)
    fused: dict[str, float] = {}
    for strategy, ranked in lists.items():
        for rank, key in enumerate(ranked, start=1):
            fused[key] = fused.get(key, 0.0) + scale[strategy] / (k + rank)
    return {key: value / top for key, value in fused.items()}


def fuse(
    method: str,
    lists: Mapping[str, Sequence[tuple[str, float]]],
    weights: Mapping[str, float],
    rrf_k: int = 60,
) -> dict[str, float]:
    """Fuse ranked ``(id, raw score)`` lists with ``method`` (``weighted``, ``rrf`` or
    ``dbsf``).

    Raises:
        ValueError: an unknown method, or bad weights / k.
    """
    if method == "weighted":
        return weighted({s: dict(pairs) for s, pairs in lists.items()}, weights)
    if method == "rrf":
        return rrf({s: [key for key, _ in pairs] for s, pairs in lists.items()}, weights, rrf_k)
    if method == "dbsf":
        return dbsf({s: dict(pairs) for s, pairs in lists.items()}, weights)
    raise ValueError(f"unknown fusion method {method!r}; use weighted, rrf or dbsf")
