"""Request and response models of the six MEMORY operations, and ``NodeResult``.

Data only, no I/O. Field names on the wire are the seed's camelCase (``executionId``,
``nextCursor``, ``orderBy``); Python attributes are snake_case (SPEC.md "Python mapping").
Validation is strict (MEM-PY-4): ``limit: true`` or ``"10"`` is not an integer, and
``content: null`` is a real value that serialization keeps.

Serialize with :func:`to_wire` (or ``model_dump(mode="json", by_alias=True)``): optional
fields that were never set are omitted, ``content`` is always present. The wire base (the
strict camelCase model, the Unicode and JSON checks, :func:`to_wire`) is
:mod:`ditto_worker.wire`; its names are re-exported here.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
)

from ditto_worker.wire import (
    LONE_SURROGATE,
    MAX_JSON_DEPTH,
    ValidTextModel,
    check_json,
    check_text,
    to_wire,
    trusted,
)
from ditto_worker.wire import JsonData as JsonData
from ditto_worker.wire import JsonObject as JsonObject
from ditto_worker.wire import _SetContentWire as _SetContentWire
from ditto_worker.wire import _Wire as _Wire

__all__ = [
    "FLEET_QUEUES",
    "LONE_SURROGATE",
    "MAX_JSON_DEPTH",
    "MAX_LIMIT",
    "NODE_IDS",
    "NODE_QUEUES",
    "RETRIEVAL_EMBED",
    "RETRIEVAL_SEARCH",
    "ErrorInfo",
    "Identifier",
    "Limit",
    "MemoryDefaults",
    "MemoryDeleteInput",
    "MemoryDeleteOutput",
    "MemoryDraft",
    "MemoryGetInput",
    "MemoryItem",
    "MemoryQueryInput",
    "MemoryQueryOutput",
    "MemorySearchInput",
    "MemorySearchResult",
    "MemoryUpdateEntry",
    "MemoryUpdateInput",
    "MemoryWriteInput",
    "NodeId",
    "NodeResult",
    "NodeStatus",
    "OrderBy",
    "RetrievalSearchInput",
    "RetrievalTarget",
    "ValidTextModel",
    "any_result",
    "check_json",
    "check_text",
    "to_wire",
    "trusted",
]

MAX_LIMIT = 10_000
"""Largest ``limit`` accepted anywhere (MEM-ERR-1)."""

NodeId = Literal[
    "MEMORY.GET",
    "MEMORY.QUERY",
    "MEMORY.SEARCH",
    "MEMORY.WRITE",
    "MEMORY.UPDATE",
    "MEMORY.DELETE",
]

NODE_QUEUES: dict[str, str] = {
    "MEMORY.GET": "memory.get",
    "MEMORY.QUERY": "memory.query",
    "MEMORY.SEARCH": "memory.search",
    "MEMORY.WRITE": "memory.write",
    "MEMORY.UPDATE": "memory.update",
    "MEMORY.DELETE": "memory.delete",
}
"""Node id -> its dedicated Celery queue (SPEC.md "Python mapping")."""

NODE_IDS: tuple[str, ...] = tuple(NODE_QUEUES)
"""The six MEMORY node ids, in the seed's order."""

RETRIEVAL_SEARCH = "RETRIEVAL.SEARCH"
"""The retrieval node id: the embedding + search pipeline on its own queue (MEM-RET-1)."""

RETRIEVAL_EMBED = "RETRIEVAL.EMBED"
"""The retrieval worker's embedding model as a node (``POST /v1/embeddings`` on serve)."""

FLEET_QUEUES: dict[str, str] = {**NODE_QUEUES, RETRIEVAL_SEARCH: "retrieval.search",
                                RETRIEVAL_EMBED: "retrieval.embed"}  # fmt: skip
"""Every node id of the fleet -> its dedicated Celery queue."""

Identifier = Annotated[str, Field(min_length=1, description="A non-empty id or key (MEM-DATA-1).")]
_Timestamp = Annotated[
    str, Field(min_length=20, max_length=40, description="An RFC 3339 UTC date-time (MEM-DATA-5).")
]
Limit = Annotated[
    int,
    Field(ge=1, le=MAX_LIMIT, description="Number of items, an integer 1-10000 (MEM-ERR-1)."),
]
# --- MEM-DATA ---------------------------------------------------------------------------


class MemoryDraft(_Wire):
    """A memory to create (MEM-DATA-1): like ``MemoryItem`` without ``id``."""

    key: Identifier | None = Field(
        default=None, description="Optional stable key, unique within the store's scope."
    )
    content: JsonData = Field(
        description="Any JSON value, ``null`` included; never coerced (MEM-DATA-4)."
    )
    metadata: JsonObject | None = Field(
        default=None, description="Optional JSON object; filterable by QUERY/SEARCH."
    )


