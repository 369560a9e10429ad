"""The HTTP gateway's rules in process (issue 26; SPEC.md MEM-RUN-5): identity -> scope,
grants, the status table, bounds, and the OpenAPI document. The real server and real
clients (curl, httpx, Node) are in tests/integration/test_gateway_http.py."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient

from ditto_worker import create_ditto, create_memory_worker
from ditto_worker.errors import ConfigError, ErrorCode, NodeError
from ditto_worker.gateway import GatewaySettings, create_app, http_status
from ditto_worker.gateway.errors import STATUS_OF_CODE
from ditto_worker.runtime import NodeContext, NodeSpec, Runtime, WorkerDefinition
from ditto_worker.testing import create_store

T1, T2 = "token-of-tenant-one", "token-of-tenant-two"
READER = "token-that-only-reads"
HS_KEY = "a-test-secret-of-at-least-32-bytes!!"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def whoami(input: Any, ctx: NodeContext) -> Any:
    return {"scope": None if ctx.scope is None else ctx.scope.to_header(), "deadline": ctx.deadline}


def sleep(input: Any, ctx: NodeContext) -> Any:
    if "fail" in input:
        raise NodeError(str(input["fail"]), "asked to fail")
    return {"cancelled": ctx.cancel.wait(float(input.get("seconds", 0)))}


def probe_kind() -> WorkerDefinition:
    return WorkerDefinition.of(
        "PROBE", [NodeSpec("PROBE.WHOAMI", whoami), NodeSpec("PROBE.SLEEP", sleep)]
    )


def settings(**extra: Any) -> GatewaySettings:
    return GatewaySettings.model_validate(
        {
            "tokens": [
                {"sha256": _sha(T1), "tenant": "t1", "user": "u1", "spaces": ["memory", "task:*"]},
                {"sha256": _sha(T2), "tenant": "t2", "user": "u2"},
                {"sha256": _sha(READER), "tenant": "t1", "user": "u1",
                 "nodes": ["MEMORY.GET", "MEMORY.QUERY", "MEMORY.SEARCH"]},
            ],
            **extra,
        }
    )  # fmt: skip


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    rt = create_ditto([create_memory_worker(create_store({}, {})), probe_kind()])
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime, settings())) as c:
        yield c


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_node_is_a_route_and_the_answer_is_its_node_result(client: TestClient) -> None:
    memories = {"memories": [{"key": "lang", "content": "reply in German"}]}
    write = client.post("/v1/nodes/MEMORY.WRITE", headers=auth(T1), json=memories)
    assert write.status_code == 200, write.text
    body = write.json()
    assert body["status"] == "success" and body["node"] == "MEMORY.WRITE"
    [item] = body["output"]
    got = client.post("/v1/nodes/MEMORY.GET", headers=auth(T1), json={"ids": [item["id"]]})
    assert got.status_code == 200 and got.json()["output"][0]["content"] == "reply in German"
    listed = client.get("/v1/nodes", headers=auth(T1)).json()["nodes"]
    assert {"MEMORY.GET", "MEMORY.WRITE", "PROBE.WHOAMI"} <= set(listed)


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({"scope": {"tenant": "t2", "user": "u2"}}, {}),
        ({"tenant": "t2", "user": "u2"}, {}),
        ({"namespace": "t2:u2:memory"}, {}),
        ({}, {"ditto_scope": '{"tenant": "t2", "user": "u2"}'}),
        ({}, {"Ditto-Scope": '{"tenant": "t2", "user": "u2"}'}),
        ({}, {"X-Tenant": "t2", "X-User": "u2", "X-Namespace": "t2:u2:memory"}),
    ],
)
def test_the_scope_comes_from_the_token_only(
    client: TestClient, body: dict[str, Any], headers: dict[str, str]
) -> None:
    answer = client.post("/v1/nodes/PROBE.WHOAMI", headers={**auth(T1), **headers}, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"]["scope"] == {"tenant": "t1", "user": "u1"}


def test_scope_tricks_in_a_memory_body_reach_no_other_tenant(client: TestClient) -> None:
    secret = {"memories": [{"key": "k", "content": "t2's secret"}]}
    assert client.post("/v1/nodes/MEMORY.WRITE", headers=auth(T2), json=secret).status_code == 200
    for node, body in [
        ("MEMORY.GET", {"keys": ["k"], "scope": {"tenant": "t2", "user": "u2"}}),
        ("MEMORY.GET", {"keys": ["k"], "namespace": "t2:u2:memory"}),
        ("MEMORY.QUERY", {"filter": {"field": "key", "op": "eq", "value": "k"}, "tenant": "t2"}),
    ]:
        answer = client.post(f"/v1/nodes/{node}", headers=auth(T1), json=body)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "INVALID_INPUT"
    # metadata may say anything; it is data, never the scope
    tricked = {"memories": [{"key": "k", "content": "mine", "metadata": {"tenant": "t2"}}]}
    assert client.post("/v1/nodes/MEMORY.WRITE", headers=auth(T1), json=tricked).status_code == 200
    mine = client.post("/v1/nodes/MEMORY.GET", headers=auth(T1), json={"keys": ["k"]}).json()
    theirs = client.post("/v1/nodes/MEMORY.GET", headers=auth(T2), json={"keys": ["k"]}).json()
    assert [m["content"] for m in mine["output"]] == ["mine"]
    assert [m["content"] for m in theirs["output"]] == ["t2's secret"]


def test_two_tokens_never_see_each_others_memories(client: TestClient) -> None:
    written = client.post("/v1/nodes/MEMORY.WRITE", headers=auth(T1),
                          json={"memories": [{"key": "a", "content": "one's"}]}).json()  # fmt: skip
    mid = written["output"][0]["id"]
    calls = [
        ("MEMORY.GET", {"ids": [mid], "keys": ["a"]}),
        ("MEMORY.QUERY", {}),
        ("MEMORY.SEARCH", {"query": "one's", "strategy": "keyword"}),
    ]
    for node, body in calls:
        answer = client.post(f"/v1/nodes/{node}", headers=auth(T2), json=body).json()
        assert answer["status"] == "success", answer
        items = answer["output"]["items"] if node == "MEMORY.QUERY" else answer["output"]
        assert items == [], node
    update = client.post("/v1/nodes/MEMORY.UPDATE", headers=auth(T2),
                         json={"memories": [{"id": mid, "content": "stolen"}]})  # fmt: skip
    assert update.status_code == 404 and update.json()["error"]["code"] == "NOT_FOUND"
    delete = client.post("/v1/nodes/MEMORY.DELETE", headers=auth(T2), json={"ids": [mid]})
    assert delete.json()["output"]["deleted"] == []
    still = client.post("/v1/nodes/MEMORY.GET", headers=auth(T1), json={"ids": [mid]}).json()
    assert still["output"][0]["content"] == "one's"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer"}, {"Authorization": "Basic dXNlcjpwYXNz"},
     {"Authorization": "Bearer not-a-known-token"}, {"Authorization": f"Bearer {T1}x"}],
)  # fmt: skip
def test_no_valid_token_is_401_and_nothing_runs(
    client: TestClient, headers: dict[str, str]
) -> None:
    answer = client.post("/v1/nodes/PROBE.WHOAMI", headers=headers, json={})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["error"]["code"] == "UNAUTHENTICATED"
    assert answer.json()["status"] == "failed"
    assert client.get("/v1/nodes", headers=headers).status_code == 401


def test_a_token_calls_only_its_nodes_and_spaces(client: TestClient) -> None:
    denied = client.post("/v1/nodes/MEMORY.WRITE", headers=auth(READER),
                         json={"memories": [{"key": "a", "content": "x"}]})  # fmt: skip
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "PERMISSION_DENIED"
    assert (
        client.post("/v1/nodes/MEMORY.GET", headers=auth(READER), json={"ids": []}).status_code
        == 200
    )
    listed = client.get("/v1/nodes", headers=auth(READER)).json()["nodes"]
    assert listed == ["MEMORY.GET", "MEMORY.QUERY", "MEMORY.SEARCH"]
    space = client.post(
        "/v1/nodes/PROBE.WHOAMI", headers={**auth(T2), "Ditto-Space": "task:1"}, json={}
    )
    assert space.status_code == 403 and "space" in space.json()["error"]["message"]


def test_unknown_nodes_are_404_with_the_closest_ids(client: TestClient) -> None:
    answer = client.post("/v1/nodes/MEMORY.GTE", headers=auth(T1), json={})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "UNKNOWN_NODE"
    assert "MEMORY.GET" in answer.json()["error"]["message"]


def test_input_is_checked_against_the_node_model_before_the_call(client: TestClient) -> None:
    answer = client.post("/v1/nodes/MEMORY.QUERY", headers=auth(T1), json={"limit": "ten"})
    assert answer.status_code == 422
    assert answer.json()["error"]["message"].startswith("Invalid input: limit:")
    not_json = client.post("/v1/nodes/MEMORY.GET", headers=auth(T1), content=b"{nope")
    assert not_json.status_code == 422 and "not JSON" in not_json.json()["error"]["message"]


def test_a_body_over_the_cap_is_413_before_it_is_read_whole(runtime: Runtime) -> None:
    app = create_app(runtime, settings(maxBodyBytes=2048))
    with TestClient(app) as c:
        big = b'{"ids": ["' + b"x" * 4096 + b'"]}'
        assert c.post("/v1/nodes/MEMORY.GET", headers=auth(T1), content=big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"ids": ["'
            for _ in range(10):
                yield b"y" * 512
            yield b'"]}'

        streamed = c.post("/v1/nodes/MEMORY.GET", headers=auth(T1), content=chunks())
        assert streamed.status_code == 413
        assert streamed.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_the_callers_deadline_header_holds_and_is_capped(runtime: Runtime) -> None:
    with TestClient(create_app(runtime, settings(maxTimeoutS=5))) as c:
        late = c.post("/v1/nodes/PROBE.SLEEP", headers={**auth(T1), "Ditto-Timeout": "0.3"},
                      json={"seconds": 5})  # fmt: skip
        assert late.status_code == 504 and late.json()["status"] == "timeout"
        assert late.json()["error"]["code"] == "PROBE_TIMEOUT"
        started = time.time()
        capped = c.post(
            "/v1/nodes/PROBE.WHOAMI", headers={**auth(T1), "Ditto-Timeout": "999"}, json={}
        )
        assert capped.json()["output"]["deadline"] <= started + 5 + 1
        for bad in ["abc", "0", "-1", "nan", "inf"]:
            answer = c.post(
                "/v1/nodes/PROBE.WHOAMI", headers={**auth(T1), "Ditto-Timeout": bad}, json={}
            )
            assert (
                answer.status_code == 422 and "Ditto-Timeout" in answer.json()["error"]["message"]
            )


def test_calls_over_the_in_flight_bound_are_429(runtime: Runtime) -> None:
    app = create_app(runtime, settings(maxInFlight=1))

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            slow = asyncio.ensure_future(
                c.post("/v1/nodes/PROBE.SLEEP", headers=auth(T1), json={"seconds": 1})
            )
            await asyncio.sleep(0.3)
            quick = await c.post("/v1/nodes/PROBE.WHOAMI", headers=auth(T1), json={})
            return [await slow, quick]

    slow, quick = asyncio.run(run())
    assert slow.status_code == 200
    assert quick.status_code == 429 and quick.headers["Retry-After"] == "1"
    assert quick.json()["error"]["code"] == "OVERLOADED"


def test_the_status_table_covers_every_code() -> None:
    graph_only = {ErrorCode.GRAPH_BIND_FAILED, ErrorCode.GRAPH_BUDGET_EXHAUSTED}
    for code in ErrorCode:
        status = http_status("failed", code)
        expected = (
            {500} if code in graph_only else {401, 403, 404, 409, 413, 422, 429, 499, 502, 503, 504}
        )
        assert status in expected, code
    assert http_status("success", None) == 200
    assert http_status("timeout", "MEMORY_TIMEOUT") == 504
    assert http_status("cancelled", "INFER_CANCELLED") == 499
    assert http_status("failed", "ACME_QUOTA") == 500  # a plugin's own code
    assert http_status("failed", "ECHO_UNAVAILABLE") == 503
    assert STATUS_OF_CODE[ErrorCode.FLEET_UNAVAILABLE] == 503


def test_a_failed_node_answers_its_code_and_status(client: TestClient) -> None:
    answer = client.post("/v1/nodes/PROBE.SLEEP", headers=auth(T1), json={"fail": "CONFLICT"})
    assert answer.status_code == 409 and answer.json()["error"] == {
        "code": "CONFLICT", "message": "asked to fail"}  # fmt: skip


def _jwt_settings(**jwt_section: Any) -> GatewaySettings:
    return GatewaySettings.model_validate({"jwt": {"algorithms": ["HS256"], **jwt_section}})


def test_jwts_are_verified_and_carry_the_scope(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DITTO_GATEWAY_JWT_KEY", HS_KEY)
    app = create_app(runtime, _jwt_settings(audience="ditto", tenantClaim="org"))
    now = int(time.time())
    good = {"org": "acme", "sub": "ada", "aud": "ditto", "exp": now + 60}
    cases = {
        jwt.encode(good, HS_KEY, "HS256"): 200,
        jwt.encode({**good, "exp": now - 120}, HS_KEY, "HS256"): 401,
        jwt.encode(good, "another-secret-of-at-least-32-bytes", "HS256"): 401,
        jwt.encode({**good, "aud": "other"}, HS_KEY, "HS256"): 401,
        jwt.encode({k: v for k, v in good.items() if k != "exp"}, HS_KEY, "HS256"): 401,
        jwt.encode({k: v for k, v in good.items() if k != "org"}, HS_KEY, "HS256"): 401,
        jwt.encode(good, None, "none"): 401,
    }
    with TestClient(app) as c:
        for token, status in cases.items():
            answer = c.post("/v1/nodes/PROBE.WHOAMI", headers=auth(token), json={})
            assert answer.status_code == status, jwt.decode(
                token, options={"verify_signature": False}
            )
        ok = c.post(
            "/v1/nodes/PROBE.WHOAMI", headers=auth(jwt.encode(good, HS_KEY, "HS256")), json={}
        )
        assert ok.json()["output"]["scope"] == {"tenant": "acme", "user": "ada"}


def test_rs256_jwts_with_a_public_key(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    monkeypatch.setenv("DITTO_GATEWAY_JWT_KEY", public.decode())
    app = create_app(runtime, _jwt_settings(algorithms=["RS256"]))
    token = jwt.encode(
        {"tenant": "t9", "sub": "u9", "exp": int(time.time()) + 60}, private, "RS256"
    )
    forged = _hs256_signed_with({"tenant": "t9", "sub": "u9", "exp": int(time.time()) + 60}, public)
    with TestClient(app) as c:
        assert c.post("/v1/nodes/PROBE.WHOAMI", headers=auth(token), json={}).status_code == 200
        assert c.post("/v1/nodes/PROBE.WHOAMI", headers=auth(forged), json={}).status_code == 401


def _hs256_signed_with(claims: dict[str, Any], key: bytes) -> str:
    """The algorithm-confusion attack: an HS256 token whose secret is the public key
    (PyJWT refuses to make one, so it is made by hand)."""
    import base64
    import hmac
    import json

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(key, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


def test_settings_refuse_what_would_be_unsafe(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING"), TestClient(create_app(runtime, GatewaySettings())) as c:
        # no identities: it fails closed (every call 401), and says so once
        assert c.post("/v1/nodes/PROBE.WHOAMI", headers=auth(T1), json={}).status_code == 401
        assert c.get("/healthz").status_code == 200
    assert "every node call is refused" in caplog.text
    with pytest.raises(Exception, match="none"):
        GatewaySettings.model_validate({"jwt": {"algorithms": ["none"]}})
    with pytest.raises(Exception, match="64 hex"):
        GatewaySettings.model_validate({"tokens": [{"sha256": "abc", "tenant": "t", "user": "u"}]})


def test_idle_keep_alive_connections_outlast_a_proxys_idle_timeout() -> None:
    # uvicorn's own 5 s made clients reuse connections the server was closing
    assert GatewaySettings().keep_alive_s == 75 > 60
    assert GatewaySettings.model_validate({"keepAliveS": 120}).keep_alive_s == 120
    with pytest.raises(Exception, match="keepAliveS"):
        GatewaySettings.model_validate({"keepAliveS": 0})


@pytest.mark.parametrize("yaml_line, expected", [("", False), ("  accessLog: true\n", True)])
def test_the_access_log_is_off_unless_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml_line: str, expected: bool
) -> None:
    # one line written per request cost 0.35-0.75 ms per call at one caller
    import uvicorn

    from ditto_worker.config import load_runtime_config_file
    from ditto_worker.gateway.serve import serve

    digest = hashlib.sha256(T1.encode()).hexdigest()
    path = tmp_path / "ditto.yaml"
    path.write_text(
        "workers: {infer: {local: {autoStart: false}}}\n"
        f"plugins: {{sqlite: {{path: '{tmp_path / 'm.sqlite'}'}}}}\n"
        f"gateway:\n  tokens: [{{sha256: {digest}, tenant: t1, user: u1}}]\n{yaml_line}",
        encoding="utf-8",
    )
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        asyncio.run(_close(app))

    monkeypatch.setattr(uvicorn, "run", run)
    serve(load_runtime_config_file(path), path)
    assert seen["access_log"] is expected and seen["timeout_keep_alive"] == 75


async def _close(app: Any) -> None:
    """Run the app's lifespan once, so it closes the runtime it owns."""
    async with app.router.lifespan_context(app):
        pass


