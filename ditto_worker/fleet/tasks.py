"""One thin Celery task per MEMORY node, named by node id (``MEMORY.GET`` …).

A task parses nothing itself: it hands the JSON input to the process's
:class:`~ditto_worker.memory.worker.MemoryWorker` (which validates it, calls the plugin and
builds the NodeResult) and returns the NodeResult's wire JSON. Every outcome, failures
included, is a returned NodeResult; tasks never raise for a node failure and are never
retried automatically (MEM-ERR-5).

The plugin is built once per worker process, after fork, through the ``ditto_worker.stores``
entry point named in ``ditto.yaml`` (MEM-PY-1) — never at import time.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import FLEET_QUEUES, RETRIEVAL_SEARCH, NodeResult, to_wire
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.fleet.cancellation import RedisCancelWatcher, local_registry
from ditto_worker.fleet.celery_app import DEADLINE_HEADER
from ditto_worker.memory.scope import SCOPE_HEADER, parse_scope
from ditto_worker.memory.worker import MemoryWorker, NodeContext, create_memory_worker
from ditto_worker.retrieval.delegation import RetrievalWorker, set_default_client

__all__ = ["FleetRuntime", "register_tasks"]

log = logging.getLogger(__name__)

WorkerFactory = Callable[[], MemoryWorker]
RetrievalFactory = Callable[[], RetrievalWorker]


MUTATIONS = frozenset({"MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"})
"""Nodes whose tasks ack late (redelivered after a worker crash; applied once)."""


def _json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (what crossed the broker, near enough)."""
    try:
        return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return 0  # not JSON: the SDK's validation answers INVALID_INPUT


def _fleet_client(fleet: Any) -> Any:
    from ditto_worker.fleet.client import DittoClient

    return DittoClient.from_fleet(fleet)


class _Unavailable(Exception):
    """A worker definition could not be built (logged; answered as a failed NodeResult)."""


