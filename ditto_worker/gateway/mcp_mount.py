"""``/mcp`` on the gateway: the MCP tools of the MEMORY nodes, authenticated by the
gateway's own identities (issue 33 item 3).

Built from the MCP SDK's parts: its ``StreamableHTTPSessionManager`` (stateless, JSON
responses, so any process of ``serve --workers N`` answers any request; DNS-rebinding
protection on, loopback names plus ``gateway.mcp.allowedHosts``; bodies over
``gateway.maxBodyBytes`` refused), behind its bearer-token middleware with a
``TokenVerifier`` over the gateway's :class:`~ditto_worker.gateway.auth.Authenticator` —
the static tokens and the JWT of ``gateway.tokens`` / ``gateway.jwt``, nothing else (the
identity the gateway's guard already verified for the request is taken as it is, so a JWT
is decoded once; an ``X-Api-Key`` is one of the tokens, as on every route). A
missing or bad token is 401 with ``WWW-Authenticate: Bearer`` (counted in ``/metrics`` as
node ``MCP``, code ``UNAUTHENTICATED``); each tool call is admitted by the gateway like a
``POST /v1/nodes`` call (node and space grants, in-flight bound, input model, metrics)
and runs under the token's scope (space ``memory``). When a model is configured
(:func:`~ditto_worker.memory_tasks.task_tools.task_tools_offered`) the worked ``search``
and ``write`` tasks are tools too, for a token granted every node they call
(``PERMISSION_DENIED`` otherwise), counted in ``/metrics`` as node ``TASK.SEARCH`` /
``TASK.WRITE``, their artifacts under ``gateway.mcp.artifactsDir`` (``.ditto/artifacts``
of the working folder by default), each task's deadline ``gateway.maxTimeoutS``.

Protected-resource metadata (RFC 9728): served at
``/.well-known/oauth-protected-resource/mcp`` only when ``gateway.jwt.issuer`` and
``gateway.mcp.resourceUrl`` are both set, naming that issuer as the authorization server;
with static tokens only there is no authorization server to name, so none is served.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.gateway.auth import Authenticator, Identity
from ditto_worker.gateway.errors import GatewayError
from ditto_worker.gateway.guard import IDENTITY_SCOPE_KEY
from ditto_worker.gateway.metrics import GatewayMetrics
from ditto_worker.gateway.settings import GatewaySettings
from ditto_worker.runtime import NodeSpec, Runtime
from ditto_worker.scope import Scope

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mcp.server.auth.provider import AccessToken

    from ditto_worker.memory_tasks import TaskOutcome

__all__ = ["MCP_PATH", "mount_mcp"]

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
"""Where the gateway serves MCP (streamable HTTP)."""

CallAs = Callable[[str, Any, Identity], Awaitable[NodeResult[Any]]]


def mount_mcp(
    app: FastAPI,
    settings: GatewaySettings,
    auth: Authenticator,
    metrics: GatewayMetrics,
    specs: dict[str, NodeSpec],
    call_as: CallAs,
    runtime: Runtime | None = None,
) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """Add ``/mcp`` (and its metadata route, if any) to ``app``.

    Args:
        runtime: the runtime the task tools run on (``None``: no task tools).

    Returns:
        What the app's lifespan must enter: the session manager's task group, or a no-op
        when ``gateway.mcp.enabled`` is false or the ``mcp`` extra is not installed.
    """
    if not settings.mcp.enabled:
        return nullcontext
    try:
        from mcp.server.auth.middleware.auth_context import get_access_token
    except ImportError:
        logger.info("gateway: no /mcp (the mcp extra is not installed)")
        return nullcontext
    from ditto_worker.integrations.mcp import create_mcp_server

    async def call(node: str, arguments: Any) -> NodeResult[Any]:
        token = get_access_token()
        identity = getattr(token, "identity", None)
        if not isinstance(identity, Identity):  # the middleware let nobody else through
            return NodeResult.failure("-", node, ErrorCode.UNAUTHENTICATED, "no identity")
        return await call_as(node, arguments, identity)

    tools = [] if runtime is None else _task_tools(runtime, settings, metrics, get_access_token)
    server = create_mcp_server(specs, call, tools)
    manager, endpoint = _endpoint(server, settings, _verifier(auth, metrics))
    app.add_route(MCP_PATH, endpoint, include_in_schema=False)
    for route in _metadata_routes(settings):
        app.router.routes.append(route)
    run: Callable[[], AbstractAsyncContextManager[Any]] = manager.run
    return run


def _task_tools(
    runtime: Runtime, settings: GatewaySettings, metrics: GatewayMetrics, access: Any
) -> list[Any]:
    """The worked tasks as tools, acting for each request's verified identity."""
    from ditto_worker.memory_tasks.task_tools import TASK_TOOLS, task_tools, task_tools_offered

    if not task_tools_offered(runtime):
        return []

    def trusted() -> tuple[Scope, Callable[[str, str], bool]]:
        identity = getattr(access(), "identity", None)
        if not isinstance(identity, Identity):  # the middleware let nobody else through
            raise NodeError(ErrorCode.UNAUTHENTICATED, "no identity")
        grants = identity.grants

        def allows(node: str, space: str) -> bool:
            return grants.allows_node(node) and grants.allows_space(space)

        return Scope(identity.tenant, identity.user), allows

    def counted(name: str, outcome: TaskOutcome) -> None:
        code = outcome.error["code"] if outcome.error else None
        metrics.answered(f"TASK.{TASK_TOOLS[name].upper()}", outcome.status, code)

    return list(task_tools(runtime, trusted, settings.mcp.artifacts_dir.resolve(),
                           timeout_s=settings.max_timeout_s, on_outcome=counted))  # fmt: skip


