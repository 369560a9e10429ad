"""SQLite vectors: write-side embedding, identity, filtered exact search, hybrid.

Rules: MEM-WRITE-4, MEM-SEARCH-6 (embedding only with an explicit provider, in the
record's transaction), MEM-RET-4 (identity; mismatch fails explicitly), MEM-SEARCH-2.
Uses the deterministic HashingEmbedder (no model).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, create_store
from ditto_worker import create_memory
from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemorySearchInput,
    MemoryUpdateInput,
    MemoryWriteInput,
    NodeResult,
)
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.retrieval import create_retrieval_memory_search_provider
from ditto_worker.testing import HashingEmbedder
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    """The conformance suite again, with vectors on (pysqlite3 + sqlite-vec driver)."""
    store = SqliteMemoryStore(tmp_path / "memory.sqlite", embedder=HashingEmbedder())
    yield store
    store.close()


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def store(tmp_path: Path, embedder: HashingEmbedder) -> Iterator[SqliteMemoryStore]:
    store = SqliteMemoryStore(tmp_path / "v.sqlite", embedder=embedder)
    yield store
    store.close()


def _write(store: SqliteMemoryStore, drafts: list[dict[str, Any]]) -> list[str]:
    items = store.write(MemoryWriteInput.model_validate({"memories": drafts}))
    return [item.id for item in items]


def _search(store: Any, query: Any, strategy: str, **fields: Any) -> list[Any]:
    return list(store.search(MemorySearchInput(query=query, strategy=strategy, **fields)))


def _vector_count(store: SqliteMemoryStore) -> int:
    with store._tx(None, write=False) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM memory_vectors").fetchone()[0])


def test_write_embeds_once_per_batch_and_update_only_on_content(
    store: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    # MEM-WRITE-4: one model batch per WRITE; content without text gets no vector
    ids = _write(store, [{"content": "Jon likes coffee"}, {"content": {"t": "dogs"}},
                         {"content": None}, {"content": 7}])  # fmt: skip
    assert embedder.calls == [["Jon likes coffee", "dogs"]]
    assert _vector_count(store) == 2
    store.update(MemoryUpdateInput.model_validate(
        {"memories": [{"id": ids[0], "metadata": {"reviewed": True}}]}))  # fmt: skip
    assert len(embedder.calls) == 1  # metadata-only update: no embedding
    store.update(MemoryUpdateInput.model_validate(
        {"memories": [{"id": ids[0], "content": "Jon now drinks tea"},
                      {"id": ids[1], "content": None}]}))  # fmt: skip
    assert embedder.calls[-1] == ["Jon now drinks tea"]
    assert _vector_count(store) == 1  # ids[1] lost its text, so its vector
    hits = _search(store, "tea", "vector")
    assert [h.memory.id for h in hits] == [ids[0]]
    assert -1.0 <= hits[0].score <= 1.0 and hits[0].metadata["strategy"] == "vector"
    store.delete(MemoryDeleteInput(ids=[ids[0]]))
    assert _vector_count(store) == 0


def test_failed_embedding_writes_nothing(tmp_path: Path) -> None:
    class Broken(HashingEmbedder):
        def embed(self, texts: Any) -> list[list[float]]:
            raise MemoryError("EMBEDDING_UNAVAILABLE", "down")

    store = SqliteMemoryStore(tmp_path / "b.sqlite", embedder=Broken())
    result = create_memory(store).write({"memories": [{"content": "x"}]})
    assert result.error is not None and result.error.code == "EMBEDDING_UNAVAILABLE"
    assert create_memory(store).query({}).output.items == []  # type: ignore[union-attr]
    store.close()


def test_identity_mismatch_fails_every_call(tmp_path: Path) -> None:
    # MEM-RET-4: never pads, truncates or mixes vectors
    path = tmp_path / "m.sqlite"
    first = SqliteMemoryStore(path, embedder=HashingEmbedder(dims=64))
    ids = _write(first, [{"content": "alpha"}])
    first.close()
    for other in (HashingEmbedder(dims=32), HashingEmbedder(dims=64, seed=9)):
        memory = create_memory(SqliteMemoryStore(path, embedder=other))
        calls: list[NodeResult[Any]] = [
            memory.get({"ids": ids}), memory.query({}),
            memory.write({"memories": [{"content": "b"}]}),
            memory.update({"memories": [{"id": ids[0], "metadata": {}}]}),
            memory.delete({"ids": ids}), memory.search({"query": "alpha"}),
            memory.search({"query": "alpha", "strategy": "vector"}),
        ]  # fmt: skip
        for result in calls:
            assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
            assert "testing/hashing@seed=0 (64, l2)" in result.error.message
    plain = create_memory(SqliteMemoryStore(path))  # no provider: reads work, writes refused
    assert plain.get({"ids": ids}).output is not None
    assert plain.search({"query": "alpha"}).status == "success"
    refused = plain.write({"memories": [{"content": "b"}]})
    assert refused.error is not None and refused.error.code == "EMBEDDING_MISMATCH"
    assert plain.delete({"ids": ids}).status == "success"


def test_vector_query_forms(store: SqliteMemoryStore, embedder: HashingEmbedder) -> None:
    _write(store, [{"content": "alpha beta"}])
    vector = embedder.embed(["alpha beta"])[0]
    hit = _search(store, [x * 3 for x in vector], "vector")[0]
    assert hit.score == pytest.approx(1.0, abs=1e-5)
    for query, code in (([0.1] * 5, "EMBEDDING_MISMATCH"), ({"text": "a"}, "INVALID_INPUT"),
                        ("  ", "INVALID_INPUT"), ([0.0] * 64, "INVALID_INPUT")):  # fmt: skip
        with pytest.raises(MemoryError) as info:
            _search(store, query, "vector")
        assert info.value.code == code
    with pytest.raises(MemoryError) as info:
        _search(store, [0.1] * 64, "hybrid")
    assert info.value.code == "INVALID_INPUT"


def test_filtered_vector_search_returns_min_limit_matches(store: SqliteMemoryStore) -> None:
    # 600 records; the 3 matching the filter are the farthest from the query: a KNN that
    # filtered afterwards would return none of them
    drafts = [{"content": f"coffee espresso latte {i}", "metadata": {"g": "near"}}
              for i in range(597)]  # fmt: skip
    drafts += [{"content": f"mountain hiking trail {i}", "metadata": {"g": "far"}}
               for i in range(3)]  # fmt: skip
    _write(store, drafts)
    for limit, expected in ((2, 2), (3, 3), (10, 3)):
        hits = _search(store, "coffee espresso", "vector", filter={"g": "far"}, limit=limit)
        assert len(hits) == expected
        assert all(h.memory.metadata["g"] == "far" for h in hits)
    assert len(_search(store, "coffee", "vector", limit=50)) == 50
    assert _search(store, "coffee", "vector", filter={"g": "none"}) == []


def test_strategies_without_and_with_vectors(tmp_path: Path, store: SqliteMemoryStore) -> None:
    plain = SqliteMemoryStore(tmp_path / "plain.sqlite")
    for strategy in ("vector", "hybrid", "semantic"):
        with pytest.raises(MemoryError) as info:
            _search(plain, "x", strategy)
        assert info.value.code == "UNSUPPORTED_STRATEGY"
    assert plain.capabilities.search_strategies == ("keyword", "bm25")
    assert store.capabilities.search_strategies == ("keyword", "bm25", "vector", "hybrid")
    with pytest.raises(MemoryError) as info:
        _search(store, "x", "semantic")
    assert info.value.code == "UNSUPPORTED_STRATEGY"
    plain.close()


def test_hybrid_native_and_through_the_pipeline_provider(
    store: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    _write(store, [
        {"content": "I adopted a puppy", "metadata": {"s": 1, "t": 1, "speaker": "Gina"}},
        {"content": "What is its name?", "metadata": {"s": 1, "t": 2, "speaker": "Jon"}},
        {"content": "Luna, after the moon", "metadata": {"s": 1, "t": 3, "speaker": "Gina"}},
        {"content": "I bought new shoes", "metadata": {"s": 2, "t": 1, "speaker": "Jon"}},
    ])  # fmt: skip
    native = _search(store, "puppy adopted", "hybrid")
    assert native[0].memory.content == "I adopted a puppy"
    assert native[0].metadata["scores"]["fused"] == pytest.approx(1.0)
    config = {"mention": {"fields": ["speaker"]},
              "context": {"groupField": "s", "orderField": "t", "window": 2}}  # fmt: skip
    provider = create_retrieval_memory_search_provider(store, embedder, config)
    memory = create_memory(store, provider)
    hits = memory.search({"query": "What did Gina name the puppy she adopted?", "limit": 3})
    assert hits.output is not None
    contents = [h.memory.content for h in hits.output]
    assert contents[0] == "I adopted a puppy" and "Luna, after the moon" in contents
    for strategy in ("keyword", "vector"):
        assert memory.search({"query": "puppy", "strategy": strategy}).status == "success"
    bad = memory.search({"query": "puppy", "strategy": "semantic"})
    assert bad.error is not None and bad.error.code == "UNSUPPORTED_STRATEGY"
    other = create_retrieval_memory_search_provider(store, HashingEmbedder(seed=3))
    mismatch = create_memory(store, other).search({"query": "puppy"})
    assert mismatch.error is not None and mismatch.error.code == "EMBEDDING_MISMATCH"


def test_vector_strategy_embeds_the_query_without_mentioned_names(
    store: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    """Issue 28 item 7: ``vector`` strips names as ``hybrid`` does (a name dominates a
    sentence embedding); with mention fields off, the query is embedded as given."""
    _write(store, [
        {"content": "I adopted a puppy", "metadata": {"speaker": "Gina"}},
        {"content": "I bought new shoes", "metadata": {"speaker": "Jon"}},
    ])  # fmt: skip
    query = "What did Gina's puppy eat?"
    for config, embedded in (
        ({"mention": {"fields": ["speaker"]}}, "What did puppy eat?"),
        ({"mention": {"fields": ["speaker"], "stripFromVectorQuery": False}}, query),
        ({}, query),
    ):
        provider = create_retrieval_memory_search_provider(store, embedder, config)
        hits = create_memory(store, provider).search({"query": query, "strategy": "vector"})
        assert hits.status == "success" and hits.output
        assert embedder.texts[-1] == embedded


class _KeywordQueries:
    """The store, recording the text query of every keyword search it is sent."""

    def __init__(self, store: SqliteMemoryStore) -> None:
        self.store, self.embedder, self.queries = store, store.embedder, []
        self.capabilities = store.capabilities

    def search(self, input: MemorySearchInput, options: Any = None) -> Any:
        if input.strategy == "keyword":
            self.queries.append(input.query)
        return self.store.search(input, options)

    def query(self, input: Any, options: Any = None) -> Any:
        return self.store.query(input, options)


def test_hybrid_keyword_leg_searches_without_mentioned_names(
    store: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    """Issue 28 item 7: a turn that names the other speaker ("Thanks, Jon!") no longer
    matches a question about Jon by his name; the keyword leg searches again without the
    names the mention boost scores (``mention.stripFromKeywordQuery``, on by default)."""
    ids = _write(store, [
        {"content": "Thanks, Jon! Good luck", "metadata": {"speaker": "Gina"}},
        {"content": "I opened a dance studio", "metadata": {"speaker": "Jon"}},
    ])  # fmt: skip
    query = "What did Jon open?"
    for strip, queries, thanks_matched, first in ((True, [query, "What did open?"], False, 1),
                                                  (False, [query], True, 0)):  # fmt: skip
        config = {"mention": {"fields": ["speaker"], "stripFromKeywordQuery": strip}}
        source = _KeywordQueries(store)
        provider = create_retrieval_memory_search_provider(source, embedder, config)
        hits = create_memory(store, provider).search({"query": query, "strategy": "hybrid"})
        assert hits.status == "success" and hits.output
        assert source.queries == queries
        scores = {h.memory.id: h.metadata["scores"] for h in hits.output}
        assert ("keyword" in scores[ids[0]]) is thanks_matched
        assert "keyword" in scores[ids[1]] and hits.output[0].memory.id == ids[first]


def test_hybrid_legs_strip_the_names_found_with_the_query_as_given(tmp_path: Path) -> None:
    """Both legs strip the values found in the first keyword search's candidates: Jon's
    turn is found by his name only (``indexFields: [speaker]``), so the second keyword
    search (without "Jon") does not return it, and the vector leg still embeds the query
    without "Jon"."""
    embedder = HashingEmbedder()
    store = SqliteMemoryStore(tmp_path / "n.sqlite", embedder=embedder, index_fields=["speaker"])
    try:
        _write(store, [
            {"content": "Thanks, Jon! Good luck", "metadata": {"speaker": "Gina"}},
            {"content": "I bought new shoes", "metadata": {"speaker": "Jon"}},
        ])  # fmt: skip
        source = _KeywordQueries(store)
        config = {"mention": {"fields": ["speaker"]}}
        provider = create_retrieval_memory_search_provider(source, embedder, config)
        hits = create_memory(store, provider).search({"query": "Did Jon wish luck?"})
        assert hits.status == "success" and hits.output
        assert source.queries == ["Did Jon wish luck?", "Did wish luck?"]
        assert embedder.texts[-1] == "Did wish luck?"
    finally:
        store.close()


def test_create_store_embedding_setting(tmp_path: Path) -> None:
    env = {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "c.sqlite")}
    assert create_store({"embedding": "none"}, env).embedder is None
    with pytest.raises(ConfigError):
        create_store({"embedding": "word2vec"}, env)
    with pytest.raises(ConfigError):
        create_store({"embedding": "http"}, env)  # no DITTO_WORKER_RETRIEVAL_EMBEDDING_*
    with pytest.raises(ConfigError):
        create_store({"hybrid": {"fusion": {"method": "borda"}}}, env)


def test_cancel_interrupts_the_vector_driver(tmp_path: Path) -> None:
    # MEM-RUN-2 on the pysqlite3 connection: a running statement is interrupted, the
    # error maps to MEMORY_CANCELLED, and a pysqlite3 error is never a raw driver error
    import threading

    from ditto_plugin_sqlite.db import open_connection, transaction
    from ditto_worker.memory.ports import CancelToken, MemoryCallOptions

    conn = open_connection(str(tmp_path / "c.sqlite"), 1000, vectors=True)
    assert type(conn).__module__.startswith("pysqlite3")
    slow = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        "SELECT MAX(vec_distance_cosine(vec_f32('[1, 0]'), vec_f32('[0, 1]')) + i) FROM n"
    )
    token = CancelToken()
    timer = threading.Timer(0.2, token.cancel)
    timer.start()
    try:
        with pytest.raises(MemoryError) as info:
            with transaction(conn, MemoryCallOptions(cancel=token), write=False) as c:
                c.execute(slow).fetchone()
        assert info.value.code == "MEMORY_CANCELLED"
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(MemoryError) as info:
            with transaction(conn, None, write=False) as c:
                c.execute("SELECT * FROM no_such_table")
        assert info.value.code == "MEMORY_BACKEND_ERROR"
        assert "no_such_table" not in info.value.safe_message
    finally:
        timer.cancel()
        conn.close()


def test_retrieval_target_providers(tmp_path: Path, store: SqliteMemoryStore) -> None:
    # MEM-RET-3: what the RETRIEVAL worker serves for a target
    from ditto_worker.retrieval import (
        MicroBatchingEmbedder,
        build_pipeline_provider,
        create_memory_retrieval_provider,
    )

    _write(store, [{"content": "Jon opened a dance studio"}, {"content": "Gina lost her job"}])
    assert create_memory_retrieval_provider(store) is store
    with pytest.raises(ConfigError):
        create_memory_retrieval_provider(object())
    provider = build_pipeline_provider(store, {"candidates": 50, "microBatch": {"maxWaitMs": 1}})
    assert isinstance(provider.embedder, MicroBatchingEmbedder)
    result = create_memory(store, provider).search({"query": "dance studio"})
    assert result.output is not None and result.output[0].memory.content.startswith("Jon")
    assert provider.capabilities.default_strategy == "hybrid"
    provider.embedder.close()
    plain = SqliteMemoryStore(tmp_path / "plain.sqlite")
    with pytest.raises(ConfigError):
        build_pipeline_provider(plain, {})  # embedding 'store' needs a store with one
    with pytest.raises(ConfigError):
        build_pipeline_provider(store, {"fusion": {"weights": "nope"}})
    plain.close()


def test_reindex_embeds_records_written_without_a_provider(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with SqliteMemoryStore(path) as plain:  # keyword-only database with records
        _write(plain, [{"content": f"note {i} about tea"} for i in range(5)] + [{"content": 1}])
    embedder = HashingEmbedder()
    with SqliteMemoryStore(path, embedder=embedder) as store:
        assert _search(store, "tea", "vector") == []  # nothing embedded implicitly
        assert embedder.calls == [["tea"]]  # the query only
        assert store.reindex_embeddings(batch_size=2) == 5
        assert len(_search(store, "tea", "vector")) == 5
        assert store.reindex_embeddings() == 0


def test_the_seed_vector_query_through_the_sdk(
    store: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    # issue 13 item 7: the seed's SEARCH example {query: {vector: [...]}, strategy: "vector"}
    memory = create_memory(store)
    written = memory.write({"memories": [{"content": "alpha beta"}, {"content": "gamma"}]})
    assert written.output is not None
    vector = embedder.embed(["alpha beta"])[0]
    result = memory.search({"query": {"vector": vector}, "strategy": "vector", "limit": 2})
    assert result.status == "success" and result.output is not None, result.error
    assert result.output[0].memory.id == written.output[0].id
    assert result.output[0].score == pytest.approx(1.0, abs=1e-5)
    short = memory.search({"query": {"vector": vector[:3]}, "strategy": "vector"})
    assert short.error is not None and short.error.code == "EMBEDDING_MISMATCH"
    extra = memory.search({"query": {"vector": vector, "k": 3}, "strategy": "vector"})
    assert extra.error is not None and extra.error.code == "INVALID_INPUT"
