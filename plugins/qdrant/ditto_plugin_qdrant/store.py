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
every call with ``EMBEDDING_MISMATCH``; a model change needs a new collection and
:meth:`QdrantMemoryStore.reindex_embeddings`). On a server, payload indexes are created
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

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from qdrant_client import QdrantClient, models

from ditto_plugin_qdrant import executions as ex
from ditto_plugin_qdrant.connection import Connection
from ditto_plugin_qdrant.keywords import SPARSE_VECTOR, TOKENIZER, document_vector, query_vector
from ditto_plugin_qdrant.payload import (
    CREATED,
    MEMORY,
    UPDATED,
    field_hash,
    memory_payload,
    namespace_filter,
)
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    MemoryWriteInput,
    to_wire,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import ALL_FILTER_OPERATORS, StoreCapabilities
from ditto_worker.memory.cursors import new_cursor_secret
from ditto_worker.memory.filters import (
    SortValue,
    decode_cursor,
    encode_cursor,
    parse_filter,
    parse_order_by,
    query_fingerprint,
)
from ditto_worker.memory.native import VECTOR_OPTIONS, Hit, NativeSearch
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider, MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.vectors import content_vectors, mismatch_message

__all__ = ["CHUNK", "DEFAULT_COLLECTION", "QdrantMemoryStore", "capabilities_for"]

logger = logging.getLogger(__name__)

CHUNK: Final = 256
"""Points per upsert/delete/retrieve request."""
DEFAULT_COLLECTION: Final = "ditto_memories"
_FORMAT: Final = 1
_SCROLL_PAGE: Final = 1000
_LOCAL_PAGE: Final = 1 << 30
_LOCAL_KEY_SCAN: Final = 32  # local mode: more keys than this are checked in one pass
_TIE_CAP: Final = 10_000
_PARTIAL: Final = (
    "points are sent in requests of 256 with wait=true; a failure part-way leaves the "
    "requests already sent; a retry with the same execution id completes the batch without "
    "duplicates (deterministic point ids, execution record written last)"
)
_SETTING: Final = "plugins.qdrant.embedding"
Point = Any  # a qdrant Record or ScoredPoint (id, payload, vector, score)


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
        extras=frozenset(extras | (set() if local else {"multi_process"})),
    )


