"""A node and its kind's codes as data (SPEC.md MEM-RT-1, MEM-RT-4): the parts of a
worker definition that the call envelope (:mod:`ditto_worker.runtime.execute`) reads.

:class:`~ditto_worker.runtime.definition.WorkerDefinition` groups them into a worker kind
and re-exports every name here; import them from :mod:`ditto_worker.runtime`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ditto_worker.errors import ErrorCode

if TYPE_CHECKING:
    from ditto_worker.runtime.context import NodeContext
    from ditto_worker.scope import Scope

__all__ = ["BatchCall", "Handler", "KindCodes", "NodeSpec", "queue_of"]

Handler = Callable[[Any, "NodeContext"], Any]
"""``handler(input, ctx) -> raw output | NodeResult``; raises ``NodeError`` when it fails."""


def queue_of(node: str) -> str:
    """The dedicated queue of a node id: its lower-case id (``CONTEXT.UPDATE`` ->
    ``context.update``; SPEC.md "Python mapping", MEM-RT-2)."""
    return node.lower()


@dataclass(frozen=True)
class KindCodes:
    """The codes a kind's calls end with when the runtime, not the handler, decides.

    Attributes:
        cancelled: status ``cancelled`` (the caller cancelled; MEM-PY-2).
        timeout: status ``timeout`` (the call's deadline passed).
        failed: status ``failed`` when the handler raised an unclassified exception (the
            exception is logged without input or output; the caller sees a generic
            message).
    """

    cancelled: str
    timeout: str
    failed: str

    @classmethod
    def for_kind(cls, kind: str) -> KindCodes:
        """``<KIND>_CANCELLED`` / ``<KIND>_TIMEOUT`` / ``<KIND>_UNAVAILABLE``; MEMORY and
        RETRIEVAL use the MEMORY codes (MEM-ERR-3)."""
        if kind in ("MEMORY", "RETRIEVAL"):
            return cls(
                ErrorCode.MEMORY_CANCELLED, ErrorCode.MEMORY_TIMEOUT, ErrorCode.MEMORY_BACKEND_ERROR
            )
        return cls(f"{kind}_CANCELLED", f"{kind}_TIMEOUT", f"{kind}_UNAVAILABLE")


@dataclass(frozen=True)
class BatchCall:
    """One call of a coalesced batch, as a node's ``prefetch`` sees it.

    Attributes:
        execution_id: the call's execution id.
        input: its node input (JSON data, not validated yet).
        scope: the trusted scope it runs with (the worker's binding applied), or ``None``.
        deadline: its deadline (``time.time()`` seconds), or ``None``.
    """

    execution_id: str
    input: Any
    scope: Scope | None
    deadline: float | None


@dataclass(frozen=True)
class NodeSpec:
    """One node of a worker kind.

    Attributes:
        id: the node id, ``KIND.NAME`` in upper case (``CONTEXT.UPDATE``).
        handler: ``handler(input, ctx)``; see the module docstring.
        mutation: the node changes durable state: on the fleet its message is acked late
            and redelivered if its worker process dies, so the handler must apply a
            redelivered execution id at most once.
        output: the pydantic-validatable type of the raw output (e.g.
            ``list[MemoryItem]``), which callers use to parse a success's ``output``;
            ``None``: the output stays plain JSON data.
        input: the pydantic-validatable type of the node input (e.g. ``MemoryGetInput``),
            which callers outside the handler (the HTTP gateway, issue 26) validate
            before anything is enqueued and publish as the node's request schema;
            ``None``: any JSON data (the handler alone validates it).
        serial: the calls of one coalesced batch of this node run one after another on
            the worker, not at the same time (:mod:`ditto_worker.fleet.batch`): for calls
            that could only wait for each other (a single-writer store's mutations,
            SQLite's write lock).
        prefetch: ``prefetch(calls) -> release``, or ``None``: called with the calls of a
            coalesced batch (:class:`BatchCall`) before they run, to do their shared work
            once (MEMORY.GET: one store read, :mod:`ditto_worker.memory.batch_get`); each
            call still runs its handler; ``release()`` is called when they all ended.
    """

    id: str
    handler: Handler
    mutation: bool = False
    output: Any = None
    input: Any = None
    serial: bool = False
    prefetch: Callable[[Sequence[BatchCall]], Callable[[], None]] | None = None

    @property
    def queue(self) -> str:
        """The node's own queue (:func:`queue_of`)."""
        return queue_of(self.id)
