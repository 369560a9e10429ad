"""uvicorn's HTTP protocol with each response written to the socket once, not twice.

uvicorn writes a response's status line and headers (ASGI ``http.response.start``) and
its body (``http.response.body``) with two ``transport.write`` calls, and both event loops
(uvloop, asyncio) send each at once: two TCP segments, so the client wakes up for the
headers, parses them, and sleeps again until the body comes. A node call's answer is one
small JSON body sent right after its headers, so the second wake-up is pure overhead; on
a loaded machine it is a scheduling round trip of the client process, measured at about
0.9 ms of the gateway's p50 at 1 caller in ``bench/gateway.py`` (docs/http.md).

:class:`CoalescedWrites` wraps the connection's transport: the writes made while one
callback of the event loop runs (the app's ``send`` calls between two awaits that really
wait) are joined and handed to the real transport once, on the loop's next turn. Nothing
is held longer than that turn: a streamed body whose chunks are produced across awaits
goes out chunk by chunk, as before. :func:`coalescing_protocol` returns uvicorn's own
protocol class (``httptools`` when installed, else ``h11``) with its transport so
wrapped, and with the limits of :class:`~ditto_worker.gateway.limits.GuardedConnection`
(header and body deadlines, header size and count, the connection cap; issue 37);
everything else about the protocol is uvicorn's.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.h11_impl import H11Protocol

from ditto_worker.gateway.limits import SETTINGS_STATE_KEY, GuardedConnection

__all__ = [
    "SETTINGS_STATE_KEY",
    "CoalescedWrites",
    "CoalescingH11Protocol",
    "CoalescingHttpToolsProtocol",
    "coalescing_protocol",
]


class CoalescedWrites:
    """A transport whose writes within one event-loop turn reach the socket as one write.

    Args:
        transport: the connection's real transport (uvloop's or asyncio's).
        loop: the connection's event loop.

    Only the transport methods uvicorn's HTTP protocols call are provided. ``close`` and
    ``set_protocol`` send what is pending first; ``abort`` drops it.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data``; the first write of a turn schedules the flush."""
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        """Hand everything queued to the real transport in one write (dropped once the
        connection is closing, as the real transport would)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        """Flush, then close the connection."""
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        """Drop what is pending and abort the connection."""
        self._pending.clear()
        self.transport.abort()

    def is_closing(self) -> bool:
        """Whether the real transport is closing."""
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The real transport's extra info (``socket``, ``peername``, ``sslcontext`` …)."""
        return self.transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        """Flow control, as the real transport."""
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Flow control, as the real transport."""
        self.transport.resume_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Flush, then hand the connection to ``protocol`` (an upgrade)."""
        self.flush()
        self.transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The real transport's protocol."""
        return self.transport.get_protocol()


def coalescing_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (``httptools`` when installed, else ``h11``, as
    uvicorn's ``http="auto"`` picks) whose connections write through
    :class:`CoalescedWrites`; pass it as uvicorn's ``http=`` (a module-level class, so
    ``--workers N`` can hand it to its processes)."""
    return CoalescingHttpToolsProtocol if CoalescingHttpToolsProtocol is not None else (
        CoalescingH11Protocol
    )  # fmt: skip


class CoalescingH11Protocol(H11Protocol):
    """uvicorn's ``h11`` protocol writing through :class:`CoalescedWrites` (uvicorn's own
    16 KB bound on a request's head; the guards of :class:`GuardedConnection` need
    ``httptools``, installed with the ``gateway`` extra)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        super().connection_made(_coalesced(transport))


CoalescingHttpToolsProtocol: type[asyncio.Protocol] | None = None
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: uvicorn's pure-Python parser only
    pass
else:

    class _CoalescingHttpTools(GuardedConnection, HttpToolsProtocol):
        """uvicorn's ``httptools`` protocol writing through :class:`CoalescedWrites`, with
        the limits of :class:`GuardedConnection`."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
            super().connection_made(_coalesced(transport))
            self.guard_start()

    _CoalescingHttpTools.__name__ = _CoalescingHttpTools.__qualname__ = (
        "CoalescingHttpToolsProtocol"
    )
    CoalescingHttpToolsProtocol = _CoalescingHttpTools


def _coalesced(transport: asyncio.BaseTransport) -> Any:
    return CoalescedWrites(cast(asyncio.Transport, transport), asyncio.get_running_loop())
