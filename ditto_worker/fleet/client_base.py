"""The fleet client's parts that every call path shares: refusing a call before it is
sent, sending it, turning a reply into a NodeResult, revoking, outage logging.

:class:`ClientBase` is the base of :class:`~ditto_worker.fleet.client.DittoClient` (which
sets the attributes declared here); the two ways of awaiting a reply are in
:mod:`.client_paths`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu.exceptions import EncodeError
from pydantic import BaseModel, ValidationError

from ditto_worker.config import RuntimeConfig, load_runtime_config
from ditto_worker.contracts import NodeResult, NodeStatus, to_wire
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.fleet.celery_app import DEADLINE_HEADER, SENT_HEADER, queue_for
from ditto_worker.fleet.failures import LOST_CONNECTION, lost_connection, node_result_of
from ditto_worker.fleet.redis_urls import is_redis_url
from ditto_worker.fleet.results import ResultListener
from ditto_worker.operation import OPERATION_HEADER, check_operation_id
from ditto_worker.runtime.cancel import CancelToken, stop_outcome
from ditto_worker.runtime.context import call_deadline
from ditto_worker.runtime.definition import KindCodes, NodeSpec, WorkerDefinition
from ditto_worker.runtime.execute import unknown_node
from ditto_worker.runtime.trace import trace_headers, trace_repr
from ditto_worker.scope import SCOPE_HEADER, Scope, parse_scope

__all__ = [
    "CANCEL_POLL_S",
    "FLAG_WAIT_S",
    "SEEN_WAIT_S",
    "ClientBase",
    "KnownNode",
    "NodeTable",
    "OutageLog",
    "Route",
    "failure",
    "get_key",
    "installed_nodes",
    "is_redis",
    "jsonable",
    "known_nodes",
    "new_id",
    "settle_future",
]

log = logging.getLogger("ditto_worker.fleet.client")  # the client's logger, as before

NodeTable = Mapping[str, tuple[WorkerDefinition, NodeSpec]]
"""Node id -> (its worker definition, its spec): what a client knows of a node."""

CANCEL_POLL_S = 0.05
FLAG_WAIT_S = 2.0  # how long a cancelled call waits for its cancel flag to be raised
MAX_PENDING_REVOKES = 256  # revoke broadcasts queued at most; more are skipped
SEEN_WAIT_S = 1.0  # how long a timed-out call waits to read its queue's heartbeat
OUTAGE_LOG_EVERY_S = 60.0  # an outage is logged once, then at most once a minute
UNKNOWN_KIND = KindCodes(
    ErrorCode.MEMORY_CANCELLED, ErrorCode.MEMORY_TIMEOUT, ErrorCode.MEMORY_BACKEND_ERROR
)


@dataclass(frozen=True)
class Route:
    """The host facts a call's message headers carry: trusted scope and operation id."""

    scope: Scope | None
    operation_id: str | None


@dataclass(frozen=True)
class KnownNode:
    """What a client knows of a node: the NodeResult type to parse and its kind's codes."""

    result_type: Any  # NodeResult[<the node's output type>] (or NodeResult[Any])
    codes: KindCodes


def known_nodes(nodes: NodeTable) -> dict[str, KnownNode]:
    """Node id -> :class:`KnownNode`, from a node table."""
    known = {}
    for node, (definition, spec) in nodes.items():
        output = spec.output if spec.output is not None else Any
        known[node] = KnownNode(NodeResult[output], definition.kind_codes)  # type: ignore[valid-type]
    return known


def installed_nodes(config: RuntimeConfig | None = None) -> NodeTable:
    """The node table of every installed and configured worker kind."""
    from ditto_worker.runtime.registry import node_table, worker_definitions

    return node_table(worker_definitions(config or load_runtime_config(None)))


def jsonable(input: Any) -> Any:
    """A contract model as wire JSON data; anything else as given."""
    return to_wire(input) if isinstance(input, BaseModel) else input


def failure(
    eid: str, node: str, code: str, message: str, status: NodeStatus = "failed"
) -> NodeResult[Any]:
    """A non-successful NodeResult."""
    return NodeResult.failure(eid, node, code, message, status=status)


