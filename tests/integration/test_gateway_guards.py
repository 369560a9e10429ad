"""Issue 37 items 1-2, as kinds over every route the gateway serves: a real ``ditto-worker
serve`` on loopback, called with httpx and raw sockets.

The routes are enumerated from the app ``ditto-worker serve`` builds (``build_app``), so a
route or mount added later (``/mcp``, ``/store/*``, ``/v1/embeddings`` …) is covered
without touching this file: ambiguous credentials are 400, JSON the parser cannot take is
422 ``INVALID_INPUT``, a body over the cap is 413, a trailing slash or an unknown path is a
404 that echoes nothing, a client gone mid-body is counted and logs no traceback. Then
fairness: one token's slow bodies and its share of the in-flight slots never make another
token's calls fail, and the ``in_flight`` gauge follows the calls.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from ditto_worker.testing.gateway import GatewayServer
from tests.conftest import EVENT_WAIT_S
from tests.integration._gateway_kit import ECHO, echo_env, serving

pytestmark = pytest.mark.integration

T1, T2, T3 = "guard-token-one", "guard-token-two", "guard-token-three"
MAX_IN_FLIGHT = 8
SHARE = 4  # identityShare 0.5 of 8
CAP = 64 * 1024
TOKENS = {T1: "tenant: t1, user: u1", T2: "tenant: t2, user: u2",
          T3: 'tenant: t3, user: u3, nodes: ["MEMORY.GET"]'}  # fmt: skip
BOUNDS = (
    f"  maxInFlight: {MAX_IN_FLIGHT}\n  identityShare: 0.5\n  maxBodyBytes: {CAP}\n"
    "  headerTimeoutS: 2\n  bodyTimeoutS: 2\n"
)
"""The gateway keys of these tests: three tokens and small bounds."""


@contextmanager
def guarded(folder: Path, extra: str = "") -> Iterator[GatewayServer]:
    """``serve`` with :data:`TOKENS`, :data:`BOUNDS` (``extra``: more gateway keys) and
    the ECHO kind."""
    with serving(folder, TOKENS, gateway=BOUNDS + extra, env=echo_env(folder)) as server:
        yield server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with guarded(tmp_path_factory.mktemp("guards")) as server:
        yield server


@pytest.fixture(scope="module")
def routes(served: GatewayServer) -> list[tuple[str, str]]:
    """``(method, path)`` of every route and mount of the app ``serve`` builds, its path
    parameters filled in (``{node}``: ``MEMORY.GET``)."""
    from starlette.routing import Mount, Route

    from ditto_worker.config import default_config
    from ditto_worker.gateway.serve import build_app

    sys.path.insert(0, str(ECHO))
    try:
        path = served.folder / "ditto.yaml"
        app = build_app(default_config(path), path)
    finally:
        sys.path.remove(str(ECHO))
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, Mount):
            found |= {("GET", route.path + "/"), ("POST", route.path + "/")}
        elif isinstance(route, Route):
            filled = re.sub(r"\{node(:[a-z]+)?\}", "MEMORY.GET", route.path)
            filled = re.sub(r"\{[^}]+\}", "x", filled)
            found |= {(m, filled) for m in route.methods or () if m != "HEAD"}
    assert ("POST", "/v1/nodes/MEMORY.GET") in found and ("GET", "/healthz") in found
    return sorted(found)


def body_routes(routes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(m, p) for m, p in routes if m in ("POST", "PUT", "PATCH")]


def is_node_result(answer: httpx.Response, code: str) -> bool:
    body = answer.json()
    return (
        answer.headers["content-type"].startswith("application/json")
        and body["status"] == "failed"
        and body["error"]["code"] == code
        and set(body) >= {"executionId", "node", "status", "error"}
    )


def test_ambiguous_credentials_are_400_on_every_route(
    served: GatewayServer, routes: list[tuple[str, str]]
) -> None:
    tricks = [
        [("Authorization", f"Bearer {T1}"), ("Authorization", f"Bearer {T2}")],
        [("Authorization", f"Bearer {T1}"), ("Authorization", f"Bearer {T1}")],
        [("Authorization", f"Bearer {T1}"), ("X-Api-Key", T2)],
        [("X-Api-Key", T1), ("X-Api-Key", T2)],
    ]
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for method, path in routes:
            for headers in tricks:
                answer = client.request(method, path, headers=headers, json={})
                assert answer.status_code == 400, (method, path, headers, answer.text)
                assert is_node_result(answer, "INVALID_INPUT"), answer.text
                assert "Ambiguous credentials" in answer.json()["error"]["message"]
        # the same credential twice over both headers is not ambiguous
        same = client.post("/v1/nodes/MEMORY.GET", json={"keys": ["k"]},
                           headers={"Authorization": f"Bearer {T1}", "X-Api-Key": T1})  # fmt: skip
        assert same.status_code == 200, same.text


BAD_JSON = {
    "1000 deep": b"[" * 1000 + b"]" * 1000,
    "65 deep": b'{"a":' * 65 + b"1" + b"}" * 65,
    "not UTF-8": b'{"keys": ["\xff\xfe"]}',
    "lone surrogate": b'{"keys": ["\\ud800"]}',
    "NaN": b'{"keys": [NaN]}',
    "huge number": b'{"keys": [' + b"9" * 5000 + b"]}",
    "not JSON": b'{"keys": [',
}


def test_json_the_parser_cannot_take_is_422_on_every_route(
    served: GatewayServer, routes: list[tuple[str, str]]
) -> None:
    headers = {"Authorization": f"Bearer {T1}", "Content-Type": "application/json"}
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for method, path in body_routes(routes):
            for name, body in BAD_JSON.items():
                answer = client.request(method, path, content=body, headers=headers)
                assert answer.status_code == 422, (method, path, name, answer.text)
                assert is_node_result(answer, "INVALID_INPUT"), (name, answer.text)
        fine = client.post("/v1/nodes/MEMORY.GET", headers=headers,
                           content=b'{"keys": ["\\ud83d\\ude00"]}')  # fmt: skip
        assert fine.status_code == 200, fine.text  # an escaped surrogate pair is fine
    assert "Traceback" not in served.log_path.read_text()


def test_a_body_over_the_cap_is_413_on_every_route(
    served: GatewayServer, routes: list[tuple[str, str]]
) -> None:
    headers = {"Authorization": f"Bearer {T1}", "Content-Type": "application/json"}
    big = json.dumps({"keys": ["k" * (CAP + 10)]}).encode()
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for method, path in body_routes(routes):
            answer = client.request(method, path, content=big, headers=headers)
            assert answer.status_code == 413, (method, path, answer.text)
            assert is_node_result(answer, "PAYLOAD_TOO_LARGE")

            def chunks() -> Iterator[bytes]:  # no Content-Length: refused while streaming
                yield from (big[i : i + 8192] for i in range(0, len(big), 8192))

            answer = client.request(method, path, content=chunks(), headers=headers)
            assert answer.status_code == 413, (method, path, answer.text)


def test_no_redirect_echoes_host_and_unknown_paths_are_404(
    served: GatewayServer, routes: list[tuple[str, str]]
) -> None:
    headers = {"Authorization": f"Bearer {T1}", "Host": "evil.example"}
    paths = {(m, p.rstrip("/") + "/") for m, p in routes} | {(m, p.rstrip("/")) for m, p in routes
                                                             if p.endswith("/")}  # fmt: skip
    paths |= {("GET", "/nope"), ("POST", "/v1/nope/"), ("GET", "/v1/nodes/")}
    with httpx.Client(base_url=served.url, timeout=30, follow_redirects=False) as client:
        for method, path in sorted(paths):
            if (method, path) in routes:
                continue
            answer = client.request(method, path, headers=headers, json={})
            assert not answer.is_redirect and "location" not in answer.headers, (method, path)
            assert "evil.example" not in answer.text
            assert answer.status_code in (404, 405), (method, path, answer.status_code)


def raw_request(method: str, path: str, token: str, length: int) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def metric(served: GatewayServer, name: str) -> float:
    """The sum of a metric's samples on ``/metrics``."""
    text = httpx.get(f"{served.url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))  # fmt: skip


def test_a_disconnect_mid_body_is_counted_and_logs_one_line_at_most(
    served: GatewayServer, routes: list[tuple[str, str]]
) -> None:
    before = metric(served, "ditto_gateway_disconnects_total")
    started = time.monotonic()
    targets = body_routes(routes) * 3
    for method, path in targets:
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
            sock.sendall(raw_request(method, path, T1, 1000) + b'{"keys": [')
            time.sleep(0.05)
    deadline = time.monotonic() + EVENT_WAIT_S
    while metric(served, "ditto_gateway_disconnects_total") < before + len(targets):
        assert time.monotonic() < deadline, served.log()
        time.sleep(0.2)
    log = served.log_path.read_text()
    assert "Traceback" not in log and "ClientDisconnect" not in log
    minutes = (time.monotonic() - started) // 60 + 1
    assert 1 <= log.count("went away before their request was read whole") <= minutes + 1


def test_one_tokens_slow_bodies_never_fail_another_tokens_calls(served: GatewayServer) -> None:
    # 2 x maxInFlight connections of T3 (only MEMORY.GET) each send headers and one byte
    held = []
    for _ in range(2 * MAX_IN_FLIGHT):
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        sock.sendall(raw_request("POST", "/v1/nodes/MEMORY.GET", T3, 100) + b"{")
        held.append(sock)
    try:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            for i in range(3 * MAX_IN_FLIGHT):
                answer = client.post("/v1/nodes/ECHO.SAY", json={"i": i},
                                     headers={"Authorization": f"Bearer {T2}"})  # fmt: skip
                assert answer.status_code == 200, answer.text
        assert metric(served, "ditto_gateway_in_flight") == 0  # bodies hold no slot
    finally:
        for sock in held:
            sock.close()


def _sleeps(served: GatewayServer, token: str, n: int) -> list[socket.socket]:
    """``n`` ECHO.SLEEP calls of ``token`` (60 s; closing a socket cancels its call)."""
    body = json.dumps({"seconds": 60}).encode()
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        sock.sendall(raw_request("POST", "/v1/nodes/ECHO.SLEEP", token, len(body)) + body)
        socks.append(sock)
    return socks


def wait_for_gauge(served: GatewayServer, value: float) -> None:
    deadline = time.monotonic() + EVENT_WAIT_S
    while metric(served, "ditto_gateway_in_flight") != value:
        assert time.monotonic() < deadline, f"in_flight never {value}: {served.log()}"
        time.sleep(0.1)


def test_an_identity_holds_its_share_of_slots_and_the_gauge_follows(
    served: GatewayServer,
) -> None:
    socks = _sleeps(served, T1, SHARE)
    try:
        wait_for_gauge(served, SHARE)
        with httpx.Client(base_url=served.url, timeout=30) as client:
            more = client.post("/v1/nodes/ECHO.SAY", json={},
                               headers={"Authorization": f"Bearer {T1}"})  # fmt: skip
            assert more.status_code == 429 and is_node_result(more, "OVERLOADED")
            assert int(more.headers["retry-after"]) >= 1
            other = client.post("/v1/nodes/ECHO.SAY", json={},
                                headers={"Authorization": f"Bearer {T2}"})  # fmt: skip
            assert other.status_code == 200, other.text
    finally:
        for sock in socks:
            sock.close()
    wait_for_gauge(served, 0)  # each call cancelled by its client's going away
