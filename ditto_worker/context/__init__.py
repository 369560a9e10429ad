"""The CONTEXT worker: working context for a task, pure or cached on Redis (SPEC.md MEM-CTX).

* :func:`create_context_worker` — the worker definition (``CONTEXT.UPDATE``,
  ``CONTEXT.LOAD``) the runtime serves embedded or on the fleet;
* :func:`merge_items` — the merge rule (an ingress item replaces the same id in place,
  new ids are appended in ingress order);
* :class:`InProcessContextCache` / ``ditto_worker.context.redis_cache.RedisContextCache``
  — where cache-mode contexts live (the Redis one is imported only when a Redis URL is
  configured, so importing this package imports no Redis client code of ours).
"""

from __future__ import annotations

from ditto_worker.config.context import REDIS_URL_ENV, ContextLimits, ContextWorkerSettings
from ditto_worker.context.cache import CachedContext, ContextCache, InProcessContextCache
from ditto_worker.context.contracts import (
    ContextCacheUpdateInput,
    ContextCacheUpdateOutput,
    ContextItem,
    ContextLoadInput,
    ContextLoadOutput,
    ContextState,
    ContextUpdateInput,
    ContextUpdateOutput,
)
from ditto_worker.context.merge import collapse_ingress, item_json, merge_items
from ditto_worker.context.worker import (
    CONTEXT_LOAD,
    CONTEXT_UPDATE,
    ContextNodes,
    create_context_worker,
)

__all__ = [
    "CONTEXT_LOAD",
    "CONTEXT_UPDATE",
    "REDIS_URL_ENV",
    "CachedContext",
    "ContextCache",
    "ContextCacheUpdateInput",
    "ContextCacheUpdateOutput",
    "ContextItem",
    "ContextLimits",
    "ContextLoadInput",
    "ContextLoadOutput",
    "ContextNodes",
    "ContextState",
    "ContextUpdateInput",
    "ContextUpdateOutput",
    "ContextWorkerSettings",
    "InProcessContextCache",
    "collapse_ingress",
    "create_context_worker",
    "item_json",
    "merge_items",
]
