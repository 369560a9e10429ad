"""The gateway's app-level guard: one ASGI middleware in front of every route (issue 37).

Protocol-level limits (header and body deadlines, header size and count, the connection
cap) are :mod:`ditto_worker.gateway.protocol`'s. :class:`Guard` takes each HTTP request
after its headers, on every route the app serves (the node routes, ``/v1/nodes``, and
any route or mount added later: ``/mcp``, ``/store/*`` …), in this order:

1. **ambiguous credentials** are 400: two ``Authorization`` headers, two ``X-Api-Key``
   headers, or a bearer token and an ``X-Api-Key`` that differ (a proxy reading the other
   one would disagree about who is calling);
2. the credential, if any, is verified (:class:`~ditto_worker.gateway.auth.Authenticator`)
   only to know whose share a request uses; a route still refuses what it refuses
   (401 …). The verified identity is left in the scope for the node routes;
3. **admission** (:class:`~ditto_worker.gateway.admission.Admission`): the identity's
   request rate, then a reading place while the body is read whole (over
   ``maxBodyBytes``: 413), then an in-flight slot for the call; each refusal is 429 with
   ``Retry-After``. ``GET /healthz``, ``/readyz`` and ``/metrics`` skip this step;
4. a **JSON body** (any body on ``/v1/nodes/…``, else a ``Content-Type`` naming JSON) is
   parsed once: too deep (``maxJsonDepth``), not UTF-8, lone surrogates, ``NaN`` or not
   JSON at all is 422 ``INVALID_INPUT`` (on a node route the node's own checks come
   first: the parse result waits in the scope);
5. the route runs; what escapes it becomes a NodeResult-shaped answer (a body too deep
   for a parser: 422; anything else: 500 ``INTERNAL_ERROR``, logged once with its
   traceback) unless the answer had started.

A client that goes away mid-body is counted (``ditto_gateway_disconnects_total``) and
logged in one line at most per minute. No answer redirects: a ``Location`` of a 3xx
answer a mounted app sends is made relative, so it never echoes the ``Host`` header.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.admission import Admission
from ditto_worker.gateway.auth import Authenticator
from ditto_worker.gateway.errors import GatewayError, failure_body
from ditto_worker.gateway.metrics import GatewayMetrics
from ditto_worker.gateway.settings import GatewaySettings

__all__ = ["IDENTITY_SCOPE_KEY", "JSON_SCOPE_KEY", "Guard", "json_depth_ok"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

IDENTITY_SCOPE_KEY = "ditto.gateway.identity"
"""Scope key: the request's verified :class:`~ditto_worker.gateway.auth.Identity`."""

JSON_SCOPE_KEY = "ditto.gateway.json"
"""Scope key: ``(data, None)`` for the parsed JSON body, ``(None, message)`` when it is
refused (a node route raises the message after its own checks)."""

NODE_PREFIX = "/v1/nodes/"
_PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_LOG_EVERY_S = 60.0


class _Gone(Exception):
    """The client went away before its body was read whole."""


