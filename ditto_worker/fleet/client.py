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
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import Celery

from ditto_worker.config import FleetSettings, RuntimeConfig
from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.fleet.celery_app import (
    IN_PROCESS_POLL_S,
    create_celery_app,
    result_backend_url,
)
from ditto_worker.fleet.client_base import (
    FLAG_WAIT_S,
    NodeTable,
    OutageLog,
    failure,
    installed_nodes,
    is_redis,
    jsonable,
    known_nodes,
    log,
)
from ditto_worker.fleet.client_paths import ClientPaths
from ditto_worker.fleet.redaction import args_repr
from ditto_worker.fleet.redis_urls import server_address
from ditto_worker.fleet.results import ResultListener
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.runtime.trace import clean_trace
from ditto_worker.scope import Scope, parse_scope

__all__ = ["DittoClient", "NodeTable", "connect"]


class DittoClient(ClientPaths):
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
        self._nodes = known_nodes(installed_nodes() if nodes is None else nodes)
        self._broker_at = f"the broker ({server_address(str(app.conf.broker_url or ''))})"
        backend_url = result_backend or str(app.conf.result_backend or "")
        self._backend_at = f"the result backend ({server_address(backend_url)})"
        self._outages = OutageLog()
        self._poll_s = IN_PROCESS_POLL_S if str(app.conf.broker_url).startswith("memory") else 0.01
        self._listener = (
            ResultListener(
                result_backend,
                max_connections=send_threads,
                sentinel_master=sentinel_master,
                sentinel_kwargs=sentinel_kwargs,
            )  # fmt: skip
            if result_backend and is_redis(result_backend)
            else None
        )
        self._senders = ThreadPoolExecutor(send_threads, thread_name_prefix="ditto-send")
        # revokes are best effort (the cancel flag and ``expires`` are what hold), so they
        # get their own thread and never delay a send; past MAX_PENDING_REVOKES they are
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
        table = installed_nodes() if nodes is None else nodes
        backend = result_backend_url(fleet)
        app = create_celery_app(fleet, results=not is_redis(backend), nodes=list(table))
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
                return failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the client is closed")
            traced = clean_trace(trace)
            if self._listener is None:
                polled = self._invoke_polling(node, jsonable(input), eid, deadline, cancel,
                                              bound, traced)  # fmt: skip
                return self._settle(polled, cancel, deadline)
            try:
                heard = self._invoke_listening(node, jsonable(input), eid, deadline, cancel,
                                               bound, traced)  # fmt: skip
                return self._settle(heard, cancel, deadline)
            except Exception:
                log.exception("unexpected error in %s", node)
                return failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the call failed")

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
                return failure(eid, node, ErrorCode.MEMORY_BACKEND_ERROR, "the client is closed")
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
                heard = await self._acall(node, jsonable(input), eid, deadline, cancel, bound,
                                          clean_trace(trace))  # fmt: skip
                return self._settle(heard, cancel, deadline)
            except asyncio.CancelledError:
                # the awaiting task is cancelled at once; raise the call's cancel flag before
                # re-raising, so a caller that exits right away still leaves it cancelled
                flag = self._listener.submit(self._acancel(eid, deadline))
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.wrap_future(flag), FLAG_WAIT_S)
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


def connect(config: RuntimeConfig, nodes: NodeTable, scope: Scope | None = None) -> DittoClient:
    """The ``celery`` entry point of ``ditto_worker.transports``: a :class:`DittoClient` of
    the broker fleet ``config.fleet`` names, knowing ``nodes``, bound to ``scope``
    (how ``create_ditto`` reaches the fleet without naming it)."""
    return DittoClient.from_fleet(config.fleet, nodes=nodes, scope=scope)
