"""``SqliteMemoryStore``: the embedded MemoryStore + native MemorySearchProvider.

One SQLite file (opened with the process's one SQLite library, :mod:`.driver`; sqlite-vec
loaded when it has an embedder) shared safely by several worker processes (WAL, busy
timeout, ``BEGIN IMMEDIATE`` writes; see :mod:`ditto_plugin_sqlite.db`) and by the
threads of one process (one connection per thread). Rules owned here: MEM-GET-2/5,
MEM-QUERY-2/3/4, MEM-WRITE-2/3, MEM-UPDATE-1/2/4, MEM-DELETE-2/3, MEM-SEARCH-1/2,
MEM-PY-5/6/11/12; with an embedding provider also MEM-WRITE-4, MEM-SEARCH-6, MEM-RET-4
(:mod:`ditto_plugin_sqlite.vectors`).
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any, ClassVar, Final

from ditto_plugin_sqlite.fts import unindex_records
from ditto_plugin_sqlite.lifecycle import Lifecycle
from ditto_plugin_sqlite.search import KEYWORD_CAPABILITIES, SearchMixin
from ditto_plugin_sqlite.sql import (
    SqliteFilter,
    in_namespace,
    indexable,
    sort_columns,
)
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
from ditto_worker.memory.operations import condition_failed, metadata_holds
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.sqlkit import (
    Sql,
    compile_filter,
    mutation,
    page_output,
    page_query,
    page_request,
    uses_declared,
)
from ditto_worker.sqlkit.records import CHUNK as _CHUNK
from ditto_worker.sqlkit.records import COLUMNS as _COLUMNS
from ditto_worker.sqlkit.records import WIDTH as _WIDTH
from ditto_worker.sqlkit.records import Row as _Row
from ditto_worker.sqlkit.records import check_keys as _check_keys
from ditto_worker.sqlkit.records import chunks as _chunks
from ditto_worker.sqlkit.records import dump as _dump
from ditto_worker.sqlkit.records import marks as _marks
from ditto_worker.sqlkit.records import row_item as _item
from ditto_worker.sqlkit.records import stored_item as _stored
from ditto_worker.sqlkit.records import trusted_item as _trusted

__all__ = ["SqliteMemoryStore"]

_NEXT: Final = (
    "SELECT (SELECT MAX(created_at) FROM memories), 1 + max("
    "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0),"
    " coalesce((SELECT MAX(seq) FROM memories), 0))"
)
"""The newest ``created_at`` and the next ``seq`` AUTOINCREMENT would give (never reused)."""


def _metadata(text: str | None) -> Any:
    return None if text is None else json.loads(text)


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _stored_copy(value: Any, text: str) -> Any:
    """The value a record now holds, as a read would give it: ``value`` (validated JSON)
    when it is a scalar or an object of scalars (a shallow copy), else ``text`` decoded.
    Never the caller's own list or object: the item returned must not change with it."""
    if type(value) in _SCALARS:
        return value
    if type(value) is dict and all(type(v) in _SCALARS for v in value.values()):
        return dict(value)
    return json.loads(text)


@functools.lru_cache(maxsize=256)
def _get_sql(shape: tuple[tuple[str, int], ...]) -> str:
    """GET's statement for ``(column, values)`` parts (``id``/``key``), made once per shape:
    each part through its own index, ``UNION ALL``-ed."""
    return " UNION ALL ".join(
        f"SELECT {_COLUMNS} FROM memories AS m WHERE m.namespace = ? AND m.{column} IN "
        f"({_marks(range(count))})"
        for column, count in shape
    )


def _sort_values(row: _Row) -> tuple[SortValue, ...]:
    """The cursor's ``(rank, value)`` per sort term: the ``r{i}``/``v{i}`` columns after
    the :data:`~ditto_worker.sqlkit.records.WIDTH` record columns of a QUERY row."""
    extra = row[_WIDTH:]
    return tuple((extra[i], 0 if extra[i + 1] is None else extra[i + 1])  # a missing key
                 for i in range(0, len(extra), 2))  # fmt: skip


