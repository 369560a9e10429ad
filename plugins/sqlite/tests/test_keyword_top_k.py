"""Keyword top k (issue 28 item 2): a search without a filter picks its best ``limit``
candidates before reading any record, scoring only those that can reach the page; its hits
and BM25 scores are the exhaustive evaluation's on a seeded corpus and the plan's own SQL
scoring every candidate's, as are those of a filtered search (every candidate read)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, keyword_top, search
from ditto_plugin_sqlite.fts import KeywordPlan, keyword_plan
from ditto_plugin_sqlite.sql import compile_filter, in_namespace
from ditto_worker import Scope, create_memory
from ditto_worker.memory.filters import parse_filter
from ditto_worker.memory.text import bm25, bm25_idf, index_terms, keyword_text, query_terms

WORDS = [f"w{i}" for i in range(300)]
ALICE = Scope("acme", "alice")


def _corpus(count: int, seed: int) -> list[str]:
    """Zipf-like texts of 5-25 words."""
    rng = random.Random(seed)
    weights = [1 / (rank + 3) for rank in range(len(WORDS))]
    return [" ".join(rng.choices(WORDS, weights, k=rng.randint(5, 25))) for _ in range(count)]


def _exhaustive(texts: list[str], query: str, k: int) -> list[tuple[str, float]]:
    """Top ``k`` (content, BM25) by scoring every record (``seq`` order breaks ties)."""
    docs = [Counter(index_terms(keyword_text(text, None))) for text in texts]
    lengths = [sum(doc.values()) for doc in docs]
    terms = list(dict.fromkeys(query_terms(query)))
    df = {t: sum(1 for doc in docs if doc[t]) for t in terms}
    idf = {t: bm25_idf(len(docs), df[t]) for t in terms if df[t]}
    average = sum(lengths) / len(docs)
    scored = [
        (text, bm25({t: doc[t] for t in idf}, length, idf, average), i)
        for i, (text, doc, length) in enumerate(zip(texts, docs, lengths, strict=True))
    ]
    ranked = sorted((s for s in scored if s[1] > 0), key=lambda s: (-s[1], s[2]))
    return [(text, score) for text, score, _ in ranked[:k]]


def test_top_k_is_the_exhaustive_top_k(tmp_path: Path) -> None:
    texts = _corpus(600, 5)
    rng = random.Random(6)
    with SqliteMemoryStore(tmp_path / "k.sqlite") as store:
        memory = create_memory(store)
        memory.write({"memories": [{"content": t} for t in texts]}, scope=ALICE)
        memory.write({"memories": [{"content": t} for t in _corpus(200, 9)]})  # another scope
        for _ in range(40):
            query = " ".join(rng.sample(WORDS[10:120], rng.randint(2, 3)))
            expected = _exhaustive(texts, query, 10)
            for extra in ({}, {"filter": {"tag": {"$exists": False}}}):
                call = {"query": query, "limit": 10, **extra}
                got = [(h.memory.content, h.score) for h in memory.search(call, scope=ALICE).output]
                assert [text for text, _ in got] == [text for text, _ in expected], call
                assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-12)


def _scored_all(conn: Any, plan: KeywordPlan, limit: int) -> list[tuple[float, int]]:
    """The best ``limit`` by scoring every candidate in SQL (the plan's own statement)."""
    sql = f"{plan.sql}SELECT score, seq FROM s ORDER BY score DESC, seq LIMIT ?"
    return [(score, seq) for score, seq in conn.execute(sql, [*plan.params, limit])]


@pytest.mark.parametrize("fewest", [1, 12])
def test_pruned_top_k_is_scoring_every_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fewest: int
) -> None:
    """Same records, order and scores as scoring every candidate, for 1-4 terms and
    limits 1-60, in a scope beside another, after deletes, with records of ``fewest`` words
    or more (the scope's ``shortest`` bound); every branch is taken (keyword_top doc)."""
    rng = random.Random(11 + fewest)
    weights = [1 / (r + 3) for r in range(300)]
    texts = [" ".join(rng.choices(WORDS, weights, k=rng.randint(fewest, 40))) for _ in range(1500)]
    read: list[int] = []
    scored: list[int] = []
    single, exact = keyword_top._single, keyword_top._exact
    monkeypatch.setattr(keyword_top, "_single", lambda *a: read.append(1) or single(*a))
    monkeypatch.setattr(keyword_top, "_exact", lambda *a: scored.append(1) or exact(*a))
    with SqliteMemoryStore(tmp_path / "p.sqlite") as store:
        memory = create_memory(store)
        ids = [h.id for h in memory.write({"memories": [{"content": t} for t in texts]}).output]
        memory.write({"memories": [{"content": t} for t in _corpus(300, 2)]}, scope=ALICE)
        memory.delete({"ids": ids[::7]})
        pruned = repeated = 0
        with store._tx(None, write=False) as conn:
            for _ in range(120):
                query = " ".join(rng.sample(WORDS[:200], rng.randint(1, 4)))
                plan = keyword_plan(conn, query, "")  # frequencies from fts5vocab
                read_plan = keyword_plan(conn, query, "", read=True)  # from the postings
                assert plan is not None and read_plan is not None
                assert read_plan.weights == plan.weights
                assert read_plan.shortest >= fewest
                for limit in (1, 3, 10, 60):
                    before, exact_calls = len(read), len(scored)
                    got = keyword_top.best_records(conn, read_plan, limit)
                    expected = _scored_all(conn, plan, limit)
                    assert [seq for _, seq in got] == [seq for _, seq in expected], query
                    if len(plan.weights) <= 2:  # two floats add up the same in any order
                        assert got == expected, (query, limit)
                    else:  # fsum vs SQLite's compensated sum(), in its row order
                        assert [s for s, _ in got] == pytest.approx(
                            [s for s, _ in expected], rel=1e-14
                        )
                    pruned += len(read) == before and len(scored) == exact_calls + 1
                    repeated += len(scored) > exact_calls + 1
    assert read, "the records holding one term once were never read"
    assert repeated, "the records holding one term repeatedly were never scored"
    assert pruned, "no search was pruned"


