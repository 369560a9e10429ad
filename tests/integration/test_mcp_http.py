"""MCP over streamable HTTP with the official client (issue 33 item 3): ``/mcp`` of
``ditto-worker serve``, authenticated by the gateway's static tokens and JWT (the scope
from the token exactly as on ``/v1/nodes``; grants, metrics, DNS-rebinding protection,
protected-resource metadata), and ``ditto-worker mcp --transport http`` on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("mcp")
jwt = pytest.importorskip("jwt")

from ditto_worker.testing.gateway import GatewayServer  # noqa: E402
from tests.integration._gateway_kit import serving  # noqa: E402
from tests.integration._mcp_kit import (  # noqa: E402
    call,
    check_every_tool,
    check_other_scope_unreachable,
    check_scope_arguments_refused,
    http_client,
    operator_http,
)

T1, T2, READER = "mcp-token-one", "mcp-token-two", "mcp-token-reader"
KEY = "a-test-hmac-key-of-at-least-32-bytes!!"
ISSUER = "https://issuer.example"


def _jwt(tenant: str, user: str) -> str:
    claims = {"tenant": tenant, "sub": user, "iss": ISSUER, "exp": int(time.time()) + 600}
    return str(jwt.encode(claims, KEY, algorithm="HS256"))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tokens = {T1: "tenant: t1, user: u1", T2: "tenant: t2, user: u2",
              READER: 'tenant: t1, user: u1, nodes: ["MEMORY.GET"]'}  # fmt: skip
    keys = (
        f"  jwt: {{keyEnv: MCP_TEST_JWT_KEY, algorithms: [HS256], issuer: '{ISSUER}'}}\n"
        "  mcp: {resourceUrl: 'https://memory.example/mcp', allowedHosts: ['memory.example:*']}\n"
    )
    env = {"MCP_TEST_JWT_KEY": KEY, "DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": ""}
    with serving(tmp_path_factory.mktemp("mcp-gateway"), tokens, gateway=keys, env=env) as server:
        yield server


def test_every_tool_with_a_static_token(gateway: GatewayServer) -> None:
    async def main() -> None:
        async with http_client(f"{gateway.url}/mcp", T1) as client:
            await check_every_tool(client)

    anyio.run(main)


def test_scope_comes_from_the_token_only(gateway: GatewayServer) -> None:
    async def main() -> None:
        async with http_client(f"{gateway.url}/mcp", T1) as t1:
            await check_scope_arguments_refused(t1)
            async with http_client(f"{gateway.url}/mcp", T2) as t2:
                await check_other_scope_unreachable(t1, t2)
            async with http_client(f"{gateway.url}/mcp", _jwt("t2", "u1")) as other:
                await check_other_scope_unreachable(t1, other)

    anyio.run(main)


def test_a_jwt_and_v1_nodes_share_the_token_scope(gateway: GatewayServer) -> None:
    draft = {"memories": [{"key": "via-http", "content": "from /v1/nodes"}]}
    wrote = httpx.post(f"{gateway.url}/v1/nodes/MEMORY.WRITE", timeout=60, json=draft,
                       headers={"Authorization": f"Bearer {T1}"})  # fmt: skip
    assert wrote.status_code == 200, wrote.text

    async def main() -> None:
        async with http_client(f"{gateway.url}/mcp", _jwt("t1", "u1")) as same:
            got = await call(same, "memory_get", {"keys": ["via-http"]})
            assert [i["content"] for i in got["output"]] == ["from /v1/nodes"]
        async with http_client(f"{gateway.url}/mcp", _jwt("t1", "u2")) as other_user:
            assert (await call(other_user, "memory_get", {"keys": ["via-http"]}))["output"] == []

    anyio.run(main)


def test_a_token_calls_only_its_granted_nodes(gateway: GatewayServer) -> None:
    async def main() -> None:
        async with http_client(f"{gateway.url}/mcp", READER) as reader:
            denied = await call(reader, "memory_write", {"memories": [{"content": "x"}]})
            assert denied["error"]["code"] == "PERMISSION_DENIED", denied
            assert (await call(reader, "memory_get", {"ids": ["x"]}))["status"] == "success"

    anyio.run(main)


def test_no_valid_token_is_401_and_counted(gateway: GatewayServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    for authorization in (None, "Bearer nope", f"Bearer {_jwt('t1', 'u1')}x", f"Basic {T1}"):
        sent = {**headers, **({"Authorization": authorization} if authorization else {})}
        answer = httpx.post(f"{gateway.url}/mcp", json=body, headers=sent, timeout=30)
        assert answer.status_code == 401, (authorization, answer.text)
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and "oauth-protected-resource/mcp" in challenge
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    assert 'node="MCP",status="refused"' in metrics


def test_protected_resource_metadata_names_the_jwt_issuer(gateway: GatewayServer) -> None:
    answer = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert answer.status_code == 200
    assert answer.json()["resource"] == "https://memory.example/mcp"
    assert answer.json()["authorization_servers"] == [ISSUER]


def test_calls_are_counted_like_v1_nodes(gateway: GatewayServer) -> None:
    async def main() -> None:
        async with http_client(f"{gateway.url}/mcp", T1) as client:
            await call(client, "memory_query", {"limit": 1})

    anyio.run(main)
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    assert 'ditto_gateway_calls_total{code="",node="MEMORY.QUERY",status="success"}' in metrics


def test_dns_rebinding_protection(gateway: GatewayServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    base = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {T1}"}
    for host, status in (("evil.example", 421), ("memory.example:443", 200)):
        answer = httpx.post(f"{gateway.url}/mcp", json=body, headers={**base, "Host": host},
                            timeout=30)  # fmt: skip
        assert answer.status_code == status, (host, answer.status_code, answer.text)
    foreign = httpx.post(f"{gateway.url}/mcp", json=body, timeout=30,
                         headers={**base, "Origin": "http://evil.example"})  # fmt: skip
    assert foreign.status_code == 403


def test_static_tokens_only_advertise_no_metadata(tmp_path: Path) -> None:
    with serving(tmp_path, {T1: "tenant: t1, user: u1"}, env={"DITTO_BROKER_URL": ""}) as server:
        meta = httpx.get(f"{server.url}/.well-known/oauth-protected-resource/mcp", timeout=30)
        assert meta.status_code == 404
        bare = httpx.post(f"{server.url}/mcp", json={}, timeout=30)
        assert bare.status_code == 401
        assert "resource_metadata" not in bare.headers["www-authenticate"]


def test_operator_http_server_on_loopback(tmp_path: Path) -> None:
    with operator_http(tmp_path, "tenant=acme,user=alice") as url:

        async def main() -> None:
            async with http_client(url) as client:
                await check_every_tool(client)
                await check_scope_arguments_refused(client)

        anyio.run(main)
        rebound = httpx.post(url, json={}, headers={"Host": "evil.example"}, timeout=30)
        assert rebound.status_code == 421
