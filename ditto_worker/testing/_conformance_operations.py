"""Conformance: operation ids (MEM-RUN-7) and conditional updates (MEM-UPDATE-5).

A store that declares ``capabilities.operation_ids`` applies a WRITE, UPDATE or DELETE
with an operation id once per namespace, whatever the execution id of the replay (a new
attempt after a crash, a revoke or an expired result), keeps the id with the records it
wrote (GET shows it), answers the same id with another input or node ``CONFLICT``, and
records nothing for a failed mutation. A store that declares
``capabilities.conditional_update`` applies ``ifMetadata`` entries only when the stored
metadata holds, atomically: a failed condition writes nothing of the batch, and two
threads racing on one record with read-modify-write never lose an update. Stores that
declare neither are refused by the SDK (``UNSUPPORTED``), nothing written.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ditto_worker.contracts import MemoryItem
from ditto_worker.errors import ErrorCode
from ditto_worker.scope import Scope
from ditto_worker.testing._conformance_harness import Harness

__all__ = [
    "test_conditional_update_applies_only_when_metadata_holds",
    "test_conditional_updates_racing_lose_nothing",
    "test_failed_mutation_keeps_no_operation",
    "test_operation_id_applies_update_and_delete_once",
    "test_operation_id_applies_write_once",
    "test_operation_id_with_another_input_is_conflict",
    "test_undeclared_features_are_unsupported",
]

RACE_ROUNDS = 15
"""Read-modify-write rounds per thread in the race test."""


def _require_operations(h: Harness) -> None:
    if not h.caps.operation_ids:
        pytest.skip("operation_ids not declared")


def _require_conditional(h: Harness) -> None:
    if not h.caps.conditional_update:
        pytest.skip("conditional_update not declared")


def _get(h: Harness, memory_id: str) -> MemoryItem | None:
    found: list[MemoryItem] = h.ok("MEMORY.GET", {"ids": [memory_id]})
    return found[0] if found else None


def test_operation_id_applies_write_once(conformance: Harness) -> None:
    _require_operations(conformance)
    drafts = {"memories": [{"key": "pref", "content": "tea"}, {"content": {"n": 1}}]}
    first = conformance.ok("MEMORY.WRITE", drafts, operation_id="op-write")
    assert [item.operation_id for item in first] == ["op-write", "op-write"]
    # a replay (new execution id: a new attempt) applies nothing and answers the same
    again = conformance.ok("MEMORY.WRITE", drafts, operation_id="op-write")
    assert again == first
    assert [item.id for item in conformance.items()] == [item.id for item in first]
    # GET tells the task its operation happened (the seed's "content and operation ID")
    got = _get(conformance, first[0].id)
    assert got is not None and (got.content, got.operation_id) == ("tea", "op-write")
    # ids are per namespace: another scope's operation of the same id is its own
    if conformance.caps.scope:
        other = conformance.scoped(Scope("acme", "other"))
        theirs = other.ok("MEMORY.WRITE", drafts, operation_id="op-write")
        assert {i.id for i in theirs}.isdisjoint({i.id for i in first})
    plain = conformance.ok("MEMORY.WRITE", {"memories": [{"content": "x"}]})
    assert plain[0].operation_id is None


def test_operation_id_with_another_input_is_conflict(conformance: Harness) -> None:
    _require_operations(conformance)
    conformance.ok("MEMORY.WRITE", {"memories": [{"content": "a"}]}, operation_id="op-1")
    other = {"memories": [{"content": "b"}]}
    assert conformance.code("MEMORY.WRITE", other, operation_id="op-1") == ErrorCode.CONFLICT
    [item] = conformance.items()
    update = {"memories": [{"id": item.id, "content": "c"}]}
    assert conformance.code("MEMORY.UPDATE", update, operation_id="op-1") == ErrorCode.CONFLICT
    delete = {"ids": [item.id]}
    assert conformance.code("MEMORY.DELETE", delete, operation_id="op-1") == ErrorCode.CONFLICT
    assert [(i.content, i.operation_id) for i in conformance.items()] == [("a", "op-1")]


def test_operation_id_applies_update_and_delete_once(conformance: Harness) -> None:
    _require_operations(conformance)
    [item] = conformance.write([{"key": "k", "content": "v1", "metadata": {"version": 1}}])
    update = {"memories": [{"id": item.id, "content": "v2", "metadata": {"version": 2}}]}
    [done] = conformance.ok("MEMORY.UPDATE", update, operation_id="op-update")
    assert (done.content, done.metadata, done.operation_id) == ("v2", {"version": 2}, "op-update")
    got = _get(conformance, item.id)
    assert got is not None and got.operation_id == "op-update"
    # another writer moves on without an operation id: the record no longer names op-update
    later = {"memories": [{"id": item.id, "content": "v3", "metadata": {"version": 3}}]}
    conformance.ok("MEMORY.UPDATE", later)
    got = _get(conformance, item.id)
    assert got is not None and (got.content, got.operation_id) == ("v3", None)
    # the late replay of op-update applies nothing (no second version bump)
    assert conformance.ok("MEMORY.UPDATE", update, operation_id="op-update") == [done]
    got = _get(conformance, item.id)
    assert got is not None and (got.content, got.metadata) == ("v3", {"version": 3})
    # DELETE: the replay answers the ids the operation deleted, not []
    deleted = conformance.ok("MEMORY.DELETE", {"ids": [item.id]}, operation_id="op-del")
    assert deleted.deleted == [item.id]
    conformance.write([{"key": "k", "content": "new"}])  # the key is free again
    replay = conformance.ok("MEMORY.DELETE", {"ids": [item.id]}, operation_id="op-del")
    assert replay.deleted == [item.id]
    assert [i.content for i in conformance.items()] == ["new"]


def test_failed_mutation_keeps_no_operation(conformance: Harness) -> None:
    _require_operations(conformance)
    [held] = conformance.write([{"key": "k", "content": "first"}])
    drafts = {"memories": [{"key": "k", "content": "second"}]}
    assert conformance.code("MEMORY.WRITE", drafts, operation_id="op-f") == ErrorCode.CONFLICT
    missing = {"memories": [{"id": "no-such-id", "content": "x"}]}
    code = conformance.code("MEMORY.UPDATE", missing, operation_id="op-g")
    assert code == ErrorCode.NOT_FOUND
    conformance.ok("MEMORY.DELETE", {"ids": [held.id]})
    # the failed attempts recorded nothing: the same ids now apply
    [written] = conformance.ok("MEMORY.WRITE", drafts, operation_id="op-f")
    assert (written.content, written.operation_id) == ("second", "op-f")
    update = {"memories": [{"id": written.id, "content": "third"}]}
    assert conformance.ok("MEMORY.UPDATE", update, operation_id="op-g")[0].content == "third"


def test_conditional_update_applies_only_when_metadata_holds(conformance: Harness) -> None:
    _require_conditional(conformance)
    a, b = conformance.write([
        {"key": "a", "content": "a0", "metadata": {"version": 1, "kind": "preference"}},
        {"key": "b", "content": "b0", "metadata": {"version": 1, "flag": True, "none": None}},
    ])  # fmt: skip

    def entries(cond_a: Any, cond_b: Any) -> dict[str, Any]:
        return {"memories": [{"id": a.id, "content": "a1", "ifMetadata": cond_a},
                             {"id": b.id, "content": "b1", "ifMetadata": cond_b}]}  # fmt: skip

    failing = [
        ({"version": 1}, {"version": 2}),  # the second entry fails: nothing of the batch
        ({"version": 1, "kind": "other"}, {"version": 1}),
        ({"version": 1}, {"flag": 1}),  # true is not 1
        ({"version": 1}, {"version": "1"}),
        ({"version": 1}, {"missing": None}),  # a missing field never matches
        ({"kind": {"$eq": "preference"}}, {"version": 1}),  # a value, not a filter
    ]
    for cond_a, cond_b in failing:
        code = conformance.code("MEMORY.UPDATE", entries(cond_a, cond_b))
        assert code == ErrorCode.CONFLICT, (cond_a, cond_b)
        assert [i.content for i in conformance.items()] == ["a0", "b0"], (cond_a, cond_b)
    done = conformance.ok("MEMORY.UPDATE", entries({"kind": "preference"},
                                                   {"version": 1.0, "none": None}))  # fmt: skip
    assert [i.content for i in done] == ["a1", "b1"]
    # an entry without a condition applies unconditionally next to one with
    mixed = {"memories": [{"id": a.id, "content": "a2"},
                          {"id": b.id, "content": "b2", "ifMetadata": {"flag": True}}]}  # fmt: skip
    assert [i.content for i in conformance.ok("MEMORY.UPDATE", mixed)] == ["a2", "b2"]


def test_conditional_updates_racing_lose_nothing(conformance: Harness) -> None:
    # two threads read-modify-write one record under ifMetadata {version}: every append
    # lands exactly once and the version counts them (no lost update)
    _require_conditional(conformance)
    [item] = conformance.write([{"content": [], "metadata": {"version": 0}}])
    errors: list[str] = []

    def worker(tag: str) -> None:
        for n in range(RACE_ROUNDS):
            for _ in range(1000):
                current = _get(conformance, item.id)
                assert current is not None and current.metadata is not None
                version = current.metadata["version"]
                entry = {"id": item.id, "content": [*current.content, f"{tag}{n}"],
                         "metadata": {"version": version + 1},
                         "ifMetadata": {"version": version}}  # fmt: skip
                result = conformance.call("MEMORY.UPDATE", {"memories": [entry]})
                if result.status == "success":
                    break
                if result.error is None or result.error.code != ErrorCode.CONFLICT:
                    errors.append(str(result.error))
                    return

    threads = [threading.Thread(target=worker, args=(tag,)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    final = _get(conformance, item.id)
    assert final is not None and final.metadata == {"version": 2 * RACE_ROUNDS}
    assert sorted(final.content) == sorted(f"{t}{n}" for t in "ab" for n in range(RACE_ROUNDS))


def test_undeclared_features_are_unsupported(conformance: Harness) -> None:
    # the SDK refuses what the store cannot guarantee; nothing is written
    if conformance.caps.operation_ids and conformance.caps.conditional_update:
        pytest.skip("both declared")
    [item] = conformance.write([{"content": "x", "metadata": {"v": 1}}])
    if not conformance.caps.operation_ids:
        drafts = {"memories": [{"content": "y"}]}
        code = conformance.code("MEMORY.WRITE", drafts, operation_id="op")
        assert code == ErrorCode.UNSUPPORTED
    if not conformance.caps.conditional_update:
        update = {"memories": [{"id": item.id, "content": "y", "ifMetadata": {"v": 1}}]}
        assert conformance.code("MEMORY.UPDATE", update) == ErrorCode.UNSUPPORTED
    assert [i.content for i in conformance.items()] == ["x"]
