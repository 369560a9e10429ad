"""Operation ids on the Milvus store (MEM-RUN-7), as far as Milvus allows, on Milvus Lite 3
(Python reimplementation): a run killed part-way is completed by its replay without a
second copy of anything; the race that remains (docs/stores-milvus.md) is what the
module docstring of :mod:`ditto_plugin_milvus.operations` says; conditional UPDATE is
refused explicitly (MEM-UPDATE-5: Milvus has no compare-and-set). The shared behaviour is
the conformance suite's (``test_conformance.py``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pymilvus import MilvusClient

from ditto_plugin_milvus import MilvusMemoryStore
from ditto_plugin_milvus import operations as ops
from ditto_worker import create_memory
from ditto_worker.contracts import MemoryDeleteInput, MemoryUpdateInput, MemoryWriteInput
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import MemoryCallOptions
from ditto_worker.testing import HashingEmbedder


class Crash(BaseException):  # not mapped by the store: nothing after it runs
    """Stands for the worker dying part-way (nothing after it runs)."""


def _store(tmp_path: Path, **kwargs: Any) -> MilvusMemoryStore:
    kwargs.setdefault("embedder", HashingEmbedder())
    kwargs.setdefault("timeout_s", 120)  # a gRPC call's wait: generous, the machine may be busy
    return MilvusMemoryStore(uri=str(tmp_path / "milvus.db"), **kwargs)


def _upserts(store: MilvusMemoryStore, monkeypatch: pytest.MonkeyPatch, crash_after: int = 0,
             into: str = "") -> list[tuple[str, list[str]]]:  # fmt: skip
    """Record every upsert ``(collection, ids)``; with ``crash_after``, raise
    :class:`Crash` instead of the upsert after that many upserts into ``into``."""
    seen: list[tuple[str, list[str]]] = []
    real = MilvusClient.upsert

    def spy(client: MilvusClient, name: str, rows: Any, **kwargs: Any) -> Any:
        if crash_after and name == into and sum(n == into for n, _ in seen) >= crash_after:
            raise Crash
        seen.append((name, [r["id"] for r in rows]))
        return real(client, name, rows, **kwargs)

    monkeypatch.setattr(MilvusClient, "upsert", spy)
    return seen


def _ledger_state(store: MilvusMemoryStore, op_id: str) -> str | None:
    name = ops.ledger_name(store.collection)
    expression = f'op == "{op_id}" and part == 0'
    rows = store._conn.call(
        None, MilvusClient.query, name, filter=expression, output_fields=["state"]
    )
    return str(rows[0]["state"]) if rows else None


def test_a_write_killed_part_way_is_completed_by_its_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, max_message_bytes=2048)
    memory = create_memory(store)
    drafts = {"memories": [{"key": f"k{i}", "content": f"record {i} " * 30} for i in range(12)]}
    with monkeypatch.context() as patch:
        _upserts(store, patch, crash_after=2, into=store.collection)
        with pytest.raises(Crash):  # the worker dies after two of the batch's requests
            store.write(
                MemoryWriteInput.model_validate(drafts), MemoryCallOptions(operation_id="op-w")
            )
    partial = memory.query({"limit": 100}).output.items
    assert 0 < len(partial) < 12 and {i.operation_id for i in partial} == {"op-w"}
    assert _ledger_state(store, "op-w") == "pending"
    with monkeypatch.context() as patch:
        sent = _upserts(store, patch)
        done = memory.write(drafts, operation_id="op-w")  # the replay: a new attempt
    assert done.status == "success", done.error
    rewritten = [i for name, ids in sent if name == store.collection for i in ids]
    assert set(rewritten).isdisjoint({i.id for i in partial})  # only what was missing
    stored = memory.query({"limit": 100}).output.items
    assert sorted(i.id for i in stored) == sorted(i.id for i in done.output)  # 12, no copies
    assert sorted(i.key or "" for i in stored) == sorted(f"k{i}" for i in range(12))
    assert _ledger_state(store, "op-w") == "done"
    assert memory.write(drafts, operation_id="op-w").output == done.output
    store.close()


def test_an_update_killed_part_way_applies_each_entry_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, max_message_bytes=2048)
    memory = create_memory(store)
    written = memory.write({"memories": [{"content": f"v1 {i} " * 30} for i in range(10)]}).output
    change = {"memories": [{"id": w.id, "content": f"v2 {n} " * 30} for n, w in enumerate(written)]}
    with monkeypatch.context() as patch:
        _upserts(store, patch, crash_after=1, into=store.collection)
        with pytest.raises(Crash):
            store.update(MemoryUpdateInput.model_validate(change),
                         MemoryCallOptions(operation_id="op-u"))  # fmt: skip
    got = memory.get({"ids": [w.id for w in written]}).output
    applied = {i.id for i in got if i.operation_id == "op-u"}
    assert 0 < len(applied) < 10
    with monkeypatch.context() as patch:
        sent = _upserts(store, patch)
        done = memory.update(change, operation_id="op-u")
    assert done.status == "success", done.error
    rewritten = {i for name, ids in sent if name == store.collection for i in ids}
    assert rewritten == {w.id for w in written} - applied  # no entry written twice
    assert [i.content for i in done.output] == [e["content"] for e in change["memories"]]
    assert all(
        i.operation_id == "op-u" for i in memory.get({"ids": [w.id for w in written]}).output
    )
    store.close()


def test_a_delete_killed_after_its_pending_entry_answers_the_same_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    memory = create_memory(store)
    a, b = memory.write({"memories": [{"content": "a"}, {"content": "b"}]}).output
    real = store._delete_ids

    def crash(*args: Any) -> None:
        raise Crash

    monkeypatch.setattr(store, "_delete_ids", crash)
    with pytest.raises(Crash):
        store.delete(MemoryDeleteInput(ids=[a.id, "missing"]),
                     MemoryCallOptions(operation_id="op-d"))  # fmt: skip
    monkeypatch.setattr(store, "_delete_ids", real)
    assert _ledger_state(store, "op-d") == "pending"
    replay = memory.delete({"ids": [a.id, "missing"]}, operation_id="op-d")
    assert replay.output.deleted == [a.id]
    assert [i.id for i in memory.query({}).output.items] == [b.id]
    again = memory.delete({"ids": [a.id, "missing"]}, operation_id="op-d")
    assert again.output.deleted == [a.id]  # done: the ids the operation deleted, not []
    store.close()


def test_an_output_longer_than_a_ledger_row_is_kept_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ops, "PART_CHARS", 100)
    store = _store(tmp_path)
    memory = create_memory(store)
    drafts = {"memories": [{"content": {"n": i, "text": "中文 " * 10}} for i in range(5)]}
    first = memory.write(drafts, operation_id="op-long").output
    name = ops.ledger_name(store.collection)
    parts = store._conn.call(None, MilvusClient.query, name, filter='op == "op-long"',
                             output_fields=["part"])  # fmt: skip
    assert len(parts) > 5
    again = memory.write(drafts, operation_id="op-long")
    assert again.output == first
    assert len(memory.query({"limit": 100}).output.items) == 5
    store.close()


def test_a_key_race_lost_after_the_insert_forgets_the_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second key check finds another holder: the batch is deleted again and nothing
    # stays recorded, so the id may be used again (MEM-RUN-7: a failed mutation records
    # nothing)
    store = _store(tmp_path)
    memory = create_memory(store)
    real = store._check_keys
    calls = {"n": 0}

    def racing(ns: str, seen: Any, own: Any, options: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            create_memory(store).write({"memories": [{"key": "k", "content": "first"}]})
            return []
        return real(ns, seen, own, options)

    monkeypatch.setattr(store, "_check_keys", racing)
    lost = memory.write({"memories": [{"key": "k", "content": "second"}]}, operation_id="op-k")
    assert lost.error is not None and lost.error.code == "CONFLICT"
    monkeypatch.setattr(store, "_check_keys", real)
    assert _ledger_state(store, "op-k") is None
    reused = memory.write({"memories": [{"key": "k2", "content": "other"}]}, operation_id="op-k")
    assert reused.status == "success" and reused.output[0].operation_id == "op-k"
    store.close()


def test_two_attempts_racing_past_the_ledger_write_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the race Milvus leaves (no transaction): both attempts read the ledger before either
    # wrote its entry, so both apply — by the operation's ids, so the records are not
    # doubled and both answer the same output
    store = _store(tmp_path)
    memory = create_memory(store)
    real = store._operation_entry
    both_read = threading.Barrier(2, timeout=30)

    def reading(*args: Any) -> Any:
        found = real(*args)
        both_read.wait()
        return found

    monkeypatch.setattr(store, "_operation_entry", reading)
    drafts = {"memories": [{"key": "progress", "content": {"stage": 1}}, {"content": "note"}]}
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(memory.write(drafts, operation_id="op-r")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [r.status for r in results] == ["success", "success"], [r.error for r in results]
    # the same records; each attempt stamped them with its own clock (MEM-DATA-5), and
    # the store keeps the last writer's stamps
    untimed = [[i.model_copy(update={"created_at": None, "updated_at": None}) for i in r.output]
               for r in results]  # fmt: skip
    assert untimed[0] == untimed[1]
    stored = memory.query({}).output.items
    assert sorted(i.id for i in stored) == sorted(i.id for i in results[0].output)
    stamps = {i.id: (i.created_at, i.updated_at) for i in stored}
    assert any(stamps == {i.id: (i.created_at, i.updated_at) for i in r.output} for r in results)


def test_conditional_update_fails_explicitly_and_writes_nothing(tmp_path: Path) -> None:
    # MEM-UPDATE-5: Milvus cannot check ifMetadata atomically with the write; the store
    # does not declare it, the SDK refuses it, and the store itself refuses it too
    store = _store(tmp_path)
    assert not store.capabilities.conditional_update and store.capabilities.operation_ids
    memory = create_memory(store)
    [item] = memory.write({"memories": [{"content": "x", "metadata": {"v": 1}}]}).output
    entry = {"id": item.id, "content": "y", "ifMetadata": {"v": 1}}
    refused = memory.update({"memories": [entry]})
    assert refused.error is not None and refused.error.code == ErrorCode.UNSUPPORTED
    with pytest.raises(MemoryError) as info:
        store.update(MemoryUpdateInput.model_validate({"memories": [entry]}))
    assert info.value.code == ErrorCode.UNSUPPORTED and "ifMetadata" in str(info.value)
    assert [i.content for i in memory.query({}).output.items] == ["x"]
    store.close()


def test_prune_touches_only_this_stores_ledgers(tmp_path: Path) -> None:
    # "mem_x"'s ledgers also start with "mem_": the "mem" store must leave them alone
    mine, other = _store(tmp_path, collection="mem"), _store(tmp_path, collection="mem_x")
    try:
        for store in (mine, other):
            written = create_memory(store).write(
                {"memories": [{"content": "old"}]}, operation_id="op-old"
            )
            assert written.status == "success", written.error
        clock = mine.retention.clock
        later = clock() + 3 * mine.retention.operation_s
        mine.retention.clock = lambda: later
        report = mine.prune_ledgers()
        assert report.operations == 1, report
        assert _ledger_state(mine, "op-old") is None
        assert _ledger_state(other, "op-old") is not None  # another store's retention
    finally:
        mine.close()
        other.close()
