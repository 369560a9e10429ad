"""The shared keyword-search terms (ditto_worker.memory.text, issue 13 item 1)."""

from __future__ import annotations

import math

import pytest

from ditto_worker.memory.text import (
    MAX_QUERY_TERMS,
    bm25,
    bm25_idf,
    embedding_text,
    index_terms,
    keyword_text,
    normalize,
    query_terms,
    select_terms,
)


def test_combining_marks_stay_in_their_word() -> None:
    assert index_terms("पासवर्ड हर तिमाही") == ["पासवर्ड", "हर", "तिमाही"]
    assert query_terms("तिमाही?") == ["तिमाही"]
    assert query_terms("ि") == []  # a lone mark is no word


def test_scripts_without_spaces_become_cluster_bigrams() -> None:
    assert query_terms("ภาษาไทย") == ["ภา", "าษ", "ษา", "าไ", "ไท", "ทย"]
    assert query_terms("ฉัน") == ["ฉัน"]  # two clusters: one bigram
    terms = index_terms("ฉันชอบ")
    assert "ฉั" in terms and "ฉัน" in terms  # clusters (ฉั is one) and their bigrams
    assert query_terms("工作") == ["工作"] and query_terms("猫") == ["猫"]


def test_normalisation_is_nfkc_and_case_folding() -> None:
    assert normalize("Ｇｉｎｔａｍａ") == "gintama"
    assert index_terms("Zu\u0308rich") == index_terms("Z\u00fcrich") == ["zurich"]
    assert query_terms("STRASSE") == query_terms("Straße")
    assert query_terms("ΣΊΣΥΦΟΣ") == query_terms("σίσυφος")


def test_query_terms_are_stemmed_and_never_syntax() -> None:
    assert query_terms("preferred language") == ["prefer", "languag"]
    assert query_terms('barista* AND -NEAR("x" y)') == ["barista", "near", "x", "y"]
    assert query_terms("What did the") == ["what", "did", "the"]  # only stopwords: kept
    assert query_terms("What is Jon's job?") == ["jon", "s", "job"]
    assert query_terms("?!") == []


def test_select_terms_keeps_the_most_selective() -> None:
    terms = [f"t{i}" for i in range(70)]
    frequencies = {term: 100 for term in terms} | {"t69": 1, "t3": 0}
    chosen = select_terms(terms, frequencies)
    assert len(chosen) == MAX_QUERY_TERMS and "t69" in chosen and "t3" not in chosen
    assert chosen == [t for t in terms if t in chosen]  # original order kept
    longest = select_terms([*terms[:69], "quetzalcoatl"])  # no frequencies: the longest
    assert "quetzalcoatl" in longest and len(longest) == MAX_QUERY_TERMS
    assert select_terms(["a", "b"], {"a": 0}) == []


def test_record_texts() -> None:
    assert keyword_text({"language": "zh-CN", "n": 3}, "preference") == (
        "preference\nlanguage\nzh-CN\nn"
    )
    assert keyword_text("hi", None, {"speaker": "Jon"}, ["speaker"]) == "Jon\nhi"
    assert embedding_text("I opened a shop", {"speaker": "Jon"}, ["speaker"]) == (
        "Jon: I opened a shop"
    )
    assert embedding_text("I opened a shop") == "I opened a shop"
    assert embedding_text(42, {"speaker": "Jon"}, ["speaker"]) == ""


def test_bm25_scale_is_readable() -> None:
    # issue 13: one match in a one-record store scores 0.1 (the IDF floor), not 9.39e-07
    idf = {"lighthous": bm25_idf(1, 1)}
    assert bm25({"lighthous": 1}, 3, idf, 3.0) == pytest.approx(0.1)
    assert bm25_idf(10_000, 1) > 8 and bm25_idf(10, 10) == 0.1
    assert bm25_idf(100, 1) == pytest.approx(math.log(99.5 / 1.5))