def test_the_openapi_document_has_each_nodes_schemas(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]

    def named(schema: dict[str, Any]) -> dict[str, Any]:
        return schemas[schema["$ref"].rsplit("/", 1)[-1]] if "$ref" in schema else schema

    get = document["paths"]["/v1/nodes/MEMORY.GET"]["post"]
    request = named(get["requestBody"]["content"]["application/json"]["schema"])
    assert request["title"] == "MemoryGetRequest"
    assert set(request["properties"]) >= {"ids", "keys"}
    assert request.get("additionalProperties") is False
    answer = named(get["responses"]["200"]["content"]["application/json"]["schema"])
    assert answer["title"] == "MemoryGetNodeResult"
    assert set(answer["properties"]) >= {"executionId", "node", "status", "output", "error"}
    assert {"401", "403", "413", "422", "429", "503", "504"} <= set(get["responses"])
    any_json = document["paths"]["/v1/nodes/PROBE.WHOAMI"]["post"]["requestBody"]
    assert named(any_json["content"]["application/json"]["schema"]) == {
        "title": "ProbeWhoamiRequest"
    }
    refs = _refs(document["paths"])
    assert refs and refs <= set(document["components"]["schemas"])


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"].rsplit("/", 1)[-1]} if "$ref" in value else set()
        for item in value.values():
            found |= _refs(item)
        return found
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def test_metrics_count_calls_without_tokens_or_bodies(client: TestClient) -> None:
    client.post("/v1/nodes/MEMORY.WRITE", headers=auth(T1),
                json={"memories": [{"key": "m", "content": "private words"}]})  # fmt: skip
    client.post("/v1/nodes/MEMORY.GET", json={})
    text = client.get("/metrics").text
    assert 'ditto_gateway_calls_total{code="",node="MEMORY.WRITE",status="success"} 1.0' in text
    assert 'code="UNAUTHENTICATED",node="MEMORY.GET",status="refused"' in text
    assert T1 not in text and "private words" not in text


