"""The versioned, idempotent schema migrations of the PostgreSQL store.

Every object lives in one schema (setting ``schema``, default ``ditto``). Applied
versions are rows of ``<schema>.ditto_migrations(version, name, applied_at)``;
:func:`migrate` applies the missing ones in order, in one transaction, under an advisory
lock (two processes migrating at once apply each version once). Run it explicitly with
``ditto-worker migrate --store postgres``, or let the store run it on first use
(``autoMigrate: true``, the default).

Version 1 (``memories``)::

    seq        bigint identity primary key   -- store sequence: creation order, tie-break
    id         text COLLATE "C" unique       -- uuid4 hex
    key        text COLLATE "C" unique NULL
    content    json                          -- any JSON, 'null' included; text kept as written
    metadata   jsonb NULL                    -- GIN (jsonb_path_ops) for @> equality
    created_at, updated_at text COLLATE "C"  -- ditto_worker.memory.filters timestamps
    tsv        tsvector                      -- english words + CJK bigrams; GIN

Version 2 (``vectors``): ``store_settings(name text primary key, value text)`` and
``CREATE EXTENSION IF NOT EXISTS vector`` when the server has pgvector (a server without
it keeps working for keyword search). The ``memory_vectors`` table and its HNSW index are
created with the first embedding identity, which fixes their dims
(:mod:`ditto_plugin_postgres.vectors`).

Version 5 (``keyword terms``, issues 13/19): ``keyword_scopes(id, namespace, records,
terms)`` and ``memories.terms``; every record's ``tsv`` is rebuilt in place from the terms
Python makes (:mod:`ditto_plugin_postgres.text`, :func:`.keywords.rebuild`), each term
prefixed with its scope's id, in the migration's transaction.

Version 3 (``executions``): ``executions(namespace text NOT NULL DEFAULT '', execution_id
text, node text, output json, created_at timestamptz)``, primary key ``(namespace,
execution_id)``, indexed by ``created_at``: the execution ids of committed mutations and
their outputs (exactly-once WRITE/UPDATE/DELETE, :mod:`ditto_plugin_postgres.executions`).

Version 6 (``operation ids``, issue 25): ``memories.operation_id`` and the ledger
``operations(namespace, operation_id, node, digest, output, created_at)``
(:mod:`ditto_plugin_postgres.operations`). Version 7 (``operation retention``, issue 37):
the index ``operations_created_at`` the ledger's prune reads. Version 8 (``key order``,
issue 33): ``memories_namespace_key_order (namespace, key NULLS FIRST)``, which serves a
QUERY ``orderBy key`` (``NULL`` first ascending, as type rank 0 sorts) and its ``LIMIT``
(:meth:`.sql.PostgresFilter.order_items`) instead of a sort of every matching row.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import psycopg

from ditto_plugin_postgres.executions import MIGRATION as _EXECUTIONS
from ditto_plugin_postgres.keywords import MIGRATION as _KEYWORDS
from ditto_plugin_postgres.keywords import rebuild as rebuild_keywords
from ditto_plugin_postgres.operations import MIGRATION as _OPERATIONS
from ditto_plugin_postgres.operations import RETENTION as _RETENTION
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "MigrationReport",
    "check_schema",
    "lock_key",
    "migrate",
    "quote_schema",
]

_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

Step = str | Callable[[psycopg.Connection, str], None]
"""A migration step: SQL (``{s}`` = the quoted schema) or a function of (connection,
quoted schema) run in the migration's transaction."""