def _chunks(values: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _point_id(memory_id: str) -> str | None:
    """``memory_id`` when it is a point id this store could have issued (a canonical
    UUID string), else ``None`` (such an id is never found)."""
    try:
        return memory_id if str(uuid.UUID(memory_id)) == memory_id else None
    except ValueError:
        return None


def _item(payload: dict[str, Any]) -> MemoryItem:
    return MemoryItem(
        id=payload["id"],
        key=payload.get("key"),
        content=payload.get("content"),
        metadata=payload.get("metadata"),
    )


def _tiebreak(point: Point) -> tuple[int, str]:
    return (int(point.payload[CREATED]), str(point.id))


def _check_json(value: Any, where: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{where} is not valid JSON") from exc


@dataclass
class _Plan:
    """One entry of an UPDATE: the stored point and what it becomes."""

    point: Point
    vectors: dict[str, Any]
    content: Any
    metadata: Any
    embed: bool

    def set_dense(self, name: str | None, vector: list[float] | None) -> None:
        """Use the fresh dense ``vector`` (``None``: the content has no text: none)."""
        if name is not None:
            self.vectors.pop(name, None)
            if vector is not None:
                self.vectors[name] = vector


class _Clock:
    """Unique, increasing microsecond instants for this store object (the sequence)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def take(self, count: int) -> int:
        """The first of ``count`` consecutive unused instants (µs since the epoch)."""
        with self._lock:
            start = max(time.time_ns() // 1000, self._last + 1)
            self._last = start + max(count, 1) - 1
            return start


class QdrantMemoryStore(NativeSearch):
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

    capabilities: StoreCapabilities

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
        self._exact = exact_search or self._conn.local
        self._indexes = tuple(payload_indexes)
        self._dense = None if embedder is None else _dense_name(embedder.identity)
        self._mismatch: str | None = None
        self._refuse_writes = False
        self._ready_lock = threading.Lock()
        self._ready = False
        self._pruned_at = 0.0
        self._cursor_secret = ""
        self._clock = _Clock()
        self.capabilities = capabilities_for(embedder is not None, self._exact, self._conn.local)

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def local(self) -> bool:
        """True in local mode."""
        return self._conn.local

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The embedding provider, or ``None``."""
        return self._embedder

    def close(self) -> None:
        """Close the client (local mode: release the folder); idempotent."""
        self._conn.close()
        self._ready = False

    def __enter__(self) -> QdrantMemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _metadata(self) -> dict[str, Any]:
        identity = None if self._embedder is None else self._embedder.identity.to_json()
        return {
            "ditto": {
                "format": _FORMAT,
                "embedding": identity,
                "denseVector": self._dense,
                "embedKinds": self._embed_kinds,
                "keywords": TOKENIZER,
                "cursorSecret": new_cursor_secret(),
            }
        }

    def _create(self, client: QdrantClient) -> None:
        vectors = {}
        if self._embedder is not None and self._dense is not None:
            vectors[self._dense] = models.VectorParams(
                size=self._embedder.identity.dims, distance=models.Distance.COSINE
            )
        try:
            client.create_collection(
                self.collection,
                vectors_config=vectors,
                sparse_vectors_config={
                    SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
                metadata=self._metadata(),
            )
        except Exception as exc:  # another process created it first (HTTP 409): use it
            if not client.collection_exists(self.collection):
                raise
            logger.info("qdrant collection created concurrently: %s", type(exc).__name__)
        if not self.local:
            self._create_indexes(client)

    def _create_indexes(self, client: QdrantClient) -> None:
        """Payload indexes on a server (idempotent; local mode has none)."""
        keyword = models.PayloadSchemaType.KEYWORD
        integer = models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, range=True,
                                            lookup=True)  # fmt: skip
        fields: list[tuple[str, Any]] = [
            ("ns", models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD,
                                             is_tenant=True)),  # fmt: skip
            ("rec", keyword), ("id", keyword), ("key", keyword),
            (CREATED, integer), (UPDATED, integer), ("at", models.PayloadSchemaType.FLOAT),
        ]  # fmt: skip
        for path in self._indexes:
            h = field_hash(tuple(path.split(".")))
            fields += [(f"fs.{h}", keyword), (f"fn.{h}", models.PayloadSchemaType.FLOAT)]
        for name, schema in fields:
            client.create_payload_index(self.collection, name, field_schema=schema, wait=True)

    def _open(self, options: MemoryCallOptions | None) -> None:
        """Create the collection if missing and check its identity (once per store object;
        retried after a failure)."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return

            def setup(client: QdrantClient) -> dict[str, Any]:
                if not client.collection_exists(self.collection):
                    self._create(client)
                info = client.get_collection(self.collection)
                return dict(info.config.metadata or {})

            metadata = self._conn.call(options, setup)
            self._conn.call(options, lambda _client: self._conn.tune_local())
            recorded = metadata.get("ditto")
            self._mismatch = self._check_metadata(recorded)
            secret = recorded.get("cursorSecret") if isinstance(recorded, dict) else None
            self._cursor_secret = str(secret or "")
            self._ready = True

    def _check_metadata(self, recorded: Any) -> str | None:
        if not isinstance(recorded, dict) or recorded.get("format") != _FORMAT:
            return "this Qdrant collection was not made by the ditto_worker Qdrant store"
        stored_text = recorded.get("embedding")
        stored = None if stored_text is None else EmbeddingIdentity.from_json(stored_text)
        provider = None if self._embedder is None else self._embedder.identity
        if provider is not None and provider != stored:
            return mismatch_message("Qdrant collection", _SETTING, provider, stored)
        if provider is not None and recorded.get("embedKinds") != self._embed_kinds:
            return (
                "this Qdrant collection was made with another embed policy "
                "(plugins.qdrant.embedKinds); use the collection's policy, or a new "
                "collection and reindex_embeddings()"
            )
        self._refuse_writes = stored is not None and provider is None
        if recorded.get("keywords") != TOKENIZER:
            logger.warning(
                "qdrant collection %s: keyword vectors of another tokenizer (%s, now %s)",
                self.collection, recorded.get("keywords"), TOKENIZER,
            )  # fmt: skip
        return None

    def _check_identity(self) -> None:
        """``EMBEDDING_MISMATCH`` when the collection's identity is not the provider's."""
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)

    def _begin(self, options: MemoryCallOptions | None, write: bool = False) -> str:
        self._open(options)
        self._check_identity()
        if write and self._refuse_writes:
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH,
                "this Qdrant collection keeps vectors, but the store has no embedding "
                f"provider; configure one ({_SETTING})",
            )
        return namespace_of(options)

    # --- reading -----------------------------------------------------------------------------

    def _retrieve(
        self, ns: str, ids: Sequence[str], options: MemoryCallOptions | None, vectors: bool = False
    ) -> dict[str, Point]:
        wanted = [pid for pid in dict.fromkeys(ids) if _point_id(pid) is not None]
        found: dict[str, Point] = {}
        for chunk in _chunks(wanted):
            points = self._conn.call(
                options, QdrantClient.retrieve, self.collection, list(chunk),
                with_payload=True, with_vectors=vectors,
            )  # fmt: skip
            for point in points:
                payload = point.payload or {}
                if payload.get("rec") == MEMORY and payload.get("ns") == ns:
                    found[str(point.id)] = point
        return found

    def _scroll_all(
        self,
        flt: models.Filter,
        options: MemoryCallOptions | None,
        with_payload: bool | list[str] = True,
    ) -> list[Point]:
        out: list[Point] = []
        offset: Any = None
        # local mode evaluates the filter over every point on each request: one request
        page = _LOCAL_PAGE if self.local else _SCROLL_PAGE
        while True:
            points, offset = self._conn.call(
                options, QdrantClient.scroll, self.collection, scroll_filter=flt, limit=page,
                offset=offset, with_payload=with_payload,
            )  # fmt: skip
            out += points
            if offset is None:
                return out

    def _with_keys(
        self, ns: str, keys: Sequence[str], options: MemoryCallOptions | None, fields: Any = True
    ) -> list[Point]:
        """Memory points of ``ns`` holding one of ``keys``."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        if self.local and len(keys) > _LOCAL_KEY_SCAN:
            # brute force either way: one pass over the namespace (one condition, only the
            # keys copied) beats matching a list of keys on every point
            wanted = set(keys)
            scanned = self._scroll_all(namespace_filter(ns, None), options, ["key"])
            hits = [p for p in scanned if (p.payload or {}).get("key") in wanted]
            if fields == ["key"]:
                return hits
            return list(self._retrieve(ns, [str(p.id) for p in hits], options).values())
        out: list[Point] = []
        for chunk in _chunks(keys):
            flt = namespace_filter(ns, None)
            condition = models.FieldCondition(key="key", match=models.MatchAny(any=list(chunk)))
            flt.must = [*(flt.must or []), condition]
            out += self._scroll_all(flt, options, fields)
        return out

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ns = self._begin(options)
        found = self._retrieve(ns, input.ids or (), options)
        for point in self._with_keys(ns, input.keys or (), options):
            found.setdefault(str(point.id), point)
        return [_item(p.payload) for p in sorted(found.values(), key=_tiebreak)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter`` in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY`` (more than one
                term, or a field other than ``createdAt``/``updatedAt``),
                ``INVALID_CURSOR``.
        """
        node = parse_filter(input.filter)
        terms = parse_order_by(input.order_by)
        if len(terms) > 1 or any(t.field.name not in ("createdAt", "updatedAt")
                                 or not t.field.reserved for t in terms):  # fmt: skip
            raise MemoryError(
                ErrorCode.UNSUPPORTED_ORDER_BY,
                "the Qdrant store orders by one field, createdAt or updatedAt",
            )
        field = UPDATED if terms and terms[0].field.name == "updatedAt" else CREATED
        desc = bool(terms) and terms[0].descending
        fingerprint = query_fingerprint(input.filter, input.order_by)
        ns = namespace_of(options)
        flt = namespace_filter(ns, node)
        self._begin(options)  # the cursor secret is the collection's
        after = None
        if input.cursor:
            cursor = decode_cursor(input.cursor, fingerprint, 2, self._cursor_secret, namespace=ns)
            (rank, value), (id_rank, last_id) = cursor.values
            if rank != 1 or id_rank != 2 or not isinstance(value, int):
                raise MemoryError(ErrorCode.INVALID_CURSOR, "invalid cursor: malformed")
            after = ((-value if desc else value), cursor.seq, str(last_id))
        limit = input.limit or 100
        rows = self._ordered(flt, field, desc, after, limit + 1, options)
        page = rows[:limit]
        next_cursor = None
        if len(rows) > limit:
            last = page[-1]
            values: list[SortValue] = [(1, int(last.payload[field])), (2, str(last.id))]
            next_cursor = encode_cursor(
                fingerprint, values, int(last.payload[CREATED]), self._cursor_secret, namespace=ns
            )
        return MemoryQueryOutput(items=[_item(p.payload) for p in page], next_cursor=next_cursor)

    def _ordered(
        self,
        flt: models.Filter,
        field: str,
        desc: bool,
        after: tuple[int, int, str] | None,
        n: int,
        options: MemoryCallOptions | None,
    ) -> list[Point]:
        """Up to ``n`` points of ``flt`` after ``after`` in (``field``, sequence, id) order.

        Qdrant's ``order_by`` orders by ``field`` alone, so a request asks for one point
        more than needed: when the last two differ, every run of equal values before the
        last is complete; otherwise the last run is read whole. The sort key of a point is
        ``(±field, seq, id)``.
        """

        def sort_key(point: Point) -> tuple[int, int, str]:
            value = int(point.payload[field])
            return (-value if desc else value, *_tiebreak(point))

        out: list[Point] = []
        bound: int | None = None if after is None else (-after[0] if desc else after[0])
        strict = False
        direction = models.Direction.DESC if desc else models.Direction.ASC
        while len(out) < n:
            # one point more to see where a run ends; one more still after a cursor, whose
            # own row comes back first (non-strict bound) and is dropped
            want = n - len(out) + 1 + (after is not None)
            condition = flt
            if bound is not None:
                op = ("lt" if strict else "lte") if desc else ("gt" if strict else "gte")
                ranged = models.FieldCondition(key=field, range=models.Range(**{op: bound}))
                condition = models.Filter(must=[flt, ranged])
            batch: list[Point] = self._conn.call(
                options, QdrantClient.scroll, self.collection, scroll_filter=condition,
                limit=want, with_payload=True,
                order_by=models.OrderBy(key=field, direction=direction),
            )[0]  # fmt: skip
            full = len(batch) == want
            if full:
                last = int(batch[-1].payload[field])
                if int(batch[-2].payload[field]) != last:
                    batch, last = batch[:-1], int(batch[-2].payload[field])
                else:  # the run of `last` may go on past the cut: read it whole
                    same = models.FieldCondition(key=field, range=models.Range(gte=last, lte=last))
                    run = self._scroll_all(models.Filter(must=[flt, same]), options)
                    batch = [p for p in batch if int(p.payload[field]) != last] + run
            batch.sort(key=sort_key)
            if after is not None:
                batch = [p for p in batch if sort_key(p) > after]
            out += batch
            if not full:
                break
            bound, strict, after = last, True, None
        return out[:n]

    # --- search -------------------------------------------------------------------------------

    def _ranked(
        self, fetch: Callable[[QdrantClient, int], list[Point]], limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Point]:  # fmt: skip
        """The best ``limit`` points, ties in score by sequence: a tie run at the cut is
        read whole (up to :data:`_TIE_CAP` more points)."""
        n = limit + 1
        while True:
            points = self._conn.call(options, fetch, n)
            if len(points) < n or points[-1].score != points[limit - 1].score:
                break
            if n > limit + _TIE_CAP:
                break
            n *= 4
        points.sort(key=lambda p: (-p.score, *_tiebreak(p)))
        return points[:limit]

    def _search_filter(self, input: MemorySearchInput, options: MemoryCallOptions | None) -> Any:
        node = parse_filter(input.filter)
        return namespace_filter(self._begin(options), node)

    def _keyword_hits(
        self, query: str, input: MemorySearchInput, limit: int, options: MemoryCallOptions | None
    ) -> list[Hit]:
        flt = self._search_filter(input, options)
        vector = query_vector(query)
        if vector is None:
            return []
        # IDF over the call's own scope only: another tenant's writes change no score here
        corpus = namespace_filter(namespace_of(options), None)
        params = models.SearchParams(idf=models.IdfCorpusParams(corpus=corpus))

        def fetch(client: QdrantClient, n: int) -> list[Point]:
            return client.query_points(
                self.collection, query=vector, using=SPARSE_VECTOR, query_filter=flt,
                limit=n, with_payload=True, search_params=params,
            ).points  # fmt: skip

        return [(_item(p.payload), float(p.score)) for p in self._ranked(fetch, limit, options)]

    def _vector_hits(
        self,
        vector: list[float],
        input: MemorySearchInput,
        limit: int,
        options: MemoryCallOptions | None,
    ) -> list[Hit]:
        flt = self._search_filter(input, options)
        params = models.SearchParams(exact=True) if self._exact and not self.local else None

        def fetch(client: QdrantClient, n: int) -> list[Point]:
            return client.query_points(
                self.collection, query=vector, using=self._dense, query_filter=flt,
                limit=n, with_payload=True, search_params=params,
            ).points  # fmt: skip

        return [(_item(p.payload), float(p.score)) for p in self._ranked(fetch, limit, options)]

    # --- writing ------------------------------------------------------------------------------

    def _embedded(self, metadata: Any) -> bool:
        if self._embedder is None:
            return False
        if self._embed_kinds is None:
            return True
        kind = metadata.get("kind") if isinstance(metadata, dict) else None
        return isinstance(kind, str) and kind in self._embed_kinds

    def _dense_vectors(self, contents: Sequence[Any]) -> list[list[float] | None]:
        if self._embedder is None or not contents:
            return [None] * len(contents)
        return content_vectors(self._embedder, contents)

    def _vectors(
        self, content: Any, dense: list[float] | None, key: str | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        sparse = document_vector(content, key)
        if sparse is not None:
            out[SPARSE_VECTOR] = sparse
        if dense is not None and self._dense is not None:
            out[self._dense] = dense
        return out

    def _replay(
        self, ns: str, eid: str | None, node: str, options: MemoryCallOptions | None
    ) -> ex.Replay | None:
        if not eid:
            return None
        record_id = ex.record_point_id(ns, eid)
        points = self._conn.call(options, QdrantClient.retrieve, self.collection, [record_id])
        return ex.replay_of(points[0].payload if points else None, ns, node)

    def _upsert(
        self, points: Sequence[models.PointStruct], options: MemoryCallOptions | None
    ) -> None:
        for chunk in _chunks(points):
            self._conn.call(
                options, QdrantClient.upsert, self.collection, list(chunk), wait=True,
                check_cancel=False,
            )  # fmt: skip

    def _record(
        self, ns: str, eid: str | None, node: str, output: Any,
        options: MemoryCallOptions | None, pending: bool = False,
    ) -> None:  # fmt: skip
        if not eid:
            return
        self._upsert([ex.record_point(ns, eid, node, output, pending)], options)
        if not pending and time.monotonic() - self._pruned_at > ex.PRUNE_INTERVAL_S:
            self._pruned_at = time.monotonic()
            expired = models.FilterSelector(filter=ex.expired_filter(self._retention_s))
            self._conn.call(
                options, QdrantClient.delete, self.collection, expired, wait=True,
                check_cancel=False,
            )  # fmt: skip

    def _start_mutation(self, options: MemoryCallOptions | None) -> None:
        """The last point where a cancel commits nothing (module docstring)."""
        token = options.cancel if options is not None else None
        if token is not None and token.cancelled:
            raise MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts; one full item per draft, in order.

        Raises:
            MemoryError: ``CONFLICT`` (nothing written) for a taken or repeated key;
                ``INVALID_INPUT`` for content/metadata that is not JSON; the embedding
                provider's errors (nothing written).
        """
        drafts = input.memories
        for i, draft in enumerate(drafts):
            _check_json(draft.content, f"memories[{i}].content")
            _check_json(draft.metadata, f"memories[{i}].metadata")
        seen: dict[str, int] = {}
        for i, draft in enumerate(drafts):
            if draft.key is not None and draft.key in seen:
                raise MemoryError(
                    ErrorCode.CONFLICT, f"memories[{i}].key repeats memories[{seen[draft.key]}].key"
                )
            if draft.key is not None:
                seen[draft.key] = i
        ns = self._begin(options, write=True)
        eid = options.execution_id if options is not None else None
        replay = self._replay(ns, eid, "MEMORY.WRITE", options)
        if replay is not None:
            return [MemoryItem.model_validate(item) for item in replay.output]
        ids = [ex.memory_point_id(ns, eid, i) if eid else str(uuid.uuid4())
               for i in range(len(drafts))]  # fmt: skip
        own = set(ids)
        for point in self._with_keys(ns, list(seen), options, ["key"]):
            if str(point.id) not in own:
                index = seen[point.payload["key"]]
                raise MemoryError(
                    ErrorCode.CONFLICT, f"memories[{index}].key already exists in the store"
                )
        embed = [i for i, d in enumerate(drafts) if self._embedded(d.metadata)]
        dense: list[list[float] | None] = [None] * len(drafts)
        for i, vector in zip(embed, self._dense_vectors([drafts[i].content for i in embed]),
                             strict=True):  # fmt: skip
            dense[i] = vector
        self._start_mutation(options)
        start = self._clock.take(len(drafts))
        points = [
            models.PointStruct(
                id=memory_id,
                vector=self._vectors(draft.content, dense[i], draft.key),
                payload=memory_payload(
                    ns, memory_id, draft.key, draft.content, draft.metadata, start + i, start + i
                ),  # fmt: skip
            )
            for i, (memory_id, draft) in enumerate(zip(ids, drafts, strict=True))
        ]
        self._upsert(points, options)
        items = [MemoryItem(id=memory_id, key=d.key, content=d.content, metadata=d.metadata)
                 for memory_id, d in zip(ids, drafts, strict=True)]  # fmt: skip
        self._record(ns, eid, "MEMORY.WRITE", [to_wire(i) for i in items], options)
        return items

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates (MEM-UPDATE-1): an omitted field keeps its value,
        ``metadata`` replaces the whole object, ``content: null`` is a value.

        Raises:
            MemoryError: ``NOT_FOUND`` (nothing applied) when an id does not exist in the
                call's scope; the embedding provider's errors (nothing applied).
        """
        entries = input.memories
        for i, entry in enumerate(entries):
            if entry.has_content:
                _check_json(entry.content, f"memories[{i}].content")
            if entry.has_metadata:
                _check_json(entry.metadata, f"memories[{i}].metadata")
        ns = self._begin(options, write=any(e.has_content for e in entries))
        eid = options.execution_id if options is not None else None
        replay = self._replay(ns, eid, "MEMORY.UPDATE", options)
        if replay is not None:
            return [MemoryItem.model_validate(item) for item in replay.output]
        found = self._retrieve(ns, [e.id for e in entries], options, vectors=True)
        for i, entry in enumerate(entries):
            if entry.id not in found:
                raise MemoryError(ErrorCode.NOT_FOUND, f"memories[{i}]: no memory with this id")
        plans = [self._plan(entry, found[entry.id]) for entry in entries]
        fresh = iter(self._dense_vectors([plan.content for plan in plans if plan.embed]))
        self._start_mutation(options)
        now = self._clock.take(len(entries))
        points: list[models.PointStruct] = []
        items: list[MemoryItem] = []
        for i, plan in enumerate(plans):
            if plan.embed:
                plan.set_dense(self._dense, next(fresh))
            old = plan.point.payload
            payload = memory_payload(ns, old["id"], old.get("key"), plan.content, plan.metadata,
                                     int(old[CREATED]), now + i)  # fmt: skip
            points.append(models.PointStruct(id=plan.point.id, vector=plan.vectors,
                                             payload=payload))  # fmt: skip
            items.append(_item(payload))
        self._upsert(points, options)
        self._record(ns, eid, "MEMORY.UPDATE", [to_wire(i) for i in items], options)
        return items

    def _plan(self, entry: MemoryUpdateEntry, point: Point) -> _Plan:
        """The new content, metadata and vectors of one updated point (before embedding):
        new content gets a new keyword vector and, under the embed policy, a new dense
        one; a metadata change keeps the dense vector unless the policy now differs."""
        old = point.payload
        content = entry.content if entry.has_content else old.get("content")
        metadata = entry.metadata if entry.has_metadata else old.get("metadata")
        vectors = dict(point.vector) if isinstance(point.vector, dict) else {}
        if entry.has_content:
            vectors.pop(SPARSE_VECTOR, None)
            sparse = document_vector(content, old.get("key"))
            if sparse is not None:
                vectors[SPARSE_VECTOR] = sparse
        wanted = self._embedded(metadata)
        has_dense = self._dense is not None and self._dense in vectors
        if not wanted and self._dense is not None:
            vectors.pop(self._dense, None)
        embed = wanted and (entry.has_content or not has_dense)
        return _Plan(point, vectors, content, metadata, embed)

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete the existing ids; returns only the ids deleted now, in request order;
        the keys of deleted records are free again (MEM-PY-12)."""
        ids = list(dict.fromkeys(input.ids))
        ns = self._begin(options)
        eid = options.execution_id if options is not None else None
        replay = self._replay(ns, eid, "MEMORY.DELETE", options)
        if replay is not None and not replay.pending:
            return MemoryDeleteOutput.model_validate(replay.output)
        if replay is not None:  # a copy of a run that died after its pending record
            output = MemoryDeleteOutput.model_validate(replay.output)
        else:
            found = self._retrieve(ns, ids, options)
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in found])
            self._start_mutation(options)
            self._record(ns, eid, "MEMORY.DELETE", to_wire(output), options, pending=True)
        for chunk in _chunks(output.deleted):
            selector = models.PointIdsList(points=list(chunk))
            self._conn.call(
                options, QdrantClient.delete, self.collection, selector, wait=True,
                check_cancel=False,
            )  # fmt: skip
        self._record(ns, eid, "MEMORY.DELETE", to_wire(output), options)
        return output

    # --- maintenance --------------------------------------------------------------------------

    def reindex_embeddings(
        self, source_collection: str | None = None, batch_size: int = 256
    ) -> int:
        """Give a vector to every record the embed policy wants embedded and lacks one;
        explicit, never implicit (MEM-SEARCH-6, MEM-RET-4).

        Args:
            source_collection: first copy every memory of this collection of the same
                server/folder (payloads and keyword vectors, not its dense vectors) —
                the way to move to another model: a new collection, then this.
            batch_size: records per embedding batch.

        Returns:
            The number of records embedded (0 without an embedder).

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` / ``EMBEDDING_UNAVAILABLE``,
                ``MEMORY_BACKEND_ERROR``.
        """
        self._begin(None, write=True)
        if source_collection is not None:
            self._copy_from(source_collection, batch_size)
        if self._embedder is None or self._dense is None:
            return 0
        dense = self._dense
        lacking = models.Filter(
            must=[models.FieldCondition(key="rec", match=models.MatchValue(value=MEMORY))],
            must_not=[models.HasVectorCondition(has_vector=dense)],
        )
        done = 0
        points = [
            p for p in self._scroll_all(lacking, None) if self._embedded(p.payload["metadata"])
        ]
        for chunk in _chunks(points, batch_size):
            vectors = self._dense_vectors([p.payload.get("content") for p in chunk])
            updates = [models.PointVectors(id=p.id, vector={dense: v})
                       for p, v in zip(chunk, vectors, strict=True) if v is not None]  # fmt: skip
            if updates:
                self._conn.call(
                    None, QdrantClient.update_vectors, self.collection, updates, wait=True
                )
            done += len(updates)
        return done

    def _copy_from(self, source: str, batch_size: int) -> None:
        offset: Any = None
        memories = models.Filter(
            must=[models.FieldCondition(key="rec", match=models.MatchValue(value=MEMORY))]
        )
        while True:
            points, offset = self._conn.call(
                None, QdrantClient.scroll, source, scroll_filter=memories, limit=batch_size,
                offset=offset, with_payload=True, with_vectors=[SPARSE_VECTOR],
            )  # fmt: skip
            copies = [
                models.PointStruct(
                    id=p.id,
                    vector={
                        k: v
                        for k, v in (p.vector if isinstance(p.vector, dict) else {}).items()
                        if k == SPARSE_VECTOR
                    },
                    payload=p.payload,
                )
                for p in points
            ]
            if copies:
                self._upsert(copies, None)
            if offset is None:
                return


def _dense_name(identity: EmbeddingIdentity) -> str:
    """The named dense vector of an identity: ``dense-`` + 12 hex digits of its hash."""
    digest = uuid.uuid5(ex.ID_NAMESPACE, identity.to_json()).hex[:12]
    return f"dense-{digest}"
