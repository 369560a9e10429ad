"""The store's one ``QdrantClient``: opened lazily, bounded by each call's deadline, errors
made safe.

One code path for both modes of the official client:

* **server** — ``QdrantClient(url=…, api_key=…)`` over REST (httpx). Each request's
  timeout is the call's remaining time (an httpx middleware sets the request's timeout
  from a thread-local value), capped by ``timeoutS``; a request still unanswered then
  fails with ``MEMORY_TIMEOUT`` (deadline passed) or ``MEMORY_BACKEND_ERROR`` (no
  deadline). Thread-safe: no lock.
* **local** — ``QdrantClient(path=…)``, the client's in-process mode: one process per
  folder (the client takes an exclusive file lock; a second process fails with
  ``MEMORY_BACKEND_ERROR``), brute force, payload indexes ignored. Calls are serialized by
  a lock (the local collections are not thread-safe) and cannot be interrupted; a call
  whose deadline has passed is not started. The client commits one SQLite transaction
  per point; with ``durability="process"`` (default) the plugin switches the client's
  storage files to WAL with ``synchronous=NORMAL`` (a committed point survives a crash of
  the process, not a power loss; about 50x faster here), ``"power"`` keeps the client's
  own setting (an fsync per point).

The client is opened in the process that uses it (after a fork it is opened anew) and
re-opened after :meth:`Connection.close`. Driver errors never reach the caller:
:func:`map_error` gives ``MemoryError`` with a message naming neither the URL nor the key.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any, Final, TypeVar

import httpx
from qdrant_client import QdrantClient
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ditto_worker.dockit import cancelled, check_step, deadline_passed, step_timeout
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions

__all__ = ["Connection", "cancelled", "map_error"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
_LOCAL_WARNINGS: Final = ("Local mode is not recommended", "Payload indexes have no effect")


def _status_message(status: int | None) -> str:
    if status in (401, 403):
        return f"the Qdrant server refused the credentials (HTTP {status})"
    if status == 404:
        return "the Qdrant collection was not found (HTTP 404)"
    if status is not None and status >= 500:
        return f"the Qdrant server is unavailable (HTTP {status})"
    return f"the Qdrant server rejected the request (HTTP {status})"


def map_error(exc: BaseException, options: MemoryCallOptions | None, local: bool) -> MemoryError:
    """A safe ``MemoryError`` for a client error: no URL, key, payload or server text.

    ``MEMORY_TIMEOUT`` when the call's deadline has passed; ``MEMORY_BACKEND_ERROR`` with a
    message chosen by the kind of failure (HTTP status, connection, timeout) otherwise.
    """
    if isinstance(exc, MemoryError):
        return exc
    logger.warning("qdrant memory store error: %s", type(exc).__name__)
    if deadline_passed(options):
        return MemoryError(ErrorCode.MEMORY_TIMEOUT, "the memory call's deadline passed")
    if isinstance(exc, UnexpectedResponse):
        message = _status_message(exc.status_code)
    elif isinstance(exc, ResponseHandlingException):
        source = exc.source
        if isinstance(source, httpx.TimeoutException):
            message = "the Qdrant server did not answer in time"
        elif isinstance(source, httpx.ConnectError):
            message = "the Qdrant server cannot be reached"
        elif isinstance(source, httpx.TransportError):
            message = "the connection to the Qdrant server was lost"
        else:
            message = "the Qdrant server's answer could not be read"
    elif isinstance(exc, QdrantException):
        message = "the Qdrant server is overloaded (rate limited)"
    elif local and isinstance(exc, RuntimeError) and "already accessed" in str(exc):
        message = (
            "the local Qdrant folder is open in another process (local mode serves one "
            "process; use a Qdrant server for several)"
        )
    else:
        message = "the Qdrant memory store failed" + (" (local mode)" if local else "")
    return MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, message)


class Connection:
    """A lazily opened ``QdrantClient`` for one store object (module docstring).

    Args:
        url: a server URL (``http(s)://host:port``), or ``None`` for local mode.
        path: the local-mode folder (used when ``url`` is ``None``).
        api_key: the server's API key, or ``None``.
        timeout_s: longest wait for one server request, seconds.
        durability: local mode only: ``"process"`` or ``"power"`` (module docstring).
    """

    def __init__(
        self,
        *,
        url: str | None,
        path: str | None,
        api_key: str | None,
        timeout_s: float,
        durability: str = "process",
    ) -> None:
        if (url is None) == (path is None):
            raise ValueError("give exactly one of url and path")
        self._url, self._path, self._api_key = url, path, api_key
        self._timeout_s = timeout_s
        self._durability = durability
        self._client: QdrantClient | None = None
        self._pid = -1
        self._open_lock = threading.Lock()
        self._call_lock = threading.RLock()
        self._tls = threading.local()
        self._tuned: set[int] = set()

    @property
    def local(self) -> bool:
        """True in local mode (``QdrantClient(path=…)``)."""
        return self._url is None

    def _open(self) -> QdrantClient:
        with self._open_lock:
            if self._client is not None and self._pid == os.getpid():
                return self._client
            with warnings.catch_warnings():
                # "Api key is used with an insecure connection": said once in the log below
                warnings.simplefilter("ignore")
                if self._url is not None:
                    if self._api_key and self._url.startswith("http://"):
                        logger.warning("qdrant memory store: API key sent without TLS")
                    client = QdrantClient(
                        url=self._url,
                        api_key=self._api_key or None,
                        timeout=max(1, round(self._timeout_s)),
                        check_compatibility=False,
                    )
                    client.http.client.add_middleware(self._deadline_middleware)
                else:
                    assert self._path is not None
                    os.makedirs(self._path, exist_ok=True)
                    client = QdrantClient(path=self._path)
            self._client, self._pid, self._tuned = client, os.getpid(), set()
            return client

    def _deadline_middleware(
        self, request: httpx.Request, call_next: Callable[[httpx.Request], httpx.Response]
    ) -> httpx.Response:
        timeout = getattr(self._tls, "timeout", None)
        if timeout is not None:
            request.extensions["timeout"] = httpx.Timeout(timeout).as_dict()
        return call_next(request)

    def tune_local(self) -> None:
        """Local mode: WAL + ``synchronous=NORMAL`` on the client's storage files
        (``durability="process"``); a no-op for a server or ``"power"``."""
        client = self._client
        if client is None or not self.local or self._durability != "process":
            return
        collections: dict[str, Any] = getattr(client._client, "collections", {})
        for collection in collections.values():
            storage = getattr(getattr(collection, "storage", None), "storage", None)
            if storage is None or id(storage) in self._tuned:
                continue
            storage.execute("PRAGMA journal_mode = WAL")
            storage.execute("PRAGMA synchronous = NORMAL")
            self._tuned.add(id(storage))

    def call(
        self,
        options: MemoryCallOptions | None,
        fn: Callable[..., T],
        *args: Any,
        check_cancel: bool = True,
        **kwargs: Any,
    ) -> T:
        """Run ``fn(client, *args, **kwargs)`` as one step of a memory call (``fn`` is
        typically a ``QdrantClient`` method, e.g. ``QdrantClient.scroll``).

        Before it starts: ``MEMORY_CANCELLED`` if ``check_cancel`` and the call's token is
        set, ``MEMORY_TIMEOUT`` if its deadline passed. A server request waits at most
        ``min(timeoutS, time left)``.

        Raises:
            MemoryError: those, or :func:`map_error` of the client's error.
        """
        remaining = check_step(options, check_cancel)
        try:
            client = self._open()
            if self.local:
                with self._call_lock, warnings.catch_warnings():
                    for text in _LOCAL_WARNINGS:
                        warnings.filterwarnings("ignore", message=text, category=UserWarning)
                    return fn(client, *args, **kwargs)
            self._tls.timeout = step_timeout(self._timeout_s, remaining)
            try:
                return fn(client, *args, **kwargs)
            finally:
                self._tls.timeout = None
        except MemoryError:
            raise
        except Exception as exc:  # the client raises many types; all are mapped
            raise map_error(exc, options, self.local) from exc

    def close(self) -> None:
        """Close the client (releases local mode's folder lock); the next call reopens."""
        with self._open_lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                client.close()
        self._tuned = set()
