"""``RetrievalConfig``: the settings of one retrieval pipeline (typed, frozen, camelCase).

Source: ``workers.retrieval.targets.<name>.pipeline`` (the RETRIEVAL worker) or
``plugins.sqlite.hybrid`` (the SQLite store's native ``hybrid``) in ``ditto.yaml``; unknown
keys are errors. Every default is general (no dataset names a field); the LoCoMo
measurements of :mod:`ditto_worker.cli.eval` show what each option does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ditto_worker.errors import ConfigError

__all__ = [
    "ContextSettings",
    "FusionSettings",
    "MentionSettings",
    "MicroBatchSettings",
    "RetrievalConfig",
]


class _Settings(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


class FusionSettings(_Settings):
    """``fusion:`` — how candidate lists become one score (:mod:`.fusion`)."""

    method: Literal["weighted", "rrf", "dbsf"] = Field(
        default="weighted",
        description="weighted: min-max scores, convex combination; rrf; dbsf: scores "
        "calibrated per query by their list's mean and deviation, then combined.",
    )
    weights: dict[str, float] = Field(
        default_factory=lambda: {"keyword": 0.7, "vector": 0.3},
        description="Strategy -> weight (>= 0), scaled to sum 1. Default: plain weighted "
        "fusion (no mention, no context) chosen leave-one-out on LoCoMo 30.json / 26.json "
        "(issue 28 item 7: each fold's choice beat plain RRF on the held-out file; "
        "docs/retrieval.md).",
    )
    rrf_k: int = Field(default=60, ge=0, description="RRF constant k (Cormack et al. 2009).")


class MentionSettings(_Settings):
    """``mention:`` — boost memories whose metadata value is named in the query.

    A memory gets ``+weight`` when the value of one of ``fields`` (a string, compared as
    lower-cased words) occurs in the query, e.g. ``fields: [speaker]``: "What did Jon
    say…" favours Jon's memories. Off when ``fields`` is empty.
    """

    fields: list[str] = Field(default_factory=list, description="Metadata fields (top level).")
    weight: float = Field(default=0.1, ge=0, description="Added to the fused score (0-1 scale).")
    strip_from_vector_query: bool = Field(
        default=True,
        description="Embed the query without the mentioned values (found in the keyword "
        "candidates' metadata); they are scored by this boost instead.",
    )
    strip_from_keyword_query: bool = Field(
        default=True,
        description="hybrid: search keywords again without the mentioned values (found in "
        "the first keyword search's candidates); they are scored by this boost instead "
        "(issue 28 item 7: a conversation's turns name the other speaker).",
    )


class ContextSettings(_Settings):
    """``context:`` — score a memory together with its neighbours in the same group.

    Memories whose metadata has ``groupField`` (e.g. a conversation session) and a
    numeric ``orderField`` (e.g. the turn number) get ``+neighbourWeight × max fused score
    of the memories of the same group within ±window`` and ``+groupWeight × mean of the
    groupTop best fused scores of the group``. Neighbours of the ``expand`` best
    candidates that no strategy returned are fetched (one QUERY) and can be returned
    themselves (their own fused score is 0). With ``groupPenalty`` > 0 the results are
    then taken best first, each scoring ``groupPenalty × (results already taken from its
    group)`` less (so a question whose answer spans sessions is not filled by one).
    Off when ``groupField`` is unset.
    """

    group_field: str | None = Field(default=None, description="Metadata field of the group.")
    order_field: str | None = Field(
        default=None, description="Numeric metadata field ordering memories in a group."
    )
    window: int = Field(default=2, ge=0, le=20, description="Neighbours on each side.")
    neighbour_weight: float = Field(default=0.7, ge=0, description="Weight of neighbours.")
    group_weight: float = Field(default=0.3, ge=0, description="Weight of the group score.")
    group_top: int = Field(default=3, ge=1, description="Best members averaged per group.")
    expand: int = Field(
        default=20, ge=0, le=200, description="Best candidates whose neighbours are fetched."
    )
    group_penalty: float = Field(
        default=0.0,
        ge=0,
        description="Diversity across groups: each further result from a group already "
        "among the results scores this much less per result taken from it (0: off).",
    )

    @model_validator(mode="after")
    def _fields_together(self) -> ContextSettings:
        if (self.group_field is None) != (self.order_field is None):
            raise ValueError("context needs both groupField and orderField (or neither)")
        return self


class MicroBatchSettings(_Settings):
    """``microBatch:`` — how the RETRIEVAL worker batches concurrent query embeddings."""

    max_batch_size: int = Field(default=64, ge=1, description="Most texts in one batch.")
    max_wait_ms: float = Field(default=2.0, ge=0, le=1000, description="Batch window, ms.")


class RetrievalConfig(_Settings):
    """The pipeline: embed the query → candidates per strategy → fusion → mention and
    context scoring → optional rerank → the best ``limit``."""

    strategy: Literal["keyword", "vector", "hybrid"] = Field(
        default="hybrid", description="Strategy of a request that names none."
    )
    candidates: int = Field(
        default=100, ge=1, le=10_000, description="Candidates per strategy before fusion."
    )
    keyword_strategy: str = Field(
        default="keyword", description="The store's strategy name for keyword search."
    )
    vector_strategy: str = Field(
        default="vector", description="The store's strategy name for vector search."
    )
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    mention: MentionSettings = Field(default_factory=MentionSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    rerank_depth: int = Field(
        default=50, ge=1, le=10_000, description="How many fused results a reranker sees."
    )
    embedding: Literal["store", "local", "http"] = Field(
        default="store",
        description="Query embedder of a RETRIEVAL target: the store's own provider "
        "(store), or a new local / http one (must have the store's identity).",
    )
    micro_batch: MicroBatchSettings = Field(default_factory=MicroBatchSettings)

    @classmethod
    def parse(cls, value: RetrievalConfig | Mapping[str, Any] | None) -> RetrievalConfig:
        """A config from itself, a mapping (camelCase or snake_case keys) or ``None``.

        Raises:
            ConfigError: an unknown key or a bad value.
        """
        if isinstance(value, RetrievalConfig):
            return value
        try:
            return cls.model_validate(dict(value or {}))
        except ValidationError as exc:
            raise ConfigError(f"invalid retrieval pipeline settings: {exc}") from exc
