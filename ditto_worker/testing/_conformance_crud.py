"""Conformance: records, GET, WRITE, UPDATE, DELETE, batches and cancellation.

Rules: MEM-GET-2/3/5, MEM-WRITE-2/3, MEM-UPDATE-1/2/4, MEM-DELETE-2/3, MEM-DATA-4,
MEM-RUN-2, MEM-PY-11/12.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDraft,
    MemoryGetInput,
    MemoryWriteInput,
)
from ditto_worker.errors import MemoryError
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.memory.ports import CancelToken, MemoryCallOptions, MemoryStore
from ditto_worker.testing._conformance_harness import Harness, label

__all__ = [
    "test_batch_limit_is_explicit",
    "test_cancelled_call_commits_nothing",
    "test_capabilities_are_declared",
    "test_content_kinds_round_trip",
    "test_delete_reports_only_deleted_and_frees_keys",
    "test_get_union_each_once",
    "test_key_conflict_policy",
    "test_odd_characters_in_keys_and_values",
    "test_update_missing_id_is_not_found",
    "test_update_presence_semantics",
]

CONTENTS: list[Any] = [
    "plain text",
    "",
    42,
    -2.5,
    10**15,
    True,
    None,
    {"title": "Hiking", "nested": {"list": [1, None, "x"], "empty": {}}},
    [1, "two", {"three": 3}, [], None],
    [],
    {},
    "ünïcödé 中文 🙂 \"quotes\" 'single' back\\slash \t tab",
]


def test_capabilities_are_declared(conformance: Harness) -> None:
    # The store is a MemoryStore and its declaration is consistent (MEM-PY-11)
    caps = conformance.caps
    assert isinstance(caps, StoreCapabilities)
    assert isinstance(conformance.store, MemoryStore)
    if caps.has_search:
        assert conformance.memory.has_search, "search strategies declared but no search method"


def test_content_kinds_round_trip(conformance: Harness) -> None:
    # MEM-WRITE-2, MEM-DATA-4: content is any JSON value, null kept, never coerced
    drafts: list[dict[str, Any]] = [{"content": c} for c in CONTENTS]
    drafts[0]["metadata"] = {}
    drafts[1]["metadata"] = {"m": {"deep": [1, {"x": None}]}}
    drafts[2]["key"] = "k2"
    items = conformance.write(drafts)
    assert [i.content for i in items] == CONTENTS
    assert [i.metadata for i in items][:3] == [{}, {"m": {"deep": [1, {"x": None}]}}, None]
    assert [i.key for i in items][:3] == [None, None, "k2"]
    assert len({i.id for i in items}) == len(CONTENTS)
    got = conformance.ok("MEMORY.GET", {"ids": [i.id for i in items]})
    assert got == items
    assert conformance.items() == items  # default order: creation order (MEM-PY-6)


def test_get_union_each_once(conformance: Harness) -> None:
    # MEM-GET-1/2/3/5: union, de-duplicated, missing omitted, ids order then keys order
    a, b, c = conformance.write([{"key": k, "content": k} for k in "abc"])
    raw = conformance.store.get(
        MemoryGetInput(ids=[b.id, a.id, b.id, "nope"], keys=["a", "zz", "c", "c"])
    )
    raw_ids = [item["id"] if isinstance(item, dict) else item.id for item in raw]
    assert sorted(raw_ids) == sorted([a.id, b.id, c.id]), "each record once, missing omitted"
    got = conformance.ok("MEMORY.GET", {"ids": [b.id, "nope"], "keys": ["c", "a", "b"]})
    assert [label(i) for i in got] == ["b", "c", "a"]
    for key in "abc":  # one key, one record (MEM-GET-5)
        assert [label(i) for i in conformance.ok("MEMORY.GET", {"keys": [key]})] == [key]


def test_key_conflict_policy(conformance: Harness) -> None:
    # MEM-WRITE-3, MEM-PY-11: the declared policy; a conflict never silently drops an input
    (first,) = conformance.write([{"key": "a", "content": "old"}])
    if conformance.caps.key_conflict == "replace":
        (second,) = conformance.write([{"key": "a", "content": "new"}])
        got = conformance.ok("MEMORY.GET", {"keys": ["a"]})
        assert [i.content for i in got] == ["new"] and got[0].id == second.id
        return
    for batch in (["b", "a"], ["c", "c"]):
        drafts = [{"key": k, "content": k} for k in batch]
        assert conformance.code("MEMORY.WRITE", {"memories": drafts}) == "CONFLICT"
    if conformance.caps.batch_atomic:
        assert conformance.labels() == ["a"]
    assert conformance.ok("MEMORY.GET", {"keys": ["a"]}) == [first]


def test_update_presence_semantics(conformance: Harness) -> None:
    # MEM-UPDATE-1/4: omitted keeps, metadata replaces, {} clears, content null is a value
    a, b, c = conformance.write(
        [
            {"key": "a", "content": "A", "metadata": {"x": 1, "y": 2}},
            {"key": "b", "content": "B", "metadata": {"x": 1}},
            {"key": "c", "content": "C"},
        ]
    )
    out = conformance.ok(
        "MEMORY.UPDATE",
        {
            "memories": [
                {"id": c.id, "content": {"new": True}, "metadata": {}},
                {"id": a.id, "metadata": {"z": 3}},
                {"id": b.id, "content": None},
            ]
        },
    )
    assert [(i.id, i.key, i.content, i.metadata) for i in out] == [
        (c.id, "c", {"new": True}, {}),
        (a.id, "a", "A", {"z": 3}),
        (b.id, "b", None, {"x": 1}),
    ]
    got = conformance.ok("MEMORY.GET", {"keys": ["a", "b", "c"]})
    assert {i.id: i for i in got} == {i.id: i for i in out}
    assert conformance.labels({"x": 1}) == ["b"]
    assert conformance.labels({"z": 3}) == ["a"]
    conformance.write([{"key": "d", "content": "D"}])
    conformance.ok("MEMORY.UPDATE", {"memories": [{"id": a.id, "content": "A2"}]})
    if conformance.supports_filter({"updatedAt": {"$gt": ""}}):
        newest = conformance.labels({"updatedAt": {"$gt": "2000-01-01T00:00:00.000000Z"}})
        assert sorted(newest) == ["a", "b", "c", "d"]
    if "updatedAt" in conformance.caps.order_by_fields:
        order = [{"field": "updatedAt", "direction": "desc"}]
        assert conformance.labels(None, order)[0] == "a"


def test_update_missing_id_is_not_found(conformance: Harness) -> None:
    # MEM-UPDATE-2, MEM-PY-11: NOT_FOUND, never an upsert; atomic stores apply nothing
    (a,) = conformance.write([{"key": "a", "content": "old", "metadata": {"v": 1}}])
    entries = [{"id": a.id, "content": "new"}, {"id": "missing-id", "content": "x"}]
    assert conformance.code("MEMORY.UPDATE", {"memories": entries}) == "NOT_FOUND"
    assert conformance.ok("MEMORY.GET", {"ids": ["missing-id"]}) == []
    if conformance.caps.batch_atomic:
        assert conformance.ok("MEMORY.GET", {"ids": [a.id]})[0].content == "old"


def test_delete_reports_only_deleted_and_frees_keys(conformance: Harness) -> None:
    # MEM-DELETE-2/3, MEM-PY-12
    a, b, c = conformance.write([{"key": k, "content": f"text {k}"} for k in "abc"])
    raw = conformance.store.delete(MemoryDeleteInput(ids=["nope", b.id, a.id, b.id]))
    deleted = raw["deleted"] if isinstance(raw, dict) else raw.deleted
    assert sorted(deleted) == sorted([a.id, b.id]) and len(deleted) == 2
    assert conformance.ok("MEMORY.DELETE", {"ids": [a.id, b.id]}).deleted == []
    assert conformance.ok("MEMORY.GET", {"ids": [a.id], "keys": ["a", "b"]}) == []
    assert conformance.labels() == ["c"]
    assert conformance.labels({"key": {"$in": ["a", "b"]}}) == []
    if conformance.caps.keyword_strategy is not None:
        assert conformance.search_keys("text") == ["c"]
    (again,) = conformance.write([{"key": "a", "content": "again"}])
    assert again.id not in (a.id, b.id)
    assert conformance.ok("MEMORY.GET", {"keys": ["a"]}) == [again]


def test_batch_limit_is_explicit(conformance: Harness) -> None:
    # MEM-WRITE-3, MEM-PY-11: a batch over the declared maximum fails and writes nothing
    limit = conformance.caps.max_batch_size
    if limit is None:
        pytest.skip("no max_batch_size declared")
    drafts = [{"content": i} for i in range(limit + 1)]
    conformance.code("MEMORY.WRITE", {"memories": drafts})
    assert conformance.items(limit=1) == []
    assert len(conformance.write(drafts[:limit])) == limit


def test_cancelled_call_commits_nothing(conformance: Harness) -> None:
    # MEM-RUN-2: the plugin honours the call's cancel token
    if not conformance.caps.cancel:
        pytest.skip("cancel not declared")
    token = CancelToken()
    token.cancel()
    options = MemoryCallOptions(cancel=token)
    with pytest.raises(MemoryError) as info:
        conformance.store.write(MemoryWriteInput(memories=[MemoryDraft(content="x")]), options)
    assert info.value.code == "MEMORY_CANCELLED"
    assert conformance.items() == []


ODD = ["a_b", "a%b", "a-b", "a b", "it's", 'say "hi"', "back\\slash", "ключ", "键值", "a_%", "%"]


def test_odd_characters_in_keys_and_values(conformance: Harness) -> None:
    # `_ % - quotes non-ASCII` are literal everywhere: keys, values, prefixes (no LIKE)
    conformance.write_keys((f"ns:{odd}:1", {"v": odd, "p": f"ns:{odd}"}) for odd in ODD)
    for odd in ODD:
        key = f"ns:{odd}:1"
        assert [label(i) for i in conformance.ok("MEMORY.GET", {"keys": [key]})] == [key]
        assert conformance.labels({"v": odd}) == [key]
        if conformance.supports_filter({"key": {"$gte": "a", "$lt": "b"}}):
            prefix = f"ns:{odd}:"
            assert conformance.labels({"key": {"$gte": prefix, "$lt": prefix + "\U0010ffff"}}) == [
                key
            ], f"prefix {prefix!r} matched other keys"
    assert conformance.labels({"key": "ns:a_b:1"}) == ["ns:a_b:1"]
    assert conformance.labels({"v": "a"}) == []
