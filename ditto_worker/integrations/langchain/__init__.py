"""LangChain adapters (issue 33 item 2; docs/integrations-langchain.md): a ``VectorStore``
and a ``BaseStore[str, bytes]`` over the MEMORY nodes of a runtime, for one trusted scope.

* :class:`DittoVectorStore` — a LangChain ``Document`` is a memory: ``page_content`` its
  content (a string), ``metadata`` its metadata object, ``Document.id`` its **key** (ids
  given to ``add_documents`` become keys; without one a uuid4 hex key is made). Adding a
  document whose key exists replaces its content and metadata (MEMORY.UPDATE) instead of
  duplicating it. ``similarity_search`` is MEMORY.SEARCH with the store's own embedder
  (``strategy`` ``vector`` by default; ``keyword``/``hybrid`` as the store offers), ``k``
  results at most, never thresholded; ``filter`` is our filter language (SPEC.md
  MEM-QUERY, ``{"topic": "food"}``, ``{"n": {"$gte": 2}}``). The LangChain
  ``embedding`` argument is not used: vectors come from the store's configured provider
  (``plugins.<store>.embedding``), so every writer shares one vector space.
* :class:`DittoByteStore` — ``BaseStore[str, bytes]``: each value is a memory keyed
  ``key_prefix + key`` (default ``lc-kv:``) whose content is the value in base64;
  ``yield_keys(prefix=)`` pages MEMORY.QUERY over a key range.

Both call ``runtime.invoke`` / ``ainvoke`` (embedded or fleet) with the ``scope`` given
at construction, never one from a document or a filter. A failed node call raises
:class:`DittoLangChainError` (a ``LangChainException``) with the node's code and message.
"""

from __future__ import annotations

from ditto_worker.integrations.langchain.bytestore import DittoByteStore
from ditto_worker.integrations.langchain.calls import DittoLangChainError
from ditto_worker.integrations.langchain.vectorstore import DittoVectorStore

__all__ = ["DittoByteStore", "DittoLangChainError", "DittoVectorStore"]
