"""Exactly-once effects for WRITE, UPDATE and DELETE on PostgreSQL (issue 7; seed: "no
duplicated write, no double version bump" after a crash and retry).

A mutation's execution id (``MemoryCallOptions.execution_id``: the Celery task id on the
fleet, a fresh uuid per direct SDK call unless the caller passes one) is **claimed first**,
as the mutation transaction's first statement: a row of ``<schema>.executions`` under the
unique key ``(namespace, execution_id)`` (``INSERT … ON CONFLICT DO NOTHING RETURNING``).
The mutation then applies its effect and, before COMMIT, stores its raw output in that
row. Effect and record commit together or not at all.

What the caller sees:

* First run: the mutation is applied and its output returned (and remembered).
* A redelivered or re-sent call with the same id whose first run **committed** (e.g. the
  worker was killed between COMMIT and the broker's acknowledgement, or the caller sent
  it again): nothing is applied; the committed output is returned unchanged — the same
  ids, the records as they were then (a later change to them stands; it is not undone).
* A copy that runs **while the first is still in flight** (redelivered after
  ``fleet.visibilityTimeoutS`` while the first still runs) blocks on the unique index
  until the first ends: if the first commits, the copy returns its output and applies
  nothing; if the first rolls back (it failed, was cancelled, or its process died), the
  copy claims the id and runs as the first run. The wait is bounded by the copy's own
  deadline (``MEMORY_TIMEOUT``) and cancel token (``MEMORY_CANCELLED``).
* A failed mutation (``CONFLICT``, ``NOT_FOUND``, …) records nothing: the id can be used
  again.
* The same id used by **another node** (say a WRITE id re-sent as an UPDATE): ``CONFLICT``,
  nothing applied.

Rows older than the retention (``executionRetentionS``, 24 h by default) are pruned by
later mutations (a bounded batch per mutation, rows locked by others skipped); an id
replayed after that is treated as new. The ``namespace`` column scopes ids (tenant
scope); callers without one use ``""``.

Committed rows always hold their output; a claimed row's ``output`` is NULL only inside
the transaction that claimed it, which no other session can see.
"""

from __future__ import annotations

import json
from typing import Any, Final

import psycopg

from ditto_worker.errors import ErrorCode, MemoryError

__all__ = ["DEFAULT_RETENTION_S", "MIGRATION", "PRUNE_BATCH", "claim_replay", "record"]

DEFAULT_RETENTION_S: Final = 24 * 3600.0
"""How long a committed execution id is remembered, seconds."""

PRUNE_BATCH: Final = 500
"""At most this many expired rows are deleted by one mutation."""

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

_CLAIM_ATTEMPTS: Final = 3


def claim_replay(
    conn: psycopg.Connection,
    schema: str,
    execution_id: str | None,
    node: str,
    namespace: str = "",
) -> Any | None:
    """Claim ``execution_id`` for ``node`` in the current transaction, or find it done.

    Call it as the mutation transaction's first statement. Blocks while another
    transaction holds an uncommitted claim of the same id.

    Args:
        conn: a connection inside the mutation's transaction.
        schema: the quoted schema name.
        execution_id: the call's id; ``None`` or empty: nothing is claimed.
        node: the node id (``MEMORY.WRITE`` …).
        namespace: the scope of the id (``""`` without one).

    Returns:
        ``None`` when this transaction now holds the claim (apply the mutation, then
        :func:`record` its output before COMMIT); otherwise the committed output (JSON
        data) of the earlier run — apply nothing.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node.
        psycopg.Error: a driver error (the caller's transaction maps it).
    """
    if not execution_id:
        return None
    table = f"{schema}.executions"
    for _ in range(_CLAIM_ATTEMPTS):
        claimed = conn.execute(
            f"INSERT INTO {table} (namespace, execution_id, node) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, execution_id) DO NOTHING RETURNING 1",
            [namespace, execution_id, node],
        ).fetchone()
        if claimed is not None:
            return None
        # READ COMMITTED: this statement's snapshot sees the row that made the claim fail.
        row = conn.execute(
            f"SELECT node, output FROM {table} WHERE namespace = %s AND execution_id = %s",
            [namespace, execution_id],
        ).fetchone()
        if row is None:  # pruned in between: claim again
            continue
        if row[0] != node:
            raise MemoryError(
                ErrorCode.CONFLICT,
                f"this execution id was already used by {row[0]}; nothing was applied",
            )
        if row[1] is None:  # only an uncommitted claim has no output; never seen here
            break
        return row[1]
    raise MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "the PostgreSQL memory store could not claim the execution id; nothing was applied",
    )


def record(
    conn: psycopg.Connection,
    schema: str,
    execution_id: str | None,
    output: Any,
    retention_s: float,
    namespace: str = "",
) -> None:
    """Store ``output`` (JSON data) in this transaction's claim and prune expired rows.

    Call it after the mutation's effect, before COMMIT, in the transaction that claimed
    ``execution_id`` with :func:`claim_replay`.
    """
    if not execution_id:
        return
    table = f"{schema}.executions"
    conn.execute(
        f"UPDATE {table} SET output = %s::json WHERE namespace = %s AND execution_id = %s",
        [json.dumps(output, separators=(",", ":")), namespace, execution_id],
    )
    conn.execute(
        f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table} WHERE created_at < "
        "clock_timestamp() - make_interval(secs => %s) AND output IS NOT NULL "
        "AND NOT (namespace = %s AND execution_id = %s) "
        "ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED)",
        [retention_s, namespace, execution_id, PRUNE_BATCH],
    )
