"""Connections, transactions, cancellation and error mapping of the PostgreSQL store.

Connections come from a ``psycopg_pool.ConnectionPool`` (autocommit connections; every
call runs inside one explicit ``conn.transaction()``). A call's cancel token sends a
protocol-level cancel request for the running statement (``conn.cancel_safe()``); its
deadline becomes ``SET LOCAL statement_timeout`` (MEM-RUN-2, MEM-PY-2).

Faults (issue 7, ``tests/integration/test_storage_faults.py``): a call waits for a pooled
connection at most until its deadline (else ``pool_timeout_s``); an idle pooled connection
whose socket has something to read (the server closed it, or a proxy cut it) is discarded
before use; once a connection fails, the server is marked unreachable and later calls probe
it with one direct connection first, so a stopped server or a cut network fails at once
with ``MEMORY_BACKEND_ERROR`` instead of waiting, and the first call after it returns is
served (the pool gives a failed reconnection up at once instead of backing off for
minutes); a statement whose server never answers is stopped on the client side shortly
after the call's deadline (``MEMORY_TIMEOUT``).

Driver errors never reach the caller: :func:`map_error` turns them into
``MemoryError("MEMORY_CANCELLED" | "MEMORY_TIMEOUT" | "MEMORY_BACKEND_ERROR", safe
message)`` — no URL, host, user, password, SQL or server text (MEM-ERR-4). Only the
exception class and SQLSTATE are logged. Connection failures are raised ``from None``: a
psycopg message about a malformed conninfo may quote it, password included.
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
import psycopg_pool

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import CancelToken, MemoryCallOptions

__all__ = [
    "cancelled_error",
    "connect",
    "connect_error",
    "map_error",
    "open_pool",
    "transaction",
]

logger = logging.getLogger(__name__)

_QUERY_CANCELED: Final = "57014"
_UNIQUE_VIOLATION: Final = "23505"
_UNDEFINED_TABLE: Final = "42P01"
_CLASS_MESSAGES: Final = {
    "08": "the PostgreSQL memory store connection failed",
    "28": "the PostgreSQL memory store rejected the credentials",
    "3D": "the PostgreSQL memory store database does not exist",
    "40": "the PostgreSQL memory store aborted the transaction (conflict); nothing was applied",
    "53": "the PostgreSQL memory store is out of resources",
    "57": "the PostgreSQL memory store is shutting down or unavailable",
}


def cancelled_error() -> MemoryError:
    """The error of a call stopped by its cancel token (MEM-RUN-2)."""
    return MemoryError(ErrorCode.MEMORY_CANCELLED, "the memory call was cancelled")


_LOST_MESSAGE: Final = "the connection to the PostgreSQL memory store was lost"
_DEADLINE_GRACE_S: Final = 0.25
"""How long after the call's deadline a statement the server does not answer is cut."""
_unreachable: weakref.WeakSet[psycopg_pool.ConnectionPool] = weakref.WeakSet()
"""Pools whose server failed the last connection attempt (probed before the next call)."""


def connect_error(exc: BaseException) -> MemoryError:
    """A safe error for a failed connection attempt (no URL, host, user or password)."""
    text = str(exc).lower()
    if "password" in text or "authentication" in text:
        reason = "authentication failed"
    elif "does not exist" in text:
        reason = "the database or role does not exist"
    elif "timeout" in text or "timed out" in text:
        reason = "the connection timed out"
    elif "refused" in text or "could not connect" in text or "connection failed" in text:
        reason = "the server is not reachable"
    else:
        reason = "the connection settings were rejected"
    logger.warning("postgres memory store: cannot connect (%s)", type(exc).__name__)
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR, f"cannot connect to the PostgreSQL memory store: {reason}"
    )


