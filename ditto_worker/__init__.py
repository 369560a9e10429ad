"""ditto_worker: long-term memory for LLM agents as a Celery worker fleet.

The public API (SPEC.md "Python mapping"). The SDK (:func:`create_memory`) and the worker
definition (:func:`create_memory_worker`) are transport-free; :class:`DittoClient` sends
node calls through Celery; the Celery app and tasks live in their own modules.
"""

from __future__ import annotations

from ditto_worker.client import DittoClient  # imports Celery (the invoke client)
from ditto_worker.config import RuntimeConfig, load_runtime_config_file
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
from ditto_worker.core import (
    BUILTIN_QUERY_LIMIT,
    BUILTIN_SEARCH_LIMIT,
    Memory,
    MemoryResources,
    create_memory,
)
from ditto_worker.errors import ConfigError, DittoError, ErrorCode, MemoryError
from ditto_worker.ports import (
    CancelToken,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)
from ditto_worker.scope import Scope
from ditto_worker.worker import (
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
    # worker definition
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
    # client / config
    "DittoClient",
    "RuntimeConfig",
    "load_runtime_config_file",
]
