"""indexFields on PostgreSQL (issue 19): metadata fields indexed with the content for
keyword and vector search; a changed list is EMBEDDING_MISMATCH until reindex."""

from __future__ import annotations

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_worker import create_memory
from ditto_worker.testing.embedder import HashingEmbedder

TURNS = [
    {"content": "I went to a support group yesterday", "metadata": {"speaker": "Caroline"}},
    {"content": "That sounds great", "metadata": {"speaker": "Melanie"}},
]


def test_fields_are_indexed_embedded_and_a_change_needs_a_reindex(
    postgres_url: str, pg_schema: str
) -> None:
    with_plain = PostgresMemoryStore(postgres_url, schema=pg_schema, embedder=HashingEmbedder())
    create_memory(with_plain).write({"memories": TURNS})
    with_plain.close()
    embedder = HashingEmbedder()  # records what it embedded (.texts)
    store = PostgresMemoryStore(
        postgres_url, schema=pg_schema, embedder=embedder, index_fields=["speaker"]
    )
    try:
        memory = create_memory(store)
        result = memory.search({"query": "support"})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
        assert store.reindex_embeddings() == 2
        assert sorted(embedder.texts) == ["Caroline: I went to a support group yesterday",
                                          "Melanie: That sounds great"]  # fmt: skip
        found = memory.search({"query": "Melanie"}).output
        assert [h.memory.content for h in found] == ["That sounds great"]
        embedder.calls.clear()
        second = found[0].memory.id
        memory.update({"memories": [{"id": second, "metadata": {"speaker": "Caroline"}}]})
        assert embedder.texts == ["Caroline: That sounds great"]
        assert len(memory.search({"query": "Caroline"}).output) == 2
    finally:
        store.close()
    old = PostgresMemoryStore(postgres_url, schema=pg_schema, embedder=HashingEmbedder())
    try:
        result = create_memory(old).search({"query": "support"})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
    finally:
        old.close()
