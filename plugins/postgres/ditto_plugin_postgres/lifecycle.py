"""The process side of :class:`~ditto_plugin_postgres.PostgresMemoryStore`: construction, the
connection pool, migrations and settings claims, embedding identity, reindexing and the
vectors written with a record (the PostgreSQL store's lifecycle; its calls are in :mod:`.store`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import psycopg_pool

from ditto_plugin_postgres import keywords
from ditto_plugin_postgres import vectors as vec
from ditto_plugin_postgres.db import connect, map_error, open_pool, transaction
from ditto_plugin_postgres.ledger import PostgresLedger
from ditto_plugin_postgres.migrations import (
    MigrationReport,
    check_schema,
    lock_key,
    migrate,
    quote_schema,
)
from ditto_plugin_postgres.query_index import sync_indexes
from ditto_plugin_postgres.reembed import reembed
from ditto_plugin_postgres.search import KEYWORD_CAPABILITIES, VECTOR_CAPABILITIES
from ditto_plugin_postgres.settings import claim_setting
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.cursors import CURSOR_SECRET_SETTING, new_cursor_secret
from ditto_worker.memory.indexing import (
    INDEX_SETTING,
    decode_fields,
    encode_fields,
    fields_mismatch,
)
from ditto_worker.memory.ports import (
    EmbeddingIdentity,
    EmbeddingProvider,
    MemoryCallOptions,
    reembed_provider,
)
from ditto_worker.memory.retention import (
    DEFAULT_OPERATION_RETENTION_S,
    PRUNE_BATCH,
    LedgerRetention,
    PruneReport,
)
from ditto_worker.memory.text import embedding_text
from ditto_worker.sqlkit import (
    DEFAULT_RETENTION_S,
    prune_ledgers,
)

__all__ = ["Lifecycle"]


class Lifecycle:
    """Process-side state of the store (its Args:
    :class:`~ditto_plugin_postgres.PostgresMemoryStore`)."""

    capabilities: StoreCapabilities = KEYWORD_CAPABILITIES

    def __init__(
        self,
        url: str,
        *,
        schema: str = "ditto",
        pool_min_size: int = 1,
        pool_max_size: int = 4,
        connect_timeout_s: float = 5.0,
        pool_timeout_s: float = 30.0,
        auto_migrate: bool = True,
        embedder: EmbeddingProvider | None = None,
        hybrid: Any = None,
        execution_retention_s: float = DEFAULT_RETENTION_S,
        operation_retention_s: float = DEFAULT_OPERATION_RETENTION_S,
        index_fields: Sequence[str] = (),
        query_fields: Sequence[str] | None = None,
    ) -> None:
        self._index_fields = tuple(index_fields)
        self._query_fields = tuple(query_fields or ())
        self._query_declared = query_fields is not None  # else: indexes left alone
        self._index_mismatch: str | None = None
        self._quoted = quote_schema(schema)
        self._retention_s = execution_retention_s
        self.retention = LedgerRetention(operation_retention_s, execution_retention_s)
        """The ledgers' retention (:mod:`ditto_worker.memory.retention`)."""
        self._ledger = PostgresLedger(self._quoted, self.retention)
        self._table = f"{self._quoted}.memories"
        self._url = url
        self.schema = schema
        self._sizes = (pool_min_size, pool_max_size)
        self._timeouts = (connect_timeout_s, pool_timeout_s)
        self._auto_migrate = auto_migrate
        self._write_lock = lock_key(schema, "write")
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._pid = os.getpid()
        self._embedder = embedder
        self._hybrid_settings = hybrid
        self._mismatch: str | None = None
        self._identity_text: str | None = None  # the schema's identity, as stored
        self._cursor_key: str | None = None
        self._iterative = True
        if embedder is not None:
            self.capabilities = VECTOR_CAPABILITIES

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The embedding provider given at construction, or ``None``."""
        return self._embedder

    def __repr__(self) -> str:
        return f"PostgresMemoryStore(schema={self.schema!r})"

    # --- lifecycle ------------------------------------------------------------------------

    def migrate(self) -> MigrationReport:
        """Apply the missing schema migrations now (idempotent; ``ditto-worker migrate``).

        Raises:
            MemoryError: ``MEMORY_BACKEND_ERROR`` (safe message) when the server cannot be
                reached or the schema is newer than this plugin.
        """
        with self._connection() as conn:
            return migrate(conn, self.schema)

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        conn = connect(self._url, self._timeouts[0])
        try:
            yield conn
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        finally:
            conn.close()

    def _get_pool(self) -> psycopg_pool.ConnectionPool:
        with self._lock:
            if os.getpid() != self._pid:  # forked: never touch the parent's pool
                self._pool, self._pid = None, os.getpid()
            if self._pool is None:
                with self._connection() as conn:
                    if self._auto_migrate:
                        migrate(conn, self.schema)
                    else:
                        check_schema(conn, self.schema)
                    if self._embedder is not None:
                        self._claim(conn, self._embedder)
                    self._claim_index_fields(conn)
                    sync_indexes(
                        conn,
                        self._quoted,
                        self.schema,
                        self._query_fields if self._query_declared else None,
                        self._write_lock,
                    )
                    self._cursor_key = claim_setting(
                        conn, self._quoted, CURSOR_SECRET_SETTING, new_cursor_secret()
                    )
                self._pool = open_pool(self._url, *self._sizes, *self._timeouts)
            return self._pool

    def close(self) -> None:
        """Close this process's pool (idempotent; a later call opens a new one)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and os.getpid() == self._pid:
            pool.close()

    def _claim(self, conn: psycopg.Connection, embedder: EmbeddingProvider) -> None:
        """Record the embedder's identity (first store) or compare it (MEM-RET-4)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [self._write_lock])
            stored = vec.claim_identity(conn, self._quoted, embedder.identity)
            self._identity_text = vec.stored_text(conn, self._quoted)
            self._iterative = vec.iterative_scans(conn)
        if stored != embedder.identity:
            self._mismatch = vec.mismatch_message(embedder.identity, stored)

    def _claim_index_fields(self, conn: psycopg.Connection) -> None:
        """Record ``indexFields`` in an empty schema; remember a mismatch with the fields
        the index was built with (:mod:`ditto_worker.memory.indexing`)."""
        read = f"SELECT value FROM {self._quoted}.store_settings WHERE name = %s"
        row = conn.execute(read, [INDEX_SETTING]).fetchone()
        text = None if row is None else str(row[0])
        if text is None and self._index_fields:  # maybe the first store: claim under the
            # writers' lock (taken only then: a store without fields never waits here)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [self._write_lock])
                row = conn.execute(read, [INDEX_SETTING]).fetchone()
                text = None if row is None else str(row[0])
                empty = conn.execute(f"SELECT 1 FROM {self._table} LIMIT 1").fetchone() is None
                if text is None and empty:
                    text = encode_fields(self._index_fields)
                    conn.execute(
                        f"INSERT INTO {self._quoted}.store_settings (name, value) VALUES (%s, %s)",
                        [INDEX_SETTING, text],
                    )
        stored = decode_fields(text)
        self._index_mismatch = fields_mismatch(
            "PostgreSQL memory store", self._index_fields, stored
        )

    def reindex_embeddings(self, batch_size: int = 256) -> int:
        """After an ``indexFields`` change: rebuild the keyword index and re-embed every
        record with the configured fields, then record them (other processes keep their
        own ``indexFields`` until restarted). Without a change: nothing (every record
        already has its vector: a store with a provider embeds on write).

        Returns:
            The number of records embedded.

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` (another model) / ``EMBEDDING_UNAVAILABLE``.
        """
        pool = self._get_pool()
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)
        if self._index_mismatch is None:
            return 0
        with pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [self._write_lock])
            keywords.rebuild(conn, self._quoted, self._index_fields)
        done, after = 0, 0
        while self._embedder is not None:
            with pool.connection() as conn:
                rows = conn.execute(
                    f"SELECT seq, content::text, metadata::text FROM {self._table} "
                    "WHERE seq > %s ORDER BY seq LIMIT %s",
                    [after, batch_size],
                ).fetchall()
            if not rows:
                break
            pairs = [(json.loads(c), None if m is None else json.loads(m)) for _, c, m in rows]
            literals = vec.embed_contents(self._embedder, pairs, self._embedding_text)
            with pool.connection() as conn, conn.transaction():
                self._store_vectors(conn, [int(row[0]) for row in rows], literals)
            done += sum(literal is not None for literal in literals)
            after = int(rows[-1][0])
        with pool.connection() as conn, conn.transaction():
            conn.execute(
                f"INSERT INTO {self._quoted}.store_settings (name, value) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                [INDEX_SETTING, encode_fields(self._index_fields)],
            )
        self._index_mismatch = None
        return done

    def reembed_embeddings(self, batch_size: int = 256) -> int:
        """Re-embed every record under this store's provider and record its identity
        (``ditto-worker reindex`` after a model change, MEM-RET-4); resumable, and the
        schema stays in its old identity until the last vector is staged, then switches
        in one short transaction (:mod:`ditto_plugin_postgres.reembed`).

        Returns:
            The number of records embedded.

        Raises:
            MemoryError: ``INVALID_INPUT`` for a store without a provider or a
                ``batch_size`` below 1; ``CONFLICT`` while another reindex of the schema
                runs; ``EMBEDDING_UNAVAILABLE``; ``EMBEDDING_MISMATCH`` for an
                ``indexFields`` change (run :meth:`reindex_embeddings` first);
                ``MEMORY_BACKEND_ERROR`` (safe message).
        """
        embedder = reembed_provider(self._embedder, batch_size)
        pool = self._get_pool()
        if self._index_mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._index_mismatch)
        with self._connection() as lock:
            try:
                done = reembed(
                    pool, lock, self._quoted, lock_key(self.schema, "reindex"), embedder,
                    lambda pairs: vec.embed_contents(embedder, pairs, self._embedding_text),
                    batch_size,
                )  # fmt: skip
            except psycopg.Error as exc:
                raise map_error(exc) from exc
            self._verify_identity(lock)
        return done

    def _verify_identity(self, conn: psycopg.Connection) -> str | None:
        """Compare the schema's recorded identity with the provider's (a reindex may have
        switched it since this process opened it); returns and remembers the mismatch
        message, ``None`` when they agree."""
        text = vec.stored_text(conn, self._quoted)
        stored = None if text is None else EmbeddingIdentity.from_json(text)
        if self._embedder is None or stored in (None, self._embedder.identity):
            self._mismatch, self._identity_text = None, text
        else:
            assert stored is not None
            self._mismatch = vec.mismatch_message(self._embedder.identity, stored)
        return self._mismatch

    def _embedding_text(self, pair: tuple[Any, Any]) -> str:
        """The text a ``(content, metadata)`` record is embedded by (``indexFields``)."""
        return embedding_text(pair[0], pair[1], self._index_fields)

    def _tx(self, options: MemoryCallOptions | None) -> AbstractContextManager[psycopg.Connection]:
        pool = self._get_pool()
        self._check_identity()
        return transaction(pool, options)

    def prune_ledgers(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """Delete the forgotten operation ids and expired execution ids, ``batch`` rows
        per transaction (:func:`ditto_worker.sqlkit.prune_ledgers`)."""
        return prune_ledgers(self._ledger, lambda: self._tx(None), batch)

    def _cursor_secret(self) -> str:
        """The schema's cursor secret (``store_settings.cursor_secret``, made by the first
        process that opens the schema; read when this process opens its pool)."""
        self._get_pool()
        if self._cursor_key is None:  # set by _get_pool; kept across a fork
            raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "the cursor secret is not loaded")
        return self._cursor_key

    def _check_identity(self) -> None:
        """``EMBEDDING_MISMATCH`` when the embedder differs from the schema's, or the
        ``indexFields`` from those its index was built with (MEM-RET-4). A mismatch is
        read again at each call: a reindex may have switched the schema to this store's
        identity since (:mod:`ditto_plugin_postgres.reembed`)."""
        pool = self._pool
        if self._mismatch is not None and self._embedder is not None and pool is not None:
            try:
                with pool.connection() as conn:
                    self._verify_identity(conn)
            except psycopg.Error as exc:
                raise map_error(exc) from exc
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)
        if self._index_mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._index_mismatch)

    def _embed(self, pairs: Sequence[tuple[Any, Any]]) -> list[str | None] | None:
        """Vector literals of ``(content, metadata)`` pairs (before the write
        transaction), or ``None`` without an embedder."""
        self._get_pool()
        self._check_identity()
        if self._embedder is None or not pairs:
            return None
        return vec.embed_contents(self._embedder, pairs, self._embedding_text)

    def _store_vectors(
        self, conn: psycopg.Connection, seqs: Sequence[int], literals: list[str | None] | None
    ) -> None:
        """Replace the vectors of ``seqs`` (in the record's transaction); without an
        embedder, refuse the write when the schema keeps vectors."""
        if literals is None:
            if seqs:
                vec.forbid_unembedded_write(conn, self._quoted)
            return
        if self._verify_identity(conn) is not None:  # a reindex switched the schema
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, str(self._mismatch))
        table = f"{self._quoted}.memory_vectors"
        conn.execute(f"DELETE FROM {table} WHERE seq = ANY(%s::bigint[])", [list(seqs)])
        pairs = [(s, lit) for s, lit in zip(seqs, literals, strict=True) if lit is not None]
        if pairs:
            conn.execute(
                f"INSERT INTO {table} (seq, embedding) SELECT d.seq, d.v::vector FROM "
                "unnest(%s::bigint[], %s::text[]) AS d(seq, v)",
                [[p[0] for p in pairs], [p[1] for p in pairs]],
            )
