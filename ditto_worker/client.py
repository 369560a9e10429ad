"""The invoke client: send a node call by name, await its NodeResult.

``DittoClient.invoke(node, input)`` returns the same NodeResult shape as the direct SDK
(MEM-NODE-3). Failures are NodeResults too: an unknown node is ``UNKNOWN_NODE`` before
anything is sent; a call past its timeout is ``timeout``/``MEMORY_TIMEOUT`` and revoked; a
cancelled call is ``cancelled``/``MEMORY_CANCELLED`` and revoked (MEM-PY-2). Every message
carries ``expires`` (= the deadline), so a worker never starts a call whose caller has
given up; the deadline also travels in the ``ditto_deadline`` header (MEM-PY-3).

This module never imports tasks or plugins.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import EncodeError, OperationalError
from pydantic import BaseModel, ValidationError

from ditto_worker.celery_app import DEADLINE_HEADER, IN_PROCESS_POLL_S, queue_for
from ditto_worker.contracts import (
    NODE_QUEUES,
    MemoryDeleteOutput,
    MemoryItem,
    MemoryQueryOutput,
    MemorySearchResult,
    NodeResult,
    to_wire,
)
from ditto_worker.errors import ErrorCode
from ditto_worker.ports import CancelToken

__all__ = ["OUTPUT_TYPES", "DittoClient"]

log = logging.getLogger(__name__)

OUTPUT_TYPES: dict[str, Any] = {
    "MEMORY.GET": list[MemoryItem],
    "MEMORY.QUERY": MemoryQueryOutput,
    "MEMORY.SEARCH": list[MemorySearchResult],
    "MEMORY.WRITE": list[MemoryItem],
    "MEMORY.UPDATE": list[MemoryItem],
    "MEMORY.DELETE": MemoryDeleteOutput,
}
"""Node id -> the type of its raw output (MEM-NODE-1)."""

_RESULT_TYPES: dict[str, type[NodeResult[Any]]] = {
    node: NodeResult[output]  # type: ignore[valid-type]
    for node, output in OUTPUT_TYPES.items()
}

_CANCEL_POLL_S = 0.05


def _jsonable(input: Any) -> Any:
    if isinstance(input, BaseModel):
        return to_wire(input)
    return input


class DittoClient:
    """Sends node calls to the fleet and turns replies into NodeResults.

    Args:
        app: a Celery app from :func:`~ditto_worker.celery_app.create_celery_app`
            (the client only sends by task name).
        default_timeout_s: timeout of a call when ``invoke`` is given none, seconds
            (``fleet.callTimeoutS`` in ``ditto.yaml``).
    """

    def __init__(self, app: Celery, *, default_timeout_s: float = 30.0) -> None:
        self.app = app
        self.default_timeout_s = default_timeout_s
        self._poll_s = IN_PROCESS_POLL_S if str(app.conf.broker_url).startswith("memory") else 0.01

    def invoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
    ) -> NodeResult[Any]:
        """Run ``node`` on the fleet and wait for its NodeResult.

        Args:
            node: a node id (``MEMORY.GET`` …).
            input: the node input as JSON-ready data (wire names) or a contract model.
            timeout: seconds to wait; default ``default_timeout_s``.
            cancel: a token; cancelling it revokes the call.
            execution_id: the call's id (the Celery task id); a new uuid4 when omitted.

        Returns:
            The worker's NodeResult, or one with status ``failed`` (``UNKNOWN_NODE``,
            ``INVALID_INPUT`` for input that is not JSON, ``MEMORY_BACKEND_ERROR`` when the
            broker is unreachable or the reply is malformed), ``timeout``
            (``MEMORY_TIMEOUT``) or ``cancelled`` (``MEMORY_CANCELLED``).
        """
        eid = execution_id or str(uuid.uuid4())
        if node not in NODE_QUEUES:
            return NodeResult.failure(eid, node, ErrorCode.UNKNOWN_NODE, f"unknown node {node!r}")
        if cancel is not None and cancel.cancelled:
            return self._cancelled(eid, node, "cancelled before it was sent")
        timeout_s = self.default_timeout_s if timeout is None else timeout
        deadline = time.time() + timeout_s
        try:
            result = self.app.send_task(
                node,
                kwargs={"input": _jsonable(input)},
                task_id=eid,
                queue=queue_for(node),
                expires=datetime.fromtimestamp(deadline, UTC),
                headers={DEADLINE_HEADER: deadline},
            )
        except EncodeError:
            return NodeResult.failure(eid, node, ErrorCode.INVALID_INPUT, "input is not JSON data")
        except OperationalError:
            log.exception("broker unreachable while sending %s", node)
            return NodeResult.failure(
                eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the broker is unreachable"
            )
        return self._await(result, node, eid, deadline, cancel)

    def _await(
        self, result: Any, node: str, eid: str, deadline: float, cancel: CancelToken | None
    ) -> NodeResult[Any]:
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                self._revoke(eid)
                return NodeResult.failure(
                    eid, node, ErrorCode.MEMORY_TIMEOUT, "the call timed out", status="timeout"
                )
            if cancel is not None and cancel.cancelled:
                self._revoke(eid)
                return self._cancelled(eid, node, "the call was cancelled")
            wait_s = remaining if cancel is None else min(remaining, _CANCEL_POLL_S)
            try:
                payload = result.get(timeout=wait_s, interval=self._poll_s, propagate=True)
            except CeleryTimeoutError:
                continue
            except TaskRevokedError:
                if cancel is not None and cancel.cancelled:
                    return self._cancelled(eid, node, "the call was cancelled")
                return NodeResult.failure(
                    eid, node, ErrorCode.MEMORY_TIMEOUT, "the call expired", status="timeout"
                )
            except Exception:
                log.exception("node task %s failed without a NodeResult", node)
                return NodeResult.failure(
                    eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the node task failed"
                )
            return self._parse(payload, node, eid)

    def _parse(self, payload: Any, node: str, eid: str) -> NodeResult[Any]:
        try:
            parsed = _RESULT_TYPES[node].model_validate(payload)
        except ValidationError:
            log.exception("malformed NodeResult from %s", node)
            return NodeResult.failure(
                eid, node, ErrorCode.INVALID_BACKEND_OUTPUT, "the worker's reply is malformed"
            )
        return parsed

    def _cancelled(self, eid: str, node: str, message: str) -> NodeResult[Any]:
        return NodeResult.failure(
            eid, node, ErrorCode.MEMORY_CANCELLED, message, status="cancelled"
        )

    def _revoke(self, eid: str) -> None:
        try:
            self.app.control.revoke(eid)
        except Exception:  # a revoke that cannot be sent is covered by the message's expires
            log.warning("could not broadcast revoke for %s", eid, exc_info=True)

    def close(self) -> None:
        """Release the app's broker and backend connections."""
        self.app.close()
