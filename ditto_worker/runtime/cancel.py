"""Cancellation of node calls (MEM-PY-2, MEM-RUN-2): tokens and the running-call registry.

* :class:`CancelToken` — the one-way cancel signal every call carries (the seed's
  ``AbortSignal``): the runtime creates one per call and hands it to the handler
  (``NodeContext.cancel``); plugins register a driver-level interrupt with
  :meth:`CancelToken.on_cancel` (``sqlite3.Connection.interrupt``, psycopg's ``cancel``).
  A token records why it was cancelled — ``"timeout"`` (the deadline ticker) or
  ``"cancelled"`` (an explicit cancel) — and when; the first reason wins.
  :meth:`CancelToken.outcome` is the one place that turns a token and a deadline into a
  status (MEM-RUN-6): a call whose deadline passed before any explicit cancel ends
  ``timeout``; a cancel requested before the deadline ends ``cancelled``. Every place
  that maps a stopped call to a status asks it.
* :class:`CancelRegistry` — the calls a process is running, by execution id, with their
  tokens and deadlines: a cancel by id reaches the running call (or flags it so it never
  starts), and :meth:`CancelRegistry.expire_deadlines` stops calls whose caller gave up.
  The embedded runtime ticks it; on the fleet the Redis watcher
  (:mod:`ditto_worker.fleet.cancellation`) feeds it the cancels announced on Redis.

No I/O, no Celery.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

__all__ = ["CancelReason", "CancelRegistry", "CancelToken", "local_registry", "stop_outcome"]

logger = logging.getLogger(__name__)

CancelReason = Literal["cancelled", "timeout"]
"""Why a token was cancelled, named by the status it gives: ``"cancelled"`` (an explicit
cancel: the caller's token, a cancel by execution id, a revoke) or ``"timeout"`` (the
call's deadline passed: the deadline ticker, a runtime giving up at the deadline)."""


class CancelToken:
    """A thread-safe, one-way cancel signal (the seed's ``AbortSignal``; MEM-PY-2).

    ``cancel()`` sets the flag, records the reason and the time (``time.time()``) — the
    first cancel wins, later ones change nothing — and runs every registered callback
    once (in the cancelling thread; one that raises is logged and the others still run,
    so ``cancel()`` never raises). Plugins register a driver-level interrupt with
    :meth:`on_cancel` (e.g. ``sqlite3.Connection.interrupt``); a callback registered
    after cancellation runs at once. :meth:`link` passes a cancel on to another token
    with its reason and time (a call's token follows its caller's).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._reason: CancelReason | None = None
        self._at: float | None = None

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called (for either reason)."""
        return self._event.is_set()

    @property
    def reason(self) -> CancelReason | None:
        """``"cancelled"`` / ``"timeout"``: the reason of the first cancel; ``None`` before."""
        return self._reason

    @property
    def cancelled_at(self) -> float | None:
        """When the first cancel was requested (``time.time()`` seconds), or ``None``."""
        return self._at

    def cancel(self, reason: CancelReason = "cancelled", at: float | None = None) -> None:
        """Signal cancellation; idempotent (the first call's reason and time stay).

        Args:
            reason: ``"cancelled"`` for an explicit cancel (the default), ``"timeout"``
                when the call's deadline passed (the deadline ticker).
            at: when the cancel was requested (``time.time()`` seconds); default now. A
                linked token passes on its own time.
        """
        with self._lock:
            if self._event.is_set():
                return
            self._reason, self._at = reason, time.time() if at is None else at
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing callback must not keep the others from running
                logger.exception("a cancel callback raised")

    def link(self, child: CancelToken) -> Callable[[], None]:
        """Cancel ``child`` when this token is cancelled, with this token's reason and
        time (at once if it already is); returns a function that unlinks them."""
        return self.on_cancel(lambda: child.cancel(self._reason or "cancelled", self._at))

    def outcome(self, deadline: float | None, now: float | None = None) -> CancelReason | None:
        """The status of a call with this token and ``deadline`` that stopped, by SPEC.md
        MEM-RUN-6; ``None`` while it may still run (not cancelled, deadline not passed).

        * cancelled by its deadline (reason ``"timeout"``) -> ``"timeout"``;
        * an explicit cancel requested before ``deadline`` -> ``"cancelled"``; one
          requested at or after it -> ``"timeout"`` (the deadline passed first);
        * not cancelled: ``"timeout"`` once ``deadline`` has passed (``now``, default
          ``time.time()``), else ``None``.

        Args:
            deadline: the call's absolute deadline (``time.time()`` seconds) or ``None``.
            now: the time to judge an uncancelled token at.
        """
        with self._lock:
            reason, at = self._reason, self._at
        if reason is None:
            now = time.time() if now is None else now
            return "timeout" if deadline is not None and now >= deadline else None
        if reason == "cancelled" and deadline is not None and at is not None and at >= deadline:
            return "timeout"
        return reason

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


def stop_outcome(token: CancelToken | None, deadline: float | None) -> CancelReason | None:
    """:meth:`CancelToken.outcome` for a call that may have no token (``None``: only the
    deadline decides)."""
    if token is not None:
        return token.outcome(deadline)
    return "timeout" if deadline is not None and time.time() >= deadline else None


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

    def cancel(
        self, execution_id: str, ttl_s: float = 3600.0, reason: CancelReason = "cancelled"
    ) -> bool:
        """Cancel a running call, or flag it for ``ttl_s`` seconds if not running yet.

        ``reason`` is ``"timeout"`` when the caller gives up at the call's deadline (its
        token then ends the call ``timeout``); a flag before the start is always an
        explicit cancel.

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
        entry.token.cancel(reason)
        return True

    def expire_deadlines(self, now: float | None = None) -> int:
        """Cancel every running call whose deadline has passed, with reason ``"timeout"``
        (MEM-RUN-6: a deadline is never a cancel); returns how many."""
        now = time.time() if now is None else now
        with self._lock:
            late = [r.token for r in self._running.values() if r.deadline and r.deadline <= now]
        for token in late:
            token.cancel("timeout")
        return len(late)

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)


_LOCAL = CancelRegistry()


def local_registry() -> CancelRegistry:
    """The registry of this process (used by in-process fleets and by the watcher)."""
    return _LOCAL
