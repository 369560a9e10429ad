"""indexFields (issue 19): named metadata fields indexed with the content for keyword and
vector search; part of the index's preprocessing (EMBEDDING_MISMATCH until reindex)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, create_store
from ditto_worker import create_memory
from ditto_worker.errors import ConfigError
from ditto_worker.memory.text import embedding_text
from ditto_worker.testing.embedder import HashingEmbedder

TURNS = [
    {"content": "I went to a support group yesterday", "metadata": {"speaker": "Caroline"}},
    {"content": "That sounds great", "metadata": {"speaker": "Melanie"}},
]


def test_fields_are_indexed_and_embedded(tmp_path: Path) -> None:
    embedder = HashingEmbedder()  # records what it embedded (.texts)
    store = SqliteMemoryStore(tmp_path / "f.sqlite", embedder=embedder, index_fields=["speaker"])
    memory = create_memory(store)
    written = memory.write({"memories": TURNS}).output
    assert embedder.texts == ["Caroline: I went to a support group yesterday",
                              "Melanie: That sounds great"]  # fmt: skip
    keys = [h.memory.id for h in memory.search({"query": "Caroline"}).output]
    assert keys == [written[0].id]
    # a metadata-only update re-indexes and re-embeds: the fields are read
    embedder.calls.clear()
    memory.update({"memories": [{"id": written[1].id, "metadata": {"speaker": "Caroline"}}]})
    assert embedder.texts == ["Caroline: That sounds great"]
    assert {h.memory.id for h in memory.search({"query": "Caroline"}).output} == {
        written[0].id,
        written[1].id,
    }
    store.close()


def test_a_changed_field_list_is_a_mismatch_until_reindex(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    with SqliteMemoryStore(path, embedder=HashingEmbedder()) as plain:
        create_memory(plain).write({"memories": TURNS})
    embedder = HashingEmbedder()  # records what it embedded (.texts)
    store = SqliteMemoryStore(path, embedder=embedder, index_fields=["speaker"])
    memory = create_memory(store)
    for node, input in (("MEMORY.SEARCH", {"query": "support"}), ("MEMORY.QUERY", {})):
        result = memory.execute(node, input)
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
        assert "indexFields" in result.error.message
    assert store.reindex_embeddings() == 2
    assert sorted(embedder.texts) == sorted(
        embedding_text(t["content"], t["metadata"], ["speaker"]) for t in TURNS
    )
    assert [h.memory.content for h in memory.search({"query": "Melanie"}).output] == [
        "That sounds great"
    ]
    store.close()
    # the new fields are recorded: the old configuration is now the mismatch
    with SqliteMemoryStore(path, embedder=HashingEmbedder()) as old:
        result = create_memory(old).search({"query": "support"})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"


def test_settings_key(tmp_path: Path) -> None:
    store = create_store({"path": str(tmp_path / "s.sqlite"), "indexFields": ["speaker"]}, env={})
    created = create_memory(store).write({"memories": TURNS[:1]}).output
    assert [h.memory.id for h in create_memory(store).search({"query": "caroline"}).output] == [
        created[0].id
    ]
    store.close()
    for bad in ("speaker", [1], ["a", "a"], [""]):
        with pytest.raises(ConfigError):
            create_store({"path": str(tmp_path / "b.sqlite"), "indexFields": bad}, env={})
