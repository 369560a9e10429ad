"""The ``store_settings(name, value)`` table of an SQLite store: values set once, then read.

Rows: ``embedding`` (:mod:`ditto_plugin_sqlite.vectors`), ``cursor_secret``
(:mod:`ditto_worker.memory.cursors`). The table exists from schema version 2 on
(:mod:`ditto_plugin_sqlite.db`); no row is ever changed once written.
"""

from __future__ import annotations

from ditto_plugin_sqlite.driver import Connection

__all__ = ["claim_setting", "read_setting"]


def read_setting(conn: Connection, name: str) -> str | None:
    """The value of ``name``, or ``None`` when it was never set."""
    row = conn.execute("SELECT value FROM store_settings WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def claim_setting(conn: Connection, name: str, value: str) -> str:
    """Set ``name`` to ``value`` unless it is set; returns the value it has now (the first
    writer's, when several processes race). Runs in the caller's write transaction."""
    conn.execute("INSERT OR IGNORE INTO store_settings (name, value) VALUES (?, ?)", (name, value))
    stored = read_setting(conn, name)
    return value if stored is None else stored
