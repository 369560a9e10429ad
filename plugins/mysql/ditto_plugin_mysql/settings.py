"""The ``store_settings(name, value)`` table and the ``scopes`` table of the MySQL store.

Settings rows: ``sequence`` (the last ``seq`` handed out; its row lock serialises
writers), ``cursor_secret`` (:mod:`ditto_worker.memory.cursors`), ``embedding``
(:mod:`ditto_plugin_mysql.vectors`), ``index_fields`` (:mod:`ditto_worker.memory.indexing`),
``vectors_table`` and ``embedding_next`` (:mod:`ditto_plugin_mysql.reembed`). Apart from
``sequence``, a value is set once by the first writer (``INSERT IGNORE``) and then only
read, except that a reindex replaces ``embedding`` and ``vectors_table``. ``scopes``
maps each namespace (through ``ns_hash``, SHA-256 of its UTF-8 bytes) to a small integer
used by every other table; rows are never deleted.
"""

from __future__ import annotations

import hashlib

from ditto_plugin_mysql.db import Conn

__all__ = ["claim_setting", "lock_sequence", "read_setting", "scope_id", "set_sequence"]


def read_setting(conn: Conn, name: str) -> str | None:
    """The value of ``name``, or ``None``."""
    with conn.cursor() as cur:
        cur.execute("SELECT value FROM store_settings WHERE name = %s", [name])
        row = cur.fetchone()
    return None if row is None else str(row[0])


def claim_setting(conn: Conn, name: str, value: str) -> str:
    """Set ``name`` to ``value`` unless it is set; the value it has now (the first
    writer's when several processes race)."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT IGNORE INTO store_settings (name, value) VALUES (%s, %s)", [name, value]
        )
    current = read_setting(conn, name)
    return value if current is None else current


def lock_sequence(conn: Conn) -> int:
    """Lock the ``sequence`` row until the transaction ends (writers queue here) and
    return the last ``seq`` handed out."""
    with conn.cursor() as cur:
        cur.execute("SELECT value FROM store_settings WHERE name = 'sequence' FOR UPDATE")
        row = cur.fetchone()
    return int(row[0]) if row is not None else 0


def set_sequence(conn: Conn, last: int) -> None:
    """Record ``last`` as the last ``seq`` handed out (under :func:`lock_sequence`)."""
    with conn.cursor() as cur:
        cur.execute("UPDATE store_settings SET value = %s WHERE name = 'sequence'", [str(last)])


def scope_id(conn: Conn, namespace: str, create: bool) -> int | None:
    """The id of ``namespace`` in ``scopes`` (created when ``create``), else ``None``."""
    digest = hashlib.sha256(namespace.encode("utf-8")).digest()
    with conn.cursor() as cur:
        if create:
            cur.execute(
                "INSERT INTO scopes (ns_hash, namespace) VALUES (%s, %s) "
                "ON DUPLICATE KEY UPDATE id = id",
                [digest, namespace],
            )
        cur.execute("SELECT id FROM scopes WHERE ns_hash = %s", [digest])
        row = cur.fetchone()
    return None if row is None else int(row[0])
