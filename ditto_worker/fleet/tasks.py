"""One Celery task per node id, for every node of every worker definition (MEM-RT-2).

The fleet knows no node kind by name: a :class:`FleetRuntime` holds this process's
worker definitions (from the ``ditto_worker.workers`` entry points and ``ditto.yaml``, or
injected) and :func:`register_tasks` registers each node as a task named by its node id,
routed to its own queue (the lower-case id). A task parses nothing itself: it builds the
call's :class:`~ditto_worker.runtime.NodeContext` once from the message (execution id,
deadline, trusted scope, cancel token) and hands the JSON input to
:func:`~ditto_worker.runtime.execute.run_node`, then returns the NodeResult (a
:class:`~ditto_worker.fleet.redaction.Reply`, stored as its wire JSON).
Every outcome is a NodeResult: a success is the task's return value; any other status
leaves the task as :class:`~ditto_worker.fleet.failures.NodeFailed` (a Celery failure that
carries the NodeResult, which the client rebuilds: Flower, events and tracing count it as a
failure). Tasks are never retried automatically (MEM-ERR-5). Nodes whose ``NodeSpec`` is a
mutation ack late and are redelivered if their worker process dies (the handler applies
an execution id at most once).

Per-process resources: each definition's ``open`` hook runs in every pool process before
it serves — ``worker_process_init`` (prefork children and the solo pool) and
``worker_init`` for the threads pool (which has no process init) — and handlers still
build what they need on first use.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from celery import Celery, Task, bootsteps, signals
from celery.worker.request import Request

from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import NodeResult, to_wire
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.fleet.cancellation import RedisCancelWatcher, local_registry
from ditto_worker.fleet.celery_app import DEADLINE_HEADER, SENT_HEADER
from ditto_worker.fleet.failures import NodeFailed
from ditto_worker.fleet.heartbeat import QueueHeartbeat, consumed_queues
from ditto_worker.fleet.redaction import Reply, input_repr, install_redaction
from ditto_worker.fleet.redis_urls import is_redis_url, sync_client
from ditto_worker.fleet.replies import install_reply_encoder
from ditto_worker.fleet.shutdown import ignore_group_sigterm
from ditto_worker.operation import OPERATION_HEADER, check_operation_id
from ditto_worker.runtime.calls import sub_invoker
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import NodeSpec, WorkerDefinition, WorkerSource
from ditto_worker.runtime.execute import run_node
from ditto_worker.runtime.process import PerProcess
from ditto_worker.runtime.registry import node_table, worker_definitions
from ditto_worker.runtime.trace import (
    TRACE_HEADERS,
    install_log_trace,
    trace_from_headers,
    trace_repr,
)
from ditto_worker.scope import SCOPE_HEADER, parse_scope

__all__ = ["INPUT_BYTES", "FleetRuntime", "SizedRequest", "register_tasks"]

log = logging.getLogger(__name__)

_MISSING = object()

INPUT_BYTES = "ditto_input_bytes"
"""Request attribute: bytes of the message body as it came off the broker, or ``None`` when
the transport handed over no raw body (then the input is measured; never counted as 0)."""


class SizedRequest(Request):  # type: ignore[misc]
    """Celery's request, recording the size of the message body it was built from, so the
    task checks ``fleet.maxInputBytes`` without serialising the input again.

    Unless :attr:`log_content`, the request's argument reprs (events, Flower, its repr) are
    the body's size only — and, for a Graph call, its trace ids as ``argsrepr``
    (``run=… graph=… node=…``, :mod:`ditto_worker.runtime.trace`) — and ``celery inspect
    active`` shows them instead of the input (:mod:`ditto_worker.fleet.redaction`).
    """

    log_content = False
    """``fleet.logContent``: set on the per-app subclass (:func:`register_tasks`)."""
    time_limit_margin_s = 0.0
    """``fleet.timeLimitMarginS``: set on the per-app subclass; 0 = no hard time limit."""

    def __init__(self, message: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(message, *args, **kwargs)
        self._hard_time_limit()
        body = self._body
        size = len(body) if isinstance(body, bytes | str) else None
        self._request_dict[INPUT_BYTES] = size
        if not self.log_content:  # a Graph call's run and node ids stay (ids, not content)
            traced = trace_repr(trace_from_headers(self._request_dict)) or "()"
            self._argsrepr = self._request_dict["argsrepr"] = traced
            self._kwargsrepr = self._request_dict["kwargsrepr"] = input_repr(size)

    def _hard_time_limit(self) -> None:
        """A hard time limit a margin past the call's deadline (``ditto_deadline``): a
        prefork pool process still running then is killed and replaced, the call fails
        (Celery's ``TimeLimitExceeded``). Backs up the cooperative deadline for a handler
        stuck where it cannot see it; a time limit the sender set stays. The threads and
        solo pools enforce no time limit (Celery's pools)."""
        deadline = self._request_dict.get(DEADLINE_HEADER)
        limits: Any = getattr(self, "time_limits", (None, None))  # Celery's (hard, soft)
        hard, soft = limits
        if self.time_limit_margin_s <= 0 or hard or not isinstance(deadline, int | float):
            return
        limit = max(0.0, float(deadline) - time.time()) + self.time_limit_margin_s
        self.time_limits = self._request_dict["timelimit"] = (limit, soft)

    def info(self, safe: bool = False) -> dict[str, Any]:
        """Celery's request info (``celery inspect``); the reprs unless :attr:`log_content`."""
        info: dict[str, Any] = super().info(safe=safe or not self.log_content)
        return info


def _header(request: Any, name: str) -> Any:
    headers = request.headers or {}
    return headers.get(name, getattr(request, name, None))


def _trace(request: Any) -> dict[str, str]:
    """The call's trace (run id, Graph, Graph node) from its message headers."""
    return trace_from_headers({name: _header(request, name) for name in TRACE_HEADERS.values()})


class FleetRuntime:
    """This process's worker definitions and the per-call envelope of the fleet.

    Args:
        config: the runtime config (fleet settings, defaults per kind, plugin settings).
        workers: the definitions to serve (a definition, or a zero-argument factory called
            once per process); ``None``: every installed and configured worker kind
            (:func:`~ditto_worker.runtime.registry.worker_definitions`).
    """

    def __init__(self, config: RuntimeConfig, workers: Sequence[WorkerSource] | None = None):
        self.config = config
        self._sources = None if workers is None else list(workers)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.definitions = self._build()
        self.table = node_table(self.definitions)
        self._client = PerProcess(self._make_client)
        self._watcher: PerProcess[RedisCancelWatcher | None] = PerProcess(self._make_watcher)
        self._app: Celery | None = None
        self._kind_defaults: dict[str, Any] = {}
        self.opened_pid: int | None = None  # the process whose hooks already ran (startup)
        self._served_in: int | None = None  # the process whose open hooks ran
        self.open_only: frozenset[str] | None = None
        """Nodes whose definitions open when a pool process starts (``None``: every node it
        serves); the others' handlers build what they need on their first call."""

    def _build(self) -> list[WorkerDefinition]:
        if self._sources is None:
            return worker_definitions(self.config)
        return [s if isinstance(s, WorkerDefinition) else s() for s in self._sources]

    def _current(self) -> dict[str, tuple[WorkerDefinition, NodeSpec]]:
        """The node table of this process: factories are called again after a fork."""
        if self._pid == os.getpid() or self._sources is None:
            return self.table
        with self._lock:
            if self._pid != os.getpid():
                if any(not isinstance(s, WorkerDefinition) for s in self._sources):
                    self.definitions = self._build()
                    self.table = node_table(self.definitions)
                self._pid = os.getpid()
        return self.table

    @property
    def nodes(self) -> list[str]:
        """Every node id this runtime can serve."""
        return list(self.table)

    def open(self, nodes: Iterable[str] | None = None) -> None:
        """Run the ``open`` hook of each definition serving ``nodes`` (default: all).

        Raises:
            Exception: whatever a hook raised (a store or model that cannot be built).
        """
        wanted = set(self.table if nodes is None else nodes)
        self.opening_here()
        for definition in {
            id(d): d for n, (d, _) in self._current().items() if n in wanted
        }.values():
            if definition.open is not None:
                definition.open()

    def opening_here(self) -> None:
        """Open hooks run in this process (a hook that fails half-way may hold resources
        too): :meth:`close_served` runs the close hooks here at shutdown."""
        self._served_in = os.getpid()

    def close_served(self) -> None:
        """At a worker's shutdown: the ``close`` hooks, in a process whose ``open`` hooks
        ran (each prefork child; the main process of the threads and solo pools), once.
        A hook that fails is logged (its type) and the others still run."""
        if self._served_in != os.getpid():
            return
        self._served_in = None
        for definition in self.definitions:
            if definition.close is None:
                continue
            try:
                definition.close()
            except Exception as exc:
                log.warning("a worker definition's close hook failed (%s)", type(exc).__name__)

    # --- sub-calls and cancel flags (one per process) -------------------------------------

    def _make_client(self) -> Any:
        from ditto_worker.fleet.client import DittoClient

        if self.config.fleet.in_process and self._app is not None:
            return DittoClient(self._app, nodes=self.table,
                               log_content=self.config.fleet.log_content)  # fmt: skip
        return DittoClient.from_fleet(self.config.fleet, nodes=self.table)

    def _make_watcher(self) -> RedisCancelWatcher | None:
        app = self._app
        backend = str(app.conf.result_backend or "") if app is not None else ""
        if not is_redis_url(backend):
            return None
        fleet = self.config.fleet
        return RedisCancelWatcher(
            backend, sentinel_master=fleet.sentinel_master_name,
            sentinel_kwargs=fleet.result_backend_transport_options.get("sentinel_kwargs"),
        )  # fmt: skip

    def start_watcher(self) -> None:
        """Start this process's cancel watcher now (a pool process starting), not on its
        first call: it vouches for calls without effects 5 s after it subscribed
        (:meth:`~ditto_worker.fleet.cancellation.RedisCancelWatcher.covers`), so calls in a
        fresh worker's first seconds skip their cancel-flag read too."""
        try:
            self._watcher.get()
        except Exception as exc:  # Redis down: the first call builds it again
            log.warning("cancel watcher not started (%s)", type(exc).__name__)

    # --- one call -------------------------------------------------------------------------

    def _defaults(self, kind: str) -> Any:
        """The kind's runtime-YAML defaults layer, built once (the config is frozen)."""
        found = self._kind_defaults.get(kind, _MISSING)
        if found is _MISSING:
            found = self._kind_defaults[kind] = self.config.defaults_for(kind)
        return found

    def _refusal(self, task: Task, node: str, eid: str, input: Any) -> NodeResult[Any] | None:
        size = getattr(task.request, INPUT_BYTES, None)
        if not isinstance(size, int):  # no body size known (not 0): measure the input itself
            size = len(json.dumps(input, separators=(",", ":"), default=str).encode())
        cap = self.config.fleet.max_input_bytes
        if size > cap:
            message = f"Invalid input: {size} bytes exceed the {cap}-byte limit (maxInputBytes)"
            return NodeResult.failure(eid, node, ErrorCode.INVALID_INPUT, message)
        return None

    def run(self, task: Task, node: str, input: Any) -> NodeResult[Any]:
        """Run ``node`` for the task's current request; returns its NodeResult (the task
        writes it to the result backend in one pass, :mod:`ditto_worker.fleet.replies`).

        The call runs with a cancel token registered under its execution id (see
        :mod:`ditto_worker.fleet.cancellation`); a call flagged cancelled before it started
        is answered ``cancelled`` without running.
        """
        request = task.request
        eid = str(request.id)
        definition, spec = self._current()[node]
        raw_deadline = _header(request, DEADLINE_HEADER)
        deadline = float(raw_deadline) if isinstance(raw_deadline, int | float) else None
        try:
            scope = parse_scope(_header(request, SCOPE_HEADER))
            operation_id = check_operation_id(_header(request, OPERATION_HEADER))
        except NodeError as exc:
            return NodeResult.failure(eid, node, exc.code, exc.safe_message)
        refused = self._refusal(task, node, eid, input)
        if refused is not None:
            return refused
        watcher = self._watcher.get()
        with local_registry().running(eid, deadline) as token:
            # a call with effects always reads its flag; one without may rely on the
            # watcher's announcements when they are known complete (watcher.covers)
            sent = _header(request, SENT_HEADER)
            vouched = not spec.mutation and watcher is not None and watcher.covers(sent)
            if watcher is not None and not vouched and watcher.is_flagged(eid):
                token.cancel()
            trace = _trace(request)
            ctx = NodeContext(
                eid, node, token, deadline, scope,
                invoke=sub_invoker(self._client.get, deadline, token, scope, trace),
                headers=trace, defaults=self._defaults(definition.kind),
                operation_id=operation_id,
            )  # fmt: skip
            return run_node(definition, spec, input, ctx)


def _make_task(
    app: Celery, runtime: FleetRuntime, node: str, spec: NodeSpec, request: type[Request]
) -> None:
    show = runtime.config.fleet.log_content

    def run_node_task(self: Task, input: Any = None) -> Reply:
        result = runtime.run(self, node, input)
        if result.status != "success":  # a Celery failure, with the NodeResult inside
            raise NodeFailed(to_wire(result))
        return Reply(result, show)

    run_node_task.__doc__ = f"Celery task for {node}: NodeResult JSON for the given input."
    app.task(
        name=node,
        bind=True,
        shared=False,
        ignore_result=False,
        acks_late=spec.mutation,
        reject_on_worker_lost=spec.mutation,
        throws=(NodeFailed,),  # logged on one line, no traceback
        Request=request,
    )(run_node_task)


def _open_quietly(runtime: FleetRuntime, nodes: Iterable[str] | None) -> None:
    if runtime.opened_pid == os.getpid():
        return  # ditto-worker worker opened them in this process before Celery started
    if runtime.open_only is not None:  # the others build on their first call
        nodes = [n for n in (runtime.nodes if nodes is None else nodes) if n in runtime.open_only]
    try:
        runtime.open(nodes)
    except Exception as exc:  # each call retries and answers the failure
        log.error("a worker definition could not open its resources (%s)", type(exc).__name__)


def register_tasks(app: Celery, runtime: FleetRuntime) -> None:
    """Register one task per node of ``runtime`` on ``app`` and its per-process hooks.

    A worker consumes only the queues it is started with (``--nodes``), so registering
    every task is harmless; the ``open`` hooks run for the nodes of those queues.
    """
    runtime._app = app
    log_content = runtime.config.fleet.log_content
    install_redaction(log_content)
    install_reply_encoder()  # a reply's JSON in one pass, straight from its model
    install_log_trace()  # a traced call's run and Graph node on its received/succeeded lines
    margin = runtime.config.fleet.time_limit_margin_s
    request = type("SizedRequest", (SizedRequest,),
                   {"log_content": log_content, "time_limit_margin_s": margin})  # fmt: skip
    for node, (_, spec) in runtime.table.items():
        _make_task(app, runtime, node, spec, request)
    app.ditto_runtime = runtime
    _connect_process_hooks(app, runtime)
    app.steps["consumer"].add(HeartbeatStep)


def _connect_process_hooks(app: Celery, runtime: FleetRuntime) -> None:
    """The definitions' ``open`` hooks when a pool process starts, ``close`` at its end."""

    def served(sender: Any) -> list[str] | None:
        queues = getattr(getattr(sender, "app", None), "amqp", None)
        names = getattr(getattr(queues, "queues", None), "consume_from", None)
        if not names:
            return None
        wanted = set(names)
        return [n for n, (_, spec) in runtime.table.items() if spec.queue in wanted]

    def process_init(sender: Any = None, **_: Any) -> None:  # prefork children, solo
        if getattr(app, "_ditto_main_pid", None) not in (None, os.getpid()):
            ignore_group_sigterm()  # a prefork child: finish the call, the parent stops us
        runtime.start_watcher()
        if not getattr(app, "_ditto_pool_threads", False):
            # only the definitions of the queues this worker consumes (worker_init found
            # them before the fork); unknown: none — handlers build on first use
            _open_quietly(runtime, getattr(app, "_ditto_served", None) or [])

    def worker_init(sender: Any = None, **_: Any) -> None:
        owner: Any = getattr(sender, "app", None)
        if owner is None or owner is not app:
            return
        app._ditto_main_pid = os.getpid()
        app._ditto_served = served(sender)
        pool = str(getattr(sender, "pool_cls", "") or "")
        if "thread" in pool.lower():  # the threads pool has no worker_process_init
            app._ditto_pool_threads = True
            runtime.start_watcher()
            _open_quietly(runtime, app._ditto_served or [])

    # held by the app, connected weakly: an app that is gone leaves no handler behind
    def process_shutdown(**_: Any) -> None:  # a prefork child exiting
        runtime.close_served()

    def worker_shutdown(sender: Any = None, **_: Any) -> None:  # the main process (threads, solo)
        if getattr(sender, "app", None) is app:
            runtime.close_served()

    app._ditto_signal_handlers = (process_init, worker_init, process_shutdown, worker_shutdown)
    signals.worker_process_init.connect(process_init, weak=True)
    signals.worker_init.connect(worker_init, weak=True)
    signals.worker_process_shutdown.connect(process_shutdown, weak=True)
    signals.worker_shutdown.connect(worker_shutdown, weak=True)


class HeartbeatStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep running the worker's per-queue heartbeat
    (:mod:`ditto_worker.fleet.heartbeat`) in the main process: started with the consumer
    (``celery worker`` and ``celery.contrib.testing`` workers alike), kept across the
    consumer's restarts after a broker reconnect, closed at shutdown."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.heartbeat: QueueHeartbeat | None = None

    def start(self, parent: Any) -> None:
        runtime = getattr(parent.app, "ditto_runtime", None)
        if self.heartbeat is None and isinstance(runtime, FleetRuntime):
            self.heartbeat = _start_heartbeat(runtime, parent.app, parent)

    def shutdown(self, parent: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.close()
            self.heartbeat = None


def _start_heartbeat(runtime: FleetRuntime, app: Celery, consumer: Any) -> QueueHeartbeat | None:
    """The worker's per-queue heartbeat on a Redis result backend; none otherwise."""
    backend = str(app.conf.result_backend or "")
    if not is_redis_url(backend):
        return None
    fleet = runtime.config.fleet
    try:
        client = sync_client(
            backend, fleet.sentinel_master_name,
            fleet.result_backend_transport_options.get("sentinel_kwargs"),
            socket_timeout=5, socket_connect_timeout=5,
        )  # fmt: skip
    except Exception as exc:  # a heartbeat is a courtesy: the worker serves without it
        log.warning("heartbeat not started (%s)", type(exc).__name__)
        return None
    hostname = str(getattr(consumer, "hostname", "") or "")
    return QueueHeartbeat(client, lambda: consumed_queues(consumer), hostname)