class SqliteMemoryStore(Lifecycle, SearchMixin):
    """MemoryStore and MemorySearchProvider over one SQLite file.

    Args:
        path: the database file; it and its parent folder are created if missing.
        busy_timeout_ms: how long a statement waits for another process's lock, in ms.
        embedder: an embedding provider: WRITE and content UPDATE embed the content in
            the record's transaction, and SEARCH gains ``vector`` and ``hybrid``
            (:mod:`ditto_plugin_sqlite.vectors`). ``None``: no embedding, ever.
        hybrid: settings of the ``hybrid`` strategy, a
            :class:`ditto_worker.retrieval.RetrievalConfig` or its mapping (camelCase
            keys, ``plugins.sqlite.hybrid``); default: ``RetrievalConfig()``.
        query_fields: ``queryFields``, metadata fields QUERY filters and sorts on, given
            expression indexes at open (:mod:`ditto_plugin_sqlite.query_index`); the
            whole declaration (``[]`` drops them all); ``None``: existing left alone.

    Behaviour (declared in :attr:`capabilities`):
        * WRITE/UPDATE/DELETE batches commit atomically, all or nothing (MEM-PY-11).
        * Keys are unique: a WRITE whose key exists, or repeats within the batch, raises
          ``CONFLICT`` and writes nothing; deleting a record frees its key (MEM-PY-12).
        * QUERY's default order is creation order (``createdAt`` is never earlier than
          the previous record's, and the sequence breaks ties; MEM-PY-6). Keyset paging
          neither repeats nor skips records across inserts/deletes between pages; a record
          whose sort key is updated between pages may move (seen twice or not at all).
          Cursors are signed with the database's ``store_settings.cursor_secret`` (made
          by the first process that pages), so any process on the file reads them and a
          forged or altered one is ``INVALID_CURSOR`` (:mod:`ditto_worker.memory.cursors`).
        * SEARCH strategy ``keyword`` (alias ``bm25``): FTS5 BM25; ``score`` is
          ``-bm25()``, a positive float where **higher is better**, unbounded; results
          in descending score, the sequence breaking ties. With an embedder also
          ``vector`` (score = cosine similarity in [-1, 1]) and ``hybrid`` (the
          retrieval pipeline over both; score documented in
          :mod:`ditto_worker.memory.search.fusion`).
        * With an embedder whose identity differs from the database's, every call fails
          with ``ErrorCode.EMBEDDING_MISMATCH``; without one, a WRITE or content UPDATE to a
          database that keeps vectors does.
        * ``options.cancel`` interrupts the running statement (``MEMORY_CANCELLED``).
        * Tenant scope: every operation is confined to ``options.scope``'s namespace (a
          column compared with ``=``); keys are unique per namespace; ids of another
          scope are not found (:mod:`ditto_worker.memory.scope`).

    Errors: ``MemoryError`` with ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
    ``INVALID_CURSOR``, ``CONFLICT``, ``NOT_FOUND``, ``UNSUPPORTED_STRATEGY``,
    ``INVALID_INPUT``, ``MEMORY_CANCELLED``, ``ErrorCode.EMBEDDING_MISMATCH``,
    ``EMBEDDING_UNAVAILABLE`` or ``MEMORY_BACKEND_ERROR`` (driver errors, with a safe
    message).
    """

    capabilities: StoreCapabilities = KEYWORD_CAPABILITIES
    single_writer: ClassVar[bool] = True
    """One writer at a time per database file (``BEGIN IMMEDIATE``): ``ditto-worker worker``
    runs a group of mutations on one thread by default
    (:func:`ditto_worker.runtime.registry.store_single_writer`)."""

    def namespaces(self) -> list[str]:
        """The namespaces holding at least one memory, sorted (``""``: the unscoped one;
        :attr:`ditto_worker.scope.Scope.namespace` otherwise). An operator's listing for
        ``ditto-worker export --all-scopes``, never reached by a node call."""
        with self._tx(None, write=False) as conn:
            rows = conn.execute("SELECT DISTINCT namespace FROM memories ORDER BY namespace")
            return [str(row[0]) for row in rows.fetchall()]

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ids = list(dict.fromkeys(input.ids)) if input.ids else []
        keys = list(dict.fromkeys(input.keys)) if input.keys else []
        rows: dict[int, _Row] = {}
        ns = namespace_of(options)
        if len(ids) + len(keys) <= _CHUNK:  # the common case: one statement, no BEGIN/COMMIT
            shape = (("id", len(ids)),) * bool(ids) + (("key", len(keys)),) * bool(keys)
            params = ([ns, *ids] if ids else []) + ([ns, *keys] if keys else [])
            with self._tx(options, write=False, snapshot=False) as conn:
                for row in conn.execute(_get_sql(shape), params):
                    rows[row[0]] = row
            return [_stored(rows[seq]) for seq in sorted(rows)]
        parts = [
            (c, chunk) for c, values in (("id", ids), ("key", keys)) for chunk in _chunks(values)
        ]
        with self._tx(options, write=False, snapshot=True) as conn:  # several: one snapshot
            for column, chunk in parts:  # ids and keys each through their own index
                sql = _get_sql(((column, len(chunk)),))
                rows.update((row[0], row) for row in conn.execute(sql, [ns, *chunk]))
        return [_stored(rows[seq]) for seq in sorted(rows)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter``, in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
                ``INVALID_CURSOR`` (malformed, made for another filter/orderBy, or
                issued in another namespace).
        """
        ns = namespace_of(options)
        request = page_request(input, ns, self._cursor_secret)
        dialect = SqliteFilter(self._query.declared)
        declared = dialect.declared
        indexed = uses_declared(request.node, request.terms, lambda f: indexable(f, declared))
        indexed = indexed or any(t.field.reserved and t.field.name == "key" for t in request.terms)
        where = in_namespace(compile_filter(dialect, request.node), ns, indexed=indexed)
        sql = page_query(
            dialect,
            "m.seq AS seq, m.id, m.key, m.content, m.metadata, m.operation_id, m.created_at,"
            " m.updated_at",
            sort_columns(request.terms, declared),
            Sql(f"memories AS m WHERE {where.text}", where.params),
            request,
        )
        with self._tx(options, write=False) as conn:
            rows = conn.execute(sql.text, sql.params).fetchall()
        return page_output(request, rows, self._cursor_secret, _item, _sort_values)

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts in one transaction; one full item per draft, in order.

        Raises:
            MemoryError: ``CONFLICT`` (nothing written) for a taken or repeated key;
                ``INVALID_INPUT`` for content/metadata that is not JSON;
                ``EMBEDDING_UNAVAILABLE`` / ``ErrorCode.EMBEDDING_MISMATCH`` (nothing written).
        """
        drafts = input.memories
        encoded = [
            (
                _dump(d.content, f"memories[{i}].content"),
                None if d.metadata is None else _dump(d.metadata, f"memories[{i}].metadata"),
            )
            for i, d in enumerate(drafts)
        ]
        ids = [uuid.uuid4().hex for _ in drafts]
        blobs = self._embed([(d.content, d.metadata) for d in drafts])
        call = mutation(self._ledger, "MEMORY.WRITE", input, options)
        ns = call.namespace
        op_id = call.operation_id
        with self._tx(options, write=True) as conn:
            replay = call.claim(conn)
            if replay is not None:  # already committed: the same result, nothing applied
                return [MemoryItem.model_validate(item) for item in replay]
            _check_keys(conn, [draft.key for draft in drafts], ns)
            latest, first = conn.execute(_NEXT).fetchone()
            now = timestamp_now(latest)
            # the next seqs, given explicitly: BEGIN IMMEDIATE keeps other writers out until
            # COMMIT, and AUTOINCREMENT's sqlite_sequence follows the largest one inserted
            seqs = list(range(int(first), int(first) + len(drafts)))
            conn.executemany(
                "INSERT INTO memories (seq, namespace, id, key, content, metadata, created_at,"
                " updated_at, operation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (seq, ns, memory_id, draft.key, content, metadata, now, now, op_id)
                    for seq, memory_id, draft, (content, metadata)
                    in zip(seqs, ids, drafts, encoded, strict=True)
                ],
            )  # fmt: skip
            self._index_many(conn, ns, [
                (seq, d.key, d.content, d.metadata) for seq, d in zip(seqs, drafts, strict=True)
            ])  # fmt: skip
            self._store_vectors(conn, seqs, blobs)
            items = [
                _trusted({
                    "id": memory_id, "key": draft.key,
                    "content": _stored_copy(draft.content, content),
                    "metadata": None if meta is None else _stored_copy(draft.metadata, meta),
                    "operation_id": op_id, "created_at": now, "updated_at": now,
                })
                for memory_id, draft, (content, meta) in zip(ids, drafts, encoded, strict=True)
            ]  # fmt: skip
            output = [to_wire(i) for i in items]
            call.record(conn, output, self._retention_s)
        if seqs and self._query.stale(seqs[-1]):  # the planner's statistics, after a doubling
            with self._tx(None, write=True) as conn:
                self._query.analyze(conn)
        return items

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates in one transaction (MEM-UPDATE-1): an omitted field keeps
        its value, ``metadata`` replaces the whole object, ``content: null`` is a value.

        Raises:
            MemoryError: ``NOT_FOUND`` (nothing applied) when an id does not exist;
                ``EMBEDDING_UNAVAILABLE`` / ``ErrorCode.EMBEDDING_MISMATCH`` (nothing applied).
        """
        entries = input.memories
        changes: list[tuple[list[str], list[Any]]] = []
        call = mutation(self._ledger, "MEMORY.UPDATE", input, options)
        ns = call.namespace
        for i, entry in enumerate(entries):
            sets, params = ["updated_at = ?", "operation_id = ?"], [call.operation_id]
            if entry.has_content:
                sets.append("content = ?")
                params.append(_dump(entry.content, f"memories[{i}].content"))
            if entry.has_metadata:
                sets.append("metadata = ?")
                params.append(_dump(entry.metadata, f"memories[{i}].metadata"))
            changes.append((sets, params))
        rows: list[_Row] = []
        fields = self._index_fields
        embedded = [] if fields else [entry for entry in entries if entry.has_content]
        blobs = iter(self._embed([(entry.content, None) for entry in embedded]) or ())
        with self._tx(options, write=True) as conn:
            replay = call.claim(conn)
            if replay is not None:  # already committed: no second update, same result
                return [MemoryItem.model_validate(item) for item in replay]
            now = timestamp_now()
            for i, (entry, (sets, params)) in enumerate(zip(entries, changes, strict=True)):
                found = conn.execute(
                    "SELECT seq, key, metadata FROM memories WHERE namespace = ? AND id = ?",
                    (ns, entry.id),
                )
                seq_row = found.fetchone()
                if seq_row is None:
                    raise MemoryError(ErrorCode.NOT_FOUND, f"memories[{i}]: no memory with this id")
                # checked under BEGIN IMMEDIATE: no writer can change the row until COMMIT
                held = entry.if_metadata
                if held is not None and not metadata_holds(_metadata(seq_row[2]), held):
                    raise condition_failed(i)
                sql = f"UPDATE memories SET {', '.join(sets)} WHERE seq = ?"
                conn.execute(sql, [now, *params, seq_row[0]])
                select = f"SELECT {_COLUMNS} FROM memories AS m WHERE m.seq = ?"
                rows.append(conn.execute(select, (seq_row[0],)).fetchone())
                if entry.has_content or (fields and entry.has_metadata):
                    # a metadata-only update keeps the vector unless indexFields read it
                    content, metadata = json.loads(rows[-1][3]), _metadata(rows[-1][4])
                    unindex_records(conn, [seq_row[0]])
                    self._index(conn, seq_row[0], ns, seq_row[1], content, metadata)
                    # with indexFields the text needs the stored metadata: embedded here
                    now_blobs = self._embed([(content, metadata)]) if fields else None
                    blob = now_blobs if fields else self._blob_list(blobs)
                    self._store_vectors(conn, [seq_row[0]], blob)
            items = [_item(row) for row in rows]
            output = [to_wire(i) for i in items]
            call.record(conn, output, self._retention_s)
        return items

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete existing ids in one transaction; returns only the ids deleted now, in
        request order; the keys of deleted records are free again (MEM-PY-12)."""
        ids = list(dict.fromkeys(input.ids))
        found: dict[str, int] = {}
        call = mutation(self._ledger, "MEMORY.DELETE", input, options)
        ns = call.namespace
        with self._tx(options, write=True) as conn:
            replay = call.claim(conn)
            if replay is not None:
                return MemoryDeleteOutput.model_validate(replay)
            for chunk in _chunks(ids):
                where = f"namespace = ? AND id IN ({_marks(chunk)})"
                sql = f"SELECT id, seq FROM memories WHERE {where}"
                found.update(conn.execute(sql, [ns, *chunk]).fetchall())
            seqs = list(found.values())
            unindex_records(conn, seqs)
            for chunk in _chunks(seqs):
                conn.execute(f"DELETE FROM memory_vectors WHERE seq IN ({_marks(chunk)})", chunk)
                conn.execute(f"DELETE FROM memories WHERE seq IN ({_marks(chunk)})", chunk)
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in found])
            call.record(conn, to_wire(output), self._retention_s)
        return output
