"""The gateway's uvicorn protocol writes each response once (issue 26, bench/gateway.py):
:class:`~ditto_worker.gateway.protocol.CoalescedWrites` joins the writes of one event-loop
turn and hands them to the real transport in one write."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

from ditto_worker.gateway.protocol import CoalescedWrites, coalescing_protocol


class Recorder:
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.aborted = self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


async def _turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _wrapped() -> tuple[CoalescedWrites, Recorder]:
    real = Recorder()
    return CoalescedWrites(real, asyncio.get_running_loop()), real  # type: ignore[arg-type]


def test_the_writes_of_one_turn_reach_the_transport_as_one() -> None:
    asyncio.run(_the_writes_of_one_turn_reach_the_transport_as_one())


async def _the_writes_of_one_turn_reach_the_transport_as_one() -> None:
    wrapped, real = _wrapped()
    wrapped.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    wrapped.write(b"")
    wrapped.write(memoryview(b"{}"))
    assert real.writes == []  # nothing before the loop's next turn
    await _turn()
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    wrapped.write(b"next")  # a later turn is a write of its own
    await _turn()
    assert real.writes[1:] == [b"next"]
    assert wrapped.get_extra_info("peername") == ("127.0.0.1", 1)


def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    asyncio.run(_close_sends_what_is_pending_and_abort_drops_it())


async def _close_sends_what_is_pending_and_abort_drops_it() -> None:
    wrapped, real = _wrapped()
    wrapped.write(b"bye")
    wrapped.close()
    assert real.writes == [b"bye"] and wrapped.is_closing()
    await _turn()  # the scheduled flush finds nothing left
    assert real.writes == [b"bye"]
    wrapped, real = _wrapped()
    wrapped.write(b"lost")
    wrapped.abort()
    await _turn()
    assert real.writes == [] and real.aborted


def test_nothing_is_written_to_a_closing_transport() -> None:
    asyncio.run(_nothing_is_written_to_a_closing_transport())


async def _nothing_is_written_to_a_closing_transport() -> None:
    wrapped, real = _wrapped()
    wrapped.write(b"late")
    real.closing = True  # the peer went away meanwhile
    await _turn()
    assert real.writes == []


def test_the_protocol_is_uvicorns_own_and_reaches_worker_processes() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    protocol = coalescing_protocol()
    assert issubclass(protocol, HttpToolsProtocol)  # httptools is in the gateway extra
    assert pickle.loads(pickle.dumps(protocol)) is protocol  # --workers N pickles it
