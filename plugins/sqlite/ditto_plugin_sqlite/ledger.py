"""The operation and execution ledgers on SQLite (:mod:`ditto_worker.sqlkit.ledger`).

Writers are serialized by ``BEGIN IMMEDIATE``, so a claim is a look-up (no row yet: this
transaction may apply) and the row is inserted with the output before COMMIT; a copy of
a call in flight waits for the write lock and then sees the row. ``operations`` maps
``(namespace, operation id)`` to the node, the input digest and the output (claimed at
the retention's clock; expired after ``operationRetentionS``, pruned after twice that:
:mod:`ditto_worker.memory.retention`); ``executions`` maps ``(namespace, execution id)``
to the node and the output (pruned after the retention, 24 h by default). Both are pruned
by ``created_at``, :data:`PRUNE_BATCH` rows at most per mutation.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ditto_worker.memory.operations import Operation
from ditto_worker.sqlkit import LedgerDialect, LedgerRow

__all__ = ["EXECUTIONS_DDL", "OPERATIONS_DDL", "PRUNE_BATCH", "SqliteLedger"]

PRUNE_BATCH: Final = 500
"""At most this many expired execution ids are deleted by one mutation."""

EXECUTIONS_DDL: Final = (
    """CREATE TABLE IF NOT EXISTS executions (
        namespace TEXT NOT NULL DEFAULT '',
        execution_id TEXT NOT NULL,
        node TEXT NOT NULL,
        output TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (namespace, execution_id)
    )""",
    "CREATE INDEX IF NOT EXISTS executions_created_at ON executions (created_at)",
)
"""The ``executions`` table and its index (:mod:`ditto_plugin_sqlite.db`)."""

OPERATIONS_DDL: Final = (
    """CREATE TABLE IF NOT EXISTS operations (
        namespace TEXT NOT NULL DEFAULT '',
        operation_id TEXT NOT NULL,
        node TEXT NOT NULL,
        digest TEXT NOT NULL,
        output TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (namespace, operation_id)
    )""",
    "CREATE INDEX IF NOT EXISTS operations_created_at ON operations (created_at)",
)
"""The ``operations`` table and its index (:mod:`ditto_plugin_sqlite.db`)."""


def _dump(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"))


class SqliteLedger(LedgerDialect):
    """The ledgers of one SQLite file (``conn``: its connection, in a write transaction)."""

    store = "the SQLite memory store"

    def claim_operation(self, conn: Any, op: Operation, namespace: str) -> bool:  # noqa: D102
        return self.find_operation(conn, op.id, namespace) is None

    def find_operation(self, conn: Any, operation_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        row = conn.execute(
            "SELECT node, digest, output, created_at FROM operations"
            " WHERE namespace = ? AND operation_id = ?",
            (namespace, operation_id),
        ).fetchone()
        return None if row is None else LedgerRow(row[0], row[1], json.loads(row[2]), row[3])

    def store_operation(self, conn: Any, op: Operation, namespace: str, output: Any) -> None:  # noqa: D102
        conn.execute(
            "INSERT INTO operations (namespace, operation_id, node, digest, output, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (namespace, op.id, op.node, op.digest, _dump(output), self.retention.clock()),
        )

    def claim_execution(self, conn: Any, execution_id: str, node: str, namespace: str) -> bool:  # noqa: D102
        return self.find_execution(conn, execution_id, namespace) is None

    def find_execution(self, conn: Any, execution_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        row = conn.execute(
            "SELECT node, output FROM executions WHERE namespace = ? AND execution_id = ?",
            (namespace, execution_id),
        ).fetchone()
        return None if row is None else LedgerRow(row[0], None, json.loads(row[1]))

    def store_execution(
        self, conn: Any, execution_id: str, node: str, namespace: str, output: Any,
        retention_s: float,
    ) -> None:  # fmt: skip  # noqa: D102
        now = self.retention.clock()
        self.prune(conn, "executions", now - retention_s, PRUNE_BATCH)
        conn.execute(
            "INSERT INTO executions (namespace, execution_id, node, output, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (namespace, execution_id, node, _dump(output), now),
        )

    def prune(self, conn: Any, table: str, before: float, limit: int) -> int:  # noqa: D102
        assert table in ("operations", "executions")
        cur = conn.execute(
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table}"
            " WHERE created_at < ? ORDER BY created_at LIMIT ?)",
            (before, limit),
        )
        return int(cur.rowcount)
