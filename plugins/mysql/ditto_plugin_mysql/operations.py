"""Operation ids on MySQL (SPEC.md MEM-RUN-7; :mod:`ditto_worker.memory.operations`), as
on PostgreSQL.

Migration 2 adds ``memories.operation_id`` (the id of the mutation that produced a
record's current state; ``NULL`` for records written before it) and the ledger
``operations(ref, namespace, operation_id, node, digest, output, created_at)`` whose
primary key ``ref`` is SHA-256 of ``namespace NUL operation id`` (a namespace is
``LONGTEXT``: too long for a key of its own).

A mutation with an operation id **claims it first**, as its transaction's first statement
(``INSERT IGNORE``), like the execution id (:mod:`ditto_plugin_mysql.executions`): a
replay whose first run committed finds the row, checks node and input digest
(``CONFLICT`` on a mismatch) and returns the committed output, applying nothing; a copy
running while the first is in flight waits on InnoDB's lock of the uncommitted row until
the first ends (commit: it returns that output; rollback: it claims the id and runs). A
failed mutation rolls its claim back: the id may be used again. Rows are kept (no
expiry): a task may resume days later.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.executions import claim_replay, record
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import Operation, check_replay

__all__ = ["LEDGER", "claim_call", "claim_operation", "record_call", "record_operation"]

LEDGER: Final = """CREATE TABLE IF NOT EXISTS operations (
    ref BINARY(32) NOT NULL PRIMARY KEY,
    namespace LONGTEXT NOT NULL,
    operation_id VARCHAR(256) NOT NULL,
    node VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    digest CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    output LONGTEXT NULL,
    created_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
"""The ``operations`` table (migration 2)."""

COLUMN: Final = "VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
"""The type of ``memories.operation_id`` (migration 2; at most 256 characters,
:data:`ditto_worker.operation.MAX_OPERATION_ID`)."""

_CLAIM_ATTEMPTS: Final = 3


def _ref(namespace: str, operation_id: str) -> bytes:
    return hashlib.sha256(f"{namespace}\x00{operation_id}".encode()).digest()


def claim_operation(conn: Conn, op: Operation | None, namespace: str) -> Any | None:
    """Claim ``op`` in the current transaction, or find it done.

    Returns:
        ``None`` when there is no operation id or this transaction now holds the claim
        (apply the mutation, then :func:`record_operation`); otherwise the committed
        output (JSON data) of the earlier run — apply nothing.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node or input;
            ``MEMORY_BACKEND_ERROR`` when the claim could not be made (nothing applied).
        pymysql.MySQLError: a driver error (the caller's transaction maps it).
    """
    if op is None:
        return None
    ref = _ref(namespace, op.id)
    with conn.cursor() as cur:
        for _ in range(_CLAIM_ATTEMPTS):
            claimed = cur.execute(
                "INSERT IGNORE INTO operations (ref, namespace, operation_id, node, digest, "
                "created_at) VALUES (%s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
                [ref, namespace, op.id, op.node, op.digest],
            )
            if claimed:
                return None
            cur.execute("SELECT node, digest, output FROM operations WHERE ref = %s", [ref])
            row = cur.fetchone()
            if row is None:  # deleted in between: claim again
                continue
            check_replay(op, str(row[0]), str(row[1]))
            if row[2] is not None:
                return json.loads(row[2])
            break
    raise MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "the MySQL memory store could not claim the operation id; nothing was applied",
    )


def record_operation(conn: Conn, op: Operation | None, output: Any, namespace: str) -> None:
    """Store ``output`` (JSON data) in this transaction's claim of ``op``."""
    if op is None:
        return
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE operations SET output = %s WHERE ref = %s",
            [json.dumps(output, separators=(",", ":"), ensure_ascii=False),
             _ref(namespace, op.id)],
        )  # fmt: skip


def claim_call(
    conn: Conn, node: str, op: Operation | None, execution_id: str | None, namespace: str
) -> Any | None:
    """Claim the call's operation id, then its execution id (first statements of the
    mutation's transaction).

    Returns:
        The committed output of an earlier run of either id, or ``None`` when this
        transaction holds both claims (apply, then :func:`record_call`).

    Raises:
        MemoryError: ``CONFLICT`` when an id was used by another node (or the operation
            id with another input).
    """
    replay = claim_operation(conn, op, namespace)
    if replay is not None:
        return replay
    replay = claim_replay(conn, execution_id, node, namespace)
    if replay is not None:  # the same attempt already ran: its output answers op too
        record_operation(conn, op, replay, namespace)
    return replay


def record_call(
    conn: Conn,
    op: Operation | None,
    execution_id: str | None,
    output: Any,
    retention_s: float,
    namespace: str,
) -> None:
    """Store the mutation's ``output`` under both claims of :func:`claim_call`."""
    record(conn, execution_id, output, retention_s, namespace)
    record_operation(conn, op, output, namespace)
