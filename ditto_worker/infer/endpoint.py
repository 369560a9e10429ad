"""``ChatEndpoint``: one streamed chat completion from an OpenAI-compatible endpoint (httpx).

``POST {baseUrl}/chat/completions`` with ``stream: true``; the reply arrives as
server-sent events (``data: {chunk}`` lines, ``data: [DONE]`` last) and is accumulated
into a :class:`ChatReply`. A plain JSON answer (a server that ignores ``stream``) is read
too.

Why streaming: a call stopped by its caller (cancel, deadline) closes the connection, and
a streaming server notices a closed connection within about a second (llama.cpp polls it
while it evaluates the prompt, and fails its next write while it generates) and frees the
slot; a non-streamed request would keep the model busy until the whole reply is done.

Why a socket shutdown: :class:`CallAbort` is triggered from another thread (the cancel
token's callback, a deadline timer) while this thread is blocked reading. Closing a socket
does not wake a blocked ``recv`` on Linux and sends nothing until it returns;
``shutdown(SHUT_RDWR)`` wakes it at once and sends the FIN the server watches for. The
socket is taken from httpcore's ``trace`` extension (``connection.connect_tcp.complete``
returns the network stream); every call opens its own connection (no keep-alive pool) so
an abort never touches another call's connection.

Errors (all :class:`~ditto_worker.errors.NodeError`, messages without URL, key, server
text or model text; MEM-INF-3): ``INFER_UNAVAILABLE`` for a refused or failed connection,
a timeout, a non-2xx status, a malformed or cut-off stream. No retry (MEM-ERR-5).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from ditto_worker.errors import ErrorCode, NodeError

if TYPE_CHECKING:  # httpx is imported when an endpoint is built (the infer extra)
    import httpx

__all__ = ["CallAbort", "CallAborted", "ChatEndpoint", "ChatReply"]

logger = logging.getLogger(__name__)


@dataclass
class ChatReply:
    """A chat completion as accumulated from the stream.

    Attributes:
        text: the reply's content, concatenated from the deltas.
        model: the model name the endpoint reported ("" if none).
        finish_reason: ``stop``, ``length`` … ("" if the endpoint never said).
        prompt_tokens: the endpoint's usage count (``>= 0``), or ``None`` when it reported
            none — unknown is never 0 (SPEC.md MEM-INF-1).
        completion_tokens: the same for the reply's tokens.
        chunks: content-bearing chunks received (a proxy for tokens when usage is absent).
    """

    text: str = ""
    model: str = ""
    finish_reason: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunks: int = 0
    _parts: list[str] = field(default_factory=list, repr=False)

    def add(self, chunk: Any) -> None:
        """Fold one ``chat.completion.chunk`` (or a whole ``chat.completion``) in.

        Raises:
            NodeError: ``INFER_UNAVAILABLE`` when the chunk is not the expected shape or
                carries an ``error`` object.
        """
        if not isinstance(chunk, dict) or "error" in chunk:
            raise _unavailable("the model endpoint reported an error in its reply")
        try:
            if chunk.get("model"):
                self.model = str(chunk["model"])
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                part = (choice.get("delta") or choice.get("message") or {}).get("content")
                if part:
                    self._parts.append(str(part))
                    self.chunks += 1
                if choice.get("finish_reason"):
                    self.finish_reason = str(choice["finish_reason"])
            usage = chunk.get("usage")
            if isinstance(usage, dict):  # OpenAI sends ``usage: null`` on every other chunk
                self.prompt_tokens = _count(usage.get("prompt_tokens"), self.prompt_tokens)
                self.completion_tokens = _count(
                    usage.get("completion_tokens"), self.completion_tokens
                )
        except (AttributeError, TypeError, ValueError):
            raise _unavailable("the model endpoint answered a malformed chunk") from None
        self.text = "".join(self._parts)


def _count(value: Any, known: int | None) -> int | None:
    """A reported token count, or ``None`` (unknown) when the endpoint sent none (absent
    or ``null``) or something that is not a count (logged; the reply itself stands)."""
    if value is None:
        return known
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        logger.warning("the model endpoint reported a token count that is not one: unknown")
        return None
    return value


class CallAbort:
    """Stops one in-flight call from any thread: records why, shuts its socket down.

    The first :meth:`abort` wins; later ones are ignored. A socket attached after the
    abort is shut down at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._sock: socket.socket | None = None

    @property
    def reason(self) -> str | None:
        """``None`` while the call may go on, else the reason given to :meth:`abort`."""
        return self._reason

    def abort(self, reason: str) -> None:
        """Stop the call (idempotent); ``reason`` is e.g. ``cancelled`` or ``deadline``."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            sock = self._sock
        _shutdown(sock)

    def attach(self, sock: socket.socket | None) -> None:
        """The call's socket (from the trace extension); shut down now if already aborted."""
        with self._lock:
            self._sock = sock
            aborted = self._reason is not None
        if aborted:
            _shutdown(sock)

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore ``trace`` callback: attach the socket of a new connection."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            get = getattr(stream, "get_extra_info", None)
            self.attach(get("socket") if get is not None else None)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed or never connected: nothing left to stop
        pass


