"""``POST /v1/embeddings`` on a real ``ditto-worker serve`` (issue 35 item 8): an
OpenAI-compatible embeddings endpoint backed by the retrieval worker's model
(RETRIEVAL.EMBED), called over TCP from this process by the project's own
``HttpEmbeddingProvider`` (what a store with ``embedding: http`` uses) and by httpx.

Covers: the vectors are the local model's (all-MiniLM-L6-v2, 384 dimensions, the same as
this process computes), float and base64 encodings agree, and the gateway's rules hold:
no token 401, a token without the node 403, bad requests 422 naming the field before
anything is enqueued.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ditto_worker.retrieval.http import HttpEmbeddingProvider
from ditto_worker.testing.gateway import GatewayServer
from tests.integration._gateway_kit import serving, wait_for_answer

# the module fixture warms the model for up to 600 s, counted against the first test
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TOKEN, NARROW = "emb-token", "emb-narrow-token"
MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    folder = tmp_path_factory.mktemp("embeddings")
    tokens = {TOKEN: "tenant: t1, user: u1", NARROW: 'tenant: t1, user: u2, nodes: ["MEMORY.*"]'}
    with serving(folder, tokens) as served:
        _warm(served)
        yield served


def _warm(server: GatewayServer) -> None:
    """Wait until the model is loaded: the first call loads it in the serve process (on a
    loaded machine longer than the call's 30 s deadline: that call answers 504 while the
    load goes on), so ask until one answers 200."""

    def loading(answer: httpx.Response) -> None:
        assert answer.status_code == 504, answer.text

    wait_for_answer(lambda: _post(server, {"input": "warm up"}), server, meanwhile=loading,
                    bound_s=600.0)  # fmt: skip


def _post(server: GatewayServer, body: Any, token: str | None = TOKEN) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{server.url}/v1/embeddings", json=body, headers=headers, timeout=120)


def test_a_store_side_http_provider_gets_the_local_models_vectors(server: GatewayServer) -> None:
    from ditto_worker.retrieval.embed import LocalEmbeddingProvider

    remote = HttpEmbeddingProvider(f"{server.url}/v1", MODEL, 384, api_key=TOKEN,
                                   timeout_s=120)  # fmt: skip
    try:
        got = remote.embed(["I prefer short answers.", "Bitte auf Deutsch."])
    finally:
        remote.close()
    expected = LocalEmbeddingProvider().embed(["I prefer short answers.", "Bitte auf Deutsch."])
    assert len(got) == 2 and all(len(v) == 384 for v in got)
    for mine, theirs in zip(got, expected, strict=True):
        assert sum(a * b for a, b in zip(mine, theirs, strict=True)) > 0.999


def test_one_text_float_and_base64_agree(server: GatewayServer) -> None:
    floats = _post(server, {"input": "hello", "model": MODEL})
    assert floats.status_code == 200, floats.text
    body = floats.json()
    assert body["object"] == "list" and body["model"] == MODEL
    [row] = body["data"]
    assert (row["object"], row["index"], len(row["embedding"])) == ("embedding", 0, 384)
    packed = _post(server, {"input": ["hello"], "encoding_format": "base64", "dimensions": 384})
    assert packed.status_code == 200, packed.text
    raw = base64.b64decode(packed.json()["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(decoded) == 384
    assert max(abs(a - b) for a, b in zip(decoded, row["embedding"], strict=True)) < 1e-5


@pytest.mark.parametrize(
    ("body", "token", "status", "named"),
    [
        ({"input": "x"}, None, 401, None),
        ({"input": "x"}, NARROW, 403, "RETRIEVAL.EMBED"),
        ({"input": 5}, TOKEN, 422, "input"),
        ({"input": []}, TOKEN, 422, "texts"),
        ({"input": ["x"] * 257}, TOKEN, 422, "texts"),
        ({"input": "x", "encoding_format": "int8"}, TOKEN, 422, "encoding_format"),
        ({"input": "x", "dimensions": 1536}, TOKEN, 422, "dimensions"),
        ({"input": "x", "model": "text-embedding-3-small"}, TOKEN, 422, "model"),
        ({"input": "x", "surprise": 1}, TOKEN, 422, "surprise"),
    ],
    ids=["no-token", "no-grant", "not-text", "empty", "too-many", "encoding", "dimensions",
         "model", "unknown-field"],
)  # fmt: skip
def test_the_gateways_rules_hold(
    server: GatewayServer, body: Any, token: str | None, status: int, named: str | None
) -> None:
    answer = _post(server, body, token)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] and error["message"]
    if named is not None:
        assert named in error["message"]
