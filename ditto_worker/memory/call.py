"""One MEMORY call, run: the plugin invoked, its output checked, the outcome as a NodeResult.

:class:`Call` is what :mod:`.prepare` makes of a validated request; :func:`run_call` runs
it under the call's cancel token and deadline (steps 6-8 of :mod:`ditto_worker.memory.core`:
a call cancelled or timed out while the plugin ran is ``cancelled``/``timeout`` whatever
the plugin did; ``MemoryError`` -> its code; any other exception ->
``MEMORY_BACKEND_ERROR``, logged; the output checked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ditto_worker.contracts import NodeResult, NodeStatus, any_result
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory import checks
from ditto_worker.memory.ports import CancelToken, MemoryCallOptions
from ditto_worker.runtime.cancel import stop_outcome
from ditto_worker.wire import trusted

__all__ = [
    "BACKEND_ERROR_MESSAGE",
    "Call",
    "Prepared",
    "error_result",
    "run_call",
    "stopped_result",
    "success_result",
]

logger = logging.getLogger("ditto_worker.memory.core")  # the SDK's logger, as before

BACKEND_ERROR_MESSAGE: Final = "The memory backend failed; see the worker log for details."
"""The public message of a plugin failure that is not a ``MemoryError`` (MEM-ERR-4)."""


@dataclass(frozen=True)
class Call:
    """A validated call: ``invoke`` runs the plugin, ``finish`` checks its raw output."""

    invoke: Callable[[MemoryCallOptions], object]
    finish: Callable[[object], object]


Prepared = Call | checks.Done
"""A validated request: a :class:`Call` to run, or an answer given without the plugin."""


def run_call(eid: str, node: str, call: Call, options: MemoryCallOptions) -> NodeResult[Any]:
    """Invoke the plugin, check its output and wrap the outcome (module docstring)."""
    cancel, deadline = options.cancel, options.deadline
    try:
        output = call.finish(call.invoke(options))
    except MemoryError as exc:
        return stopped_result(eid, node, cancel, deadline) or error_result(eid, node, exc)
    except Exception:
        logger.error("%s %s: the memory plugin raised", node, eid, exc_info=True)
        return stopped_result(eid, node, cancel, deadline) or NodeResult.failure(
            eid, node, ErrorCode.MEMORY_BACKEND_ERROR, BACKEND_ERROR_MESSAGE
        )
    return stopped_result(eid, node, cancel, deadline) or success_result(eid, node, output)


def stopped_result(
    eid: str, node: str, cancel: CancelToken | None, deadline: float | None
) -> NodeResult[Any] | None:
    """A timeout/cancelled result when the deadline passed or the token is set (MEM-PY-2);
    the token says which (MEM-RUN-6: when the deadline passes the host cancels the token
    too, with reason ``timeout``)."""
    reason = stop_outcome(cancel, deadline)
    if reason == "timeout":
        return NodeResult.failure(
            eid, node, ErrorCode.MEMORY_TIMEOUT, "The call's deadline passed.", "timeout"
        )
    if reason == "cancelled":
        return NodeResult.failure(
            eid, node, ErrorCode.MEMORY_CANCELLED, "The call was cancelled.", "cancelled"
        )
    return None


def error_result(eid: str, node: str, exc: MemoryError) -> NodeResult[Any]:
    """A plugin's or a rule's ``MemoryError`` as a NodeResult; its message is public."""
    status: NodeStatus = "failed"
    if exc.code == ErrorCode.MEMORY_CANCELLED:
        status = "cancelled"
    elif exc.code == ErrorCode.MEMORY_TIMEOUT:
        status = "timeout"
    code = exc.code or ErrorCode.MEMORY_BACKEND_ERROR
    return NodeResult.failure(eid, node, code, exc.safe_message, status)


_SUCCESS_SET: Final = ("execution_id", "node", "status", "output")


def success_result(eid: str, node: str, output: object) -> NodeResult[Any]:
    """A ``success`` NodeResult carrying ``output``: the SDK's own, checked output with
    the call's id (a non-empty text, checked before the call) and a known node id, so
    built without validating them again (:func:`ditto_worker.wire.trusted`)."""
    values = {"execution_id": eid, "node": node, "status": "success", "output": output,
              "error": None}  # fmt: skip
    return trusted(any_result(), values, _SUCCESS_SET)