class Guard:
    """The middleware (``app.add_middleware(Guard, …)``); see the module docstring.

    Args:
        app: the app behind it.
        settings: the ``gateway:`` section.
        auth: the app's authenticator.
        admission: the app's slots, shares and buckets.
        metrics: the app's metrics (refusals and disconnects counted there).
        nodes: the node ids served (the ``node`` label of a refusal; others count as
            ``""``, so no path an attacker makes up becomes a label).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: GatewaySettings,
        auth: Authenticator,
        admission: Admission,
        metrics: GatewayMetrics,
        nodes: frozenset[str],
    ) -> None:
        self.app = app
        self.settings = settings
        self.auth = auth
        self.admission = admission
        self.metrics = metrics
        self.nodes = nodes
        self._logged_at: float | None = None
        self._unlogged = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        node = path[len(NODE_PREFIX) :] if path.startswith(NODE_PREFIX) else ""
        label = node if node in self.nodes else ""
        send = _relative_redirects(send)
        try:
            key = self._identify(scope)
            if path in _PROBES and scope.get("method") in ("GET", "HEAD"):
                await self._run(scope, receive, send, node)
                return
            await self._admitted(scope, receive, send, key, node, label)
        except GatewayError as exc:
            self.metrics.refused(label, exc.code)
            await _answer(scope, receive, send, node, exc)

    async def _admitted(
        self, scope: Scope, receive: Receive, send: Send, key: str, node: str, label: str
    ) -> None:
        self.admission.check_rate(key)
        self.admission.start_reading(key)
        try:
            body = await self._read(scope, receive)
        except _Gone:
            self._gone(label)
            return
        finally:
            self.admission.stop_reading(key)
        self._parse(scope, body, node)
        self.admission.enter(key)
        try:
            await self._run(scope, _replay(body, receive), send, node)
        finally:
            self.admission.leave(key)

    def _identify(self, scope: Scope) -> str:
        """The admission key of the request's verified identity (``""``: none).

        Raises:
            GatewayError: 400 for ambiguous credentials.
        """
        bearers = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        api_keys = [v for k, v in scope.get("headers", ()) if k == b"x-api-key"]
        if len(bearers) > 1 or len(api_keys) > 1:
            name = "Authorization" if len(bearers) > 1 else "X-Api-Key"
            raise _ambiguous(f"header {name}: given more than once")
        authorization = bearers[0].decode("latin-1") if bearers else None
        if api_keys:
            api_key = api_keys[0].decode("latin-1").strip()
            scheme, _, token = (authorization or "").partition(" ")
            if authorization is not None and token.strip() != api_key:
                raise _ambiguous("headers Authorization and X-Api-Key: different credentials")
            authorization = authorization or f"Bearer {api_key}"
        if authorization is None:
            return ""
        try:
            identity = self.auth.identify(authorization)
        except GatewayError:
            return ""
        scope[IDENTITY_SCOPE_KEY] = identity
        return f"{identity.tenant}\x00{identity.user}"

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body (413 over the cap, before it is read whole).

        Raises:
            _Gone: the client went away (or its body deadline passed) first.
            GatewayError: ``PAYLOAD_TOO_LARGE``.
        """
        cap = self.settings.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > cap:
                raise _too_large(cap)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise _too_large(cap)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _parse(self, scope: Scope, body: bytes, node: str) -> None:
        """Parse a JSON body once; refuse it (422) unless a node route refuses it later.

        Raises:
            GatewayError: ``INVALID_INPUT`` for a JSON body off the node routes.
        """
        if not body:
            return
        if not node:
            kinds = [v for k, v in scope.get("headers", ()) if k == b"content-type"]
            if not any(b"json" in kind.lower() for kind in kinds):
                return
        data, problem = parse_json(body, self.settings.max_json_depth)
        if node:
            scope[JSON_SCOPE_KEY] = (data, problem)
        elif problem is not None:
            raise GatewayError(ErrorCode.INVALID_INPUT, problem)

    async def _run(self, scope: Scope, receive: Receive, send: Send, node: str) -> None:
        """The route, with what escapes it answered as a NodeResult."""
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except ClientDisconnect:
            self._gone(node if node in self.nodes else "")
        except RecursionError:
            if not started:
                await _answer(scope, receive, send, node, _too_deep(self.settings))
        except Exception as exc:  # noqa: BLE001 - answered as a NodeResult, logged once
            logger.error("gateway: %s %s failed (%s)", scope.get("method"), scope.get("path"),
                         type(exc).__name__, exc_info=True)  # fmt: skip
            if not started:
                error = GatewayError("INTERNAL_ERROR", "the gateway failed; see its log")
                await _answer(scope, receive, send, node, error)

    def _gone(self, label: str) -> None:
        """Count a client gone mid-request; log it in one line at most per minute."""
        self.metrics.disconnected(label)
        self._unlogged += 1
        now = time.monotonic()
        if self._logged_at is None or now - self._logged_at >= _LOG_EVERY_S:
            logger.warning("gateway: %d clients went away before their request was read "
                        "whole (ditto_gateway_disconnects_total)", self._unlogged)  # fmt: skip
            self._logged_at, self._unlogged = now, 0