def test_a_cancelled_call_ends_the_handler(runtime: Runtime) -> None:
    # the disconnect path in process: the request's token reaches the handler
    app = create_app(runtime, settings())
    seen: list[Any] = []
    done = threading.Event()

    async def run() -> None:
        async def receive() -> dict[str, Any]:
            if not seen:
                seen.append("body")
                return {"type": "http.request", "body": b'{"seconds": 20}', "more_body": False}
            await asyncio.sleep(0.3)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                seen.append(message["status"])
                done.set()

        scope = {"type": "http", "method": "POST", "path": "/v1/nodes/PROBE.SLEEP",
                 "raw_path": b"/v1/nodes/PROBE.SLEEP", "query_string": b"",
                 "headers": [(b"authorization", f"Bearer {T1}".encode()),
                             (b"content-type", b"application/json")],
                 "http_version": "1.1", "scheme": "http", "server": ("gw", 80),
                 "client": ("c", 1), "root_path": "", "app": app}  # fmt: skip
        await app(scope, receive, send)

    started = time.monotonic()
    asyncio.run(run())
    assert time.monotonic() - started < 5
    assert seen[-1] == 499


def test_the_space_header_picks_a_space_the_token_allows(client: TestClient) -> None:
    task = {**auth(T1), "Ditto-Space": "task:42"}
    seen = client.post("/v1/nodes/PROBE.WHOAMI", headers=task, json={}).json()
    assert seen["output"]["scope"] == {"tenant": "t1", "user": "u1", "space": "task:42"}
    checkpoint = {"memories": [{"key": "stage", "content": "stage 2 done"}]}
    assert client.post("/v1/nodes/MEMORY.WRITE", headers=task, json=checkpoint).status_code == 200
    in_task = client.post("/v1/nodes/MEMORY.GET", headers=task, json={"keys": ["stage"]}).json()
    in_memory = client.post("/v1/nodes/MEMORY.GET", headers=auth(T1), json={"keys": ["stage"]})
    assert [m["content"] for m in in_task["output"]] == ["stage 2 done"]
    assert in_memory.json()["output"] == []
    other_task = client.post("/v1/nodes/MEMORY.GET", json={"keys": ["stage"]},
                             headers={**auth(T1), "Ditto-Space": "task:43"})  # fmt: skip
    assert other_task.json()["output"] == []


