"""Conformance at volume: a 10,000-record WRITE, deleting more than 1,000 matches.

Rules: MEM-WRITE-2 (one item per input, in order), MEM-QUERY-2/4, MEM-DELETE-2/3 ("delete
all" never stops at a page size).
"""

from __future__ import annotations

from typing import Any

from ditto_worker.testing._conformance_harness import Harness

__all__ = ["test_delete_more_than_a_thousand_matches", "test_ten_thousand_record_write"]

BIG = 10_000


def _batches(h: Harness, drafts: list[dict[str, Any]]) -> list[Any]:
    size = h.caps.max_batch_size or len(drafts)
    items: list[Any] = []
    for start in range(0, len(drafts), size):
        items += h.write(drafts[start : start + size])
    return items


def test_ten_thousand_record_write(conformance: Harness) -> None:
    # MEM-WRITE-2: one full item per input, in order, all committed; one WRITE unless the
    # store declares a smaller max_batch_size
    drafts = [
        {"key": f"k{i:05d}", "content": f"note {i}", "metadata": {"i": i, "g": i % 3}}
        for i in range(BIG)
    ]
    items = _batches(conformance, drafts)
    assert [i.key for i in items] == [d["key"] for d in drafts]
    assert len({i.id for i in items}) == BIG
    page = conformance.page(limit=BIG)
    assert page.next_cursor is None and [i.id for i in page.items] == [i.id for i in items]
    if conformance.supports_filter({"g": 1}):
        assert len(conformance.items({"g": 1}, limit=1000)) == (BIG + 1) // 3
    if conformance.supports_filter({"i": {"$gte": 9990}}):
        got = conformance.labels({"i": {"$gte": 9990}})
        assert got == [f"k{i:05d}" for i in range(9990, BIG)]
    tail = conformance.ok("MEMORY.GET", {"keys": ["k09999", "k00000"]})
    assert sorted(i.key for i in tail) == ["k00000", "k09999"]


def test_delete_more_than_a_thousand_matches(conformance: Harness) -> None:
    # MEM-DELETE-2/3: page every match, delete them all in one call, none comes back
    matching = [{"content": f"doomed {i}", "metadata": {"doomed": True}} for i in range(2_500)]
    others = [{"content": f"kept {i}", "metadata": {"doomed": False}} for i in range(300)]
    mixed = [d for pair in zip(matching[:300], others, strict=True) for d in pair]
    _batches(conformance, mixed + matching[300:])
    ids = [i.id for i in conformance.items({"doomed": True}, limit=1000)]
    assert len(ids) == 2_500 == len(set(ids))
    size = conformance.caps.max_batch_size or len(ids)
    deleted: list[str] = []
    for start in range(0, len(ids), size):
        deleted += conformance.ok("MEMORY.DELETE", {"ids": ids[start : start + size]}).deleted
    assert sorted(deleted) == sorted(ids)
    assert conformance.items({"doomed": True}) == []
    assert len(conformance.items()) == 300
    assert conformance.ok("MEMORY.GET", {"ids": ids[:50]}) == []
    if conformance.caps.keyword_strategy is not None:
        assert conformance.search_keys("doomed") == []
        assert len(conformance.search_keys("kept", limit=500)) == 300
