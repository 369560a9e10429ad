"""``MysqlMemoryStore``: MemoryStore + native MemorySearchProvider on MySQL / MariaDB.

PyMySQL behind SQLAlchemy's ``QueuePool``, built lazily in the process that uses it (a
forked worker builds its own). One transaction per batch; writers queue on the
``sequence`` settings row, so ``seq`` and ``createdAt`` follow commit order (MEM-PY-6).
Rules owned here: MEM-GET-2/5, MEM-QUERY-2/3/4, MEM-WRITE-2/3, MEM-UPDATE-1/2/4,
MEM-DELETE-2/3, MEM-SEARCH-1/2/3, MEM-PY-5/6/11/12, MEM-RUN-2, MEM-ERR-4; with an
embedding provider also MEM-WRITE-4, MEM-SEARCH-6, MEM-RET-4. WRITE/UPDATE/DELETE are
exactly-once per execution id (:mod:`.executions`) and per operation id (MEM-RUN-7,
:mod:`.operations`); UPDATE's ``ifMetadata`` is checked on the rows locked ``FOR UPDATE``
(MEM-UPDATE-5). Tested on MariaDB 10.11.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from ditto_plugin_mysql import keywords
from ditto_plugin_mysql import vectors as vec
from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.lifecycle import Lifecycle
from ditto_plugin_mysql.rows import (
    COLUMNS,
    WIDTH,
    Row,
    check_batch_keys,
    check_targets,
    chunks,
    dump,
    item,
    marks,
    sort_value,
)
from ditto_plugin_mysql.search import KEYWORD_CAPABILITIES, VECTOR_CAPABILITIES, SearchMixin
from ditto_plugin_mysql.settings import lock_sequence, set_sequence
from ditto_plugin_mysql.sql import MysqlFilter, key_hash, sort_columns
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    MemoryWriteInput,
    to_wire,
)
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.filters import SortValue, timestamp_now
from ditto_worker.memory.ports import MemoryCallOptions
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

__all__ = ["MysqlMemoryStore"]


def _sort_values(row: Row) -> tuple[SortValue, ...]:
    """The cursor's ``(rank, value)`` per sort term (four columns each after the record's)."""
    return tuple(sort_value(row, i) for i in range((len(row) - WIDTH) // 4))


class MysqlMemoryStore(Lifecycle, SearchMixin):
    """MemoryStore and keyword MemorySearchProvider over one MySQL/MariaDB database.

    Args:
        url: ``mysql://user:password@host:port/database`` (from
            ``DITTO_WORKER_MEMORY_MYSQL_URL`` when built by :func:`create_store`,
            MEM-CONF-5); never logged or shown.
        **settings: keyword settings, each optional:

            - ``database``: the database holding the tables (default: the URL's;
              ``[A-Za-z_][A-Za-z0-9_]{0,63}``); created by the migration if missing.
            - ``pool_max_size``: connections this process's pool keeps and allows.
            - ``connect_timeout_s``: seconds to wait for a new connection.
            - ``pool_timeout_s``: seconds a call waits for a free pooled connection.
            - ``auto_migrate``: run :meth:`migrate` on first use (else require the latest
              version).
            - ``embedder``: an embedding provider: WRITE and content UPDATE embed and store
              the vector in the record's transaction; SEARCH gains ``vector`` and ``hybrid``.
            - ``hybrid``: ``RetrievalConfig`` (or its mapping) of the ``hybrid`` strategy.
            - ``execution_retention_s``: how long a committed mutation's execution id is
              kept.
            - ``index_fields``: metadata fields indexed with the content (``indexFields``).
            - ``query_fields``: metadata fields QUERY filters on (``queryFields``), given
              indexed generated columns at open (:mod:`.query_index`); results unchanged;
              the whole declaration (``[]`` drops them all; ``None``: left alone).

    Behaviour (declared in :attr:`capabilities`): atomic batches, unique keys per scope
    (``CONFLICT``, nothing written), ``NOT_FOUND`` for UPDATE of a missing id, keys freed
    by DELETE, creation order by default, signed keyset cursors, typed filters
    (:mod:`.sql`), a cancel token or the deadline stops the running statement with
    ``KILL QUERY`` (``MEMORY_CANCELLED`` / ``MEMORY_TIMEOUT``). SEARCH ``keyword``: BM25
    over the scope's terms (:mod:`.keywords`); with an embedder ``vector`` (exact cosine,
    :mod:`.vectors`) and ``hybrid``.

    Raises:
        ValueError: a bad database name or URL (at construction).
    """

    capabilities: StoreCapabilities = KEYWORD_CAPABILITIES

    def __init__(self, url: str, **settings: Any) -> None:
        super().__init__(url, **settings)
        if self._embedder is not None:
            self.capabilities = VECTOR_CAPABILITIES

    def __repr__(self) -> str:
        return f"MysqlMemoryStore(database={self.database!r})"

    # --- reads ----------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """The namespaces holding at least one memory, sorted (``""``: the unscoped one;
        :attr:`ditto_worker.scope.Scope.namespace` otherwise). An operator's listing for
        ``ditto-worker export --all-scopes``, never reached by a node call."""
        with self._read(None) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT s.namespace FROM scopes AS s WHERE EXISTS "
                "(SELECT 1 FROM memories AS m WHERE m.scope = s.id)"
            )
            return sorted(str(row[0]) for row in cur.fetchall())

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ids, keys = list(dict.fromkeys(input.ids or ())), list(dict.fromkeys(input.keys or ()))
        with self._read(options) as conn:
            scope = self._scope_id(conn, namespace_of(options), create=False)
            if scope is None or not (ids or keys):
                return []
            parts = []
            if ids:
                parts.append(f"m.id IN ({marks(ids)})")
            if keys:
                parts.append(f"m.key_hash IN ({marks(keys)})")
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT {COLUMNS} FROM memories AS m WHERE m.scope = %s AND "
                    f"({' OR '.join(parts)}) ORDER BY m.seq",
                    [scope, *ids, *[key_hash(k) for k in keys]],
                )
                rows = cur.fetchall()
        wanted_ids, wanted_keys = set(ids), set(keys)  # exact: the collation pads spaces
        return [item(r) for r in rows if r[1] in wanted_ids or r[2] in wanted_keys]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter`` in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
                ``INVALID_CURSOR`` (malformed, or made for another filter/orderBy).
        """
        ns = namespace_of(options)
        request = page_request(input, ns, self._cursor_secret)
        dialect = MysqlFilter(self._declared)
        where = compile_filter(dialect, request.node)
        columns = sort_columns(request.terms)
        with self._read(options) as conn:
            scope = self._scope_id(conn, ns, create=False)
            if scope is None:
                return MemoryQueryOutput(items=[], next_cursor=None)
            source = Sql(f"memories AS m WHERE m.scope = %s AND {where.text}",
                         [scope, *where.params])  # fmt: skip
            sql = page_query(dialect, COLUMNS, columns, source, request)
            with conn.cursor() as cur:
                cur.execute(sql.text, sql.params)
                rows = cur.fetchall()
        return page_output(request, rows, self._cursor_secret, item, _sort_values)

    # --- mutations ------------------------------------------------------------------------

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts in one transaction; one full item per draft, in order.

        Raises:
            MemoryError: ``CONFLICT`` (nothing written) for a taken or repeated key;
                ``INVALID_INPUT`` for content/metadata that is not JSON.
        """
        drafts = input.memories
        keys = [d.key for d in drafts]
        check_batch_keys(keys)
        contents = [dump(d.content, f"memories[{i}].content") for i, d in enumerate(drafts)]
        metas = [
            None if d.metadata is None else dump(d.metadata, f"memories[{i}].metadata")
            for i, d in enumerate(drafts)
        ]
        fields = self._index_fields
        counts = [
            keywords.record_terms(keyword_text(d.content, d.key, d.metadata, fields))
            for d in drafts
        ]
        ids = [uuid.uuid4().hex for _ in drafts]
        blobs = self._embed([(d.content, d.metadata) for d in drafts])
        call = mutation(self._ledger, "MEMORY.WRITE", input, options)
        ns = call.namespace
        op_id = call.operation_id
        with self._write(options) as conn:
            replay = call.claim(conn)
            if replay is not None:  # already committed: the same result, nothing applied
                return [MemoryItem.model_validate(i) for i in replay]
            last = lock_sequence(conn)
            scope = self._scope_id(conn, ns, create=True) or 0
            self._check_taken(conn, scope, keys)
            now = timestamp_now(self._last_created(conn))
            seqs = list(range(last + 1, last + 1 + len(drafts)))
            sizes = [sum(c.values()) for c in counts]
            rows = [
                (seq, scope, i, None if k is None else key_hash(k), k, c, m, now, now, n, op_id)
                for seq, i, k, c, m, n in zip(seqs, ids, keys, contents, metas, sizes, strict=True)
            ]
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO memories (seq, scope, id, key_hash, `key`, content, metadata, "
                    "created_at, updated_at, terms, operation_id) VALUES "
                    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )
            postings = [r for s, c in zip(seqs, counts, strict=True)
                        for r in keywords.index_rows(scope, s, c)]  # fmt: skip
            keywords.insert_terms(conn, postings)
            keywords.adjust(conn, scope, [(0, n) for n in sizes])
            self._store_vectors(conn, scope, seqs, blobs)
            set_sequence(conn, last + len(drafts))
            items = [
                MemoryItem(id=i, key=k, content=json.loads(c), created_at=now, updated_at=now,
                           metadata=None if m is None else json.loads(m), operation_id=op_id)
                for i, k, c, m in zip(ids, keys, contents, metas, strict=True)
            ]  # fmt: skip
            call.record(conn, [to_wire(i) for i in items], self._retention_s)
        return items

    def _locked_rows(self, conn: Conn, scope: int, ids: Sequence[str]) -> dict[str, Row]:
        """``id -> (seq, id, key, content, metadata, operation_id, created_at, updated_at,
        terms)`` of the scope's
        records with these ids, locked until the transaction ends (exact ids)."""
        found: dict[str, Row] = {}
        for chunk in chunks(list(dict.fromkeys(ids))):
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT {COLUMNS}, m.terms FROM memories AS m WHERE m.scope = %s "
                    f"AND m.id IN ({marks(chunk)}) FOR UPDATE",
                    [scope, *chunk],
                )
                found.update((row[1], row) for row in cur.fetchall() if row[1] in chunk)
        return found

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates in one transaction (MEM-UPDATE-1): an omitted field keeps
        its value, ``metadata`` replaces the whole object, ``content: null`` is a value.

        An entry's ``ifMetadata`` is checked against the row locked ``FOR UPDATE`` (no
        other writer can change it before COMMIT), so the check and the write are atomic
        (MEM-UPDATE-5).

        Raises:
            MemoryError: ``NOT_FOUND`` (nothing applied) when an id does not exist;
                ``CONFLICT`` (nothing applied) when an ``ifMetadata`` does not hold;
                ``INVALID_INPUT`` for content/metadata that is not JSON.
        """
        for index, entry in enumerate(input.memories):  # checked before any I/O
            if entry.has_content:
                dump(entry.content, f"memories[{index}].content")
            if entry.has_metadata:
                dump(entry.metadata, f"memories[{index}].metadata")
        call = mutation(self._ledger, "MEMORY.UPDATE", input, options)
        ns = call.namespace
        self._check_identity()
        with self._write(options) as conn:
            replay = call.claim(conn)
            if replay is not None:  # already committed: no second update, same result
                return [MemoryItem.model_validate(i) for i in replay]
            scope = self._scope_id(conn, ns, create=False)
            found = {} if scope is None else self._locked_rows(conn, scope, [
                e.id for e in input.memories])  # fmt: skip
            check_targets(input.memories, found)
            now = timestamp_now()
            op_id = call.operation_id
            items = [
                self._apply(conn, scope or 0, found, entry, now, op_id) for entry in input.memories
            ]
            call.record(conn, [to_wire(i) for i in items], self._retention_s)
        return items

    def _apply(
        self, conn: Conn, scope: int, found: dict[str, Row], entry: MemoryUpdateEntry, now: str,
        op_id: str | None,
    ) -> MemoryItem:  # fmt: skip
        """One entry of an UPDATE: the row, its terms and its vector (``found`` follows);
        the row now names ``op_id`` (``None`` clears an earlier operation's id)."""
        seq, memory_id, key, content_text, meta_text, _, created, _, old_terms = found[entry.id]
        content = entry.content if entry.has_content else json.loads(content_text)
        metadata = entry.metadata if entry.has_metadata else (
            None if meta_text is None else json.loads(meta_text))  # fmt: skip
        fields = self._index_fields
        reindex = entry.has_content or bool(fields and entry.has_metadata)
        counts = keywords.record_terms(keyword_text(content, key, metadata, fields))
        size = sum(counts.values()) if reindex else int(old_terms)
        content_json = dump(content, "content")
        meta_json = None if metadata is None else dump(metadata, "metadata")
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE memories SET updated_at = %s, content = %s, metadata = %s, terms = %s, "
                "operation_id = %s WHERE seq = %s",
                [now, content_json, meta_json, size, op_id, seq],
            )
        if reindex:
            keywords.unindex(conn, [int(seq)])
            keywords.insert_terms(conn, keywords.index_rows(scope, int(seq), counts))
            keywords.adjust(conn, scope, [(int(old_terms), size)])
            self._store_vectors(conn, scope, [int(seq)], self._embed([(content, metadata)]))
        found[entry.id] = (seq, memory_id, key, content_json, meta_json, op_id, created, now, size)
        return MemoryItem(id=memory_id, key=key, content=content, metadata=metadata,
                          operation_id=op_id, created_at=created, updated_at=now)  # fmt: skip

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete existing ids in one transaction; returns only the ids deleted now, in
        request order; their keys are free again (MEM-PY-12)."""
        ids = list(dict.fromkeys(input.ids))
        call = mutation(self._ledger, "MEMORY.DELETE", input, options)
        ns = call.namespace
        with self._write(options) as conn:
            replay = call.claim(conn)
            if replay is not None:
                return MemoryDeleteOutput.model_validate(replay)
            scope = self._scope_id(conn, ns, create=False)
            found = {} if scope is None or not ids else self._locked_rows(conn, scope, ids)
            seqs = [int(row[0]) for row in found.values()]
            table = vec.live_table(conn, lock=True)[0] if seqs else ""  # a reindex may switch
            with conn.cursor() as cur:
                for chunk in chunks(seqs):
                    cur.execute(f"DELETE FROM memories WHERE seq IN ({marks(chunk)})", chunk)
                    cur.execute(f"DELETE FROM {table} WHERE seq IN ({marks(chunk)})", chunk)
            keywords.unindex(conn, seqs)
            if scope is not None:
                keywords.adjust(conn, scope, [(int(row[WIDTH]), 0) for row in found.values()])
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in found])
            call.record(conn, to_wire(output), self._retention_s)
        return output
