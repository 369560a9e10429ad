"""The conformance suite against a Milvus store with one collection per scope
(``collection_per_scope``: keyword statistics are the scope's own, so
``keyword_scope_statistics`` is declared and tested), without an embedding provider, on
Milvus Lite 3 (Python reimplementation). The volume tests run in ``test_conformance.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403

del test_ten_thousand_record_write, test_delete_more_than_a_thousand_matches  # noqa: F821


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[MilvusMemoryStore]:
    store = MilvusMemoryStore(
        uri=str(tmp_path / "milvus.db"), collection_per_scope=True, timeout_s=120
    )  # a gRPC call's wait: generous, the machine may be busy
    assert store.capabilities.keyword_scope_statistics
    yield store
    store.close()
