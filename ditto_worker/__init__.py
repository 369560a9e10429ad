"""ditto_worker: long-term memory for LLM agents as a Celery worker fleet.

The public API of the SDK (SPEC.md "Python mapping"): contracts, error codes, the
validating MEMORY SDK (:func:`create_memory`), the worker definitions
(:func:`create_memory_worker`) and the runtime's data types. Importing it loads no
Celery, no broker client and no model library, and connects to nothing (MEM-RT-5).
The runtime config (``ditto.yaml``: :class:`~ditto_worker.config.RuntimeConfig`,
:func:`~ditto_worker.config.load_runtime_config_file`) is
:mod:`ditto_worker.config`: an SDK call does not need it, so importing the SDK does
not build its models.

The layers, each a package:

* :mod:`ditto_worker.memory` — the SDK: core, checks, ports, scope, filters, text;
* :mod:`ditto_worker.runtime` — worker definitions, ``NodeContext``, plugin registry;
* :mod:`ditto_worker.retrieval` — embeddings, the search pipeline, RETRIEVAL.SEARCH;
* :mod:`ditto_worker.fleet` — Celery: app, tasks, :class:`~ditto_worker.fleet.DittoClient`;
* :mod:`ditto_worker.cli` — the ``ditto-worker`` command, demo and evaluation;
* :mod:`ditto_worker.testing` — in-memory store, test embedder, conformance suite.
"""

from __future__ import annotations

import typing as _typing

from ditto_worker.contracts import (
    MAX_LIMIT,
    NODE_IDS,
    NODE_QUEUES,
    ErrorInfo,
    Identifier,
    Limit,
    MemoryDefaults,
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryDraft,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    MemoryWriteInput,
    NodeId,
    NodeResult,
    NodeStatus,
    OrderBy,
    to_wire,
)
from ditto_worker.errors import ConfigError, DittoError, ErrorCode, MemoryError, NodeError
from ditto_worker.memory.core import (
    BUILTIN_QUERY_LIMIT,
    BUILTIN_SEARCH_LIMIT,
    Memory,
    MemoryResources,
    create_memory,
)
from ditto_worker.memory.ports import (
    CancelToken,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)
from ditto_worker.memory.worker import (
    MEMORY_WORKER_TYPE,
    MemoryNode,
    MemoryWorker,
    NodeContext,
    NodeDefinition,
    NodeHandler,
    create_memory_worker,
    memory_delete_node,
    memory_get_node,
    memory_query_node,
    memory_search_node,
    memory_update_node,
    memory_write_node,
)
from ditto_worker.runtime import (
    Graph,
    GraphBudgetExhausted,
    GraphError,
    GraphResult,
    KindCodes,
    LoopResult,
    NodeSpec,
    Runtime,
    WorkerDefinition,
    create_ditto,
    graph,
)
from ditto_worker.scope import Scope

__all__ = [
    # contracts
    "MAX_LIMIT",
    "NODE_IDS",
    "NODE_QUEUES",
    "ErrorInfo",
    "Identifier",
    "Limit",
    "MemoryDefaults",
    "MemoryDeleteInput",
    "MemoryDeleteOutput",
    "MemoryDraft",
    "MemoryGetInput",
    "MemoryItem",
    "MemoryQueryInput",
    "MemoryQueryOutput",
    "MemorySearchInput",
    "MemorySearchResult",
    "MemoryUpdateEntry",
    "MemoryUpdateInput",
    "MemoryWriteInput",
    "NodeId",
    "NodeResult",
    "NodeStatus",
    "OrderBy",
    "to_wire",
    # errors
    "ConfigError",
    "DittoError",
    "ErrorCode",
    "MemoryError",
    "NodeError",
    # ports
    "CancelToken",
    "MemoryCallOptions",
    "MemorySearchProvider",
    "MemoryStore",
    "Scope",
    # SDK
    "BUILTIN_QUERY_LIMIT",
    "BUILTIN_SEARCH_LIMIT",
    "Memory",
    "MemoryResources",
    "create_memory",
    # runtime and worker definitions
    "Graph",
    "GraphBudgetExhausted",
    "GraphError",
    "GraphResult",
    "KindCodes",
    "LoopResult",
    "NodeSpec",
    "Runtime",
    "WorkerDefinition",
    "create_context_worker",
    "create_ditto",
    "create_infer_worker",
    "graph",
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


def create_context_worker(*args: _typing.Any, **kwargs: _typing.Any) -> WorkerDefinition:
    """The CONTEXT worker definition (the seed's ``createContextWorker``; SPEC MEM-CTX).

    Takes the arguments of :func:`ditto_worker.context.create_context_worker` (which it
    calls); defined here so that importing the SDK does not import the CONTEXT package.
    """
    from ditto_worker.context import create_context_worker as create

    return create(*args, **kwargs)


def create_infer_worker(*args: _typing.Any, **kwargs: _typing.Any) -> WorkerDefinition:
    """The INFER worker definition (SPEC MEM-INF): ``INFER.GENERATE`` on an
    OpenAI-compatible endpoint.

    Takes the arguments of :func:`ditto_worker.infer.create_infer_worker` (which it calls);
    defined here so that importing the SDK does not import the INFER package.
    """
    from ditto_worker.infer import create_infer_worker as create

    return create(*args, **kwargs)
