"""Conformance: inputs as a new user writes them (issue 13).

Timestamps with offsets compare as the instants they name, on every store (item 4); a lone
surrogate in a filter is ``INVALID_INPUT`` with nothing sent to the store (item 3); a SEARCH
option the store does not declare is refused (item 7).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ditto_worker.testing._conformance_harness import Harness

__all__ = [
    "test_lone_surrogates_never_reach_the_store",
    "test_not_a_timestamp_is_invalid_input",
    "test_the_seed_vector_options_metric_cosine",
    "test_timestamps_compare_as_instants",
    "test_undeclared_search_options_are_refused",
]

_TIMESTAMP_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")


def _rfc3339(moment: datetime, offset_minutes: int = 0, digits: int = 6, z: bool = False) -> str:
    """``moment`` written in another offset with ``digits`` fraction digits (0-9)."""
    local = moment.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + f"{local.microsecond:06d}".ljust(digits, "0")[:digits]
    if z:
        return text + "Z"
    sign = "+" if offset_minutes >= 0 else "-"
    return text + f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"


def _require_timestamp_filters(conformance: Harness, field: str) -> None:
    for op in _TIMESTAMP_OPS:
        operand: Any = [] if op in ("$in", "$nin") else "2026-01-01T00:00:00Z"
        if not conformance.supports_filter({field: {op: operand}, "t": 1}):
            pytest.skip(f"{field} {op} not declared")


def _exact_instant(conformance: Harness, field: str, tag: str, low: datetime) -> datetime:
    """The stored ``field`` of the one record tagged ``tag``, found by bisection with
    ``$lte`` bounds (the output has no timestamps); ``low`` is before it."""
    lo, hi = 0, 10 * 60 * 1_000_000  # microseconds after low
    while lo < hi:
        mid = (lo + hi) // 2
        bound = _rfc3339(low + timedelta(microseconds=mid), z=True)
        if conformance.labels({field: {"$lte": bound}, "t": tag}):
            hi = mid
        else:
            lo = mid + 1
    return low + timedelta(microseconds=lo)


def test_timestamps_compare_as_instants(conformance: Harness) -> None:
    # issue 13 item 4: an RFC 3339 operand on createdAt/updatedAt is the instant it names
    _require_timestamp_filters(conformance, "createdAt")
    before = datetime.now(UTC)
    item = conformance.write([{"key": "when", "content": "x", "metadata": {"t": "when"}}])[0]
    after = datetime.now(UTC)
    tag = {"t": "when"}

    def found(flt: dict[str, Any]) -> bool:
        return conformance.labels({**flt, **tag}) == ["when"]

    second, hour = timedelta(seconds=1), timedelta(hours=1)
    assert found({"createdAt": {"$gte": _rfc3339(before - second, 5 * 60)}})  # the issue's
    assert found({"createdAt": {"$lt": _rfc3339(after + hour, -7 * 60)}})  # two cases
    assert not found({"createdAt": {"$lt": _rfc3339(before - second, 5 * 60)}})
    assert not found({"createdAt": {"$gt": _rfc3339(after + hour, -7 * 60)}})
    assert found({"createdAt": {"$gte": _rfc3339(before - second / 2, 5 * 60 + 30, digits=3)}})
    assert found({"createdAt": {"$lte": _rfc3339(after + second / 4, -9 * 60 - 30, digits=9)}})
    for z in (True, False):  # Z and +00:00 name the same instant
        assert found({"createdAt": {"$gt": _rfc3339(before - second, 0, digits=0, z=z)}})
        assert not found({"createdAt": {"$gt": _rfc3339(after + hour, 0, digits=0, z=z)}})

    exact = _exact_instant(conformance, "createdAt", "when", before - 2 * second)
    spellings = [
        _rfc3339(exact, 0, z=True), _rfc3339(exact, 0), _rfc3339(exact, 5 * 60),
        _rfc3339(exact, -7 * 60, digits=9), _rfc3339(exact, 13 * 60 + 45, digits=7),
    ]  # fmt: skip
    one_us = timedelta(microseconds=1)
    for text in spellings:
        assert found({"createdAt": text}), text
        assert found({"createdAt": {"$in": ["2000-01-01T00:00:00Z", text]}}), text
        assert not found({"createdAt": {"$nin": [text]}}), text
        assert not found({"createdAt": {"$ne": text}}), text
        assert found({"createdAt": {"$gte": text, "$lte": text}}), text
    assert not found({"createdAt": {"$gt": _rfc3339(exact, 5 * 60)}})
    assert not found({"createdAt": {"$lt": _rfc3339(exact, -7 * 60)}})
    assert not found({"createdAt": _rfc3339(exact + one_us, 5 * 60)})
    # a bound with digits past the microsecond, just after the instant
    assert not found({"createdAt": {"$gte": _rfc3339(exact, digits=6)[:-6] + "0000001+00:00"}})
    assert found({"createdAt": {"$lt": _rfc3339(exact, digits=6)[:-6] + "0000001+00:00"}})

    if conformance.supports_filter({"updatedAt": {"$gte": "2026-01-01T00:00:00Z"}, "t": 1}):
        edited = datetime.now(UTC)
        conformance.ok("MEMORY.UPDATE", {"memories": [{"id": item.id, "content": "y"}]})
        assert found({"updatedAt": {"$gte": _rfc3339(edited - second, 5 * 60)}})
        assert not found({"updatedAt": {"$lt": _rfc3339(edited - second, -7 * 60)}})


def test_not_a_timestamp_is_invalid_input(conformance: Harness) -> None:
    # issue 13 item 4: a string that is not RFC 3339 is INVALID_INPUT, before any I/O
    _require_timestamp_filters(conformance, "createdAt")
    conformance.write([{"key": "x", "content": "x", "metadata": {"t": "x"}}])
    bad: list[dict[str, Any]] = [
        {"createdAt": {"$gte": "yesterday"}},
        {"createdAt": {"$lt": "2026-05-01"}},  # a date alone
        {"createdAt": {"$lt": "2026-05-01T12:00:00"}},  # no offset
        {"createdAt": "2026-02-30T00:00:00Z"},  # no such day
        {"createdAt": {"$in": ["2026-05-01T12:00:00Z", "soon"]}},
        {"$or": [{"t": "x"}, {"createdAt": {"$nin": [17]}}]},
    ]
    for flt in bad:
        result = conformance.call("MEMORY.QUERY", {"filter": flt, "limit": 5})
        assert result.error is not None and result.error.code == "INVALID_INPUT", flt
        assert "filter.createdAt" in result.error.message, result.error.message
        if conformance.caps.keyword_strategy is not None:
            search = {"query": "x", "strategy": conformance.caps.keyword_strategy, "filter": flt}
            assert conformance.code("MEMORY.SEARCH", search) == "INVALID_INPUT", flt


def test_lone_surrogates_never_reach_the_store(conformance: Harness) -> None:
    # issue 13 item 3: {"tag": "hello \ud83d"} as JSON is INVALID_INPUT, not a driver error
    conformance.write([{"key": "hello", "content": "hello", "metadata": {"tag": "hello"}}])
    inputs = [
        json.loads('{"filter": {"tag": "hello \\ud83d"}, "limit": 5}'),
        json.loads('{"filter": {"ta\\udc00g": "hello"}, "limit": 5}'),
        json.loads('{"filter": {"tag": {"$in": ["hello", "\\ud800"]}}, "limit": 5}'),
        json.loads('{"orderBy": [{"field": "tag\\ud83d"}], "limit": 5}'),
    ]
    for input in inputs:
        assert conformance.code("MEMORY.QUERY", input) == "INVALID_INPUT", input
        if conformance.caps.keyword_strategy is not None and "filter" in input:
            search = {"query": "hello", "filter": input["filter"]}
            assert conformance.code("MEMORY.SEARCH", search) == "INVALID_INPUT", input
    if conformance.caps.keyword_strategy is not None:
        query = json.loads('{"query": "hello \\ud83d"}')
        assert conformance.code("MEMORY.SEARCH", query) == "INVALID_INPUT"
    write = json.loads('{"memories": [{"content": "a\\udfff"}]}')
    assert conformance.code("MEMORY.WRITE", write) == "INVALID_INPUT"
    assert conformance.labels() == ["hello"]


def test_undeclared_search_options_are_refused(conformance: Harness) -> None:
    # issue 13 item 7: an option the store does not read is refused, never ignored
    if not conformance.caps.search_strategies:
        pytest.skip("no native search declared")
    conformance.write([{"key": "k", "content": "tea with milk"}])
    declared = conformance.caps.search_options
    for name in ("noSuchOption", "rerank", "fuzzy"):
        if name in declared:
            continue
        input = {"query": "tea", "options": {name: True}}
        result = conformance.call("MEMORY.SEARCH", input)
        assert result.error is not None and result.error.code == "INVALID_INPUT", name
        assert f"options.{name}" in result.error.message
    assert conformance.ok("MEMORY.SEARCH", {"query": "tea", "options": {}}) is not None


def test_the_seed_vector_options_metric_cosine(conformance: Harness) -> None:
    # the seed's SEARCH example: {query: {vector: [...]}, strategy: "vector",
    # options: {metric: "COSINE"}}; a store that declares "metric" ranks by cosine only
    if "metric" not in conformance.caps.search_options:
        pytest.skip("no options.metric declared")
    conformance.write([{"key": "k", "content": "tea with milk"}])
    found = conformance.ok("MEMORY.SEARCH", {"query": "tea", "strategy": "vector",
                                              "options": {"metric": "COSINE"}})  # fmt: skip
    assert [hit.memory.key for hit in found] == ["k"]
    for input in (
        {"query": "tea", "strategy": "vector", "options": {"metric": "L2"}},
        {"query": "tea", "strategy": "keyword", "options": {"metric": "COSINE"}},
    ):
        result = conformance.call("MEMORY.SEARCH", input)
        assert result.error is not None and result.error.code == "INVALID_INPUT", input
        assert "options.metric" in result.error.message
