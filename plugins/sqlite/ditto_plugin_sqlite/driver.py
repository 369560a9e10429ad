"""The one SQLite library of the process: every SQLite file is opened through this module.

Two copies of SQLite in one process must never open the same database file: each keeps
its own table of open files and POSIX advisory locks, and ``close()`` of a descriptor in
one drops every ``fcntl`` lock the process holds on that file, the other library's
included. Another process may then write while this one believes it holds the lock:
lost writes and "database disk image is malformed" (https://www.sqlite.org/howtocorrupt.html
section 2.2.1, "Multiple copies of SQLite linked into the same application"). Before,
the stdlib ``sqlite3`` opened a store without an embedder and ``pysqlite3`` one with an
embedder, and both met in one process on one file.

The library is chosen once per process, on first use (not at import): ``pysqlite3``
(``pysqlite3-binary``, the ``retrieval`` extra: a newer SQLite that loads extensions such
as sqlite-vec) when it is importable, else the stdlib ``sqlite3`` (the core install). The
store (:mod:`ditto_plugin_sqlite.db`), the bench scripts and the tests all open files
with :func:`connect` or :func:`dbapi`; no other module of the project imports ``sqlite3``
or ``pysqlite3`` (an import-linter contract in ``pyproject.toml``, and
``tests/unit/test_sqlite_driver.py`` for the tests and benches).
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the DB-API both libraries implement (the stdlib's is typed)
    from sqlite3 import Connection as Connection
else:
    Connection = Any

__all__ = ["VECTOR_DRIVER", "Connection", "connect", "dbapi", "driver_name", "errors"]

VECTOR_DRIVER: Final = "pysqlite3"
"""The library a store with an embedder needs (it loads sqlite-vec)."""
_lock = threading.Lock()
_chosen: list[ModuleType] = []


def dbapi() -> ModuleType:
    """The DB-API 2 module of the process's SQLite library, chosen on the first call.

    Returns:
        ``pysqlite3.dbapi2`` when ``pysqlite3`` is importable, else the stdlib ``sqlite3``;
        the same module for every later call in this process.
    """
    if not _chosen:
        with _lock:
            if not _chosen:
                _chosen.append(_import_first())
    return _chosen[0]


def _import_first() -> ModuleType:
    try:
        from pysqlite3 import dbapi2
    except ImportError:
        import sqlite3

        return sqlite3
    module: ModuleType = dbapi2  # untyped: pysqlite3 ships no stubs
    return module


def driver_name() -> str:
    """``"pysqlite3"`` or ``"sqlite3"``: the top-level package of :func:`dbapi`."""
    return dbapi().__name__.partition(".")[0]


def errors() -> tuple[type[Exception], ...]:
    """The library's ``Error`` base class, as a tuple for ``except``."""
    error: type[Exception] = dbapi().Error
    return (error,)


def connect(path: str | os.PathLike[str], **kwargs: Any) -> Connection:
    """Open ``path`` with the process's library (:func:`dbapi`).

    Args:
        path: the database file (``":memory:"`` for none).
        **kwargs: ``connect`` keywords of the DB-API (``timeout`` in s,
            ``isolation_level``, ``check_same_thread``, ``factory`` ...).

    Raises:
        Exception: the library's ``OperationalError`` when the file cannot be opened.
    """
    conn: Connection = dbapi().connect(os.fspath(path), **kwargs)
    return conn
