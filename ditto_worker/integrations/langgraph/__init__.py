"""LangGraph's ``BaseStore`` on ditto-worker (``pip install 'ditto-worker[langgraph]'``).

* :class:`DittoStore` — the store (``batch``/``abatch`` over LangGraph's four ops) over the
  MEMORY nodes of a runtime, under the host's trusted scope.
* :class:`AsyncDittoStore` — the same for async hosts (sync calls on the loop refused).
* :func:`embedding_provider` — LangGraph's ``IndexConfig.embed`` as our embedding
  provider, for the store under it.

docs/integrations-langgraph.md has the example; the record layout is in
:mod:`ditto_worker.integrations.langgraph.records`.
"""

from __future__ import annotations

from ditto_worker.integrations.langgraph.embeddings import LangGraphEmbeddings, embedding_provider
from ditto_worker.integrations.langgraph.store import AsyncDittoStore, DittoStore, NodeCallError

__all__ = [
    "AsyncDittoStore",
    "DittoStore",
    "LangGraphEmbeddings",
    "NodeCallError",
    "embedding_provider",
]
