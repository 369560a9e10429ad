"""``/mcp``'s authentication in process (issue 33 item 3, the /mcp cost): the identity the
gateway's guard verified is the one the MCP layer uses, so a JWT is decoded once per
request; a bad one is still refused 401 and counted; an ``X-Api-Key`` is a token there too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient

pytest.importorskip("mcp")

from ditto_worker import create_ditto, create_memory_worker  # noqa: E402
from ditto_worker.gateway import GatewaySettings, create_app  # noqa: E402
from ditto_worker.runtime import Runtime  # noqa: E402
from ditto_worker.testing import create_store  # noqa: E402

HS_KEY = "a-test-secret-of-at-least-32-bytes!!"
HEADERS = {"Accept": "application/json, text/event-stream"}


def _call(arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": "memory_write", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    rt = create_ditto([create_memory_worker(create_store({}, {}))])
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("DITTO_GATEWAY_JWT_KEY", HS_KEY)
    settings = GatewaySettings.model_validate({"jwt": {"algorithms": ["HS256"]}})
    app = create_app(runtime, settings)
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        yield c


def _token(tenant: str = "acme", user: str = "ada") -> str:
    claims = {"tenant": tenant, "sub": user, "exp": int(time.time()) + 600}
    return str(jwt.encode(claims, HS_KEY, "HS256"))


def test_a_jwt_is_decoded_once_per_mcp_call(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []
    real = jwt.decode

    def counting(token: Any, *args: Any, **kwargs: Any) -> Any:
        decoded.append("x")
        return real(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    headers = {**HEADERS, "Authorization": f"Bearer {_token()}"}
    wrote = client.post("/mcp", json=_call({"memories": [{"content": "tea"}]}), headers=headers)
    assert wrote.status_code == 200, wrote.text
    assert wrote.json()["result"]["structuredContent"]["status"] == "success"
    assert len(decoded) == 1


def test_bad_tokens_are_still_refused_and_counted(client: TestClient) -> None:
    for authorization in (f"Bearer {_token()}x", "Bearer nope", None):
        headers = {**HEADERS, **({"Authorization": authorization} if authorization else {})}
        answer = client.post("/mcp", json=_call({"memories": []}), headers=headers)
        assert answer.status_code == 401, (authorization, answer.text)
    assert 'node="MCP",status="refused"' in client.get("/metrics").text


def test_the_scope_is_the_tokens_and_x_api_key_is_one(client: TestClient) -> None:
    mine = {**HEADERS, "X-Api-Key": _token("acme", "ada")}
    wrote = client.post("/mcp", json=_call({"memories": [{"key": "k", "content": "s3cret"}]}),
                        headers=mine)  # fmt: skip
    assert wrote.json()["result"]["structuredContent"]["status"] == "success", wrote.text
    read = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "memory_get", "arguments": {"keys": ["k"]}}}  # fmt: skip
    theirs = {**HEADERS, "Authorization": f"Bearer {_token('other', 'ada')}"}
    other = client.post("/mcp", json=read, headers=theirs).json()["result"]
    assert other["structuredContent"]["output"] == []
    same = client.post("/mcp", json=read, headers=mine).json()["result"]
    assert [i["content"] for i in same["structuredContent"]["output"]] == ["s3cret"]
    both = {**mine, "Authorization": f"Bearer {_token('other', 'ada')}"}
    assert client.post("/mcp", json=read, headers=both).status_code == 400
