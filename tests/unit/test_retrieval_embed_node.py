"""RETRIEVAL.EMBED in process (issue 35 item 8): the retrieval worker's embedder as a node,
its input checked before the model is asked, and the gateway's /v1/embeddings over it
(the real HTTP server is tests/integration/test_gateway_embeddings.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from ditto_worker import create_ditto
from ditto_worker.config import load_runtime_config
from ditto_worker.gateway import GatewaySettings, create_app
from ditto_worker.retrieval.delegation import retrieval_definition
from ditto_worker.testing.embedder import HashingEmbedder

TOKEN = "unit-embed-token"


def _runtime(embedder: HashingEmbedder) -> Any:
    return create_ditto([retrieval_definition(lambda: {}, embedder=lambda: embedder)])


def test_the_node_embeds_in_order_and_checks_its_input_first() -> None:
    embedder = HashingEmbedder(dims=16)
    with _runtime(embedder) as runtime:
        done = runtime.invoke("RETRIEVAL.EMBED", {"texts": ["a b", "c"]})
        assert done.status == "success", done.error
        output = done.output
        assert output is not None and (output.model, output.dimensions) == ("hashing", 16)
        assert output.vectors == embedder.embed(["a b", "c"])
        for bad, field in (({"texts": []}, "texts"), ({"texts": [""]}, "texts[0]"),
                           ({"text": ["x"]}, "texts")):  # fmt: skip
            refused = runtime.invoke("RETRIEVAL.EMBED", bad)
            assert refused.error is not None and refused.error.code == "INVALID_INPUT"
            assert field in refused.error.message
        for asked, field in (({"model": "text-embedding-3-small"}, "model"),
                             ({"dimensions": 1536}, "dimensions")):  # fmt: skip
            refused = runtime.invoke("RETRIEVAL.EMBED", {"texts": ["a b"], **asked})
            assert refused.error is not None and refused.error.code == "INVALID_INPUT"
            assert refused.error.message.startswith(f"Invalid input: {field}:")
        named = runtime.invoke("RETRIEVAL.EMBED", {"texts": ["c"], "model": "hashing",
                                                   "dimensions": 16})  # fmt: skip
        assert named.status == "success", named.error
    # the refused inputs never reached it
    assert embedder.calls == [["a b", "c"], ["a b", "c"], ["c"]]


def test_the_retrieval_worker_has_the_node_unless_configured_none(tmp_path: Any) -> None:
    from ditto_worker.retrieval.config import from_config

    config = {"plugins": {"sqlite": {"path": str(tmp_path / "m.sqlite")}}}
    assert "RETRIEVAL.EMBED" in from_config(load_runtime_config(config, env={})).nodes
    config["workers"] = {"retrieval": {"embedder": "none"}}
    assert "RETRIEVAL.EMBED" not in from_config(load_runtime_config(config, env={})).nodes


@pytest.mark.anyio
async def test_v1_embeddings_over_the_node() -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    settings = GatewaySettings.model_validate(
        {"tokens": [{"sha256": digest, "tenant": "t", "user": "u"}]}
    )
    embedder = HashingEmbedder(dims=8)
    with _runtime(embedder) as runtime:
        app = create_app(runtime, settings)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            ok = await client.post("/v1/embeddings", json={"input": ["x", "y"]}, headers=auth)
            refused = await client.post("/v1/embeddings", json={"input": "x"})
    assert ok.status_code == 200, ok.text
    assert [row["embedding"] for row in ok.json()["data"]] == embedder.embed(["x", "y"])
    assert ok.json()["model"] == "hashing"
    assert refused.status_code == 401
