"""DuckDB's driver and connection handling for the example store.

One DuckDB file (or ``:memory:``) per store object, in one process (DuckDB locks the
file). Every thread reads and writes through its own cursor of the store's connection
(DuckDB's way to share one database between threads); one write transaction runs at a
time (the store's write lock), so the exactly-once ledgers are look-ups
(:class:`ditto_worker.sqlkit.serial_ledger.SerialLedger`). A driver error is
``MEMORY_BACKEND_ERROR`` naming only its type (no SQL, no values); the cancel token is
checked before the transaction and before COMMIT (``MEMORY_CANCELLED``, nothing
committed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import duckdb

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.cursors import new_cursor_secret
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.sqlkit.serial_ledger import ledger_ddl

__all__ = ["Database"]

SCHEMA: Final = (
    "CREATE SEQUENCE IF NOT EXISTS memory_seq START 1",
    """CREATE TABLE IF NOT EXISTS memories (
        seq BIGINT NOT NULL DEFAULT nextval('memory_seq'), namespace VARCHAR NOT NULL,
        id VARCHAR NOT NULL, key VARCHAR, content VARCHAR NOT NULL, metadata JSON,
        operation_id VARCHAR, created_at VARCHAR NOT NULL, updated_at VARCHAR NOT NULL,
        terms INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS memory_terms (
        namespace VARCHAR NOT NULL, seq BIGINT NOT NULL, term VARCHAR NOT NULL,
        tf INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS store_settings (name VARCHAR PRIMARY KEY, value VARCHAR)",
    *ledger_ddl("VARCHAR", "DOUBLE"),
)
"""The tables: records (``terms``: the record's keyword length), their keyword terms,
the cursor secret, the two ledgers."""


def _failed(exc: BaseException) -> MemoryError:
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR, f"the DuckDB memory store failed ({type(exc).__name__})"
    )


def _check_cancel(options: MemoryCallOptions | None) -> None:
    token = options.cancel if options is not None else None
    if token is not None and token.cancelled:
        raise MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


class Database:
    """One DuckDB database: a cursor per thread, serialized write transactions.

    Args:
        path: the database file (its folder is created), or ``":memory:"``.
    """

    def __init__(self, path: str | Path) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = duckdb.connect(str(path))
            for statement in SCHEMA:
                self._conn.execute(statement)
            self._conn.execute(
                "INSERT INTO store_settings VALUES ('cursor_secret', ?) ON CONFLICT DO NOTHING",
                [new_cursor_secret()],
            )
            row = self._conn.execute(
                "SELECT value FROM store_settings WHERE name = 'cursor_secret'"
            ).fetchone()
        except duckdb.Error as exc:
            raise _failed(exc) from exc
        self.cursor_secret = str(row[0]) if row else ""
        self._local = threading.local()
        self._write_lock = threading.Lock()

    def _cursor(self) -> Any:
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = self._conn.cursor()
        return cursor

    @contextmanager
    def read(self, options: MemoryCallOptions | None) -> Iterator[Any]:
        """A cursor for reads (each statement sees every committed write)."""
        _check_cancel(options)
        try:
            yield self._cursor()
        except duckdb.Error as exc:
            raise _failed(exc) from exc

    @contextmanager
    def write(self, options: MemoryCallOptions | None) -> Iterator[Any]:
        """A write transaction, alone (the write lock): committed when the block ends,
        rolled back when it raises or the call was cancelled meanwhile."""
        _check_cancel(options)
        with self._write_lock:
            cursor = self._cursor()
            try:
                cursor.begin()
                try:
                    yield cursor
                    _check_cancel(options)
                except BaseException:
                    cursor.rollback()
                    raise
                cursor.commit()
            except duckdb.Error as exc:
                raise _failed(exc) from exc

    def close(self) -> None:
        """Close the database (idempotent)."""
        self._conn.close()
