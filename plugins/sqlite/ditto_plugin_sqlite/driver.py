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
or ``pysqlite3`` (the import-linter contract ``one-sqlite-library`` in ``pyproject.toml``,
and ``plugins/sqlite/tests/test_one_library.py`` for the tests and benches).

Opening and closing are serialized in the process (:func:`opening`; every connection made
here closes under it, explicitly or when collected). SQLite 3.51.0 and 3.51.1 (the
``pysqlite3-binary`` 0.5.4 wheels bundle 3.51.1) deadlock when one thread closes the last
connection of a WAL file (``sqlite3WalClose`` -> ``unixLock`` holds the file's lock mutex
and waits for the VFS mutex in ``unixIsSharingShmNode``) while another opens or closes the
same file (``unixOpen`` -> ``findReusableFd`` / ``unixClose`` hold the VFS mutex and wait
for the file's); fixed in SQLite 3.51.2 ("an obscure deadlock in the new broken-posix-lock
detection logic"). Four threads opening and closing one file hung in seconds here.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the DB-API both libraries implement (the stdlib's is typed)
    from sqlite3 import Connection as Connection
else:
    Connection = Any

__all__ = [
    "VECTOR_DRIVER",
    "Connection",
    "connect",
    "connection_class",
    "dbapi",
    "driver_name",
    "errors",
    "opening",
]

VECTOR_DRIVER: Final = "pysqlite3"
"""The library a store with an embedder needs (it loads sqlite-vec)."""
_lock = threading.Lock()
_chosen: list[ModuleType] = []
_classes: list[type[Any]] = []
_gate = threading.RLock()  # reentrant: a collected connection may close inside a gated call


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


def opening() -> AbstractContextManager[Any]:
    """The process's open/close lock: hold it around an open and the statements that
    create a file or switch it to WAL (the other place SQLite 3.51.1 takes the two
    mutexes in the deadlocking order; see the module doc)."""
    return _gate


def connection_class() -> type[Any]:
    """The library's ``Connection`` whose ``close`` (and close on collection) holds
    :func:`opening`; :func:`connect` makes these, and a ``factory`` must subclass it."""
    if not _classes:
        base = dbapi().Connection  # chosen before _lock is taken (dbapi takes it too)
        with _lock:
            if not _classes:
                _classes.append(_make_class(base))
    return _classes[0]


def _make_class(base: type[Any]) -> type[Any]:
    base_error: type[Exception] = dbapi().Error

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)
        self.opened = True  # a failed open is never closed: the library crashes on it

    def close(self: Any) -> None:
        with _gate:
            base.close(self)

    def finalize(self: Any) -> None:
        if self.opened:
            try:
                self.close()  # a subclass's close too
            except base_error:  # collected in another thread (check_same_thread): the
                return  # library's own dealloc closes it, ungated

    namespace = {
        "__module__": base.__module__,
        "__init__": init,
        "opened": False,
        "close": close,
        "__del__": finalize,
    }
    return type("Connection", (base,), namespace)


def connect(path: str | os.PathLike[str], **kwargs: Any) -> Connection:
    """Open ``path`` with the process's library (:func:`dbapi`), under :func:`opening`.

    Args:
        path: the database file (``":memory:"`` for none).
        **kwargs: ``connect`` keywords of the DB-API (``timeout`` in s,
            ``isolation_level``, ``check_same_thread``, ``factory`` (a subclass of
            :func:`connection_class`) ...).

    Raises:
        TypeError: ``factory`` does not subclass :func:`connection_class`.
        Exception: the library's ``OperationalError`` when the file cannot be opened.
    """
    factory = kwargs.setdefault("factory", connection_class())
    if not issubclass(factory, connection_class()):
        raise TypeError("factory must subclass ditto_plugin_sqlite.driver.connection_class()")
    with _gate:
        conn: Connection = dbapi().connect(os.fspath(path), **kwargs)
    return conn