def _verifier(auth: Authenticator, metrics: GatewayMetrics) -> Any:
    from mcp.server.auth.provider import AccessToken

    class _Verified(AccessToken):
        """An access token carrying the gateway identity it was verified as."""

        model_config = ConfigDict(arbitrary_types_allowed=True)
        identity: Identity

    class GatewayTokenVerifier:
        """The MCP SDK's ``TokenVerifier`` over the gateway's static tokens and JWT."""

        async def verify_token(self, token: str) -> AccessToken | None:
            try:
                identity = auth.identify(f"Bearer {token}")
            except GatewayError:
                metrics.refused("MCP", ErrorCode.UNAUTHENTICATED)
                return None
            return self.token_of(identity)

        def token_of(self, identity: Identity) -> AccessToken:
            """The access token of a verified identity."""
            return _Verified(
                token="",  # never kept: the identity is all a call needs
                client_id=f"{identity.tenant}/{identity.user}",
                subject=identity.user,
                scopes=[],
                identity=identity,
            )

    return GatewayTokenVerifier()


def _backend(verifier: Any) -> Any:
    """The SDK's bearer backend over ``verifier``, taking first the identity the guard
    verified for this request (its ``Authorization``, or an ``X-Api-Key`` equal to it or
    alone), so a JWT is decoded once per request, not twice."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
    from starlette.authentication import AuthCredentials
    from starlette.requests import HTTPConnection

    class GuardFirstBackend(BearerAuthBackend):
        async def authenticate(self, conn: HTTPConnection) -> Any:
            identity = conn.scope.get(IDENTITY_SCOPE_KEY)
            if isinstance(identity, Identity):
                token = verifier.token_of(identity)
                return AuthCredentials(token.scopes), AuthenticatedUser(token)
            return await super().authenticate(conn)

    return GuardFirstBackend(verifier)


def _endpoint(server: Any, settings: GatewaySettings, verifier: Any) -> tuple[Any, Any]:
    """The session manager and the authenticated ASGI endpoint of ``/mcp``."""
    from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
    from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from starlette.middleware.authentication import AuthenticationMiddleware

    from ditto_worker.integrations.mcp.serve import transport_security

    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        stateless=True,
        security_settings=transport_security(settings.mcp.allowed_hosts),
        max_request_body_size=settings.max_body_bytes,
    )
    auth = _auth_settings(settings)
    metadata_url = None
    if auth is not None and auth.resource_server_url is not None:
        from mcp.server.auth.routes import build_resource_metadata_url

        metadata_url = build_resource_metadata_url(auth.resource_server_url)
    guarded = RequireAuthMiddleware(StreamableHTTPASGIApp(manager), [], metadata_url)
    endpoint = AuthenticationMiddleware(AuthContextMiddleware(guarded), backend=_backend(verifier))
    return manager, endpoint


def _auth_settings(settings: GatewaySettings) -> Any:
    """The SDK's resource-server settings naming the JWT issuer, when there is one to
    name (``gateway.jwt.issuer`` and ``gateway.mcp.resourceUrl`` both set), else ``None``.
    The SDK's model keeps a path-less issuer as written (RFC 8414 compares exactly)."""
    issuer = settings.jwt.issuer if settings.jwt is not None else None
    if not issuer or not settings.mcp.resource_url:
        return None
    from mcp.server.auth.settings import AuthSettings

    return AuthSettings(
        issuer_url=issuer,
        resource_server_url=settings.mcp.resource_url,
        validate_token_resource=False,  # the verifier checks the JWT's own audience
    )


def _metadata_routes(settings: GatewaySettings) -> list[Any]:
    """RFC 9728 metadata naming the JWT issuer, when there is one to name."""
    auth = _auth_settings(settings)
    if auth is None or auth.resource_server_url is None:
        return []
    from mcp.server.auth.routes import create_protected_resource_routes

    routes: list[Any] = create_protected_resource_routes(
        resource_url=auth.resource_server_url,
        authorization_servers=[auth.issuer_url],
        resource_name="ditto-worker memory",
    )
    return routes
