"""``DuckdbMemoryStore``: a SQL store built on the SQL store kit (:mod:`ditto_worker.sqlkit`).

What is DuckDB's own: its dialect (:mod:`.dialect`: JSON pointers, typed sort columns),
its driver and connection handling (:mod:`.db`) and its native search (:mod:`.search`).
What the kit gives: the filter compiler, one QUERY page with signed keyset cursors, the
exactly-once ledgers, the records' select list and JSON text, the capabilities.

Behaviour (declared in :attr:`DuckdbMemoryStore.capabilities`): batches commit
atomically; keys are unique per scope (``CONFLICT``); QUERY's default order is creation
order; cursors are signed with the database's secret; every operation is confined to the
call's scope; an operation id applies a mutation once (MEM-RUN-7); ``ifMetadata`` is
checked inside the write transaction (MEM-UPDATE-5); SEARCH ``keyword`` only (no
embedding provider).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Final

from ditto_example_duckdb.db import Database
from ditto_example_duckdb.dialect import DuckdbFilter, sort_columns, sort_values
from ditto_example_duckdb.search import KeywordSearch, index_record
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
from ditto_worker.memory.filters import timestamp_now
from ditto_worker.memory.operations import condition_failed, metadata_holds
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.memory.scope import namespace_of
from ditto_worker.sqlkit import (
    DEFAULT_RETENTION_S,
    Sql,
    compile_filter,
    mutation,
    page_output,
    page_query,
    page_request,
    sql_capabilities,
)
from ditto_worker.sqlkit.records import (
    COLUMNS,
    WIDTH,
    check_keys,
    chunks,
    dump,
    marks,
    row_item,
)
from ditto_worker.sqlkit.serial_ledger import SerialLedger

__all__ = ["DuckdbMemoryStore"]

_LEDGER: Final = SerialLedger("the DuckDB memory store")
_SELECT: Final = f"SELECT {COLUMNS} FROM memories AS m"


class DuckdbMemoryStore(KeywordSearch):
    """MemoryStore and keyword MemorySearchProvider over one DuckDB database.

    Args:
        path: the database file (created with its folder), or ``":memory:"``.
        retention_s: how long a committed execution id is remembered, seconds.

    Errors: ``MemoryError`` with ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
    ``INVALID_CURSOR``, ``CONFLICT``, ``NOT_FOUND``, ``CONDITION_FAILED``,
    ``INVALID_INPUT``, ``MEMORY_CANCELLED`` or ``MEMORY_BACKEND_ERROR`` (safe messages).
    """

    capabilities: StoreCapabilities = sql_capabilities(("keyword",), frozenset(), False)

    def __init__(self, path: str | Path, retention_s: float = DEFAULT_RETENTION_S) -> None:
        self._db = Database(path)
        self._retention_s = retention_s
        self._embedder = None
        self._hybrid_settings = None

    def _read(self, options: MemoryCallOptions | None) -> Any:
        return self._db.read(options)

    def _secret(self) -> str:
        return self._db.cursor_secret

    def close(self) -> None:
        """Close the database (idempotent)."""
        self._db.close()

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Records whose id or key was requested, each once, in creation order (MEM-GET)."""
        ns = namespace_of(options)
        rows: dict[int, Any] = {}
        with self._db.read(options) as cursor:
            for column, values in (("id", input.ids or ()), ("key", input.keys or ())):
                for chunk in chunks(list(dict.fromkeys(values))):
                    sql = f"{_SELECT} WHERE m.namespace = ? AND m.{column} IN ({marks(chunk)})"
                    rows.update(
                        (row[0], row) for row in cursor.execute(sql, [ns, *chunk]).fetchall()
                    )
        return [row_item(rows[seq]) for seq in sorted(rows)]

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput:
        """One page of at most ``limit`` records matching ``filter``, in ``orderBy`` order.

        Raises:
            MemoryError: ``UNSUPPORTED_FILTER``, ``UNSUPPORTED_ORDER_BY``,
                ``INVALID_CURSOR``.
        """
        ns = namespace_of(options)
        request = page_request(input, ns, self._secret)
        dialect = DuckdbFilter()
        where = compile_filter(dialect, request.node)
        source = Sql(f"memories AS m WHERE m.namespace = ? AND {where.text}", [ns, *where.params])
        columns = "m.seq AS seq" + COLUMNS.removeprefix("m.seq")
        sql = page_query(dialect, columns, sort_columns(request.terms), source, request)
        with self._db.read(options) as cursor:
            rows = cursor.execute(sql.text, sql.params).fetchall()
        return page_output(
            request, rows, self._secret, row_item, lambda row: sort_values(row[WIDTH:])
        )

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Create the drafts in one transaction; one full item per draft, in order.

        Raises:
            MemoryError: ``CONFLICT`` (nothing written) for a taken or repeated key;
                ``INVALID_INPUT`` for content or metadata that is not JSON.
        """
        drafts = input.memories
        encoded = [
            (dump(d.content, f"memories[{i}].content"),
             None if d.metadata is None else dump(d.metadata, f"memories[{i}].metadata"))
            for i, d in enumerate(drafts)
        ]  # fmt: skip
        keys = [draft.key for draft in drafts]
        call = mutation(_LEDGER, "MEMORY.WRITE", input, options)
        ns = call.namespace
        with self._db.write(options) as cursor:
            replay = call.claim(cursor)
            if replay is not None:  # already committed: the same result, nothing applied
                return [MemoryItem.model_validate(item) for item in replay]
            check_keys(cursor, keys, ns)
            latest = cursor.execute("SELECT MAX(created_at) FROM memories").fetchone()[0]
            now, op_id = timestamp_now(latest), call.operation_id
            items = []
            for draft, (content, metadata) in zip(drafts, encoded, strict=True):
                memory_id = uuid.uuid4().hex
                seq = cursor.execute(
                    "INSERT INTO memories (namespace, id, key, content, metadata, operation_id,"
                    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                    [ns, memory_id, draft.key, content, metadata, op_id, now, now],
                ).fetchone()[0]
                index_record(cursor, seq, ns, draft.key, draft.content)
                items.append(row_item((seq, memory_id, draft.key, content, metadata, op_id,
                                       now, now)))  # fmt: skip
            output = [to_wire(item) for item in items]
            call.record(cursor, output, self._retention_s)
        return items

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> list[MemoryItem]:
        """Apply partial updates in one transaction (MEM-UPDATE-1): an omitted field keeps
        its value, ``metadata`` replaces the whole object, ``content: null`` is a value.

        Raises:
            MemoryError: ``NOT_FOUND`` / ``CONDITION_FAILED`` (nothing applied).
        """
        entries = input.memories
        call = mutation(_LEDGER, "MEMORY.UPDATE", input, options)
        ns = call.namespace
        changes: list[tuple[str, list[Any]]] = []
        for i, entry in enumerate(entries):
            sets = ["updated_at = ?", "operation_id = ?"]
            params: list[Any] = [call.operation_id]
            if entry.has_content:
                sets.append("content = ?")
                params.append(dump(entry.content, f"memories[{i}].content"))
            if entry.has_metadata:
                sets.append("metadata = ?")
                params.append(dump(entry.metadata, f"memories[{i}].metadata"))
            changes.append((", ".join(sets), params))
        with self._db.write(options) as cursor:
            replay = call.claim(cursor)
            if replay is not None:  # already committed: no second update, same result
                return [MemoryItem.model_validate(item) for item in replay]
            now, items = timestamp_now(), []
            for i, (entry, (assignments, values)) in enumerate(zip(entries, changes, strict=True)):
                found = cursor.execute(
                    f"{_SELECT} WHERE m.namespace = ? AND m.id = ?", [ns, entry.id]
                ).fetchone()
                if found is None:
                    raise MemoryError(ErrorCode.NOT_FOUND, f"memories[{i}]: no memory with this id")
                held = entry.if_metadata
                if held is not None and not metadata_holds(row_item(found).metadata, held):
                    raise condition_failed(i)
                cursor.execute(
                    f"UPDATE memories SET {assignments} WHERE seq = ?", [now, *values, found[0]]
                )
                row = cursor.execute(f"{_SELECT} WHERE m.seq = ?", [found[0]]).fetchone()
                items.append(row_item(row))
                if entry.has_content:
                    index_record(cursor, found[0], ns, found[2], items[-1].content)
            output = [to_wire(item) for item in items]
            call.record(cursor, output, self._retention_s)
        return items

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput:
        """Delete existing ids in one transaction; returns only the ids deleted now, in
        request order; the keys of deleted records are free again (MEM-PY-12)."""
        ids = list(dict.fromkeys(input.ids))
        call = mutation(_LEDGER, "MEMORY.DELETE", input, options)
        ns = call.namespace
        found: dict[str, int] = {}
        with self._db.write(options) as cursor:
            replay = call.claim(cursor)
            if replay is not None:
                return MemoryDeleteOutput.model_validate(replay)
            for chunk in chunks(ids):
                sql = f"SELECT id, seq FROM memories WHERE namespace = ? AND id IN ({marks(chunk)})"
                found.update(cursor.execute(sql, [ns, *chunk]).fetchall())
            for chunk in chunks(list(found.values())):
                cursor.execute(f"DELETE FROM memory_terms WHERE seq IN ({marks(chunk)})", chunk)
                cursor.execute(f"DELETE FROM memories WHERE seq IN ({marks(chunk)})", chunk)
            output = MemoryDeleteOutput(deleted=[i for i in ids if i in found])
            call.record(cursor, to_wire(output), self._retention_s)
        return output
