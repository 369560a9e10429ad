"""Conformance: record timestamps (MEM-DATA-5).

Every record a store returns carries ``createdAt`` and ``updatedAt`` (RFC 3339, UTC,
millisecond precision or finer), set by the store and never taken from input; an UPDATE
moves ``updatedAt`` and never ``createdAt``; GET, QUERY, SEARCH, WRITE and UPDATE agree.
A store that keeps no timestamps omits both everywhere (the test is then skipped).
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from typing import Final

import pytest

from ditto_worker.contracts import MemoryItem
from ditto_worker.memory.timestamps import normalize_timestamp, timestamp_now
from ditto_worker.testing._conformance_harness import Harness

__all__ = ["test_records_carry_store_timestamps", "test_timestamps_are_never_input"]

_FORM: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3,9}Z", re.ASCII)
"""RFC 3339 in UTC with at least millisecond precision (MEM-DATA-5)."""
_SLACK: Final = timedelta(seconds=60)
"""How far a store's clock may be from the test's (a database server's clock)."""


def _stamps(item: MemoryItem) -> tuple[str, str]:
    created, updated = item.created_at, item.updated_at
    assert created is not None and updated is not None, f"{item.id}: timestamps missing"
    for text in (created, updated):
        assert _FORM.fullmatch(text), f"not RFC 3339 UTC with milliseconds: {text!r}"
        normalize_timestamp(text)  # a real instant (INVALID_INPUT would fail the test)
    assert normalize_timestamp(updated) >= normalize_timestamp(created), "updatedAt < createdAt"
    return created, updated


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(normalize_timestamp(text).replace("Z", "+00:00"))


def _after(instant: str) -> None:
    """Wait (bounded, 5 s) until the clock has passed ``instant``: an UPDATE made now
    has a later time than the record's last change on any clock of microseconds."""
    deadline = time.monotonic() + 5.0
    while timestamp_now() <= normalize_timestamp(instant) and time.monotonic() < deadline:
        time.sleep(0.001)


def test_records_carry_store_timestamps(conformance: Harness) -> None:
    before = timestamp_now()
    written = conformance.write([
        {"key": "t-a", "content": "alpha timestamps", "metadata": {"n": 1}},
        {"key": "t-b", "content": "beta timestamps", "metadata": {"n": 2}},
    ])  # fmt: skip
    if all(i.created_at is None and i.updated_at is None for i in written):
        got = conformance.ok("MEMORY.GET", {"ids": [i.id for i in written]})
        assert all(i.created_at is None and i.updated_at is None for i in got)
        pytest.skip("the store keeps no timestamps (MEM-DATA-5 lets it omit both)")
    stamps = {i.id: _stamps(i) for i in written}
    after = _instant(timestamp_now())
    for created, _ in stamps.values():  # the store's clock (maybe a server's): slack
        assert _instant(before) - _SLACK <= _instant(created) <= after + _SLACK, created
    ids = [i.id for i in written]
    got = conformance.ok("MEMORY.GET", {"ids": ids})
    assert {i.id: _stamps(i) for i in got} == stamps, "GET disagrees with WRITE"
    listed = conformance.items()
    assert {i.id: _stamps(i) for i in listed} == stamps, "QUERY disagrees with WRITE"
    first, second = written
    _after(stamps[first.id][1])
    changed = conformance.ok(
        "MEMORY.UPDATE", {"memories": [{"id": first.id, "metadata": {"n": 10}}]}
    )
    created, updated = _stamps(changed[0])
    assert created == stamps[first.id][0], "UPDATE moved createdAt"
    assert normalize_timestamp(updated) > normalize_timestamp(stamps[first.id][1]), (
        "UPDATE did not move updatedAt"
    )
    again = {i.id: _stamps(i) for i in conformance.ok("MEMORY.GET", {"ids": ids})}
    assert again == {first.id: (created, updated), second.id: stamps[second.id]}
    _check_search(conformance, again)


def _check_search(conformance: Harness, stamps: dict[str, tuple[str, str]]) -> None:
    """SEARCH hits carry the same timestamps as GET (when keyword search is declared)."""
    strategy = conformance.caps.keyword_strategy
    if strategy is None:
        return
    hits = conformance.ok(
        "MEMORY.SEARCH", {"query": "timestamps", "strategy": strategy, "limit": 10}
    )
    assert hits, "keyword SEARCH found neither record"
    for hit in hits:
        assert _stamps(hit.memory) == stamps[hit.memory.id], "SEARCH disagrees with GET"


def test_timestamps_are_never_input(conformance: Harness) -> None:
    stamp = "2001-01-01T00:00:00.000000Z"
    for field in ("createdAt", "updatedAt"):
        draft = {"content": "x", field: stamp}
        assert conformance.code("MEMORY.WRITE", {"memories": [draft]}) == "INVALID_INPUT"
    (item,) = conformance.write([{"content": "x"}])
    for field in ("createdAt", "updatedAt"):
        entry = {"id": item.id, "metadata": {"a": 1}, field: stamp}
        assert conformance.code("MEMORY.UPDATE", {"memories": [entry]}) == "INVALID_INPUT"
    (kept,) = conformance.ok("MEMORY.GET", {"ids": [item.id]})
    assert kept.metadata is None
    assert stamp not in (kept.created_at, kept.updated_at)
