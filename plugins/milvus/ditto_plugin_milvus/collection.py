"""The Milvus store's collection: lifecycle, identity and the requests every operation uses.

Behaviour and layout: :mod:`ditto_plugin_milvus.store` (``MilvusMemoryStore``, built on
:class:`MilvusCollection` and :class:`~ditto_plugin_milvus.reads.MilvusReads`) and
:mod:`ditto_plugin_milvus.rows`. The collection is created on first use when missing
(``Strong`` consistency, so a call reads every write before it; indexes created without
waiting for their build), loaded, and its properties checked: the embedding identity, the
embed policy, the keyword tokenizer, the cursor secret.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pymilvus import MilvusClient

from ditto_plugin_milvus.connection import Connection
from ditto_plugin_milvus.expressions import CREATED, quote, scope_expression
from ditto_plugin_milvus.keywords import TOKENIZER
from ditto_plugin_milvus.rows import OUTPUT, chunks, index_params, schema
from ditto_worker.dockit import Clock
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import ALL_FILTER_OPERATORS, StoreCapabilities
from ditto_worker.memory.cursors import new_cursor_secret
from ditto_worker.memory.native import VECTOR_OPTIONS, NativeSearch
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider, MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.vectors import mismatch_message

__all__ = [
    "DEFAULT_COLLECTION",
    "DEFAULT_MESSAGE_BYTES",
    "IDS_PER_REQUEST",
    "MilvusCollection",
    "Row",
    "capabilities_for",
    "tiebreak",
]

logger = logging.getLogger(__name__)

DEFAULT_COLLECTION: Final = "ditto_memories"
DEFAULT_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""Largest insert/upsert request the store sends, bytes (Milvus accepts 64 MiB)."""
_FORMAT: Final = 1
_PROPERTY: Final = "ditto"
IDS_PER_REQUEST: Final = 1000
"""Ids (or keys) listed in one expression."""
_SETTING: Final = "plugins.milvus.embedding"
_PARTIAL: Final = (
    "rows are sent in requests of at most maxMessageBytes; a failure part-way leaves the "
    "requests already applied (no transaction in Milvus); UPDATE rows are upserted"
)
Row = dict[str, Any]


def capabilities_for(
    embedder: bool, exact_vectors: bool, lite: bool, per_scope: bool = False
) -> StoreCapabilities:
    """What the store declares (:mod:`ditto_plugin_milvus.store`), by configuration:
    keyword statistics per scope only with a collection per scope."""
    times = frozenset({"createdAt", "updatedAt"})
    extras = {"deadline"} | ({"embed_on_write"} if embedder else set())
    return StoreCapabilities(
        filter_operators=ALL_FILTER_OPERATORS,
        order_by_fields=times,
        search_strategies=("keyword", "vector", "hybrid") if embedder else ("keyword",),
        default_strategy="vector" if embedder else "keyword",
        keyword_strategy="keyword",
        keyword_cjk=True,
        keyword_scope_statistics=per_scope,
        search_options=VECTOR_OPTIONS if embedder else frozenset(),
        exhaustive_strategies=("vector",) if embedder and exact_vectors else (),
        key_conflict="error",
        batch_atomic=False,
        partial_commit=_PARTIAL,
        cancel=True,
        scope=True,
        operation_ids=True,  # as safe as Milvus allows: :mod:`ditto_plugin_milvus.operations`
        conditional_update=False,  # no compare-and-set in Milvus: ifMetadata is UNSUPPORTED
        extras=frozenset(extras | (set() if lite else {"multi_process"})),
    )


@dataclass(frozen=True)
class _Opened:
    """A collection as opened in one connection generation."""

    generation: int
    cursor_secret: str
    mismatch: str | None
    refuse_writes: bool
    physical: str = ""
    """The collection the name stood for (itself, or its alias's after a reindex)."""


def tiebreak(row: Row) -> tuple[int, str]:
    """The tie-break of a row: (sequence, id)."""
    return (int(row[CREATED]), str(row["id"]))


