"""The MEMORY worker definition: node descriptors, handlers and ``create_memory_worker``.

Transport-free: the Celery task layer builds a :class:`NodeContext` per message and calls
``worker.handle(node, input, ctx)``, then serializes the NodeResult with
:func:`~ditto_worker.contracts.to_wire`. Nothing here imports Celery.

Source: the seed's ``createMemoryWorker`` and node descriptors (``memoryGetNode`` …
``.type`` / ``.define(workerType, handler)``); SPEC.md MEM-NODE-2/3, MEM-RUN-4.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from ditto_worker.contracts import NODE_IDS, MemoryDefaults, NodeResult
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.memory.core import DefaultsArg, Memory
from ditto_worker.memory.ports import CancelToken, MemorySearchProvider, MemoryStore
from ditto_worker.memory.scope import Scope, parse_scope, resolve_scope

__all__ = [
    "MEMORY_WORKER_TYPE",
    "MemoryNode",
    "MemoryWorker",
    "NodeContext",
    "NodeDefinition",
    "NodeHandler",
    "create_memory_worker",
    "memory_delete_node",
    "memory_get_node",
    "memory_query_node",
    "memory_search_node",
    "memory_update_node",
    "memory_write_node",
]

logger = logging.getLogger(__name__)

MEMORY_WORKER_TYPE = "MEMORY"
"""The worker type that owns the six MEMORY nodes."""


@dataclass(frozen=True)
class NodeContext:
    """What the host knows about one node call (never taken from the request body).

    Attributes:
        execution_id: the call id (the Celery task id on the fleet).
        cancel: the call's cancel token, passed on to the plugin (MEM-PY-2).
        deadline: absolute ``time.time()`` seconds after which the caller gave up.
        defaults: the runtime-YAML layer (``workers.memory`` of ``ditto.yaml``), below
            the factory defaults (MEM-CONF-2).
        scope: the tenant scope the caller's trusted side sent (the ``ditto_scope``
            message header), or ``None``; :meth:`MemoryWorker.handle` resolves it against
            the worker's own bound scope (:mod:`ditto_worker.memory.scope`).
    """

    execution_id: str
    cancel: CancelToken | None = None
    deadline: float | None = None
    defaults: MemoryDefaults | None = None
    scope: Scope | None = None


NodeHandler = Callable[[Any, NodeContext], NodeResult[Any]]
"""``handler(input, ctx) -> NodeResult``; ``input`` is the raw node input (a JSON dict)."""


@dataclass(frozen=True)
class NodeDefinition:
    """One node registered on a worker type: ``handler`` answers calls to ``node``."""

    worker_type: str
    node: str
    handler: NodeHandler


@dataclass(frozen=True)
class MemoryNode:
    """A node descriptor (MEM-NODE-2): ``type`` is the node id."""

    type: str

    def define(self, worker_type: str, handler: NodeHandler) -> NodeDefinition:
        """Register a replacement handler, which then owns every NodeResult rule itself.

        Args:
            worker_type: the worker type, ``"MEMORY"`` for :func:`create_memory_worker`.
            handler: ``handler(input, ctx) -> NodeResult`` (a plain dict in NodeResult
                wire shape is accepted too).
        """
        return NodeDefinition(worker_type=worker_type, node=self.type, handler=handler)


memory_get_node = MemoryNode("MEMORY.GET")
memory_query_node = MemoryNode("MEMORY.QUERY")
memory_search_node = MemoryNode("MEMORY.SEARCH")
memory_write_node = MemoryNode("MEMORY.WRITE")
memory_update_node = MemoryNode("MEMORY.UPDATE")
memory_delete_node = MemoryNode("MEMORY.DELETE")


@dataclass(frozen=True)
class MemoryWorker:
    """A MEMORY worker definition: one handler per node id (MEM-NODE-3).

    Attributes:
        type: the worker type, ``"MEMORY"``.
        handlers: node id -> handler, all six node ids; read-only.
        concurrency: concurrent entries allowed (MEM-RUN-1), or ``None`` for the
            host's default; it creates no DB pool.
        memory: the SDK the built-in handlers run on, or ``None``.
        scope: the tenant scope this worker is bound to (``workers.memory.scope``), or
            ``None``: it serves the scope each call's trusted header names.
        require_scope: refuse calls that arrive without any scope.
    """

    type: str
    handlers: Mapping[str, NodeHandler]
    concurrency: int | None = None
    memory: Memory | None = None
    scope: Scope | None = None
    require_scope: bool = False

    def handle(self, node: str, input: Any, ctx: NodeContext) -> NodeResult[Any]:
        """Answer one node call; never raises for a call failure.

        Returns:
            The handler's NodeResult; ``failed``/``UNKNOWN_NODE`` for a node id not in
            ``handlers``; ``failed``/``PERMISSION_DENIED`` when the call's scope differs
            from the worker's bound one, or is missing and :attr:`require_scope`;
            ``failed``/``MEMORY_BACKEND_ERROR`` if an override raised (logged);
            ``failed``/``INVALID_BACKEND_OUTPUT`` if an override returned something that
            is not a NodeResult. The handler receives ``ctx`` with the resolved scope.
        """
        node = node if isinstance(node, str) else str(node)
        eid = ctx.execution_id or str(uuid.uuid4())
        handler = self.handlers.get(node)
        if handler is None:
            return NodeResult.failure(eid, node, ErrorCode.UNKNOWN_NODE, "Unknown MEMORY node id.")
        try:
            scope = resolve_scope(self.scope, ctx.scope, self.require_scope)
        except MemoryError as exc:
            return NodeResult.failure(eid, node, exc.code, exc.safe_message)
        if scope != ctx.scope:
            ctx = replace(ctx, scope=scope)
        try:
            result: object = handler(input, ctx)
        except Exception:
            logger.error("%s %s: the node handler raised", node, eid, exc_info=True)
            return NodeResult.failure(
                eid,
                node,
                ErrorCode.MEMORY_BACKEND_ERROR,
                "The node handler failed; see the worker log for details.",
            )
        return _as_node_result(result, node, eid)


def _as_node_result(result: object, node: str, eid: str) -> NodeResult[Any]:
    if isinstance(result, NodeResult):
        return result
    try:
        return NodeResult[Any].model_validate(result)
    except ValidationError:
        return NodeResult.failure(
            eid,
            node,
            ErrorCode.INVALID_BACKEND_OUTPUT,
            "The node handler did not return a NodeResult.",
        )


def _sdk_handler(memory: Memory, node: str) -> NodeHandler:
    def handler(input: Any, ctx: NodeContext) -> NodeResult[Any]:
        return memory.execute(
            node,
            input,
            ctx.defaults,
            cancel=ctx.cancel,
            execution_id=ctx.execution_id,
            deadline=ctx.deadline,
            scope=ctx.scope,
        )

    handler.__name__ = handler.__qualname__ = f"memory_{node.split('.')[-1].lower()}_handler"
    return handler


def create_memory_worker(
    store: MemoryStore,
    search: MemorySearchProvider | None = None,
    defaults: DefaultsArg = None,
    concurrency: int | None = None,
    overrides: Sequence[NodeDefinition] = (),
    scope: Scope | Mapping[str, str] | None = None,
    require_scope: bool = False,
) -> MemoryWorker:
    """Register all six MEMORY nodes over one :class:`~ditto_worker.memory.core.Memory`.

    The injected plugin objects are reused by every call (MEM-RUN-4); isolated tenants
    get their own plugins and worker definitions.

    Args:
        store: the fact store plugin object.
        search: optional provider replacing ``store.search`` (MEM-SEARCH-5).
        defaults: factory defaults ``{queryLimit?, searchLimit?}`` (MEM-CONF-2).
        concurrency: concurrent entries (``ditto.yaml``), an int >= 1, or ``None``.
        overrides: ``memory_*_node.define("MEMORY", handler)`` results, each replacing
            one node's handler (MEM-NODE-2).
        scope: bind the worker to one tenant scope (a :class:`~ditto_worker.memory.scope.Scope`
            or ``{"tenant", "user"}``): every call runs in it, and a call whose trusted
            header names another scope is refused (``PERMISSION_DENIED``).
        require_scope: refuse calls without a scope (when ``scope`` is ``None``).

    Raises:
        ConfigError: invalid ``defaults``, ``concurrency`` or ``scope``; an override for
            another worker type, for a node that is not a MEMORY node, or given twice.
    """
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ConfigError("concurrency must be an integer >= 1")
    try:
        bound = parse_scope(scope)
    except MemoryError as exc:
        raise ConfigError(exc.safe_message) from None
    memory = Memory(store, search, defaults)
    handlers: dict[str, NodeHandler] = {node: _sdk_handler(memory, node) for node in NODE_IDS}
    replaced: set[str] = set()
    for definition in overrides:
        if definition.worker_type != MEMORY_WORKER_TYPE or definition.node not in handlers:
            raise ConfigError(f"override for {definition.node!r} is not a MEMORY node definition")
        if definition.node in replaced:
            raise ConfigError(f"override for {definition.node!r} given twice")
        replaced.add(definition.node)
        handlers[definition.node] = definition.handler
    return MemoryWorker(
        type=MEMORY_WORKER_TYPE,
        handlers=MappingProxyType(handlers),
        concurrency=concurrency,
        memory=memory,
        scope=bound,
        require_scope=require_scope,
    )
