"""The versioned, idempotent schema migrations of the MySQL store.

Every table lives in one database (setting ``database``, default the URL's). Applied
versions are rows of ``ditto_migrations(version, name, applied_at)``; :func:`migrate`
creates the database if needed and applies the missing versions in order under the
named lock ``GET_LOCK('ditto:<database>:migrate')`` (two processes migrating at once
apply each version once). MySQL and MariaDB commit DDL implicitly, so a migration is not
one transaction: every statement is written to be re-run safely (``IF NOT EXISTS``), and
a version is recorded only after all its statements ran. Run it explicitly with
``ditto-worker migrate --store mysql``, or let the store run it on first use
(``autoMigrate: true``, the default).

Version 1 (InnoDB, ``utf8mb4``; ids, keys and namespaces ``utf8mb4_bin``)::

    store_settings(name PK, value)       -- sequence, cursor_secret, embedding, index_fields
    scopes(id PK, ns_hash UNIQUE, namespace, records, terms)  -- one row per namespace
    memories(seq PK, scope, id UNIQUE, key_hash, key, content, metadata,
             created_at, updated_at, terms)     -- UNIQUE (scope, key_hash), (scope, seq)
    memory_terms(scope, term, seq, tf)          -- PK (scope, term, seq), KEY (seq)
    memory_vectors(scope, seq, embedding)       -- PK (scope, seq): float32 BLOBs
    executions(ref PK, namespace, execution_id, node, output, created_at)

Version 3 (``operation retention``, issue 37): the index ``operations_created_at`` the
ledger's prune reads (:mod:`ditto_worker.memory.retention`).

Version 2 (``operation ids``, :mod:`ditto_plugin_mysql.operations`)::

    memories.operation_id                -- added column, NULL for older records
    operations(ref PK, namespace, operation_id, node, digest, output, created_at)

MySQL 8 has no ``ADD COLUMN IF NOT EXISTS`` (MariaDB has), so an added column is an
:class:`AddColumn` step: run only when ``information_schema.columns`` lacks it.

``seq`` is the store sequence (creation order, the keyset tie-break), handed out by the
writer from ``store_settings.sequence`` under that row's lock, so it follows commit order
and is never reused. ``key_hash`` is SHA-256 of the key's UTF-8 bytes: keys of any length
are unique per scope through it (an index on the key itself would stop at 3072 bytes), and
it compares bytes exactly (``utf8mb4_bin`` pads trailing spaces: ``'a' = 'a '``).
``ns_hash`` does the same for namespaces. ``content``/``metadata`` are ``LONGTEXT``
holding compact JSON text as written (MariaDB's ``JSON`` is ``LONGTEXT`` anyway; MySQL's
would re-format the text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import pymysql

from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.executions import MIGRATION as _EXECUTIONS
from ditto_plugin_mysql.operations import COLUMN as _OPERATION_COLUMN
from ditto_plugin_mysql.operations import LEDGER as _OPERATIONS
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "AddColumn",
    "AddIndex",
    "MigrationReport",
    "check_schema",
    "check_database_name",
    "migrate",
]

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_TABLE: Final = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin ROW_FORMAT=DYNAMIC"
_LOCK_WAIT_S: Final = 60


@dataclass(frozen=True)
class AddColumn:
    """A migration step adding ``column`` (of SQL type ``definition``) to ``table`` of
    the store's database unless it has it (a re-run is safe on MySQL 8 too)."""

    table: str
    column: str
    definition: str


@dataclass(frozen=True)
class AddIndex:
    """A migration step adding index ``name`` on ``columns`` (SQL) of ``table`` unless
    it has it."""

    table: str
    name: str
    columns: str


Step = str | AddColumn | AddIndex
"""A migration step: a statement written to be re-run safely, an :class:`AddColumn` or
an :class:`AddIndex`."""

MIGRATIONS: Final[tuple[tuple[int, str, tuple[Step, ...]], ...]] = (
    (
        1,
        "memories",
        (
            f"""CREATE TABLE IF NOT EXISTS store_settings (
                name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
                value LONGTEXT NOT NULL) {_TABLE}""",
            "INSERT IGNORE INTO store_settings (name, value) VALUES ('sequence', '0')",
            f"""CREATE TABLE IF NOT EXISTS scopes (
                id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
                ns_hash BINARY(32) NOT NULL UNIQUE,
                namespace LONGTEXT NOT NULL,
                records BIGINT NOT NULL DEFAULT 0,
                terms BIGINT NOT NULL DEFAULT 0) {_TABLE}""",
            f"""CREATE TABLE IF NOT EXISTS memories (
                seq BIGINT UNSIGNED NOT NULL PRIMARY KEY,
                scope INT UNSIGNED NOT NULL,
                id VARCHAR(64) NOT NULL,
                key_hash BINARY(32) NULL,
                `key` LONGTEXT NULL,
                content LONGTEXT NOT NULL,
                metadata LONGTEXT NULL,
                created_at VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                updated_at VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                terms INT NOT NULL DEFAULT 0,
                UNIQUE KEY memories_id (id),
                UNIQUE KEY memories_scope_key (scope, key_hash),
                KEY memories_scope_seq (scope, seq)) {_TABLE}""",
            f"""CREATE TABLE IF NOT EXISTS memory_terms (
                scope INT UNSIGNED NOT NULL,
                term VARBINARY(255) NOT NULL,
                seq BIGINT UNSIGNED NOT NULL,
                tf INT NOT NULL,
                PRIMARY KEY (scope, term, seq),
                KEY memory_terms_seq (seq)) {_TABLE}""",
            f"""CREATE TABLE IF NOT EXISTS memory_vectors (
                scope INT UNSIGNED NOT NULL,
                seq BIGINT UNSIGNED NOT NULL,
                embedding MEDIUMBLOB NOT NULL,
                PRIMARY KEY (scope, seq),
                UNIQUE KEY memory_vectors_seq (seq)) {_TABLE}""",
            _EXECUTIONS,
        ),
    ),
    (
        2,
        "operation ids",
        (AddColumn("memories", "operation_id", _OPERATION_COLUMN), _OPERATIONS),
    ),
    (3, "operation retention", (AddIndex("operations", "operations_created_at", "created_at"),)),
)
"""``(version, name, statements)`` in order, run in the store's database."""

