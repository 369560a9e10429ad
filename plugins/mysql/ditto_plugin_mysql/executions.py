"""Exactly-once effects for WRITE, UPDATE and DELETE on MySQL, as on PostgreSQL (issue 7;
seed: "no duplicated write, no double version bump" after a crash and retry).

A mutation's execution id (``MemoryCallOptions.execution_id``: the Celery task id on the
fleet, a fresh uuid per direct SDK call unless the caller passes one) is claimed first, in
the mutation's transaction, as a row of ``executions``; the output is stored before
COMMIT. What a caller sees: :mod:`ditto_worker.sqlkit.ledger`; the statements:
:class:`.ledger.MysqlLedger`. Rows older than ``executionRetentionS`` (24 h) are pruned by
later mutations; an id replayed after that is treated as new.
"""

from __future__ import annotations

from typing import Final

from ditto_worker.sqlkit import DEFAULT_RETENTION_S

__all__ = ["DEFAULT_RETENTION_S", "MIGRATION"]

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
