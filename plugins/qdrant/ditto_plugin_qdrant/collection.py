"""The Qdrant store's collection: its lifecycle, metadata, identity check and indexes.

:class:`QdrantCollection` is the base of :class:`~ditto_plugin_qdrant.store.QdrantMemoryStore`
(which sets the attributes declared here): it creates the collection on first use, checks
the embedding identity and embed policy its metadata records, and starts every call
(:meth:`QdrantCollection._begin`: the call's namespace).
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager
from typing import Any, Final, Self

from qdrant_client import QdrantClient, models

from ditto_plugin_qdrant.connection import Connection
from ditto_plugin_qdrant.keywords import SPARSE_VECTOR, TOKENIZER
from ditto_plugin_qdrant.payload import CREATED, UPDATED, field_hash
from ditto_plugin_qdrant.points import Clock
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.cursors import new_cursor_secret
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider, MemoryCallOptions
from ditto_worker.memory.retention import LedgerRetention
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.vectors import mismatch_message

__all__ = ["EMBEDDING_SETTING", "QdrantCollection"]

logger = logging.getLogger("ditto_plugin_qdrant.store")

_FORMAT: Final = 1
EMBEDDING_SETTING: Final = "plugins.qdrant.embedding"
"""The setting named when the collection's embedding identity is not the provider's."""


class QdrantCollection:
    """Lifecycle of one collection (module docstring); the store sets these attributes."""

    capabilities: StoreCapabilities
    collection: str
    _conn: Connection
    _embedder: EmbeddingProvider | None
    _embed_kinds: list[str] | None
    _hybrid_settings: Any
    _retention_s: float
    _exact: bool
    _indexes: tuple[str, ...]
    _dense: str | None
    _mismatch: str | None
    _refuse_writes: bool
    _ready_lock: threading.Lock
    _ready: bool
    retention: LedgerRetention
    """The ledgers' retention (:mod:`ditto_worker.memory.retention`)."""
    _cursor_secret: str
    _clock: Clock
    _mutation_lock: AbstractContextManager[Any]

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

    def __enter__(self) -> Self:
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
            return mismatch_message("Qdrant collection", EMBEDDING_SETTING, provider, stored)
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

    def _switched(self, exc: MemoryError) -> MemoryError:
        """After a backend error of a request using the dense vector:
        ``EMBEDDING_MISMATCH`` when a reindex switched the collection to another identity
        since this store opened it (its vector name is gone,
        :mod:`ditto_plugin_qdrant.reembed`), else ``exc``."""
        if exc.code != ErrorCode.MEMORY_BACKEND_ERROR or self._embedder is None:
            return exc
        self._ready = False
        try:
            self._open(None)
        except MemoryError:
            return exc
        if self._mismatch is None:
            return exc
        return MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)

    def _check_identity(self) -> None:
        """``EMBEDDING_MISMATCH`` when the collection's identity is not the provider's."""
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)

    def _begin(self, options: MemoryCallOptions | None, write: bool = False) -> str:
        self._open(options)
        if self._mismatch is not None and self._embedder is not None:
            self._ready = False  # read again: a reindex may have switched to this identity
            self._open(options)
        self._check_identity()
        if write and self._refuse_writes:
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH,
                "this Qdrant collection keeps vectors, but the store has no embedding "
                f"provider; configure one ({EMBEDDING_SETTING})",
            )
        return namespace_of(options)
