"""Cancellation that reaches the server, for the MySQL store (MEM-RUN-2).

A call's cancel token, and its deadline, run ``KILL QUERY <connection id>`` on a separate
short-lived connection: the running statement stops with error 1317 and the call's
transaction is rolled back (:func:`ditto_plugin_mysql.db.transaction`). When the server
cannot be reached for the ``KILL``, or the call still runs :data:`DEADLINE_GRACE_S` after
its deadline (a server that does not answer at all), the connection's socket is shut down
so the waiting driver call fails at once. Nothing fires once the call has ended: the
connection may already serve another call.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, Final

import pymysql

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import CancelToken, MemoryCallOptions

__all__ = ["DEADLINE_GRACE_S", "Watch"]

logger = logging.getLogger(__name__)

DEADLINE_GRACE_S: Final = 0.5
"""How long after the deadline a statement the server does not answer is cut, seconds."""
_KILL_CONNECT_S: Final = 2.0


def _interrupt(
    connect: Callable[[Any, float, str | None], Any], address: Any, thread_id: int
) -> bool:
    """``KILL QUERY`` the statement running on connection ``thread_id`` (from a new
    connection); False when the server could not be reached."""
    try:
        killer = connect(address, _KILL_CONNECT_S, "")
    except MemoryError:
        return False
    try:
        with killer.cursor() as cur:
            cur.execute("KILL QUERY %s", [int(thread_id)])
    except pymysql.MySQLError as error:  # the statement (or connection) already ended
        logger.info("mysql cancel request failed: %s", type(error).__name__)
    finally:
        killer.close()
    return True


def _cut(conn: Any) -> None:
    """Shut the connection's socket down: the waiting driver call fails at once."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as dup:
            dup.shutdown(socket.SHUT_RDWR)
        logger.warning("mysql memory store: no answer by the deadline; connection cut")
    except OSError as error:
        logger.info("mysql connection cut skipped: %s", type(error).__name__)


class Watch:
    """The cancel token and deadline of one call on one connection."""

    def __init__(
        self,
        conn: Any,
        address: Any,
        options: MemoryCallOptions | None,
        connect: Callable[[Any, float, str | None], Any],
    ) -> None:
        self.conn, self.address, self.connect = conn, address, connect
        self.token: CancelToken | None = options.cancel if options is not None else None
        self.remaining = options.remaining_s if options is not None else None
        self.deadline_hit = False
        self.timers: list[threading.Timer] = []
        self.unregister: Any = None
        self.lock = threading.Lock()
        self.done = False

    def _fire(self, deadline: bool) -> None:
        with self.lock:  # never after the call ended: the connection may serve another
            if self.done:
                return
            self.deadline_hit = self.deadline_hit or deadline
            thread_id = int(self.conn.thread_id())
            if not _interrupt(self.connect, self.address, thread_id):
                _cut(self.conn)

    def _cut(self) -> None:
        with self.lock:
            if not self.done:
                _cut(self.conn)

    def __enter__(self) -> Watch:
        if self.remaining is not None and self.remaining <= 0:
            raise MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
        if self.token is not None:
            self.unregister = self.token.on_cancel(lambda: self._fire(False))
        if self.remaining is not None:
            for delay, action in (
                (self.remaining, lambda: self._fire(True)),
                (self.remaining + DEADLINE_GRACE_S, self._cut),
            ):
                timer = threading.Timer(delay, action)
                timer.daemon = True
                timer.start()
                self.timers.append(timer)
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self.lock:
            self.done = True
        for timer in self.timers:
            timer.cancel()
        if self.unregister is not None:
            self.unregister()
