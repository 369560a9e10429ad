"""The life of a :class:`~ditto_plugin_mysql.MysqlMemoryStore` in a process: settings,
the pool (built on first use, rebuilt after a fork), migrations, the claims made when a
process opens the database (embedding identity, ``indexFields``, cursor secret), scope
ids, and the vector side of writes. The operations are in :mod:`.store`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

import pymysql
from sqlalchemy.pool import QueuePool

from ditto_plugin_mysql import keywords
from ditto_plugin_mysql import vectors as vec
from ditto_plugin_mysql.db import (
    Conn,
    connect,
    map_error,
    open_pool,
    parse_url,
    transaction,
)
from ditto_plugin_mysql.executions import DEFAULT_RETENTION_S
from ditto_plugin_mysql.ledger import MysqlLedger
from ditto_plugin_mysql.migrations import (
    MigrationReport,
    check_database_name,
    check_schema,
    migrate,
)
from ditto_plugin_mysql.query_index import column_prefixes, sync_columns
from ditto_plugin_mysql.reembed import Reembedding
from ditto_plugin_mysql.rows import chunks, marks
from ditto_plugin_mysql.settings import claim_setting, lock_sequence, read_setting, scope_id
from ditto_plugin_mysql.sql import key_hash
from ditto_worker.errors import ErrorCode, MemoryError
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
from ditto_worker.memory.text import embedding_text, keyword_text
from ditto_worker.sqlkit import prune_ledgers

__all__ = ["Lifecycle"]

_MAX_CACHED_SCOPES: Final = 100_000


class Lifecycle:
    """Process-side state of the store (see the module docstring and the store's Args)."""

    def __init__(
        self,
        url: str,
        *,
        database: str | None = None,
        pool_max_size: int = 4,
        connect_timeout_s: float = 5.0,
        pool_timeout_s: float = 30.0,
        auto_migrate: bool = True,
        embedder: EmbeddingProvider | None = None,
        hybrid: Any = None,
        execution_retention_s: float = DEFAULT_RETENTION_S,
        index_fields: Sequence[str] = (),
        query_fields: Sequence[str] | None = None,
        operation_retention_s: float = DEFAULT_OPERATION_RETENTION_S,
    ) -> None:
        self._address = parse_url(url)
        self.database = check_database_name(database or self._address.database or "ditto")
        self._pool_max_size = pool_max_size
        self._timeouts = (connect_timeout_s, pool_timeout_s)
        self._auto_migrate = auto_migrate
        self._embedder = embedder
        self._hybrid_settings = hybrid
        self._retention_s = execution_retention_s
        self.retention = LedgerRetention(operation_retention_s, execution_retention_s)
        """The ledgers' retention (:mod:`ditto_worker.memory.retention`)."""
        self._ledger = MysqlLedger(self.retention)
        self._index_fields = tuple(index_fields)
        self._query_fields = tuple(query_fields or ())
        self._query_declared = query_fields is not None  # else: columns left alone
        self._declared = column_prefixes(self._query_fields)
        self._lock = threading.Lock()
        self._pool: QueuePool | None = None
        self._pid = os.getpid()
        self._mismatch: str | None = None
        self._index_mismatch: str | None = None
        self._cursor_key: str | None = None
        self._scopes: dict[str, int] = {}
        self._inherited: list[QueuePool] = []

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The embedding provider given at construction, or ``None``."""
        return self._embedder

    @contextmanager
    def _direct(self, database: str | None = "") -> Iterator[Conn]:
        conn = connect(self._address, self._timeouts[0], database)
        try:
            yield conn
        except pymysql.MySQLError as exc:
            raise map_error(exc) from None
        finally:
            conn.close()

    def migrate(self) -> MigrationReport:
        """Apply the missing schema migrations now (idempotent; ``ditto-worker migrate``).

        Raises:
            MemoryError: ``MEMORY_BACKEND_ERROR`` (safe message) when the server cannot be
                reached or the schema is newer than this plugin.
        """
        with self._direct() as conn:
            return migrate(conn, self.database)

    def _get_pool(self) -> QueuePool:
        with self._lock:
            if os.getpid() != self._pid:  # forked: never touch the parent's pool; keep it
                # referenced so that collecting it never sends QUIT on the parent's sockets
                if self._pool is not None:
                    self._inherited.append(self._pool)
                self._pool, self._pid, self._scopes = None, os.getpid(), {}
            if self._pool is None:
                with self._direct() as conn:
                    if self._auto_migrate:
                        migrate(conn, self.database)
                    else:
                        check_schema(conn, self.database)
                    conn.select_db(self.database)
                    self._claims(conn)
                    if self._query_declared:
                        sync_columns(conn, self.database, self._query_fields)
                self._pool = open_pool(
                    self._address, self.database, self._pool_max_size, *self._timeouts
                )
            return self._pool

    def _claims(self, conn: Conn) -> None:
        """Cursor secret, embedding identity and ``indexFields`` (first process sets)."""
        self._cursor_key = claim_setting(conn, CURSOR_SECRET_SETTING, new_cursor_secret())
        if self._embedder is not None:
            stored = vec.claim_identity(conn, self._embedder.identity)
            if stored != self._embedder.identity:
                self._mismatch = vec.mismatch_message(self._embedder.identity, stored)
        text = read_setting(conn, INDEX_SETTING)
        if text is None and self._index_fields:
            conn.begin()
            try:
                lock_sequence(conn)  # no writer in between: the emptiness check holds
                with conn.cursor() as cur:
                    cur.execute("SELECT 1 FROM memories LIMIT 1")
                    empty = cur.fetchone() is None
                if empty:
                    text = claim_setting(conn, INDEX_SETTING, encode_fields(self._index_fields))
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
        self._index_mismatch = fields_mismatch(
            "MySQL memory store", self._index_fields, decode_fields(text)
        )

    def close(self) -> None:
        """Close this process's pool (idempotent; a later call opens a new one)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and os.getpid() == self._pid:
            pool.dispose()

    def _read(self, options: MemoryCallOptions | None) -> AbstractContextManager[Conn]:
        pool = self._get_pool()
        self._check_identity()
        return transaction(pool, self._address, options, write=False)

    def _write(self, options: MemoryCallOptions | None) -> AbstractContextManager[Conn]:
        pool = self._get_pool()
        self._check_identity()
        return transaction(pool, self._address, options, write=True)

    def prune_ledgers(self, batch: int = PRUNE_BATCH) -> PruneReport:
        """Delete the forgotten operation ids and expired execution ids, ``batch`` rows
        per transaction (:func:`ditto_worker.sqlkit.prune_ledgers`)."""
        return prune_ledgers(self._ledger, lambda: self._write(None), batch)

    def _scope_id(self, conn: Conn, namespace: str, create: bool) -> int | None:
        """The id of ``namespace`` (cached: ids never change), created when ``create``."""
        cached = self._scopes.get(namespace)
        if cached is not None:
            return cached
        found = scope_id(conn, namespace, create)
        if found is not None and len(self._scopes) < _MAX_CACHED_SCOPES and not create:
            self._scopes[namespace] = found  # a created id is cached once committed & read
        return found

    def _last_created(self, conn: Conn) -> str | None:
        with conn.cursor() as cur:
            cur.execute("SELECT created_at FROM memories ORDER BY seq DESC LIMIT 1")
            row = cur.fetchone()
        return None if row is None else str(row[0])

    def _check_taken(self, conn: Conn, scope: int, keys: Sequence[str | None]) -> None:
        wanted = [k for k in keys if k is not None]
        for chunk in chunks(wanted):
            hashes = [key_hash(k) for k in chunk]
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT `key` FROM memories WHERE scope = %s AND key_hash IN "
                    f"({marks(hashes)}) LIMIT 1",
                    [scope, *hashes],
                )
                row = cur.fetchone()
            if row is not None:
                raise MemoryError(
                    ErrorCode.CONFLICT, f"memories[{keys.index(row[0])}].key already exists"
                )

    def _cursor_secret(self) -> str:
        self._get_pool()
        if self._cursor_key is None:
            raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "the cursor secret is not loaded")
        return self._cursor_key

    def _check_identity(self) -> None:
        """``EMBEDDING_MISMATCH`` when the embedder differs from the database's, or the
        ``indexFields`` from those its index was built with (MEM-RET-4). A mismatch is
        read again at each call: a reindex may have switched the database to this
        store's identity since (:mod:`ditto_plugin_mysql.reembed`)."""
        if self._mismatch is not None and self._embedder is not None:
            with self._direct(self.database) as conn:
                self._compare(vec.live_table(conn, lock=False)[1])
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)
        if self._index_mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._index_mismatch)

    def _embedding_text(self, pair: tuple[Any, Any]) -> str:
        return embedding_text(pair[0], pair[1], self._index_fields)

    def _embed(self, pairs: Sequence[tuple[Any, Any]]) -> list[bytes | None] | None:
        """Vector BLOBs of ``(content, metadata)`` pairs, or ``None`` without an embedder."""
        self._get_pool()
        self._check_identity()
        if self._embedder is None or not pairs:
            return None
        return vec.embed_contents(self._embedder, pairs, self._embedding_text)

    def _store_vectors(
        self, conn: Conn, scope: int, seqs: Sequence[int], blobs: list[bytes | None] | None
    ) -> None:
        """Replace the vectors of ``seqs`` (in the record's transaction); without an
        embedder, refuse the write when the database keeps vectors; with one, when a
        reindex switched the database to another identity since this process opened it
        (the table and identity are read locked: :func:`.vectors.live_table`)."""
        if blobs is None:
            if seqs:
                vec.forbid_unembedded_write(conn)
            return
        table, stored = vec.live_table(conn, lock=True)
        self._compare(stored)
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)
        with conn.cursor() as cur:
            if seqs:
                cur.execute(f"DELETE FROM {table} WHERE seq IN ({marks(seqs)})", list(seqs))
            rows = [(scope, s, b) for s, b in zip(seqs, blobs, strict=True) if b is not None]
            if rows:
                cur.executemany(
                    f"INSERT INTO {table} (scope, seq, embedding) VALUES (%s, %s, %s)", rows
                )

    def _compare(self, stored: EmbeddingIdentity | None) -> None:
        """Remember whether ``stored`` (the database's identity) is the provider's."""
        if self._embedder is None or stored in (None, self._embedder.identity):
            self._mismatch = None
        else:
            assert stored is not None
            self._mismatch = vec.mismatch_message(self._embedder.identity, stored)

    def reembed_embeddings(self, batch_size: int = 256) -> int:
        """Re-embed every record under this store's provider and record its identity
        (``ditto-worker reindex`` after a model change, MEM-RET-4); resumable, and the
        database stays in its old identity until the last vector is staged, then
        switches in one short transaction (:mod:`ditto_plugin_mysql.reembed`).

        Returns:
            The number of records embedded.

        Raises:
            MemoryError: ``INVALID_INPUT`` for a store without a provider or a
                ``batch_size`` below 1; ``CONFLICT`` while another reindex of the
                database runs; ``EMBEDDING_UNAVAILABLE``; ``EMBEDDING_MISMATCH`` for an
                ``indexFields`` change (run :meth:`reindex_embeddings` first);
                ``MEMORY_BACKEND_ERROR`` (safe message).
        """
        embedder = reembed_provider(self._embedder, batch_size)
        self._get_pool()
        if self._index_mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._index_mismatch)
        run = Reembedding(
            lambda: connect(self._address, self._timeouts[0], self.database),
            embedder,
            lambda pairs: vec.embed_contents(embedder, pairs, self._embedding_text),
            batch_size,
        )
        with self._direct(self.database) as guard:
            done = run.run(guard, self.database)
            self._compare(vec.live_table(guard, lock=False)[1])
        return done

    def reindex_embeddings(self, batch_size: int = 256) -> int:
        """After an ``indexFields`` change: rebuild the keyword terms and re-embed every
        record with the configured fields, then record them. Without a change: nothing.

        Returns:
            The number of records embedded.

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` (another model) / ``EMBEDDING_UNAVAILABLE``.
        """
        self._get_pool()
        if self._mismatch is not None:
            raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, self._mismatch)
        if self._index_mismatch is None:
            return 0
        done, after = 0, 0
        while True:
            with self._direct(self.database) as conn:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT seq, scope, `key`, content, metadata, terms FROM memories "
                        "WHERE seq > %s ORDER BY seq LIMIT %s",
                        [after, batch_size],
                    )
                    rows = cur.fetchall()
                if not rows:
                    break
                done += self._reindex_rows(conn, rows)
            after = int(rows[-1][0])
        with self._direct(self.database) as conn, conn.cursor() as cur:
            cur.execute(
                "REPLACE INTO store_settings (name, value) VALUES (%s, %s)",
                [INDEX_SETTING, encode_fields(self._index_fields)],
            )
        self._index_mismatch = None
        return done

    def _reindex_rows(self, conn: Conn, rows: Sequence[tuple[Any, ...]]) -> int:
        pairs = [(json.loads(r[3]), None if r[4] is None else json.loads(r[4])) for r in rows]
        blobs = None
        if self._embedder is not None:
            blobs = vec.embed_contents(self._embedder, pairs, self._embedding_text)
        conn.begin()
        try:
            lock_sequence(conn)
            for index, (seq, scope, key, _, _, old) in enumerate(rows):
                content, metadata = pairs[index]
                text = keyword_text(content, key, metadata, self._index_fields)
                counts = keywords.record_terms(text)
                keywords.unindex(conn, [int(seq)])
                keywords.insert_terms(conn, keywords.index_rows(int(scope), int(seq), counts))
                keywords.adjust(conn, int(scope), [(int(old), sum(counts.values()))])
                with conn.cursor() as cur:
                    cur.execute(
                        "UPDATE memories SET terms = %s WHERE seq = %s",
                        [sum(counts.values()), seq],
                    )
                if blobs is not None:
                    self._store_vectors(conn, int(scope), [int(seq)], [blobs[index]])
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        return 0 if blobs is None else sum(b is not None for b in blobs)
