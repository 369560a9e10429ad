"""Cancellation of node calls (MEM-PY-2, MEM-RUN-2): tokens and the running-call registry.

* :class:`CancelToken` — the one-way cancel signal every call carries (the seed's
  ``AbortSignal``): the runtime creates one per call and hands it to the handler
  (``NodeContext.cancel``); plugins register a driver-level interrupt with
  :meth:`CancelToken.on_cancel` (``sqlite3.Connection.interrupt``, psycopg's ``cancel``).
* :class:`CancelRegistry` — the calls a process is running, by execution id, with their
  tokens and deadlines: a cancel by id reaches the running call (or flags it so it never
  starts), and :meth:`CancelRegistry.expire_deadlines` stops calls whose caller gave up.
  The embedded runtime ticks it; on the fleet the Redis watcher
  (:mod:`ditto_worker.fleet.cancellation`) feeds it the cancels announced on Redis.

No I/O, no Celery.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["CancelRegistry", "CancelToken", "local_registry"]


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


@dataclass
class _Running:
    token: CancelToken
    deadline: float | None


class CancelRegistry:
    """The calls this process is running, by execution id; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._flagged: dict[str, float] = {}  # cancelled before start: id -> expiry (time.time)

    @contextmanager
    def running(self, execution_id: str, deadline: float | None) -> Iterator[CancelToken]:
        """Register a call for the duration of the block; yields its token.

        The token is already cancelled when the id was flagged before the call started.
        """
        token = CancelToken()
        with self._lock:
            self._running[execution_id] = _Running(token, deadline)
            flagged = self._flagged.pop(execution_id, None) is not None
        if flagged:
            token.cancel()
        try:
            yield token
        finally:
            with self._lock:
                self._running.pop(execution_id, None)

    def cancel(self, execution_id: str, ttl_s: float = 3600.0) -> bool:
        """Cancel a running call, or flag it for ``ttl_s`` seconds if not running yet.

        Returns:
            True when a running call's token was cancelled.
        """
        with self._lock:
            entry = self._running.get(execution_id)
            if entry is None:
                now = time.time()
                self._flagged = {k: v for k, v in self._flagged.items() if v > now}
                self._flagged[execution_id] = now + ttl_s
                return False
        entry.token.cancel()
        return True

    def expire_deadlines(self, now: float | None = None) -> int:
        """Cancel every running call whose deadline has passed; returns how many."""
        now = time.time() if now is None else now
        with self._lock:
            late = [r.token for r in self._running.values() if r.deadline and r.deadline <= now]
        for token in late:
            token.cancel()
        return len(late)

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)


_LOCAL = CancelRegistry()


def local_registry() -> CancelRegistry:
    """The registry of this process (used by in-process fleets and by the watcher)."""
    return _LOCAL