def test_filtered_pages_are_every_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filtered search ranks a prefix of the candidates and checks their records; its
    page is the every-candidate statement's, for filters kept by 50 %, 3 %, 1 % and 0 %
    of the records and one every record passes; a selective one ends in that statement."""
    rng = random.Random(21)
    weights = [1 / (r + 3) for r in range(300)]
    texts = [" ".join(rng.choices(WORDS, weights, k=rng.randint(3, 30))) for _ in range(1500)]
    every = search._keyword_sql
    fallbacks: list[int] = []
    monkeypatch.setattr(search, "_keyword_sql", lambda *a: fallbacks.append(1) or every(*a))
    filters = [{"n": {"$lt": 50}}, {"n": {"$lt": 3}}, {"n": 7}, {"n": {"$gte": 100}}]
    filters.append({"tag": {"$exists": False}})
    with SqliteMemoryStore(tmp_path / "f.sqlite") as store:
        memory = create_memory(store)
        drafts = [{"content": t, "metadata": {"n": i % 100}} for i, t in enumerate(texts)]
        memory.write({"memories": drafts})
        fell: dict[str, int] = {}
        with store._tx(None, write=False) as conn:
            for _ in range(30):
                query = " ".join(rng.sample(WORDS[:150], rng.randint(1, 3)))
                plan = keyword_plan(conn, query, "", read=True)
                assert plan is not None
                for given in filters:
                    where = in_namespace(compile_filter(parse_filter(given)), "", lookup=False)
                    for limit in (1, 10, 30):
                        before = len(fallbacks)
                        got = search._filtered_rows(conn, plan, where, limit)
                        want = conn.execute(*every(plan, where, limit)).fetchall()
                        assert [r[0] for r in got] == [r[0] for r in want], (query, given)
                        assert [r[6] for r in got] == pytest.approx([r[6] for r in want])
                        fell[str(given)] = fell.get(str(given), 0) + len(fallbacks) - before
    assert fell[str(filters[0])] == 0 and fell[str(filters[-1])] == 0
    assert fell[str(filters[3])] > 0, "a filter no record passes never scored every candidate"
