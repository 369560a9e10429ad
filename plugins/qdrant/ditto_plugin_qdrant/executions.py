"""Exactly-once WRITE/UPDATE/DELETE by execution id on Qdrant (issue 18; seed: "no
duplicated write, no double version bump" after a crash and retry).

Qdrant has no transaction: an upsert commits point by point, and nothing ties the points
of a batch to a record of the call. Exactly-once is built from two things instead:

* **Deterministic point ids.** A WRITE with an execution id gives its ``i``-th draft the
  id ``uuid5(<namespace> NUL <execution id> NUL <i>)``, so a redelivered copy writes the
  *same* points again (an upsert), never new ones; the key check ignores points that are
  the call's own.
* **An execution record written last.** After the mutation's last point, a point
  ``uuid5("execution" NUL <namespace> NUL <execution id>)`` (no vectors, ``rec:
  "execution"``, ``ns: "!exec:<namespace>"`` so no memory filter ever sees it) stores the
  node and the raw output. A redelivered or re-sent call finds
  it, applies nothing and returns that output (the same ids, the records as they were
  then). A DELETE writes the record (``state: "pending"``, the ids it found) *before*
  deleting, and marks it done after: a copy that finds a pending record deletes those
  ids again and returns the same list.

What this does not give (declared as ``partial_commit``): a call that fails or is killed
part-way leaves the points already sent; the retry with the same execution id completes
the batch. A retried UPDATE whose first run died before its record re-applies its values
(the same values: no change unless another call wrote in between). Records older than
``executionRetentionS`` are pruned (at most once every :data:`PRUNE_INTERVAL_S` per store
object); an id replayed after that is treated as new. The same id used by another node is
``CONFLICT``, nothing applied. Ids are per namespace (tenant scope).

Operation ids (SPEC.md MEM-RUN-7, :mod:`ditto_worker.memory.operations`) use the same
two things: a WRITE with an operation id takes its point ids from it
(:func:`operation_point_id`), and an **operation record** (``rec: "operation"``, id
:func:`operation_record_id`, the node, the input digest, the output and ``at``, the
retention's clock) is written last (a DELETE's first, pending). A replay with the same
input returns the output; another node or input is ``CONFLICT``; a replay after
``operationRetentionS`` is ``OPERATION_EXPIRED``, and records older than twice that are
pruned (:mod:`ditto_worker.memory.retention`, :mod:`ditto_plugin_qdrant.retention`).
Memory points carry the id in ``op``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Final

from qdrant_client import models

from ditto_plugin_qdrant.payload import EXECUTION, execution_namespace
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import Operation, check_replay
from ditto_worker.memory.retention import LedgerRetention, operation_expired

__all__ = [
    "DEFAULT_RETENTION_S",
    "OPERATION",
    "ID_NAMESPACE",
    "PRUNE_INTERVAL_S",
    "Replay",
    "expired_filter",
    "memory_point_id",
    "operation_point_id",
    "operation_record",
    "operation_record_id",
    "operation_replay",
    "record_point",
    "record_point_id",
    "replay_of",
]

DEFAULT_RETENTION_S: Final = 24 * 3600.0
"""How long an execution record is kept, seconds."""
PRUNE_INTERVAL_S: Final = 600.0
"""Least time between two prunes by one store object, seconds."""
ID_NAMESPACE: Final = uuid.UUID("8d2f6f0e-2a4b-5c1e-9f3a-6b7c8d9e0f1a")
"""The uuid5 namespace of every deterministic point id of this plugin."""


def memory_point_id(namespace: str, execution_id: str, index: int) -> str:
    """The id of the ``index``-th memory written by ``execution_id`` in ``namespace``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"{namespace}\x00{execution_id}\x00{index}"))


def record_point_id(namespace: str, execution_id: str) -> str:
    """The id of the execution record of ``execution_id`` in ``namespace``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"execution\x00{namespace}\x00{execution_id}"))


OPERATION: Final = "operation"
"""``rec`` of an operation record (pruned after twice ``operationRetentionS``)."""


def operation_point_id(namespace: str, operation_id: str, index: int) -> str:
    """The id of the ``index``-th memory written by operation ``operation_id``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"operation\x00{namespace}\x00{operation_id}\x00{index}"))


def operation_record_id(namespace: str, operation_id: str) -> str:
    """The id of the operation record of ``operation_id`` in ``namespace``."""
    return str(uuid.uuid5(ID_NAMESPACE, f"operation-record\x00{namespace}\x00{operation_id}"))


class Replay:
    """A committed (or, for DELETE, pending) run found for an execution id."""

    def __init__(self, output: Any, pending: bool) -> None:
        self.output = output
        self.pending = pending


def replay_of(payload: dict[str, Any] | None, namespace: str, node: str) -> Replay | None:
    """The earlier run recorded in ``payload`` (a record point's), or ``None``.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node.
    """
    if payload is None or payload.get("rec") != EXECUTION:
        return None
    if payload.get("ns") != execution_namespace(namespace):
        return None
    if payload.get("node") != node:
        raise MemoryError(
            ErrorCode.CONFLICT,
            f"this execution id was already used by {payload.get('node')}; nothing was applied",
        )
    return Replay(json.loads(payload["output"]), payload.get("state") == "pending")


def record_point(
    namespace: str, execution_id: str, node: str, output: Any, pending: bool = False
) -> models.PointStruct:
    """The execution record of a run (no vectors)."""
    return models.PointStruct(
        id=record_point_id(namespace, execution_id),
        vector={},
        payload={
            "rec": EXECUTION,
            "ns": execution_namespace(namespace),
            "node": node,
            "state": "pending" if pending else "done",
            "output": json.dumps(output, separators=(",", ":")),
            "at": time.time(),
        },
    )


def expired_filter(
    retention_s: float, rec: str = EXECUTION, now: float | None = None
) -> models.Filter:
    """Records of kind ``rec`` made more than ``retention_s`` before ``now`` (epoch s;
    default: the time now)."""
    before = (time.time() if now is None else now) - retention_s
    return models.Filter(
        must=[
            models.FieldCondition(key="rec", match=models.MatchValue(value=rec)),
            models.FieldCondition(key="at", range=models.Range(lt=before)),
        ]
    )


def operation_replay(
    payload: dict[str, Any] | None, namespace: str, op: Operation,
    retention: LedgerRetention | None = None,
) -> Replay | None:  # fmt: skip
    """The earlier run of ``op`` recorded in ``payload`` (an operation record's), or ``None``.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node or input;
            ``OPERATION_EXPIRED`` when the record is older than ``retention``'s window.
    """
    if payload is None or payload.get("rec") != OPERATION:
        return None
    if payload.get("ns") != execution_namespace(namespace):
        return None
    if retention is not None and retention.expired(payload.get("at")):
        raise operation_expired(retention.operation_s)
    check_replay(op, str(payload.get("node")), str(payload.get("digest")))
    return Replay(json.loads(payload["output"]), payload.get("state") == "pending")


def operation_record(
    namespace: str, op: Operation, output: Any, pending: bool = False, at: float | None = None
) -> models.PointStruct:
    """The operation record of a run (no vectors), made at ``at`` (epoch s; default now)."""
    return models.PointStruct(
        id=operation_record_id(namespace, op.id),
        vector={},
        payload={
            "rec": OPERATION,
            "ns": execution_namespace(namespace),
            "op": op.id,
            "node": op.node,
            "digest": op.digest,
            "state": "pending" if pending else "done",
            "output": json.dumps(output, separators=(",", ":")),
            "at": time.time() if at is None else at,
        },
    )
