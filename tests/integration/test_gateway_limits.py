"""Issue 37 item 1, the connection level: a real ``ditto-worker serve`` on loopback, called
over raw sockets (:mod:`ditto_worker.gateway.limits`).

Each limit holds before any identity is known, and its answer is a NodeResult-shaped
JSON body on a closed connection: a head over ``maxHeaderBytes`` (a header bomb) or with
more than ``maxHeaders`` fields is 431, read no further; headers or a body slower than
their deadline are 408 (a connection that sends nothing is closed silently); a
connection over ``maxConnections`` is 429; a request the parser cannot read is 400. No
test asserts a wall-clock bound: each waits (bounded, generously) for the answer.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ditto_worker.testing.gateway import GatewayServer
from tests.conftest import EVENT_WAIT_S
from tests.integration.test_gateway_guards import T1, guarded, raw_request

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    folder = tmp_path_factory.mktemp("limits")
    with guarded(folder, extra="  maxHeaderBytes: 16384\n  maxHeaders: 40\n") as server:
        yield server


def answer_of(sock: socket.socket, wait_s: float = 60.0) -> tuple[int, dict[str, str], bytes]:
    """Read until the server closes: (status, headers, body); (0, {}, b"") for a close
    without an answer."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    if not data:
        return 0, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def send(sock: socket.socket, data: bytes) -> None:
    """Send what the server takes (it may close mid-way: a refused bomb)."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def assert_node_result(body: bytes, code: str) -> None:
    result = json.loads(body)
    assert result["status"] == "failed" and result["error"]["code"] == code, result


def still_serving(served: GatewayServer) -> None:
    answer = httpx.post(f"{served.url}/v1/nodes/MEMORY.GET", json={"keys": ["k"]},
                        headers={"Authorization": f"Bearer {T1}"}, timeout=30)  # fmt: skip
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("size", [64 * 1024, 8 << 20])
def test_a_header_bomb_is_431_and_read_no_further(served: GatewayServer, size: int) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        send(sock, b"GET /healthz HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
             + b"a" * size + b"\r\n\r\n")  # fmt: skip
        status, headers, body = answer_of(sock)
    assert status == 431 and headers["connection"] == "close"
    assert_node_result(body, "PAYLOAD_TOO_LARGE")
    still_serving(served)


def test_too_many_header_fields_is_431(served: GatewayServer) -> None:
    fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(41))
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        send(sock, b"GET /healthz HTTP/1.1\r\nHost: gw\r\n" + fields + b"\r\n")
        status, _, body = answer_of(sock)
    assert status == 431
    assert_node_result(body, "PAYLOAD_TOO_LARGE")


def test_slow_headers_are_408_and_a_silent_connection_is_closed(served: GatewayServer) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        send(sock, b"POST /v1/nodes/MEMORY.GET HTTP/1.1\r\nHost: gw\r\n")
        status, headers, body = answer_of(sock)
    assert status == 408 and headers["connection"] == "close"
    assert_node_result(body, "INVALID_INPUT")
    assert b"headers took over 2 s" in body
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        assert answer_of(sock) == (0, {}, b"")  # closed, nothing written


def test_a_slow_body_is_408_and_the_route_hears_a_disconnect(served: GatewayServer) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        send(sock, raw_request("POST", "/v1/nodes/MEMORY.GET", T1, 100) + b'{"keys": [')
        status, _, body = answer_of(sock)
    assert status == 408
    assert_node_result(body, "INVALID_INPUT")
    assert b"body took over 2 s" in body
    assert "Traceback" not in served.log_path.read_text()
    still_serving(served)


def test_a_request_the_parser_cannot_read_is_a_node_result_400(served: GatewayServer) -> None:
    for _ in range(20):  # logged once a minute at most: no log line per request
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
            send(sock, b"NOT HTTP AT ALL\r\n\r\n")
            status, _, body = answer_of(sock)
        assert status == 400
        assert_node_result(body, "INVALID_INPUT")
    assert 1 <= served.log_path.read_text().count("Invalid HTTP request received") <= 2


def test_a_kept_alive_connection_gets_each_deadline_afresh(served: GatewayServer) -> None:
    body = json.dumps({"keys": ["k"]}).encode()
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        for _ in range(2):
            send(sock, raw_request("POST", "/v1/nodes/MEMORY.GET", T1, len(body)) + body)
            head = sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200"), head
            time.sleep(2.5)  # idle between requests longer than headerTimeoutS: allowed
        # a later request on the same connection is bounded as the first (431, answered)
        send(sock, b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"b" * 20000 + b"\r\n\r\n")
        status, _, refused = answer_of(sock)
    assert status == 431
    assert_node_result(refused, "PAYLOAD_TOO_LARGE")


def test_a_connection_over_the_cap_is_429(tmp_path: Path) -> None:
    with guarded(tmp_path, extra="  maxConnections: 8\n  headerTimeoutS: 120\n") as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=30)
                for _ in range(8)]  # fmt: skip
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                status, headers, body = answer_of(sock)
            assert status == 429 and headers["retry-after"] == "1"
            assert_node_result(body, "OVERLOADED")
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + EVENT_WAIT_S
        while True:  # the closed ones are given back
            try:
                assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
