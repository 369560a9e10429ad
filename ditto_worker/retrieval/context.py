"""Mention and context scoring: moved to :mod:`ditto_worker.memory.search.scoring` (issue 24).

The SDK's layer holds it now, so store plugins and RETRIEVAL both reach it downward;
this old path re-exports its names, the same objects.
"""

from __future__ import annotations

from ditto_worker.memory.search.scoring import (
    context_scores,
    fetch_limit,
    mention_scores,
    mentioned_values,
    neighbour_filter,
    position,
    strip_mentions,
)

__all__ = [
    "context_scores",
    "fetch_limit",
    "mention_scores",
    "mentioned_values",
    "neighbour_filter",
    "position",
    "strip_mentions",
]
