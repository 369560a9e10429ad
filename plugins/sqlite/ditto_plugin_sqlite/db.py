"""Connections, schema, transactions and error mapping of the SQLite store.

Several worker processes may share one database file: every connection runs in WAL mode
with a busy timeout, in autocommit mode (``isolation_level=None``) with explicit
``BEGIN IMMEDIATE`` (writes) / ``BEGIN`` (reads) … ``COMMIT``/``ROLLBACK``.

Schema (version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``; created
idempotently on open)::

    memories(seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- store sequence, never reused
             id TEXT UNIQUE, key TEXT UNIQUE NULL,
             content TEXT  -- JSON text, metadata TEXT NULL -- JSON object text,
             created_at TEXT, updated_at TEXT)          -- see ditto_worker.filters
    memories_fts USING fts5(body, grams)               -- rowid = memories.seq;
                                                       -- porter unicode61 tokenizer
    memory_vectors(seq INTEGER PRIMARY KEY,            -- = memories.seq (version 2)
                   embedding BLOB)                     -- float32 little-endian, unit length
    store_settings(name TEXT PRIMARY KEY, value TEXT)  -- e.g. 'embedding': identity JSON

Driver: the stdlib ``sqlite3``; a store with an embedding provider opens its connections
with ``pysqlite3`` (same DB-API, a newer SQLite that can load extensions) and loads
``sqlite-vec`` for ``vec_distance_cosine``. Both read and write the same file.

Driver errors never reach the caller: :func:`map_error` turns them into
``MemoryError("MEMORY_CANCELLED" | "MEMORY_BACKEND_ERROR", safe message)``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from ditto_plugin_sqlite.executions import DDL as EXECUTIONS_DDL
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.ports import MemoryCallOptions

__all__ = ["SCHEMA_VERSION", "driver_errors", "map_error", "open_connection", "transaction"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 3
_DDL: Final = (
    """CREATE TABLE IF NOT EXISTS memories (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        key TEXT UNIQUE,
        content TEXT NOT NULL,
        metadata TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS memories_created_at ON memories (created_at)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts
        USING fts5(body, grams, tokenize = 'porter unicode61 remove_diacritics 2')""",
    "CREATE TABLE IF NOT EXISTS memory_vectors (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS store_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    *EXECUTIONS_DDL,
)
_ERRORS: list[type[Exception]] = [sqlite3.Error]


def driver_errors() -> tuple[type[Exception], ...]:
    """The ``Error`` base classes of the drivers loaded so far (sqlite3, pysqlite3)."""
    return tuple(_ERRORS)
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_INTERRUPT: Final = 9


def cancelled_error() -> MemoryError:
    """The error of a call stopped by its cancel token (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


def map_error(exc: Exception) -> MemoryError:
    """A safe ``MemoryError`` for a driver error (no SQL, no driver text; MEM-ERR-4)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary == _SQLITE_INTERRUPT or "interrupted" in str(exc):
        return cancelled_error()
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        message = "the SQLite memory store is busy (locked by another writer)"
    elif type(exc).__name__ == "IntegrityError":
        message = "the SQLite memory store rejected the change (constraint violation)"
    else:
        message = "the SQLite memory store failed"
    logger.warning("sqlite memory store error: %s", type(exc).__name__)
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


def _vector_driver() -> Any:
    """``pysqlite3.dbapi2`` (its errors registered), or MEMORY_BACKEND_ERROR if missing."""
    try:
        from pysqlite3 import dbapi2
    except ImportError as exc:
        raise MemoryError(
            ErrorCode.MEMORY_BACKEND_ERROR,
            "SQLite vectors need pysqlite3-binary and sqlite-vec (ditto-worker[retrieval])",
        ) from exc
    if dbapi2.Error not in _ERRORS:
        _ERRORS.append(dbapi2.Error)
    return dbapi2


def _load_vec(conn: Any) -> None:
    try:
        import sqlite_vec
    except ImportError as exc:
        raise MemoryError(
            ErrorCode.MEMORY_BACKEND_ERROR,
            "SQLite vectors need sqlite-vec (ditto-worker[retrieval])",
        ) from exc
    conn.enable_load_extension(True)
    try:
        sqlite_vec.load(conn)
    finally:
        conn.enable_load_extension(False)


def open_connection(path: str, busy_timeout_ms: int, vectors: bool = False) -> sqlite3.Connection:
    """Open ``path`` (WAL, busy timeout, autocommit) and create the schema if needed.

    Args:
        path: the database file.
        busy_timeout_ms: lock wait, ms.
        vectors: open with ``pysqlite3`` and load ``sqlite-vec`` (``vec_distance_cosine``).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when the file cannot be opened, has a
            newer schema version, or (``vectors``) the driver or extension is missing.
    """
    driver: Any = _vector_driver() if vectors else sqlite3
    try:
        conn = driver.connect(
            path,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
    except driver_errors() as exc:
        raise map_error(exc) from exc
    try:
        if vectors:
            _load_vec(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        _ensure_schema(conn)
    except driver_errors() as exc:
        conn.close()
        raise map_error(exc) from exc
    except MemoryError:
        conn.close()
        raise
    opened: sqlite3.Connection = conn
    return opened


def _ensure_schema(conn: sqlite3.Connection) -> None:
    if _user_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _user_version(conn)
        if version > SCHEMA_VERSION:
            raise MemoryError(
                ErrorCode.MEMORY_BACKEND_ERROR,
                "the SQLite memory file was written by a newer version of the plugin",
            )
        if version < SCHEMA_VERSION:
            for statement in _DDL:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _rollback(conn: sqlite3.Connection) -> None:
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except driver_errors() as exc:  # the original error is being raised; keep it
        logger.warning("sqlite rollback failed: %s", type(exc).__name__)


@contextmanager
def transaction(
    conn: sqlite3.Connection, options: MemoryCallOptions | None, write: bool
) -> Iterator[sqlite3.Connection]:
    """Run the body in one transaction, interruptible by ``options.cancel``.

    ``BEGIN IMMEDIATE`` for writes (one writer at a time, waiting up to the busy timeout),
    ``BEGIN`` for reads (one snapshot). The cancel token's callback is
    ``conn.interrupt`` for the duration of the body; a token cancelled before COMMIT rolls
    the transaction back.

    Raises:
        MemoryError: ``MEMORY_CANCELLED`` when cancelled; ``MEMORY_BACKEND_ERROR`` for any
            driver error; a ``MemoryError`` raised by the body passes through (after
            ROLLBACK).
    """
    token = options.cancel if options is not None else None
    if token is not None and token.cancelled:
        raise cancelled_error()
    unregister = token.on_cancel(conn.interrupt) if token is not None else None
    try:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
            if token is not None and token.cancelled:
                raise cancelled_error()
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    except driver_errors() as exc:
        raise map_error(exc) from exc
    finally:
        if unregister is not None:
            unregister()
