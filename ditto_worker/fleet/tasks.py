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

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from celery import Celery, Task, bootsteps, signals
from celery.worker.request import Request

from ditto_worker.contracts import to_wire
from ditto_worker.fleet.batch import BatchReply, batch_task, run_batch
from ditto_worker.fleet.celery_app import DEADLINE_HEADER
from ditto_worker.fleet.failures import NodeFailed
from ditto_worker.fleet.fleet_runtime import INPUT_BYTES, FleetRuntime
from ditto_worker.fleet.heartbeat import QueueHeartbeat, consumed_queues
from ditto_worker.fleet.redaction import Reply, input_repr, install_redaction
from ditto_worker.fleet.redis_urls import is_redis_url, sync_client
from ditto_worker.fleet.replies import install_reply_encoder
from ditto_worker.fleet.shutdown import ignore_group_sigterm
from ditto_worker.runtime.definition import NodeSpec
from ditto_worker.runtime.trace import (
    install_log_trace,
    trace_from_headers,
    trace_repr,
)

__all__ = ["INPUT_BYTES", "FleetRuntime", "SizedRequest", "register_tasks"]

log = logging.getLogger(__name__)


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


def _make_task(
    app: Celery, runtime: FleetRuntime, node: str, spec: NodeSpec, request: type[Request]
) -> None:
    show = runtime.config.fleet.log_content

    def run_node_task(self: Task, input: Any = None) -> Reply:
        result = runtime.run(self, node, input)
        if result.status != "success":  # a Celery failure, with the NodeResult inside
            raise NodeFailed(to_wire(result))
        return Reply(result, show)

    def run_batch_task(self: Task, calls: Any = None) -> BatchReply:
        size = getattr(self.request, INPUT_BYTES, None)
        failed = runtime.table[node][0].kind_codes.failed
        return BatchReply(node, run_batch(runtime, node, calls, size, failed), show)

    run_node_task.__doc__ = f"Celery task for {node}: NodeResult JSON for the given input."
    run_batch_task.__doc__ = f"Celery task for a batch of {node} calls: their NodeResults."
    for name, run in ((node, run_node_task), (batch_task(node), run_batch_task)):
        app.task(
            name=name,
            bind=True,
            shared=False,
            ignore_result=False,
            acks_late=spec.mutation,
            reject_on_worker_lost=spec.mutation,
            throws=(NodeFailed,),  # logged on one line, no traceback
            Request=request,
        )(run)


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
