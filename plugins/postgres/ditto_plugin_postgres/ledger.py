"""The operation and execution ledgers on PostgreSQL (:mod:`ditto_worker.sqlkit.ledger`).

A claim is ``INSERT … ON CONFLICT DO NOTHING RETURNING 1`` on the ledger's primary key
``(namespace, id)``: a copy of a call in flight blocks on the unique index until the
first transaction ends. Under READ COMMITTED the ``SELECT`` after a failed claim sees the
row that made it fail. ``output`` is ``json`` (not ``jsonb``): a replay returns the text
as it was written. Expired execution ids are pruned :data:`PRUNE_BATCH` at a time, rows
locked by others skipped; operation rows are claimed at the retention's clock
(:mod:`ditto_worker.memory.retention`) and pruned the same way. Tables:
:data:`.executions.MIGRATION`, :data:`.operations.MIGRATION`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ditto_worker.memory.operations import Operation
from ditto_worker.memory.retention import LedgerRetention
from ditto_worker.sqlkit import LedgerDialect, LedgerRow

__all__ = ["PRUNE_BATCH", "PostgresLedger"]

PRUNE_BATCH: Final = 500
"""At most this many expired execution ids are deleted by one mutation."""


def _dump(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"))


class PostgresLedger(LedgerDialect):
    """The ledgers of one schema (``schema``: its quoted name)."""

    store = "the PostgreSQL memory store"

    def __init__(self, schema: str, retention: LedgerRetention | None = None) -> None:
        super().__init__(retention)
        self.schema = schema

    def _claim(self, conn: Any, table: str, id_column: str, values: list[Any]) -> bool:
        """``values``: namespace, id, node (and digest and the time, operations)."""
        columns = ", ".join(["namespace", id_column, "node", "digest"][: len(values)])
        marks = ["%s"] * len(values)
        if len(values) == 5:  # an operation: claimed at the retention's clock
            columns, marks[-1] = columns + ", created_at", "to_timestamp(%s)"
        claimed = conn.execute(
            f"INSERT INTO {self.schema}.{table} ({columns}) VALUES ({', '.join(marks)}) "
            f"ON CONFLICT (namespace, {id_column}) DO NOTHING RETURNING 1",
            values,
        ).fetchone()
        return claimed is not None

    def claim_operation(self, conn: Any, op: Operation, namespace: str) -> bool:  # noqa: D102
        values = [namespace, op.id, op.node, op.digest, self.retention.clock()]
        return self._claim(conn, "operations", "operation_id", values)

    def find_operation(self, conn: Any, operation_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        row = conn.execute(
            "SELECT node, digest, output, extract(epoch FROM created_at)::float8 "
            f"FROM {self.schema}.operations WHERE namespace = %s AND operation_id = %s",
            [namespace, operation_id],
        ).fetchone()
        return None if row is None else LedgerRow(row[0], row[1], row[2], row[3])

    def store_operation(self, conn: Any, op: Operation, namespace: str, output: Any) -> None:  # noqa: D102
        conn.execute(
            f"UPDATE {self.schema}.operations SET output = %s::json "
            "WHERE namespace = %s AND operation_id = %s",
            [_dump(output), namespace, op.id],
        )

    def claim_execution(self, conn: Any, execution_id: str, node: str, namespace: str) -> bool:  # noqa: D102
        return self._claim(conn, "executions", "execution_id", [namespace, execution_id, node])

    def find_execution(self, conn: Any, execution_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        row = conn.execute(
            f"SELECT node, output FROM {self.schema}.executions "
            "WHERE namespace = %s AND execution_id = %s",
            [namespace, execution_id],
        ).fetchone()
        return None if row is None else LedgerRow(row[0], None, row[1])

    def store_execution(
        self, conn: Any, execution_id: str, node: str, namespace: str, output: Any,
        retention_s: float,
    ) -> None:  # fmt: skip  # noqa: D102
        table = f"{self.schema}.executions"
        conn.execute(
            f"UPDATE {table} SET output = %s::json WHERE namespace = %s AND execution_id = %s",
            [_dump(output), namespace, execution_id],
        )
        conn.execute(
            f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table} WHERE created_at < "
            "clock_timestamp() - make_interval(secs => %s) AND output IS NOT NULL "
            "AND NOT (namespace = %s AND execution_id = %s) "
            "ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED)",
            [retention_s, namespace, execution_id, PRUNE_BATCH],
        )

    def prune(self, conn: Any, table: str, before: float, limit: int) -> int:  # noqa: D102
        assert table in ("operations", "executions")
        name = f"{self.schema}.{table}"
        cur = conn.execute(
            f"DELETE FROM {name} WHERE ctid IN (SELECT ctid FROM {name} WHERE created_at < "
            "to_timestamp(%s) AND output IS NOT NULL ORDER BY created_at LIMIT %s "
            "FOR UPDATE SKIP LOCKED)",
            [before, limit],
        )
        return int(cur.rowcount)
