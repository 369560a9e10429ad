"""Diversity across groups after the context stage (``context.groupPenalty``, issue 38).

:func:`group_diversity` takes results best first, each scoring ``group_penalty`` less per
result already taken from its group (a session), so that one group does not fill the
results. Off by default: on LoCoMo it lowered recall (docs/retrieval.md "Six
conversations, one rule").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from ditto_worker.contracts import MemoryItem
from ditto_worker.memory.search.scoring import position
from ditto_worker.memory.search.settings import ContextSettings

__all__ = ["group_diversity"]


def group_diversity(
    scores: Mapping[str, float], memories: Mapping[str, MemoryItem], settings: ContextSettings,
    depth: int,
) -> dict[str, float]:  # fmt: skip
    """``scores`` after taking the best ``depth`` one by one, each memory scoring
    ``settings.group_penalty × (memories already taken from its group)`` less.

    Greedy: the next result is the best adjusted score (ties: ``scores``' order); a memory
    without a position has no group and no penalty. The taken ones keep the score they
    were taken with, the rest are lowered by their group's final count, so sorting the
    result by score gives the taken order first (scores never rise). A no-op (a copy) when
    the penalty is 0.
    """
    out = dict(scores)
    if settings.group_penalty == 0 or depth < 1:
        return out
    groups: dict[Any, list[str]] = defaultdict(list)
    order = {key: index for index, key in enumerate(scores)}
    for key in sorted(scores, key=lambda k: (-scores[k], order[k])):
        where = position(memories[key], settings) if key in memories else None
        groups[("g", _group_key(where[0])) if where else ("m", key)].append(key)
    taken: dict[Any, int] = defaultdict(int)
    for _ in range(min(depth, len(scores))):
        group = max(
            (g for g in groups if taken[g] < len(groups[g])),
            key=lambda g: (
                _adjusted(scores, groups, taken, g, settings),
                -order[groups[g][taken[g]]],
            ),
        )
        out[groups[group][taken[group]]] = _adjusted(scores, groups, taken, group, settings)
        taken[group] += 1
    for group, members in groups.items():
        for key in members[taken[group] :]:
            out[key] = scores[key] - settings.group_penalty * taken[group]
    return out


def _adjusted(
    scores: Mapping[str, float], groups: Mapping[Any, list[str]], taken: Mapping[Any, int],
    group: Any, settings: ContextSettings,
) -> float:  # fmt: skip
    count = taken[group]
    return scores[groups[group][count]] - settings.group_penalty * count


def _group_key(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else repr(value)
