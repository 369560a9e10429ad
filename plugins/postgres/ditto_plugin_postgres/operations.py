"""Operation ids on PostgreSQL (SPEC.md MEM-RUN-7; :mod:`ditto_worker.memory.operations`).

Migration 6 adds ``memories.operation_id`` (the id of the mutation that produced a
record's current state) and the ledger ``<schema>.operations(namespace, operation_id,
node, digest, output json, created_at)``, primary key ``(namespace, operation_id)``.

A mutation with an operation id claims it first, like the execution id
(:mod:`ditto_worker.sqlkit.ledger`, :class:`.ledger.PostgresLedger`). Rows are claimed at
the retention's clock, expire after ``operationRetentionS`` and are pruned after twice
that (:mod:`ditto_worker.memory.retention`); migration 7 (:data:`RETENTION`) indexes them
by ``created_at`` for the prune.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MIGRATION", "RETENTION"]

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

RETENTION: Final = ("CREATE INDEX operations_created_at ON {s}.operations (created_at)",)
"""Statements of migration 7 (``operation retention``)."""
