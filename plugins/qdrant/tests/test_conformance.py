"""The conformance suite against the Qdrant store in the client's local mode: with an
embedding provider (the deterministic HashingEmbedder: ``vector`` is the default strategy,
exact in local mode, so ``exhaustive``) and, in ``test_conformance_keyword_only.py``,
without one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_qdrant import QdrantMemoryStore
from ditto_worker.testing import HashingEmbedder
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[QdrantMemoryStore]:
    store = QdrantMemoryStore(path=str(tmp_path / "qdrant"), embedder=HashingEmbedder())
    yield store
    store.close()
