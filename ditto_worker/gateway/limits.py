"""Connection-level limits of the gateway, checked before any identity is known (issue 37).

uvicorn (with ``httptools``) reads a request's head and body with no deadline and no
bound on the head's size: one slow or huge request holds a connection, memory and the
event loop as long as its sender likes. :class:`GuardedConnection` is mixed into the
gateway's uvicorn protocol (:mod:`ditto_worker.gateway.protocol`) and adds, per
connection:

* **a header deadline**: the request line and headers must arrive within
  ``gateway.headerTimeoutS`` of the connection's opening (or of a kept-alive request's
  first byte): else 408 and the connection is closed (closed silently when nothing came);
* **a body deadline**: the body must arrive within ``gateway.bodyTimeoutS`` of the
  headers: else 408 (the route hears a disconnect) and the connection is closed;
* **a bound on the head**: more than ``gateway.maxHeaderBytes`` bytes or
  ``gateway.maxHeaders`` fields is 431, answered before the rest is read;
* **a connection cap**: a connection beyond ``gateway.maxConnections`` open ones is
  answered 429 (``Retry-After: 1``) and closed at once;
* a request the parser cannot read is a NodeResult-shaped 400 (uvicorn's own is text),
  and uvicorn's warning about it (``Invalid HTTP request received.``, as
  ``Unsupported upgrade request.``) is logged once a minute at most, with the count of
  those left out: any client could otherwise write a log line per request.

Every answer here is a NodeResult-shaped JSON body with ``Connection: close``. The
limits are the app's :class:`~ditto_worker.gateway.settings.GatewaySettings`, which the
app's lifespan leaves in uvicorn's app state under :data:`SETTINGS_STATE_KEY`
(defaults when absent).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from http import HTTPStatus
from typing import Any

from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.errors import failure_body
from ditto_worker.gateway.settings import GatewaySettings

__all__ = ["SETTINGS_STATE_KEY", "GuardedConnection", "OncePerMinute"]

SETTINGS_STATE_KEY = "ditto.gateway.settings"
"""uvicorn app-state key of the app's :class:`GatewaySettings` (set by its lifespan)."""

_IDLE, _HEAD, _BODY = 0, 1, 2
_DEFAULTS = GatewaySettings()


class OncePerMinute(logging.Filter):
    """Lets one record of each of :attr:`MESSAGES` through per minute; the next one let
    through says how many were left out."""

    MESSAGES = frozenset({"Invalid HTTP request received.", "Unsupported upgrade request."})
    WINDOW_S = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self._dropped: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102
        message = record.msg if isinstance(record.msg, str) else ""
        if message not in self.MESSAGES:
            return True
        now = time.monotonic()
        last = self._last.get(message)
        if last is not None and now - last < self.WINDOW_S:
            self._dropped[message] = self._dropped.get(message, 0) + 1
            return False
        self._last[message] = now
        dropped = self._dropped.pop(message, 0)
        if dropped:
            record.msg = f"{message} ({dropped} more in the last minute, not logged)"
        return True


_UVICORN_LOG = logging.getLogger("uvicorn.error")
if not any(isinstance(f, OncePerMinute) for f in _UVICORN_LOG.filters):
    _UVICORN_LOG.addFilter(OncePerMinute())


