"""Points of the Qdrant store: ids, payload items, order, chunks, the update plan, the clock.

Small helpers the store's reading and writing halves share (:mod:`.reads`, :mod:`.writes`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ditto_plugin_qdrant import executions as ex
from ditto_plugin_qdrant.payload import CREATED
from ditto_worker.contracts import MemoryItem
from ditto_worker.dockit import Clock
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingIdentity

__all__ = [
    "CHUNK",
    "Clock",
    "Point",
    "UpdatePlan",
    "check_json",
    "chunks",
    "dense_name",
    "item_of",
    "point_id",
    "tiebreak",
]

CHUNK: Final = 256
"""Points per upsert/delete/retrieve request."""
Point = Any  # a qdrant Record or ScoredPoint (id, payload, vector, score)


def chunks(values: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    """``values`` in slices of at most ``size``."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


def point_id(memory_id: str) -> str | None:
    """``memory_id`` when it is a point id this store could have issued (a canonical
    UUID string), else ``None`` (such an id is never found)."""
    try:
        return memory_id if str(uuid.UUID(memory_id)) == memory_id else None
    except ValueError:
        return None


def item_of(payload: dict[str, Any]) -> MemoryItem:
    """The MemoryItem a memory point's payload holds."""
    return MemoryItem(
        id=payload["id"],
        key=payload.get("key"),
        content=payload.get("content"),
        metadata=payload.get("metadata"),
        operation_id=payload.get("op"),
        created_at=payload.get("createdAt"),
        updated_at=payload.get("updatedAt"),
    )


def tiebreak(point: Point) -> tuple[int, str]:
    """The order of points equal in score or sort value: (sequence, id)."""
    return (int(point.payload[CREATED]), str(point.id))


def check_json(value: Any, where: str) -> None:
    """``INVALID_INPUT`` naming ``where`` when ``value`` is not JSON (NaN included)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{where} is not valid JSON") from exc


@dataclass
class UpdatePlan:
    """One entry of an UPDATE: the stored point and what it becomes."""

    point: Point
    vectors: dict[str, Any]
    content: Any
    metadata: Any
    embed: bool

    def set_dense(self, name: str | None, vector: list[float] | None) -> None:
        """Use the fresh dense ``vector`` (``None``: the content has no text: none)."""
        if name is not None:
            self.vectors.pop(name, None)
            if vector is not None:
                self.vectors[name] = vector


def dense_name(identity: EmbeddingIdentity) -> str:
    """The named dense vector of an identity: ``dense-`` + 12 hex digits of its hash."""
    digest = uuid.uuid5(ex.ID_NAMESPACE, identity.to_json()).hex[:12]
    return f"dense-{digest}"