def _unavailable(message: str) -> NodeError:
    return NodeError(ErrorCode.INFER_UNAVAILABLE, message)


class ChatEndpoint:
    """An OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: up to and including ``/v1`` (``workers.infer.baseUrl``).
        api_key: bearer token or ``None``; sent only in the ``Authorization`` header.
        connect_timeout_s: connect timeout, seconds.
        read_timeout_s: longest silence while reading the reply, seconds.
        transport: an httpx transport (tests); ``None`` for the default.

    Thread-safe: calls from several threads each open their own connection.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: SecretStr | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        headers = {"Accept": "text/event-stream, application/json"}
        if api_key is not None and api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(
                connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s,
                pool=connect_timeout_s,
            ),
            limits=httpx.Limits(max_keepalive_connections=0),
            transport=transport,
            trust_env=False,
        )  # fmt: skip

    def __repr__(self) -> str:  # no URL (it may hold credentials), no key
        return "ChatEndpoint()"

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def probe(self, timeout_s: float) -> bool:
        """Whether a server answers ``GET {baseUrl}/models`` within ``timeout_s``, with any
        HTTP status (a 401 or a 404 still proves one is there). Nothing is logged."""
        import httpx

        try:
            self._client.get("models", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return True

    def chat(self, body: dict[str, Any], abort: CallAbort) -> ChatReply:
        """Send one chat completion request and read the whole (streamed) reply.

        Args:
            body: the request body (``stream: true`` for a streamed reply).
            abort: stops the call from another thread; when it has fired, the transport
                error it causes is re-raised as :class:`CallAborted`.

        Returns:
            The accumulated reply.

        Raises:
            CallAborted: ``abort`` fired (cancel, deadline, request timeout).
            NodeError: ``INFER_UNAVAILABLE`` (see the module docstring).
        """
        import httpx

        reply = ChatReply()
        try:
            with self._client.stream(
                "POST", "chat/completions", json=body, extensions={"trace": abort.trace}
            ) as response:
                self._check_status(response)
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    done = self._read_events(response, reply, abort)
                else:
                    reply.add(_parse_json(response.read()))
                    done = True
        except httpx.HTTPError as exc:
            if abort.reason is not None:
                raise CallAborted(abort.reason) from None
            raise _transport_error(exc) from None
        if abort.reason is not None:
            raise CallAborted(abort.reason)
        if not done and not reply.finish_reason:
            raise _unavailable("the model endpoint ended the stream before the reply was complete")
        return reply

    @staticmethod
    def _check_status(response: httpx.Response) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        logger.warning("model endpoint answered HTTP %s", status)
        if status in (401, 403):
            raise _unavailable(f"the model endpoint refused the credentials (HTTP {status})")
        if 400 <= status < 500 and status != 429:
            raise _unavailable(
                f"the model endpoint rejected the request (HTTP {status}); e.g. a prompt "
                "longer than its context, an unknown model or a schema it cannot apply"
            )
        raise _unavailable(f"the model endpoint is unavailable (HTTP {status})")

    @staticmethod
    def _read_events(response: httpx.Response, reply: ChatReply, abort: CallAbort) -> bool:
        """Fold ``data:`` events into ``reply``; True once ``[DONE]`` arrived."""
        for data in _sse_data(response.iter_lines()):
            if abort.reason is not None:
                return False
            if data == "[DONE]":
                return True
            reply.add(_parse_json(data))
        return False


class CallAborted(Exception):
    """The call was stopped by its :class:`CallAbort`; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The payloads of the ``data:`` fields of a server-sent event stream.

    Multi-line data is joined with newlines; comments (``:``), ``event:``, ``id:`` and
    ``retry:`` are skipped (the WHATWG event-stream format).
    """
    buffer: list[str] = []
    for line in lines:
        if line == "":
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            buffer.append(value[1:] if value.startswith(" ") else value)
        elif line.startswith("error:"):  # llama.cpp's in-stream error field
            raise _unavailable("the model endpoint reported an error in its reply")
    if buffer:
        yield "\n".join(buffer)


def _parse_json(data: str | bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise _unavailable("the model endpoint answered a malformed body") from None


def _transport_error(exc: httpx.HTTPError) -> NodeError:
    import httpx

    logger.warning("model endpoint unreachable: %s", type(exc).__name__)
    if isinstance(exc, httpx.ConnectError):
        return _unavailable("the model endpoint refused or failed the connection")
    if isinstance(exc, httpx.TimeoutException):
        return _unavailable("the model endpoint did not answer in time")
    return _unavailable("the model endpoint closed the connection before the reply was complete")
