"""The invoke client: send a node call by name, await its NodeResult (sync or asyncio).

``DittoClient.invoke(node, input)`` and ``await DittoClient.ainvoke(node, input)`` return
the same NodeResult as the direct SDK (MEM-NODE-3). Failures are NodeResults too: an
unknown node is ``UNKNOWN_NODE`` (naming the closest known ids) before anything is sent;
a call past its timeout is ``timeout`` with its kind's timeout code (``MEMORY_TIMEOUT``
…); a cancelled call is ``cancelled`` with its kind's cancelled code (``MEMORY_CANCELLED``
…; MEM-PY-2). Cancelling the asyncio task awaiting ``ainvoke`` cancels the call and
re-raises ``asyncio.CancelledError``.

Every message carries ``expires`` (= the deadline) and the ``ditto_deadline`` header
(MEM-PY-3): a worker never starts a call whose caller has given up, and stops a running one
at its deadline. On timeout or cancel the client revokes the task and raises the call's
cancel flag (:mod:`ditto_worker.fleet.cancellation`), which interrupts a running call in the
plugin's driver. A committed write is never rolled back by a cancel (MEM-RUN-2).

The node ids a client knows, with their output types and their kind's codes, come from the
worker definitions (``nodes=``, or every installed and configured kind): an unknown node
is answered before anything is sent, and a success's output is parsed once, here.

Two ways of awaiting results:

* Redis result backend (the fleet): one :class:`~ditto_worker.fleet.results.ResultListener` per
  client — one pub/sub connection (one pattern subscription for the ids the client makes)
  and one event loop thread for all calls, sync and async. A sync ``invoke`` publishes its
  message from the calling thread and blocks on a thread-safe future; ``ainvoke`` publishes
  on a small pool of sender threads (``send_threads``; kombu's publish blocks). Threads and
  Redis connections stay bounded however many calls are in flight.
* in-process (``memory://``): Celery's ``AsyncResult`` polled every millisecond; ``ainvoke``
  runs ``invoke`` on the sender threads.

This module never imports tasks or plugins.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import TimeoutError as ThreadTimeoutError
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import EncodeError, OperationalError
from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError

from ditto_worker.config import FleetSettings, RuntimeConfig, load_runtime_config
from ditto_worker.contracts import NodeResult, NodeStatus, to_wire
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.fleet.cancellation import CANCEL_CHANNEL, cancel_key
from ditto_worker.fleet.celery_app import (
    DEADLINE_HEADER,
    IN_PROCESS_POLL_S,
    SENT_HEADER,
    create_celery_app,
    queue_for,
    result_backend_url,
)
from ditto_worker.fleet.failures import NodeFailed, node_result_of
from ditto_worker.fleet.heartbeat import describe_last_seen, heartbeat_key
from ditto_worker.fleet.redaction import args_repr
from ditto_worker.fleet.redis_urls import is_redis_url, server_address
from ditto_worker.fleet.results import ResultListener
from ditto_worker.operation import OPERATION_HEADER, check_operation_id
from ditto_worker.runtime.cancel import CancelToken, local_registry, stop_outcome
from ditto_worker.runtime.context import call_deadline
from ditto_worker.runtime.definition import KindCodes, NodeSpec, WorkerDefinition
from ditto_worker.runtime.execute import unknown_node
from ditto_worker.runtime.trace import clean_trace, trace_headers, trace_repr
from ditto_worker.scope import SCOPE_HEADER, Scope, parse_scope

__all__ = ["DittoClient", "NodeTable", "connect"]

log = logging.getLogger(__name__)

NodeTable = Mapping[str, tuple[WorkerDefinition, NodeSpec]]
"""Node id -> (its worker definition, its spec): what a client knows of a node."""

_CANCEL_POLL_S = 0.05
_SLACK_S = 5.0  # how long past its deadline a call may take to report (slow broker)
_FLAG_WAIT_S = 2.0  # how long a cancelled call waits for its cancel flag to be raised
_MAX_PENDING_REVOKES = 256  # revoke broadcasts queued at most; more are skipped
_SEEN_WAIT_S = 1.0  # how long a timed-out call waits to read its queue's heartbeat
_OUTAGE_LOG_EVERY_S = 60.0  # an outage is logged once, then at most once a minute
_UNKNOWN = KindCodes(ErrorCode.MEMORY_CANCELLED, ErrorCode.MEMORY_TIMEOUT,
                     ErrorCode.MEMORY_BACKEND_ERROR)  # fmt: skip


@dataclass(frozen=True)
class _Route:
    """The host facts a call's message headers carry: trusted scope and operation id."""

    scope: Scope | None
    operation_id: str | None


