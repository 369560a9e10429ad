"""The best ``limit`` records of an unfiltered keyword search without scoring every
candidate (issue 28 item 2): exact, the same records in the same order as scoring them all.

:func:`ditto_plugin_sqlite.fts.keyword_plan`'s SQL scores every record holding a query
term: it groups each term's occurrences (``memories_fts_hits``), reads each record's
length (``memories_fts_docs``) and sorts the lot, 55-80 ms of CPU for two mid-frequency
words at 1,000,000 records. Most of those records cannot reach the top ``limit``: they
hold one query term, and BM25 bounds what such a record scores by that term's IDF and
occurrences. So, a MaxScore-style pruning (Turtle & Flood 1995, "Query evaluation:
strategies and optimizations") over FTS5's own postings; WRITE keeps one number more,
each scope's fewest terms of a record:

1. Each term's postings are read as one ``group_concat`` of record numbers and counted
   (:func:`ditto_plugin_sqlite.fts.postings`): its term frequencies.
2. The records holding two or more of the terms are scored exactly (their lengths read by
   primary key): a few dozen to a few hundred at 1M.
3. Every other record holds one term ``t``, ``n`` times, and has at least ``n`` terms and
   at least the scope's ``shortest`` (``keyword_scopes.shortest``, kept by WRITE), so it
   scores at most ``idf(t)·n·c0 / (n + c1·max(n, shortest) + c2)`` (the score rises with
   ``n`` and falls with the length). Two classes per term: once (``n = 1``) and more
   often (``n`` up to the term's largest count). A class whose bound is below the
   ``limit``-th best exact score so far cannot reach the page (ties go to the lower
   ``seq``: strictly below); the classes are taken by descending bound and the rest
   dropped at the first such one.
   Otherwise its records are scored: the repeated ones exactly (few), the single ones by
   reading the shortest of the term's records (they score best), then the next class is
   checked against the raised threshold.

The scores are the same floating-point operations as the SQL's; a record holding one term
gets the identical value, a record's sum over several terms is correctly rounded
(:func:`math.fsum`) where SQLite's ``sum()`` adds in its row order with
Kahan-Babuska-Neumaier compensation (equal for two terms, within an ulp or so beyond).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Container, Iterable, Iterator, Sequence
from itertools import compress

from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.fts import KeywordPlan, postings
from ditto_worker.sqlkit.records import chunks, marks

__all__ = ["best_records"]

Scored = tuple[float, int]
"""``(score, seq)`` of one record."""

_SHORTEST = (
    "SELECT d.seq, d.terms FROM (SELECT DISTINCT doc FROM memories_fts_hits WHERE term = ?) "
    "AS h JOIN memories_fts_docs AS d ON d.seq = h.doc ORDER BY d.terms, d.seq LIMIT ?"
)


def best_records(conn: Connection, plan: KeywordPlan, limit: int) -> list[Scored]:
    """The best ``limit`` records of ``plan``'s scope holding any of its terms.

    Args:
        conn: a connection in the search's read transaction.
        plan: :func:`ditto_plugin_sqlite.fts.keyword_plan`'s plan (terms, IDFs, constants;
            its postings when read with it).
        limit: most records returned (≥ 1).

    Returns:
        At most ``limit`` ``(score, seq)``, by descending BM25 score, ``seq`` breaking
        ties: exactly the first ``limit`` of scoring every candidate (module doc).
    """
    counts = plan.postings or [postings(conn, term) for term, _ in plan.weights]
    shared = _shared(counts)
    scored = _exact(conn, plan, counts, shared)
    for bound, index, repeated in _classes(plan, counts):
        top = _top(scored, limit)
        if len(top) == limit and bound < top[-1][0]:
            break  # the later classes' bounds are lower still
        if repeated:
            scored = top + _exact(conn, plan, counts, _repeats(counts[index]) - shared)
        else:
            scored = top + _single(conn, plan, index, limit, counts[index], shared)
    return _top(scored, limit)


def _shared(counts: Sequence[Counter[str]]) -> set[str]:
    """The records holding two or more of the terms (probes in C, no loop per record)."""
    shared: set[str] = set()
    seen: Container[str] = counts[0] if counts else set()
    for index, count in enumerate(counts[1:], start=2):
        shared.update(filter(seen.__contains__, count))
        if index < len(counts):  # a third term: one set of the records seen so far
            if not isinstance(seen, set):
                seen = set(counts[0])
            seen.update(count)
    return shared


def _repeats(count: Counter[str]) -> set[str]:
    """The records holding the term more than once."""
    return set(compress(count.keys(), map((1).__lt__, count.values())))


def _classes(plan: KeywordPlan, counts: Sequence[Counter[str]]) -> list[tuple[float, int, bool]]:
    """``(bound, term index, repeated)`` per class of the records holding one term (once;
    more often, when any record does), by descending bound (module doc, step 3)."""
    c0, c1, c2 = plan.constants
    shortest, classes = plan.shortest, []
    for index, ((_, idf), count) in enumerate(zip(plan.weights, counts, strict=True)):
        most = max(count.values(), default=0)
        if most:
            classes.append((idf * 1 * c0 / (1 + c1 * shortest + c2), index, False))
        if most > 1:
            fewest = max(most, shortest)
            classes.append((idf * most * c0 / (most + c1 * fewest + c2), index, True))
    return sorted(classes, reverse=True)


def _exact(
    conn: Connection, plan: KeywordPlan, counts: Sequence[Counter[str]], docs: set[str]
) -> list[Scored]:
    """The exact scores of ``docs`` (their lengths read by primary key)."""
    c0, c1, c2 = plan.constants
    terms = [(idf, count) for (_, idf), count in zip(plan.weights, counts, strict=True)]
    scored: list[Scored] = []
    for seq, length in _lengths(conn, [int(doc) for doc in docs]):
        doc, scaled = str(seq), c1 * length  # (n + c1·dl) + c2: the SQL's order
        parts = [idf * n * c0 / (n + scaled + c2) for idf, count in terms if (n := count.get(doc))]
        scored.append((math.fsum(parts), seq))
    return scored


def _lengths(conn: Connection, seqs: list[int]) -> Iterator[tuple[int, int]]:
    """``(seq, terms)`` of those of ``seqs`` that are indexed."""
    for chunk in chunks(seqs):
        sql = f"SELECT seq, terms FROM memories_fts_docs WHERE seq IN ({marks(chunk)})"
        yield from conn.execute(sql, chunk)


def _single(
    conn: Connection,
    plan: KeywordPlan,
    index: int,
    limit: int,
    count: Counter[str],
    shared: set[str],
) -> list[Scored]:
    """The best ``limit`` records holding term ``index`` once and no other term: the
    shortest (read in SQL) score best; the others among the term's shortest records are
    skipped (scored by their own class), so ``limit`` + their number are read."""
    term, idf = plan.weights[index]
    c0, c1, c2 = plan.constants
    skip = _repeats(count) | shared.intersection(count)
    rows = conn.execute(_SHORTEST, (term, limit + len(skip))).fetchall()
    return [
        (idf * 1 * c0 / (1 + c1 * length + c2), seq) for seq, length in rows if str(seq) not in skip
    ]


def _top(scored: Iterable[Scored], limit: int) -> list[Scored]:
    """The best ``limit`` of ``scored`` (descending score, then ascending ``seq``)."""
    return heapq.nsmallest(limit, scored, key=lambda s: (-s[0], s[1]))
