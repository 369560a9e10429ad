"""Upgrades of an SQLite memory file written by an older plugin (schema 1-6 -> the
current :data:`ditto_plugin_sqlite.db.SCHEMA_VERSION`), run in the opening write
transaction before the schema's ``CREATE … IF NOT EXISTS`` statements."""

from __future__ import annotations

import json

from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.fts import add_shortest
from ditto_plugin_sqlite.fts import rebuild as rebuild_fts
from ditto_worker.memory.text import keyword_text
from ditto_worker.sqlkit.serial_ledger import ledger_ddl

__all__ = ["upgrade"]


def upgrade(conn: Connection, version: int, memories_ddl: str) -> None:
    """Bring a file of schema ``version`` (1-6) up to date, in the caller's transaction
    (``memories_ddl``: the ``memories`` table's ``CREATE`` statement)."""
    if version < 4:
        _add_namespaces(conn, memories_ddl)
    if version < 5:
        _rebuild_keywords(conn)
    if version < 6 and "operation_id" not in _columns(conn, "memories"):
        conn.execute("ALTER TABLE memories ADD COLUMN operation_id TEXT")
    if version < 7:
        add_shortest(conn)


def _columns(conn: Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def _add_namespaces(conn: Connection, memories_ddl: str) -> None:
    """Schema 1-3 -> 4: a ``namespace`` column (tenant scope, :mod:`ditto_worker.memory.scope`) on
    ``memories`` (keys unique per namespace) and ``executions``; existing rows are
    unscoped (``''``). ``memories`` is rebuilt (its old inline ``key UNIQUE`` cannot be
    dropped in place) keeping every ``seq`` and the AUTOINCREMENT high-water mark."""
    if "namespace" not in _columns(conn, "memories"):
        high = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'memories'").fetchone()
        conn.execute(memories_ddl.replace("IF NOT EXISTS memories", "memories_v4"))
        conn.execute(
            "INSERT INTO memories_v4 (seq, id, key, content, metadata, created_at, updated_at)"
            " SELECT seq, id, key, content, metadata, created_at, updated_at FROM memories"
        )
        conn.execute("DROP TABLE memories")
        conn.execute("ALTER TABLE memories_v4 RENAME TO memories")
        if high is not None:
            conn.execute(
                "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'memories'", high
            )
    columns = _columns(conn, "executions")
    if columns and "namespace" not in columns:
        conn.execute("ALTER TABLE executions RENAME TO executions_v3")
        conn.execute("DROP INDEX IF EXISTS executions_created_at")
        for statement in ledger_ddl():  # the operations ledger too (schema 6)
            conn.execute(statement)
        conn.execute(
            "INSERT INTO executions (execution_id, node, output, created_at)"
            " SELECT execution_id, node, output, created_at FROM executions_v3"
        )
        conn.execute("DROP TABLE executions_v3")


def _rebuild_keywords(conn: Connection) -> None:
    """Schema 1-4 -> 5: the keyword index rebuilt from every stored record (its key and
    content; no ``indexFields``, see :mod:`ditto_plugin_sqlite.index`), in the opening
    write transaction: about 20k records/s here."""
    rows = conn.execute("SELECT seq, namespace, key, content FROM memories ORDER BY seq")
    records = ((seq, ns, keyword_text(json.loads(content), key)) for seq, ns, key, content in rows)
    rebuild_fts(conn, list(records))