def test_the_runtime_config_leaves_the_gateway_section_to_the_gateway(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ditto_worker.config import load_runtime_config

    with caplog.at_level("WARNING"):
        load_runtime_config({"gateway": {"tokens": []}}, env={})
    assert "gateway" not in caplog.text
    with pytest.raises(ConfigError, match="did you mean 'gateway'"):
        load_runtime_config({"gatewy": {}}, env={})


def test_an_idempotency_key_is_the_operation_id(client: TestClient) -> None:
    # MEM-RUN-7: a replay applies nothing twice; another input under the key is CONFLICT
    once = {**auth(T1), "Idempotency-Key": "write-lang-1"}
    body = {"memories": [{"key": "lang", "content": "Reply in German"}]}
    first = client.post("/v1/nodes/MEMORY.WRITE", headers=once, json=body)
    replay = client.post("/v1/nodes/MEMORY.WRITE", headers=once, json=body)
    assert first.status_code == replay.status_code == 200, replay.text
    assert first.json()["output"][0]["id"] == replay.json()["output"][0]["id"]
    listed = client.post("/v1/nodes/MEMORY.QUERY", headers=auth(T1), json={}).json()
    assert [m["key"] for m in listed["output"]["items"]] == ["lang"]
    other = {"memories": [{"key": "tone", "content": "short"}]}
    clash = client.post("/v1/nodes/MEMORY.WRITE", headers=once, json=other)
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "CONFLICT"
    # the same key from another tenant is another operation
    theirs = client.post("/v1/nodes/MEMORY.WRITE", json=other,
                         headers={**auth(T2), "Idempotency-Key": "write-lang-1"})  # fmt: skip
    assert theirs.status_code == 200
    bad = client.post("/v1/nodes/MEMORY.WRITE", json=body,
                      headers={**auth(T1), "Idempotency-Key": "x" * 201})  # fmt: skip
    assert bad.status_code == 422 and "Idempotency-Key" in bad.json()["error"]["message"]


def test_a_search_in_a_task_space_is_invalid_input_over_http(client: TestClient) -> None:
    # MEM-SEARCH-7 through the gateway: the SDK refuses it before the store is called
    task = {**auth(T1), "Ditto-Space": "task:44"}
    checkpoint = {"memories": [{"key": "stage", "content": "stage 3 started"}]}
    assert client.post("/v1/nodes/MEMORY.WRITE", headers=task, json=checkpoint).status_code == 200
    found = client.post("/v1/nodes/MEMORY.SEARCH", headers=task, json={"query": "stage"})
    body = found.json()
    assert found.status_code == 422, body  # the gateway maps INVALID_INPUT to 422
    assert body["error"]["code"] == "INVALID_INPUT" and "scope.space" in body["error"]["message"]
    in_memory = client.post("/v1/nodes/MEMORY.SEARCH", headers=auth(T1), json={"query": "stage"})
    assert in_memory.status_code == 200 and in_memory.json()["status"] == "success"
