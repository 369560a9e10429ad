"""Conformance: SEARCH strategies and keyword search (English, Chinese without spaces).

Rules: MEM-SEARCH-1/2/3/4. Keyword tests run when ``keyword_strategy`` is declared;
Chinese when ``keyword_cjk`` is too.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker.testing._conformance_harness import Harness

__all__ = [
    "test_keyword_chinese_without_spaces",
    "test_keyword_english",
    "test_keyword_filter_applies_before_limit",
    "test_keyword_follows_updates_and_deletes",
    "test_keyword_query_is_never_syntax",
    "test_exhaustive_search_returns_min_of_limit_and_matches",
    "test_search_results_carry_full_records",
    "test_search_strategies_are_explicit",
]

TEXTS: dict[str, Any] = {
    "job": "Jon's job: he works as a barista at a cafe downtown.",
    "pet": "Melanie adopted a dog named Luna last spring.",
    "zh": "我最近开始学习中文，我的工作是老师。",
    "zh2": "她喜欢在周末去公园跑步",
    "obj": {"title": "Hiking trip", "notes": ["Jon hiked Mount Tam", 42]},
    "num": 12345,
    "nul": None,
    "list": ["groceries", {"item": "oat milk"}],
}


def _texts(h: Harness) -> None:
    h.write([{"key": k, "content": c, "metadata": {"k": k}} for k, c in TEXTS.items()])


def test_search_strategies_are_explicit(conformance: Harness) -> None:
    # MEM-SEARCH-2/4: undeclared strategies are rejected; no search -> SEARCH_UNAVAILABLE,
    # CRUD still works
    caps = conformance.caps
    conformance.write([{"key": "a", "content": "alpha"}])
    if not conformance.memory.has_search:
        assert not caps.has_search, "search strategies declared but no search provider"
        assert conformance.code("MEMORY.SEARCH", {"query": "alpha"}) == "SEARCH_UNAVAILABLE"
        assert [i.key for i in conformance.items()] == ["a"]
        return
    for strategy in ("no-such-strategy", "vector", "hybrid", "bm25", "keyword"):
        if strategy in caps.search_strategies:
            continue
        unknown = {"query": "alpha", "strategy": strategy}
        assert conformance.code("MEMORY.SEARCH", unknown) == "UNSUPPORTED_STRATEGY", strategy
    if caps.default_strategy is None and caps.has_search:
        assert conformance.call("MEMORY.SEARCH", {"query": "alpha"}).status == "failed"
    if caps.keyword_strategy is not None:
        for query in ([0.1, 0.2], {"text": "alpha"}, None, 5):
            bad = {"query": query, "strategy": caps.keyword_strategy}
            assert conformance.code("MEMORY.SEARCH", bad) == "INVALID_INPUT", query
        if caps.default_strategy == caps.keyword_strategy:
            assert [r.memory.key for r in conformance.ok("MEMORY.SEARCH", {"query": "alpha"})] == [
                "a"
            ]


def test_search_results_carry_full_records(conformance: Harness) -> None:
    # MEM-SEARCH-3: full MemoryItem, finite score, at most limit, provider order
    conformance.require_keyword()
    _texts(conformance)
    results = conformance.ok(
        "MEMORY.SEARCH", {"query": "Jon", "strategy": conformance.caps.keyword_strategy}
    )
    assert {r.memory.key for r in results} == {"job", "obj"}
    stored = {i.id: i for i in conformance.items()}
    for result in results:
        assert result.memory == stored[result.memory.id]
    limited = conformance.search_keys("Jon", limit=1)
    assert len(limited) == 1 and limited[0] == results[0].memory.key


def test_keyword_english(conformance: Harness) -> None:
    # keyword search over English text, object/list content by its string values
    conformance.require_keyword()
    _texts(conformance)
    assert conformance.search_keys("What is Jon's job?")[0] == "job"
    assert conformance.search_keys("barista")[0] == "job"
    assert conformance.search_keys("dog Luna") == ["pet"]
    assert conformance.search_keys("hiking") == ["obj"]
    assert conformance.search_keys("oat milk") == ["list"]
    assert "obj" not in conformance.search_keys("title 42")  # keys and numbers: not text
    assert conformance.search_keys("xylophone") == []
    assert conformance.search_keys("") == []
    assert conformance.search_keys("?!... ---") == []
    conformance.write([
        {"key": "one", "content": "red car"},
        {"key": "two", "content": "red blue car"},
        {"key": "three", "content": "red blue green car"},
    ])  # fmt: skip
    assert conformance.search_keys("red blue green")[:3] == ["three", "two", "one"]


def test_keyword_chinese_without_spaces(conformance: Harness) -> None:
    # Chinese written without spaces is found by a 2-character query
    conformance.require_keyword(cjk=True)
    _texts(conformance)
    assert conformance.search_keys("工作") == ["zh"]
    assert conformance.search_keys("他的工作是什么？") == ["zh"]
    assert conformance.search_keys("公园") == ["zh2"]
    assert conformance.search_keys("跑步和学习")[:2] in (["zh2", "zh"], ["zh", "zh2"])


def test_keyword_query_is_never_syntax(conformance: Harness) -> None:
    # MEM-SEARCH-1: a raw question with search-engine syntax is plain text
    conformance.require_keyword()
    _texts(conformance)
    for query in [
        "What's Jon's \"job\"?",
        'barista* AND -NEAR("x" y) OR',
        "job:  ^barista (cafe",
        "\"unbalanced 'quotes barista",
        "barista & | ! <-> :* \\",
        "barista'; DROP TABLE memories; --",
    ]:
        assert conformance.search_keys(query)[:1] == ["job"], query
    assert len(conformance.items()) == len(TEXTS)


def test_keyword_filter_applies_before_limit(conformance: Harness) -> None:
    # MEM-SEARCH-3: filtered-out higher-scoring records never leave fewer than
    # min(limit, matches) results
    conformance.require_keyword()
    strong = [{"content": "apple banana cherry apple banana", "metadata": {"g": "x"}}] * 30
    weak = [{"key": f"w{i}", "content": f"apple pie number {i}", "metadata": {"g": "y"}}
            for i in range(3)]  # fmt: skip
    conformance.write(strong + weak)
    assert conformance.search_keys("apple banana cherry", filter={"g": "y"}, limit=5) == [
        "w0",
        "w1",
        "w2",
    ]
    assert len(conformance.search_keys("apple banana cherry", filter={"g": "y"}, limit=2)) == 2
    assert len(conformance.search_keys("apple", limit=7)) == 7
    assert len(conformance.search_keys("apple", limit=100)) == 33


def test_keyword_follows_updates_and_deletes(conformance: Harness) -> None:
    # the keyword index changes with the record (MEM-DELETE-3)
    conformance.require_keyword()
    _texts(conformance)
    (job,) = conformance.ok("MEMORY.GET", {"keys": ["job"]})
    conformance.ok("MEMORY.UPDATE", {"memories": [{"id": job.id, "content": "plumber"}]})
    assert conformance.search_keys("barista") == []
    assert conformance.search_keys("plumber") == ["job"]
    conformance.ok("MEMORY.UPDATE", {"memories": [{"id": job.id, "metadata": {"k": "z"}}]})
    assert conformance.search_keys("plumber", filter={"k": "z"}) == ["job"]
    assert conformance.search_keys("plumber", filter={"k": "job"}) == []
    conformance.ok("MEMORY.DELETE", {"ids": [job.id]})
    assert conformance.search_keys("plumber") == []


def test_exhaustive_search_returns_min_of_limit_and_matches(conformance: Harness) -> None:
    # MEM-SEARCH-3: a filtered search of a strategy that ranks every record (exact vector
    # search) returns min(limit, matches): higher-scoring filtered-out records never
    # leave it short
    strategies = conformance.caps.exhaustive_strategies
    if not strategies:
        pytest.skip("no exhaustive_strategies declared")
    strong = [{"content": "apple banana cherry", "metadata": {"g": "x"}}] * 40
    weak = [{"key": f"w{i}", "content": f"walnut {i}", "metadata": {"g": "y"}} for i in range(7)]
    conformance.write(strong + weak + [{"content": "no group"}] * 3)
    for strategy in strategies:
        for flt, limit, expected in (({"g": "y"}, 5, 5), ({"g": "y"}, 10, 7), (None, 100, 50)):
            input: dict[str, Any] = {"query": "apple banana", "strategy": strategy, "limit": limit}
            if flt is not None:
                input["filter"] = flt
            results = conformance.ok("MEMORY.SEARCH", input)
            assert len(results) == expected, (strategy, flt, limit, len(results))
            if flt is not None:
                assert all(r.memory.metadata == flt for r in results), strategy
