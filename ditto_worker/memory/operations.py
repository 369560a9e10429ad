"""The plugin kit for operation ids and conditional updates (SPEC.md MEM-RUN-7, MEM-UPDATE-5).

Operation ids (:mod:`ditto_worker.operation`): a store that declares
``capabilities.operation_ids`` applies a WRITE, UPDATE or DELETE carrying
``options.operation_id`` at most once per namespace:

* it keeps a ledger row ``(namespace, operation id) -> (node, digest, output)`` written in
  the mutation's own commit, kept for as long as the store keeps it (no expiry: unlike
  the 24 h execution-id rows, a task may resume days later); a replay of the same node
  with the same input (same :func:`input_digest`) applies nothing and returns the
  committed output; another node or another input under the same id is ``CONFLICT``,
  nothing applied;
* it keeps the id **with the records** it wrote: a WRITE's and an UPDATE's records carry
  ``operationId`` (the operation that produced their current state; a later mutation
  without an id clears it) for as long as they exist, so GET tells whether the effect
  happened;
* a failed mutation records nothing: the id may be used again.

Conditional updates: a store that declares ``capabilities.conditional_update`` applies
an UPDATE entry with ``ifMetadata`` only when :func:`metadata_holds`, checked atomically
with the write, and otherwise raises :func:`condition_failed` (``CONFLICT``) with nothing
of the batch written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ditto_worker.contracts import to_wire
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "Operation",
    "check_replay",
    "condition_failed",
    "input_digest",
    "json_equal",
    "metadata_holds",
    "operation_of",
]


@dataclass(frozen=True)
class Operation:
    """One mutation's operation: the caller's id, the node and the digest of its input.

    Attributes:
        id: the operation id (1-256 characters, :func:`ditto_worker.operation.check_operation_id`).
        node: ``MEMORY.WRITE`` | ``MEMORY.UPDATE`` | ``MEMORY.DELETE``.
        digest: :func:`input_digest` of the validated input, 64 hex characters.
    """

    id: str
    node: str
    digest: str


def input_digest(node: str, input: BaseModel) -> str:
    """SHA-256 (hex) of ``node`` and the input's canonical wire JSON (sorted keys, no
    spaces): two calls have the same digest iff they ask for the same effect."""
    text = json.dumps(
        [node, to_wire(input)], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def operation_of(options: Any, node: str, input: BaseModel) -> Operation | None:
    """The :class:`Operation` of a mutation call, or ``None`` when ``options`` (a
    ``MemoryCallOptions`` or ``None``) carries no ``operation_id``."""
    operation_id = getattr(options, "operation_id", None)
    if not operation_id:
        return None
    return Operation(str(operation_id), node, input_digest(node, input))


def check_replay(operation: Operation, node: str, digest: str) -> None:
    """Accept a ledger row ``(node, digest)`` found for ``operation`` as its replay.

    Raises:
        MemoryError: ``CONFLICT`` when the row was written by another node or for
            another input (MEM-RUN-7: "not the old result"); nothing is applied.
    """
    if node != operation.node:
        raise MemoryError(
            ErrorCode.CONFLICT,
            f"this operation id was already used by {node}; nothing was applied",
        )
    if digest != operation.digest:
        raise MemoryError(
            ErrorCode.CONFLICT,
            "this operation id was already used with another input; nothing was applied",
        )


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values with JSON's types: ``true`` is not ``1``, ``1`` equals
    ``1.0`` (one number type), objects compare key by key, arrays in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def metadata_holds(metadata: Mapping[str, Any] | None, expected: Mapping[str, Any]) -> bool:
    """True when the stored ``metadata`` has every top-level field of ``expected`` with an
    equal value (:func:`json_equal`); a missing field never matches, not even ``null``."""
    stored = metadata or {}
    return all(name in stored and json_equal(stored[name], v) for name, v in expected.items())


def condition_failed(index: int) -> MemoryError:
    """The ``CONFLICT`` of an UPDATE entry whose ``ifMetadata`` does not hold."""
    return MemoryError(
        ErrorCode.CONFLICT,
        f"memories[{index}].ifMetadata does not hold for the stored record; nothing was updated",
    )
