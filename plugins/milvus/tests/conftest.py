"""Fixtures: a Milvus Lite 3 (Python reimplementation) store per test, in its own folder
under tmp_path (Milvus Lite serves one process per folder). The behaviour shared with
every store is checked by the conformance suite (``test_conformance.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_worker.testing import HashingEmbedder


@pytest.fixture
def milvus_store(tmp_path: Path) -> Iterator[MilvusMemoryStore]:
    """A Milvus Lite store with the deterministic HashingEmbedder (vector search on)."""
    store = MilvusMemoryStore(
        uri=str(tmp_path / "milvus.db"), embedder=HashingEmbedder(), timeout_s=120
    )  # a gRPC call's wait: generous, the machine may be busy
    yield store
    store.close()