def is_redis(url: str) -> bool:
    """True for a Redis URL (``redis://``, ``rediss://``, ``unix://``, ``sentinel://``)."""
    return is_redis_url(url)  # redis://, rediss://, unix://, sentinel://


class OutageLog:
    """Logs an unreachable server once per outage (then once a minute), not once per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def failed(self, what: str, exc: BaseException | None = None) -> None:
        """``what`` failed: log it unless it was logged less than a minute ago."""
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(what, -OUTAGE_LOG_EVERY_S) < OUTAGE_LOG_EVERY_S:
                return
            self._last[what] = now
        cause = f" ({type(exc).__name__})" if exc is not None else ""
        log.error("%s is unreachable%s; calls fail with FLEET_UNAVAILABLE", what, cause)

    def ok(self, what: str) -> None:
        """``what`` answered: log its recovery if it was down."""
        if self._last:  # a dict read: the common case costs no lock
            with self._lock:
                if self._last.pop(what, None) is not None:
                    log.info("%s is reachable again", what)


async def get_key(listener: ResultListener, key: str) -> bytes | str | None:
    """``GET key`` on the listener's Redis (run on its loop)."""
    value: bytes | str | None = await listener.client.get(key)
    return value


def settle_future(future: ThreadFuture[None]) -> None:
    """Complete ``future`` (a no-op when it already is)."""
    with contextlib.suppress(Exception):  # already settled
        future.set_result(None)


def new_id() -> str:
    """A new execution id (uuid4)."""
    import uuid

    return str(uuid.uuid4())


