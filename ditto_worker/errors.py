"""Error codes and the exception tree of ditto_worker.

The public failure surface is a :class:`~ditto_worker.contracts.NodeResult` with a
``status`` and an ``error.code`` (SPEC.md MEM-ERR-3). Inside the package, failures are
exceptions rooted in one class::

    DittoError
    ├── MemoryError        (code, safe_message) — raised by plugins and the SDK;
    │                      its message is public (seed: "MemoryError 的 message 是公开错误")
    └── ConfigError        a ditto.yaml / env problem found at start-up

``MemoryError`` deliberately shadows the builtin of the same name: the seed and
SPEC.md name it so. Import it as ``from ditto_worker import MemoryError``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ConfigError", "DittoError", "ErrorCode", "MemoryError"]


class ErrorCode(StrEnum):
    """The error codes of SPEC.md MEM-ERR-3 and MEM-PY-5.

    Core codes are produced by the SDK, the worker or the client; plugin codes are
    raised by plugins as ``MemoryError(code, safe_message)``. A plugin may raise a code
    not listed here; it is passed through unchanged.
    """

    # Core (MEM-ERR-3)
    INVALID_INPUT = "INVALID_INPUT"
    SEARCH_UNAVAILABLE = "SEARCH_UNAVAILABLE"
    UNKNOWN_NODE = "UNKNOWN_NODE"
    INVALID_BACKEND_OUTPUT = "INVALID_BACKEND_OUTPUT"
    MEMORY_BACKEND_ERROR = "MEMORY_BACKEND_ERROR"
    MEMORY_CANCELLED = "MEMORY_CANCELLED"
    MEMORY_TIMEOUT = "MEMORY_TIMEOUT"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    """The call's trusted scope is missing, malformed, not served by this worker, or
    the store cannot isolate scopes (:mod:`ditto_worker.scope`)."""
    # Plugin codes (MEM-PY-5)
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    UNSUPPORTED_STRATEGY = "UNSUPPORTED_STRATEGY"
    UNSUPPORTED_FILTER = "UNSUPPORTED_FILTER"
    UNSUPPORTED_ORDER_BY = "UNSUPPORTED_ORDER_BY"
    INVALID_CURSOR = "INVALID_CURSOR"


class DittoError(Exception):
    """Root of every exception raised on purpose by ditto_worker."""


class MemoryError(DittoError):  # noqa: A001 - the seed's name
    """A classified failure whose message may be shown to the caller.

    Args:
        code: an :class:`ErrorCode` value or a plugin-specific code (non-empty str).
        safe_message: a message that carries no credentials, URLs, SQL or raw driver
            text; it reaches the caller verbatim in ``NodeResult.error.message``.

    Source: the seed's ``new MemoryError(code, safeMessage)``; SPEC.md MEM-ERR-3.
    """

    def __init__(self, code: str, safe_message: str) -> None:
        super().__init__(safe_message)
        self.code = str(code)
        self.safe_message = safe_message

    def __repr__(self) -> str:
        return f"MemoryError({self.code!r}, {self.safe_message!r})"


class ConfigError(DittoError):
    """``ditto.yaml`` or the environment is invalid; raised at start-up, never per call."""
