"""The seed's own env block works as written (issue 13 item 7; memory-capabilities.en.txt):

export DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL=https://open.bigmodel.cn/api/paas/v4
export DITTO_WORKER_RETRIEVAL_EMBEDDING_MODEL=embedding-3
export DITTO_WORKER_MEMORY_EMBEDDING_DIMENSIONS=2048
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_plugin_sqlite import create_store
from ditto_worker.errors import ConfigError
from ditto_worker.retrieval.http import HttpEmbeddingProvider

SEED_ENV = {
    "DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL": "https://open.bigmodel.cn/api/paas/v4",
    "DITTO_WORKER_RETRIEVAL_EMBEDDING_MODEL": "embedding-3",
    "DITTO_WORKER_MEMORY_EMBEDDING_DIMENSIONS": "2048",
}


def test_the_seed_env_block_configures_the_http_provider() -> None:
    provider = HttpEmbeddingProvider.from_env(SEED_ENV)
    try:
        assert provider.identity.dims == 2048 and provider.identity.model == "embedding-3"
    finally:
        provider.close()


def test_a_store_with_http_embeddings_builds_from_the_seed_env(tmp_path: Path) -> None:
    env = {**SEED_ENV, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "m.sqlite")}
    store = create_store({"embedding": "http"}, env)  # no request is sent until a write
    try:
        assert store.embedder is not None and store.embedder.identity.dims == 2048
    finally:
        store.close()


def test_both_names_must_agree_and_one_is_needed() -> None:
    both = {**SEED_ENV, "DITTO_WORKER_RETRIEVAL_EMBEDDING_DIMENSIONS": "2048"}
    provider = HttpEmbeddingProvider.from_env(both)
    assert provider.identity.dims == 2048
    provider.close()
    with pytest.raises(ConfigError, match="differ"):
        HttpEmbeddingProvider.from_env({**both, "DITTO_WORKER_MEMORY_EMBEDDING_DIMENSIONS": "8"})
    neither = {k: v for k, v in SEED_ENV.items() if "DIMENSIONS" not in k}
    with pytest.raises(ConfigError, match="MEMORY_EMBEDDING_DIMENSIONS"):
        HttpEmbeddingProvider.from_env(neither)
    with pytest.raises(ConfigError, match="positive integer"):
        HttpEmbeddingProvider.from_env({**neither, "DITTO_WORKER_MEMORY_EMBEDDING_DIMENSIONS": "x"})
