"""The operation and execution ledgers on MySQL (:mod:`ditto_worker.sqlkit.ledger`).

A row's primary key ``ref`` is SHA-256 of ``namespace NUL id`` (a namespace is
``LONGTEXT``: too long for a key of its own). A claim is ``INSERT IGNORE``: a copy of a
call in flight waits on InnoDB's lock of the uncommitted row until the first transaction
ends. Expired execution ids are pruned :data:`PRUNE_BATCH` at a time; operation rows
are claimed at the retention's clock (UTC, :mod:`ditto_worker.memory.retention`) and
pruned the same way. Tables:
:data:`.executions.MIGRATION`, :data:`.operations.LEDGER`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Final

from ditto_worker.memory.operations import Operation
from ditto_worker.sqlkit import LedgerDialect, LedgerRow

__all__ = ["PRUNE_BATCH", "MysqlLedger"]

PRUNE_BATCH: Final = 500
"""At most this many expired execution ids are deleted by one mutation."""


def _ref(namespace: str, ident: str) -> bytes:
    return hashlib.sha256(f"{namespace}\x00{ident}".encode()).digest()


def _utc(epoch: float) -> datetime:
    """``epoch`` (s) as the naive UTC ``DATETIME(6)`` the ledgers keep."""
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def _dump(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"), ensure_ascii=False)


class MysqlLedger(LedgerDialect):
    """The ledgers of the connection's database (``conn``: a PyMySQL connection)."""

    store = "the MySQL memory store"

    def _claim(self, conn: Any, table: str, id_column: str, values: list[Any]) -> bool:
        """``values``: namespace, id, node (and digest and the time, operations)."""
        columns = ", ".join(["namespace", id_column, "node", "digest"][: len(values)])
        marks = ["%s"] * len(values)
        if len(values) < 5:  # an execution: the server's clock
            columns, marks = columns + ", created_at", [*marks, "UTC_TIMESTAMP(6)"]
        else:
            columns += ", created_at"
        with conn.cursor() as cur:
            return bool(
                cur.execute(
                    f"INSERT IGNORE INTO {table} (ref, {columns}) VALUES (%s, {', '.join(marks)})",
                    [_ref(values[0], values[1]), *values],
                )
            )

    def _find(self, conn: Any, table: str, ref: bytes) -> tuple[Any, ...] | None:
        columns = (
            "node, digest, output, created_at"
            if table == "operations"
            else "node, NULL, output, NULL"
        )
        with conn.cursor() as cur:
            cur.execute(f"SELECT {columns} FROM {table} WHERE ref = %s", [ref])
            row: tuple[Any, ...] | None = cur.fetchone()
        return row

    def _row(self, row: tuple[Any, ...] | None) -> LedgerRow | None:
        if row is None:
            return None
        output = None if row[2] is None else json.loads(row[2])
        claimed = None if row[3] is None else row[3].replace(tzinfo=UTC).timestamp()
        return LedgerRow(str(row[0]), None if row[1] is None else str(row[1]), output, claimed)

    def claim_operation(self, conn: Any, op: Operation, namespace: str) -> bool:  # noqa: D102
        values = [namespace, op.id, op.node, op.digest, _utc(self.retention.clock())]
        return self._claim(conn, "operations", "operation_id", values)

    def find_operation(self, conn: Any, operation_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        return self._row(self._find(conn, "operations", _ref(namespace, operation_id)))

    def store_operation(self, conn: Any, op: Operation, namespace: str, output: Any) -> None:  # noqa: D102
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE operations SET output = %s WHERE ref = %s",
                [_dump(output), _ref(namespace, op.id)],
            )

    def claim_execution(self, conn: Any, execution_id: str, node: str, namespace: str) -> bool:  # noqa: D102
        return self._claim(conn, "executions", "execution_id", [namespace, execution_id, node])

    def find_execution(self, conn: Any, execution_id: str, namespace: str) -> LedgerRow | None:  # noqa: D102
        return self._row(self._find(conn, "executions", _ref(namespace, execution_id)))

    def store_execution(
        self, conn: Any, execution_id: str, node: str, namespace: str, output: Any,
        retention_s: float,
    ) -> None:  # fmt: skip  # noqa: D102
        ref = _ref(namespace, execution_id)
        with conn.cursor() as cur:
            cur.execute("UPDATE executions SET output = %s WHERE ref = %s", [_dump(output), ref])
            cur.execute(
                "DELETE FROM executions WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL %s "
                "MICROSECOND AND output IS NOT NULL AND ref <> %s ORDER BY created_at LIMIT %s",
                [int(retention_s * 1_000_000), ref, PRUNE_BATCH],
            )

    def prune(self, conn: Any, table: str, before: float, limit: int) -> int:  # noqa: D102
        assert table in ("operations", "executions")
        with conn.cursor() as cur:
            deleted = cur.execute(
                f"DELETE FROM {table} WHERE created_at < %s AND output IS NOT NULL "
                "ORDER BY created_at LIMIT %s",
                [_utc(before), limit],
            )
        return int(deleted)