class FleetRuntime:
    """Builds and holds this process's worker definitions, once per process id.

    The MEMORY worker (store plugin) and the RETRIEVAL worker (search pipelines) are each
    built on the first call that needs them, so a retrieval-only worker never opens the
    store and a memory-only worker never loads a model. After a fork both are built anew.

    Args:
        config: the runtime config (store name, plugin settings, YAML limits, targets).
        worker_factory: builds the MEMORY worker; default: the store plugin named in
            ``workers.memory.store`` (or ``store``) via its entry point.
        store: plugin name overriding ``workers.memory.store``.
        retrieval_factory: builds the RETRIEVAL worker; default: the targets of
            ``workers.retrieval`` in ``ditto.yaml``.
    """

    def __init__(
        self,
        config: RuntimeConfig,
        worker_factory: WorkerFactory | None = None,
        store: str | None = None,
        retrieval_factory: RetrievalFactory | None = None,
    ) -> None:
        self.config = config
        self._factory = worker_factory or self._from_entry_point
        self._retrieval_factory = retrieval_factory or self._retrieval_from_config
        self._store_name = store
        self._lock = threading.Lock()
        self._built: dict[str, Any] = {}
        self._pid = -1

    def _from_entry_point(self) -> MemoryWorker:
        from ditto_worker.runtime.registry import build_store

        store = build_store(self.config, self._store_name)
        settings = self.config.memory_worker
        scope = None if settings.scope is None else settings.scope.model_dump()
        search = None
        if settings.search_target:
            from ditto_worker.retrieval.delegation import RemoteRetrievalSearchProvider

            search = RemoteRetrievalSearchProvider(target={"name": settings.search_target})
        return create_memory_worker(
            store, search=search, scope=scope, require_scope=settings.require_scope
        )

    def _retrieval_from_config(self) -> RetrievalWorker:
        from ditto_worker.retrieval.config import build_retrieval_worker

        return build_retrieval_worker(self.config)

    def _get(self, name: str, factory: Callable[[], Any]) -> Any:
        with self._lock:
            if self._pid != os.getpid():
                self._built, self._pid = {}, os.getpid()
            if name not in self._built:
                self._built[name] = factory()
            return self._built[name]

    def _watcher(self, app: Celery | None) -> RedisCancelWatcher | None:
        backend = str(app.conf.result_backend or "") if app is not None else ""
        if not backend.startswith(("redis://", "rediss://", "unix://")):
            return None
        watcher: RedisCancelWatcher = self._get("watcher", lambda: RedisCancelWatcher(backend))
        return watcher

    @property
    def worker(self) -> MemoryWorker:
        """This process's MEMORY worker, built on first use (after a fork, built anew)."""
        worker: MemoryWorker = self._get("memory", self._factory)
        return worker

    def _handler(self, node: str, app: Celery | None) -> MemoryWorker | RetrievalWorker:
        try:
            if node == RETRIEVAL_SEARCH:
                return self._get("retrieval", self._retrieval_factory)  # type: ignore[no-any-return]
            if not self.config.fleet.in_process:
                # MEM-RET-5: a RemoteRetrievalSearchProvider without a client uses this fleet
                fleet = self.config.fleet
                self._get("client", lambda: set_default_client(lambda: _fleet_client(fleet)))
            return self.worker
        except Exception as exc:
            log.exception("cannot build the worker for %s", node)
            raise _Unavailable(node) from exc

    def run(self, task: Task, node: str, input: Any) -> dict[str, Any]:
        """Run ``node`` for the task's current request; returns the NodeResult wire JSON.

        The call runs with a cancel token registered under its execution id (see
        :mod:`ditto_worker.fleet.cancellation`); a call flagged cancelled before it started is
        answered ``cancelled`` without running. A worker definition that cannot be built
        (bad config, store or model unavailable) answers ``MEMORY_BACKEND_ERROR``.
        """
        eid = str(task.request.id)
        watcher = self._watcher(task.app)
        headers = task.request.headers or {}
        raw_deadline = headers.get(DEADLINE_HEADER, getattr(task.request, DEADLINE_HEADER, None))
        deadline = float(raw_deadline) if isinstance(raw_deadline, int | float) else None
        try:
            sent = headers.get(SCOPE_HEADER, getattr(task.request, SCOPE_HEADER, None))
            scope = parse_scope(sent)
        except MemoryError as exc:
            return to_wire(NodeResult.failure(eid, node, exc.code, exc.safe_message))
        if watcher is not None and watcher.is_flagged(eid):
            cancelled = NodeResult.failure(
                eid, node, ErrorCode.MEMORY_CANCELLED, "cancelled before it started", "cancelled"
            )
            return to_wire(cancelled)
        size, cap = _json_size(input), self.config.memory_worker.max_input_bytes
        if size > cap:
            message = f"Invalid input: {size} bytes exceed the {cap}-byte limit (maxInputBytes)"
            return to_wire(NodeResult.failure(eid, node, ErrorCode.INVALID_INPUT, message))
        try:
            handler = self._handler(node, task.app)
        except _Unavailable:
            failed = NodeResult.failure(
                eid, node, ErrorCode.MEMORY_BACKEND_ERROR, f"{node} is not available on this worker"
            )
            return to_wire(failed)
        with local_registry().running(eid, deadline) as token:
            ctx = NodeContext(eid, token, deadline, self.config.memory, scope)
            return to_wire(handler.handle(node, input, ctx))


def _make_task(app: Celery, runtime: FleetRuntime, node: str) -> None:
    def run_node(self: Task, input: Any = None) -> dict[str, Any]:
        return runtime.run(self, node, input)

    run_node.__doc__ = f"Celery task for {node}: NodeResult JSON for the given input."
    # Mutations ack late and are redelivered if their worker process dies: the store's
    # execution id record makes the redelivery apply nothing twice (issue 7).
    mutation = node in MUTATIONS
    app.task(
        name=node,
        bind=True,
        shared=False,
        ignore_result=False,
        acks_late=mutation,
        reject_on_worker_lost=mutation,
    )(run_node)


def register_tasks(app: Celery, runtime: FleetRuntime) -> None:
    """Register the six MEMORY tasks and RETRIEVAL.SEARCH on ``app``, served by ``runtime``.

    A worker consumes only the queues it is started with (``--nodes``), so registering
    every task is harmless.
    """
    for node in FLEET_QUEUES:
        _make_task(app, runtime, node)
    app.ditto_runtime = runtime