def parse_json(body: bytes, max_depth: int) -> tuple[Any, str | None]:
    """``(data, None)`` for a JSON body the gateway takes, else ``(None, message)``.

    Refused: not JSON, not UTF-8/16/32, ``NaN``/``Infinity``, a number past Python's
    digit limit, nesting deeper than ``max_depth``, a lone UTF-16 surrogate.
    """
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        return None, _deep_message(max_depth)
    except (ValueError, UnicodeDecodeError):
        return None, "Invalid input: the body is not JSON"
    if body.count(b"[") + body.count(b"{") > max_depth and not json_depth_ok(data, max_depth):
        return None, _deep_message(max_depth)
    if _SURROGATE.search(body) is not None and not _encodable(data):
        return None, "Invalid input: the body has a lone UTF-16 surrogate (\\ud800-\\udfff)"
    return data, None


def json_depth_ok(data: Any, max_depth: int) -> bool:
    """True when ``data`` (parsed JSON) nests arrays and objects at most ``max_depth``
    deep (``[]`` and ``{}`` are depth 1)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        if depth + 1 > max_depth:
            return False
        stack.extend((item, depth + 1) for item in value if isinstance(item, dict | list))
    return True


def _encodable(data: Any) -> bool:
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the read body once, then the connection's own (so a
    route still hears the client's disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _relative_redirects(send: Send) -> Send:
    async def relative(message: Message) -> None:
        if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
            message["headers"] = [
                (k, _path_only(v) if k.lower() == b"location" else v)
                for k, v in message.get("headers", ())
            ]
        await send(message)

    return relative


def _path_only(location: bytes) -> bytes:
    """``http://host/a?b`` -> ``/a?b``: a redirect never names a host."""
    if b"//" not in location.split(b"?", 1)[0]:
        return location
    rest = location.split(b"//", 1)[1]
    slash = rest.find(b"/")
    return rest[slash:] if slash >= 0 else b"/"


async def _answer(scope: Scope, receive: Receive, send: Send, node: str, exc: GatewayError) -> None:
    body = failure_body(node[:200], exc.code, exc.message)
    await JSONResponse(body, exc.status, headers=exc.headers or None)(scope, receive, send)


def _ambiguous(message: str) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_INPUT, f"Ambiguous credentials: {message}", status=400)


def _too_large(cap: int) -> GatewayError:
    return GatewayError(ErrorCode.PAYLOAD_TOO_LARGE, f"the body is over {cap} bytes")


def _deep_message(max_depth: int) -> str:
    return f"Invalid input: the body nests arrays and objects deeper than {max_depth}"


def _too_deep(settings: GatewaySettings) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_INPUT, _deep_message(settings.max_json_depth))


def install(
    app: Any, settings: GatewaySettings, auth: Authenticator, metrics: GatewayMetrics,
    nodes: frozenset[str],
) -> Admission:  # fmt: skip
    """Put :class:`Guard` in front of every route of ``app`` (a FastAPI app), answer an
    unknown path 404 (a NodeResult, no trailing-slash redirect), and return the app's
    :class:`~ditto_worker.gateway.admission.Admission`."""
    admission = Admission(settings, metrics.in_flight)
    app.router.redirect_slashes = False
    app.router.default = _not_found
    app.add_middleware(Guard, settings=settings, auth=auth, admission=admission,
                       metrics=metrics, nodes=nodes)  # fmt: skip
    return admission


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    path = str(scope.get("path", ""))[:200]
    error = GatewayError(ErrorCode.NOT_FOUND, f"no route {scope.get('method')} {path!r}")
    await _answer(scope, receive, send, "", error)
