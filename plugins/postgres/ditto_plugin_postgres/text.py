"""Keyword-search text of the PostgreSQL store: what is indexed and how a query is built.

Index (column ``tsv``) = ``to_tsvector('english', body) || grams::tsvector`` where

* ``body`` is the record's text: ``content`` when it is a string, else the JSON string
  values inside it (recursively, object keys excluded), joined by newlines; numbers and
  ``null`` have no text. English words are stemmed ("bankers" finds "banker"); at most
  :data:`MAX_BODY_CHARS` characters are indexed.
* ``grams`` lists every run of CJK characters (Han, kana, Hangul) as its unigrams and
  overlapping bigrams, as a tsvector literal with positions, so Chinese written without
  spaces is found by a 2-character query whatever the server's locale.

A query is never parsed as tsquery syntax: it is tokenized here (letter/digit runs and
CJK runs), English function words are dropped (unless nothing else is left, as in the
SQLite store), each remaining word is quoted for ``to_tsquery('english', …)`` and each
CJK bigram for a ``tsquery`` literal (:func:`query_terms`); a record matches when it has
any of them. Tokens are alphanumeric only, so quotes, ``&|!<->:*`` and backslashes in a
question are plain text. Ranking (in the store) weights each matched term by its BM25
IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``, and adds ``0.01 * ts_rank_cd`` to order
records matching the same terms. Measured on the LoCoMo sample (``data/locomo/30.json``,
evidence recall@10): ``ts_rank_cd`` alone 0.455, ``ts_rank`` 0.484, IDF-weighted 0.67
(the SQLite store's FTS5 bm25: 0.67).
"""

from __future__ import annotations

from typing import Any, Final

from ditto_worker.memory.text import MAX_QUERY_TERMS, STOPWORDS, TOKENS, cjk_grams
from ditto_worker.memory.text import content_text as shared_content_text

__all__ = [
    "MAX_BODY_CHARS",
    "MAX_QUERY_TERMS",
    "STOPWORDS",
    "content_text",
    "grams_vector",
    "query_terms",
]

MAX_BODY_CHARS: Final = 200_000
"""Characters of a record's text indexed (tsvector values are limited to 1 MB)."""
_MAX_GRAMS: Final = 20_000
_MAX_POSITION: Final = 16_383


def content_text(content: Any) -> str:
    """The indexed text of a record's content, NUL characters removed, truncated."""
    return shared_content_text(content)[:MAX_BODY_CHARS].replace("\x00", " ")


def grams_vector(text: str) -> str:
    """A tsvector literal of the text's CJK unigrams and bigrams (``''`` when none)."""
    positions: dict[str, list[int]] = {}
    count = 0
    for match in TOKENS.finditer(text):
        if not match.group(1):
            continue
        for gram in cjk_grams(match.group(1), unigrams=True):
            count += 1
            if count > _MAX_GRAMS:
                break
            spots = positions.setdefault(gram, [])
            if len(spots) < 256:
                spots.append(min(count, _MAX_POSITION))
    return " ".join(f"'{gram}':{','.join(map(str, spots))}" for gram, spots in positions.items())


def query_terms(query: str) -> list[tuple[str, str]]:
    """The query's distinct terms as ``(kind, literal)``, at most :data:`MAX_QUERY_TERMS`.

    ``kind`` is ``"english"`` (``literal`` is ``'word'`` for ``to_tsquery('english', …)``)
    or ``"grams"`` (``'工作'`` for a ``tsquery`` literal). ``[]`` when the query has no
    words.
    """
    words: dict[str, None] = {}
    function_words: dict[str, None] = {}
    grams: dict[str, None] = {}
    for match in TOKENS.finditer(query):
        if match.group(1):
            grams.update(dict.fromkeys(cjk_grams(match.group(1), unigrams=False)))
        else:
            word = match.group(2).lower()
            (function_words if word in STOPWORDS else words)[word] = None
    chosen = [("english", f"'{w}'") for w in (words or ({} if grams else function_words))]
    chosen += [("grams", f"'{g}'") for g in grams]
    return chosen[:MAX_QUERY_TERMS]