def _ids_expression(column: str, values: Sequence[str]) -> str:
    return f"{column} in [{', '.join(quote(v) for v in values)}]"


class MilvusCollection(NativeSearch):
    """The collection under a :class:`~ditto_plugin_milvus.store.MilvusMemoryStore` (its
    constructor's arguments).

    Args:
        uri: a Milvus server (``http(s)://host:19530``) or a Milvus Lite path ending in
            ``.db`` (one process at a time).
        token: the server's token (never logged nor put in an error).
        db_name: the Milvus database (``""``: default).
        collection: the collection name.
        timeout_s: longest wait for one gRPC call (a call's deadline may cut it).
        embedder: the embedding provider of WRITE/UPDATE and of ``vector``/``hybrid``;
            ``None``: keyword search only.
        embed_kinds: only records whose ``metadata.kind`` is one of these get a vector
            (``None``: every record with text).
        hybrid: ``hybrid`` pipeline settings (a ``RetrievalConfig`` or its mapping).
        vector_index: ``FLAT`` (exact, default) or ``HNSW``.
        max_message_bytes: largest insert/upsert request, bytes.

    Errors: ``MemoryError`` with ``UNSUPPORTED_ORDER_BY``, ``INVALID_CURSOR``, ``CONFLICT``,
    ``NOT_FOUND``, ``UNSUPPORTED_STRATEGY``, ``INVALID_INPUT``, ``MEMORY_CANCELLED``,
    ``MEMORY_TIMEOUT``, ``EMBEDDING_MISMATCH``, ``EMBEDDING_UNAVAILABLE`` or
    ``MEMORY_BACKEND_ERROR`` (safe messages).
    """

    capabilities: StoreCapabilities

    def __init__(
        self,
        *,
        uri: str,
        token: str | None = None,
        db_name: str = "",
        collection: str = DEFAULT_COLLECTION,
        timeout_s: float = 10.0,
        embedder: EmbeddingProvider | None = None,
        embed_kinds: Sequence[str] | None = None,
        hybrid: Any = None,
        vector_index: str = "FLAT",
        max_message_bytes: int = DEFAULT_MESSAGE_BYTES,
        collection_per_scope: bool = False,
        index_fields: Sequence[str] = (),
    ) -> None:
        self._conn = Connection(uri=uri, token=token, db_name=db_name, timeout_s=timeout_s)
        self.collection = collection
        self._embedder = embedder
        self._embed_kinds = None if embed_kinds is None else sorted(set(embed_kinds))
        self._hybrid_settings = hybrid
        self._dims = None if embedder is None else embedder.identity.dims
        self._vector_index = vector_index
        self.max_message_bytes = max_message_bytes
        self.collection_per_scope = collection_per_scope
        self._index_fields = tuple(index_fields)
        self._opened: dict[str, _Opened] = {}
        self._ledgers: dict[str, tuple[int, bool]] = {}  # ledgers opened: (generation, has at)
        self._ready_lock = threading.Lock()
        self._clock = Clock()
        exact = embedder is not None and vector_index == "FLAT"
        self.capabilities = capabilities_for(
            embedder is not None, exact, self._conn.lite, collection_per_scope
        )

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def lite(self) -> bool:
        """True on Milvus Lite (a ``.db`` path)."""
        return self._conn.lite

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The embedding provider, or ``None``."""
        return self._embedder

    def close(self) -> None:
        """Close the client (Milvus Lite: stop its server, release the folder); idempotent."""
        self._conn.close()
        self._opened, self._ledgers = {}, {}

    def __enter__(self) -> MilvusCollection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _properties(self) -> dict[str, str]:
        identity = None if self._embedder is None else self._embedder.identity.to_json()
        recorded = {
            "format": _FORMAT,
            "embedding": identity,
            "embedKinds": self._embed_kinds,
            "keywords": TOKENIZER,
            "indexFields": list(self._index_fields),
            "cursorSecret": new_cursor_secret(),
        }
        return {_PROPERTY: json.dumps(recorded, sort_keys=True)}

    def name_of(self, ns: str) -> str:
        """The collection of namespace ``ns``: ``collection``, or with
        ``collection_per_scope`` ``collection`` + ``_`` + 16 hex digits of BLAKE2b(ns)."""
        if not self.collection_per_scope:
            return self.collection
        digest = hashlib.blake2b(ns.encode("utf-8"), digest_size=8).hexdigest()
        return f"{self.collection}_{digest}"

    def _setup(self, client: MilvusClient, name: str, timeout: float) -> dict[str, Any]:
        if not client.has_collection(name, timeout=timeout):
            try:
                client.create_collection(
                    name,
                    schema=schema(self._dims),
                    consistency_level="Strong",
                    properties=self._properties(),
                    timeout=timeout,
                )
                # sync=False: pymilvus would poll each index's build state with 0.5 s
                # sleeps; loading the collection waits for what it needs
                client.create_index(
                    name, index_params(self._dims, self._vector_index), timeout=timeout, sync=False
                )
            except Exception as exc:  # another process created it first: use it
                if not client.has_collection(name, timeout=timeout):
                    raise
                logger.info("milvus collection created concurrently: %s", type(exc).__name__)
        client.load_collection(name, timeout=timeout)
        return dict(client.describe_collection(name, timeout=timeout))

    def _open(self, name: str, options: MemoryCallOptions | None) -> _Opened:
        """Create collection ``name`` if missing, load it and check its identity (once per
        store object and connection: again after a lost connection; retried after a
        failure)."""
        opened = self._opened.get(name)
        if opened is not None and opened.generation == self._conn.generation:
            return opened
        with self._ready_lock:
            opened = self._opened.get(name)
            if opened is not None and opened.generation == self._conn.generation:
                return opened
            generation = self._conn.generation
            described = self._conn.call(
                options, lambda client, timeout: self._setup(client, name, timeout)
            )
            properties = dict(described.get("properties") or {})
            try:
                recorded = json.loads(properties.get(_PROPERTY, "null"))
            except ValueError:
                recorded = None
            opened = self._check_properties(name, recorded, generation)
            physical = str(described.get("collection_name") or name)
            opened = dataclasses.replace(opened, physical=physical)
            self._opened[name] = opened
            return opened

    def _verify_current(self, ns: str, options: MemoryCallOptions | None) -> None:
        """Before an embedding write or a vector search: ``EMBEDDING_MISMATCH`` when a
        reindex pointed the collection name at a collection of another identity since
        this store opened it (:mod:`ditto_plugin_milvus.reembed`; one request)."""
        name = self.name_of(ns)
        opened = self._opened.get(name)
        described = self._conn.call(options, MilvusClient.describe_collection, name)
        if opened is not None and opened.physical == str(described.get("collection_name")):
            return
        self._opened.pop(name, None)
        opened = self._open(name, options)
        if opened.mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, opened.mismatch)

    def _check_properties(self, name: str, recorded: Any, generation: int) -> _Opened:
        if not isinstance(recorded, dict) or recorded.get("format") != _FORMAT:
            mismatch = "this Milvus collection was not made by the ditto_worker Milvus store"
            return _Opened(generation, "", mismatch, False)
        secret = str(recorded.get("cursorSecret") or "")
        stored_text = recorded.get("embedding")
        stored = None if stored_text is None else EmbeddingIdentity.from_json(stored_text)
        provider = None if self._embedder is None else self._embedder.identity
        if provider is not None and provider != stored:
            mismatch = mismatch_message("Milvus collection", _SETTING, provider, stored)
            return _Opened(generation, secret, mismatch, False)
        if provider is not None and recorded.get("embedKinds") != self._embed_kinds:
            mismatch = (
                "this Milvus collection was made with another embed policy "
                "(plugins.milvus.embedKinds); use the collection's policy or a new collection"
            )
            return _Opened(generation, secret, mismatch, False)
        stored_fields = tuple(recorded.get("indexFields") or ())
        if stored_fields != self._index_fields:
            mismatch = (
                f"this Milvus collection was indexed with indexFields {list(stored_fields)}, "
                f"but is configured with {list(self._index_fields)}; use its indexFields or "
                "a new collection (plugins.milvus.collection)"
            )
            return _Opened(generation, secret, mismatch, False)
        if recorded.get("keywords") != TOKENIZER:
            logger.warning(
                "milvus collection %s: keyword terms of another tokenizer (%s)",
                name,
                recorded.get("keywords"),
            )
        return _Opened(generation, secret, None, stored is not None and provider is None)

    def _check_identity(self) -> None:
        """Nothing here: each call checks its own collection's identity in :meth:`_begin`
        (with ``collection_per_scope`` the collection depends on the call's scope)."""

    def _begin(self, options: MemoryCallOptions | None, write: bool = False) -> str:
        ns = namespace_of(options)
        opened = self._open(self.name_of(ns), options)
        if opened.mismatch is not None and self._embedder is not None:
            self._opened.pop(self.name_of(ns), None)  # read again: a reindex may have
            opened = self._open(self.name_of(ns), options)  # switched to this identity
        if opened.mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, opened.mismatch)
        if write and opened.refuse_writes:
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH,
                "this Milvus collection keeps vectors, but the store has no embedding "
                f"provider; configure one ({_SETTING})",
            )
        return ns

    def _cursor_secret(self, ns: str) -> str:
        """The cursor secret of the collection of ``ns`` (opened by :meth:`_begin`)."""
        return self._opened[self.name_of(ns)].cursor_secret

    # --- requests ------------------------------------------------------------------------------

    def _query(
        self, ns: str, options: MemoryCallOptions | None, expression: str, fields: Sequence[str]
    ) -> list[Row]:
        rows = self._conn.call(
            options,
            MilvusClient.query,
            self.name_of(ns),
            filter=expression,
            output_fields=list(fields),
        )
        return [dict(row) for row in rows]

    def _rows_by(
        self,
        ns: str,
        column: str,
        values: Sequence[str],
        options: MemoryCallOptions | None,
        fields: Sequence[str] = OUTPUT,
    ) -> list[Row]:
        """Rows of ``ns`` whose ``column`` (``id`` or ``key``) is one of ``values``."""
        wanted = list(dict.fromkeys(values))
        out: list[Row] = []
        for start in range(0, len(wanted), IDS_PER_REQUEST):
            part = wanted[start : start + IDS_PER_REQUEST]
            expression = f"({scope_expression(ns, None)}) and ({_ids_expression(column, part)})"
            out += self._query(ns, options, expression, fields)
        return out

    def _insert(self, ns: str, rows: Sequence[Row], options: MemoryCallOptions | None) -> None:
        """Upsert ``rows`` in requests of at most ``max_message_bytes`` (an upsert, not an
        insert, for new rows too: a request resent by pymilvus is idempotent); rows with
        a vector only while the collection still has this store's identity."""
        if any(row.get("dv") for row in rows):
            self._verify_current(ns, options)
        for chunk in chunks(rows, self.max_message_bytes):
            self._conn.call(
                options, MilvusClient.upsert, self.name_of(ns), chunk, check_cancel=False
            )

    def _delete_ids(self, ns: str, ids: Sequence[str], options: MemoryCallOptions | None) -> None:
        for start in range(0, len(ids), IDS_PER_REQUEST):
            part = ids[start : start + IDS_PER_REQUEST]
            expression = f"({scope_expression(ns, None)}) and ({_ids_expression('id', part)})"
            self._conn.call(
                options,
                MilvusClient.delete,
                self.name_of(ns),
                filter=expression,
                check_cancel=False,
            )

    def _start_mutation(self, options: MemoryCallOptions | None) -> None:
        """The last point where a cancel commits nothing (module docstring)."""
        token = options.cancel if options is not None else None
        if token is not None and token.cancelled:
            raise MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")