class MemoryItem(_Wire):
    """A stored memory (MEM-DATA-1)."""

    id: Identifier = Field(description="Store-assigned id, a non-empty string.")
    key: Identifier | None = Field(default=None, description="The record's key, if it has one.")
    content: JsonData = Field(description="Any JSON value, ``null`` included (MEM-DATA-4).")
    metadata: JsonObject | None = Field(default=None, description="Optional JSON object.")
    operation_id: Annotated[str, Field(min_length=1, max_length=256)] | None = Field(
        default=None,
        description="The operation id of the WRITE or UPDATE that produced the record's "
        "current state, when that call carried one (MEM-RUN-7; omitted otherwise). Set by "
        "the store, never by an input; a task reads it with GET to tell whether its "
        "operation already happened.",
    )
    created_at: _Timestamp | None = Field(
        default=None,
        description="When the record was written, RFC 3339 in UTC "
        "(``YYYY-MM-DDTHH:MM:SS.ffffffZ``, e.g. ``2026-05-01T12:00:00.250000Z``: millisecond "
        "precision or finer). Set by the store, never by an input; never changes "
        "(MEM-DATA-5). Omitted by a store that keeps no timestamps.",
    )
    updated_at: _Timestamp | None = Field(
        default=None,
        description="When the record last changed (its WRITE, then each UPDATE), same form "
        "as ``createdAt`` and never before it. Set by the store, never by an input "
        "(MEM-DATA-5). Omitted by a store that keeps no timestamps.",
    )


class MemorySearchResult(_Wire):
    """One SEARCH hit (MEM-DATA-2)."""

    memory: MemoryItem = Field(description="The full record.")
    score: float | None = Field(
        default=None,
        description="Optional finite relevance score; its scale and direction are the "
        "provider's (documented per plugin).",
    )
    metadata: JsonObject | None = Field(
        default=None, description="Optional retrieval metadata (e.g. strategy, rank)."
    )

    @field_validator("score", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("score must be a finite number")
        return value


# --- Inputs (MEM-GET … MEM-DELETE) ------------------------------------------------------


class MemoryGetInput(_Wire):
    """MEMORY.GET input: exact reads by ids and/or keys, union (MEM-GET-1)."""

    ids: list[Identifier] | None = Field(default=None, description="Ids to read.")
    keys: list[Identifier] | None = Field(default=None, description="Keys to read.")


class OrderBy(_Wire):
    """One sort term of QUERY (MEM-QUERY-1)."""

    field: Annotated[str, Field(min_length=1)] = Field(
        description="A metadata field (dots reach nested keys) or id/key/createdAt/updatedAt."
    )
    direction: Literal["asc", "desc"] = Field(default="asc", description="Sort direction.")


class MemoryQueryInput(_Wire):
    """MEMORY.QUERY input: structured, deterministic listing with keyset paging."""

    filter: JsonObject | None = Field(
        default=None, description="The store's filter language; passed through (MEM-QUERY-1)."
    )
    order_by: list[OrderBy] | None = Field(default=None, description="Sort terms, in order.")
    limit: Limit | None = Field(
        default=None, description="Page size; default from MEM-CONF-2 (built-in 100)."
    )
    cursor: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="Opaque token from a previous page's ``nextCursor``."
    )


class MemorySearchInput(_Wire):
    """MEMORY.SEARCH input (MEM-SEARCH-1/2)."""

    query: JsonData = Field(
        description="Text, vector or object; required, validated by the plugin."
    )
    strategy: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="Algorithm name (keyword, vector, hybrid, …)."
    )
    filter: JsonObject | None = Field(default=None, description="Filter applied to candidates.")
    limit: Limit | None = Field(
        default=None, description="At most this many results; default 10 (MEM-CONF-1)."
    )
    options: JsonObject | None = Field(default=None, description="Plugin-specific options.")


class RetrievalTarget(_Wire):
    """What a RETRIEVAL.SEARCH searches: a target configured on the retrieval worker."""

    name: Annotated[str, Field(min_length=1)] = Field(
        description="Target name (``workers.retrieval.targets.<name>`` in ditto.yaml)."
    )


class RetrievalSearchInput(MemorySearchInput):
    """RETRIEVAL.SEARCH input: a MEMORY.SEARCH input plus its fixed ``target`` (MEM-RET-3)."""

    target: RetrievalTarget = Field(description="The retrieval target to search.")


class MemoryWriteInput(_Wire):
    """MEMORY.WRITE input: records to create, in order (MEM-WRITE-1)."""

    memories: list[MemoryDraft] = Field(description="Drafts; ids are assigned by the store.")


