"""LangGraph Server's store API on ``ditto-worker serve`` (issue 33 item 4): langgraph-sdk's
own store integration tests against a real server (scripts/langgraph_sdk_suite, its own
pytest process), ``get_client(url=…, api_key=…).store`` (async and sync), every route's
shapes beside LangGraph's own ``InMemoryStore`` (the same calls, the same answers), bad
input, grants and cross-tenant tries."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import pytest

pytest.importorskip("langgraph.store.base")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

from langgraph.store.memory import InMemoryStore  # noqa: E402

from ditto_worker.testing.gateway import GatewayServer  # noqa: E402
from tests.integration._gateway_kit import serving  # noqa: E402

REPO: Final = Path(__file__).resolve().parents[2]
T1, T2, READER = "store-token-one", "store-token-two", "store-token-reader"
PARITY = "store-token-parity"  # a tenant of its own: its listings see only its own puts


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tokens = {T1: "tenant: t1, user: u1", T2: "tenant: t2, user: u2",
              READER: 'tenant: t1, user: u1, nodes: ["MEMORY.GET", "MEMORY.QUERY"]',
              PARITY: "tenant: t3, user: u3"}  # fmt: skip
    env = {"DITTO_BROKER_URL": "", "DITTO_RESULT_BACKEND": ""}
    with serving(tmp_path_factory.mktemp("store-gateway"), tokens, env=env) as server:
        yield server


def _http(gateway: GatewayServer, method: str, path: str, token: str | None = T1,
          **kwargs: Any) -> httpx.Response:  # fmt: skip
    headers = {"x-api-key": token} if token else {}
    headers.update(kwargs.pop("headers", {}))
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=60, **kwargs)


@pytest.mark.timeout(900)
def test_langgraph_sdk_store_suite(gateway: GatewayServer, tmp_path: Path) -> None:
    """langgraph-sdk 0.4.14's tests/integration/test_store.py, ``-m integration``, against
    this server: every test passes and reaches it (a skip counts as a failure)."""
    out = tmp_path / "sdk.json"
    command = [sys.executable, str(REPO / "scripts" / "langgraph_sdk_suite" / "run.py"),
               "--url", gateway.url, "--api-key", T1, "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["tests"] == 4, result
    assert result["skipped"] == 0 and result["failed"] == 0, result
    assert result["never_touched_ours"] == 0, result
    assert result["passed"] == 4 and result["exit"] == 0, result


def test_get_client_store_async_and_sync(gateway: GatewayServer) -> None:
    from langgraph_sdk import get_client, get_sync_client

    sync = get_sync_client(url=gateway.url, api_key=T1).store
    sync.put_item(["docs", "u1"], key="a", value={"title": "tea", "n": 1})
    assert sync.get_item(["docs", "u1"], key="a")["value"] == {"title": "tea", "n": 1}

    async def main() -> None:
        store = get_client(url=gateway.url, api_key=T1).store
        await store.put_item(["docs", "u1"], key="b", value={"title": "coffee", "n": 2})
        found = await store.search_items(["docs"], filter={"n": {"$gte": 2}})
        assert [i["key"] for i in found["items"]] == ["b"]
        listed = await store.list_namespaces(prefix=["docs"])
        assert listed == {"namespaces": [["docs", "u1"]]}
        await store.delete_item(["docs", "u1"], key="b")
        assert await store.get_item(["docs", "u1"], key="b") is None

    anyio.run(main)
    sync.delete_item(["docs", "u1"], key="a")


def test_every_route_answers_as_langgraph_store(gateway: GatewayServer) -> None:
    """The same calls on LangGraph's ``InMemoryStore`` and over HTTP give the same
    items (timestamps aside), searches, namespaces and deletes."""
    peer = InMemoryStore()

    def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
        return _http(gateway, method, path, token=PARITY, **kwargs)

    puts = [(("parity", "a"), "k1", {"color": "red", "n": 1}),
            (("parity", "a"), "k2", {"color": "blue", "n": 2}),
            (("parity", "b", "c"), "k3", {"color": "red", "n": 3}),
            (("parity", "a"), "k1", {"color": "green", "n": 4})]  # fmt: skip
    for namespace, key, value in puts:
        peer.put(namespace, key, value)
        body = {"namespace": list(namespace), "key": key, "value": value}
        answer = call("PUT", "/store/items", json=body)
        assert answer.status_code == 204 and answer.content == b"", answer.text

    def same(ours: dict[str, Any], theirs: Any) -> None:
        ref = theirs.dict()
        assert set(ours) == set(ref), (ours, ref)
        for field in ("created_at", "updated_at"):
            assert ours.pop(field) and ref.pop(field)
        assert ours == ref

    got = call("GET", "/store/items", params={"namespace": "parity.a", "key": "k1"})
    same(got.json(), peer.get(("parity", "a"), "k1"))
    missing = call("GET", "/store/items", params={"namespace": "parity.a", "key": "x"})
    assert missing.status_code == 200 and missing.json() is None
    searches: list[dict[str, Any]] = [
        {"namespace_prefix": ["parity"], "filter": {"color": "red"}},
        {"namespace_prefix": ["parity", "a"], "limit": 1, "offset": 1},
        {"namespace_prefix": ["parity"], "filter": {"n": {"$gt": 1, "$lte": 3}}},
    ]
    for search in searches:
        ours = call("POST", "/store/items/search", json=search).json()["items"]
        theirs = peer.search(tuple(search.pop("namespace_prefix")), **search)
        assert sorted(i["key"] for i in ours) == sorted(i.key for i in theirs), search
        for item in ours:
            same(item, next(t for t in theirs if t.key == item["key"]))
    listings = [{}, {"prefix": ["parity", "b"]}, {"suffix": ["a"]}, {"max_depth": 1},
                {"limit": 1, "offset": 1}]  # fmt: skip
    for listing in listings:
        ours = call("POST", "/store/namespaces", json=listing).json()["namespaces"]
        theirs = peer.list_namespaces(**{k: tuple(v) if isinstance(v, list) else v
                                         for k, v in listing.items()})  # fmt: skip
        assert ours == [list(n) for n in theirs], listing
    for namespace, key, _ in puts[:3]:
        body = {"namespace": list(namespace), "key": key}
        assert call("DELETE", "/store/items", json=body).status_code == 204
    empty = call("POST", "/store/items/search", json={"namespace_prefix": ["parity"]})
    assert empty.json() == {"items": []}
    assert call("POST", "/store/namespaces", json={"prefix": ["parity"]}).json() == {
        "namespaces": []
    }


BAD: Final = [
    ("PUT", "/store/items", {"namespace": ["a"], "key": "k"}, "value"),
    ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": [1]}, "value"),
    ("PUT", "/store/items", {"namespace": [], "key": "k", "value": {}}, "empty"),
    ("PUT", "/store/items", {"namespace": ["a.b"], "key": "k", "value": {}}, "periods"),
    ("PUT", "/store/items", {"namespace": ["langgraph"], "key": "k", "value": {}}, "langgraph"),
    (
        "PUT",
        "/store/items",
        {"namespace": ["a"], "key": "k", "value": {}, "tenant": "t2"},
        "tenant",
    ),
    ("PUT", "/store/items", {"namespace": [1], "key": "k", "value": {}}, "namespace"),
    ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": {}, "ttl": 1e308}, "ttl"),
    ("DELETE", "/store/items", {"namespace": ["a"]}, "key"),
    ("POST", "/store/items/search", {"namespace_prefix": ["a"], "limit": 0}, "limit"),
    (
        "POST",
        "/store/items/search",
        {"namespace_prefix": ["a"], "filter": {"x": {"$in": [1]}}},
        "$in",
    ),
    ("POST", "/store/namespaces", {"max_depth": "deep"}, "max_depth"),
    ("POST", "/store/namespaces", {"user": "u2"}, "user"),
]


@pytest.mark.parametrize(("method", "path", "body", "named"), BAD,
                         ids=[f"{m}-{n}" for m, _, _, n in BAD])  # fmt: skip
def test_bad_input_is_a_node_result_naming_the_field(
    gateway: GatewayServer, method: str, path: str, body: dict[str, Any], named: str
) -> None:
    answer = _http(gateway, method, path, json=body)
    assert answer.status_code == 422, answer.text
    wire = answer.json()
    assert wire["status"] == "failed" and wire["node"] == "STORE", wire
    assert wire["error"]["code"] == "INVALID_INPUT" and named in wire["error"]["message"], wire
    assert "Traceback" not in answer.text


def test_ttl_expires_and_get_without_key(gateway: GatewayServer) -> None:
    put = {"namespace": ["ttl"], "key": "k", "value": {"v": 1}, "ttl": 0.01}  # 0.6 s
    assert _http(gateway, "PUT", "/store/items", json=put).status_code == 204
    query = {"namespace": "ttl", "key": "k", "refresh_ttl": "false"}
    deadline = time.monotonic() + 120
    while _http(gateway, "GET", "/store/items", params=query).json() is not None:
        assert time.monotonic() < deadline, "the item did not expire"
        time.sleep(0.2)
    bad = _http(gateway, "PUT", "/store/items", json={**put, "ttl": -1})
    assert bad.status_code == 422 and "ttl" in bad.json()["error"]["message"], bad.text
    keyless = _http(gateway, "GET", "/store/items", params={"namespace": "a"})
    assert keyless.status_code == 422 and "key" in keyless.json()["error"]["message"]
    deep = _http(gateway, "PUT", "/store/items", content=b'{"namespace": ["a"], "key": "k", '
                 b'"value": ' + b'{"a": ' * 200 + b"1" + b"}" * 201,
                 headers={"content-type": "application/json"})  # fmt: skip
    assert deep.status_code == 422 and "deeper" in deep.json()["error"]["message"], deep.text


def test_credentials(gateway: GatewayServer) -> None:
    body = {"namespace_prefix": []}
    assert _http(gateway, "POST", "/store/items/search", token=None, json=body).status_code == 401
    assert _http(gateway, "POST", "/store/items/search", token="nope", json=body).status_code == 401
    bearer = httpx.post(f"{gateway.url}/store/items/search", json=body, timeout=60,
                        headers={"Authorization": f"Bearer {T1}"})  # fmt: skip
    assert bearer.status_code == 200, bearer.text
    both = httpx.post(f"{gateway.url}/store/items/search", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {T2}", "x-api-key": T1})  # fmt: skip
    assert both.status_code == 400 and "Ambiguous" in both.json()["error"]["message"]
    assert httpx.get(f"{gateway.url}/ok", timeout=60).json() == {"ok": True}


def test_grants_apply_to_the_nodes_a_route_calls(gateway: GatewayServer) -> None:
    assert _http(gateway, "PUT", "/store/items", json={
        "namespace": ["granted"], "key": "k", "value": {"v": 1}}).status_code == 204  # fmt: skip
    read = _http(gateway, "GET", "/store/items", token=READER,
                 params={"namespace": "granted", "key": "k"})  # fmt: skip
    assert read.status_code == 200 and read.json()["value"] == {"v": 1}
    denied = _http(gateway, "PUT", "/store/items", token=READER,
                   json={"namespace": ["granted"], "key": "k", "value": {"v": 2}})  # fmt: skip
    assert denied.status_code == 403, denied.text
    assert denied.json()["error"]["code"] == "PERMISSION_DENIED"
    again = _http(gateway, "GET", "/store/items", params={"namespace": "granted", "key": "k"})
    assert again.json()["value"] == {"v": 1}


def test_another_tenant_reaches_nothing(gateway: GatewayServer) -> None:
    """What T1 puts, T2 can neither get, find, list, overwrite nor delete — whatever
    namespace (its own tenant's or user's name included) or extra field it sends."""
    secret = {"namespace": ["t1", "u1", "notes"], "key": "s", "value": {"text": "s3cret"}}
    assert _http(gateway, "PUT", "/store/items", json=secret).status_code == 204
    for namespace in ("t1.u1.notes", "notes", "t2.u2.notes"):
        got = _http(gateway, "GET", "/store/items", token=T2,
                    params={"namespace": namespace, "key": "s"})  # fmt: skip
        assert got.status_code == 200 and got.json() is None, namespace
    for prefix in ([], ["t1"], ["t1", "u1"]):
        found = _http(gateway, "POST", "/store/items/search", token=T2,
                      json={"namespace_prefix": prefix, "query": "s3cret"})  # fmt: skip
        assert found.json() == {"items": []}, prefix
    assert _http(gateway, "POST", "/store/namespaces", token=T2, json={}).json() == {
        "namespaces": []
    }
    gone = _http(gateway, "DELETE", "/store/items", token=T2,
                 json={"namespace": secret["namespace"], "key": "s"})  # fmt: skip
    assert gone.status_code == 204
    theirs = {**secret, "value": {"text": "overwritten"}}
    assert _http(gateway, "PUT", "/store/items", token=T2, json=theirs).status_code == 204
    for extra in ({"tenant": "t1"}, {"user": "u1"}, {"scope": {"tenant": "t1"}}):
        tried = _http(gateway, "PUT", "/store/items", token=T2, json={**theirs, **extra})
        assert tried.status_code == 422, extra
    mine = _http(gateway, "GET", "/store/items", params={"namespace": "t1.u1.notes", "key": "s"})
    assert mine.json()["value"] == {"text": "s3cret"}
    assert _http(gateway, "POST", "/store/namespaces", json={"prefix": ["t1"]}).json() == {
        "namespaces": [["t1", "u1", "notes"]]
    }


def test_store_calls_are_counted(gateway: GatewayServer) -> None:
    series = 'ditto_gateway_calls_total{code="",node="MEMORY.QUERY",status="success"}'

    def counted() -> float:
        metrics = httpx.get(f"{gateway.url}/metrics", timeout=30).text
        lines = [line for line in metrics.splitlines() if line.startswith(series + " ")]
        return float(lines[0].split()[-1]) if lines else 0.0

    before = counted()
    _http(gateway, "POST", "/store/items/search", json={"namespace_prefix": ["counted"]})
    assert counted() == before + 1  # this search's one MEMORY.QUERY, nothing else running
