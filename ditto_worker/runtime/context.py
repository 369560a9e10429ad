"""``NodeContext``: what the host knows about one node call (SPEC.md MEM-RT-3).

Built by the runtime for every call, embedded or on the fleet, and handed to the node's
handler. Nothing in it comes from the request body: the execution id, the deadline, the
cancel token, the trusted scope and the operation id are the host's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ditto_worker.runtime.cancel import CancelToken

if TYPE_CHECKING:
    from ditto_worker.contracts import NodeResult
    from ditto_worker.scope import Scope

__all__ = ["NodeContext", "SubInvoke", "call_deadline"]

SubInvoke = Callable[..., "NodeResult[Any]"]
"""``invoke(node, input, *, timeout=None, execution_id=None, operation_id=None) ->
NodeResult``: a sub-call that inherits the calling node's deadline, cancellation and scope
(never its operation id: each effect names its own)."""


def call_deadline(default_s: float, timeout: float | None, deadline: float | None) -> float:
    """A call's absolute deadline (``time.time()`` seconds): ``deadline`` when given
    without a ``timeout``, else the earlier of the two; ``default_s`` from now when neither
    is given. A sub-call passes its parent's deadline, so it never outlives it (MEM-RT-3)."""
    if deadline is not None and timeout is None:
        return deadline
    limit = time.time() + (default_s if timeout is None else timeout)
    return limit if deadline is None else min(limit, deadline)


def _no_runtime(node: str, input: Any, **_: Any) -> NodeResult[Any]:
    from ditto_worker.contracts import NodeResult
    from ditto_worker.errors import ErrorCode

    return NodeResult.failure(
        "", node, ErrorCode.UNKNOWN_NODE, "this call has no runtime to invoke other nodes"
    )


@dataclass(frozen=True)
class NodeContext:
    """One call's host-side facts.

    Attributes:
        execution_id: the call id (the Celery task id on the fleet).
        node: the node id being served (``CONTEXT.UPDATE`` …).
        cancel: the call's cancel token; handlers pass it to their drivers
            (``on_cancel``) or poll ``cancel.cancelled`` (MEM-PY-2).
        deadline: absolute ``time.time()`` seconds after which the caller gave up, or
            ``None``.
        scope: the trusted tenant scope, resolved against the worker's own bound scope,
            or ``None`` (unscoped).
        invoke: ``ctx.invoke(node, input)`` — a sub-call through the same runtime that
            inherits ``deadline``, ``cancel`` and ``scope`` (the seed's ``ctx.invoke``);
            ``operation_id=`` gives the sub-call its own operation id.
        headers: tracing facts from the host (``run_id``, ``graph_node`` …), JSON-safe.
        defaults: the runtime-YAML defaults layer of this kind, if any (MEMORY:
            ``MemoryDefaults``; MEM-CONF-2).
        operation_id: the caller's operation id (MEM-RUN-7, :mod:`ditto_worker.operation`),
            or ``None``: one id per intended effect across attempts, which MEMORY
            mutations apply at most once.
    """

    execution_id: str
    node: str = ""
    cancel: CancelToken = field(default_factory=CancelToken)
    deadline: float | None = None
    scope: Scope | None = None
    invoke: SubInvoke = _no_runtime
    headers: Mapping[str, Any] = field(default_factory=dict)
    defaults: Any = None
    operation_id: str | None = None

    @property
    def remaining_s(self) -> float | None:
        """Seconds left before :attr:`deadline` (may be negative), or ``None``."""
        return None if self.deadline is None else self.deadline - time.time()

    @property
    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.deadline is not None and time.time() >= self.deadline
