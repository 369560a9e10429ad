"""``ditto_plugin_milvus``: the Milvus MemoryStore of ditto_worker (issue 27).

Full memories as fields of one Milvus collection, the shared filter language as Milvus
boolean expressions, the shared tokenizer's terms into Milvus's BM25, dense vectors with
COSINE search, on the official ``pymilvus`` (``pip install "ditto-worker[milvus]"``): a
Milvus server (``uri: http://host:19530``) or Milvus Lite 3 (``uri: ./data/milvus.db``; a
Python reimplementation of Milvus that pymilvus runs inside the process), one code path
for both. A worker builds it through the entry point ``ditto_worker.stores: milvus =
"ditto_plugin_milvus:create_store"``; applications may construct
:class:`MilvusMemoryStore` directly. User guide: docs/stores-milvus.md.
"""

from __future__ import annotations

from ditto_plugin_milvus.settings import DEFAULT_URI, create_store
from ditto_plugin_milvus.store import MilvusMemoryStore

__all__ = ["DEFAULT_URI", "MilvusMemoryStore", "create_store"]
