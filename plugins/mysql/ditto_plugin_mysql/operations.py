"""Operation ids on MySQL (SPEC.md MEM-RUN-7; :mod:`ditto_worker.memory.operations`), as
on PostgreSQL.

Migration 2 adds ``memories.operation_id`` (the id of the mutation that produced a
record's current state; ``NULL`` for records written before it) and the ledger
``operations(ref, namespace, operation_id, node, digest, output, created_at)`` whose
primary key ``ref`` is SHA-256 of ``namespace NUL operation id`` (a namespace is
``LONGTEXT``: too long for a key of its own).

A mutation with an operation id claims it first, like the execution id
(:mod:`ditto_worker.sqlkit.ledger`, :class:`.ledger.MysqlLedger`). Rows are claimed at
the retention's clock, expire after ``operationRetentionS`` (30 days: a task may resume
days later) and are pruned after twice that (:mod:`ditto_worker.memory.retention`;
migration 3 indexes ``created_at`` for the prune).
"""

from __future__ import annotations

from typing import Final

__all__ = ["COLUMN", "LEDGER"]

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
