"""LangChain's own standard suites (``langchain-tests``, pinned in pyproject) against
:mod:`ditto_worker.integrations.langchain`, on the embedded runtime over SQLite.

Not collected by our pytest run (no ``test_`` prefix): their async tests need
``asyncio_mode=auto``, so ``tests/integration/test_langchain_suites.py`` runs this file
as its own pytest process and checks the counts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from langchain_tests.integration_tests import (
    BaseStoreAsyncTests,
    BaseStoreSyncTests,
    VectorStoreIntegrationTests,
)

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.integrations.langchain import DittoByteStore, DittoVectorStore
from ditto_worker.memory.worker import create_memory_worker
from ditto_worker.runtime import Runtime, create_ditto
from ditto_worker.testing.embedder import HashingEmbedder

SCOPE = {"tenant": "acme", "user": "alice"}


def _runtime(folder: Path) -> Runtime:
    store = SqliteMemoryStore(folder / "memory.sqlite", embedder=HashingEmbedder())
    return create_ditto([create_memory_worker(store)])


class TestDittoVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> Iterator[DittoVectorStore]:  # type: ignore[override]
        runtime = _runtime(tmp_path)
        try:
            yield DittoVectorStore(runtime, SCOPE)
        finally:
            runtime.close()


class TestDittoByteStoreSync(BaseStoreSyncTests[bytes]):
    @pytest.fixture
    def kv_store(self, tmp_path: Path) -> Iterator[DittoByteStore]:  # type: ignore[override]
        runtime = _runtime(tmp_path)
        try:
            yield DittoByteStore(runtime, SCOPE)
        finally:
            runtime.close()

    @pytest.fixture
    def three_values(self) -> tuple[bytes, bytes, bytes]:
        return b"foo", b"\x00bar\xff", b"buzz" * 100


class TestDittoByteStoreAsync(BaseStoreAsyncTests[bytes]):
    @pytest.fixture
    async def kv_store(self, tmp_path: Path) -> AsyncIterator[DittoByteStore]:  # type: ignore[override]
        runtime = _runtime(tmp_path)
        try:
            yield DittoByteStore(runtime, SCOPE)
        finally:
            runtime.close()

    @pytest.fixture
    def three_values(self) -> tuple[bytes, bytes, bytes]:
        return b"foo", b"\x00bar\xff", b"buzz" * 100
