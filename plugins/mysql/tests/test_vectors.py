"""MySQL vectors: the conformance suite with an embedder, write-side embedding in the
record's transaction, identity checks, the exact scan under filters, hybrid.

Rules: MEM-WRITE-4, MEM-SEARCH-6, MEM-RET-4, MEM-SEARCH-2/3. Uses the deterministic
HashingEmbedder (no model). Tested on MariaDB 10.11.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ditto_plugin_mysql import MysqlMemoryStore, vectors
from ditto_worker import create_memory
from ditto_worker.contracts import MemorySearchInput, MemoryUpdateInput, MemoryWriteInput
from ditto_worker.errors import MemoryError
from ditto_worker.testing import HashingEmbedder
from ditto_worker.testing.conformance import *  # noqa: F403

from .conftest import admin


@pytest.fixture
def conformance_store(mysql_url: str, mysql_database: str) -> Iterator[MysqlMemoryStore]:
    """The conformance suite again, with vectors on."""
    store = MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, embedder=HashingEmbedder()
    )
    yield store
    store.close()


@pytest.fixture
def store(mysql_url: str, mysql_database: str) -> Iterator[MysqlMemoryStore]:
    store = MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, embedder=HashingEmbedder()
    )
    yield store
    store.close()


def _write(store: MysqlMemoryStore, drafts: list[dict[str, Any]]) -> list[str]:
    return [i.id for i in store.write(MemoryWriteInput.model_validate({"memories": drafts}))]


def _search(store: MysqlMemoryStore, query: Any, strategy: str, **fields: Any) -> list[Any]:
    return list(store.search(MemorySearchInput(query=query, strategy=strategy, **fields)))


def _vector_count(url: str, database: str) -> int:
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.memory_vectors")
            return int((cur.fetchone() or (-1,))[0])
    finally:
        conn.close()


def test_vectors_follow_writes_updates_and_deletes(
    store: MysqlMemoryStore, mysql_url: str, mysql_database: str
) -> None:
    ids = _write(store, [{"content": "red apple"}, {"content": None}, {"content": "blue sky"}])
    assert _vector_count(mysql_url, mysql_database) == 2  # content without text: no vector
    store.update(MemoryUpdateInput.model_validate({"memories": [{"id": ids[1], "content": "x"}]}))
    assert _vector_count(mysql_url, mysql_database) == 3
    hits = _search(store, "blue sky", "vector", limit=3)
    assert hits[0].memory.id == ids[2] and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    create_memory(store).delete({"ids": [ids[2]]})
    assert _vector_count(mysql_url, mysql_database) == 2
    assert ids[2] not in [h.memory.id for h in _search(store, "blue sky", "vector", limit=3)]


def test_the_scan_spans_chunks_and_filters_before_limit(
    store: MysqlMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "SCAN_CHUNK", 7)  # many round trips over 40 vectors
    drafts = [{"content": f"note number {i}", "metadata": {"even": i % 2 == 0}} for i in range(40)]
    ids = _write(store, drafts)
    hits = _search(store, "note number 33", "vector", limit=5)
    assert hits[0].memory.id == ids[33]
    odd = _search(store, "note number 33", "vector", limit=25, filter={"even": False})
    assert len(odd) == 20 and {h.memory.metadata["even"] for h in odd} == {False}


def test_a_chunk_cut_short_by_the_server_is_read_row_by_row(
    store: MysqlMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _write(store, [{"content": f"entry {i} of the list"} for i in range(30)])
    whole = _search(store, "entry 12 of the list", "vector", limit=30)
    monkeypatch.setattr(vectors, "CONCAT_MAX_BYTES", 300)  # every GROUP_CONCAT truncated
    cut = _search(store, "entry 12 of the list", "vector", limit=30)
    assert [h.memory.id for h in cut] == [h.memory.id for h in whole]
    assert cut[0].memory.id == ids[12] and len(cut) == 30


def test_identity_mismatch_fails_every_call(mysql_url: str, mysql_database: str) -> None:
    first = MysqlMemoryStore(mysql_url, database=mysql_database, embedder=HashingEmbedder())
    first.write(MemoryWriteInput.model_validate({"memories": [{"content": "kept"}]}))
    first.close()
    other = HashingEmbedder(dims=16)
    assert other.identity != HashingEmbedder().identity
    second = MysqlMemoryStore(mysql_url, database=mysql_database, embedder=other)
    plain = MysqlMemoryStore(mysql_url, database=mysql_database)
    try:
        with pytest.raises(MemoryError) as info:
            second.write(MemoryWriteInput.model_validate({"memories": [{"content": "x"}]}))
        assert info.value.code == "EMBEDDING_MISMATCH"
        with pytest.raises(MemoryError) as info:  # no provider: a write would lack vectors
            plain.write(MemoryWriteInput.model_validate({"memories": [{"content": "x"}]}))
        assert info.value.code == "EMBEDDING_MISMATCH"
        assert mysql_url not in str(info.value) and mysql_database not in str(info.value)
    finally:
        second.close()
        plain.close()


def test_hybrid_runs_the_shared_pipeline(store: MysqlMemoryStore) -> None:
    ids = _write(store, [{"content": "the cat sat on the mat"}, {"content": "stock prices"}])
    hits = _search(store, "cat on a mat", "hybrid", limit=2)
    assert hits[0].memory.id == ids[0]
    assert hits[0].metadata["strategy"] == "hybrid"
