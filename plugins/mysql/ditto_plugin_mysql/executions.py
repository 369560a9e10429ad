"""Exactly-once effects for WRITE, UPDATE and DELETE on MySQL, as on PostgreSQL (issue 7;
seed: "no duplicated write, no double version bump" after a crash and retry).

A mutation's execution id (``MemoryCallOptions.execution_id``: the Celery task id on the
fleet, a fresh uuid per direct SDK call unless the caller passes one) is **claimed first**,
as the mutation transaction's first statement: a row of ``executions`` whose primary key
``ref`` is SHA-256 of ``namespace NUL execution_id`` (``INSERT IGNORE``). The mutation then
applies its effect and, before COMMIT, stores its output in that row. Effect and record
commit together or not at all.

* First run: applied, its output returned and remembered.
* A re-sent or redelivered call whose first run **committed**: nothing applied, the
  committed output returned unchanged.
* A copy running **while the first is in flight** waits on InnoDB's lock of the
  uncommitted row (bounded by the copy's deadline and cancel token): if the first
  commits, the copy returns its output; if it rolls back, the copy claims the id.
* A failed mutation records nothing; the same id used by **another node** is ``CONFLICT``.

Rows older than ``executionRetentionS`` (24 h) are pruned by later mutations (at most
:data:`PRUNE_BATCH` per mutation); an id replayed after that is treated as new.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from ditto_plugin_mysql.db import Conn
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = ["DEFAULT_RETENTION_S", "MIGRATION", "PRUNE_BATCH", "claim_replay", "record"]

DEFAULT_RETENTION_S: Final = 24 * 3600.0
"""How long a committed execution id is remembered, seconds."""

PRUNE_BATCH: Final = 500
"""At most this many expired rows are deleted by one mutation."""

MIGRATION: Final = """CREATE TABLE IF NOT EXISTS executions (
    ref BINARY(32) NOT NULL PRIMARY KEY,
    namespace LONGTEXT NOT NULL,
    execution_id LONGTEXT NOT NULL,
    node VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    output LONGTEXT NULL,
    created_at DATETIME(6) NOT NULL,
    KEY executions_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
"""The ``executions`` table (migration 1)."""

_CLAIM_ATTEMPTS: Final = 3


def _ref(namespace: str, execution_id: str) -> bytes:
    return hashlib.sha256(f"{namespace}\x00{execution_id}".encode()).digest()


def claim_replay(conn: Conn, execution_id: str | None, node: str, namespace: str = "") -> Any:
    """Claim ``execution_id`` for ``node`` in the current transaction, or find it done.

    Returns:
        ``None`` when this transaction now holds the claim (apply the mutation, then
        :func:`record` its output before COMMIT); otherwise the committed output (JSON
        data) of the earlier run — apply nothing.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node.
    """
    if not execution_id:
        return None
    ref = _ref(namespace, execution_id)
    with conn.cursor() as cur:
        for _ in range(_CLAIM_ATTEMPTS):
            claimed = cur.execute(
                "INSERT IGNORE INTO executions (ref, namespace, execution_id, node, created_at) "
                "VALUES (%s, %s, %s, %s, UTC_TIMESTAMP(6))",
                [ref, namespace, execution_id, node],
            )
            if claimed:
                return None
            cur.execute("SELECT node, output FROM executions WHERE ref = %s", [ref])
            row = cur.fetchone()
            if row is None:  # pruned in between: claim again
                continue
            if row[0] != node:
                raise MemoryError(
                    ErrorCode.CONFLICT,
                    f"this execution id was already used by {row[0]}; nothing was applied",
                )
            if row[1] is None:
                break
            return json.loads(row[1])
    raise MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "the MySQL memory store could not claim the execution id; nothing was applied",
    )


def record(
    conn: Conn, execution_id: str | None, output: Any, retention_s: float, namespace: str = ""
) -> None:
    """Store ``output`` in this transaction's claim and prune expired rows."""
    if not execution_id:
        return
    ref = _ref(namespace, execution_id)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE executions SET output = %s WHERE ref = %s",
            [json.dumps(output, separators=(",", ":"), ensure_ascii=False), ref],
        )
        cur.execute(
            "DELETE FROM executions WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL %s "
            "MICROSECOND AND output IS NOT NULL AND ref <> %s ORDER BY created_at LIMIT %s",
            [int(retention_s * 1_000_000), ref, PRUNE_BATCH],
        )
