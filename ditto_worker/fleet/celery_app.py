"""The Celery app: one queue per node, routes keyed by task name, JSON only.

Task names are the node ids (``MEMORY.GET`` …) and each has its own queue, the
lower-case id (``memory.get`` …; SPEC.md "Python mapping", MEM-RT-2). The node ids come
from the worker definitions (:func:`~ditto_worker.runtime.registry.worker_definitions`);
nothing here names a node kind. Only JSON crosses the broker: a pickled
message is refused by the worker (``accept_content=["json"]``). Queues are declared
explicitly and ``task_create_missing_queues`` is off, so a typo never creates a queue no
worker reads. Task events are on for Flower.

With no broker configured the app uses kombu's in-process ``memory://`` transport and a
``cache+memory://`` result backend, polled every millisecond (kombu's default is 1 s, which
makes every call take ~1 s).

This module creates no plugin and imports no task: the worker side registers the tasks
(:mod:`ditto_worker.fleet.tasks`), the client only sends by name.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

from ditto_worker.config import FleetSettings, RuntimeConfig, load_runtime_config
from ditto_worker.runtime.definition import queue_of

__all__ = [
    "DEADLINE_HEADER",
    "SENT_HEADER",
    "IN_PROCESS_POLL_S",
    "create_celery_app",
    "fleet_nodes",
    "queue_for",
    "result_backend_url",
]

DEADLINE_HEADER = "ditto_deadline"
"""Message header: the caller's absolute deadline, ``time.time()`` seconds (MEM-PY-3)."""
SENT_HEADER = "ditto_sent"
"""Message header: when the client sent the call, ``time.time()`` seconds."""

IN_PROCESS_POLL_S = 0.001
"""Polling interval of the in-process transport and result backend, seconds."""


def queue_for(node: str) -> str:
    """The dedicated queue of ``node``: its lower-case id (``MEMORY.GET`` -> ``memory.get``)."""
    return queue_of(node)


def fleet_nodes(config: RuntimeConfig | None = None) -> list[str]:
    """Every node id of the installed and configured worker kinds (sorted by kind)."""
    from ditto_worker.runtime.registry import node_table, worker_definitions

    return list(node_table(worker_definitions(config or load_runtime_config(None))))


def _broker_urls(fleet: FleetSettings) -> tuple[str, str]:
    if fleet.in_process:
        return "memory://localhost/", fleet.result_backend or "cache+memory://"
    return fleet.broker_url, fleet.result_backend or fleet.broker_url


def result_backend_url(fleet: FleetSettings) -> str:
    """The result backend URL the fleet's workers store results in."""
    return _broker_urls(fleet)[1]


def _transport_options(fleet: FleetSettings, broker: str, backend: str) -> dict[str, Any]:
    """Broker and result-backend transport options: the fleet's own for a Redis broker
    (visibility timeout, unacked restore), Sentinel's master name, then the operator's
    ``fleet.brokerTransportOptions`` / ``resultBackendTransportOptions`` on top."""
    options: dict[str, Any] = {}
    if broker.startswith(("redis", "rediss", "sentinel")):
        options = {
            "visibility_timeout": fleet.visibility_timeout_s,
            # a running worker scans for a dead worker's unacked messages this often
            # (kombu's default 10 s x throttle 10 = ~100 s after the timeout)
            "unacked_restore_interval": max(1, min(10, int(fleet.visibility_timeout_s))),
            "unacked_restore_throttle": 1,
        }
    backend_options: dict[str, Any] = {}
    if fleet.sentinel_master_name:
        if broker.startswith("sentinel"):
            options["master_name"] = fleet.sentinel_master_name
        if backend.startswith("sentinel"):
            backend_options["master_name"] = fleet.sentinel_master_name
    options.update(fleet.broker_transport_options)
    backend_options.update(fleet.result_backend_transport_options)
    conf: dict[str, Any] = {"broker_transport_options": options}
    if backend_options:
        conf["result_backend_transport_options"] = backend_options
    return conf


def create_celery_app(
    fleet: FleetSettings | None = None,
    *,
    main: str = "ditto_worker",
    results: bool = True,
    guarded_transport: bool = True,
    nodes: list[str] | None = None,
) -> Celery:
    """Create a configured Celery app (no tasks registered).

    Args:
        fleet: broker and result backend; defaults to the in-process transport.
        main: the app's name (shown by ``celery inspect`` and Flower).
        results: ``False`` for a sending-only app (the :class:`DittoClient` of a Redis
            fleet reads results with its own listener; Celery's result consumer would
            subscribe one channel per sent task, celery#5320).
        nodes: the node ids whose queues the app declares and routes (default:
            :func:`fleet_nodes` of the default config).
        guarded_transport: use :mod:`ditto_worker.fleet.transport` for a Redis broker (keeps
            workers alive across Redis restarts); ``False`` for tools that must see the
            plain ``redis://`` transport (Flower reads queue lengths by URL scheme).

    Returns:
        A Celery app whose routes send each node id to its own queue.
    """
    fleet = fleet or FleetSettings()
    broker, backend = _broker_urls(fleet)
    app = Celery(main, broker=broker, backend=backend if results else None, set_as_current=False)
    nodes = fleet_nodes() if nodes is None else nodes
    names = [queue_of(node) for node in nodes]
    queues = [
        Queue(q, Exchange(q, type="direct"), routing_key=q)  # type: ignore[no-untyped-call]
        for q in names
    ]
    conf: dict[str, Any] = {
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_queues": queues,
        "task_default_queue": queues[0].name,
        "task_routes": {
            node: {"queue": queue_of(node), "routing_key": queue_of(node)} for node in nodes
        },
        "task_create_missing_queues": False,
        "worker_send_task_events": fleet.task_events,  # fleet.taskEvents (docs/fleet.md)
        "task_send_sent_event": fleet.task_events,
        "worker_prefetch_multiplier": 1,
        "result_expires": 3600,
        "broker_connection_retry_on_startup": True,
        # Celery 6's default: tasks running when the broker connection drops are cancelled
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
    }
    if fleet.in_process:
        conf["broker_transport_options"] = {"polling_interval": IN_PROCESS_POLL_S}
    else:
        conf.update(_transport_options(fleet, broker, backend))
    if not fleet.in_process and guarded_transport and broker.startswith(("redis://", "rediss://")):
        # kombu's Redis transport, guarded so a Redis restart never stops a worker
        conf["broker_transport"] = "ditto_worker.fleet.transport:Transport"
    elif not fleet.in_process and guarded_transport and broker.startswith("sentinel://"):
        # the same guard on kombu's Sentinel transport: a failover never stops a worker
        conf["broker_transport"] = "ditto_worker.fleet.transport:SentinelTransport"
    app.conf.update(conf)
    return app
