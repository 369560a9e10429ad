"""Keyword-search text of the PostgreSQL store: the indexed terms and the query terms.

The index (column ``tsv``, GIN) holds the terms Python makes
(:func:`ditto_worker.memory.text.index_terms` of
:func:`~ditto_worker.memory.text.keyword_text`: key, content with its JSON field names,
the store's ``indexFields``), given to the server as a ``tsvector`` literal
(:func:`tsvector_literal`) — never parsed by ``to_tsvector`` — so this store, SQLite and
the in-memory store index the same terms whatever the server's locale or text-search
configuration (issue 13). Each term is stored as ``<scope id>_<term>``, the scope id
being the row of the record's namespace in ``keyword_scopes`` (migration 5): the GIN
lookup of a term finds only its own scope's records, so a scoped search costs what a
store of that scope's size costs, and the document frequencies counted from it are the
scope's own (issue 19). ``keyword_scopes.records`` counts the scope's records with at
least one term (BM25's ``N``); ``memories.terms`` is a record's term count.

A query is never parsed as tsquery syntax: each of its terms
(:func:`~ditto_worker.memory.text.query_terms`) becomes a quoted ``tsquery`` literal,
and a record matches when it has any. Of more than 64 distinct terms the 64 longest are
kept (longer words are rarer: a documented heuristic; the SQLite store asks its index
for the real frequencies). Ranking (in the store) weights each matched term by its BM25
IDF over the scope (:func:`ditto_worker.memory.text.bm25_idf`), and adds ``0.01 *
ts_rank_cd`` to order records matching the same terms. Measured on the LoCoMo sample
(``data/locomo/30.json``, evidence recall@10): ``ts_rank_cd`` alone 0.455, ``ts_rank``
0.484, IDF-weighted 0.67.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ditto_worker.memory.text import index_terms, query_terms, select_terms

__all__ = [
    "MAX_TERMS",
    "prefixed_query_terms",
    "tsquery_literal",
    "tsvector_literal",
    "record_terms",
]

MAX_TERMS: Final = 50_000
"""Terms of one record put in its ``tsvector`` (PostgreSQL limits one to 1 MB)."""
_MAX_POSITION: Final = 16_383
_MAX_POSITIONS: Final = 256


def _quote(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def record_terms(text: str) -> list[str]:
    """The terms of a record's keyword text, at most :data:`MAX_TERMS`."""
    return index_terms(text.replace("\x00", " "))[:MAX_TERMS]


def tsvector_literal(terms: Sequence[str], scope: int) -> str:
    """A ``tsvector`` literal of ``terms`` (in order) prefixed with ``<scope>_``, with
    their positions (1-based; at most 256 per term, the last ones capped at 16383)."""
    positions: dict[str, list[int]] = {}
    for index, term in enumerate(terms, start=1):
        spots = positions.setdefault(term, [])
        if len(spots) < _MAX_POSITIONS:
            spots.append(min(index, _MAX_POSITION))
    return " ".join(
        f"{_quote(f'{scope}_{term}')}:{','.join(map(str, sorted(set(spots))))}"
        for term, spots in positions.items()
    )


def tsquery_literal(term: str, scope: int) -> str:
    """The ``tsquery`` literal matching ``term`` in ``scope``."""
    return _quote(f"{scope}_{term}")


def prefixed_query_terms(query: str, scope: int) -> list[str]:
    """``tsquery`` literals of the query's terms (:func:`select_terms` without
    frequencies: the 64 longest); ``[]`` when the query has no term."""
    return [tsquery_literal(term, scope) for term in select_terms(query_terms(query))]
