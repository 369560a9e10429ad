"""``CancelToken``: the one-way cancel signal every node call carries (MEM-PY-2).

The seed's ``AbortSignal``: the runtime creates one per call and hands it to the
handler (``NodeContext.cancel``); plugins and clients register a driver-level interrupt
with :meth:`CancelToken.on_cancel`. No I/O, no Celery.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CancelToken"]


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
