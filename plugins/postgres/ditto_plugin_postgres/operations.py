"""Operation ids on PostgreSQL (SPEC.md MEM-RUN-7; :mod:`ditto_worker.memory.operations`).

Migration 6 adds ``memories.operation_id`` (the id of the mutation that produced a
record's current state) and the ledger ``<schema>.operations(namespace, operation_id,
node, digest, output json, created_at)``, primary key ``(namespace, operation_id)``.

A mutation with an operation id **claims it first**, as its transaction's first
statement (``INSERT … ON CONFLICT DO NOTHING RETURNING``), like the execution id
(:mod:`ditto_plugin_postgres.executions`): a replay whose first run committed finds the
row, checks node and input digest (``CONFLICT`` on a mismatch) and returns the committed
output, applying nothing; a copy running while the first is in flight blocks on the unique
index until the first ends (commit: it returns that output; rollback: it claims the id and
runs). A failed mutation rolls its claim back: the id may be used again. Rows are kept
(no expiry).
"""

from __future__ import annotations

import json
from typing import Any, Final

import psycopg

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import Operation, check_replay

__all__ = ["MIGRATION", "claim_operation", "record_operation"]

MIGRATION: Final = (
    'ALTER TABLE {s}.memories ADD COLUMN operation_id text COLLATE "C"',
    """CREATE TABLE {s}.operations (
        namespace text COLLATE "C" NOT NULL DEFAULT '',
        operation_id text COLLATE "C" NOT NULL,
        node text COLLATE "C" NOT NULL,
        digest text COLLATE "C" NOT NULL,
        output json,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (namespace, operation_id)
    )""",
)
"""Statements of migration 6 (``operation ids``); ``{s}`` is the quoted schema name."""

_CLAIM_ATTEMPTS: Final = 3


def claim_operation(
    conn: psycopg.Connection, schema: str, op: Operation | None, namespace: str
) -> Any | None:
    """Claim ``op`` in the current transaction, or find it done.

    Returns:
        ``None`` when there is no operation id or this transaction now holds the claim
        (apply the mutation, then :func:`record_operation`); otherwise the committed
        output (JSON data) of the earlier run — apply nothing.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node or input.
        psycopg.Error: a driver error (the caller's transaction maps it).
    """
    if op is None:
        return None
    table = f"{schema}.operations"
    for _ in range(_CLAIM_ATTEMPTS):
        claimed = conn.execute(
            f"INSERT INTO {table} (namespace, operation_id, node, digest) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING 1",
            [namespace, op.id, op.node, op.digest],
        ).fetchone()
        if claimed is not None:
            return None
        row = conn.execute(
            f"SELECT node, digest, output FROM {table} WHERE namespace = %s AND operation_id = %s",
            [namespace, op.id],
        ).fetchone()
        if row is None:  # deleted in between: claim again
            continue
        check_replay(op, row[0], row[1])
        if row[2] is not None:
            return row[2]
        break
    raise MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "the PostgreSQL memory store could not claim the operation id; nothing was applied",
    )


def record_operation(
    conn: psycopg.Connection, schema: str, op: Operation | None, output: Any, namespace: str
) -> None:
    """Store ``output`` (JSON data) in this transaction's claim of ``op``."""
    if op is None:
        return
    conn.execute(
        f"UPDATE {schema}.operations SET output = %s::json "
        "WHERE namespace = %s AND operation_id = %s",
        [json.dumps(output, separators=(",", ":")), namespace, op.id],
    )
