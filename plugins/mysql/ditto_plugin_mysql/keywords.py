"""Keyword search of the MySQL store: per-scope BM25 over a terms table of Python terms.

What is indexed: a record's :func:`~ditto_worker.memory.text.keyword_text` (key, content
with its JSON field names, the store's ``indexFields``) as the terms of
:func:`~ditto_worker.memory.text.index_terms`, the same terms SQLite, PostgreSQL, Qdrant
and the in-memory store index. The server never tokenizes: InnoDB ``FULLTEXT`` drops
tokens shorter than ``innodb_ft_min_token_size`` (3, server-wide), which loses the CJK
bigrams, and MariaDB has no ngram parser.

Tables (migration 1): ``memory_terms(scope, term, seq, tf)`` with primary key ``(scope,
term, seq)`` — one row per distinct term of a record, ``tf`` its occurrences; a term is
its UTF-8 bytes, or ``#`` + SHA-256 hex when longer than :data:`MAX_TERM_BYTES`;
``memories.terms`` is a record's term count (``dl``); ``scopes.records``/``scopes.terms``
count the scope's records with a term and their terms (``N``, ``avgdl``), kept in the
transaction of every write, content update and delete.

Per-scope statistics (issue 19): a term's postings are found through the ``(scope,
term)`` prefix of the primary key, so a search reads its own scope's postings only, and
the document frequencies counted there are the scope's own. Score: BM25
(:func:`ditto_worker.memory.text.bm25`: k1 1.2, b 0.75, IDF
:func:`~ditto_worker.memory.text.bm25_idf`), a positive float, higher is better. A query
is never syntax: its terms are bound parameters; of more than 64 distinct terms the 64
held by the fewest records of the scope are kept (:func:`~ditto_worker.memory.text.
select_terms` with the real frequencies); terms no record holds are dropped first.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ditto_plugin_mysql.db import Conn
from ditto_worker.memory.text import (
    BM25_B,
    BM25_K1,
    bm25_idf,
    index_terms,
    query_terms,
    select_terms,
)

__all__ = [
    "MAX_TERM_BYTES",
    "KeywordPlan",
    "adjust",
    "index_rows",
    "insert_terms",
    "keyword_plan",
    "record_terms",
    "term_key",
    "unindex",
]

MAX_TERM_BYTES: Final = 200
"""Longest term stored as itself (``term`` is ``VARBINARY(255)``); longer ones hashed."""
_MAX_LOOKUP_TERMS: Final = 4096
_CHUNK: Final = 1000


def term_key(term: str) -> bytes:
    """The stored form of a term (module docstring)."""
    raw = term.encode("utf-8")
    if len(raw) <= MAX_TERM_BYTES:
        return raw
    return b"#" + hashlib.sha256(raw).hexdigest().encode("ascii")


def record_terms(text: str) -> Counter[bytes]:
    """Term -> occurrences of a record's keyword text."""
    return Counter(term_key(term) for term in index_terms(text))


def index_rows(scope: int, seq: int, counts: Counter[bytes]) -> list[tuple[Any, ...]]:
    """``memory_terms`` rows of one record."""
    return [(scope, term, seq, tf) for term, tf in counts.items()]


def insert_terms(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``memory_terms`` rows (PyMySQL batches them into multi-row statements)."""
    if rows:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_terms (scope, term, seq, tf) VALUES (%s, %s, %s, %s)", rows
            )


def unindex(conn: Conn, seqs: Sequence[int]) -> None:
    """Remove the postings of records ``seqs`` (their statistics: :func:`adjust`)."""
    with conn.cursor() as cur:
        for start in range(0, len(seqs), _CHUNK):
            chunk = list(seqs[start : start + _CHUNK])
            marks = ", ".join(["%s"] * len(chunk))
            cur.execute(f"DELETE FROM memory_terms WHERE seq IN ({marks})", chunk)


def adjust(conn: Conn, scope: int, pairs: Iterable[tuple[int, int]]) -> None:
    """Update the scope's statistics for records whose term count went from ``old`` to
    ``new`` (``(0, n)``: written; ``(n, 0)``: deleted); a record with 0 terms is not
    counted."""
    records = terms = 0
    for old, new in pairs:
        records += (new > 0) - (old > 0)
        terms += new - old
    if records or terms:
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE scopes SET records = records + %s, terms = terms + %s WHERE id = %s",
                [records, terms, scope],
            )


@dataclass(frozen=True)
class KeywordPlan:
    """The scored candidates of one keyword search: a derived table ``s(seq, score)``
    (SQL text and parameters) over the scope's postings."""

    sql: str
    params: list[Any]


def _frequencies(conn: Conn, scope: int, keys: dict[bytes, str]) -> dict[str, int]:
    found: dict[str, int] = {}
    wanted = list(keys)
    with conn.cursor() as cur:
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            cur.execute(
                "SELECT term, COUNT(*) FROM memory_terms WHERE scope = %s AND term IN "
                f"({marks}) GROUP BY term",
                [scope, *chunk],
            )
            found.update((keys[bytes(term)], int(df)) for term, df in cur.fetchall())
    return found


def keyword_plan(conn: Conn, query: str, scope: int) -> KeywordPlan | None:
    """The BM25 scores of ``scope``'s records holding any term of ``query``, or ``None``
    when the query has no term the scope holds (reads the scope's statistics and the
    terms' document frequencies)."""
    with conn.cursor() as cur:
        cur.execute("SELECT records, terms FROM scopes WHERE id = %s", [scope])
        stats = cur.fetchone()
    wanted = query_terms(query)[:_MAX_LOOKUP_TERMS]
    if stats is None or not wanted or not stats[0]:
        return None
    records, total = int(stats[0]), int(stats[1])
    keys = {term_key(term): term for term in wanted}
    frequencies = _frequencies(conn, scope, keys)
    chosen = select_terms(wanted, frequencies)
    if not chosen:
        return None
    weights = [(term_key(term), bm25_idf(records, frequencies[term])) for term in chosen]
    cases = " ".join("WHEN %s THEN %s" for _ in weights)
    marks = ", ".join(["%s"] * len(weights))
    sql = (
        f"(SELECT t.seq, SUM((CASE t.term {cases} END) * t.tf * %s / (t.tf + %s * d.terms + "
        "%s)) AS score FROM memory_terms AS t JOIN memories AS d ON d.seq = t.seq "
        f"WHERE t.scope = %s AND t.term IN ({marks}) GROUP BY t.seq)"
    )
    average = total / records
    params: list[Any] = [x for pair in weights for x in pair]
    params += [BM25_K1 + 1, BM25_K1 * BM25_B / average, BM25_K1 * (1 - BM25_B), scope]
    params += [term for term, _ in weights]
    return KeywordPlan(sql, params)
