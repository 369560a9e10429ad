"""Connections, pool, transactions, cancellation and error mapping of the MySQL store.

Driver: PyMySQL (pure Python: nothing to compile, no client library to install; it
speaks the protocol of MySQL 8 and MariaDB alike). Pool: SQLAlchemy's ``QueuePool`` over
PyMySQL connections (the pool only, no engine or ORM): ``poolMaxSize`` connections per
process, a call waits at most ``poolTimeoutS`` (or until its deadline) for one. A pooled
connection is checked before use by a ``checkout`` listener (the pool's documented
pessimistic disconnect handling): when its idle socket is readable, the server has closed
it (restart, cut), so the listener raises ``DisconnectionError`` and the pool replaces it.

Every connection is opened with ``utf8mb4``, autocommit on (a write runs between
``BEGIN`` and ``COMMIT``), ``READ COMMITTED`` and a fixed ``sql_mode`` without
``NO_BACKSLASH_ESCAPES`` (PyMySQL escapes bound parameters with backslashes on the client
side; a server default that turned them off would break that escaping).

Cancellation reaches the server: a call's cancel token, and its deadline, run ``KILL
QUERY <connection id>`` on a separate short-lived connection, which stops the running
statement (error 1317); the transaction is rolled back. A server that does not answer
at all (a frozen network) is cut on the client side shortly after the deadline (the
socket is shut down), so the call ends with ``MEMORY_TIMEOUT`` instead of hanging.

Driver errors never reach the caller: :func:`map_error` turns them into
``MemoryError("MEMORY_CANCELLED" | "MEMORY_TIMEOUT" | "MEMORY_BACKEND_ERROR" |
"CONFLICT", safe message)`` — no URL, host, user, password, SQL or server text
(MEM-ERR-4). Only the exception class and the server's error number are logged.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import pymysql
from sqlalchemy import event, exc
from sqlalchemy.pool import QueuePool

from ditto_plugin_mysql.cancel import Watch
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = [
    "Conn",
    "ServerAddress",
    "cancelled_error",
    "connect",
    "map_error",
    "open_pool",
    "parse_url",
    "timeout_error",
    "transaction",
]

logger = logging.getLogger(__name__)

Conn = pymysql.connections.Connection
"""A PyMySQL connection (``Any`` stops here: rows are tuples of driver values)."""

SQL_MODE: Final = (
    "STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)
"""The session ``sql_mode`` (module docstring: never ``NO_BACKSLASH_ESCAPES``)."""

_INTERRUPTED: Final = frozenset({1317, 3024, 1969})
"""Query interrupted (``KILL QUERY``), MySQL's ``max_execution_time``, MariaDB's
``max_statement_time``."""
_DUPLICATE: Final = 1062
_NO_TABLE: Final = 1146
_NO_DATABASE: Final = 1049
_ACCESS: Final = frozenset({1044, 1045, 1142, 1227, 1698})
_LOCK: Final = frozenset({1205, 1213})
_LOST: Final = frozenset({2006, 2013, 2014, 2055, 4031})
_UNREACHABLE: Final = frozenset({2002, 2003, 2005})
_LOST_MESSAGE: Final = "the connection to the MySQL memory store was lost"


@dataclass(frozen=True)
class ServerAddress:
    """Where and as whom to connect; parsed from the URL, never logged or shown."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str = ""
    unix_socket: str | None = None


def parse_url(url: str) -> ServerAddress:
    """``mysql://user:password@host:port/database`` (also ``mariadb://``,
    ``mysql+pymysql://``; ``?unix_socket=/path`` for a local socket).

    Raises:
        ValueError: another scheme or a malformed URL (the message never quotes it).
    """
    try:
        parts = urlsplit(url)
        port = parts.port or 3306
    except ValueError:
        raise ValueError("the MySQL URL is malformed") from None
    if parts.scheme not in ("mysql", "mariadb", "mysql+pymysql", "mariadb+pymysql"):
        raise ValueError("the MySQL URL must start with mysql:// or mariadb://")
    query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    return ServerAddress(
        host=parts.hostname or "127.0.0.1",
        port=port,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=unquote(parts.path.lstrip("/")),
        unix_socket=unquote(query["unix_socket"]) if "unix_socket" in query else None,
    )


def cancelled_error() -> MemoryError:
    """The error of a call stopped by its cancel token (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


def timeout_error() -> MemoryError:
    """The error of a call whose deadline passed (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")


def _code(error: BaseException) -> int:
    args = getattr(error, "args", ())
    return int(args[0]) if args and isinstance(args[0], int) else 0


def connect_error(error: BaseException) -> MemoryError:
    """A safe error for a failed connection attempt (no URL, host, user or password)."""
    code = _code(error)
    if code in _ACCESS:
        reason = "authentication failed"
    elif code == _NO_DATABASE:
        reason = "the database does not exist"
    elif code in _UNREACHABLE or isinstance(error, OSError):
        reason = "the server is not reachable"
    else:
        reason = "the connection settings were rejected"
    logger.warning("mysql memory store: cannot connect (%s %s)", type(error).__name__, code)
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR, f"cannot connect to the MySQL memory store: {reason}"
    )


