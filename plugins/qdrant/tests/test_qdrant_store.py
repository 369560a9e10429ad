"""Qdrant-specific behaviour in local mode: exactly-once by execution id, the embed
policy, the embedding identity a collection fixes, reindexing into a new collection,
ties of ``order_by``, declared filter limits, configuration, one process per folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_qdrant import QdrantMemoryStore, create_store
from ditto_worker import Scope, create_memory, to_wire
from ditto_worker.errors import ConfigError
from ditto_worker.memory.scope import namespace_of
from ditto_worker.testing import HashingEmbedder


def _store(tmp_path: Path, **kwargs: Any) -> QdrantMemoryStore:
    kwargs.setdefault("embedder", HashingEmbedder())
    return QdrantMemoryStore(path=str(tmp_path / "q"), **kwargs)


# --- exactly-once ---------------------------------------------------------------------------


def test_write_update_delete_replays_return_the_committed_result(tmp_path: Path) -> None:
    memory = create_memory(_store(tmp_path))
    drafts = {"memories": [{"content": "a"}, {"content": "b"}]}
    first = memory.write(drafts, execution_id="w1")
    again = memory.write(drafts, execution_id="w1")  # redelivered after a crash
    assert to_wire(first)["output"] == to_wire(again)["output"]
    assert [m.content for m in memory.query({}).output.items] == ["a", "b"]
    a_id, b_id = (m.id for m in first.output)
    v1 = memory.update({"memories": [{"id": a_id, "content": "v1"}]}, execution_id="u1")
    memory.update({"memories": [{"id": a_id, "content": "v2"}]}, execution_id="u2")
    replay = memory.update({"memories": [{"id": a_id, "content": "v1"}]}, execution_id="u1")
    assert to_wire(replay)["output"] == to_wire(v1)["output"]
    assert memory.get({"ids": [a_id]}).output[0].content == "v2"  # the later update stands
    assert memory.delete({"ids": [b_id]}, execution_id="d1").output.deleted == [b_id]
    assert memory.delete({"ids": [b_id]}, execution_id="d1").output.deleted == [b_id]
    assert memory.delete({"ids": [b_id]}, execution_id="d2").output.deleted == []


def test_execution_ids_conflict_across_nodes_and_failures_record_nothing(tmp_path: Path) -> None:
    memory = create_memory(_store(tmp_path))
    written = memory.write({"memories": [{"key": "k", "content": "a"}]}, execution_id="same")
    a_id = written.output[0].id
    for result in (
        memory.update({"memories": [{"id": a_id, "content": "b"}]}, execution_id="same"),
        memory.delete({"ids": [a_id]}, execution_id="same"),
    ):
        assert result.error is not None and result.error.code == "CONFLICT"
        assert "MEMORY.WRITE" in result.error.message
    conflict = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="x")
    assert conflict.error is not None and conflict.error.code == "CONFLICT"
    memory.delete({"ids": [a_id]})
    retried = memory.write({"memories": [{"key": "k", "content": 2}]}, execution_id="x")
    assert retried.status == "success"  # the failed attempt left no record behind


def test_execution_ids_are_per_scope(tmp_path: Path) -> None:
    memory = create_memory(_store(tmp_path))
    alice, bob = Scope("acme", "alice"), Scope("acme", "bob")
    mine = memory.write({"memories": [{"content": "a"}]}, execution_id="e", scope=alice)
    theirs = memory.write({"memories": [{"content": "b"}]}, execution_id="e", scope=bob)
    assert mine.output[0].id != theirs.output[0].id
    assert [i.content for i in memory.query({}, scope=bob).output.items] == ["b"]


def test_a_delete_that_died_after_its_pending_record_is_finished_by_the_copy(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    memory = create_memory(store)
    a, b = memory.write({"memories": [{"content": "a"}, {"content": "b"}]}).output
    # the first run found [a], wrote its pending record, and died before deleting
    from ditto_worker.memory.ports import MemoryCallOptions

    options = MemoryCallOptions(execution_id="del")
    store._record(namespace_of(options), "del", "MEMORY.DELETE", {"deleted": [a.id]}, options,
                  pending=True)  # fmt: skip
    copy = memory.delete({"ids": [a.id, b.id]}, execution_id="del")
    assert copy.output.deleted == [a.id]  # the first run's answer, not a new one
    assert [i.id for i in memory.query({}).output.items] == [b.id]
    again = memory.delete({"ids": [a.id, b.id]}, execution_id="del")
    assert again.output.deleted == [a.id]  # done now: a plain replay


def test_a_cancel_before_the_first_mutation_writes_nothing(tmp_path: Path) -> None:
    from ditto_worker.memory.ports import CancelToken

    memory = create_memory(_store(tmp_path))
    token = CancelToken()
    token.cancel()
    result = memory.write({"memories": [{"content": "x"}]}, cancel=token, execution_id="c")
    assert result.status == "cancelled"
    assert memory.query({}).output.items == []
    assert memory.write({"memories": [{"content": "x"}]}, execution_id="c").status == "success"


# --- embed policy, identity, reindex --------------------------------------------------------


def test_the_embed_policy_keeps_checkpoints_out_of_vector_search(tmp_path: Path) -> None:
    memory = create_memory(_store(tmp_path, embed_kinds=["preference"]))
    pref, task = memory.write({"memories": [
        {"content": "answer in German please", "metadata": {"kind": "preference"}},
        {"content": "German translation stage done", "metadata": {"kind": "task"}},
    ]}).output  # fmt: skip
    vector = memory.search({"query": "German", "strategy": "vector", "limit": 10}).output
    assert [r.memory.id for r in vector] == [pref.id]  # the checkpoint is payload-only
    keyword = memory.search({"query": "German", "strategy": "keyword"}).output
    assert {r.memory.id for r in keyword} == {pref.id, task.id}
    memory.update({"memories": [{"id": task.id, "metadata": {"kind": "preference"}}]})
    memory.update({"memories": [{"id": pref.id, "metadata": {"kind": "task"}}]})
    vector = memory.search({"query": "German", "strategy": "vector", "limit": 10}).output
    assert [r.memory.id for r in vector] == [task.id]  # vectors follow the policy


def test_a_collection_fixes_its_embedding_identity(tmp_path: Path) -> None:
    with _store(tmp_path) as first:
        first_id = create_memory(first).write({"memories": [{"content": "tea"}]}).output[0].id
    with _store(tmp_path, embedder=HashingEmbedder(seed=7)) as other:
        memory = create_memory(other)
        calls: list[tuple[str, Any]] = [
            ("MEMORY.GET", {"ids": [first_id]}),
            ("MEMORY.QUERY", {}),
            ("MEMORY.WRITE", {"memories": [{"content": "x"}]}),
            ("MEMORY.SEARCH", {"query": "tea", "strategy": "keyword"}),
        ]
        for node, input in calls:
            result = memory.execute(node, input)
            assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH", node
            assert "seed=0" in result.error.message and str(tmp_path) not in result.error.message
    with _store(tmp_path, embedder=None) as plain:
        memory = create_memory(plain)
        assert [i.id for i in memory.query({}).output.items] == [first_id]  # reads work
        refused = memory.write({"memories": [{"content": "x"}]})
        assert refused.error is not None and refused.error.code == "EMBEDDING_MISMATCH"
    with _store(tmp_path, embed_kinds=["preference"]) as policy:
        result = create_memory(policy).query({})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
    with QdrantMemoryStore(path=str(tmp_path / "q"), collection="plain") as keyword_only:
        create_memory(keyword_only).write({"memories": [{"content": "x"}]})
    with _store(tmp_path, collection="plain") as late:
        result = create_memory(late).query({})
        assert result.error is not None and result.error.code == "EMBEDDING_MISMATCH"
        assert "keeps no vectors" in result.error.message


def test_a_model_change_is_a_new_collection_and_a_reindex(tmp_path: Path) -> None:
    with _store(tmp_path, collection="v1") as old:
        create_memory(old).write({"memories": [
            {"key": "tea", "content": "likes green tea"}, {"content": 42},
        ]})  # fmt: skip
    with _store(tmp_path, collection="v2", embedder=HashingEmbedder(seed=1)) as new:
        assert new.reindex_embeddings(source_collection="v1") == 1  # 42 has no text
        memory = create_memory(new)
        assert [i.key for i in memory.query({}).output.items] == ["tea", None]
        hits = memory.search({"query": "green tea", "strategy": "vector", "limit": 5}).output
        assert [h.memory.key for h in hits] == ["tea"]
        assert new.reindex_embeddings() == 0  # nothing left without a vector


# --- order_by ties, declared limits ---------------------------------------------------------


def test_paging_breaks_ties_of_equal_instants_by_id(tmp_path: Path) -> None:
    # two processes may give records the same microsecond; the cursor carries the tie-break
    store = _store(tmp_path)
    store._clock.take = lambda count: 1_800_000_000_000_000  # type: ignore[method-assign]
    memory = create_memory(store)
    for i in range(20):
        memory.write({"memories": [{"content": i}]})
    whole = [i.id for i in memory.query({"limit": 100}).output.items]
    assert whole == sorted(whole) and len(whole) == 20
    for order in (None, [{"field": "createdAt", "direction": "desc"}], [{"field": "updatedAt"}]):
        for limit in (1, 3, 7):
            seen: list[str] = []
            cursor = None
            while True:
                input: dict[str, Any] = {"limit": limit, "orderBy": order} if order else {
                    "limit": limit}  # fmt: skip
                if cursor:
                    input["cursor"] = cursor
                page = memory.query(input).output
                seen += [i.id for i in page.items]
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert seen == whole, (order, limit)


def test_declared_filter_limits(tmp_path: Path) -> None:
    memory = create_memory(_store(tmp_path))
    memory.write({"memories": [{"key": "b", "content": 1, "metadata": {"s": "b", "n": 2}}]})
    for flt in ({"key": {"$gt": "a"}}, {"s": {"$lte": "c"}}, {"id": {"$gte": ""}}):
        result = memory.query({"filter": flt})
        assert result.error is not None and result.error.code == "UNSUPPORTED_FILTER", flt
        assert "only on createdAt/updatedAt" in result.error.message
    # numbers range as usual; timestamps range natively (microseconds since the epoch)
    assert len(memory.query({"filter": {"n": {"$gt": 1}}}).output.items) == 1
    cases = [
        ("$gte", "2000-01-01T00:00:00+05:00", 1),
        ("$lt", "2000-01-01T00:00:00Z", 0),
        ("$gt", "9999-01-01T00:00:00Z", 0),
        ("$lte", "9999-12-31T00:00:00Z", 1),
    ]
    for op, bound, count in cases:
        page = memory.query({"filter": {"createdAt": {op: bound}}}).output
        assert len(page.items) == count, (op, bound)
    (item,) = memory.query({}).output.items
    stamp = memory.query({"filter": {"updatedAt": {"$gte": "2000-01-01T00:00:00Z"}}}).output
    assert stamp.items == [item]
    order = memory.query({"orderBy": [{"field": "createdAt"}, {"field": "updatedAt"}]})
    assert order.error is not None and order.error.code == "UNSUPPORTED_ORDER_BY"


# --- configuration, one process per folder --------------------------------------------------


def test_create_store_reads_settings_and_env(tmp_path: Path) -> None:
    env = {
        "DITTO_WORKER_MEMORY_QDRANT_PATH": str(tmp_path / "env"),
        "DITTO_WORKER_MEMORY_QDRANT_COLLECTION": "from_env",
        "DITTO_WORKER_MEMORY_QDRANT_EMBED_KINDS": "preference, fact",
    }
    store = create_store({"path": str(tmp_path / "yaml"), "collection": "c"}, env)
    assert store.local and store.collection == "from_env"
    assert store._embed_kinds == ["fact", "preference"]
    create_memory(store).write({"memories": [{"content": "x"}]})
    store.close()
    assert (tmp_path / "env").is_dir() and not (tmp_path / "yaml").exists()
    server = create_store(
        {"url": "http://127.0.0.1:6333"}, {"DITTO_WORKER_MEMORY_QDRANT_API_KEY": "k"}
    )
    assert not server.local and "multi_process" in server.capabilities.extras
    assert server.capabilities.exhaustive_strategies == ()  # no embedder


@pytest.mark.parametrize(
    "settings",
    [{"apiKey": "k"}, {"password": "x"}, {"url": "qdrant:6333"}, {"timeoutS": 0},
     {"localDurability": "never"}, {"collection": "a/b"}, {"embedKinds": [1]},
     {"exactSearch": "maybe"}],
)  # fmt: skip
def test_create_store_rejects_bad_settings(tmp_path: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        create_store({"path": str(tmp_path), **settings}, {})


def test_local_mode_serves_one_process_per_folder(tmp_path: Path) -> None:
    store = _store(tmp_path)
    create_memory(store).write({"memories": [{"content": "x"}]})
    code = (
        "import sys\nfrom ditto_plugin_qdrant import QdrantMemoryStore\n"
        "from ditto_worker import create_memory\n"
        f"r = create_memory(QdrantMemoryStore(path={str(tmp_path / 'q')!r})).query({{}})\n"
        "print(r.error.code, '|', r.error.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("MEMORY_BACKEND_ERROR | the local Qdrant folder is open in "
                                 "another process"), out.stdout + out.stderr  # fmt: skip
    assert str(tmp_path) not in out.stdout
    store.close()


def test_many_keys_are_checked_in_one_pass_in_local_mode(tmp_path: Path) -> None:
    # more than 32 keys: local mode reads the namespace's keys once (same answers)
    memory = create_memory(_store(tmp_path))
    memory.write({"memories": [{"key": f"k{i}", "content": i} for i in range(100)]})
    memory.write({"memories": [{"key": "k0", "content": "other scope"}]}, scope=Scope("a", "b"))
    keys = [f"k{i}" for i in range(0, 100, 2)] + ["absent"]
    got = memory.get({"keys": keys}).output
    assert sorted(i.content for i in got) == list(range(0, 100, 2))
    clash = [{"key": f"new{i}", "content": i} for i in range(40)] + [{"key": "k77", "content": 0}]
    result = memory.write({"memories": clash})
    assert result.error is not None and result.error.code == "CONFLICT"
    assert "memories[40].key" in result.error.message
    assert len(memory.query({"limit": 1000}).output.items) == 100  # nothing written