def map_error(exc: psycopg.Error, options: MemoryCallOptions | None = None) -> MemoryError:
    """A safe ``MemoryError`` for a driver error during a call (MEM-ERR-4).

    ``57014`` (query canceled) becomes ``MEMORY_CANCELLED`` when the call's token was
    cancelled, ``MEMORY_TIMEOUT`` when its deadline passed; other errors become
    ``MEMORY_BACKEND_ERROR`` with a message chosen by SQLSTATE class.
    """
    state = getattr(exc, "sqlstate", None) or ""
    if state == _QUERY_CANCELED:
        token = options.cancel if options is not None else None
        if token is not None and token.cancelled:
            return cancelled_error()
        return MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
    logger.warning("postgres memory store error: %s (SQLSTATE %s)", type(exc).__name__, state)
    if isinstance(exc, psycopg.OperationalError) and not state:
        return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, _LOST_MESSAGE)
    if state == _UNDEFINED_TABLE:
        message = "the PostgreSQL memory schema is missing; run `ditto-worker migrate`"
    elif state == _UNIQUE_VIOLATION:
        return MemoryError(ErrorCode.CONFLICT, "a key already exists in the store")
    else:
        message = _CLASS_MESSAGES.get(state[:2], "the PostgreSQL memory store failed")
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


def connect(url: str, connect_timeout_s: float) -> psycopg.Connection:
    """One autocommit connection (for migrations and probes).

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` with a safe message when it fails.
    """
    try:
        return psycopg.connect(
            url, autocommit=True, connect_timeout=max(1, math.ceil(connect_timeout_s))
        )
    except psycopg.Error as exc:
        raise connect_error(exc) from None


def open_pool(
    url: str, min_size: int, max_size: int, connect_timeout_s: float, pool_timeout_s: float
) -> psycopg_pool.ConnectionPool:
    """An open pool of autocommit connections; waits for ``min_size`` of them.

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` when no connection can be made within
            ``connect_timeout_s`` seconds.
    """
    pool: psycopg_pool.ConnectionPool = psycopg_pool.ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": max(1, math.ceil(connect_timeout_s))},
        timeout=pool_timeout_s,
        open=False,
        name="ditto-memory",
        # a failed reconnection is given up at once (the next call that needs a
        # connection asks for one again) instead of backing off for up to 5 minutes
        reconnect_timeout=0.0,
    )
    try:
        pool.open(wait=True, timeout=connect_timeout_s)
    except psycopg_pool.PoolTimeout as exc:
        pool.close()
        raise connect_error(exc) from None
    return pool


def _interrupt(conn: psycopg.Connection) -> None:
    """Cancel the statement running on ``conn`` (called in the cancelling thread)."""
    try:
        conn.cancel_safe(timeout=5.0)
    except psycopg.Error as exc:  # the statement may have ended; nothing to cancel
        logger.info("postgres cancel request failed: %s", type(exc).__name__)


@contextmanager
def transaction(
    pool: psycopg_pool.ConnectionPool, options: MemoryCallOptions | None
) -> Iterator[psycopg.Connection]:
    """One transaction on a pooled connection, cancellable and bounded by the deadline.

    Raises:
        MemoryError: ``MEMORY_CANCELLED`` when the token fires (before, during or at the
            end of the body: nothing is committed); ``MEMORY_TIMEOUT`` when a statement
            outlives the deadline, or no connection was free before it;
            ``MEMORY_BACKEND_ERROR`` when the server cannot be reached (at once, see the
            module docstring), the connection is lost, no pooled connection is free
            within ``pool_timeout_s``, and for other driver errors. A ``MemoryError``
            raised by the body passes through after ROLLBACK.
    """
    token: CancelToken | None = options.cancel if options is not None else None
    if token is not None and token.cancelled:
        raise cancelled_error()
    conn = _checkout(pool, options)
    try:
        with _deadline_guard(conn, options):
            unregister = token.on_cancel(lambda: _interrupt(conn)) if token else None
            try:
                with conn.transaction():
                    _set_deadline(conn, options)
                    yield conn
                    if token is not None and token.cancelled:
                        raise cancelled_error()
            finally:
                if unregister is not None:
                    unregister()
    except psycopg.Error as exc:
        if conn.broken or conn.closed:
            _unreachable.add(pool)  # the next call probes the server first
        raise map_error(exc, options) from exc
    finally:
        pool.putconn(conn)  # a broken connection is discarded and replaced by the pool


