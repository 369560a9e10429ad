"""A tiny loopback HTTP server that plays an OpenAI-compatible chat endpoint badly or well.

Imported as ``tests.unit._fake_chat``. Each test hands it a *script*: a function
``script(conn: FakeConn) -> None`` that writes the response for one request (status,
headers, SSE events, a stall, a cut). The server records every request (headers, JSON
body) and when each connection was closed by the client, so tests can check that a
cancelled call really closed its connection.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: Any
    closed_at: float | None = None  # time.monotonic() when the client closed the connection
    closed: threading.Event = field(default_factory=threading.Event)


class FakeConn:
    """What a script writes with: status + headers, then chunked body pieces."""

    def __init__(self, handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        self._h = handler
        self.seen = seen

    def start(self, status: int = 200, content_type: str = "text/event-stream") -> None:
        self._h.send_response(status)
        self._h.send_header("Content-Type", content_type)
        self._h.send_header("Transfer-Encoding", "chunked")
        self._h.end_headers()
        self._h.wfile.flush()

    def write(self, text: str) -> None:
        data = text.encode()
        self._h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self._h.wfile.flush()

    def event(self, payload: Any) -> None:
        self.write(f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n")

    def end(self) -> None:
        self._h.wfile.write(b"0\r\n\r\n")
        self._h.wfile.flush()

    def cut(self) -> None:
        """Drop the connection mid-body (the server process died)."""
        self._h.connection.shutdown(socket.SHUT_RDWR)

    def wait_client_close(self, timeout_s: float) -> bool:
        """Block until the client closes its side (EOF/RST); record when."""
        sock = self._h.connection
        sock.settimeout(0.05)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if sock.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        else:
            return False
        self.seen.closed_at = time.monotonic()
        self.seen.closed.set()
        return True


Script = Callable[[FakeConn], None]


def chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one delta."""
    delta = {} if content is None else {"content": content}
    body: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    body.update(extra)
    return body


def usage(prompt: Any, completion: Any, **raw: Any) -> dict[str, Any]:
    """The final usage chunk; ``raw`` replaces the ``usage`` object's fields as given
    (e.g. ``usage(None, None, completion_tokens=3)`` reports only the completion)."""
    counts = {"prompt_tokens": prompt, "completion_tokens": completion}
    return {
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [],
        "usage": raw or counts,
    }


def reply_script(
    *parts: str, finish: str = "stop", prompt: int = 7, report_usage: bool = True
) -> Script:
    """A well-behaved streamed reply made of ``parts``; with ``report_usage=False`` it
    streams no usage at all (as servers do that ignore ``stream_options.include_usage``),
    every chunk carrying ``usage: null`` the way OpenAI's do before the last."""

    def script(conn: FakeConn) -> None:
        conn.start()
        for part in parts:
            conn.event(chunk(part, usage=None) if not report_usage else chunk(part))
        conn.event(chunk(finish=finish))
        if report_usage:
            conn.event(usage(prompt, len(parts)))
        conn.event("[DONE]")
        conn.end()

    return script


class FakeChatServer:
    """``with FakeChatServer(script) as fake: fake.base_url`` (``http://127.0.0.1:P/v1``)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[Seen] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                seen = Seen(self.path, dict(self.headers), json.loads(raw or b"null"))
                outer.requests.append(seen)
                self.close_connection = True
                try:
                    outer.script(FakeConn(self, seen))
                except OSError:  # the client went away: that is what some tests want
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeChatServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    """A loopback port nobody listens on (for "connection refused")."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
