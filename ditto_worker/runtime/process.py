"""Per-process resources: built once in each process that uses them, never inherited.

A worker definition built from ``ditto.yaml`` must not open its store or load its model
in a parent process that forks later (a SQLite or PostgreSQL connection, a model's
threads, do not survive a fork). :class:`PerProcess` builds its value on first use in
each process (the process id is checked), once, under a lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerProcess"]

T = TypeVar("T")


class PerProcess(Generic[T]):
    """A value built by ``factory()`` once per process id, on first :meth:`get`.

    Args:
        factory: builds the value; its exceptions propagate to the caller of :meth:`get`
            (and the next call tries again).
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._pid = -1
        self._value: T | None = None

    def get(self) -> T:
        """This process's value, built now if it was not yet."""
        pid = os.getpid()
        value = self._value
        if self._pid == pid and value is not None:
            return value
        with self._lock:
            if self._pid != pid or self._value is None:
                self._value = self._factory()
                self._pid = pid
            return self._value

    def open(self) -> None:
        """Build the value now (a worker's ``open`` hook: fail before announcing ready)."""
        self.get()
