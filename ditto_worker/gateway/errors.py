"""One table from a NodeResult to an HTTP status, and the gateway's own errors.

The body of every answer of ``POST /v1/nodes/{node}`` is a NodeResult (wire names), also
before a node is reached (then ``node`` is the path's node id and ``executionId`` a fresh
uuid, nothing was enqueued). The status follows :data:`STATUS_OF_CODE` so HTTP tooling,
proxies and retry policies behave:

=====================================================  =====  ==========================
code                                                   HTTP   notes
=====================================================  =====  ==========================
(success)                                              200
``INVALID_INPUT`` ``INVALID_CURSOR`` ``UNKNOWN_TARGET``  422    the field at fault named
``UNSUPPORTED_FILTER`` ``UNSUPPORTED_ORDER_BY``
``UNSUPPORTED_STRATEGY`` ``EMBEDDING_MISMATCH``
``UNSUPPORTED`` (a capability the store lacks)
``UNAUTHENTICATED``                                    401    ``WWW-Authenticate: Bearer``
``PERMISSION_DENIED``                                  403
``UNKNOWN_NODE`` ``NOT_FOUND``                          404    closest node ids named
``CONFLICT`` ``OPERATION_EXPIRED``                     409
``PAYLOAD_TOO_LARGE``                                  413
``OVERLOADED``                                         429    ``Retry-After: 1``
``*_CANCELLED`` (a cancelled call)                     499    nginx's "client closed"
``INVALID_BACKEND_OUTPUT`` ``INFER_INVALID_OUTPUT``     502
``FLEET_UNAVAILABLE`` ``MEMORY_BACKEND_ERROR``          503    ``Retry-After: 5``
``SEARCH_UNAVAILABLE`` ``EMBEDDING_UNAVAILABLE``
``CONTEXT_UNAVAILABLE`` ``INFER_UNAVAILABLE``
``*_UNAVAILABLE`` of other kinds
``*_TIMEOUT`` (status ``timeout``)                     504
``GRAPH_BIND_FAILED`` ``GRAPH_BUDGET_EXHAUSTED``         500    Graph codes: no node route
any other code (a plugin's own)                        500
=====================================================  =====  ==========================

Messages are the NodeResult's safe messages: no traceback, SQL, URL or driver text.
"""

from __future__ import annotations

import uuid
from typing import Any

from ditto_worker.errors import ErrorCode

__all__ = ["STATUS_OF_CODE", "GatewayError", "failure_body", "http_status"]

STATUS_OF_CODE: dict[str, int] = {
    ErrorCode.INVALID_INPUT: 422,
    ErrorCode.INVALID_CURSOR: 422,
    ErrorCode.UNKNOWN_TARGET: 422,
    ErrorCode.UNSUPPORTED_FILTER: 422,
    ErrorCode.UNSUPPORTED_ORDER_BY: 422,
    ErrorCode.UNSUPPORTED_STRATEGY: 422,
    ErrorCode.EMBEDDING_MISMATCH: 422,
    ErrorCode.UNSUPPORTED: 422,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.UNKNOWN_NODE: 404,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.OPERATION_EXPIRED: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.OVERLOADED: 429,
    ErrorCode.INVALID_BACKEND_OUTPUT: 502,
    ErrorCode.INFER_INVALID_OUTPUT: 502,
    ErrorCode.FLEET_UNAVAILABLE: 503,
    ErrorCode.MEMORY_BACKEND_ERROR: 503,
    ErrorCode.SEARCH_UNAVAILABLE: 503,
    ErrorCode.EMBEDDING_UNAVAILABLE: 503,
}
"""Error code -> HTTP status; see the module docstring for the rest of the table."""

RETRY_AFTER_S = {429: "1", 503: "5"}
"""``Retry-After`` (seconds) sent with these statuses."""


def http_status(status: str, code: str | None) -> int:
    """The HTTP status of a NodeResult with ``status`` and error ``code``."""
    if status == "success":
        return 200
    if status == "timeout":
        return 504
    if status == "cancelled":
        return 499
    code = code or ""
    if code in STATUS_OF_CODE:
        return STATUS_OF_CODE[code]
    if code.endswith("_UNAVAILABLE"):
        return 503
    if code.endswith("_TIMEOUT"):
        return 504
    if code.endswith("_CANCELLED"):
        return 499
    return 500


def failure_body(node: str, code: str, message: str) -> dict[str, Any]:
    """A NodeResult (wire names) for a call refused before it reached a node."""
    return {
        "executionId": str(uuid.uuid4()),
        "node": node,
        "status": "failed",
        "error": {"code": code, "message": message},
    }


class GatewayError(Exception):
    """A request refused by the gateway itself (nothing was enqueued).

    Attributes:
        status: the HTTP status (:func:`http_status` of ``code``).
        code: an :class:`~ditto_worker.errors.ErrorCode`.
        message: the safe message shown to the caller.
        headers: extra response headers (``WWW-Authenticate``, ``Retry-After``).

    ``status`` overrides the table for the few refusals HTTP names more precisely (400
    for ambiguous credentials).
    """

    def __init__(
        self,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(code)
        self.code = code
        self.message = message
        self.status = status if status is not None else http_status("failed", code)
        self.headers = dict(headers or {})
        if self.status in RETRY_AFTER_S:
            self.headers.setdefault("Retry-After", RETRY_AFTER_S[self.status])

    @classmethod
    def unauthenticated(cls, message: str) -> GatewayError:
        """401 with ``WWW-Authenticate: Bearer``."""
        return cls(ErrorCode.UNAUTHENTICATED, message, {"WWW-Authenticate": "Bearer"})

    def body(self, node: str) -> dict[str, Any]:
        """The NodeResult-shaped body of this refusal."""
        return failure_body(node, self.code, self.message)
