"""A node call that does not succeed is a Celery task failure (issue 14 item 3).

A node task answers every call with a NodeResult (MEM-ERR: callers get ``failed`` /
``cancelled`` / ``timeout`` with a code, never an exception). On the fleet a NodeResult
whose status is not ``success`` leaves the task as :class:`NodeFailed` — listed in the
task's ``throws``, so Celery logs it at INFO on one line without a traceback
(``Task MEMORY.QUERY[…] raised expected: NodeFailed(MEMORY.QUERY failed INVALID_INPUT)``)
— and the task's state is FAILURE: Flower's failure counts, ``task-failed`` events,
``ditto_node_calls_total`` and OpenTelemetry's span status (ERROR) all see it.

The exception carries the whole NodeResult wire JSON as its only argument; Celery's JSON
result backend stores it as ``{"exc_type": "NodeFailed", "exc_message": [<NodeResult>],
"exc_module": …}``, from which the client rebuilds the NodeResult
(:func:`node_result_of`) without importing or running anything. Its ``str`` and ``repr``
show node, status and code only (no message, no input): they reach logs, events and
Flower. Celery never retries it (node tasks have no retry policy; MEM-ERR-5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LOST_CONNECTION", "NodeFailed", "lost_connection", "node_result_of"]

LOST_CONNECTION = (
    "the fleet lost its broker or result backend while the call ran (e.g. a Redis "
    "failover); retry with the same operation id"
)
"""The message of a call that ended ``FLEET_UNAVAILABLE`` because the worker's task lost
its connection (:func:`lost_connection`)."""

_CONNECTION_ERRORS: frozenset[tuple[str, str]] = frozenset(
    {("redis.exceptions", "ConnectionError"), ("redis.exceptions", "TimeoutError"),
     ("redis.sentinel", "MasterNotFoundError"), ("kombu.exceptions", "OperationalError"),
     ("builtins", "ConnectionError"), ("builtins", "ConnectionResetError"),
     ("builtins", "ConnectionRefusedError"), ("builtins", "BrokenPipeError")}
)  # fmt: skip


def _summary(wire: Mapping[str, Any]) -> str:
    error = wire.get("error")
    code = f" {error.get('code')}" if isinstance(error, Mapping) else ""
    return f"{wire.get('node')} {wire.get('status')}{code}"


class NodeFailed(Exception):  # noqa: N818 - the node failed; it is not an error of ours
    """Raised by a node task whose NodeResult is not ``success``.

    Args:
        wire: the NodeResult wire JSON (``executionId``, ``node``, ``status``, ``error``).
    """

    def __init__(self, wire: Mapping[str, Any]) -> None:
        super().__init__(dict(wire))
        self.wire = dict(wire)

    def __str__(self) -> str:
        return _summary(self.wire)

    def __repr__(self) -> str:
        return f"NodeFailed({_summary(self.wire)})"


def node_result_of(result: Any) -> dict[str, Any] | None:
    """The NodeResult wire JSON inside a FAILURE result as Celery's JSON backend stores it
    (``{"exc_type": "NodeFailed", "exc_message": [wire], …}``), else ``None``."""
    if not isinstance(result, Mapping) or result.get("exc_type") != "NodeFailed":
        return None
    args = result.get("exc_message")
    if isinstance(args, list | tuple) and args and isinstance(args[0], Mapping):
        return dict(args[0])
    return None


def lost_connection(result: Any) -> bool:
    """True for a task failure that is the fleet's own connection failing, not the node:
    the worker ran the call (perhaps committed it) but could not store or send its result
    (``exc_type`` / ``exc_module`` of Celery's JSON FAILURE result, or the exception
    rebuilt from it). Such a call ends ``FLEET_UNAVAILABLE`` (retryable with its
    operation id: a replay applies nothing twice, MEM-RUN-7), not
    ``MEMORY_BACKEND_ERROR``."""
    if isinstance(result, BaseException):
        kind = type(result)
        return any((c.__module__, c.__name__) in _CONNECTION_ERRORS for c in kind.__mro__)
    if not isinstance(result, Mapping):
        return False
    return (result.get("exc_module"), result.get("exc_type")) in _CONNECTION_ERRORS
