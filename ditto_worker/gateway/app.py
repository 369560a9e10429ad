"""The HTTP gateway: every node of a runtime as ``POST /v1/nodes/{node}`` (issue 26).

Built on FastAPI (Starlette) and served by uvicorn (:mod:`ditto_worker.gateway.serve`).
The app wraps one :class:`~ditto_worker.runtime.Runtime`: the embedded runtime when no
broker is configured, else the fleet client, so every worker kind the installation knows
(entry points included) is reachable the same way.

Every request first passes :class:`~ditto_worker.gateway.guard.Guard` (ambiguous
credentials 400; the identity's rate and share 429; the body read whole under its cap,
413; then an in-flight slot, 429). Per call, in this order, before anything is enqueued:
the bearer identity (401), the node (404 with the closest ids) and the space it may use
(403), JSON (depth, encoding) and the node's input model (422 naming the field). Then
the call runs under the identity's scope, the caller's ``Ditto-Timeout`` (seconds,
capped by ``gateway.maxTimeoutS``) and a cancel token that a client disconnect fires.
The answer is the NodeResult with the status of :func:`~ditto_worker.gateway.errors.http_status`.

Routes: ``POST /v1/nodes/{node}`` (one per node, so ``/openapi.json`` carries each node's
request and response schema), ``GET /v1/nodes``, ``GET /healthz`` (the process is up),
``GET /readyz`` (the broker and result backend answer, or the embedded runtime is open),
``GET /metrics`` (Prometheus), ``/mcp`` (:mod:`.mcp_mount`), LangGraph Server's ``/store/*``
and ``GET /ok`` (:mod:`.store_routes`), ``POST /v1/embeddings`` (:mod:`.embeddings`).
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import TypeAdapter, ValidationError

from ditto_worker.contracts import NodeResult, to_wire
from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.admission import Admission
from ditto_worker.gateway.auth import Authenticator, Identity
from ditto_worker.gateway.embeddings import mount_embeddings
from ditto_worker.gateway.errors import RETRY_AFTER_S, GatewayError, http_status
from ditto_worker.gateway.guard import IDENTITY_SCOPE_KEY, JSON_SCOPE_KEY, install, parse_json
from ditto_worker.gateway.mcp_mount import mount_mcp
from ditto_worker.gateway.metrics import GatewayMetrics
from ditto_worker.gateway.openapi import merge_components, node_openapi
from ditto_worker.gateway.protocol import SETTINGS_STATE_KEY
from ditto_worker.gateway.settings import GatewaySettings
from ditto_worker.gateway.store_routes import mount_store
from ditto_worker.memory.checks import describe
from ditto_worker.runtime import CancelToken, NodeSpec, Runtime

__all__ = ["SPACE_HEADER", "TIMEOUT_HEADER", "create_app"]

logger = logging.getLogger(__name__)

TIMEOUT_HEADER = "Ditto-Timeout"
"""Request header: the caller's deadline for the call, seconds (a decimal number > 0),
capped by ``gateway.maxTimeoutS``; default ``fleet.callTimeoutS``."""

SPACE_HEADER = "Ditto-Space"
"""Request header: the space of the call (``memory`` by default, ``task:<id>`` …), one
the identity's ``spaces`` allow."""

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""Request header: the call's operation id (MEM-RUN-7), namespaced per tenant."""

ReadyCheck = Callable[[], Awaitable[bool]]
_CORS_HEADERS = ["Authorization", "X-Api-Key", "Content-Type"]  # X-Api-Key: /store/* clients


