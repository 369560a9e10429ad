"""The ``<schema>.store_settings(name, value)`` table: values set once, then read.

Rows: ``embedding`` (:mod:`ditto_plugin_postgres.vectors`), ``cursor_secret``
(:mod:`ditto_worker.memory.cursors`). The table comes with migration 2
(:mod:`ditto_plugin_postgres.migrations`); no row is ever changed once written.
"""

from __future__ import annotations

import psycopg

__all__ = ["claim_setting"]


def claim_setting(conn: psycopg.Connection, schema: str, name: str, value: str) -> str:
    """Set ``name`` to ``value`` unless it is set; returns the value it has now (the first
    writer's, when several processes race: ``ON CONFLICT DO NOTHING``).

    Args:
        conn: an autocommit connection; the two statements run in one transaction.
        schema: the quoted schema name.
        name: the setting.
        value: the value to set when none is.
    """
    with conn.transaction():
        conn.execute(
            f"INSERT INTO {schema}.store_settings (name, value) VALUES (%s, %s) "
            "ON CONFLICT (name) DO NOTHING",
            [name, value],
        )
        row = conn.execute(
            f"SELECT value FROM {schema}.store_settings WHERE name = %s", [name]
        ).fetchone()
    return value if row is None else str(row[0])
