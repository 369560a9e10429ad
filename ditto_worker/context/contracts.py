"""Request and response models of the CONTEXT nodes (SPEC.md MEM-CTX-1/2).

Data only, no I/O. Wire names are the seed's camelCase (``sourceNode``, ``ttlS``), like
:mod:`ditto_worker.contracts`; validation is strict (MEM-PY-4): ``content`` must be a
string, ``ttlS: "60"`` or ``true`` is not a number.

``CONTEXT.UPDATE`` has two modes, told apart by the input's keys:

* pure (MEM-CTX-1): ``{context: {items}, ingress}`` -> ``{items}``, nothing stored;
* cache (MEM-CTX-2): ``{name, ingress, ttlS?}`` -> ``{items, version}``, kept under the
  call's trusted scope; ``CONTEXT.LOAD {name}`` -> ``{found, items, version}``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from ditto_worker.contracts import Identifier, JsonObject, _Wire

__all__ = [
    "MAX_NAME_CHARS",
    "ContextCacheUpdateInput",
    "ContextCacheUpdateOutput",
    "ContextItem",
    "ContextLoadInput",
    "ContextLoadOutput",
    "ContextName",
    "ContextState",
    "ContextUpdateInput",
    "ContextUpdateOutput",
]

MAX_NAME_CHARS = 256
"""Most characters in a cached context's ``name`` (as a scope part: ``MAX_SCOPE_PART``)."""

ContextName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="The cached context's name within the trusted scope, 1-256 characters; "
        "percent-encoded into the key <tenant>:<user>:context:<name> (MEM-CTX-2).",
    ),
]


class ContextItem(_Wire):
    """One piece of working context (MEM-CTX-1; the seed's ``memoryToContext`` ingress).

    Its size is the UTF-8 length of its compact wire JSON
    (``model_dump_json(by_alias=True)``), bounded by ``workers.context.maxItemBytes``.
    """

    id: Identifier = Field(
        description="Non-empty id, unique within a context; an ingress item with the id of "
        "an existing item replaces it in place (e.g. ``memory:<memoryId>``)."
    )
    source_node: Annotated[str, Field(min_length=1)] = Field(
        description="The node the content came from, e.g. ``MEMORY.SEARCH``."
    )
    content: str = Field(
        description="The text handed to a model; the caller maps non-text memory content "
        "to a string itself (the seed: ``JSON.stringify``)."
    )
    metadata: JsonObject | None = Field(
        default=None,
        description="Optional JSON object (e.g. ``{memoryId, relevance}``); kept as given.",
    )


def _distinct_ids(items: list[ContextItem]) -> list[ContextItem]:
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item.id in seen:
            raise ValueError(f"items[{index}].id repeats an earlier item's id")
        seen.add(item.id)
    return items


class ContextState(_Wire):
    """A whole context: its items in order, ids distinct."""

    items: list[ContextItem] = Field(description="The items, in context order; ids distinct.")

    @field_validator("items")
    @classmethod
    def _distinct(cls, items: list[ContextItem]) -> list[ContextItem]:
        return _distinct_ids(items)


class ContextUpdateInput(_Wire):
    """``CONTEXT.UPDATE`` in pure mode (MEM-CTX-1): merge ``ingress`` into ``context``."""

    context: ContextState = Field(description="The current context, ``{items}``.")
    ingress: list[ContextItem] = Field(
        description="Items to merge, applied in order: an id already present is replaced "
        "in place, a new id is appended; a repeated id within the ingress ends as its last "
        "occurrence, at the place of its first."
    )


class ContextCacheUpdateInput(_Wire):
    """``CONTEXT.UPDATE`` in cache mode (MEM-CTX-2): merge ``ingress`` into the cached
    context ``name`` of the call's trusted scope (created empty when missing or expired)."""

    name: ContextName
    ingress: list[ContextItem] = Field(
        description="Items to merge, with the pure mode's rules (``ContextUpdateInput``)."
    )
    ttl_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds the context lives after this update; default "
        "``workers.context.ttlS`` (3600), at most ``workers.context.maxTtlS`` (86400).",
    )


class ContextLoadInput(_Wire):
    """``CONTEXT.LOAD`` (MEM-CTX-2): read the cached context ``name`` of the trusted scope."""

    name: ContextName


class ContextUpdateOutput(_Wire):
    """Pure-mode ``CONTEXT.UPDATE`` output: the merged context."""

    items: list[ContextItem] = Field(description="The merged items, in context order.")


class ContextCacheUpdateOutput(_Wire):
    """Cache-mode ``CONTEXT.UPDATE`` output: the context as this update left it."""

    items: list[ContextItem] = Field(description="The merged items, in context order.")
    version: Annotated[int, Field(ge=1)] = Field(
        description="Updates applied to this context since it was created (this one "
        "included): 1 for a new or expired context, +1 per update."
    )


class ContextLoadOutput(_Wire):
    """``CONTEXT.LOAD`` output. ``found: false`` (never created, or expired): restore the
    context from long-term memory (MEM-CTX-2); ``items`` is then ``[]`` and ``version`` 0."""

    found: bool = Field(description="True when the context exists (not expired).")
    items: list[ContextItem] = Field(description="The items, in context order.")
    version: Annotated[int, Field(ge=0)] = Field(
        description="The context's version (0 when not found)."
    )

    @classmethod
    def missing(cls) -> ContextLoadOutput:
        """The answer for a context that does not exist."""
        return cls(found=False, items=[], version=0)