class ClientBase:
    """The shared helpers of a fleet client (module docstring)."""

    app: Celery
    default_timeout_s: float
    _scope: Scope | None
    _reprs: dict[str, Any]
    _nodes: dict[str, KnownNode]
    _broker_at: str
    _backend_at: str
    _outages: OutageLog
    _poll_s: float
    _listener: ResultListener | None
    _senders: ThreadPoolExecutor
    _revokers: ThreadPoolExecutor
    _pending_revokes: int
    _in_flight: int
    _idle: threading.Condition
    _closed: bool

    def _codes(self, node: str) -> KindCodes:
        known = self._nodes.get(node)
        return known.codes if known is not None else UNKNOWN_KIND

    def _timed_out(
        self, eid: str, node: str, message: str = "the call timed out"
    ) -> NodeResult[Any]:
        return failure(eid, node, self._codes(node).timeout, message, "timeout")

    def _cancelled(
        self, eid: str, node: str, message: str = "the call was cancelled"
    ) -> NodeResult[Any]:
        return failure(eid, node, self._codes(node).cancelled, message, "cancelled")

    def _settle(
        self, result: NodeResult[Any], cancel: CancelToken | None, deadline: float
    ) -> NodeResult[Any]:
        """MEM-RUN-6 on the caller's side: a call that ended ``cancelled`` or ``timeout``
        (the worker's answer, or the client's own at the deadline) ends as the caller's
        token says (:meth:`~ditto_worker.runtime.cancel.CancelToken.outcome`) — a cancel
        this caller requested before the deadline is ``cancelled`` even when it reached
        the worker after it, and a deadline that passed before any cancel is ``timeout``."""
        if result.status not in ("cancelled", "timeout"):
            return result
        reason = stop_outcome(cancel, deadline)
        if reason is None or reason == result.status:
            return result
        if reason == "cancelled":
            return self._cancelled(result.execution_id, result.node)
        return self._timed_out(result.execution_id, result.node)

    def _start(
        self,
        node: str,
        execution_id: str | None,
        cancel: CancelToken | None,
        scope: Scope | Mapping[str, str] | None,
        timeout: float | None,
        deadline: float | None = None,
        operation_id: str | None = None,
    ) -> tuple[str, Route, float] | NodeResult[Any]:
        """``(execution id, route, deadline)`` of a call, or the NodeResult refusing it
        before anything is sent (unknown node, already cancelled, malformed scope or
        operation id)."""
        listener = self._listener
        eid = execution_id or (listener.new_id() if listener is not None else new_id())
        if node not in self._nodes:
            return unknown_node(eid, node, self._nodes)
        until = call_deadline(self.default_timeout_s, timeout, deadline)
        if cancel is not None and cancel.cancelled:
            if cancel.outcome(until) == "timeout":
                return self._timed_out(eid, node, "the call timed out before it was sent")
            return self._cancelled(eid, node, "cancelled before it was sent")
        try:
            bound = self._scope if scope is None else parse_scope(scope)
            route = Route(bound, check_operation_id(operation_id))
        except MemoryError as exc:
            return failure(eid, node, exc.code, exc.safe_message)
        return eid, route, until

    @contextmanager
    def _tracked(self) -> Iterator[bool]:
        """Count the call in flight; yields False (and counts nothing) once closed."""
        with self._idle:
            if self._closed:
                yield False
                return
            self._in_flight += 1
        try:
            yield True
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _send(
        self, node: str, payload: Any, eid: str, deadline: float, route: Route,
        trace: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        headers: dict[str, Any] = {DEADLINE_HEADER: deadline, SENT_HEADER: time.time()}
        if route.scope is not None:
            headers[SCOPE_HEADER] = route.scope.to_header()
        if route.operation_id is not None:
            headers[OPERATION_HEADER] = route.operation_id
        reprs = self._reprs
        if trace:  # run and Graph node ids (never input): headers, and args in Flower/logs
            headers.update(trace_headers(trace))
            reprs = {**reprs, "argsrepr": trace_repr(trace)}
        self.app.send_task(
            node,
            kwargs={"input": payload},
            task_id=eid,
            queue=queue_for(node),
            expires=datetime.fromtimestamp(deadline, UTC),
            headers=headers,
            **reprs,
        )
        self._outages.ok(self._broker_at)

    def _sendfailure(self, exc: Exception, node: str, eid: str) -> NodeResult[Any]:
        if isinstance(exc, EncodeError):
            return failure(eid, node, ErrorCode.INVALID_INPUT, "input is not JSON data")
        self._outages.failed(self._broker_at, exc)
        return failure(eid, node, ErrorCode.FLEET_UNAVAILABLE, f"{self._broker_at} is unreachable")

    def _parse(self, payload: Any, node: str, eid: str) -> NodeResult[Any]:
        try:
            parsed: NodeResult[Any] = self._nodes[node].result_type.model_validate(payload)
            return parsed
        except ValidationError:
            log.error("malformed NodeResult from %s", node)
            return failure(
                eid, node, ErrorCode.INVALID_BACKEND_OUTPUT, "the worker's reply is malformed"
            )

    def _from_meta(
        self, meta: dict[str, Any], node: str, eid: str, cancelled: bool
    ) -> NodeResult[Any]:
        status = meta.get("status")
        if status == "SUCCESS":
            return self._parse(meta.get("result"), node, eid)
        failed = node_result_of(meta.get("result")) if status == "FAILURE" else None
        if failed is not None:  # a NodeResult that is not success (fleet.failures)
            return self._parse(failed, node, eid)
        if status == "REVOKED":
            if cancelled:
                return self._cancelled(eid, node)
            return self._timed_out(eid, node, "the call expired")
        if status == "FAILURE" and lost_connection(meta.get("result")):
            log.warning("node task %s lost the fleet's connection; FLEET_UNAVAILABLE", node)
            return failure(eid, node, ErrorCode.FLEET_UNAVAILABLE, LOST_CONNECTION)
        log.error("node task %s ended %s without a NodeResult", node, status)
        return failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the node task failed")

    def _revoke(self, eid: str) -> None:
        try:
            self.app.control.revoke(eid)
        except Exception:  # a revoke that cannot be sent is covered by expires + cancel flag
            log.warning("could not broadcast revoke for %s", eid)

    def _revoke_later(self, eid: str) -> None:
        """Broadcast the revoke of ``eid`` on the revoke thread, without waiting for it."""
        with self._idle:
            if self._pending_revokes >= MAX_PENDING_REVOKES or self._closed:
                return  # overloaded or closing: the cancel flag and expires still hold
            self._pending_revokes += 1

        def run() -> None:
            try:
                self._revoke(eid)
            finally:
                with self._idle:
                    self._pending_revokes -= 1

        try:
            self._revokers.submit(run)
        except RuntimeError:  # shut down meanwhile
            with self._idle:
                self._pending_revokes -= 1
