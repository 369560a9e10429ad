"""The invoke client: send a node call by name, await its NodeResult (sync or asyncio).

``DittoClient.invoke(node, input)`` and ``await DittoClient.ainvoke(node, input)`` return
the same NodeResult as the direct SDK (MEM-NODE-3). Failures are NodeResults too: an
unknown node is ``UNKNOWN_NODE`` (naming the closest known ids) before anything is sent;
a call past its timeout is ``timeout`` with its kind's timeout code (``MEMORY_TIMEOUT``
…), or ``failed`` / ``FLEET_UNAVAILABLE`` when the result backend was lost while it waited
(its reply may never come; retry with the same operation id); a cancelled call is
``cancelled`` with its kind's cancelled code (``MEMORY_CANCELLED`` …; MEM-PY-2).
Cancelling the asyncio task awaiting ``ainvoke`` cancels the call and re-raises
``asyncio.CancelledError``.

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
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from celery import Celery

from ditto_worker.config import FleetSettings, RuntimeConfig
from ditto_worker.config.fleet import CoalescingSettings
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
    installed_nodes,
    is_redis,
    known_nodes,
    log,
)
from ditto_worker.fleet.client_paths import ClientPaths
from ditto_worker.fleet.coalescing import (
    DEFAULT_IN_FLIGHT,
    Coalescer,
    group_concurrency,
)
from ditto_worker.fleet.redaction import args_repr
from ditto_worker.fleet.redis_urls import server_address
from ditto_worker.fleet.results import ResultListener
from ditto_worker.runtime.batch_sizes import BATCH_SIZES
from ditto_worker.runtime.calls import Call
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.scope import Scope, parse_scope

__all__ = ["DittoClient", "NodeTable", "connect"]


class DittoClient(ClientPaths):
    """Sends node calls to the fleet and turns replies into NodeResults: ``invoke`` /
    ``ainvoke`` as :class:`~ditto_worker.runtime.calls.Invoking` describes.

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
        coalescing: CoalescingSettings | None = None,
        in_flight: Mapping[str, int] | None = None,
    ) -> None:
        try:
            bound = parse_scope(scope)
        except MemoryError as exc:
            raise ConfigError(exc.safe_message) from None
        super().__init__(default_timeout_s, bound)
        self.app = app
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
        self._coalescer = self._coalescer_of(coalescing, in_flight)

    def _coalescer_of(
        self, settings: CoalescingSettings | None, in_flight: Mapping[str, int] | None
    ) -> Coalescer | None:
        """The coalescer of ``fleet.coalescing`` (a Redis fleet only), or ``None``."""
        if settings is None or not settings.enabled or self._listener is None:
            return None
        fixed, groups = settings.in_flight, dict(in_flight or {})

        def limit_of(node: str) -> int:
            return fixed or groups.get(node, DEFAULT_IN_FLIGHT)

        return Coalescer(self._listener, self._publish, self._publish_batch, self._senders,
                         limit_of, settings.max_calls, settings.max_wait_us / 1e6,
                         BATCH_SIZES.observe)  # fmt: skip

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
        kwargs.setdefault("coalescing", fleet.coalescing)
        return cls(app, result_backend=backend, nodes=table, **kwargs)

    @property
    def nodes(self) -> list[str]:
        """The node ids this client knows."""
        return list(self._nodes)

    # --- step 3 of the invoke path (ditto_worker.runtime.calls) ---------------------------

    def _run_call(self, call: Call) -> NodeResult[Any]:
        if self._listener is None:
            return self._invoke_polling(call)
        try:
            return self._invoke_listening(call)
        except Exception:
            log.exception("unexpected error in %s", call.node)
            return call.failed(ErrorCode.MEMORY_BACKEND_ERROR, "the call failed")

    async def _arun_call(self, call: Call) -> NodeResult[Any]:
        listener = self._listener
        if listener is None:  # in-process: poll on a sender thread, with a token to stop it
            token = call.cancel or CancelToken()
            polled = replace(call, cancel=token)
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(self._senders, self._invoke_polling, polled)
            except asyncio.CancelledError:
                token.cancel()
                raise
        try:
            return await self._acall(call)
        except asyncio.CancelledError:
            # the awaiting task is cancelled at once; raise the call's cancel flag before
            # re-raising, so a caller that exits right away still leaves it cancelled
            flag = listener.submit(self._acancel(call.execution_id, call.deadline))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.wrap_future(flag), FLAG_WAIT_S)
            raise

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain calls already accepted (up to ``timeout_s``), then release connections.

        New calls after ``close`` fail with ``MEMORY_BACKEND_ERROR``. The client owns no
        plugin and closes none (MEM-RUN-3).
        """
        self._drain(timeout_s)
        if self._listener is not None:
            self._listener.close()
        self._senders.shutdown(wait=True)
        self._revokers.shutdown(wait=True)
        self.app.close()


def connect(config: RuntimeConfig, nodes: NodeTable, scope: Scope | None = None) -> DittoClient:
    """The ``celery`` entry point of ``ditto_worker.transports``: a :class:`DittoClient` of
    the broker fleet ``config.fleet`` names, knowing ``nodes``, bound to ``scope``
    (how ``create_ditto`` reaches the fleet without naming it)."""
    return DittoClient.from_fleet(config.fleet, nodes=nodes, scope=scope,
                                  in_flight=group_concurrency(config, nodes))  # fmt: skip
