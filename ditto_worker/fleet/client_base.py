"""The fleet client's parts that both ways of awaiting a reply share: turning a
:class:`~ditto_worker.runtime.calls.Call` into a Celery message, turning a reply into a
NodeResult, revoking, outage logging.

:class:`ClientBase` is the base of :class:`~ditto_worker.fleet.client.DittoClient` (which
sets the attributes declared here); everything before the message and after the reply
(refusing a call before it is sent, in-flight counting, MEM-RUN-6) is the one invoke path,
:class:`~ditto_worker.runtime.calls.CallPath`; the two ways of awaiting a reply are in
:mod:`.client_paths`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu.exceptions import EncodeError, OperationalError
from pydantic import ValidationError

from ditto_worker.config import RuntimeConfig, load_runtime_config
from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ErrorCode
from ditto_worker.fleet.batch import ID, INPUT, batch_task
from ditto_worker.fleet.celery_app import DEADLINE_HEADER, SENT_HEADER, queue_for
from ditto_worker.fleet.coalescing import UNSENT, Coalescer, Pending
from ditto_worker.fleet.failures import LOST_CONNECTION, lost_connection, node_result_of
from ditto_worker.fleet.redis_urls import is_redis_url
from ditto_worker.fleet.results import ResultListener
from ditto_worker.operation import OPERATION_HEADER
from ditto_worker.runtime.calls import Call, CallPath
from ditto_worker.runtime.definition import KindCodes, NodeSpec, WorkerDefinition
from ditto_worker.runtime.trace import trace_headers, trace_repr
from ditto_worker.scope import SCOPE_HEADER

__all__ = [
    "CANCEL_POLL_S",
    "FLAG_WAIT_S",
    "SEEN_WAIT_S",
    "ClientBase",
    "KnownNode",
    "NodeTable",
    "OutageLog",
    "get_key",
    "installed_nodes",
    "is_redis",
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


class ClientBase(CallPath):
    """The shared helpers of a fleet client (module docstring)."""

    app: Celery
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
    _coalescer: Coalescer | None

    def _codes_of(self, node: str) -> KindCodes | None:
        known = self._nodes.get(node)
        return None if known is None else known.codes

    def _node_ids(self) -> Iterable[str]:
        return self._nodes

    def _new_id(self) -> str:
        listener = self._listener
        return listener.new_id() if listener is not None else new_id()

    def _send(self, call: Call) -> None:
        """Send ``call``: through the coalescer when coalescing is on (at once, or in the
        node's next batch, :mod:`ditto_worker.fleet.coalescing`), else as its own message."""
        if self._coalescer is not None:
            self._coalescer.send(call)
        else:
            self._publish(call)

    def _publish(self, call: Call) -> None:
        """Publish ``call`` as its node's Celery message: ``expires`` and the
        ``ditto_deadline`` header (MEM-PY-3), the trusted scope, the operation id, the trace
        ids (also the task's ``argsrepr``)."""
        deadline = call.deadline
        headers: dict[str, Any] = {DEADLINE_HEADER: deadline, SENT_HEADER: time.time()}
        if call.scope is not None:
            headers[SCOPE_HEADER] = call.scope.to_header()
        if call.operation_id is not None:
            headers[OPERATION_HEADER] = call.operation_id
        reprs = self._reprs
        if call.trace:  # run and Graph node ids (never input): headers, and args in Flower/logs
            headers.update(trace_headers(call.trace))
            reprs = {**reprs, "argsrepr": trace_repr(call.trace)}
        self.app.send_task(
            call.node,
            kwargs={"input": call.payload},
            task_id=call.execution_id,
            queue=queue_for(call.node),
            expires=datetime.fromtimestamp(deadline, UTC),
            headers=headers,
            **reprs,
        )
        self._outages.ok(self._broker_at)

    def _publish_batch(self, node: str, batch_id: str, batch: list[Pending]) -> None:
        """Publish ``batch`` as one message of ``node``'s batch task on its own queue
        (:mod:`ditto_worker.fleet.batch`): each call's id, input, deadline, scope,
        operation id, send time and trace in its item; the latest deadline on the message."""
        deadline = max(p.call.deadline for p in batch)
        items = []
        for pending in batch:
            call = pending.call
            item: dict[str, Any] = {
                ID: call.execution_id, INPUT: call.payload,
                DEADLINE_HEADER: call.deadline, SENT_HEADER: pending.sent,
            }  # fmt: skip
            if call.scope is not None:
                item[SCOPE_HEADER] = call.scope.to_header()
            if call.operation_id is not None:
                item[OPERATION_HEADER] = call.operation_id
            if call.trace:
                item.update(trace_headers(call.trace))
            items.append(item)
        reprs = self._reprs and {**self._reprs, "argsrepr": f"({len(items)} calls)"}
        self.app.send_task(
            batch_task(node),
            kwargs={"calls": items},
            task_id=batch_id,
            queue=queue_for(node),
            expires=datetime.fromtimestamp(deadline, UTC),
            headers={DEADLINE_HEADER: deadline, SENT_HEADER: time.time()},
            **reprs,
        )
        self._outages.ok(self._broker_at)

    def _sendfailure(self, exc: Exception, call: Call) -> NodeResult[Any]:
        if isinstance(exc, EncodeError):
            return call.failed(ErrorCode.INVALID_INPUT, "input is not JSON data")
        self._outages.failed(self._broker_at, exc)
        return call.failed(ErrorCode.FLEET_UNAVAILABLE, f"{self._broker_at} is unreachable")

    def _unreachable(self, call: Call, exc: BaseException | None = None) -> NodeResult[Any]:
        self._outages.failed(self._backend_at, exc)
        return call.failed(ErrorCode.FLEET_UNAVAILABLE, f"{self._backend_at} is unreachable")

    def _parse(self, payload: Any, call: Call) -> NodeResult[Any]:
        """The worker's reply as the node's NodeResult (its output parsed once)."""
        try:
            parsed: NodeResult[Any] = self._nodes[call.node].result_type.model_validate(payload)
            return parsed
        except ValidationError:
            log.error("malformed NodeResult from %s", call.node)
            return call.failed(ErrorCode.INVALID_BACKEND_OUTPUT, "the worker's reply is malformed")

    def _from_meta(self, meta: dict[str, Any], call: Call, cancelled: bool) -> NodeResult[Any]:
        """The NodeResult of a task's result-backend record."""
        status = meta.get("status")
        if status == UNSENT:  # its batch was not published (fleet.coalescing)
            cause = EncodeError() if meta.get("result") == "encode" else OperationalError()
            return self._sendfailure(cause, call)
        if status == "SUCCESS":
            return self._parse(meta.get("result"), call)
        failed = node_result_of(meta.get("result")) if status == "FAILURE" else None
        if failed is not None:  # a NodeResult that is not success (fleet.failures)
            return self._parse(failed, call)
        if status == "REVOKED":
            return call.cancelled() if cancelled else call.timed_out("the call expired")
        if status == "FAILURE" and lost_connection(meta.get("result")):
            log.warning("node task %s lost the fleet's connection; FLEET_UNAVAILABLE", call.node)
            return call.failed(ErrorCode.FLEET_UNAVAILABLE, LOST_CONNECTION)
        log.error("node task %s ended %s without a NodeResult", call.node, status)
        return call.failed(ErrorCode.MEMORY_BACKEND_ERROR, "the node task failed")

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