class MemoryUpdateEntry(_SetContentWire):
    """One partial update by id (MEM-UPDATE-1). Presence, not truthiness, decides."""

    id: Identifier = Field(description="Target record id; must exist (MEM-UPDATE-2).")
    content: JsonData = Field(default=None, description="New content if present (``null`` counts).")
    metadata: JsonObject | None = Field(
        default=None, description="Replaces the whole metadata object if present; ``{}`` clears."
    )
    if_metadata: JsonObject | None = Field(
        default=None,
        description="Conditional update (MEM-UPDATE-5): apply the entry only if the stored "
        "metadata has each of these top-level fields with an equal JSON value (a missing "
        "field never matches); checked atomically with the write, else CONFLICT and "
        "nothing of the batch is written. A store that cannot check it atomically answers "
        "UNSUPPORTED (capability conditional_update). At least one field.",
    )

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_object(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("metadata must be an object when present ({} clears it)")
        return value

    @field_validator("if_metadata", mode="before")
    @classmethod
    def _condition_object(cls, value: Any) -> Any:
        if value is None or (isinstance(value, dict) and not value):
            raise ValueError("ifMetadata must be an object naming at least one field")
        return value

    @property
    def has_content(self) -> bool:
        """True when ``content`` was given (even as ``null``)."""
        return "content" in self.model_fields_set

    @property
    def has_metadata(self) -> bool:
        """True when ``metadata`` was given."""
        return "metadata" in self.model_fields_set


class MemoryUpdateInput(_Wire):
    """MEMORY.UPDATE input."""

    memories: list[MemoryUpdateEntry] = Field(description="Entries with distinct ids.")


class MemoryDeleteInput(_Wire):
    """MEMORY.DELETE input."""

    ids: list[Identifier] = Field(description="Ids to delete; duplicates are removed.")


# --- Raw outputs (MEM-NODE-1) -----------------------------------------------------------


class MemoryQueryOutput(_Wire):
    """MEMORY.QUERY output: at most ``limit`` items; ``nextCursor`` absent on the last page."""

    items: list[MemoryItem] = Field(description="The page, in the requested order.")
    next_cursor: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="Token for the next page; omitted on the last page."
    )


class MemoryDeleteOutput(_Wire):
    """MEMORY.DELETE output: ids actually deleted by this call (MEM-DELETE-2)."""

    deleted: list[Identifier] = Field(description="Distinct requested ids deleted now.")


class MemoryDefaults(_Wire):
    """Default limits (MEM-CONF-1/2). ``None`` means "fall through to the next layer"."""

    query_limit: Limit | None = Field(default=None, description="Default QUERY limit.")
    search_limit: Limit | None = Field(default=None, description="Default SEARCH limit.")


# --- NodeResult (MEM-DATA-3) ------------------------------------------------------------

NodeStatus = Literal["success", "failed", "cancelled", "timeout"]
OutputT = TypeVar("OutputT")


class ErrorInfo(_Wire):
    """The error of a non-successful NodeResult."""

    code: Annotated[str, Field(min_length=1)] = Field(description="An ErrorCode or plugin code.")
    message: str = Field(description="Safe message: no credentials, URLs, SQL or driver text.")


class NodeResult(_Wire, Generic[OutputT]):
    """The envelope of every node call (MEM-DATA-3).

    ``output`` is set only when ``status`` is ``success``; ``error`` otherwise. A failed
    result is never to be consumed as an empty result.
    """

    model_config = ConfigDict(strict=False)

    execution_id: Annotated[str, Field(min_length=1)] = Field(
        description="The call's execution id (the Celery task id on the fleet)."
    )
    node: str = Field(description="The node id, e.g. ``MEMORY.GET``.")
    status: NodeStatus = Field(description="success | failed | cancelled | timeout.")
    output: OutputT | None = Field(default=None, description="The raw output on success.")
    error: ErrorInfo | None = Field(default=None, description="Set when status is not success.")

    @classmethod
    def failure(
        cls, execution_id: str, node: str, code: str, message: str, status: NodeStatus = "failed"
    ) -> NodeResult[Any]:
        """Build a non-successful result."""
        return any_result()(
            execution_id=execution_id,
            node=node,
            status=status,
            error=ErrorInfo(code=code, message=message),
        )


@functools.cache
def any_result() -> type[NodeResult[Any]]:
    """``NodeResult[Any]``, made once and held here: pydantic keeps its parametrised classes
    only weakly, so after a garbage collection ``NodeResult[Any](...)`` rebuilds the class
    and its schema (about 10 ms, on every collection of a busy worker)."""
    return NodeResult[Any]
