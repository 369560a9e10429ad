"""The MEMORY SDK: the validating core, the plugin ports, scope, filters, keyword text.

Transport-free and import-light (SPEC.md MEM-RT-5): nothing here imports Celery, a
broker client or a model library, and importing connects to nothing. Modules:

* :mod:`.core` — :func:`create_memory`, the validating SDK (the only caller of the ports);
* :mod:`.checks` — input and output rules of the six operations (MEM-ERR);
* :mod:`.ports` — ``MemoryStore``, ``MemorySearchProvider``, ``EmbeddingProvider``,
  ``MemoryCallOptions``;
* :mod:`.worker` — the MEMORY worker definition (:func:`create_memory_worker`, node
  descriptors);
* :mod:`.scope` — tenant scope from the trusted side;
* :mod:`.filters` — the shared filter language's parser and evaluator (MEM-PY-5);
* :mod:`.capabilities` — what a store declares (conformance);
* :mod:`.text` — keyword tokens shared by every store.
"""

from __future__ import annotations

from ditto_worker.memory.core import (
    BUILTIN_QUERY_LIMIT,
    BUILTIN_SEARCH_LIMIT,
    Memory,
    MemoryResources,
    create_memory,
)
from ditto_worker.memory.ports import (
    EmbeddingIdentity,
    EmbeddingProvider,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)
from ditto_worker.memory.worker import (
    MEMORY_WORKER_TYPE,
    MemoryNode,
    MemoryWorker,
    create_memory_worker,
    memory_delete_node,
    memory_get_node,
    memory_query_node,
    memory_search_node,
    memory_update_node,
    memory_write_node,
)
from ditto_worker.scope import Scope

__all__ = [
    "BUILTIN_QUERY_LIMIT",
    "BUILTIN_SEARCH_LIMIT",
    "MEMORY_WORKER_TYPE",
    "EmbeddingIdentity",
    "EmbeddingProvider",
    "Memory",
    "MemoryCallOptions",
    "MemoryNode",
    "MemoryResources",
    "MemorySearchProvider",
    "MemoryStore",
    "MemoryWorker",
    "Scope",
    "create_memory",
    "create_memory_worker",
    "memory_delete_node",
    "memory_get_node",
    "memory_query_node",
    "memory_search_node",
    "memory_update_node",
    "memory_write_node",
]
