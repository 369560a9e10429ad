"""Wiring: a client connected to the fleet, with an in-process worker when there is no broker.

With a broker configured (``fleet.brokerUrl`` / ``DITTO_BROKER_URL``), :func:`open_fleet`
returns a client only: workers are started separately (``ditto-worker worker``). With
none, it starts one Celery worker in a thread of this process on kombu's ``memory://``
transport — the same tasks, routing and JSON serialization, no server (MEM-PY-7).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.worker import state

from ditto_worker.config import RuntimeConfig
from ditto_worker.fleet.celery_app import create_celery_app, queue_for
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.client_base import installed_nodes
from ditto_worker.fleet.coalescing import group_concurrency
from ditto_worker.fleet.tasks import FleetRuntime, register_tasks
from ditto_worker.runtime.definition import WorkerSource
from ditto_worker.scope import Scope

__all__ = ["create_worker_app", "open_fleet", "with_store"]


def with_store(config: RuntimeConfig, store: str | None) -> RuntimeConfig:
    """``config`` with ``workers.memory.store`` (and the retrieval targets' store) set to
    ``store`` (the ``--store`` option); unchanged when ``store`` is ``None``."""
    if not store:
        return config
    memory = config.memory_worker.model_copy(update={"store": store})
    targets = {
        name: target.model_copy(update={"store": store})
        for name, target in config.retrieval_worker.targets.items()
    }
    retrieval = config.retrieval_worker.model_copy(update={"targets": targets})
    return config.model_copy(update={"memory_worker": memory, "retrieval_worker": retrieval})


def create_worker_app(
    config: RuntimeConfig,
    workers: Sequence[WorkerSource] | None = None,
    *,
    store: str | None = None,
) -> Celery:
    """A Celery app with one task per node of every worker definition, served per ``config``.

    Args:
        config: the runtime config.
        workers: definitions (or zero-argument factories, called once per process) to
            serve; ``None``: every installed and configured worker kind.
        store: store plugin name overriding ``workers.memory.store`` (``--store``).
    """
    config = with_store(config, store)
    runtime = FleetRuntime(config, workers)
    app = create_celery_app(config.fleet, nodes=runtime.nodes)
    register_tasks(app, runtime)
    return app


@contextmanager
def open_fleet(
    config: RuntimeConfig,
    *,
    workers: Sequence[WorkerSource] | None = None,
    store: str | None = None,
    open_nodes: Collection[str] | None = None,
    scope: Scope | None = None,
) -> Iterator[DittoClient]:
    """Yield a :class:`DittoClient`; in-process mode also runs a worker until exit.

    Args:
        config: runtime config; ``config.fleet.in_process`` decides the mode.
        workers: in-process only: the definitions to serve (default: every installed and
            configured kind, the store plugin from ``ditto.yaml``).
        store: in-process only: plugin name overriding ``workers.memory.store``.
        open_nodes: in-process only: the nodes the caller will call; only their
            definitions' ``open`` hooks run at start (e.g. no local INFER model for a
            MEMORY job). Every node is still served: another kind's handler (a delegated
            search, a sub-call) builds what it needs on its first call. Default: all.
        scope: the trusted scope of every call through the client that names none
            (``DittoClient(scope=)``); ``None``: unscoped.
    """
    timeout_s = config.fleet.call_timeout_s
    if not config.fleet.in_process:
        in_flight = group_concurrency(config, installed_nodes(config))
        client = DittoClient.from_fleet(config.fleet, scope=scope, in_flight=in_flight)
        try:
            yield client
        finally:
            client.close()
        return
    app = create_worker_app(config, workers, store=store)
    runtime: FleetRuntime = app.ditto_runtime
    runtime.open_only = None if open_nodes is None else frozenset(open_nodes)
    stopped = threading.Event()
    try:
        with start_worker(
            app,
            pool="solo",
            perform_ping_check=False,
            loglevel=logging.WARNING,
            queues=[queue_for(node) for node in runtime.nodes],
            shutdown_timeout=30.0,
        ):
            try:
                yield DittoClient(
                    app, default_timeout_s=timeout_s, nodes=runtime.table, scope=scope
                )
            finally:
                _begin_stop(app, stopped)
    finally:
        stopped.set()


def _begin_stop(app: Celery, stopped: threading.Event) -> None:
    """Ask the in-process worker to stop, and keep waking its loop until ``stopped``.

    Celery's blocking loop (used for the in-process transport) waits up to 2 s per cycle
    for a message and runs one more cycle after the stop request, so a bare stop takes
    ~4 s. A control ping every 50 ms wakes it (at most for 30 s).
    """
    state.should_terminate = 0

    def wake() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stopped.is_set():
            try:
                app.control.ping(timeout=0.05)
            except Exception:  # the transport may already be closed
                return

    threading.Thread(target=wake, name="ditto-worker-stop", daemon=True).start()
