"""Connections, schema, transactions and error mapping of the SQLite store.

Several worker processes may share one database file: every connection runs in WAL mode
with a busy timeout, in autocommit mode (``isolation_level=None``) with explicit
``BEGIN IMMEDIATE`` (writes) / ``BEGIN`` (reads) … ``COMMIT``/``ROLLBACK``.

Schema (version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``; created
idempotently on open)::

    memories(seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- store sequence, never reused
             namespace TEXT,                           -- tenant scope (version 4)
             id TEXT UNIQUE, key TEXT NULL,            -- UNIQUE (namespace, key)
             content TEXT  -- JSON text, metadata TEXT NULL -- JSON object text,
             created_at TEXT, updated_at TEXT)          -- see ditto_worker.memory.filters
    memories_fts … keyword_scopes                      -- the keyword index (version 5;
                                                       -- ditto_plugin_sqlite.fts)
    memory_vectors(seq INTEGER PRIMARY KEY,            -- = memories.seq (version 2)
                   embedding BLOB)                     -- float32 little-endian, unit length
    store_settings(name TEXT PRIMARY KEY, value TEXT)  -- 'embedding': identity JSON,
                                                       -- 'cursor_secret' (settings.py)
    memory_vector_codes, memory_vector_log             -- the approximate vector index
                                                       -- (ditto_plugin_sqlite.ann; made
                                                       -- by a connection with vectors)

Driver: the process's one SQLite library (:mod:`ditto_plugin_sqlite.driver`: ``pysqlite3``
when installed, else the stdlib ``sqlite3``) opens every connection, with or without an
embedding provider; two libraries on one file break each other's POSIX locks. A store
with a provider needs ``pysqlite3`` (a newer SQLite that can load extensions) and loads
``sqlite-vec`` for ``vec_distance_cosine``.

Faults (issue 7, ``tests/integration/test_storage_faults.py``): a connection remembers
the file it opened (device and inode); a transaction first checks that the store's path
still names that file, so a database whose folder was removed, moved or unmounted, or
whose file was replaced, fails with ``MEMORY_BACKEND_ERROR`` instead of being written in
a file no one else sees. Such a connection, and one that hit an I/O, disk-full or
damaged-file error, is marked broken (:func:`usable` is false) and the store opens a new
one for the next call, so service resumes when the file is back. A lock wait ends at the
call's deadline (``MEMORY_TIMEOUT``) when that comes before the busy timeout.

Driver errors never reach the caller: :func:`map_error` turns them into
``MemoryError("MEMORY_CANCELLED" | "MEMORY_BACKEND_ERROR", safe message)``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from ditto_plugin_sqlite import driver
from ditto_plugin_sqlite.ann import ensure_tables
from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.fts import DDL as FTS_DDL
from ditto_plugin_sqlite.upgrades import upgrade
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.sqlkit.serial_ledger import ledger_ddl

__all__ = [
    "SCHEMA_VERSION",
    "driver_errors",
    "map_error",
    "open_connection",
    "transaction",
    "usable",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 8
"""4: tenant namespaces; 5: the keyword index of Python terms with per-scope statistics
(rebuilt in place from the stored records on first open, :func:`_rebuild_keywords`);
6: operation ids (``memories.operation_id`` and the ``operations`` ledger); 7: each keyword
scope's fewest terms of a record (``keyword_scopes.shortest``, :func:`.fts.add_shortest`);
8: the ``operations`` ledger indexed by ``created_at`` (its retention, issue 37)."""
_MEMORIES: Final = """CREATE TABLE IF NOT EXISTS memories (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL DEFAULT '',
        id TEXT NOT NULL UNIQUE,
        key TEXT,
        content TEXT NOT NULL,
        metadata TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        operation_id TEXT
    )"""
_DDL: Final = (
    _MEMORIES,
    "CREATE INDEX IF NOT EXISTS memories_created_at ON memories (created_at)",
    "CREATE UNIQUE INDEX IF NOT EXISTS memories_namespace_key ON memories (namespace, key)",
    "CREATE INDEX IF NOT EXISTS memories_namespace_seq ON memories (namespace, seq)",
    *FTS_DDL,
    "CREATE TABLE IF NOT EXISTS memory_vectors (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS store_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    *ledger_ddl(),
)
MMAP_BYTES: Final = 1 << 36
"""``PRAGMA mmap_size`` of a connection with vectors (reads only; SQLite caps it at its
compile-time limit)."""


def driver_errors() -> tuple[type[Exception], ...]:
    """The ``Error`` base class of the process's SQLite library (:mod:`.driver`)."""
    return driver.errors()


