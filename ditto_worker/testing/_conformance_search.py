"""Conformance: SEARCH strategies and keyword search (English, Chinese without spaces,
combining marks, Thai/Lao/Khmer/Myanmar, Unicode normalisation, JSON field names and keys,
the most selective query terms, per-scope statistics, the score scale).

Rules: MEM-SEARCH-1/2/3/4. Keyword tests run when ``keyword_strategy`` is declared;
scripts without spaces when ``keyword_cjk`` is too; per-scope statistics when ``scope``
and ``keyword_scope_statistics`` are. The terms every store indexes are
:mod:`ditto_worker.memory.text`'s (issue 13).
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker.testing._conformance_harness import Harness

__all__ = [
    "test_keyword_chinese_without_spaces",
    "test_keyword_combining_marks_stay_in_words",
    "test_keyword_english",
    "test_keyword_json_field_names_and_keys",
    "test_keyword_keeps_the_most_selective_terms",
    "test_keyword_one_match_score_is_readable",
    "test_keyword_scores_use_only_the_scope_own_records",
    "test_keyword_scripts_without_spaces",
    "test_keyword_unicode_normalisation",
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
    assert conformance.search_keys("title") == ["obj"]  # JSON field names are text
    assert conformance.search_keys("42") == []  # numbers are not
    assert conformance.search_keys("pet") == ["pet"]  # a record's key is text
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


def test_keyword_combining_marks_stay_in_words(conformance: Harness) -> None:
    # issue 13: a Devanagari vowel sign is part of its word, never a separator
    conformance.require_keyword()
    conformance.write([
        {"key": "quarterly", "content": "पासवर्ड हर तिमाही बदला जाता है"},
        {"key": "with-you", "content": "मैं तुम्हारे साथ हूँ"},
        {"key": "bengali", "content": "আমি প্রতি মাসে পাসওয়ার্ড বদলাই"},
        {"key": "tamil", "content": "நான் தமிழ் கற்றுக்கொள்கிறேன்"},
    ])  # fmt: skip
    assert conformance.search_keys("तिमाही") == ["quarterly"]
    assert conformance.search_keys("साथ") == ["with-you"]
    assert conformance.search_keys("हूँ") == ["with-you"]
    assert conformance.search_keys("पासवर्ड") == ["quarterly"]
    assert conformance.search_keys("পাসওয়ার্ড") == ["bengali"]
    assert conformance.search_keys("தமிழ்") == ["tamil"]
    assert conformance.search_keys("ि ा") == []  # lone marks are no word


SCRIPTS_WITHOUT_SPACES: dict[str, tuple[str, str]] = {
    # key: (text, a word inside it)
    "thai": ("ฉันชอบเรียนภาษาไทยมาก", "ภาษาไทย"),
    "lao": ("ຂ້ອຍມັກຮຽນພາສາລາວຫຼາຍ", "ພາສາລາວ"),
    "khmer": ("ខ្ញុំចូលចិត្តរៀនភាសាខ្មែរណាស់", "ភាសាខ្មែរ"),
    "myanmar": ("ကျွန်တော်မြန်မာစာကိုလေ့လာနေတယ်", "မြန်မာစာ"),
    "japanese": ("私は毎朝コーヒーを飲みます", "コーヒー"),
}


def test_keyword_scripts_without_spaces(conformance: Harness) -> None:
    # issue 13: Thai, Lao, Khmer, Myanmar (and kana) are segmented as Chinese is
    conformance.require_keyword(cjk=True)
    conformance.write([{"key": key, "content": text}
                       for key, (text, _) in SCRIPTS_WITHOUT_SPACES.items()])  # fmt: skip
    conformance.write([{"key": "thai-weather", "content": "วันนี้อากาศดีมาก"}])
    for key, (_, word) in SCRIPTS_WITHOUT_SPACES.items():
        assert conformance.search_keys(word)[:1] == [key], key
    assert conformance.search_keys("เรียนภาษา")[:1] == ["thai"]
    assert conformance.search_keys("อากาศ")[:1] == ["thai-weather"]


FULLWIDTH = "\uff27\uff49\uff4e\uff54\uff41\uff4d\uff41"  # Ｇｉｎｔａｍａ


def test_keyword_unicode_normalisation(conformance: Harness) -> None:
    # issue 13: NFKC and case folding on the indexed text and on the query
    conformance.require_keyword()
    conformance.write([
        {"key": "composed", "content": "We met in Z\u00fcrich last May."},
        {"key": "fullwidth", "content": f"{FULLWIDTH} is my favourite"},
        {"key": "ascii", "content": "Gintoki from Gintama"},
        {"key": "german", "content": "Die STRASSE ist lang"},
    ])  # fmt: skip
    assert conformance.search_keys("Zu\u0308rich") == ["composed"]  # decomposed query
    assert conformance.search_keys("ZÜRICH") == ["composed"]
    assert conformance.search_keys("zurich") == ["composed"]  # Latin diacritics folded
    assert set(conformance.search_keys("Gintama")) == {"fullwidth", "ascii"}
    assert set(conformance.search_keys(FULLWIDTH)) == {"fullwidth", "ascii"}
    assert conformance.search_keys("Straße") == ["german"]  # case folding: ß = ss


def test_keyword_json_field_names_and_keys(conformance: Harness) -> None:
    # issue 13 (the seed's example): field names and the record's key are searchable
    conformance.require_keyword()
    conformance.write([
        {"key": "preference", "content": {"language": "zh-CN"}, "metadata": {"source": "user"}},
        {"key": "address", "content": {"home": {"city": "Lyon", "zip": 69001}}},
        {"key": "note", "content": "nothing about settings"},
    ])  # fmt: skip
    assert conformance.search_keys("preferred language") == ["preference"]
    assert conformance.search_keys("preference") == ["preference"]
    assert conformance.search_keys("language") == ["preference"]
    assert conformance.search_keys("city") == ["address"]  # nested field names too
    assert conformance.search_keys("home Lyon") == ["address"]
    assert conformance.search_keys("user source") == []  # metadata is not indexed


def test_keyword_keeps_the_most_selective_terms(conformance: Harness) -> None:
    # issue 13: of more than 64 distinct query terms the most selective are kept, not the
    # first 64 (a rare word in 70th place still counts)
    conformance.require_keyword()
    common = [f"wd{i}" for i in range(69)]
    conformance.write([{"key": f"c{i}", "content": " ".join(common)} for i in range(5)])
    conformance.write([{"key": "rare", "content": "the quetzalcoatl temple"}])
    assert "rare" in conformance.search_keys(" ".join([*common, "quetzalcoatl"]))
    assert conformance.search_keys(" ".join(["quetzalcoatl", *common])) == conformance.search_keys(
        " ".join([*common, "quetzalcoatl"])
    )  # the terms kept do not depend on their order


def test_keyword_one_match_score_is_readable(conformance: Harness) -> None:
    # issue 13: a one-match keyword search has a readable score (not 9.39e-07)
    conformance.require_keyword()
    conformance.write([{"key": "only", "content": "the lighthouse keeper"}])
    (result,) = conformance.ok(
        "MEMORY.SEARCH", {"query": "lighthouse", "strategy": conformance.caps.keyword_strategy}
    )
    assert result.score is not None and 0.01 < result.score < 100, result.score


def test_keyword_scores_use_only_the_scope_own_records(conformance: Harness) -> None:
    # issue 19: a tenant's keyword scores depend only on its own records: another tenant's
    # writes (of the same words, or many others) change neither its ranking nor its scores
    from ditto_worker.scope import Scope

    conformance.require_keyword()
    if not conformance.caps.scope or not conformance.caps.keyword_scope_statistics:
        pytest.skip("scope or keyword_scope_statistics not declared")
    mine = conformance.scoped(Scope("t-stats", "u1"))
    other = conformance.scoped(Scope("t-stats", "u2"))
    mine.write([
        {"key": "a", "content": "the red fox jumps over the lazy dog"},
        {"key": "b", "content": "a red apple and a green pear"},
        {"key": "c", "content": "the dog sleeps"},
    ])  # fmt: skip
    queries = ["red dog", "green apple fox", "sleeps"]

    def scores() -> list[list[tuple[str, float]]]:
        return [
            [(str(r.memory.key), float(r.score)) for r in mine.ok(
                "MEMORY.SEARCH", {"query": q, "strategy": conformance.caps.keyword_strategy})]
            for q in queries
        ]  # fmt: skip

    before = scores()
    other.write([{"key": f"o{i}", "content": "red red dog dog apple fox sleeps " * (i % 3 + 1)}
                 for i in range(40)])  # fmt: skip
    conformance.write([{"key": "unscoped", "content": "red dog " * 20}])
    after = scores()
    assert [[key for key, _ in rows] for rows in after] == [[k for k, _ in r] for r in before]
    for rows_before, rows_after in zip(before, after, strict=True):
        for (_, s1), (_, s2) in zip(rows_before, rows_after, strict=True):
            assert s2 == pytest.approx(s1, rel=1e-9, abs=1e-12)