def _checkout(
    pool: psycopg_pool.ConnectionPool, options: MemoryCallOptions | None
) -> psycopg.Connection:
    """A live pooled connection, waiting at most until the deadline (or ``pool.timeout``).

    Raises:
        MemoryError: see :func:`transaction`.
    """
    if pool in _unreachable:
        _probe(pool, options)
    for attempt in range(int(pool.max_size) + 2):
        remaining = options.remaining_s if options is not None else None
        wait = pool.timeout if remaining is None else min(pool.timeout, remaining)
        try:
            conn: psycopg.Connection = pool.getconn(timeout=max(0.0, wait))
        except psycopg_pool.PoolTimeout:
            raise _no_connection(pool, options) from None
        if not _stale(conn):
            return conn
        conn.close()  # the server closed it (restart, cut): discarded by the pool
        pool.putconn(conn)
        if attempt == 0:
            _probe(pool, options)
    raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, _LOST_MESSAGE)


def _stale(conn: psycopg.Connection) -> bool:
    """True when an idle connection's socket is readable: the server sent its goodbye
    (FATAL on shutdown) or the connection was closed under it (EOF)."""
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def _probe(pool: psycopg_pool.ConnectionPool, options: MemoryCallOptions | None) -> None:
    """Try one direct connection; mark the pool reachable or raise a safe error.

    Raises:
        MemoryError: ``MEMORY_BACKEND_ERROR`` ("cannot connect ...") when it fails.
    """
    raw = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
    kwargs: dict[str, Any] = dict(raw or {})
    limit = float(kwargs.get("connect_timeout") or 5)
    remaining = options.remaining_s if options is not None else None
    if remaining is not None:
        limit = min(limit, remaining)
    kwargs["connect_timeout"] = max(1, math.ceil(limit))
    try:
        psycopg.connect(str(pool.conninfo), **kwargs).close()
    except psycopg.Error as exc:
        _unreachable.add(pool)
        raise connect_error(exc) from None
    _unreachable.discard(pool)


def _no_connection(
    pool: psycopg_pool.ConnectionPool, options: MemoryCallOptions | None
) -> MemoryError:
    """The error of a call that got no pooled connection in time."""
    remaining = options.remaining_s if options is not None else None
    if remaining is not None and remaining <= 0:
        return MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
    _probe(pool, options)  # raises when the server is not there
    return MemoryError(
        ErrorCode.MEMORY_BACKEND_ERROR,
        "no PostgreSQL memory store connection was free within the pool timeout",
    )


@contextmanager
def _deadline_guard(conn: psycopg.Connection, options: MemoryCallOptions | None) -> Iterator[None]:
    """Cut ``conn`` on the client side if the body still runs shortly after the deadline.

    ``statement_timeout`` ends a slow statement on the server at the deadline; this guard
    is for a server that does not answer at all (a network that drops packets): it shuts
    the socket down, the waiting driver call fails and the connection is discarded.
    """
    remaining = options.remaining_s if options is not None else None
    if remaining is None:
        yield
        return
    timer = threading.Timer(max(0.0, remaining) + _DEADLINE_GRACE_S, _cut, [conn])
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _cut(conn: psycopg.Connection) -> None:
    try:
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
        logger.warning("postgres memory store: no answer by the deadline; connection cut")
    except (OSError, psycopg.Error) as exc:  # already closed: nothing to cut
        logger.info("postgres connection cut skipped: %s", type(exc).__name__)


def _set_deadline(conn: psycopg.Connection, options: MemoryCallOptions | None) -> None:
    remaining = options.remaining_s if options is not None else None
    if remaining is None:
        return
    if remaining <= 0:
        raise MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
    conn.execute(f"SET LOCAL statement_timeout = {max(1, int(remaining * 1000))}")
