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

Driver errors never reach the caller: :func:`map_error` turns them into
``MemoryError("MEMORY_CANCELLED" | "MEMORY_BACKEND_ERROR", safe message)``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.ports import MemoryCallOptions

__all__ = ["SCHEMA_VERSION", "map_error", "open_connection", "transaction"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
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
)
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_INTERRUPT: Final = 9


def cancelled_error() -> MemoryError:
    """The error of a call stopped by its cancel token (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


def map_error(exc: sqlite3.Error) -> MemoryError:
    """A safe ``MemoryError`` for a driver error (no SQL, no driver text; MEM-ERR-4)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary == _SQLITE_INTERRUPT or "interrupted" in str(exc):
        return cancelled_error()
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        message = "the SQLite memory store is busy (locked by another writer)"
    elif isinstance(exc, sqlite3.IntegrityError):
        message = "the SQLite memory store rejected the change (constraint violation)"
    else:
        message = "the SQLite memory store failed"
    logger.warning("sqlite memory store error: %s", type(exc).__name__)
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


def open_connection(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open ``path`` (WAL, busy timeout, autocommit) and create the schema if needed.

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when the file cannot be opened or has a
            newer schema version.
    """
    try:
        conn = sqlite3.connect(
            path,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise map_error(exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        _ensure_schema(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise map_error(exc) from exc
    except MemoryError:
        conn.close()
        raise
    return conn


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
    except sqlite3.Error as exc:  # the original error is being raised; keep it
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
    except sqlite3.Error as exc:
        raise map_error(exc) from exc
    finally:
        if unregister is not None:
            unregister()