def map_error(
    error: BaseException, options: MemoryCallOptions | None = None, deadline_hit: bool = False
) -> MemoryError:
    """A safe ``MemoryError`` for a driver error during a call (MEM-ERR-4).

    An interrupted statement becomes ``MEMORY_CANCELLED`` when the call's token was
    cancelled, else ``MEMORY_TIMEOUT``; a duplicate key ``CONFLICT``; everything else
    ``MEMORY_BACKEND_ERROR`` with a message chosen by the server's error number.
    """
    token = options.cancel if options is not None else None
    if token is not None and token.cancelled:
        return cancelled_error()
    code = _code(error)
    if code in _INTERRUPTED or (deadline_hit and code in _LOST):
        return timeout_error()
    logger.warning("mysql memory store error: %s (%s)", type(error).__name__, code)
    if code == _DUPLICATE:
        return MemoryError(ErrorCode.CONFLICT, "a key already exists in the store")
    lost = code == 0 and isinstance(error, OSError | pymysql.err.OperationalError
                                    | pymysql.err.InterfaceError)  # fmt: skip
    if code in _LOST or code in _UNREACHABLE or lost:
        return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, _LOST_MESSAGE)
    if code == _NO_TABLE:
        message = "the MySQL memory schema is missing; run `ditto-worker migrate`"
    elif code in _LOCK:
        message = "the MySQL memory store aborted the transaction (lock); nothing was applied"
    elif code in _ACCESS:
        message = "the MySQL memory store refused the statement (privileges)"
    else:
        message = "the MySQL memory store failed"
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


def connect(address: ServerAddress, connect_timeout_s: float, database: str | None = None) -> Conn:
    """One autocommit ``utf8mb4`` connection (module docstring), to ``database`` (``None``:
    the URL's; ``""``: none).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` with a safe message when it fails.
    """
    name = address.database if database is None else database
    try:
        conn = pymysql.connect(
            host=address.host,
            port=address.port,
            user=address.user,
            password=address.password,
            database=name or None,
            unix_socket=address.unix_socket,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=max(1, int(round(connect_timeout_s))),
        )
        with conn.cursor() as cur:  # one statement each: both servers accept these forms
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION sql_mode = %s", [SQL_MODE])
        return conn
    except (pymysql.MySQLError, OSError) as error:
        raise connect_error(error) from None


def _stale(dbapi_connection: Any) -> bool:
    """True when an idle connection's socket is readable (the server closed it)."""
    sock = getattr(dbapi_connection, "_sock", None)
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def open_pool(
    address: ServerAddress,
    database: str,
    max_size: int,
    connect_timeout_s: float,
    pool_timeout_s: float,
) -> QueuePool:
    """A ``QueuePool`` of at most ``max_size`` connections to ``database`` (opened lazily).

    A connection that cannot be made raises ``MemoryError`` (``MEMORY_BACKEND_ERROR``,
    safe message) from the checkout.
    """

    def create() -> Any:  # the DBAPI connection (SQLAlchemy's creator type)
        return connect(address, connect_timeout_s, database)

    pool = QueuePool(
        create,
        pool_size=max_size,
        max_overflow=0,
        timeout=pool_timeout_s,
        reset_on_return="rollback",
        use_lifo=True,
    )

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if _stale(dbapi_connection):
            raise exc.DisconnectionError("stale pooled connection")

    event.listen(pool, "checkout", checkout)
    return pool


def _checkout(pool: QueuePool, options: MemoryCallOptions | None) -> Any:
    """A pooled connection (its pool proxy), waiting at most until the deadline."""
    remaining = options.remaining_s if options is not None else None
    try:
        if remaining is not None and remaining < pool.timeout():
            return _checkout_within(pool, remaining)
        return pool.connect()
    except exc.TimeoutError:
        if remaining is not None and remaining <= pool.timeout():
            raise timeout_error() from None
        raise MemoryError(
            ErrorCode.MEMORY_BACKEND_ERROR,
            "no MySQL memory store connection was free within the pool timeout",
        ) from None
    except exc.DisconnectionError:
        raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, _LOST_MESSAGE) from None


def _checkout_within(pool: QueuePool, wait_s: float) -> Any:
    """``pool.connect()`` with a shorter wait than the pool's timeout."""
    saved = pool._timeout  # QueuePool keeps its wait here; restored at once
    pool._timeout = max(0.0, wait_s)
    try:
        return pool.connect()
    finally:
        pool._timeout = saved


@contextmanager
def transaction(
    pool: QueuePool,
    address: ServerAddress,
    options: MemoryCallOptions | None,
    write: bool = True,
) -> Iterator[Conn]:
    """One call on a pooled connection: between ``BEGIN`` and ``COMMIT`` when ``write``
    (else autocommit statements), cancellable and bounded by the deadline.

    Raises:
        MemoryError: ``MEMORY_CANCELLED`` when the token fires (nothing is committed);
            ``MEMORY_TIMEOUT`` when the deadline passes; ``MEMORY_BACKEND_ERROR`` when
            the server cannot be reached, the connection is lost or no pooled
            connection is free within ``pool_timeout_s``; ``CONFLICT`` for a duplicate
            key. A ``MemoryError`` raised by the body passes through after ROLLBACK.
    """
    token = options.cancel if options is not None else None
    if token is not None and token.cancelled:
        raise cancelled_error()
    proxy = _checkout(pool, options)
    conn: Conn = proxy.dbapi_connection
    watch = Watch(conn, address, options, connect)
    try:
        with watch:
            if write:
                conn.begin()
            yield conn
            if token is not None and token.cancelled:
                raise cancelled_error()
            if write:
                conn.commit()
    except (pymysql.MySQLError, OSError) as error:
        proxy.invalidate()  # never reuse a connection in an unknown state
        raise map_error(error, options, watch.deadline_hit) from None
    except BaseException:
        _rollback(proxy, conn)
        raise
    finally:
        if proxy.is_valid:
            proxy.close()


def _rollback(proxy: Any, conn: Conn) -> None:
    try:
        conn.rollback()
    except (pymysql.MySQLError, OSError):
        proxy.invalidate()