MIGRATIONS: Final[tuple[tuple[int, str, tuple[Step, ...]], ...]] = (
    (
        1,
        "memories",
        (
            """CREATE TABLE {s}.memories (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id text COLLATE "C" NOT NULL UNIQUE,
                key text COLLATE "C" UNIQUE,
                content json NOT NULL,
                metadata jsonb,
                created_at text COLLATE "C" NOT NULL,
                updated_at text COLLATE "C" NOT NULL,
                tsv tsvector NOT NULL
            )""",
            "CREATE INDEX memories_metadata ON {s}.memories USING gin (metadata jsonb_path_ops)",
            "CREATE INDEX memories_tsv ON {s}.memories USING gin (tsv)",
            "CREATE INDEX memories_created_at ON {s}.memories (created_at)",
        ),
    ),
    (
        2,
        "vectors",
        (
            'CREATE TABLE {s}.store_settings (name text COLLATE "C" PRIMARY KEY, '
            "value text NOT NULL)",
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = "
            "'vector') THEN CREATE EXTENSION IF NOT EXISTS vector; END IF; END $$",
        ),
    ),
    (3, "executions", _EXECUTIONS),
    (
        4,
        "scope",
        (  # tenant scope (ditto_worker.memory.scope): keys unique per namespace; old rows unscoped
            "ALTER TABLE {s}.memories ADD COLUMN namespace text COLLATE \"C\" NOT NULL DEFAULT ''",
            "ALTER TABLE {s}.memories DROP CONSTRAINT memories_key_key",
            "CREATE UNIQUE INDEX memories_namespace_key ON {s}.memories (namespace, key)",
            "CREATE INDEX memories_namespace_seq ON {s}.memories (namespace, seq)",
        ),
    ),
    (5, "keyword terms", (*_KEYWORDS, rebuild_keywords)),
    (6, "operation ids", _OPERATIONS),
    (7, "operation retention", _RETENTION),
    (
        8,
        "key order",
        (  # orderBy key: a missing key (rank 0) first, as the unique index does not hold it
            "CREATE INDEX IF NOT EXISTS memories_namespace_key_order ON {s}.memories "
            "(namespace, key NULLS FIRST)",
        ),
    ),
)
"""``(version, name, statements)`` in order; ``{s}`` is the quoted schema name."""

LATEST_VERSION: Final = MIGRATIONS[-1][0]


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate` did: the schema, its version now, the versions applied now."""

    schema: str
    version: int
    applied: tuple[int, ...]


def quote_schema(schema: str) -> str:
    """The schema name as a quoted SQL identifier.

    Raises:
        ValueError: the name is not ``[A-Za-z_][A-Za-z0-9_]{0,62}``.
    """
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError("schema must match [A-Za-z_][A-Za-z0-9_]{0,62}")
    return f'"{schema}"'


def lock_key(schema: str, purpose: str) -> int:
    """A signed 64-bit advisory-lock key for ``(schema, purpose)``."""
    digest = hashlib.sha256(f"ditto:{schema}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _applied(conn: psycopg.Connection, quoted: str) -> set[int]:
    rows = conn.execute(f"SELECT version FROM {quoted}.ditto_migrations").fetchall()
    return {int(row[0]) for row in rows}


def _newer() -> MemoryError:
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "the PostgreSQL memory schema was migrated by a newer version of the plugin",
    )


def migrate(conn: psycopg.Connection, schema: str) -> MigrationReport:
    """Create the schema if needed and apply every missing migration (idempotent).

    Args:
        conn: an autocommit connection (the migration runs in its own transaction).
        schema: the schema name (see :func:`quote_schema`).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when the schema is newer than this plugin.
        psycopg.Error: a driver error (the caller maps it).
    """
    quoted = quote_schema(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(schema, "migrate")])
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted}.ditto_migrations (version integer PRIMARY "
            "KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = _applied(conn, quoted)
        if done and max(done) > LATEST_VERSION:
            raise _newer()
        applied: list[int] = []
        for version, name, statements in MIGRATIONS:
            if version in done:
                continue
            for statement in statements:
                if isinstance(statement, str):
                    conn.execute(statement.format(s=quoted))
                else:
                    statement(conn, quoted)
            conn.execute(
                f"INSERT INTO {quoted}.ditto_migrations (version, name) VALUES (%s, %s)",
                [version, name],
            )
            applied.append(version)
    return MigrationReport(schema, LATEST_VERSION, tuple(applied))


def check_schema(conn: psycopg.Connection, schema: str) -> None:
    """Fail unless ``schema`` is at :data:`LATEST_VERSION` (used when autoMigrate is off).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` naming ``ditto-worker migrate`` when the
            schema is missing or older, or saying it is newer.
    """
    quoted = quote_schema(schema)
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", [f"{quoted}.ditto_migrations"]
    ).fetchone()
    version = max(_applied(conn, quoted), default=0) if exists and exists[0] else 0
    if version > LATEST_VERSION:
        raise _newer()
    if version < LATEST_VERSION:
        raise MemoryError(
            ErrorCode.MEMORY_BACKEND_ERROR,
            "the PostgreSQL memory schema is not migrated; run `ditto-worker migrate`",
        )
