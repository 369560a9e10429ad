"""Error codes and the exception tree of ditto_worker.

The public failure surface is a :class:`~ditto_worker.contracts.NodeResult` with a
``status`` and an ``error.code`` (SPEC.md MEM-ERR-3). Inside the package, failures are
exceptions rooted in one class::

    DittoError
    ├── NodeError          (code, safe_message) — a classified node failure of any worker
    │   │                  kind; its message is public and reaches NodeResult.error
    │   └── MemoryError    raised by store plugins and the MEMORY SDK (the seed's name;
    │                      seed: "MemoryError 的 message 是公开错误")
    └── ConfigError        a ditto.yaml / env problem found at start-up

Every code any node of any kind answers with is a member of :class:`ErrorCode`
(SPEC.md MEM-RT-4); plugins may still raise codes of their own, passed through unchanged.

``MemoryError`` deliberately shadows the builtin of the same name: the seed and
SPEC.md name it so. Import it as ``from ditto_worker import MemoryError``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ConfigError", "DittoError", "ErrorCode", "MemoryError", "NodeError"]


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
    FLEET_UNAVAILABLE = "FLEET_UNAVAILABLE"
    """The fleet's broker or result backend is unreachable: the call was not sent, or its
    answer cannot be read. Not a storage fault; the message names the server's
    ``host:port``, never credentials (:mod:`ditto_worker.fleet.client`)."""
    # Plugin codes (MEM-PY-5)
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    UNSUPPORTED_STRATEGY = "UNSUPPORTED_STRATEGY"
    UNSUPPORTED_FILTER = "UNSUPPORTED_FILTER"
    UNSUPPORTED_ORDER_BY = "UNSUPPORTED_ORDER_BY"
    INVALID_CURSOR = "INVALID_CURSOR"
    UNSUPPORTED = "UNSUPPORTED"
    """The store does not offer a requested optional feature (an operation id on a store
    without ``capabilities.operation_ids``, an ``ifMetadata`` condition on one without
    ``capabilities.conditional_update``); nothing was applied."""
    OPERATION_EXPIRED = "OPERATION_EXPIRED"
    """A mutation's operation id was claimed longer ago than the store's operation
    retention (``operationRetentionS``, 30 days by default): the store can no longer
    answer its replay; nothing was applied (:mod:`ditto_worker.memory.retention`)."""
    # Retrieval and embeddings (MEM-RET)
    UNKNOWN_TARGET = "UNKNOWN_TARGET"
    """RETRIEVAL.SEARCH names a target the retrieval worker does not serve."""
    EMBEDDING_MISMATCH = "EMBEDDING_MISMATCH"
    """A provider's identity or a vector's length differs from the collection's (MEM-RET-4)."""
    EMBEDDING_UNAVAILABLE = "EMBEDDING_UNAVAILABLE"
    """The embedding model or endpoint failed (MEM-TASK-5: fail, never switch)."""
    # CONTEXT (MEM-CTX)
    CONTEXT_UNAVAILABLE = "CONTEXT_UNAVAILABLE"
    """The context cache (Redis) is unreachable or failed; no fallback store (MEM-CTX-3)."""
    CONTEXT_CANCELLED = "CONTEXT_CANCELLED"
    CONTEXT_TIMEOUT = "CONTEXT_TIMEOUT"
    # INFER (MEM-INF)
    INFER_UNAVAILABLE = "INFER_UNAVAILABLE"
    """The model endpoint is down, refused the call or answered 5xx (MEM-INF-3)."""
    INFER_INVALID_OUTPUT = "INFER_INVALID_OUTPUT"
    """The reply does not validate against ``responseSchema`` or was cut off (MEM-INF-2)."""
    INFER_CANCELLED = "INFER_CANCELLED"
    INFER_TIMEOUT = "INFER_TIMEOUT"
    # Graph and Loop (MEM-GRAPH)
    GRAPH_BIND_FAILED = "GRAPH_BIND_FAILED"
    """A node's ``bind`` raised; the node and its dependents did not run (MEM-GRAPH-2)."""
    GRAPH_BUDGET_EXHAUSTED = "GRAPH_BUDGET_EXHAUSTED"
    """A loop asked for more Graphs than its budget (1024 by default; MEM-GRAPH-4)."""
    GRAPH_CANCELLED = "GRAPH_CANCELLED"
    GRAPH_TIMEOUT = "GRAPH_TIMEOUT"
    # HTTP gateway (MEM-RUN-5), before a node is reached
    UNAUTHENTICATED = "UNAUTHENTICATED"
    """No bearer token, or one that is unknown, badly signed or expired (HTTP 401)."""
    OVERLOADED = "OVERLOADED"
    """More calls in flight than ``gateway.maxInFlight`` (HTTP 429, ``Retry-After``)."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """A request body over ``gateway.maxBodyBytes`` (HTTP 413), refused before it is read
    whole."""


class DittoError(Exception):
    """Root of every exception raised on purpose by ditto_worker."""


class NodeError(DittoError):
    """A classified node failure whose message may be shown to the caller.

    A node handler of any worker kind raises it; the runtime answers a ``failed``
    NodeResult with ``error = {code, message: safe_message}``.

    Args:
        code: an :class:`ErrorCode` value or a plugin-specific code (non-empty str).
        safe_message: a message that carries no credentials, URLs, SQL, raw driver text,
            memory content or model text; it reaches the caller verbatim.
    """

    def __init__(self, code: str, safe_message: str) -> None:
        super().__init__(safe_message)
        self.code = str(code)
        self.safe_message = safe_message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.safe_message!r})"


class MemoryError(NodeError):  # noqa: A001 - the seed's name
    """A classified MEMORY failure whose message may be shown to the caller.

    Args:
        code: an :class:`ErrorCode` value or a plugin-specific code (non-empty str).
        safe_message: a message that carries no credentials, URLs, SQL or raw driver
            text; it reaches the caller verbatim in ``NodeResult.error.message``.

    Source: the seed's ``new MemoryError(code, safeMessage)``; SPEC.md MEM-ERR-3.
    """


class ConfigError(DittoError):
    """``ditto.yaml`` or the environment is invalid; raised at start-up, never per call."""
