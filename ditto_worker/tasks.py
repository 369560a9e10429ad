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

from ditto_worker.celery_app import DEADLINE_HEADER
from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import NODE_IDS, to_wire
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
        self._pid = -1

    def _from_entry_point(self) -> MemoryWorker:
        from ditto_worker.registry import build_store

        store = build_store(self.config, self._store_name)
        return create_memory_worker(store)

    @property
    def worker(self) -> MemoryWorker:
        """This process's worker, built on first use (after a fork, built anew)."""
        with self._lock:
            if self._worker is None or self._pid != os.getpid():
                self._worker = self._factory()
                self._pid = os.getpid()
            return self._worker

    def run(self, task: Task, node: str, input: Any) -> dict[str, Any]:
        """Run ``node`` for the task's current request; returns the NodeResult wire JSON."""
        headers = task.request.headers or {}
        deadline = headers.get(DEADLINE_HEADER, getattr(task.request, DEADLINE_HEADER, None))
        ctx = NodeContext(
            execution_id=str(task.request.id),
            cancel=None,
            deadline=float(deadline) if isinstance(deadline, int | float) else None,
            defaults=self.config.memory,
        )
        return to_wire(self.worker.handle(node, input, ctx))


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