class GuardedConnection:
    """The limits of the module docstring, for uvicorn's ``httptools`` protocol.

    Mixed in ahead of uvicorn's class; its ``connection_made`` calls :meth:`guard_start`
    after uvicorn's own.
    """

    app_state: dict[str, Any]
    connections: set[Any]
    transport: Any
    loop: asyncio.AbstractEventLoop
    cycle: Any

    _limits: GatewaySettings = _DEFAULTS
    _timer: asyncio.TimerHandle | None = None
    _phase = _IDLE
    _seen = 0
    _fields = 0
    _head = 0
    _done = False

    def guard_start(self) -> None:
        """A new connection: the cap, then the header deadline."""
        settings = self.app_state.get(SETTINGS_STATE_KEY)
        self._limits = settings if isinstance(settings, GatewaySettings) else _DEFAULTS
        if len(self.connections) > self._limits.max_connections:
            self._refuse(429, ErrorCode.OVERLOADED, "too many connections; retry later",
                         b"retry-after: 1\r\n")  # fmt: skip
            return
        self._phase = _HEAD
        self._arm(self._limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:  # noqa: D102 - uvicorn's, bounded
        if self._done:
            return
        before = self._phase
        super().data_received(data)  # type: ignore[misc]
        if self._phase != _HEAD or self._done:
            return
        self._seen = self._seen + len(data) if before == _HEAD else len(data)
        self._check_head(self._seen)

    def _check_head(self, size: int) -> bool:
        """Refuse (431) a head over the bounds; True when it was."""
        limits = self._limits
        if size > limits.max_header_bytes:
            message = f"the request headers are over {limits.max_header_bytes} bytes"
        elif self._fields > limits.max_headers:
            message = f"the request has more than {limits.max_headers} headers"
        else:
            return False
        self._refuse(431, ErrorCode.PAYLOAD_TOO_LARGE, message)
        return True

    def on_message_begin(self) -> None:  # noqa: D102 - uvicorn's, with the head's deadline
        super().on_message_begin()  # type: ignore[misc]
        if self._phase != _HEAD:
            self._phase, self._seen, self._fields = _HEAD, 0, 0
            self._arm(self._limits.header_timeout_s)
        self._head = 0

    def on_url(self, url: bytes) -> None:  # noqa: D102 - counted
        self._head += len(url)
        super().on_url(url)  # type: ignore[misc]

    def on_header(self, name: bytes, value: bytes) -> None:  # noqa: D102 - counted
        self._fields += 1
        self._head += len(name) + len(value) + 4
        super().on_header(name, value)  # type: ignore[misc]

    def on_headers_complete(self) -> None:  # noqa: D102 - bounded; then the body's deadline
        if self._done or self._check_head(self._head):
            return  # refused: no request is started
        self._phase, self._seen, self._fields = _BODY, 0, 0
        self._arm(self._limits.body_timeout_s)
        super().on_headers_complete()  # type: ignore[misc]

    def on_body(self, body: bytes) -> None:  # noqa: D102 - nothing after a refusal
        if not self._done:
            super().on_body(body)  # type: ignore[misc]

    def on_message_complete(self) -> None:  # noqa: D102 - no deadline between requests
        if self._done:
            return
        self._phase = _IDLE
        self._disarm()
        super().on_message_complete()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self._done = True
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def send_400_response(self, msg: str) -> None:
        """A request the parser cannot read: a NodeResult-shaped 400."""
        self._refuse(400, ErrorCode.INVALID_INPUT, "Invalid input: not a valid HTTP/1.1 request")

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        """A deadline passed: 408 (a head not begun: closed silently)."""
        self._timer = None
        if self._done:
            return
        if self._phase == _HEAD and self._seen == 0 and self.cycle is None:
            self._close()
        elif self._phase == _HEAD:
            limit = self._limits.header_timeout_s
            self._refuse(408, ErrorCode.INVALID_INPUT,
                         f"Invalid input: the request headers took over {limit:g} s")  # fmt: skip
        elif self._phase == _BODY:
            limit = self._limits.body_timeout_s
            self._refuse(408, ErrorCode.INVALID_INPUT,
                         f"Invalid input: the request body took over {limit:g} s")  # fmt: skip

    def _refuse(self, status: int, code: str, message: str, extra: bytes = b"") -> None:
        """Answer ``status`` (unless an answer has started) and close the connection; the
        request's route, if one runs, hears a disconnect."""
        cycle = self.cycle  # the current request's only once its head was read
        started = self._phase == _BODY and cycle is not None and cycle.response_started
        if not started:
            body = json.dumps(failure_body("", code, message)).encode()
            head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                    "content-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n").encode()  # fmt: skip
            self.transport.write(head + extra + b"\r\n" + body)
        self._close()

    def _close(self) -> None:
        self._done = True
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()
