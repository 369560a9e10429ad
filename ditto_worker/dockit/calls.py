"""One step of a memory call on a document store's client: cancel, deadline, timeout.

A document store runs each client request as one step of the memory call (its
``Connection.call``): before it starts the call's cancel token and deadline are checked
(:func:`check_step`), and a server request waits at most ``min(timeoutS, time left)``
(:func:`step_timeout`).
"""

from __future__ import annotations

from typing import Final

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = ["cancelled", "check_step", "deadline_passed", "step_timeout"]

_MARGIN_S: Final = 0.05


def cancelled() -> MemoryError:
    """The error of a call stopped by its cancel token (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


def deadline_passed(options: MemoryCallOptions | None) -> bool:
    """Whether the call's deadline has passed (or is within 50 ms): a client error then
    is the deadline's ``MEMORY_TIMEOUT``."""
    remaining = options.remaining_s if options is not None else None
    return remaining is not None and remaining <= _MARGIN_S


def check_step(options: MemoryCallOptions | None, check_cancel: bool = True) -> float | None:
    """Before a step: the seconds left of the call's deadline (``None``: no deadline).

    Raises:
        MemoryError: ``MEMORY_CANCELLED`` if ``check_cancel`` and the call's token is
            set; ``MEMORY_TIMEOUT`` if its deadline passed.
    """
    token = options.cancel if options is not None else None
    if check_cancel and token is not None and token.cancelled:
        raise cancelled()
    remaining = options.remaining_s if options is not None else None
    if remaining is not None and remaining <= 0:
        raise MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
    return remaining


def step_timeout(timeout_s: float, remaining: float | None) -> float:
    """The longest wait of one request: ``min(timeout_s, remaining)``, at least 10 ms."""
    return timeout_s if remaining is None else max(0.01, min(timeout_s, remaining))
