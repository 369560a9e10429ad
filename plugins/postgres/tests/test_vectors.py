"""PostgreSQL vectors (pgvector): write-side embedding, identity, filtered search, hybrid.

Rules: MEM-WRITE-4, MEM-SEARCH-6 (embedding only with an explicit provider, in the
record's transaction), MEM-RET-4 (identity; mismatch fails explicitly), MEM-SEARCH-2/3.
Uses the deterministic HashingEmbedder (no model) except one test with the local model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ditto_plugin_postgres import PostgresMemoryStore, create_store
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
def conformance_store(postgres_url: str, pg_schema: str) -> Iterator[PostgresMemoryStore]:
    """The conformance suite again, with vectors on."""
    store = PostgresMemoryStore(
        postgres_url, schema=pg_schema, pool_max_size=2, embedder=HashingEmbedder()
    )
    yield store
    store.close()


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def store(
    postgres_url: str, pg_schema: str, embedder: HashingEmbedder
) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=2, embedder=embedder)
    yield store
    store.close()


def _write(store: PostgresMemoryStore, drafts: list[dict[str, Any]]) -> list[str]:
    items = store.write(MemoryWriteInput.model_validate({"memories": drafts}))
    return [item.id for item in items]


def _search(store: Any, query: Any, strategy: str, **fields: Any) -> list[Any]:
    return list(store.search(MemorySearchInput(query=query, strategy=strategy, **fields)))


def _vector_count(url: str, schema: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".memory_vectors').fetchone()
    return int(row[0]) if row else -1


def test_write_embeds_once_per_batch_and_update_only_on_content(
    store: PostgresMemoryStore, embedder: HashingEmbedder, postgres_url: str, pg_schema: str
) -> None:
    # MEM-WRITE-4: one model batch per WRITE; content without text gets no vector
    ids = _write(store, [{"content": "Jon likes coffee"}, {"content": {"t": "dogs"}},
                         {"content": None}, {"content": 7}])  # fmt: skip
    assert embedder.calls == [["Jon likes coffee", "dogs"]]
    assert _vector_count(postgres_url, pg_schema) == 2
    store.update(MemoryUpdateInput.model_validate(
        {"memories": [{"id": ids[0], "metadata": {"reviewed": True}}]}))  # fmt: skip
    assert len(embedder.calls) == 1  # metadata-only update: no embedding
    store.update(MemoryUpdateInput.model_validate(
        {"memories": [{"id": ids[0], "content": "Jon now drinks tea"},
                      {"id": ids[1], "content": None}]}))  # fmt: skip
    assert embedder.calls[-1] == ["Jon now drinks tea"]
    assert _vector_count(postgres_url, pg_schema) == 1  # ids[1] lost its text, so its vector
    hits = _search(store, "tea", "vector")
    assert [h.memory.id for h in hits] == [ids[0]]
    assert hits[0].score == pytest.approx(0.5, abs=0.3) and hits[0].metadata == {
        "strategy": "vector",
        "rank": 1,
    }
    store.delete(MemoryDeleteInput(ids=[ids[0]]))
    assert _vector_count(postgres_url, pg_schema) == 0


def test_failed_embedding_writes_nothing(postgres_url: str, pg_schema: str) -> None:
    class Broken(HashingEmbedder):
        def embed(self, texts: Any) -> list[list[float]]:
            raise MemoryError("EMBEDDING_UNAVAILABLE", "down")

    store = PostgresMemoryStore(postgres_url, schema=pg_schema, embedder=Broken())
    memory = create_memory(store)
    result = memory.write({"memories": [{"content": "x"}]})
    assert result.error is not None and result.error.code == "EMBEDDING_UNAVAILABLE"
    assert memory.query({}).output.items == []  # type: ignore[union-attr]
    store.close()


def test_identity_mismatch_fails_every_call(postgres_url: str, pg_schema: str) -> None:
    # MEM-RET-4: never pads, truncates or mixes vectors
    first = PostgresMemoryStore(postgres_url, schema=pg_schema, embedder=HashingEmbedder(dims=64))
    ids = _write(first, [{"content": "alpha"}])
    first.close()
    for other in (HashingEmbedder(dims=32), HashingEmbedder(dims=64, seed=9)):
        store = PostgresMemoryStore(postgres_url, schema=pg_schema, embedder=other)
        memory = create_memory(store)
        calls: list[NodeResult[Any]] = [
            memory.get({"ids": ids}), memory.query({}),
            memory.write({"memories": [{"content": "b"}]}),
            memory.update({"memories": [{"id": ids[0], "metadata": {}}]}),
            memory.delete({"ids": ids}), memory.search({"query": "alpha"}),
            memory.search({"query": "alpha", "strategy": "vector"}),
            memory.search({"query": "alpha", "strategy": "hybrid"}),
        ]  # fmt: skip
        for result in calls:
            assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
            assert "testing/hashing@seed=0 (64, l2)" in result.error.message
        assert other.calls == []  # nothing was embedded for a mismatched store
        store.close()
    plain_store = PostgresMemoryStore(postgres_url, schema=pg_schema)
    plain = create_memory(plain_store)  # no provider: reads work, writes refused
    assert plain.get({"ids": ids}).output is not None
    assert plain.search({"query": "alpha"}).status == "success"
    refused = plain.write({"memories": [{"content": "b"}]})
    assert refused.error is not None and refused.error.code == "EMBEDDING_MISMATCH"
    assert plain.update({"memories": [{"id": ids[0], "metadata": {"a": 1}}]}).status == "success"
    assert plain.delete({"ids": ids}).status == "success"
    plain_store.close()


def test_vector_query_forms(store: PostgresMemoryStore, embedder: HashingEmbedder) -> None:
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


_TIGHT = "-c hnsw.max_scan_tuples=100 -c enable_seqscan=off -c enable_bitmapscan=off"
"""Server options of a session where a filtered KNN goes through the HNSW index with a
scan budget of 100 tuples (the plan and budget under which post-filtering loses rows)."""


def test_filtered_vector_search_returns_min_limit_matches(
    store: PostgresMemoryStore, postgres_url: str, pg_schema: str
) -> None:
    # 3000 records; the 3 matching the filter are the farthest from the query
    drafts = [{"content": f"coffee espresso latte {i}", "metadata": {"g": "near"}}
              for i in range(2997)]  # fmt: skip
    drafts += [{"content": f"mountain hiking trail {i}", "metadata": {"g": "far"}}
               for i in range(3)]  # fmt: skip
    _write(store, drafts)
    query = store.embedder.embed(["coffee espresso"])[0]  # type: ignore[union-attr]
    literal = "[" + ",".join(map(repr, query)) + "]"
    with psycopg.connect(postgres_url, options=_TIGHT) as conn:  # the HNSW index alone
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        plain = conn.execute(
            f'SELECT m.seq FROM "{pg_schema}".memory_vectors AS v JOIN "{pg_schema}".memories '
            'AS m ON m.seq = v.seq WHERE m.metadata @> \'{"g": "far"}\' '
            "ORDER BY v.embedding <=> %s::vector LIMIT 3",
            [literal],
        ).fetchall()
    assert len(plain) < 3  # what a post-filtered KNN returns
    tight = PostgresMemoryStore(
        postgres_url, schema=pg_schema, pool_max_size=1, embedder=store.embedder,
        connect_timeout_s=5, pool_timeout_s=5,
    )  # fmt: skip
    tight._url = f"{postgres_url}?options={_TIGHT.replace(' ', '%20').replace('=', '%3D')}"
    for searcher in (store, tight):
        for limit, expected in ((2, 2), (3, 3), (10, 3)):
            hits = _search(searcher, "coffee espresso", "vector", filter={"g": "far"},
                           limit=limit)  # fmt: skip
            assert len(hits) == expected
            assert all(h.memory.metadata["g"] == "far" for h in hits)
        hits = _search(searcher, "coffee", "vector", limit=50)
        assert len(hits) == 50 and [h.metadata["rank"] for h in hits] == list(range(1, 51))
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert len(_search(searcher, "coffee", "vector", limit=2000)) == 2000
        assert _search(searcher, "coffee", "vector", filter={"g": "none"}) == []
    tight.close()


def test_hnsw_index_serves_unfiltered_search(store: PostgresMemoryStore, pg_schema: str) -> None:
    _write(store, [{"content": f"note {i}"} for i in range(5)])
    with store._tx(None) as conn:
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = "
            "'memory_vectors'",
            [pg_schema],
        ).fetchall()
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            f'EXPLAIN SELECT seq FROM "{pg_schema}".memory_vectors ORDER BY embedding <=> '
            "%s::vector LIMIT 5",
            ["[" + ",".join(["0.125"] * 64) + "]"],
        ).fetchall()
    assert any("hnsw (embedding vector_cosine_ops)" in row[0] for row in indexes)
    assert "memory_vectors_hnsw" in " ".join(row[0] for row in plan)


def test_strategies_without_and_with_vectors(
    pg_store: PostgresMemoryStore, store: PostgresMemoryStore
) -> None:
    for strategy in ("vector", "hybrid", "semantic"):
        with pytest.raises(MemoryError) as info:
            _search(pg_store, "x", strategy)
        assert info.value.code == "UNSUPPORTED_STRATEGY"
    assert pg_store.capabilities.search_strategies == ("keyword",)
    assert pg_store.capabilities.exhaustive_strategies == ()
    assert store.capabilities.search_strategies == ("keyword", "vector", "hybrid")
    assert store.capabilities.exhaustive_strategies == ("vector",)
    with pytest.raises(MemoryError) as info:
        _search(store, "x", "semantic")
    assert info.value.code == "UNSUPPORTED_STRATEGY"


def test_hybrid_native_and_through_the_pipeline_provider(
    store: PostgresMemoryStore, embedder: HashingEmbedder
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
    assert native[0].metadata["strategy"] == "hybrid"
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
    other = create_retrieval_memory_search_provider(store, HashingEmbedder(seed=3))
    mismatch = create_memory(store, other).search({"query": "puppy"})
    assert mismatch.error is not None and mismatch.error.code == "EMBEDDING_MISMATCH"


def test_hybrid_settings_are_used(postgres_url: str, pg_schema: str) -> None:
    hybrid = {"fusion": {"method": "rrf", "weights": {"keyword": 1, "vector": 1}}}
    store = PostgresMemoryStore(
        postgres_url, schema=pg_schema, embedder=HashingEmbedder(), hybrid=hybrid
    )
    _write(store, [{"content": "red apple pie"}, {"content": "green apple"}])
    hits = _search(store, "apple pie", "hybrid")
    assert hits[0].memory.content == "red apple pie" and hits[0].metadata["fusion"] == "rrf"
    store.close()


def test_create_store_embedding_setting(postgres_url: str, pg_schema: str) -> None:
    env = {"DITTO_WORKER_MEMORY_POSTGRES_URL": postgres_url}
    settings = {"schema": pg_schema}
    assert create_store({**settings, "embedding": "none"}, env).embedder is None
    assert create_store(settings, env).capabilities.search_strategies == ("keyword",)
    with pytest.raises(ConfigError):
        create_store({**settings, "embedding": "word2vec"}, env)
    with pytest.raises(ConfigError):
        create_store({**settings, "embedding": "http"}, env)  # no ..._RETRIEVAL_EMBEDDING_*
    with pytest.raises(ConfigError):
        create_store({**settings, "hybrid": {"fusion": {"method": "borda"}}}, env)
    with pytest.raises(ConfigError):
        create_store({**settings, "embedding": "local"},
                     {**env, "DITTO_WORKER_MEMORY_POSTGRES_EMBEDDING": "word2vec"})  # fmt: skip


def test_local_model_end_to_end(postgres_url: str, pg_schema: str) -> None:
    # the real all-MiniLM-L6-v2 (384 dims) through create_store's ``embedding: local``
    pytest.importorskip("sentence_transformers")
    env = {"DITTO_WORKER_MEMORY_POSTGRES_URL": postgres_url}
    store = create_store({"schema": pg_schema, "embedding": "local"}, env)
    assert store.embedder is not None and store.embedder.identity.dims == 384
    _write(store, [{"content": "My dog loves chasing tennis balls"},
                   {"content": "The quarterly tax filing is due in April"}])  # fmt: skip
    hits = _search(store, "What does the puppy like to play with?", "vector", limit=1)
    assert hits[0].memory.content.startswith("My dog")
    assert _search(store, "taxes deadline", "hybrid")[0].memory.content.startswith("The quarterly")
    store.close()


def test_the_seed_vector_query_through_the_sdk(
    store: PostgresMemoryStore, embedder: HashingEmbedder
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
