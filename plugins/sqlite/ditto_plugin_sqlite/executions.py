"""Exactly-once effects for WRITE, UPDATE and DELETE (issue 7; seed: "no duplicated write,
no double version bump" after a crash and retry).

A mutation's execution id (``MemoryCallOptions.execution_id``: the Celery task id on the
fleet, a fresh uuid per direct SDK call unless the caller passes one) is claimed in the
same transaction as the mutation's effect: the table ``executions`` maps it to the raw
output the call returned. A redelivered or retried call with the same id — after a worker
was killed between COMMIT and acknowledgement, or a caller re-sent it — finds the row,
applies nothing, and returns the committed output unchanged (same ids, same records as
they were then). Writers are serialized by ``BEGIN IMMEDIATE``, so a copy running while the
first is still in flight waits for it and then sees its row.

Rows older than the retention (24 h by default) are pruned by later mutations; an id
replayed after that is treated as new.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from ditto_worker.errors import ErrorCode, MemoryError

__all__ = ["DEFAULT_RETENTION_S", "DDL", "claim_replay", "record"]

DEFAULT_RETENTION_S: Final = 24 * 3600.0
"""How long a committed execution id is remembered, seconds."""

DDL: Final = (
    """CREATE TABLE IF NOT EXISTS executions (
        namespace TEXT NOT NULL DEFAULT '',
        execution_id TEXT NOT NULL,
        node TEXT NOT NULL,
        output TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (namespace, execution_id)
    )""",
    "CREATE INDEX IF NOT EXISTS executions_created_at ON executions (created_at)",
)


def claim_replay(conn: Any, execution_id: str | None, node: str, namespace: str = "") -> Any | None:
    """The committed output of ``execution_id`` (JSON data) if it already ran in
    ``namespace`` (the call's tenant scope), else ``None``.

    Call inside the mutation's write transaction, before applying anything. Ids are
    remembered per namespace, so another tenant replaying an id never sees this output.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node (nothing applied;
            as the PostgreSQL store).
    """
    if not execution_id:
        return None
    row = conn.execute(
        "SELECT node, output FROM executions WHERE namespace = ? AND execution_id = ?",
        (namespace, execution_id),
    ).fetchone()
    if row is None:
        return None
    if row[0] != node:
        raise MemoryError(ErrorCode.CONFLICT, f"this execution id was used by {row[0]}")
    return json.loads(row[1])


def record(
    conn: Any,
    execution_id: str | None,
    node: str,
    output: Any,
    retention_s: float,
    namespace: str = "",
) -> None:
    """Remember ``output`` (JSON data) for ``execution_id`` in ``namespace``, in the
    mutation's transaction."""
    if not execution_id:
        return
    now = time.time()
    conn.execute("DELETE FROM executions WHERE created_at < ?", (now - retention_s,))
    conn.execute(
        "INSERT INTO executions (namespace, execution_id, node, output, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (namespace, execution_id, node, json.dumps(output, separators=(",", ":")), now),
    )
