"""``RetrievalConfig``: moved to :mod:`ditto_worker.memory.search.settings` (issue 24).

The SDK's layer holds it now, so store plugins and RETRIEVAL both reach it downward;
this old path re-exports its names, the same objects.
"""

from __future__ import annotations

from ditto_worker.memory.search.settings import (
    ContextSettings,
    FusionSettings,
    MentionSettings,
    MicroBatchSettings,
    RetrievalConfig,
)

__all__ = [
    "ContextSettings",
    "FusionSettings",
    "MentionSettings",
    "MicroBatchSettings",
    "RetrievalConfig",
]
