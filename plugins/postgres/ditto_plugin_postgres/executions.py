"""Exactly-once effects for WRITE, UPDATE and DELETE on PostgreSQL (issue 7; seed: "no
duplicated write, no double version bump" after a crash and retry).

A mutation's execution id (``MemoryCallOptions.execution_id``: the Celery task id on the
fleet, a fresh uuid per direct SDK call unless the caller passes one) is claimed first, in
the mutation's transaction, as a row of ``<schema>.executions`` under the unique key
``(namespace, execution_id)``; the output is stored before COMMIT. What a caller sees
(first run, replay after COMMIT, a copy in flight, another node): the kit's
:mod:`ditto_worker.sqlkit.ledger`; the statements: :class:`.ledger.PostgresLedger`.
Rows older than ``executionRetentionS`` (24 h) are pruned by later mutations; an id
replayed after that is treated as new.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from ditto_plugin_postgres.ledger import PRUNE_BATCH, PostgresLedger
from ditto_worker.sqlkit import DEFAULT_RETENTION_S, claim_execution

__all__ = ["DEFAULT_RETENTION_S", "MIGRATION", "PRUNE_BATCH", "claim_replay", "record"]

MIGRATION: Final = (
    """CREATE TABLE {s}.executions (
        namespace text COLLATE "C" NOT NULL DEFAULT '',
        execution_id text COLLATE "C" NOT NULL,
        node text COLLATE "C" NOT NULL,
        output json,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (namespace, execution_id)
    )""",
    "CREATE INDEX executions_created_at ON {s}.executions (created_at)",
)
"""Statements of migration 3 (``executions``); ``{s}`` is the quoted schema name.
``output`` is ``json`` (not ``jsonb``) so a replay returns the text as it was written."""


def claim_replay(
    conn: psycopg.Connection, schema: str, execution_id: str | None, node: str,
    namespace: str = "",
) -> Any | None:  # fmt: skip
    """Claim ``execution_id`` for ``node`` in the current transaction (``schema``: the
    quoted name), or find it done: :func:`ditto_worker.sqlkit.claim_execution`."""
    return claim_execution(PostgresLedger(schema), conn, execution_id, node, namespace)


def record(
    conn: psycopg.Connection, schema: str, execution_id: str | None, output: Any,
    retention_s: float, namespace: str = "",
) -> None:  # fmt: skip
    """Store ``output`` (JSON data) in this transaction's claim and prune expired rows."""
    if execution_id:
        PostgresLedger(schema).store_execution(conn, execution_id, "", namespace, output,
                                               retention_s)  # fmt: skip
