"""Operation ids on SQLite (SPEC.md MEM-RUN-7; :mod:`ditto_worker.memory.operations`).

The table ``operations`` maps ``(namespace, operation id)`` to the node, the digest of
the input and the raw output of the mutation that used it. It is read and written inside
the mutation's ``BEGIN IMMEDIATE`` transaction (writers are serialized), so the effect and
its row commit together: a replay finds the row, applies nothing and returns the output;
another node or input under the id is ``CONFLICT``. Rows are kept (no expiry). The
records a WRITE or UPDATE wrote carry the id in ``memories.operation_id``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from ditto_plugin_sqlite.driver import Connection
from ditto_worker.memory.operations import Operation, check_replay

__all__ = ["DDL", "record_operation", "replay_operation"]

DDL: Final = (
    """CREATE TABLE IF NOT EXISTS operations (
        namespace TEXT NOT NULL DEFAULT '',
        operation_id TEXT NOT NULL,
        node TEXT NOT NULL,
        digest TEXT NOT NULL,
        output TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (namespace, operation_id)
    )""",
)


def replay_operation(conn: Connection, op: Operation | None, namespace: str) -> Any | None:
    """The committed output (JSON data) of ``op`` in ``namespace``, or ``None`` when it has
    not run (or there is no operation id). Call inside the write transaction.

    Raises:
        MemoryError: ``CONFLICT`` when the id was used by another node or input.
    """
    if op is None:
        return None
    row = conn.execute(
        "SELECT node, digest, output FROM operations WHERE namespace = ? AND operation_id = ?",
        (namespace, op.id),
    ).fetchone()
    if row is None:
        return None
    check_replay(op, row[0], row[1])
    return json.loads(row[2])


def record_operation(conn: Connection, op: Operation | None, output: Any, namespace: str) -> None:
    """Remember ``output`` (JSON data) for ``op`` in the mutation's transaction."""
    if op is None:
        return
    conn.execute(
        "INSERT INTO operations (namespace, operation_id, node, digest, output, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (namespace, op.id, op.node, op.digest, json.dumps(output, separators=(",", ":")),
         time.time()),
    )  # fmt: skip
