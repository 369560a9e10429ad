"""This process's worker definitions and the envelope of one fleet call (MEM-RT-2):
:class:`FleetRuntime` builds a call's :class:`~ditto_worker.runtime.NodeContext` once from
its message (execution id, deadline, trusted scope, operation id, trace, cancel token) and
hands the JSON input to :func:`~ditto_worker.runtime.execute.run_node`.
:mod:`ditto_worker.fleet.tasks` registers one task per node on it and re-exports every
name here.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from celery import Celery, Task

from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.fleet.cancellation import RedisCancelWatcher, local_registry
from ditto_worker.fleet.celery_app import DEADLINE_HEADER, SENT_HEADER
from ditto_worker.fleet.redis_urls import is_redis_url
from ditto_worker.operation import OPERATION_HEADER, check_operation_id
from ditto_worker.runtime.calls import sub_invoker
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import NodeSpec, WorkerDefinition, WorkerSource
from ditto_worker.runtime.execute import run_node
from ditto_worker.runtime.node_spec import BatchCall
from ditto_worker.runtime.process import PerProcess
from ditto_worker.runtime.registry import node_table, worker_definitions
from ditto_worker.runtime.trace import TRACE_HEADERS, trace_from_headers
from ditto_worker.scope import SCOPE_HEADER, parse_scope, resolve_scope

__all__ = ["INPUT_BYTES", "FleetRuntime"]

log = logging.getLogger("ditto_worker.fleet.tasks")  # the worker's logger, as before

_MISSING = object()

INPUT_BYTES = "ditto_input_bytes"
"""Request attribute: bytes of the message body as it came off the broker, or ``None`` when
the transport handed over no raw body (then the input is measured; never counted as 0)."""


def _nothing() -> None:
    """The release of a batch without shared work."""


def _header(request: Any, name: str) -> Any:
    headers = request.headers or {}
    return headers.get(name, getattr(request, name, None))


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
        from ditto_worker.fleet.coalescing import group_concurrency

        in_flight = group_concurrency(self.config, self.table)
        return DittoClient.from_fleet(self.config.fleet, nodes=self.table, in_flight=in_flight)

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

    def _refusal(self, node: str, eid: str, input: Any, size: int | None) -> NodeResult[Any] | None:
        if size is None:  # no body size known (not 0): measure the input itself
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
        size = getattr(request, INPUT_BYTES, None)
        return self.run_call(node, str(request.id), input, lambda name: _header(request, name),
                             size if isinstance(size, int) else None)  # fmt: skip

    def prefetch(self, node: str, calls: Sequence[tuple[str, Any, Callable[[str], Any]]]) -> Any:
        """Before a batch's calls ``(execution id, input, header)`` run: the node's shared
        work for them (``NodeSpec.prefetch``; a call whose scope is refused is left out);
        returns the release to call when they ended. Never raises."""
        definition, spec = self._current()[node]
        if spec.prefetch is None:
            return _nothing
        found: list[BatchCall] = []
        for eid, input, header in calls:
            raw = header(DEADLINE_HEADER)
            try:
                scope = resolve_scope(definition.scope, parse_scope(header(SCOPE_HEADER)),
                                      definition.require_scope)  # fmt: skip
            except NodeError:
                continue
            deadline = float(raw) if isinstance(raw, int | float) else None
            found.append(BatchCall(eid, input, scope, deadline))
        try:
            return spec.prefetch(found)
        except Exception as exc:  # each call does its own work
            log.warning("a %s batch's shared work failed (%s)", node, type(exc).__name__)
            return _nothing

    def run_call(
        self, node: str, eid: str, input: Any, header: Callable[[str], Any], size: int | None
    ) -> NodeResult[Any]:
        """Run one call of ``node`` (a task's, or one of a batch's,
        :mod:`ditto_worker.fleet.batch`): ``header(name)`` reads its deadline, trusted
        scope, operation id, send time and trace; ``size`` is its input's bytes, ``None``
        to measure them (against ``fleet.maxInputBytes``)."""
        definition, spec = self._current()[node]
        raw_deadline = header(DEADLINE_HEADER)
        deadline = float(raw_deadline) if isinstance(raw_deadline, int | float) else None
        try:
            scope = parse_scope(header(SCOPE_HEADER))
            operation_id = check_operation_id(header(OPERATION_HEADER))
        except NodeError as exc:
            return NodeResult.failure(eid, node, exc.code, exc.safe_message)
        refused = self._refusal(node, eid, input, size)
        if refused is not None:
            return refused
        watcher = self._watcher.get()
        with local_registry().running(eid, deadline) as token:
            # a call with effects always reads its flag; one without may rely on the
            # watcher's announcements when they are known complete (watcher.covers)
            sent = header(SENT_HEADER)
            vouched = not spec.mutation and watcher is not None and watcher.covers(sent)
            if watcher is not None and not vouched and watcher.is_flagged(eid):
                token.cancel()
            trace = trace_from_headers({n: header(n) for n in TRACE_HEADERS.values()})
            ctx = NodeContext(
                eid, node, token, deadline, scope,
                invoke=sub_invoker(self._client.get, deadline, token, scope, trace),
                headers=trace, defaults=self._defaults(definition.kind),
                operation_id=operation_id,
            )  # fmt: skip
            return run_node(definition, spec, input, ctx)
