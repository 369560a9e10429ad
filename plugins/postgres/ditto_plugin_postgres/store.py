"""``PostgresMemoryStore``: MemoryStore + native MemorySearchProvider on PostgreSQL.

psycopg 3 with a psycopg-pool connection pool built lazily in the process that uses it
(a forked worker builds its own). One transaction per call and per batch; writers take
an advisory lock so that ``createdAt`` and the sequence follow commit order (MEM-PY-6).
Rules owned here: MEM-GET-2/5, MEM-QUERY-2/3/4, MEM-WRITE-2/3, MEM-UPDATE-1/2/4,
MEM-DELETE-2/3, MEM-SEARCH-1/2/3, MEM-PY-5/6/11/12, MEM-RUN-2, MEM-ERR-4; with an
embedding provider also MEM-WRITE-4, MEM-SEARCH-6, MEM-RET-4 (:mod:`.vectors`).
WRITE/UPDATE/DELETE are exactly-once per execution id (:mod:`.executions`).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
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
from ditto_plugin_postgres.rows import (
    WIDTH,
    Row,
    check_batch_keys,
    dump,
    item,
    sort_value,
    update_sql,
)
from ditto_plugin_postgres.search import COLUMNS as _COLUMNS
from ditto_plugin_postgres.search import KEYWORD_CAPABILITIES, VECTOR_CAPABILITIES, SearchMixin
from ditto_plugin_postgres.settings import claim_setting
from ditto_plugin_postgres.sql import PostgresFilter, in_namespace, sort_columns
from ditto_plugin_postgres.text import record_terms, tsvector_literal
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemoryUpdateInput,
    MemoryWriteInput,
    to_wire,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.cursors import CURSOR_SECRET_SETTING, new_cursor_secret
from ditto_worker.memory.filters import SortValue, timestamp_now
from ditto_worker.memory.indexing import (
    INDEX_SETTING,
    decode_fields,
    encode_fields,
    fields_mismatch,
)
from ditto_worker.memory.operations import (
    condition_failed,
    metadata_holds,
    operation_of,
)
from ditto_worker.memory.ports import (
    EmbeddingIdentity,
    EmbeddingProvider,
    MemoryCallOptions,
    reembed_provider,
)
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.text import embedding_text, keyword_text
from ditto_worker.sqlkit import (
    DEFAULT_RETENTION_S,
    Sql,
    claim_call,
    compile_filter,
    page_output,
    page_query,
    page_request,
    record_call,
)

__all__ = ["PostgresMemoryStore"]


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _sort_values(row: Row) -> tuple[SortValue, ...]:
    """The cursor's ``(rank, value)`` per sort term (three columns each after the
    :data:`~ditto_plugin_postgres.rows.WIDTH` record columns)."""
    return tuple(sort_value(row, i) for i in range((len(row) - WIDTH) // 3))


class PostgresMemoryStore(SearchMixin):
    """MemoryStore and keyword MemorySearchProvider over one PostgreSQL schema.

    Args:
        url: a libpq URL (``postgresql://user:password@host:port/db``); from
            ``DITTO_WORKER_MEMORY_POSTGRES_URL`` when built by :func:`create_store`
            (MEM-CONF-5). Never logged or shown.
        schema: the schema holding the tables (``[A-Za-z_][A-Za-z0-9_]{0,62}``).
        pool_min_size: connections this process's pool keeps open.
        pool_max_size: connections this process's pool may open at most.
        connect_timeout_s: seconds to wait for a new connection.
        pool_timeout_s: seconds a call waits for a free pooled connection.
        auto_migrate: run :meth:`migrate` on first use (else require the latest version).
        embedder: an embedding provider: WRITE and content UPDATE embed the content and
            store its vector in the record's transaction, and SEARCH gains ``vector`` and
            ``hybrid`` (:mod:`ditto_plugin_postgres.vectors`). ``None``: no embedding.
        hybrid: settings of the ``hybrid`` strategy, a
            :class:`ditto_worker.retrieval.RetrievalConfig` or its mapping (camelCase,
            ``plugins.postgres.hybrid``); default ``RetrievalConfig()``.
        execution_retention_s: how long a committed mutation's execution id is
            remembered (``plugins.postgres.executionRetentionS``, 24 h).
        query_fields: ``queryFields``, metadata fields QUERY filters and sorts on, given
            B-tree expression indexes when the pool opens
            (:mod:`ditto_plugin_postgres.query_index`); the whole declaration (``[]``
            drops them all); ``None``: existing ones left alone.

    Behaviour (declared in :attr:`capabilities`): atomic batches, unique keys
    (``CONFLICT``, nothing written), ``NOT_FOUND`` for UPDATE of a missing id, keys freed
    by DELETE, creation order by default, keyset cursors, typed filters, a cancel token
    cancels the running statement (``MEMORY_CANCELLED``) and the deadline bounds it
    (``MEMORY_TIMEOUT``). SEARCH strategy ``keyword`` (the default) over English stems and
    CJK bigrams: ``score`` = sum of the BM25 IDF of the matched query terms + ``0.01 *
    ts_rank_cd`` (:mod:`ditto_plugin_postgres.text`), a positive float, **higher is
    better**, ties in creation order. With an embedder also ``vector`` (cosine similarity,
    ``min(limit, matches)`` results) and ``hybrid`` (:mod:`ditto_plugin_postgres.search`).
    With an embedder whose identity differs from the schema's, every call fails with
    ``ErrorCode.EMBEDDING_MISMATCH``; without one, a WRITE or content UPDATE to a schema that keeps
    vectors does. Metadata strings and keys cannot hold NUL characters (``INVALID_INPUT``).
    Cursors are signed with the schema's ``store_settings.cursor_secret``, shared by every
    process on the schema (:mod:`ditto_worker.memory.cursors`).
    WRITE, UPDATE and DELETE claim the call's execution id first, in their transaction: a
    redelivered or re-sent call with the same id applies nothing and returns the committed
    output; a copy running while the first is in flight waits for it
    (:mod:`ditto_plugin_postgres.executions`).

    Raises:
        ValueError: a bad schema name (at construction).
    """

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
        index_fields: Sequence[str] = (),
        query_fields: Sequence[str] | None = None,
    ) -> None:
        self._index_fields = tuple(index_fields)
        self._query_fields = tuple(query_fields or ())
        self._query_declared = query_fields is not None  # else: indexes left alone
        self._index_mismatch: str | None = None
        self._quoted = quote_schema(schema)
        self._retention_s = execution_retention_s
        self._ledger = PostgresLedger(self._quoted)
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

    # --- MemoryStore ----------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """The namespaces holding at least one memory, sorted (``""``: the unscoped one;
        :attr:`ditto_worker.scope.Scope.namespace` otherwise). An operator's listing for
        ``ditto-worker export --all-scopes``, never reached by a node call."""
        with self._tx(None) as conn:
            rows = conn.execute(
                f"SELECT DISTINCT namespace FROM {self._table} ORDER BY namespace"
            ).fetchall()
        return [str(row[0]) for row in rows]

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ids, keys = list(dict.fromkeys(input.ids or ())), list(dict.fromkeys(input.keys or ()))
        sql = (
            f"SELECT {_COLUMNS} FROM {self._table} AS m "
            "WHERE m.namespace = %s AND (m.id = ANY(%s::text[]) OR m.key = ANY(%s::text[])) "
            "ORDER BY m.seq"
        )
        with self._tx(options) as conn:
            rows = conn.execute(sql, [namespace_of(options), ids, keys]).fetchall()
        return [item(row) for row in rows]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter`` in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
                ``INVALID_CURSOR`` (malformed, made for another filter/orderBy, or
                issued in another namespace).
        """
        ns = namespace_of(options)
        request = page_request(input, ns, self._cursor_secret)
        dialect = PostgresFilter(frozenset(self._query_fields))
        where = in_namespace(compile_filter(dialect, request.node), ns)
        sql = page_query(
            dialect,
            _COLUMNS,
            sort_columns(request.terms, dialect.declared),
            Sql(f"{self._table} AS m WHERE {where.text}", where.params),
            request,
        )
        with self._tx(options) as conn:  # planned for its values each time (never generic:
            # the best index depends on them; a cached generic plan cost 3 -> 14 ms p50)
            rows = conn.execute(sql.text, sql.params, prepare=False).fetchall()
        return page_output(request, rows, self._cursor_secret, item, _sort_values)

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts in one transaction; one full item per draft, in order.

        Raises:
            MemoryError: ``CONFLICT`` (nothing written) for a taken or repeated key;
                ``INVALID_INPUT`` for content/metadata that is not JSON, or NUL characters
                in metadata or keys.
        """
        drafts = input.memories
        keys = [d.key for d in drafts]
        check_batch_keys(keys)
        contents = [dump(d.content, f"memories[{i}].content") for i, d in enumerate(drafts)]
        metas = [
            None if d.metadata is None else dump(d.metadata, f"memories[{i}].metadata", False)
            for i, d in enumerate(drafts)
        ]
        fields = self._index_fields
        terms = [record_terms(keyword_text(d.content, d.key, d.metadata, fields)) for d in drafts]
        ids = [uuid.uuid4().hex for _ in drafts]
        literals = self._embed([(d.content, d.metadata) for d in drafts])
        eid = options.execution_id if options is not None else None
        ns = namespace_of(options)
        op = operation_of(options, "MEMORY.WRITE", input)
        op_id = None if op is None else op.id
        with self._tx(options) as conn:
            replay = claim_call(self._ledger, conn, "MEMORY.WRITE", op, eid, ns)
            if replay is not None:  # already committed: the same result, nothing applied
                return [MemoryItem.model_validate(i) for i in replay]
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [self._write_lock])
            self._check_taken(conn, keys, ns)
            last = conn.execute(
                f"SELECT created_at FROM {self._table} ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            now = timestamp_now(last[0] if last else None)
            scope = keywords.scope_id(conn, self._quoted, ns, create=True) or 0
            vectors = [tsvector_literal(t, scope) for t in terms]
            inserted = conn.execute(
                f"INSERT INTO {self._table} (namespace, id, key, content, metadata, created_at,"
                " updated_at, tsv, terms, operation_id) SELECT %s, d.id, d.key, d.content::json, "
                "d.metadata::jsonb, %s, %s, d.tsv::tsvector, d.n, %s FROM unnest(%s::text[], "
                "%s::text[], %s::text[], %s::text[], %s::text[], %s::int[]) WITH ORDINALITY "
                "AS d(id, key, content, metadata, tsv, n, ord) ORDER BY d.ord "
                "RETURNING id, seq",
                [ns, now, now, op_id, ids, keys, contents, metas, vectors, [len(t) for t in terms]],
            ).fetchall()
            keywords.adjust(conn, self._quoted, ns, [(0, len(t)) for t in terms])
            seqs: dict[str, int] = {str(r[0]): int(r[1]) for r in inserted}
            self._store_vectors(conn, [seqs[i] for i in ids], literals)
            items = [
                MemoryItem(
                    id=i,
                    key=k,
                    content=json.loads(c),
                    metadata=None if m is None else json.loads(m),
                    operation_id=op_id,
                    created_at=now,
                    updated_at=now,
                )
                for i, k, c, m in zip(ids, keys, contents, metas, strict=True)
            ]
            output = [to_wire(i) for i in items]
            record_call(self._ledger, conn, "MEMORY.WRITE", op, eid, output, self._retention_s, ns)
        return items

    def _check_taken(self, conn: psycopg.Connection, keys: Sequence[str | None], ns: str) -> None:
        wanted = [k for k in keys if k is not None]
        if not wanted:
            return
        row = conn.execute(
            f"SELECT key FROM {self._table} WHERE namespace = %s AND key = ANY(%s::text[]) LIMIT 1",
            [ns, wanted],
        ).fetchone()
        if row is not None:
            raise MemoryError(
                ErrorCode.CONFLICT, f"memories[{keys.index(row[0])}].key already exists"
            )

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates in one transaction (MEM-UPDATE-1): an omitted field keeps
        its value, ``metadata`` replaces the whole object, ``content: null`` is a value.

        Raises:
            MemoryError: ``NOT_FOUND`` (nothing applied) when an id does not exist;
                ``INVALID_INPUT`` as for :meth:`write`.
        """
        changes = [update_sql(i, entry) for i, entry in enumerate(input.memories)]
        ids = [entry.id for entry in input.memories]
        rows: list[Row] = []
        fields = self._index_fields
        wanted = [] if fields else [e for e in input.memories if e.has_content]
        embedded = self._embed([(e.content, None) for e in wanted])
        literals = None if embedded is None else iter(embedded)
        eid = options.execution_id if options is not None else None
        ns = namespace_of(options)
        op = operation_of(options, "MEMORY.UPDATE", input)
        with self._tx(options) as conn:
            replay = claim_call(self._ledger, conn, "MEMORY.UPDATE", op, eid, ns)
            if replay is not None:  # already committed: no second update, same result
                return [MemoryItem.model_validate(i) for i in replay]
            # FOR UPDATE (in id order): the rows are ours until COMMIT, so ifMetadata is
            # checked against what the UPDATE replaces (MEM-UPDATE-5)
            found = conn.execute(
                f"SELECT id, key, terms, content::text, metadata::text FROM {self._table} "
                "WHERE namespace = %s AND id = ANY(%s::text[]) ORDER BY id FOR UPDATE",
                [ns, ids],
            ).fetchall()
            present = {row[0]: (row[1], int(row[2])) for row in found}
            stored = {row[0]: (json.loads(row[3]), _json(row[4])) for row in found}
            for index, entry in enumerate(input.memories):
                if entry.id not in present:
                    raise MemoryError(
                        ErrorCode.NOT_FOUND, f"memories[{index}]: no memory with this id"
                    )
                held = entry.if_metadata
                if held is not None and not metadata_holds(stored[entry.id][1], held):
                    raise condition_failed(index)
            now = timestamp_now()
            scope = 0
            if any(entry.has_content or fields for entry in input.memories):
                scope = keywords.scope_id(conn, self._quoted, ns, create=True) or 0
            counts: list[tuple[int, int]] = []
            for entry, change in zip(input.memories, changes, strict=True):
                content, metadata = stored[entry.id]
                content = entry.content if entry.has_content else content
                metadata = entry.metadata if entry.has_metadata else metadata
                stored[entry.id] = (content, metadata)
                reindex = entry.has_content or bool(fields and entry.has_metadata)
                if reindex:  # the keyword terms follow the content (and indexFields)
                    key, old = present[entry.id]
                    terms = record_terms(keyword_text(content, key, metadata, fields))
                    change = Sql(
                        f"{change.text}, tsv = %s::tsvector, terms = %s",
                        [*change.params, tsvector_literal(terms, scope), len(terms)],
                    )
                    counts.append((old, len(terms)))
                    present[entry.id] = (key, len(terms))
                sql = (
                    f"UPDATE {self._table} AS m SET updated_at = %s, operation_id = %s"
                    f"{change.text} WHERE m.namespace = %s AND m.id = %s RETURNING {_COLUMNS}"
                )
                params = [now, None if op is None else op.id, *change.params, ns, entry.id]
                rows.append(conn.execute(sql, params).fetchone() or ())
                if reindex:  # a metadata-only update keeps the vector unless fields read it
                    if fields:  # the text needs the stored metadata: embedded here
                        literal = self._embed([(content, metadata)])
                    else:
                        literal = None if literals is None else [next(literals)]
                    self._store_vectors(conn, [int(rows[-1][0])], literal)
            keywords.adjust(conn, self._quoted, ns, counts)
            items = [item(row) for row in rows]
            output = [to_wire(i) for i in items]
            record_call(self._ledger, conn, "MEMORY.UPDATE", op, eid, output, self._retention_s, ns)
        return items

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete existing ids in one statement; returns only the ids deleted now, in
        request order; their keys are free again (MEM-PY-12)."""
        ids = list(dict.fromkeys(input.ids))
        eid = options.execution_id if options is not None else None
        ns = namespace_of(options)
        op = operation_of(options, "MEMORY.DELETE", input)
        with self._tx(options) as conn:
            replay = claim_call(self._ledger, conn, "MEMORY.DELETE", op, eid, ns)
            if replay is not None:
                return MemoryDeleteOutput.model_validate(replay)
            rows = conn.execute(
                f"DELETE FROM {self._table} WHERE namespace = %s AND id = ANY(%s::text[]) "
                "RETURNING id, terms",
                [ns, ids],
            ).fetchall()
            keywords.adjust(conn, self._quoted, ns, [(int(row[1]), 0) for row in rows])
            gone = {row[0] for row in rows}
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in gone])
            record_call(
                self._ledger, conn, "MEMORY.DELETE", op, eid, to_wire(output), self._retention_s, ns
            )
        return output
