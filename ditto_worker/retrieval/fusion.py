"""Fusion of candidate lists: moved to :mod:`ditto_worker.memory.search.fusion` (issue 24).

The SDK's layer holds it now, so store plugins and RETRIEVAL both reach it downward;
this old path re-exports its names, the same objects.
"""

from __future__ import annotations

from ditto_worker.memory.search.fusion import (
    dbsf,
    fuse,
    minmax,
    normalized_weights,
    rrf,
    weighted,
    zscale,
)

__all__ = [
    "dbsf",
    "fuse",
    "minmax",
    "normalized_weights",
    "rrf",
    "weighted",
    "zscale",
]
