"""Fixtures: a local-mode Qdrant store per test (its own folder under tmp_path; local mode
is one process per folder). The behaviour shared with every store is checked by the
conformance suite (``test_conformance.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_qdrant import QdrantMemoryStore
from ditto_worker.testing import HashingEmbedder


@pytest.fixture
def qdrant_store(tmp_path: Path) -> Iterator[QdrantMemoryStore]:
    """A local-mode store with the deterministic HashingEmbedder (vector search on)."""
    store = QdrantMemoryStore(path=str(tmp_path / "qdrant"), embedder=HashingEmbedder())
    yield store
    store.close()