_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_INTERRUPT: Final = 9
_SQLITE_CONSTRAINT: Final = 19
_MESSAGES: Final = {  # primary result code -> safe message
    8: "the SQLite memory file is read-only",
    10: "the SQLite memory store had an I/O error",
    11: "the SQLite memory file is damaged or is not an SQLite file",
    13: "the disk of the SQLite memory store is full",
    14: "the SQLite memory file cannot be opened",
    26: "the SQLite memory file is damaged or is not an SQLite file",
}
_MISSING_MESSAGE: Final = (
    "the SQLite memory file is missing or was replaced (its folder removed, moved or unmounted)"
)
_connection_classes: dict[Any, type[Any]] = {}


def _connection_class(module: type[Any]) -> type[Any]:
    """``module`` (:func:`.driver.connection_class`) with room for the fault state."""
    cls = _connection_classes.get(module)
    if cls is None:
        cls = type(
            "MemoryConnection",
            (module,),
            {  # reported under the library's module: it is that library's connection
                "__module__": module.__module__,
                "file_id": None,
                "busy_timeout_ms": 0,
                "broken": False,
                "path": "",
            },
        )
        _connection_classes[module] = cls
    return cls


def usable(conn: Connection) -> bool:
    """False (and ``conn`` closed) once a fault marked it broken: open a new one."""
    if not getattr(conn, "broken", False):
        return True
    try:
        conn.close()
    except driver_errors() as exc:
        logger.info("sqlite close of a broken connection failed: %s", type(exc).__name__)
    return False


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def cancelled_error() -> MemoryError:
    """The error of a call stopped by its cancel token (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


def _primary(exc: Exception) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def map_error(exc: Exception, options: MemoryCallOptions | None = None) -> MemoryError:
    """A safe ``MemoryError`` for a driver error (no SQL, no driver text, no path; MEM-ERR-4).

    An interrupt is ``MEMORY_CANCELLED``; a lock wait that ended past the call's deadline
    is ``MEMORY_TIMEOUT``; anything else ``MEMORY_BACKEND_ERROR`` with a message chosen by
    the SQLite result code (busy, disk full, I/O error, damaged file, cannot open ...).
    """
    primary = _primary(exc)
    if primary == _SQLITE_INTERRUPT or "interrupted" in str(exc):
        return cancelled_error()
    logger.warning("sqlite memory store error: %s (code %s)", type(exc).__name__, primary)
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        remaining = options.remaining_s if options is not None else None
        if remaining is not None and remaining <= 0:
            return MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
        message = "the SQLite memory store is busy (locked by another writer)"
    elif type(exc).__name__ == "IntegrityError":
        message = "the SQLite memory store rejected the change (constraint violation)"
    else:
        message = _MESSAGES.get(primary or 0, "the SQLite memory store failed")
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


def _fatal(exc: Exception) -> bool:
    """True when the connection should not be reused (I/O, full disk, damaged file ...)."""
    primary = _primary(exc)
    return primary not in (_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_INTERRUPT, _SQLITE_CONSTRAINT)


def _check_vector_driver() -> None:
    """MEMORY_BACKEND_ERROR unless the process's library is ``pysqlite3`` (see module doc)."""
    if driver.driver_name() != driver.VECTOR_DRIVER:
        raise MemoryError(
            ErrorCode.MEMORY_BACKEND_ERROR,
            "SQLite vectors need pysqlite3-binary and sqlite-vec (ditto-worker[retrieval])",
        )


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