def create_app(
    runtime: Runtime,
    settings: GatewaySettings,
    *,
    call_timeout_s: float = 30.0,
    ready: ReadyCheck | None = None,
    owns_runtime: bool = False,
) -> FastAPI:
    """The gateway app over ``runtime``.

    Args:
        runtime: the runtime whose nodes are served (``create_ditto``).
        settings: the ``gateway:`` section (identities, bounds).
        call_timeout_s: the deadline of a call whose request names none, seconds.
        ready: what ``/readyz`` awaits (True: ready); ``None``: always ready.
        owns_runtime: close ``runtime`` when the app shuts down (after calls drained).

    Raises:
        ConfigError: the JWT key is missing.

    With no identity configured the app still starts (so a Procfile or compose file that
    runs it beside the workers keeps running) but fails closed: every node call is 401,
    and one warning says so.
    """
    auth = Authenticator(settings)
    if not auth.configured:
        logger.warning(
            "gateway: no identities configured (gateway.tokens or gateway.jwt in "
            "ditto.yaml): every node call is refused with 401"
        )
    specs = {node: spec for d in runtime.definitions for node, spec in d.nodes.items()}
    metrics = GatewayMetrics()
    gate = _Gate(runtime, settings, auth, specs, call_timeout_s, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        # gateway.protocol reads its limits from the state; /mcp's manager runs meanwhile
        async with app.state.mcp_run():
            yield {SETTINGS_STATE_KEY: settings}
            await gate.drain(settings.shutdown_grace_s)
        if owns_runtime:
            await asyncio.to_thread(runtime.close)

    app = FastAPI(
        title="ditto-worker gateway",
        version="1",
        description="Every ditto-worker node over HTTP; the trusted scope comes from the "
        "bearer identity only (SPEC.md MEM-RUN-5).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    # every route, those added later included: admission, ambiguous credentials, JSON
    # limits, NodeResult-shaped failures, no redirects (gateway.guard, issue 37)
    gate.admission = install(app, settings, auth, metrics, frozenset(specs))
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE"],  # PUT, DELETE: /store/items
            allow_headers=[*_CORS_HEADERS, TIMEOUT_HEADER, SPACE_HEADER, IDEMPOTENCY_HEADER],
        )
    # node calls are served by one plain Starlette route registered ahead of the per-node
    # routes below, which describe each node in /openapi.json: its handler takes the raw
    # Request, so FastAPI's per-route machinery (dependency solving, exit stacks) is not
    # run per call; the same app, middleware (CORS) and exception handling apply
    app.add_route("/v1/nodes/{node}", gate.dispatch, methods=["POST"], include_in_schema=False)
    for node in sorted(specs):
        app.add_api_route(
            f"/v1/nodes/{node}",
            gate.endpoint(node),
            methods=["POST"],
            name=node,
            operation_id=node.replace(".", "_").lower(),
            openapi_extra=node_openapi(node, specs[node]),
            include_in_schema=True,
        )
    app.add_api_route("/v1/nodes", gate.list_nodes, methods=["GET"], name="list_nodes")
    app.add_api_route("/healthz", _healthz, methods=["GET"], name="healthz")
    app.add_api_route("/readyz", _readyz(ready), methods=["GET"], name="readyz")
    app.add_api_route("/metrics", metrics.endpoint, methods=["GET"], name="metrics",
                      include_in_schema=False)  # fmt: skip
    app.state.mcp_run = mount_mcp(app, settings, auth, metrics, specs, gate.call_as, runtime)
    mount_store(app, gate.identify, gate.call_as, settings.max_json_depth)
    mount_embeddings(app, gate.identify, gate.call_as, settings.max_json_depth)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)  # fmt: skip
            app.openapi_schema = merge_components(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _healthz() -> dict[str, str]:
    return {"status": "ok"}


def _readyz(ready: ReadyCheck | None) -> Callable[[], Awaitable[Response]]:
    async def readyz() -> Response:
        ok = True if ready is None else await ready()
        return JSONResponse({"status": "ready" if ok else "unavailable"}, 200 if ok else 503)

    return readyz


class _Gate:
    """The per-call checks and the call itself (state shared by every route)."""

    def __init__(
        self,
        runtime: Runtime,
        settings: GatewaySettings,
        auth: Authenticator,
        specs: dict[str, NodeSpec],
        call_timeout_s: float,
        metrics: GatewayMetrics,
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.auth = auth
        self.specs = specs
        self.call_timeout_s = call_timeout_s
        self.metrics = metrics
        self.admission = Admission(settings, metrics.in_flight)
        self._adapters = {
            node: TypeAdapter(spec.input) for node, spec in specs.items() if spec.input is not None
        }

    def endpoint(self, node: str) -> Callable[[Request], Awaitable[Response]]:
        async def call(request: Request) -> Response:
            return await self.call(node, request)

        call.__name__ = f"call_{node.replace('.', '_').lower()}"
        return call

    async def dispatch(self, request: Request) -> Response:
        """``POST /v1/nodes/{node}``: the call, or 404 for a node this runtime lacks."""
        node = request.path_params.get("node", "")
        if node in self.specs:
            return await self.call(node, request)
        return await self.unknown(node, request)

    async def unknown(self, node: str, request: Request) -> Response:
        try:
            self.identify(request)
        except GatewayError as exc:
            return _refusal(node, exc)
        close = difflib.get_close_matches(node.upper(), list(self.specs), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return _refusal(node, GatewayError(ErrorCode.UNKNOWN_NODE, f"no node {node[:80]!r}{hint}"))

    async def list_nodes(self, request: Request) -> Response:
        try:
            identity = self.identify(request)
        except GatewayError as exc:
            return _refusal("", exc)
        nodes = [n for n in sorted(self.specs) if identity.grants.allows_node(n)]
        return JSONResponse({"nodes": nodes})

    async def call(self, node: str, request: Request) -> Response:
        """A node call (its in-flight slot was taken by the guard once the body was read)."""
        try:
            identity, space = self._admit(node, request)
            return await self._run(node, request, identity, space)
        except GatewayError as exc:
            self.metrics.refused(node, exc.code)
            return _refusal(node, exc)

    def identify(self, request: Request) -> Identity:
        """The identity the guard verified, else the ``Authorization`` header's (401)."""
        identity = request.scope.get(IDENTITY_SCOPE_KEY)
        if isinstance(identity, Identity):
            return identity
        return self.auth.identify(request.headers.get("authorization"))

    def _admit(self, node: str, request: Request) -> tuple[Identity, str]:
        identity = self.identify(request)
        space = request.headers.get(SPACE_HEADER, "memory")
        identity.check(node, space)
        return identity, space

    async def call_as(self, node: str, input: Any, identity: Identity) -> NodeResult[Any]:
        """A ``/mcp`` tool call (the guard admitted its request): grants (space ``memory``),
        input model and metrics as on ``/v1/nodes``, the identity's scope; refusals fail."""
        try:
            identity.check(node, "memory")
            self._valid(node, input)
        except GatewayError as exc:
            self.metrics.refused(node, exc.code)
            return NodeResult.failure("-", node, exc.code, exc.message)
        scope = {"tenant": identity.tenant, "user": identity.user}
        timeout_s = min(self.call_timeout_s, self.settings.max_timeout_s)
        result = await self.runtime.ainvoke(node, input, timeout=timeout_s, scope=scope)
        self.metrics.answered(node, result.status, result.error.code if result.error else None)
        return result

    async def _run(self, node: str, request: Request, identity: Identity, space: str) -> Response:
        parsed = request.scope.get(JSON_SCOPE_KEY)
        input = self._input(node, await self._body(request), parsed)
        timeout_s = self._timeout(request)
        options: dict[str, Any] = {}
        key = request.headers.get(IDEMPOTENCY_HEADER)
        if key is not None:
            options["operation_id"] = _operation_id(identity, key)
        scope: dict[str, str] = {"tenant": identity.tenant, "user": identity.user}
        if space != "memory":
            scope["space"] = space
        token = CancelToken()
        # the call runs in this task; a watcher task cancels its token if the client goes
        # away first (then the call ends cancelled and is answered to nobody)
        watch = asyncio.ensure_future(_disconnected(request))
        watch.add_done_callback(lambda done: self._gone(done, token, node))
        try:
            result = await self.runtime.ainvoke(
                node, input, timeout=timeout_s, cancel=token, scope=scope, **options
            )  # fmt: skip
        finally:
            watch.cancel()
        wire = to_wire(result)
        code = result.error.code if result.error is not None else None
        status = http_status(result.status, code)
        self.metrics.answered(node, result.status, code)
        headers = {"Retry-After": RETRY_AFTER_S[status]} if status in RETRY_AFTER_S else None
        return JSONResponse(wire, status, headers=headers)

    def _gone(self, watch: asyncio.Future[None], token: CancelToken, node: str) -> None:
        """The watcher ended: if the client disconnected, cancel the call."""
        if not watch.cancelled() and watch.exception() is None:
            token.cancel()
            self.metrics.disconnected(node)

    async def _body(self, request: Request) -> bytes:
        cap = self.settings.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > cap:
            raise _too_large(cap)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise _too_large(cap)
            chunks.append(chunk)
        return b"".join(chunks)

    def _input(self, node: str, body: bytes, parsed: tuple[Any, str | None] | None) -> Any:
        """The body's JSON (as the guard parsed it, when it did), checked by the node's
        input model."""
        if parsed is None and body:
            parsed = parse_json(body, self.settings.max_json_depth)
        data, problem = parsed if parsed is not None else (None, None)
        if problem is not None:
            raise GatewayError(ErrorCode.INVALID_INPUT, problem)
        return self._valid(node, data)

    def _valid(self, node: str, data: Any) -> Any:
        adapter = self._adapters.get(node)
        if adapter is not None:
            try:
                adapter.validate_python(data)
            except ValidationError as exc:
                raise GatewayError(
                    ErrorCode.INVALID_INPUT, f"Invalid input: {describe(exc)}"
                ) from None
        return data

    def _timeout(self, request: Request) -> float:
        raw = request.headers.get(TIMEOUT_HEADER)
        if raw is None:
            return min(self.call_timeout_s, self.settings.max_timeout_s)
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            message = f"Invalid input: header {TIMEOUT_HEADER}: seconds, a number > 0"
            raise GatewayError(ErrorCode.INVALID_INPUT, message)
        return min(value, self.settings.max_timeout_s)

    async def drain(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` seconds for the calls in flight to end."""
        try:
            await asyncio.wait_for(self.admission.idle.wait(), grace_s)
        except TimeoutError:
            logger.warning(
                "gateway: %d calls still in flight at shutdown", self.admission.in_flight
            )


def _operation_id(identity: Identity, key: str) -> str:
    """The operation id of an ``Idempotency-Key``: namespaced per tenant (a digest of the
    tenant, then the key), so two tenants' keys never meet even where a store's ledger is
    not per namespace (MEM-RUN-7); at most 217 characters, under the 256 allowed."""
    import hashlib

    if not key or len(key) > 200 or not key.isprintable():
        message = f"Invalid input: header {IDEMPOTENCY_HEADER}: 1 to 200 printable characters"
        raise GatewayError(ErrorCode.INVALID_INPUT, message)
    tenant = hashlib.sha256(identity.tenant.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{tenant}:{key}"


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body was read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _too_large(cap: int) -> GatewayError:
    return GatewayError(ErrorCode.PAYLOAD_TOO_LARGE, f"the body is over {cap} bytes")


def _refusal(node: str, exc: GatewayError) -> Response:
    return JSONResponse(exc.body(node), exc.status, headers=exc.headers or None)
