"""The MEMORY worker definition: node descriptors, handlers and ``create_memory_worker``.

A MEMORY worker is data (SPEC.md MEM-RT-1): a :class:`~ditto_worker.runtime.WorkerDefinition`
of kind ``MEMORY`` whose six nodes run the validating SDK over the injected plugin
objects. The runtime serves it embedded or on the fleet; nothing here imports Celery.

Source: the seed's ``createMemoryWorker`` and node descriptors (``memoryGetNode`` …
``.type`` / ``.define(workerType, handler)``); SPEC.md MEM-NODE-2/3, MEM-RUN-4.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ditto_worker.contracts import (
    NODE_IDS,
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
    MemoryUpdateInput,
    MemoryWriteInput,
    NodeResult,
    any_result,
)
from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.memory.core import DefaultsArg, Memory
from ditto_worker.memory.ports import MemorySearchProvider, MemoryStore
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import Handler, NodeSpec, WorkerDefinition
from ditto_worker.runtime.node_spec import BatchCall
from ditto_worker.runtime.process import PerProcess
from ditto_worker.scope import Scope, parse_scope

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig

__all__ = [
    "MEMORY_WORKER_TYPE",
    "MemoryNode",
    "MemoryWorker",
    "NodeContext",
    "NodeDefinition",
    "NodeHandler",
    "create_memory_worker",
    "from_config",
    "memory_delete_node",
    "memory_get_node",
    "memory_query_node",
    "memory_search_node",
    "memory_update_node",
    "memory_write_node",
]

logger = logging.getLogger(__name__)

MEMORY_WORKER_TYPE = "MEMORY"
"""The worker kind that owns the six MEMORY nodes."""

NodeHandler = Handler
"""``handler(input, ctx) -> NodeResult``; ``input`` is the raw node input (a JSON dict)."""

OUTPUT_TYPES: dict[str, Any] = {
    "MEMORY.GET": list[MemoryItem],
    "MEMORY.QUERY": MemoryQueryOutput,
    "MEMORY.SEARCH": list[MemorySearchResult],
    "MEMORY.WRITE": list[MemoryItem],
    "MEMORY.UPDATE": list[MemoryItem],
    "MEMORY.DELETE": MemoryDeleteOutput,
}
"""Node id -> the type of its raw output (MEM-NODE-1)."""

INPUT_TYPES: dict[str, Any] = {
    "MEMORY.GET": MemoryGetInput,
    "MEMORY.QUERY": MemoryQueryInput,
    "MEMORY.SEARCH": MemorySearchInput,
    "MEMORY.WRITE": MemoryWriteInput,
    "MEMORY.UPDATE": MemoryUpdateInput,
    "MEMORY.DELETE": MemoryDeleteInput,
}
"""Node id -> the model of its input (MEM-NODE-1; published by the HTTP gateway)."""

MUTATIONS = frozenset({"MEMORY.WRITE", "MEMORY.UPDATE", "MEMORY.DELETE"})
"""Nodes that change the store: acked late and redelivered after a worker crash; the store
applies an execution id at most once (issue 7)."""


@dataclass(frozen=True)
class NodeDefinition:
    """One replacement handler for a node of a worker kind (``MemoryNode.define``)."""

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
class MemoryWorker(WorkerDefinition):
    """A MEMORY worker definition: the six nodes over one :class:`Memory` (MEM-NODE-3).

    Attributes (besides :class:`~ditto_worker.runtime.WorkerDefinition`'s):
        memory: the SDK the built-in handlers run on, or ``None`` when the definition
            builds it per process (:func:`from_config`).
    """

    memory: Memory | None = field(default=None, compare=False)

    @property
    def type(self) -> str:
        """The worker kind, ``"MEMORY"`` (the seed's worker type)."""
        return self.kind

    @property
    def handlers(self) -> Mapping[str, NodeHandler]:
        """Node id -> handler, all six node ids."""
        return {node: spec.handler for node, spec in self.nodes.items()}


def _as_node_result(handler: NodeHandler, node: str) -> NodeHandler:
    """An override answers a NodeResult (or its wire dict); anything else is a bad output."""

    def run(input: Any, ctx: NodeContext) -> NodeResult[Any]:
        result = handler(input, ctx)
        if isinstance(result, NodeResult):
            return result
        try:
            return any_result().model_validate(result)
        except ValidationError:
            return NodeResult.failure(
                ctx.execution_id, node, ErrorCode.INVALID_BACKEND_OUTPUT,
                "The node handler did not return a NodeResult.",
            )  # fmt: skip

    return run


def _sdk_handler(memory: Callable[[], Memory], node: str) -> NodeHandler:
    def handler(input: Any, ctx: NodeContext) -> NodeResult[Any]:
        return memory().execute(
            node,
            input,
            ctx.defaults,
            cancel=ctx.cancel,
            execution_id=ctx.execution_id,
            deadline=ctx.deadline,
            scope=ctx.scope,
            runtime=ctx.invoke,
            operation_id=ctx.operation_id,
        )

    handler.__name__ = handler.__qualname__ = f"memory_{node.split('.')[-1].lower()}_handler"
    return handler


def _specs(
    memory: Callable[[], Memory], overrides: Sequence[NodeDefinition], single_writer: bool = False
) -> list[NodeSpec]:
    handlers: dict[str, NodeHandler] = {node: _sdk_handler(memory, node) for node in NODE_IDS}
    replaced: set[str] = set()
    for definition in overrides:
        if definition.worker_type != MEMORY_WORKER_TYPE or definition.node not in handlers:
            raise ConfigError(f"override for {definition.node!r} is not a MEMORY node definition")
        if definition.node in replaced:
            raise ConfigError(f"override for {definition.node!r} given twice")
        replaced.add(definition.node)
        handlers[definition.node] = _as_node_result(definition.handler, definition.node)
    return [
        NodeSpec(
            node,
            handlers[node],
            mutation=node in MUTATIONS,
            output=OUTPUT_TYPES[node],
            input=INPUT_TYPES[node],
            serial=single_writer and node in MUTATIONS,
            prefetch=None if node in replaced else _prefetch(memory, node),
        )  # fmt: skip
        for node in NODE_IDS
    ]


def _prefetch(
    memory: Callable[[], Memory], node: str
) -> Callable[[Sequence[BatchCall]], Callable[[], None]] | None:
    """A coalesced batch's shared work (issue 36 item 3): its GETs read in one store call
    per scope; its vector SEARCHes' queries embedded in one call."""
    if node == "MEMORY.GET":
        return lambda calls: memory().prefetch_get(calls)
    if node == "MEMORY.SEARCH":
        return lambda calls: memory().prefetch_search(calls)
    return None


def _bound(scope: Scope | Mapping[str, str] | None) -> Scope | None:
    try:
        return parse_scope(scope)
    except MemoryError as exc:
        raise ConfigError(exc.safe_message) from None


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
        scope: bind the worker to one tenant and user (a
            :class:`~ditto_worker.scope.Scope` or ``{"tenant", "user", "space"?}``):
            every call runs for them (in its own space, else ``scope.space``), and a call
            whose trusted header names another tenant or user is refused
            (``PERMISSION_DENIED``).
        require_scope: refuse calls without a scope (when ``scope`` is ``None``).

    Raises:
        ConfigError: invalid ``defaults``, ``concurrency`` or ``scope``; an override for
            another worker type, for a node that is not a MEMORY node, or given twice.
    """
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ConfigError("concurrency must be an integer >= 1")
    bound = _bound(scope)
    memory = Memory(store, search, defaults)
    # a batch of mutations on a one-writer store runs in order: they would only queue on
    # its write lock (SQLite's busy handler polls it in sleeps)
    specs = _specs(lambda: memory, overrides, bool(getattr(store, "single_writer", False)))
    return MemoryWorker(
        MEMORY_WORKER_TYPE, {s.id: s for s in specs}, concurrency, None, None, None, bound,
        require_scope, memory=memory,
    )  # fmt: skip


def _memory_from_config(config: RuntimeConfig) -> Memory:
    from ditto_worker.runtime.registry import build_store

    store = build_store(config)
    search = None
    if config.memory_worker.search_target:
        from ditto_worker.memory.remote import RemoteRetrievalSearchProvider

        search = RemoteRetrievalSearchProvider(target={"name": config.memory_worker.search_target})
    return Memory(store, search)


def from_config(config: RuntimeConfig) -> MemoryWorker:
    """The MEMORY worker of a worker process, from ``workers.memory`` in ``ditto.yaml``.

    The store plugin (``workers.memory.store``, its settings ``plugins.<store>``) is built
    once per process, on :attr:`open` (before the worker announces ready) or on the first
    call — never at import and never in a parent process that forks later.
    ``workers.memory.searchTarget`` delegates MEMORY.SEARCH to RETRIEVAL.SEARCH
    (MEM-RET-2); ``scope`` / ``requireScope`` bind the worker (:mod:`.scope`).

    Raises:
        ConfigError: an invalid ``workers.memory.scope``.
    """
    from ditto_worker.runtime.registry import store_single_writer

    settings = config.memory_worker
    memory = PerProcess(lambda: _memory_from_config(config))
    bound = _bound(None if settings.scope is None else settings.scope.model_dump())
    specs = _specs(memory.get, (), store_single_writer(config))
    return MemoryWorker(
        MEMORY_WORKER_TYPE, {s.id: s for s in specs}, settings.concurrency,
        None, None, memory.open, bound, settings.require_scope,
    )  # fmt: skip
