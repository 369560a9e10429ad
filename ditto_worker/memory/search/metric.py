"""The ``options.metric`` of a vector search: what native search and the pipeline both check.

Kept apart so the native-search kit (:mod:`ditto_worker.memory.native`) and the pipeline
(:mod:`.pipeline`) both reach it downward, with no import circle between them.
"""

from __future__ import annotations

from typing import Final

from ditto_worker.contracts import MemorySearchInput
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = ["VECTOR_OPTIONS", "check_metric"]

VECTOR_OPTIONS: Final = frozenset({"metric"})
"""SEARCH ``options`` a store with vectors reads: ``metric`` — the seed's
``options: {metric: "COSINE"}``; native vector search ranks by cosine similarity, so
``"COSINE"`` (any case) is accepted for ``vector`` and ``hybrid`` and anything else is
``INVALID_INPUT`` naming ``options.metric``. Declare it in ``search_options``."""


def check_metric(input: MemorySearchInput, strategy: str) -> None:
    """``options.metric`` (:data:`VECTOR_OPTIONS`): cosine, for a vector strategy only.

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``options.metric``.
    """
    options = input.options or {}
    if "metric" not in options:
        return
    metric = options["metric"]
    if strategy not in ("vector", "hybrid"):
        raise MemoryError(
            ErrorCode.INVALID_INPUT, "Invalid input: options.metric applies to vector search"
        )
    if not isinstance(metric, str) or metric.upper() != "COSINE":
        raise MemoryError(
            ErrorCode.INVALID_INPUT,
            "Invalid input: options.metric: this store ranks vectors by COSINE only",
        )
