"""Running the MCP server for one operator-given scope: stdio, or streamable HTTP on loopback.

``ditto-worker mcp --scope tenant=…,user=…`` runs :func:`serve_stdio` (what an MCP host
such as Claude Desktop launches) or, with ``--transport http``, :func:`serve_http`: the
same tools at ``http://HOST:PORT/mcp``, stateless (every request stands alone, so any
process can answer it), JSON responses, DNS-rebinding protection on. That server has no
authentication of its own — whoever reaches it acts for the operator's scope — so it
listens on a loopback address only; the authenticated one is the gateway's ``/mcp``
(``ditto-worker serve``, docs/integrations-mcp.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from mcp.server.transport_security import TransportSecuritySettings

from ditto_worker.errors import ConfigError

if TYPE_CHECKING:
    from mcp.server import Server
    from starlette.applications import Starlette

__all__ = [
    "LOOPBACK_HOSTS",
    "check_loopback",
    "http_app",
    "serve_http",
    "serve_stdio",
    "transport_security",
]

LOOPBACK_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""``Host`` header patterns a loopback server accepts (``:*``: any port)."""


def transport_security(allowed_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection: ``Host`` must be a loopback name or one of
    ``allowed_hosts`` (``name:port`` or ``name:*``), else 421; an ``Origin`` header must
    be ``http(s)://`` one of them, else 403."""
    hosts = [*LOOPBACK_HOSTS, *allowed_hosts]
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def check_loopback(host: str) -> None:
    """Refuse a listening address that is not loopback.

    Raises:
        ConfigError: ``host`` is not ``localhost``, ``127.0.0.0/8`` or ``::1``.
    """
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"--host {host!r}: the operator-scoped MCP server has no authentication and "
            "listens on loopback only (127.0.0.1, ::1, localhost); serve /mcp with "
            "bearer identities through 'ditto-worker serve'"
        )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` over this process's stdin/stdout until the host closes stdin."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(
    server: Server[Any], *, allowed_hosts: Sequence[str] = (), max_body_bytes: int = 1 << 20
) -> Starlette:
    """The streamable-HTTP app of ``server`` at ``/mcp``: stateless, JSON responses,
    DNS-rebinding protection (:func:`transport_security`), bodies over
    ``max_body_bytes`` refused with 413."""
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=transport_security(allowed_hosts),
        max_request_body_size=max_body_bytes,
    )


def serve_http(
    server: Server[Any], host: str, port: int, *, allowed_hosts: Sequence[str] = ()
) -> None:
    """Serve :func:`http_app` on ``host:port`` (uvicorn) until SIGINT/SIGTERM.

    Raises:
        ConfigError: ``host`` is not a loopback address (:func:`check_loopback`).
    """
    import uvicorn

    check_loopback(host)
    app = http_app(server, allowed_hosts=allowed_hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
