"""The conformance suite against a Milvus store without an embedding provider (keyword
search only; a collection without a dense vector field), on Milvus Lite 3 (Python
reimplementation). The two volume tests run once, in ``test_conformance.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403

del test_ten_thousand_record_write, test_delete_more_than_a_thousand_matches  # noqa: F821


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[MilvusMemoryStore]:
    # a gRPC call's wait: generous, the machine may be busy
    store = MilvusMemoryStore(uri=str(tmp_path / "milvus.db"), timeout_s=120)
    yield store
    store.close()
