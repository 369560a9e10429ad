"""The conformance suite against a Qdrant store without an embedding provider (keyword
search only; a collection that keeps no dense vectors). The two volume tests run once, in
``test_conformance.py``: nothing in them depends on the provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_qdrant import QdrantMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403

del test_ten_thousand_record_write, test_delete_more_than_a_thousand_matches  # noqa: F821


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[QdrantMemoryStore]:
    store = QdrantMemoryStore(path=str(tmp_path / "qdrant"))
    yield store
    store.close()