LATEST_VERSION: Final = MIGRATIONS[-1][0]


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate` did: the schema (MySQL's word for a database), its version
    now, the versions applied now."""

    schema: str
    version: int
    applied: tuple[int, ...]


def check_database_name(name: str) -> str:
    """``name`` when it is ``[A-Za-z_][A-Za-z0-9_]{0,63}`` (safe to quote with backticks).

    Raises:
        ValueError: another name.
    """
    if not _NAME.fullmatch(name):
        raise ValueError("database must match [A-Za-z_][A-Za-z0-9_]{0,63}")
    return name


def _newer() -> MemoryError:
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "the MySQL memory schema was migrated by a newer version of the plugin",
    )


def _applied(cur: pymysql.cursors.Cursor) -> set[int]:
    cur.execute("SELECT version FROM ditto_migrations")
    return {int(row[0]) for row in cur.fetchall()}


def migrate(conn: Conn, database: str) -> MigrationReport:
    """Create ``database`` if needed and apply every missing migration (idempotent).

    Args:
        conn: an autocommit connection (to any database; it is switched to ``database``).
        database: the database name (:func:`check_database_name`).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when the schema is newer than this plugin
            or the migration lock is not free within 60 s.
        pymysql.MySQLError: a driver error (the caller maps it).
    """
    name = check_database_name(database)
    lock = f"ditto:{name}:migrate"
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, %s)", [lock, _LOCK_WAIT_S])
        if (cur.fetchone() or (0,))[0] != 1:
            raise MemoryError(
                ErrorCode.MEMORY_BACKEND_ERROR, "the MySQL memory schema is being migrated"
            )
        try:
            cur.execute(
                f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
            conn.select_db(name)
            cur.execute(
                "CREATE TABLE IF NOT EXISTS ditto_migrations (version INT NOT NULL PRIMARY "
                "KEY, name VARCHAR(100) NOT NULL, applied_at TIMESTAMP NOT NULL DEFAULT "
                f"CURRENT_TIMESTAMP) {_TABLE}"
            )
            return MigrationReport(name, LATEST_VERSION, _apply(cur))
        finally:
            cur.execute("SELECT RELEASE_LOCK(%s)", [lock])


def _apply(cur: pymysql.cursors.Cursor) -> tuple[int, ...]:
    done = _applied(cur)
    if done and max(done) > LATEST_VERSION:
        raise _newer()
    applied: list[int] = []
    for version, label, statements in MIGRATIONS:
        if version in done:
            continue
        for step in statements:
            _run(cur, step)
        cur.execute(
            "INSERT INTO ditto_migrations (version, name) VALUES (%s, %s)", [version, label]
        )
        applied.append(version)
    return tuple(applied)


def _run(cur: pymysql.cursors.Cursor, step: Step) -> None:
    if isinstance(step, str):
        cur.execute(step)
        return
    if isinstance(step, AddIndex):
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = "
            "DATABASE() AND table_name = %s AND index_name = %s",
            [step.table, step.name],
        )
        if not (cur.fetchone() or (0,))[0]:
            cur.execute(f"CREATE INDEX `{step.name}` ON `{step.table}` ({step.columns})")
        return
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() "
        "AND table_name = %s AND column_name = %s",
        [step.table, step.column],
    )
    if not (cur.fetchone() or (0,))[0]:
        cur.execute(f"ALTER TABLE `{step.table}` ADD COLUMN `{step.column}` {step.definition}")


def check_schema(conn: Conn, database: str) -> None:
    """Fail unless ``database`` is at :data:`LATEST_VERSION` (when autoMigrate is off).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` naming ``ditto-worker migrate`` when the
            schema is missing or older, or saying it is newer.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = 'ditto_migrations'",
            [check_database_name(database)],
        )
        exists = (cur.fetchone() or (0,))[0]
        if exists:
            conn.select_db(database)
        version = max(_applied(cur), default=0) if exists else 0
    if version > LATEST_VERSION:
        raise _newer()
    if version < LATEST_VERSION:
        raise MemoryError(
            ErrorCode.MEMORY_BACKEND_ERROR,
            "the MySQL memory schema is not migrated; run `ditto-worker migrate`",
        )