@dataclass(frozen=True)
class _Node:
    result_type: Any  # NodeResult[<the node's output type>] (or NodeResult[Any])
    codes: KindCodes


def _known(nodes: NodeTable) -> dict[str, _Node]:
    known = {}
    for node, (definition, spec) in nodes.items():
        output = spec.output if spec.output is not None else Any
        known[node] = _Node(NodeResult[output], definition.kind_codes)  # type: ignore[valid-type]
    return known


def _installed(config: RuntimeConfig | None = None) -> NodeTable:
    from ditto_worker.runtime.registry import node_table, worker_definitions

    return node_table(worker_definitions(config or load_runtime_config(None)))


def _jsonable(input: Any) -> Any:
    return to_wire(input) if isinstance(input, BaseModel) else input


def _failure(
    eid: str, node: str, code: str, message: str, status: NodeStatus = "failed"
) -> NodeResult[Any]:
    return NodeResult.failure(eid, node, code, message, status=status)


def _is_redis(url: str) -> bool:
    return is_redis_url(url)  # redis://, rediss://, unix://, sentinel://


class _OutageLog:
    """Logs an unreachable server once per outage (then once a minute), not once per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def failed(self, what: str, exc: BaseException | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(what, -_OUTAGE_LOG_EVERY_S) < _OUTAGE_LOG_EVERY_S:
                return
            self._last[what] = now
        cause = f" ({type(exc).__name__})" if exc is not None else ""
        log.error("%s is unreachable%s; calls fail with FLEET_UNAVAILABLE", what, cause)

    def ok(self, what: str) -> None:
        if self._last:  # a dict read: the common case costs no lock
            with self._lock:
                if self._last.pop(what, None) is not None:
                    log.info("%s is reachable again", what)


class DittoClient:
    """Sends node calls to the fleet and turns replies into NodeResults.

    Args:
        app: a Celery app from :func:`~ditto_worker.fleet.celery_app.create_celery_app`; the
            client only sends by task name. For a Redis fleet prefer :meth:`from_fleet`.
        default_timeout_s: timeout of a call when none is given, seconds
            (``fleet.callTimeoutS`` in ``ditto.yaml``).
        result_backend: a Redis URL to read results from with one
            :class:`~ditto_worker.fleet.results.ResultListener`; ``None`` polls ``app``'s
            backend.
        send_threads: threads publishing the messages of ``ainvoke`` (kombu's publish
            blocks).
        scope: the trusted tenant scope of every call that names none (a
            :class:`~ditto_worker.scope.Scope` or ``{"tenant", "user", "space"?}``);
            ``None``: calls are unscoped unless they pass ``scope=``.
        nodes: the nodes this client may call (a node table of worker definitions,
            :func:`~ditto_worker.runtime.registry.node_table`); ``None``: every installed
            and configured worker kind.
        sentinel_master: ``fleet.sentinelMasterName`` for a ``sentinel://`` result backend.
        sentinel_kwargs: connection options of the sentinels themselves (``sentinel_kwargs``
            of ``fleet.resultBackendTransportOptions``, e.g. their password).
        log_content: ``fleet.logContent``: let Celery show each call's input in its
            ``task-sent`` event (debugging only); ``False``: a placeholder
            (:mod:`ditto_worker.fleet.redaction`).

    Raises:
        ConfigError: ``scope`` is malformed.
    """

    def __init__(
        self,
        app: Celery,
        *,
        default_timeout_s: float = 30.0,
        result_backend: str | None = None,
        send_threads: int = 4,
        scope: Scope | Mapping[str, str] | None = None,
        nodes: NodeTable | None = None,
        log_content: bool = False,
        sentinel_master: str | None = None,
        sentinel_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            self._scope = parse_scope(scope)
        except MemoryError as exc:
            raise ConfigError(exc.safe_message) from None
        self.app = app
        self.default_timeout_s = default_timeout_s
        self._reprs = args_repr(log_content)
        self._nodes = _known(_installed() if nodes is None else nodes)
        self._broker_at = f"the broker ({server_address(str(app.conf.broker_url or ''))})"
        backend_url = result_backend or str(app.conf.result_backend or "")
        self._backend_at = f"the result backend ({server_address(backend_url)})"
        self._outages = _OutageLog()
        self._poll_s = IN_PROCESS_POLL_S if str(app.conf.broker_url).startswith("memory") else 0.01
        self._listener = (
            ResultListener(
                result_backend,
                max_connections=send_threads,
                sentinel_master=sentinel_master,
                sentinel_kwargs=sentinel_kwargs,
            )  # fmt: skip
            if result_backend and _is_redis(result_backend)
            else None
        )
        self._senders = ThreadPoolExecutor(send_threads, thread_name_prefix="ditto-send")
        # revokes are best effort (the cancel flag and ``expires`` are what hold), so they
        # get their own thread and never delay a send; past _MAX_PENDING_REVOKES they are
        # skipped
        self._revokers = ThreadPoolExecutor(1, thread_name_prefix="ditto-revoke")
        self._pending_revokes = 0
        self._in_flight = 0
        self._idle = threading.Condition()
        self._closed = False

    @classmethod
    def from_fleet(
        cls, fleet: FleetSettings, *, nodes: NodeTable | None = None, **kwargs: Any
    ) -> DittoClient:
        """A client of a broker fleet: a sending-only app plus a Redis result listener."""
        table = _installed() if nodes is None else nodes
        backend = result_backend_url(fleet)
        app = create_celery_app(fleet, results=not _is_redis(backend), nodes=list(table))
        kwargs.setdefault("default_timeout_s", fleet.call_timeout_s)
        kwargs.setdefault("log_content", fleet.log_content)
        kwargs.setdefault("sentinel_master", fleet.sentinel_master_name or None)
        sentinels = fleet.result_backend_transport_options.get("sentinel_kwargs")
        kwargs.setdefault("sentinel_kwargs", sentinels)
        return cls(app, result_backend=backend, nodes=table, **kwargs)

    @property
    def nodes(self) -> list[str]:
        """The node ids this client knows."""
        return list(self._nodes)

    # --- public API -----------------------------------------------------------------------

    def invoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        deadline: float | None = None,
        trace: Mapping[str, str] | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[Any]:
        """Run ``node`` on the fleet and wait for its NodeResult.

        Args:
            node: a node id (``MEMORY.GET`` …).
            input: the node input as JSON-ready data (wire names) or a contract model.
            timeout: seconds to wait; default ``default_timeout_s``.
            cancel: a token; cancelling it cancels the call (revoke + cancel flag).
            execution_id: the call's id (the Celery task id); a new uuid4 when omitted.
            scope: the tenant scope the call acts for (a :class:`~ditto_worker.scope.Scope`
                or ``{"tenant", "user", "space"?}``), sent in the ``ditto_scope`` header;
                default: the client's ``scope``. The service sets it from its authenticated
                identity, never from model output (:mod:`ditto_worker.scope`).
            deadline: an absolute deadline (``time.time()`` seconds), e.g. a parent call's
                for a sub-call; the earlier of it and ``timeout`` holds.
            trace: tracing ids ``{run_id, graph, graph_node}`` (a Graph run sets them),
                sent as message headers and as the task's ``argsrepr``, which Flower and
                the worker log show; ids only (:mod:`ditto_worker.runtime.trace`).
            operation_id: the caller's operation id (MEM-RUN-7,
                :mod:`ditto_worker.operation`), sent in the ``ditto_operation`` header: one
                id per intended effect across attempts (a replay gets a new execution id,
                the same operation id); MEMORY mutations apply it at most once.

        Returns:
            The worker's NodeResult, or one with status ``failed`` (``UNKNOWN_NODE``;
            ``INVALID_INPUT`` for input that is not JSON or a malformed operation id;
            ``PERMISSION_DENIED`` for a
            malformed scope or one the worker does not serve; ``FLEET_UNAVAILABLE`` when
            the broker or result backend is unreachable, naming its ``host:port``;
            ``MEMORY_BACKEND_ERROR`` when the client is closed;
            ``INVALID_BACKEND_OUTPUT`` for a malformed reply), ``timeout`` (the kind's
            timeout code; on a Redis fleet its message says when a worker for the node's
            queue was last seen, :mod:`ditto_worker.fleet.heartbeat`) or ``cancelled`` (the
            kind's cancelled code).
        """
        start = self._start(node, execution_id, cancel, scope, timeout, deadline, operation_id)
        if isinstance(start, NodeResult):
            return start
        eid, bound, deadline = start
        with self._tracked() as accepted:
            if not accepted:
                return _failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the client is closed")
            traced = clean_trace(trace)
            if self._listener is None:
                polled = self._invoke_polling(node, _jsonable(input), eid, deadline, cancel,
                                              bound, traced)  # fmt: skip
                return self._settle(polled, cancel, deadline)
            try:
                heard = self._invoke_listening(node, _jsonable(input), eid, deadline, cancel,
                                               bound, traced)  # fmt: skip
                return self._settle(heard, cancel, deadline)
            except Exception:
                log.exception("unexpected error in %s", node)
                return _failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the call failed")

    async def ainvoke(
        self,
        node: str,
        input: Any,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        execution_id: str | None = None,
        scope: Scope | Mapping[str, str] | None = None,
        deadline: float | None = None,
        trace: Mapping[str, str] | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[Any]:
        """``invoke`` for asyncio: same arguments, same NodeResult.

        Raises:
            asyncio.CancelledError: when the awaiting task is cancelled; the call is
                cancelled on the fleet first (revoke + cancel flag), MEM-PY-2.
        """
        start = self._start(node, execution_id, cancel, scope, timeout, deadline, operation_id)
        if isinstance(start, NodeResult):
            return start
        eid, bound, deadline = start
        with self._tracked() as accepted:
            if not accepted:
                return _failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the client is closed")
            if self._listener is None:
                token = cancel or CancelToken()
                call = functools.partial(
                    self.invoke, node, input, timeout=deadline - time.time(), cancel=token,
                    execution_id=eid, scope=bound.scope, trace=trace,
                    operation_id=bound.operation_id,
                )  # fmt: skip
                try:
                    return await asyncio.get_running_loop().run_in_executor(self._senders, call)
                except asyncio.CancelledError:
                    token.cancel()
                    raise
            try:
                heard = await self._acall(node, _jsonable(input), eid, deadline, cancel, bound,
                                          clean_trace(trace))  # fmt: skip
                return self._settle(heard, cancel, deadline)
            except asyncio.CancelledError:
                # the awaiting task is cancelled at once; raise the call's cancel flag before
                # re-raising, so a caller that exits right away still leaves it cancelled
                flag = self._listener.submit(self._acancel(eid, deadline))
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.wrap_future(flag), _FLAG_WAIT_S)
                raise

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain calls already accepted (up to ``timeout_s``), then release connections.

        New calls after ``close`` fail with ``MEMORY_BACKEND_ERROR``. The client owns no
        plugin and closes none (MEM-RUN-3).
        """
        self._closed = True
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)
        if self._listener is not None:
            self._listener.close()
        self._senders.shutdown(wait=True)
        self._revokers.shutdown(wait=True)
        self.app.close()

    @property
    def in_flight(self) -> int:
        """Calls accepted and not yet answered."""
        return self._in_flight

    # --- shared helpers -------------------------------------------------------------------

    def _codes(self, node: str) -> KindCodes:
        known = self._nodes.get(node)
        return known.codes if known is not None else _UNKNOWN

    def _timed_out(
        self, eid: str, node: str, message: str = "the call timed out"
    ) -> NodeResult[Any]:
        return _failure(eid, node, self._codes(node).timeout, message, "timeout")

    def _cancelled(
        self, eid: str, node: str, message: str = "the call was cancelled"
    ) -> NodeResult[Any]:
        return _failure(eid, node, self._codes(node).cancelled, message, "cancelled")

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
    ) -> tuple[str, _Route, float] | NodeResult[Any]:
        """``(execution id, route, deadline)`` of a call, or the NodeResult refusing it
        before anything is sent (unknown node, already cancelled, malformed scope or
        operation id)."""
        listener = self._listener
        eid = execution_id or (listener.new_id() if listener is not None else _new_id())
        if node not in self._nodes:
            return unknown_node(eid, node, self._nodes)
        until = call_deadline(self.default_timeout_s, timeout, deadline)
        if cancel is not None and cancel.cancelled:
            if cancel.outcome(until) == "timeout":
                return self._timed_out(eid, node, "the call timed out before it was sent")
            return self._cancelled(eid, node, "cancelled before it was sent")
        try:
            bound = self._scope if scope is None else parse_scope(scope)
            route = _Route(bound, check_operation_id(operation_id))
        except MemoryError as exc:
            return _failure(eid, node, exc.code, exc.safe_message)
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
        self, node: str, payload: Any, eid: str, deadline: float, route: _Route,
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

    def _send_failure(self, exc: Exception, node: str, eid: str) -> NodeResult[Any]:
        if isinstance(exc, EncodeError):
            return _failure(eid, node, ErrorCode.INVALID_INPUT, "input is not JSON data")
        self._outages.failed(self._broker_at, exc)
        return _failure(eid, node, ErrorCode.FLEET_UNAVAILABLE, f"{self._broker_at} is unreachable")

    def _parse(self, payload: Any, node: str, eid: str) -> NodeResult[Any]:
        try:
            parsed: NodeResult[Any] = self._nodes[node].result_type.model_validate(payload)
            return parsed
        except ValidationError:
            log.error("malformed NodeResult from %s", node)
            return _failure(
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
        log.error("node task %s ended %s without a NodeResult", node, status)
        return _failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the node task failed")

    def _revoke(self, eid: str) -> None:
        try:
            self.app.control.revoke(eid)
        except Exception:  # a revoke that cannot be sent is covered by expires + cancel flag
            log.warning("could not broadcast revoke for %s", eid)

    def _revoke_later(self, eid: str) -> None:
        """Broadcast the revoke of ``eid`` on the revoke thread, without waiting for it."""
        with self._idle:
            if self._pending_revokes >= _MAX_PENDING_REVOKES or self._closed:
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

    # --- Redis fleet: the listener path ---------------------------------------------------

    def _invoke_listening(
        self, node: str, payload: Any, eid: str, deadline: float, cancel: CancelToken | None,
        route: _Route, trace: Mapping[str, str] | None = None,
    ) -> NodeResult[Any]:  # fmt: skip
        """The sync path: publish from this thread, block on the listener's future."""
        listener = self._listener
        assert listener is not None
        result, setup = listener.expect(eid)
        stop: ThreadFuture[None] = ThreadFuture()
        unregister = cancel.on_cancel(lambda: _settle(stop)) if cancel is not None else None
        try:
            if setup is not None:
                try:
                    setup.result(timeout=max(0.0, deadline - time.time()))
                except ThreadTimeoutError:
                    return self._timed_out(eid, node, "the fleet did not take the call in time")
                except RedisError as exc:
                    return self._unreachable(eid, node, exc)
            try:
                self._send(node, payload, eid, deadline, route, trace)
            except (EncodeError, OperationalError) as exc:
                return self._send_failure(exc, node, eid)
            waited: list[ThreadFuture[Any]] = [result, stop]
            wait_futures(waited, timeout=max(0.0, deadline - time.time()),
                         return_when=FIRST_COMPLETED)  # fmt: skip
            if result.done() and not result.cancelled():
                return self._from_meta(result.result(), node, eid, stop.done())
            if stop.done():
                with contextlib.suppress(Exception):
                    listener.submit(self._acancel(eid, deadline)).result(_FLAG_WAIT_S)
                return self._cancelled(eid, node)
            # past the deadline the worker stops the call itself (ditto_deadline header) and
            # never starts it (expires): no flag needed, the revoke is a courtesy
            self._revoke_later(eid)
            return self._timed_out(eid, node, self._with_last_seen(node, "the call timed out"))
        finally:
            if unregister is not None:
                unregister()
            listener.forget(eid)

    def _unreachable(
        self, eid: str, node: str, exc: BaseException | None = None
    ) -> NodeResult[Any]:
        self._outages.failed(self._backend_at, exc)
        message = f"{self._backend_at} is unreachable"
        return _failure(eid, node, ErrorCode.FLEET_UNAVAILABLE, message)

    async def _acall(
        self, node: str, payload: Any, eid: str, deadline: float, cancel: CancelToken | None,
        route: _Route, trace: Mapping[str, str] | None = None,
    ) -> NodeResult[Any]:  # fmt: skip
        """The asyncio path: publish on a sender thread, await the listener's future."""
        listener = self._listener
        assert listener is not None
        loop = asyncio.get_running_loop()
        cancelled = asyncio.Event()

        def on_cancel() -> None:  # any thread; the call may have ended and its loop closed
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(cancelled.set)

        unregister = cancel.on_cancel(on_cancel) if cancel else None
        result, setup = listener.expect(eid)
        waiter: asyncio.Future[Any] | None = None
        try:
            if setup is not None:
                await asyncio.wait_for(asyncio.wrap_future(setup), deadline - time.time())
            send = loop.run_in_executor(self._senders, self._send, node, payload, eid, deadline,
                                        route, trace)  # fmt: skip
            try:  # a send still queued at the deadline may go out later: it expires unrun
                await asyncio.wait_for(send, max(0.0, deadline - time.time()))
            except (EncodeError, OperationalError) as exc:
                return self._send_failure(exc, node, eid)
            answer = asyncio.wrap_future(result)
            waiting: set[asyncio.Future[Any]] = {answer}
            if cancel is not None:  # a call that cannot be cancelled waits on its answer only
                waiter = loop.create_task(cancelled.wait())
                waiting.add(waiter)
            await asyncio.wait(
                waiting, timeout=max(0.0, deadline - time.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )  # fmt: skip
            if answer.done() and not answer.cancelled():
                return self._from_meta(answer.result(), node, eid, cancelled.is_set())
            answer.cancel()
            if cancelled.is_set():
                await asyncio.wrap_future(listener.submit(self._acancel(eid, deadline)))
                return self._cancelled(eid, node)
            self._revoke_later(eid)
            seen = await self._alast_seen(node)
            return self._timed_out(eid, node, f"the call timed out: {seen}" if seen else
                                   "the call timed out")  # fmt: skip
        except TimeoutError:
            self._revoke_later(eid)
            return self._timed_out(eid, node, "the fleet did not take the call in time")
        except RedisError as exc:
            return self._unreachable(eid, node, exc)
        finally:
            if waiter is not None:
                waiter.cancel()
            if unregister is not None:
                unregister()
            listener.forget(eid)

    def _with_last_seen(self, node: str, message: str) -> str:
        """``message`` plus when a worker for ``node``'s queue was last seen
        (:mod:`ditto_worker.fleet.heartbeat`); read only for a call that timed out."""
        listener = self._listener
        if listener is None:
            return message
        queue = queue_for(node)
        try:
            raw = listener.submit(_get(listener, heartbeat_key(queue))).result(_SEEN_WAIT_S)
        except Exception:  # Redis down or slow: the plain message
            return message
        return f"{message}: {describe_last_seen(queue, raw)}"

    async def _alast_seen(self, node: str) -> str | None:
        """:meth:`_with_last_seen` for the asyncio path: the sentence, or ``None``."""
        listener = self._listener
        if listener is None:
            return None
        queue = queue_for(node)
        try:
            read = listener.submit(_get(listener, heartbeat_key(queue)))
            raw = await asyncio.wait_for(asyncio.wrap_future(read), _SEEN_WAIT_S)
        except Exception:
            return None
        return describe_last_seen(queue, raw)

    async def _acancel(self, eid: str, deadline: float) -> None:
        """Flag ``eid`` cancelled (stops it if running, prevents it if not) and revoke it.

        Runs on the listener's loop."""
        listener = self._listener
        assert listener is not None
        ttl_s = max(1, int(deadline - time.time()) + 60)
        try:
            await listener.client.set(cancel_key(eid), b"1", ex=ttl_s)
            await listener.client.publish(CANCEL_CHANNEL, eid)
        except RedisError:
            log.warning("could not raise the cancel flag of %s", eid)
        self._revoke_later(eid)

    # --- in-process: the polling path ----------------------------------------------------

    def _invoke_polling(
        self, node: str, payload: Any, eid: str, deadline: float, cancel: CancelToken | None,
        route: _Route, trace: Mapping[str, str] | None = None,
    ) -> NodeResult[Any]:  # fmt: skip
        try:
            self._send(node, payload, eid, deadline, route, trace)
        except (EncodeError, OperationalError) as exc:
            return self._send_failure(exc, node, eid)
        result = self.app.AsyncResult(eid)
        while True:
            remaining = deadline - time.time()
            if remaining <= 0 or (cancel is not None and cancel.cancelled):
                local_registry().cancel(eid, reason="timeout" if remaining <= 0 else "cancelled")
                self._revoke_later(eid)
                if remaining <= 0:
                    return self._timed_out(eid, node)
                return self._cancelled(eid, node)
            wait_s = remaining if cancel is None else min(remaining, _CANCEL_POLL_S)
            try:
                payload = result.get(timeout=wait_s, interval=self._poll_s, propagate=True)
            except CeleryTimeoutError:
                continue
            except NodeFailed as exc:
                return self._parse(exc.wire, node, eid)
            except TaskRevokedError:
                if cancel is not None and cancel.cancelled:
                    return self._cancelled(eid, node)
                return self._timed_out(eid, node, "the call expired")
            except OperationalError as exc:  # kombu's connection errors
                return self._unreachable(eid, node, exc)
            except Exception as exc:
                log.error("node task %s failed without a NodeResult (%s)", node,
                          type(exc).__name__)  # fmt: skip
                return _failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the node task failed")
            return self._parse(payload, node, eid)


async def _get(listener: ResultListener, key: str) -> bytes | str | None:
    """``GET key`` on the listener's Redis (run on its loop)."""
    value: bytes | str | None = await listener.client.get(key)
    return value


def _settle(future: ThreadFuture[None]) -> None:
    with contextlib.suppress(Exception):  # already settled
        future.set_result(None)


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())


def connect(config: RuntimeConfig, nodes: NodeTable, scope: Scope | None = None) -> DittoClient:
    """The ``celery`` entry point of ``ditto_worker.transports``: a :class:`DittoClient` of
    the broker fleet ``config.fleet`` names, knowing ``nodes``, bound to ``scope``
    (how ``create_ditto`` reaches the fleet without naming it)."""
    return DittoClient.from_fleet(config.fleet, nodes=nodes, scope=scope)
