"""Keyword top k (issue 28 item 2): a search without a filter picks its best ``limit``
candidates before reading any record; its hits and BM25 scores are the exhaustive
evaluation's on a seeded corpus, as are those of a filtered search (every candidate
read)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import Scope, create_memory
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
