"""The conformance suite against the Milvus store on Milvus Lite 3 (Python
reimplementation): with an embedding provider (the deterministic HashingEmbedder;
``vector`` is the default strategy, exact with the FLAT index, so ``exhaustive``) and, in
``test_conformance_keyword_only.py``, without one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_worker.testing import HashingEmbedder
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[MilvusMemoryStore]:
    store = MilvusMemoryStore(
        uri=str(tmp_path / "milvus.db"), embedder=HashingEmbedder(), timeout_s=120
    )  # a gRPC call's wait: generous, the machine may be busy
    yield store
    store.close()
