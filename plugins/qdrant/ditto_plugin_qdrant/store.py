"""``QdrantMemoryStore``: MemoryStore + native search over one Qdrant collection.

Built on the plugin kit, not on the SQL plugins: the shared filter parser
(:mod:`ditto_worker.memory.filters`, translated by :mod:`ditto_plugin_qdrant.payload`),
the shared cursors, the scope namespace (:func:`ditto_worker.memory.scope.namespace_of`),
the embedding port (:mod:`ditto_worker.memory.vectors`) and ``search`` from
:class:`~ditto_worker.memory.native.NativeSearch` (strategy dispatch, result shape,
``hybrid`` through the shared retrieval pipeline); this module supplies the six
operations and the two candidate searches.

The collection (created on first use when missing) has, per its embedding identity, one
named dense vector (``Cosine``) and the sparse vector ``keywords`` (``modifier: idf``,
:mod:`ditto_plugin_qdrant.keywords`); its metadata records the identity, the embed policy
and the keyword tokenizer (a collection fixes them: another provider or policy fails
every call with ``EMBEDDING_MISMATCH``; a model change is
:meth:`QdrantMemoryStore.reembed_embeddings`, ``ditto-worker reindex``, which builds the
new identity's collection and makes the collection name its alias,
:mod:`ditto_plugin_qdrant.reembed`). On a server, payload indexes are created
for the namespace (``is_tenant``), id, key, sequence, update instant and the metadata
paths of ``payloadIndexes`` (default ``kind``); local mode has none (brute force).

Behaviour (declared in ``capabilities``):

* Every operation is confined to the call's namespace (all six; keys unique per
  namespace, ids of another scope not found). Every mutation is sent with ``wait=true``.
* Keys: a WRITE whose key is taken (or repeated in the batch) is ``CONFLICT`` and writes
  nothing. The check reads, then writes: it is **not a multi-writer CAS** (seed) — two
  processes writing the same new key at once can both succeed; use one writer per
  user/task or an external lock.
* Batches are not atomic (``partial_commit``): points are sent in requests of
  :data:`CHUNK` points; a failure part-way leaves the requests sent. WRITE/UPDATE/DELETE
  are exactly-once by execution id all the same (:mod:`ditto_plugin_qdrant.executions`).
* Cancel: a cancel seen before the first mutation request commits nothing; once a
  mutation has started it is completed (its execution record written), and the SDK
  reports the call cancelled. Reads check the token before each request.
* QUERY: ``orderBy`` on ``createdAt`` or ``updatedAt`` only (one term; metadata order is
  ``UNSUPPORTED_ORDER_BY``): Qdrant's ``order_by`` has no tie-break, so a page's last run
  of equal values is read whole and the cursor carries the tie-break (sequence, id).
* SEARCH: ``vector`` (default with an embedder: native cosine on the named vector;
  exact in local mode or with ``exactSearch``), ``keyword`` (sparse vectors, BM25-like,
  IDF over the call's own namespace: ``search_params.idf`` with a corpus filter, so
  another tenant's records change no score), ``hybrid`` (shared pipeline). Ties in
  score are ordered by sequence; a tie run at the cut is read whole.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from ditto_plugin_qdrant import executions as ex
from ditto_plugin_qdrant.connection import Connection
from ditto_plugin_qdrant.points import CHUNK, Clock, dense_name
from ditto_plugin_qdrant.reembed import QdrantReembed
from ditto_worker.memory.capabilities import ALL_FILTER_OPERATORS, StoreCapabilities
from ditto_worker.memory.native import VECTOR_OPTIONS
from ditto_worker.memory.ports import EmbeddingProvider
from ditto_worker.memory.retention import DEFAULT_OPERATION_RETENTION_S, LedgerRetention

__all__ = ["CHUNK", "DEFAULT_COLLECTION", "QdrantMemoryStore", "capabilities_for"]

DEFAULT_COLLECTION: Final = "ditto_memories"
_PARTIAL: Final = (
    "points are sent in requests of 256 with wait=true; a failure part-way leaves the "
    "requests already sent; a retry with the same execution id completes the batch without "
    "duplicates (deterministic point ids, execution record written last)"
)


def capabilities_for(embedder: bool, exact_vectors: bool, local: bool) -> StoreCapabilities:
    """What the store declares (module docstring), by configuration."""
    times = frozenset({"createdAt", "updatedAt"})
    extras = {"deadline", "exactly_once"} | ({"embed_on_write"} if embedder else set())
    return StoreCapabilities(
        filter_operators=ALL_FILTER_OPERATORS,
        order_by_fields=times,
        string_range_fields=times,
        search_strategies=("keyword", "vector", "hybrid") if embedder else ("keyword",),
        default_strategy="vector" if embedder else "keyword",
        keyword_strategy="keyword",
        keyword_cjk=True,
        keyword_scope_statistics=True,
        search_options=VECTOR_OPTIONS if embedder else frozenset(),
        exhaustive_strategies=("vector",) if embedder and exact_vectors else (),
        key_conflict="error",
        batch_atomic=False,
        partial_commit=_PARTIAL,
        cancel=True,
        scope=True,
        operation_ids=True,
        conditional_update=local,
        extras=frozenset(extras | (set() if local else {"multi_process"})),
    )


class QdrantMemoryStore(QdrantReembed):
    """MemoryStore and native MemorySearchProvider on one Qdrant collection.

    Args:
        url: a Qdrant server URL; ``None`` for local mode at ``path``.
        path: the local-mode folder (one process at a time).
        collection: the collection name.
        api_key: the server's API key (never logged nor put in an error).
        timeout_s: longest wait for one server request (a call's deadline may cut it).
        embedder: the embedding provider of WRITE/UPDATE and of ``vector``/``hybrid``;
            ``None``: keyword search only.
        embed_kinds: the embed policy: only records whose ``metadata.kind`` is one of
            these get a vector (``None``: every record with text).
        hybrid: ``hybrid`` pipeline settings (a ``RetrievalConfig`` or its mapping).
        execution_retention_s: how long execution records are kept, seconds.
        operation_retention_s: how long an operation id answers its replay, seconds
            (then ``OPERATION_EXPIRED``; pruned after twice that:
            :mod:`ditto_worker.memory.retention`).
        exact_search: server only: exact (full scan) vector search instead of HNSW;
            local mode is always exact.
        durability: local mode's storage sync, ``"process"`` or ``"power"``
            (:mod:`ditto_plugin_qdrant.connection`).
        payload_indexes: metadata paths (dotted) indexed on a server.

    Errors: ``MemoryError`` with ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
    ``INVALID_CURSOR``, ``CONFLICT``, ``NOT_FOUND``, ``UNSUPPORTED_STRATEGY``,
    ``INVALID_INPUT``, ``MEMORY_CANCELLED``, ``MEMORY_TIMEOUT``, ``EMBEDDING_MISMATCH``,
    ``EMBEDDING_UNAVAILABLE`` or ``MEMORY_BACKEND_ERROR`` (safe messages).
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        path: str | None = None,
        collection: str = DEFAULT_COLLECTION,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        embedder: EmbeddingProvider | None = None,
        embed_kinds: Sequence[str] | None = None,
        hybrid: Any = None,
        execution_retention_s: float = ex.DEFAULT_RETENTION_S,
        operation_retention_s: float = DEFAULT_OPERATION_RETENTION_S,
        exact_search: bool = False,
        durability: str = "process",
        payload_indexes: Sequence[str] = ("kind",),
    ) -> None:
        self._conn = Connection(
            url=url, path=path, api_key=api_key, timeout_s=timeout_s, durability=durability
        )
        self.collection = collection
        self._embedder = embedder
        self._embed_kinds = None if embed_kinds is None else sorted(set(embed_kinds))
        self._hybrid_settings = hybrid
        self._retention_s = execution_retention_s
        self.retention = LedgerRetention(operation_retention_s, execution_retention_s)
        self._exact = exact_search or self._conn.local
        self._indexes = tuple(payload_indexes)
        self._dense = None if embedder is None else dense_name(embedder.identity)
        self._mismatch: str | None = None
        self._refuse_writes = False
        self._ready_lock = threading.Lock()
        self._ready = False
        self._cursor_secret = ""
        self._clock = Clock()
        self._mutation_lock = threading.RLock()
        self.capabilities = capabilities_for(embedder is not None, self._exact, self._conn.local)