def open_connection(path: str, busy_timeout_ms: int, vectors: bool = False) -> Connection:
    """Open ``path`` (WAL, busy timeout, autocommit) and create the schema if needed.

    Args:
        path: the database file.
        busy_timeout_ms: lock wait, ms.
        vectors: load ``sqlite-vec`` (``vec_distance_cosine``); needs ``pysqlite3``.

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when the file cannot be opened, has a
            newer schema version, or (``vectors``) the driver or extension is missing.
    """
    if vectors:
        _check_vector_driver()
    try:
        conn: Any = driver.connect(  # Any: the fault state below is the factory's
            path,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
            factory=_connection_class(driver.connection_class()),
        )
    except driver_errors() as exc:
        raise map_error(exc) from exc
    try:
        if vectors:
            _load_vec(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        with driver.opening():  # a new file: its switch to WAL locks as a close does
            conn.execute("PRAGMA journal_mode = WAL")
        _ensure_schema(conn)
        if vectors:  # reads of scattered vectors through the page cache: 4x faster rescoring
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            ensure_tables(conn)  # the approximate index's codes and change log (ann.py)
        conn.file_id, conn.path = _file_id(path), path  # None: not a file (":memory:")
        conn.busy_timeout_ms = int(busy_timeout_ms)
    except driver_errors() as exc:
        conn.close()
        raise map_error(exc) from exc
    except MemoryError:
        conn.close()
        raise
    opened: Connection = conn
    return opened


def _ensure_schema(conn: Connection) -> None:
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
        if 0 < version:
            upgrade(conn, version, _MEMORIES)
        if version < SCHEMA_VERSION:
            for statement in _DDL:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _user_version(conn: Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _rollback(conn: Connection) -> None:
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except driver_errors() as exc:  # the original error is being raised; keep it
        logger.warning("sqlite rollback failed: %s", type(exc).__name__)


@contextmanager
def transaction(
    conn: Connection, options: MemoryCallOptions | None, write: bool,
    snapshot: bool = True,
) -> Iterator[Connection]:  # fmt: skip
    """Run the body in one transaction, interruptible by ``options.cancel``.

    ``BEGIN IMMEDIATE`` for writes (one writer at a time, waiting up to the busy timeout),
    ``BEGIN`` for reads (one snapshot). A read of one statement passes ``snapshot=False``:
    no ``BEGIN``/``COMMIT`` around it (one SELECT is its own snapshot in SQLite), two
    round trips to the engine fewer. The cancel token's callback is
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
    _check_file(conn)
    unregister = token.on_cancel(conn.interrupt) if token is not None else None
    bounded = _bound_busy_wait(conn, options)
    try:
        explicit = write or snapshot
        if explicit:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
            if token is not None and token.cancelled:
                raise cancelled_error()
            if explicit:
                conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    except driver_errors() as exc:
        if _fatal(exc):
            conn.broken = True  # type: ignore[attr-defined]
        raise map_error(exc, options) from exc
    finally:
        if unregister is not None:
            unregister()
        if bounded:
            _set_busy_timeout(conn, getattr(conn, "busy_timeout_ms", 0))


def _check_file(conn: Connection) -> None:
    """Raise (and mark ``conn`` broken) when its path no longer names the file it opened."""
    opened = getattr(conn, "file_id", None)
    if opened is None or _file_id(getattr(conn, "path", "")) == opened:
        return
    conn.broken = True  # type: ignore[attr-defined]
    logger.warning("sqlite memory store: the database file is missing or was replaced")
    raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, _MISSING_MESSAGE)


def _bound_busy_wait(conn: Connection, options: MemoryCallOptions | None) -> bool:
    """Shorten the lock wait to the call's deadline; True when the busy timeout was changed."""
    remaining = options.remaining_s if options is not None else None
    configured = getattr(conn, "busy_timeout_ms", 0)
    if remaining is None or not configured or remaining * 1000 >= configured:
        return False
    _set_busy_timeout(conn, max(1, math.ceil(remaining * 1000) + 1))
    return True


def _set_busy_timeout(conn: Connection, ms: int) -> None:
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(ms)}")
    except driver_errors() as exc:  # a broken connection; it is replaced before reuse
        logger.info("sqlite busy_timeout not set: %s", type(exc).__name__)
