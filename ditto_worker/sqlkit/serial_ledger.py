"""The operation and execution ledgers of a database whose writers take turns.

When one write transaction runs at a time (SQLite's ``BEGIN IMMEDIATE``, an embedded
database behind the store's write lock), a claim is a look-up: no row yet means this
transaction may apply, and the row is inserted with the output before COMMIT; a copy of
a call in flight waits for the turn and then sees the row (:mod:`.ledger`).
:class:`SerialLedger` writes that with the driver's placeholder over two tables::

    operations (namespace, operation_id, node, digest, output, created_at)  kept
    executions (namespace, execution_id, node, output, created_at)          pruned

(``output`` JSON text, ``created_at`` seconds since the epoch; :func:`ledger_ddl`).
The SQLite store and the DuckDB example both keep their ledgers here.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ditto_worker.memory.operations import Operation
from ditto_worker.memory.retention import LedgerRetention
from ditto_worker.sqlkit.ledger import LedgerDialect, LedgerRow

__all__ = ["MUTATION_PRUNE_BATCH", "SerialLedger", "ledger_ddl"]

MUTATION_PRUNE_BATCH: Final = 500
"""At most this many expired execution ids are deleted by one mutation."""


def ledger_ddl(text: str = "TEXT", real: str = "REAL") -> tuple[str, ...]:
    """``CREATE TABLE IF NOT EXISTS`` of both ledgers and their pruning indexes (by
    ``created_at``), with the database's ``text`` and ``real`` column types."""
    return (
        f"""CREATE TABLE IF NOT EXISTS executions (
            namespace {text} NOT NULL DEFAULT '', execution_id {text} NOT NULL,
            node {text} NOT NULL, output {text} NOT NULL, created_at {real} NOT NULL,
            PRIMARY KEY (namespace, execution_id))""",
        "CREATE INDEX IF NOT EXISTS executions_created_at ON executions (created_at)",
        f"""CREATE TABLE IF NOT EXISTS operations (
            namespace {text} NOT NULL DEFAULT '', operation_id {text} NOT NULL,
            node {text} NOT NULL, digest {text} NOT NULL, output {text} NOT NULL,
            created_at {real} NOT NULL, PRIMARY KEY (namespace, operation_id))""",
        "CREATE INDEX IF NOT EXISTS operations_created_at ON operations (created_at)",
    )


def _dump(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"))


class SerialLedger(LedgerDialect):
    """The ledgers of one database with serialized writers (``conn``: a DB-API-like
    connection whose ``execute`` returns a cursor, in a write transaction).

    Args:
        store: the store's name in error messages.
        mark: the driver's positional placeholder.
        retention: the store's ledger retention (its clock stamps the rows; the
            defaults when ``None``).
    """

    def __init__(
        self, store: str, mark: str = "?", retention: LedgerRetention | None = None
    ) -> None:
        super().__init__(retention)
        self.store = store
        self._mark = mark

    def _run(self, conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
        return conn.execute(sql.replace("?", self._mark), params)

    def claim_operation(self, conn: Any, op: Operation, namespace: str) -> bool:  # noqa: D102
        return self.find_operation(conn, op.id, namespace) is None

    def find_operation(self, conn: Any, operation_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        row = self._run(
            conn,
            "SELECT node, digest, output, created_at FROM operations"
            " WHERE namespace = ? AND operation_id = ?",
            (namespace, operation_id),
        ).fetchone()
        return None if row is None else LedgerRow(row[0], row[1], json.loads(row[2]), row[3])

    def store_operation(self, conn: Any, op: Operation, namespace: str, output: Any) -> None:  # noqa: D102
        self._run(
            conn,
            "INSERT INTO operations (namespace, operation_id, node, digest, output, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (namespace, op.id, op.node, op.digest, _dump(output), self.retention.clock()),
        )

    def claim_execution(self, conn: Any, execution_id: str, node: str, namespace: str) -> bool:  # noqa: D102
        return self.find_execution(conn, execution_id, namespace) is None

    def find_execution(self, conn: Any, execution_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        row = self._run(
            conn,
            "SELECT node, output FROM executions WHERE namespace = ? AND execution_id = ?",
            (namespace, execution_id),
        ).fetchone()
        return None if row is None else LedgerRow(row[0], None, json.loads(row[1]))

    def store_execution(
        self, conn: Any, execution_id: str, node: str, namespace: str, output: Any,
        retention_s: float,
    ) -> None:  # fmt: skip  # noqa: D102
        now = self.retention.clock()
        self.prune(conn, "executions", now - retention_s, MUTATION_PRUNE_BATCH)
        self._run(
            conn,
            "INSERT INTO executions (namespace, execution_id, node, output, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (namespace, execution_id, node, _dump(output), now),
        )

    def prune(self, conn: Any, table: str, before: float, limit: int) -> int:  # noqa: D102
        assert table in ("operations", "executions")
        cur = self._run(
            conn,
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table}"
            " WHERE created_at < ? ORDER BY created_at LIMIT ?)",
            (before, limit),
        )
        return int(cur.rowcount)
