"""Operation ids: one caller-chosen id per intended effect, across every attempt.

SPEC.md MEM-RUN-7; the seed (memory-capabilities, "Policy and recovery"): "On retry, the
application reads content and operation ID to determine whether the write/update already
happened. It does not duplicate updates or increment versions again after an ambiguous
response or crash."

An execution id names one *attempt* (on the fleet, the Celery task id; a replay after the
result expired or the task was revoked gets a new one). An operation id names the
*effect* the caller means: it is set by the caller (``invoke(..., operation_id=)``,
``ctx.invoke(..., operation_id=)``, a Graph node's ``operationId``), travels in the
:data:`OPERATION_HEADER` message header on the fleet, and is never inherited by sub-calls
(each effect has its own). Stores apply a mutation (WRITE, UPDATE, DELETE) with a given
operation id at most once per namespace, keep the id with the records it wrote, and
answer a replay with a different input ``CONFLICT`` (:mod:`ditto_worker.memory.operations`).
Reads ignore it.

Like the scope, this module sits below the runtime and the SDK: it imports only the
contracts and the errors.
"""

from __future__ import annotations

from typing import Any, Final

from ditto_worker.contracts import LONE_SURROGATE, check_text
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = ["MAX_OPERATION_ID", "OPERATION_HEADER", "check_operation_id"]

OPERATION_HEADER: Final = "ditto_operation"
"""Message header carrying the call's operation id (a string) from the client to the worker."""

MAX_OPERATION_ID: Final = 256
"""Most characters in an operation id."""


def check_operation_id(value: Any) -> str | None:
    """``value`` when it is a valid operation id, ``None`` for ``None``.

    A valid id is a string of 1-256 characters, valid Unicode, without control
    characters (it is stored with the records and compared byte for byte).

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``operationId`` otherwise.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_OPERATION_ID:
        raise MemoryError(
            ErrorCode.INVALID_INPUT,
            f"Invalid input: operationId must be a string of 1-{MAX_OPERATION_ID} characters",
        )
    try:
        check_text(value)
    except ValueError:
        raise MemoryError(
            ErrorCode.INVALID_INPUT, f"Invalid input: operationId {LONE_SURROGATE}"
        ) from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise MemoryError(
            ErrorCode.INVALID_INPUT, "Invalid input: operationId contains a control character"
        )
    return value
