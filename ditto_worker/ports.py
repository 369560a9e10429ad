"""The plugin ports: ``MemoryStore``, ``MemorySearchProvider``, and the per-call options.

Two independent ``typing.Protocol`` s, as in the seed ("两个独立插件接口"): no base class,
no registry. A plugin returns the *raw* output (contract models, or plain dicts with the
same fields); the SDK validates it and wraps it once in a NodeResult (MEM-NODE-1).

Plugins raise :class:`~ditto_worker.errors.MemoryError` with a safe message for classified
failures; any other exception becomes ``MEMORY_BACKEND_ERROR`` (MEM-ERR-4).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
    MemoryUpdateInput,
    MemoryWriteInput,
)
from ditto_worker.scope import Scope

__all__ = [
    "CancelToken",
    "MemoryCallOptions",
    "MemorySearchProvider",
    "MemoryStore",
]


class CancelToken:
    """A thread-safe, one-way cancel signal (the seed's ``AbortSignal``; MEM-PY-2).

    ``cancel()`` sets the flag and runs every registered callback once (in the
    cancelling thread). Plugins register a driver-level interrupt with
    :meth:`on_cancel` (e.g. ``sqlite3.Connection.interrupt``); a callback registered
    after cancellation runs at once.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Signal cancellation; idempotent."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback``; returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block up to ``timeout_s`` seconds; True if cancelled."""
        return self._event.wait(timeout_s)

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


@dataclass(frozen=True)
class MemoryCallOptions:
    """Per-call options handed to a plugin method (the seed's ``MemoryCallOptions``).

    Attributes:
        cancel: set when the caller cancelled; plugins should pass it to the driver
            (MEM-RUN-2). ``None`` when the call cannot be cancelled.
        deadline: absolute wall-clock deadline (``time.time()`` seconds) after which the
            caller has given up, or ``None``.
        execution_id: the call's execution id (the Celery task id on the fleet).
        scope: the trusted tenant scope the store must confine the call to (all six
            operations; :mod:`ditto_worker.scope`), or ``None`` for the unscoped
            namespace. Never taken from the request body.
        extra: JSON-safe values from the host (never from the request body).
    """

    cancel: CancelToken | None = None
    deadline: float | None = None
    execution_id: str | None = None
    scope: Scope | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def remaining_s(self) -> float | None:
        """Seconds left before ``deadline`` (may be negative), or ``None``."""
        return None if self.deadline is None else self.deadline - time.time()


@runtime_checkable
class MemoryStore(Protocol):
    """The fact store: exact reads, structured queries and mutations.

    Each method receives a validated input whose ``limit`` (QUERY) is already resolved
    (MEM-CONF-2), and returns the raw output. Rules the store owns: MEM-GET-2/5,
    MEM-QUERY-2/3/4, MEM-WRITE-2/3, MEM-UPDATE-1/2/4, MEM-DELETE-2/3, MEM-PY-5/6/11/12.
    """

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemoryItem | dict[str, Any]]:
        """Records whose id or key was requested; missing ones omitted."""
        ...

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput | dict[str, Any]:
        """One page: at most ``input.limit`` items, stably ordered, keyset cursor."""
        ...

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemoryItem | dict[str, Any]]:
        """Create records after commit; one full item per draft, in order."""
        ...

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemoryItem | dict[str, Any]]:
        """Partial updates by id; a missing id raises ``MemoryError("NOT_FOUND", …)``."""
        ...

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput | dict[str, Any]:
        """Delete existing ids; returns only the ids deleted now."""
        ...


@runtime_checkable
class MemorySearchProvider(Protocol):
    """Relevance search (MEM-SEARCH). A store may implement it natively."""

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemorySearchResult | dict[str, Any]]:
        """At most ``input.limit`` results (resolved by the SDK), in the provider's order.

        Raises:
            MemoryError: ``UNSUPPORTED_STRATEGY`` for an unknown strategy,
                ``INVALID_INPUT`` for a query the provider cannot use.
        """
        ...
