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
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from ditto_plugin_postgres import keywords
from ditto_plugin_postgres.lifecycle import Lifecycle
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
from ditto_plugin_postgres.search import KEYWORD_CAPABILITIES, SearchMixin
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
from ditto_worker.memory.filters import SortValue, timestamp_now
from ditto_worker.memory.operations import (
    condition_failed,
    metadata_holds,
)
from ditto_worker.memory.ports import (
    MemoryCallOptions,
)
from ditto_worker.memory.scope import namespace_of
from ditto_worker.memory.text import keyword_text
from ditto_worker.sqlkit import (
    Sql,
    compile_filter,
    mutation,
    page_output,
    page_query,
    page_request,
)

__all__ = ["PostgresMemoryStore"]


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _sort_values(row: Row) -> tuple[SortValue, ...]:
    """The cursor's ``(rank, value)`` per sort term (three columns each after the
    :data:`~ditto_plugin_postgres.rows.WIDTH` record columns)."""
    return tuple(sort_value(row, i) for i in range((len(row) - WIDTH) // 3))


class PostgresMemoryStore(Lifecycle, SearchMixin):
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
        call = mutation(self._ledger, "MEMORY.WRITE", input, options)
        ns = call.namespace
        op_id = call.operation_id
        with self._tx(options) as conn:
            replay = call.claim(conn)
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
            call.record(conn, output, self._retention_s)
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
        call = mutation(self._ledger, "MEMORY.UPDATE", input, options)
        ns = call.namespace
        with self._tx(options) as conn:
            replay = call.claim(conn)
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
                params = [now, call.operation_id, *change.params, ns, entry.id]
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
            call.record(conn, output, self._retention_s)
        return items

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete existing ids in one statement; returns only the ids deleted now, in
        request order; their keys are free again (MEM-PY-12)."""
        ids = list(dict.fromkeys(input.ids))
        call = mutation(self._ledger, "MEMORY.DELETE", input, options)
        ns = call.namespace
        with self._tx(options) as conn:
            replay = call.claim(conn)
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
            call.record(conn, to_wire(output), self._retention_s)
        return output
