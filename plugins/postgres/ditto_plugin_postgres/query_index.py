"""Indexes of the PostgreSQL store's declared ``queryFields`` (issue 28).

Each declared field adds one B-tree expression index over its typed sort expressions,
built from the same function as the filter compiler's
(:func:`ditto_plugin_postgres.sql.sort_expressions`, path as a literal), so the planner
matches them::

    memories_qf_<field>_<digest> ON memories (namespace, <type rank>, <number>, <text>)

It serves ``orderBy`` on the field in either direction (an incremental sort orders the
ties by ``seq``), equality (``r = 2 AND n IS NULL AND t = x``, ``r = 1 AND n = x``,
``r = 5 AND n = 1``, ``r = 0`` for ``null``) and ranges (``r = 1 AND n < x``, ``r = 2 AND
n IS NULL AND t < x``): :mod:`ditto_plugin_postgres.sql` writes a declared field's
conditions over these expressions.
``<field>`` is the name with other characters than ASCII letters and digits as ``_``
(cut to 24), ``<digest>`` a SHA-256 prefix of the statement. Opening a store with
declared fields creates the missing indexes and drops those of fields no longer declared,
under the store's write lock (writers wait while an index is built: seconds per 100,000
records), then ``ANALYZE``\\ s the table once so the planner has the expressions'
statistics (autovacuum keeps them after). The declared list is the whole declaration: an
empty list drops every index named with :data:`PREFIX`; only a store opened without the
setting (``None``) leaves them alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

import psycopg

from ditto_plugin_postgres.sql import sort_expressions, value_expression
from ditto_worker.memory.filters import parse_field

__all__ = ["PREFIX", "index_statements", "sync_indexes"]

PREFIX: Final = "memories_qf_"
"""The name prefix of every declared-field index (and of nothing else)."""


def index_statements(schema: str, fields: Sequence[str]) -> dict[str, str]:
    """``{index name: CREATE INDEX statement}`` for ``fields`` in the quoted ``schema``."""
    statements: dict[str, str] = {}
    for name in fields:
        value = value_expression(parse_field(name).path, "metadata", bound=False)
        columns = ", ".join(sort_expressions(value))
        digest = hashlib.sha256(columns.encode("utf-8")).hexdigest()[:12]
        index = f"{PREFIX}{re.sub('[^A-Za-z0-9]', '_', name)[:24]}_{digest}"
        statements[index] = (
            f"CREATE INDEX IF NOT EXISTS {index} ON {schema}.memories (namespace, {columns})"
        )
    return statements


def existing(conn: psycopg.Connection, schema_name: str) -> set[str]:
    """Names of the declared-field indexes of the schema's ``memories``."""
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'memories'",
        [schema_name],
    ).fetchall()
    return {str(row[0]) for row in rows if str(row[0]).startswith(PREFIX)}


def sync_indexes(
    conn: psycopg.Connection,
    schema: str,
    schema_name: str,
    fields: Sequence[str] | None,
    lock: int,
) -> bool:
    """Create the indexes of ``fields``, drop those of undeclared fields (module doc);
    True when something changed. Nothing is done for ``None`` (not declared).

    Args:
        conn: an autocommit connection.
        schema: the quoted schema; ``schema_name`` its plain name.
        fields: the ``queryFields`` (``None``: not set).
        lock: the store's write advisory lock key (held while indexes change).
    """
    if fields is None:
        return False
    wanted = index_statements(schema, fields)
    if existing(conn, schema_name) == set(wanted):
        return False
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock])
        present = existing(conn, schema_name)
        for name in sorted(present - set(wanted)):
            conn.execute(f"DROP INDEX IF EXISTS {schema}.{name}")
        for name, statement in wanted.items():
            if name not in present:
                conn.execute(statement)
    if wanted:
        conn.execute(f"ANALYZE {schema}.memories")
    return True
