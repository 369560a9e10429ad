"""One thin Celery task per MEMORY node, named by node id (``MEMORY.GET`` …).

A task parses nothing itself: it hands the JSON input to the process's
:class:`~ditto_worker.worker.MemoryWorker` (which validates it, calls the plugin and
builds the NodeResult) and returns the NodeResult's wire JSON. Every outcome, failures
included, is a returned NodeResult; tasks never raise for a node failure and are never
retried automatically (MEM-ERR-5).

The plugin is built once per worker process, after fork, through the ``ditto_worker.stores``
entry point named in ``ditto.yaml`` (MEM-PY-1) — never at import time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from ditto_worker.cancellation import RedisCancelWatcher, local_registry
from ditto_worker.celery_app import DEADLINE_HEADER
from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import NODE_IDS, NodeResult, to_wire
from ditto_worker.errors import ErrorCode
from ditto_worker.worker import MemoryWorker, NodeContext, create_memory_worker

__all__ = ["FleetRuntime", "register_tasks"]

log = logging.getLogger(__name__)

WorkerFactory = Callable[[], MemoryWorker]


class FleetRuntime:
    """Builds and holds this process's ``MemoryWorker``, once per process id.

    Args:
        config: the runtime config (store name, plugin settings, YAML limits).
        worker_factory: builds the worker; default: the store plugin named in
            ``workers.memory.store`` (or ``store``) via its entry point.
        store: plugin name overriding ``workers.memory.store``.
    """

    def __init__(
        self,
        config: RuntimeConfig,
        worker_factory: WorkerFactory | None = None,
        store: str | None = None,
    ) -> None:
        self.config = config
        self._factory = worker_factory or self._from_entry_point
        self._store_name = store
        self._lock = threading.Lock()
        self._worker: MemoryWorker | None = None
        self._watcher: RedisCancelWatcher | None = None
        self._pid = -1

    def _from_entry_point(self) -> MemoryWorker:
        from ditto_worker.registry import build_store

        store = build_store(self.config, self._store_name)
        return create_memory_worker(store)

    def _ensure(self, app: Celery | None = None) -> tuple[MemoryWorker, RedisCancelWatcher | None]:
        """This process's worker and cancel watcher, built on first use (anew after fork)."""
        with self._lock:
            if self._worker is None or self._pid != os.getpid():
                self._worker = self._factory()
                self._watcher = None
                backend = str(app.conf.result_backend or "") if app is not None else ""
                if backend.startswith(("redis://", "rediss://", "unix://")):
                    self._watcher = RedisCancelWatcher(backend)
                self._pid = os.getpid()
            return self._worker, self._watcher

    @property
    def worker(self) -> MemoryWorker:
        """This process's worker, built on first use (after a fork, built anew)."""
        return self._ensure()[0]

    def run(self, task: Task, node: str, input: Any) -> dict[str, Any]:
        """Run ``node`` for the task's current request; returns the NodeResult wire JSON.

        The call runs with a cancel token registered under its execution id (see
        :mod:`ditto_worker.cancellation`); a call flagged cancelled before it started is
        answered ``cancelled`` without running.
        """
        worker, watcher = self._ensure(task.app)
        eid = str(task.request.id)
        headers = task.request.headers or {}
        raw_deadline = headers.get(DEADLINE_HEADER, getattr(task.request, DEADLINE_HEADER, None))
        deadline = float(raw_deadline) if isinstance(raw_deadline, int | float) else None
        if watcher is not None and watcher.is_flagged(eid):
            cancelled = NodeResult.failure(
                eid, node, ErrorCode.MEMORY_CANCELLED, "cancelled before it started", "cancelled"
            )
            return to_wire(cancelled)
        with local_registry().running(eid, deadline) as token:
            ctx = NodeContext(eid, cancel=token, deadline=deadline, defaults=self.config.memory)
            return to_wire(worker.handle(node, input, ctx))


def _make_task(app: Celery, runtime: FleetRuntime, node: str) -> None:
    def run_node(self: Task, input: Any = None) -> dict[str, Any]:
        return runtime.run(self, node, input)

    run_node.__doc__ = f"Celery task for {node}: NodeResult JSON for the given input."
    app.task(name=node, bind=True, shared=False, ignore_result=False)(run_node)


def register_tasks(app: Celery, runtime: FleetRuntime) -> None:
    """Register the six MEMORY tasks on ``app``, all served by ``runtime``."""
    for node in NODE_IDS:
        _make_task(app, runtime, node)
    app.ditto_runtime = runtime
