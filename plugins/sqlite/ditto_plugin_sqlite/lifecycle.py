"""The process side of :class:`~ditto_plugin_sqlite.SqliteMemoryStore`: construction, the
connection, migrations and settings claims, embedding identity, reindexing and the
vectors written with a record (the SQLite store's lifecycle; its calls are in :mod:`.store`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Self

from ditto_plugin_sqlite import vectors as vec
from ditto_plugin_sqlite.db import open_connection, transaction, usable
from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.fts import index_record, index_records
from ditto_plugin_sqlite.fts import rebuild as rebuild_keywords
from ditto_plugin_sqlite.query_index import QueryIndexes
from ditto_plugin_sqlite.reembed import reembed
from ditto_plugin_sqlite.search import KEYWORD_CAPABILITIES, VECTOR_CAPABILITIES
from ditto_plugin_sqlite.settings import claim_setting, read_setting
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.cursors import CURSOR_SECRET_SETTING, new_cursor_secret
from ditto_worker.memory.indexing import (
    INDEX_SETTING,
    decode_fields,
    encode_fields,
    fields_mismatch,
)
from ditto_worker.memory.ports import EmbeddingProvider, MemoryCallOptions, reembed_provider
from ditto_worker.memory.retention import (
    DEFAULT_OPERATION_RETENTION_S,
    PRUNE_BATCH,
    LedgerRetention,
    PruneReport,
)
from ditto_worker.memory.text import embedding_text, keyword_text
from ditto_worker.sqlkit import (
    DEFAULT_RETENTION_S,
    prune_ledgers,
)
from ditto_worker.sqlkit.serial_ledger import SerialLedger

__all__ = ["Lifecycle"]


def _metadata(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Lifecycle:
    """Process-side state of the store (its Args:
    :class:`~ditto_plugin_sqlite.SqliteMemoryStore`)."""

    capabilities: StoreCapabilities = KEYWORD_CAPABILITIES

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = 5000,
        embedder: EmbeddingProvider | None = None,
        hybrid: Any = None,
        execution_retention_s: float = DEFAULT_RETENTION_S,
        operation_retention_s: float = DEFAULT_OPERATION_RETENTION_S,
        index_fields: Sequence[str] = (),
        query_fields: Sequence[str] | None = None,
    ) -> None:
        self._path = os.fspath(path)
        self._index_fields = tuple(index_fields)
        self._index_mismatch: str | None = None
        self._retention_s = execution_retention_s
        self.retention = LedgerRetention(operation_retention_s, execution_retention_s)
        """The ledgers' retention (:mod:`ditto_worker.memory.retention`)."""
        self._ledger = SerialLedger("the SQLite memory store", retention=self.retention)
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._abandoned: list[Connection] = []
        self._pid = os.getpid()
        self._closed = False
        self._embedder = embedder
        self._mismatch: str | None = None
        self._cursor_key: str | None = None
        self._hybrid_settings = hybrid
        if embedder is not None:
            self.capabilities = VECTOR_CAPABILITIES
        write = embedder is not None or bool(self._index_fields)
        with transaction(self._conn(), None, write=write) as conn:
            if embedder is not None:
                stored = vec.claim_identity(conn, embedder.identity)
                if stored != embedder.identity:
                    self._mismatch = vec.mismatch_message(embedder.identity, stored)
            self._index_mismatch = self._claim_index_fields(conn)
        self._query = QueryIndexes(query_fields)
        with transaction(self._conn(), None, write=False) as conn:
            ready = self._query.in_step(conn)
        if not ready:
            with transaction(self._conn(), None, write=True) as conn:
                self._query.sync(conn)

    def _claim_index_fields(self, conn: Connection) -> str | None:
        """Record ``indexFields`` in an empty database; the mismatch message when the
        database was indexed with other fields (:mod:`ditto_worker.memory.indexing`)."""
        text = read_setting(conn, INDEX_SETTING)
        if text is None and self._index_fields:
            empty = conn.execute("SELECT 1 FROM memories LIMIT 1").fetchone() is None
            if empty:
                text = claim_setting(conn, INDEX_SETTING, encode_fields(self._index_fields))
        stored = decode_fields(text)
        return fields_mismatch("SQLite memory store", self._index_fields, stored)

    def _index(
        self, conn: Connection, seq: int, ns: str, key: str | None, content: Any,
        metadata: Any,
    ) -> None:  # fmt: skip
        text = keyword_text(content, key, metadata, self._index_fields)
        index_record(conn, seq, ns, text)

    def _index_many(
        self, conn: Connection, ns: str, records: Sequence[tuple[int, str | None, Any, Any]]
    ) -> None:
        """:meth:`_index` of ``(seq, key, content, metadata)`` records, as one batch."""
        fields = self._index_fields
        index_records(conn, ns, [
            (seq, keyword_text(content, key, metadata, fields))
            for seq, key, content, metadata in records
        ])  # fmt: skip

    def _embedding_text(self, pair: tuple[Any, Any]) -> str:
        """The text a ``(content, metadata)`` record is embedded by (``indexFields``)."""
        return embedding_text(pair[0], pair[1], self._index_fields)

    def _rebuild_index(self, batch_size: int) -> int:
        """Rebuild the keyword index and every vector with the configured ``indexFields``,
        then record them (``reindex_embeddings`` after an ``indexFields`` change)."""
        self._check_model()
        sql = "SELECT seq, namespace, key, content, metadata FROM memories ORDER BY seq"
        with transaction(self._conn(), None, write=True) as conn:
            rows = conn.execute(sql).fetchall()
            rebuild_keywords(conn, [
                (seq, ns, keyword_text(json.loads(c), key, _metadata(m), self._index_fields))
                for seq, ns, key, c, m in rows
            ])  # fmt: skip
        done = 0
        for start in range(0, len(rows) if self._embedder is not None else 0, batch_size):
            chunk = rows[start : start + batch_size]
            pairs = [(json.loads(row[3]), _metadata(row[4])) for row in chunk]
            assert self._embedder is not None
            blobs = vec.embed_contents(self._embedder, pairs, self._embedding_text)
            with transaction(self._conn(), None, write=True) as conn:
                alive = [
                    (row[0], blob)
                    for row, blob in zip(chunk, blobs, strict=True)
                    if conn.execute("SELECT 1 FROM memories WHERE seq = ?", (row[0],)).fetchone()
                ]
                vec.put_vectors(conn, [seq for seq, _ in alive], [blob for _, blob in alive])
                done += sum(blob is not None for _, blob in alive)
        with transaction(self._conn(), None, write=True) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO store_settings (name, value) VALUES (?, ?)",
                (INDEX_SETTING, encode_fields(self._index_fields)),
            )
        self._index_mismatch = None
        return done

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The embedding provider given at construction, or ``None``."""
        return self._embedder

    def reindex_embeddings(self, batch_size: int = 256) -> int:
        """Embed the records that have text but no vector (e.g. written before the store
        had a provider); explicit, never run implicitly (MEM-SEARCH-6). After an
        ``indexFields`` change: rebuild the keyword index and re-embed every record with
        the configured fields, then record them (other processes keep their own
        ``indexFields`` until restarted).

        Returns:
            The number of records embedded (0 without an embedder).

        Raises:
            MemoryError: ``ErrorCode.EMBEDDING_MISMATCH`` (another model) /
                ``EMBEDDING_UNAVAILABLE``.
        """
        if self._index_mismatch is not None:
            return self._rebuild_index(batch_size)
        done, after = 0, 0
        while self._embedder is not None:
            with self._tx(None, write=False) as conn:
                rows = vec.unembedded(conn, after, batch_size)
            if not rows:
                return done
            pairs = [(json.loads(content), _metadata(meta)) for _, content, meta in rows]
            blobs = self._embed(pairs)
            with self._tx(None, write=True) as conn:
                self._store_vectors(conn, [row[0] for row in rows], blobs)
            done, after = done + sum(blob is not None for blob in blobs or ()), int(rows[-1][0])
        return done

    def reembed_embeddings(self, batch_size: int = 256) -> int:
        """Re-embed every record under this store's provider and record its identity
        (``ditto-worker reindex`` after a model change, MEM-RET-4); resumable, and the
        database stays in its old identity until every vector is rewritten
        (:mod:`ditto_plugin_sqlite.reembed`). Then fills vectors still missing
        (:meth:`reindex_embeddings`).

        Returns:
            The number of records embedded.

        Raises:
            MemoryError: ``INVALID_INPUT`` for a store without a provider or a
                ``batch_size`` below 1; ``EMBEDDING_UNAVAILABLE``; ``EMBEDDING_MISMATCH``
                for an ``indexFields`` change (run :meth:`reindex_embeddings` first).
        """
        embedder = reembed_provider(self._embedder, batch_size)
        if self._index_mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._index_mismatch)
        done = reembed(
            lambda write: transaction(self._conn(), None, write),
            embedder,
            lambda pairs: vec.embed_contents(embedder, pairs, self._embedding_text),
            batch_size,
        )
        self._mismatch = None
        return done + self.reindex_embeddings(batch_size)

    @property
    def path(self) -> str:
        """The database file path."""
        return self._path

    def close(self) -> None:
        """Close every connection this store opened (in this process); idempotent."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _conn(self) -> Connection:
        if self._closed:
            raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "the SQLite memory store is closed")
        if os.getpid() != self._pid:  # forked: never reuse the parent's connections
            self._abandoned.extend(self._connections)
            self._lock, self._local = threading.Lock(), threading.local()
            self._connections, self._pid = [], os.getpid()
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or not usable(conn):  # a fault broke it: open the file again
            conn = open_connection(self._path, self._busy_timeout_ms, self._embedder is not None)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _tx(
        self, options: MemoryCallOptions | None, write: bool, snapshot: bool = True
    ) -> AbstractContextManager[Connection]:
        self._check_identity()
        return transaction(self._conn(), options, write, snapshot)

    def prune_ledgers(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """Delete the forgotten operation ids and expired execution ids, ``batch`` rows
        per write transaction (:func:`ditto_worker.sqlkit.prune_ledgers`)."""
        return prune_ledgers(self._ledger, lambda: self._tx(None, write=True), batch)

    def _cursor_secret(self) -> str:
        """The database's cursor secret (``store_settings``), made by the first process
        that needs one; read once per store object (:mod:`ditto_worker.memory.cursors`)."""
        if self._cursor_key is None:
            with self._tx(None, write=False) as conn:
                secret = read_setting(conn, CURSOR_SECRET_SETTING)
            if secret is None:
                with self._tx(None, write=True) as conn:
                    secret = claim_setting(conn, CURSOR_SECRET_SETTING, new_cursor_secret())
            self._cursor_key = secret
        return self._cursor_key

    def _check_model(self) -> None:
        """``EMBEDDING_MISMATCH`` unless the database (still, or since a reindex by
        another process) records this store's identity."""
        if self._mismatch is not None and self._embedder is not None:
            with transaction(self._conn(), None, write=False, snapshot=False) as conn:
                if vec.stored_identity(conn) == self._embedder.identity:
                    self._mismatch = None
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)

    def _verify_identity(self, conn: Connection) -> None:
        """In a transaction touching vectors: ``EMBEDDING_MISMATCH`` when another process
        switched the database to another identity since (``ditto-worker reindex``)."""
        stored = vec.stored_identity(conn)
        if self._embedder is not None and stored not in (None, self._embedder.identity):
            assert stored is not None
            self._mismatch = vec.mismatch_message(self._embedder.identity, stored)
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)

    def _check_identity(self) -> None:
        """``EMBEDDING_MISMATCH`` when the embedder differs from the database's, or the
        ``indexFields`` from those its index was built with (MEM-RET-4)."""
        self._check_model()
        if self._index_mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._index_mismatch)

    def _embed(self, pairs: Sequence[tuple[Any, Any]]) -> list[bytes | None] | None:
        """Vector BLOBs of ``(content, metadata)`` pairs, or ``None`` without an embedder."""
        self._check_identity()
        if self._embedder is None or not pairs:
            return None
        return vec.embed_contents(self._embedder, pairs, self._embedding_text)

    def _blob_list(self, blobs: Any) -> list[bytes | None] | None:
        return None if self._embedder is None else [next(blobs)]

    def _store_vectors(
        self, conn: Connection, seqs: Sequence[int], blobs: list[bytes | None] | None
    ) -> None:
        if blobs is None:
            if seqs:
                vec.forbid_unembedded_write(conn)
            return
        self._verify_identity(conn)
        vec.put_vectors(conn, seqs, blobs)

    # --- MemoryStore ----------------------------------------------------------------------
