"""The store's one ``MilvusClient``: opened lazily per process, every gRPC call bounded by a
timeout, errors made safe.

One code path for both targets of the official client (pymilvus):

* **server** — ``MilvusClient(uri="http://host:19530", token=…)``: a Milvus standalone or
  cluster (or a ``milvus-lite server`` process) over gRPC.
* **Milvus Lite** — ``MilvusClient(uri="/path/data.db")``: pymilvus starts Milvus Lite 3
  (a Python reimplementation of Milvus, not the C++ server) as a gRPC server on a loopback
  port *inside this process* and talks gRPC to it, so the same requests run. One process
  per data folder (Milvus Lite locks it); several processes share one through
  ``milvus-lite server --data-dir … --port …`` and its ``http://`` URI.

Every call passes ``timeout=min(timeoutS, time left before the call's deadline)``; pymilvus
uses it as the gRPC deadline and as the bound of its own reconnect attempts on an
unavailable server, so no call waits longer. Those attempts may resend a request whose
connection dropped after the server applied it: every mutation is idempotent (WRITE and
UPDATE upsert rows by their id, DELETE deletes by id), so a resent one changes nothing.

The client is opened in the process that uses it (after a fork it is opened anew,
``dedicated`` so no channel of the parent is reused), dropped after a lost connection
(the next call opens a new channel and loads the collection again) and re-opened after
:meth:`Connection.close`. Driver errors never reach the
caller: :func:`map_error` gives ``MemoryError`` with a message naming neither the URI nor
the token, and pymilvus's own error log lines (which quote filter expressions, so
metadata values) are dropped (:class:`_DropRpcErrors`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from pymilvus import MilvusClient
from pymilvus.exceptions import ConnectionConfigException, MilvusException

from ditto_worker.dockit import cancelled, check_step, deadline_passed, step_timeout
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = ["Connection", "cancelled", "map_error"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class _DropRpcErrors(logging.Filter):
    """Drops pymilvus's per-call log lines: they quote the request (filter values)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


for _name in ("pymilvus.decorators", "pymilvus.client.connection_manager"):
    logging.getLogger(_name).addFilter(_DropRpcErrors())


def map_error(exc: BaseException, options: MemoryCallOptions | None, lite: bool) -> MemoryError:
    """A safe ``MemoryError`` for a client error: no URI, token, expression or server text.

    ``MEMORY_BACKEND_ERROR`` "cannot be reached" for a refused or dropped connection;
    otherwise ``MEMORY_TIMEOUT`` when the call's deadline has passed, else
    ``MEMORY_BACKEND_ERROR`` with a message chosen by the kind of failure.
    """
    if isinstance(exc, MemoryError):
        return exc
    logger.warning("milvus memory store error: %s", type(exc).__name__)
    where = "Milvus Lite" if lite else "the Milvus server"
    text = str(getattr(exc, "message", "")) if isinstance(exc, MilvusException) else ""
    if isinstance(exc, grpc.RpcError):
        text = str(exc.code())  # StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED …
    if "UNAVAILABLE" in text or "Fail connecting" in text:
        # refused or dropped connections: said as such even when pymilvus's reconnect
        # attempts used up the call's time
        message = f"{where} cannot be reached"
    elif deadline_passed(options):
        return MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
    elif "Retry timeout" in text or "DEADLINE_EXCEEDED" in text:
        message = f"{where} did not answer in time"
    elif lite and isinstance(exc, ConnectionConfigException):
        message = (
            "Milvus Lite could not open its folder: it serves one process per folder, and "
            "another process may have it open (run `milvus-lite server` or a Milvus "
            "server for several)"
        )
    elif isinstance(exc, MilvusException):
        message = f"{where} rejected the request (code {exc.code})"
    else:
        message = "the Milvus memory store failed"
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


class Connection:
    """A lazily opened ``MilvusClient`` for one store object (module docstring).

    Args:
        uri: ``http(s)://host:port`` of a server, or a path ending in ``.db`` (Milvus Lite).
        token: the server's token (``user:password`` or an API key), or ``None``.
        db_name: the Milvus database (``""``: the server's default).
        timeout_s: longest wait for one gRPC call, seconds.
    """

    def __init__(self, *, uri: str, token: str | None, db_name: str, timeout_s: float) -> None:
        self._uri, self._token, self._db = uri, token, db_name
        self.timeout_s = timeout_s
        self._client: MilvusClient | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self.generation = 0
        """Counts the clients dropped after a lost connection (:meth:`_drop`)."""

    @property
    def lite(self) -> bool:
        """True for Milvus Lite (a ``.db`` path)."""
        return not self._uri.startswith(("http://", "https://", "tcp://"))

    def _open(self) -> MilvusClient:
        with self._lock:
            if self._client is not None and self._pid == os.getpid():
                return self._client
            if self.lite:
                os.makedirs(os.path.dirname(os.path.abspath(self._uri)), exist_ok=True)
            client = MilvusClient(
                uri=self._uri,
                token=self._token or "",
                db_name=self._db,
                timeout=self.timeout_s,
                dedicated=True,
            )
            self._client, self._pid = client, os.getpid()
            return client

    def timeout(self, options: MemoryCallOptions | None) -> float:
        """The timeout of the next gRPC call: ``min(timeoutS, time left)``, seconds."""
        remaining = options.remaining_s if options is not None else None
        return step_timeout(self.timeout_s, remaining)

    def call(
        self,
        options: MemoryCallOptions | None,
        fn: Callable[..., T],
        *args: Any,
        check_cancel: bool = True,
        **kwargs: Any,
    ) -> T:
        """Run ``fn(client, *args, timeout=…, **kwargs)`` as one step of a memory call
        (``fn`` is a ``MilvusClient`` method, e.g. ``MilvusClient.query``).

        Before it starts: ``MEMORY_CANCELLED`` if ``check_cancel`` and the call's token is
        set, ``MEMORY_TIMEOUT`` if its deadline passed.

        Raises:
            MemoryError: those, or :func:`map_error` of the client's error.
        """
        check_step(options, check_cancel)
        try:
            return fn(self._open(), *args, timeout=self.timeout(options), **kwargs)
        except MemoryError:
            raise
        except Exception as exc:  # the client raises many types; all are mapped
            error = map_error(exc, options, self.lite)
            if error.safe_message.endswith("cannot be reached"):
                self._drop()
            raise error from exc

    def _drop(self) -> None:
        """Forget the client after a lost connection: the next call opens a new channel
        (gRPC's own reconnect backoff grows to minutes) and :attr:`generation` tells the
        store to load its collection again (a restarted Milvus Lite has it released)."""
        with self._lock:
            client, self._client = self._client, None
            self.generation += 1
        if client is not None and self._pid == os.getpid():
            try:
                client.close()
            except Exception as exc:  # a broken channel: nothing left to close
                logger.info("milvus client close: %s", type(exc).__name__)

    def close(self) -> None:
        """Close the client; the next call reopens. Milvus Lite's in-process server (and
        its folder lock) is released too."""
        with self._lock:
            client, self._client = self._client, None
        if client is None or self._pid != os.getpid():
            return
        try:
            client.close()
        except Exception as exc:  # closing a broken channel: nothing left to do
            logger.info("milvus client close: %s", type(exc).__name__)
        if self.lite:
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(self._uri)
