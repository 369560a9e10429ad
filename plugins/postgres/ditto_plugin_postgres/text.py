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

import re
from typing import Any, Final

__all__ = [
    "MAX_BODY_CHARS",
    "MAX_QUERY_TERMS",
    "STOPWORDS",
    "content_text",
    "grams_vector",
    "query_terms",
]

_CJK: Final = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff"
)
_TOKENS: Final = re.compile(rf"([{_CJK}]+)|((?:(?![{_CJK}])[^\W_])+)")
MAX_BODY_CHARS: Final = 200_000
"""Characters of a record's text indexed (tsvector values are limited to 1 MB)."""
MAX_QUERY_TERMS: Final = 64
"""At most this many distinct terms of a query are used."""
_MAX_GRAMS: Final = 20_000
_MAX_POSITION: Final = 16_383

STOPWORDS: Final = frozenset(
    """a about after again all also am an and any are as at be been before being both but
    by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just
    me might more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom whose why will with would you your yours
    yourself yourselves""".split()
)
"""English function words dropped from keyword queries (a query of only these keeps them)."""


def content_text(content: Any) -> str:
    """The indexed text of a record's content, NUL characters removed, truncated."""
    if isinstance(content, str):
        text = content
    else:
        parts: list[str] = []
        _collect_strings(content, parts)
        text = "\n".join(parts)
    return text[:MAX_BODY_CHARS].replace("\x00", " ")


def _collect_strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_strings(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_strings(item, out)


def _cjk_grams(run: str, unigrams: bool) -> list[str]:
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    if unigrams or len(run) == 1:
        return list(run) + bigrams
    return bigrams


def grams_vector(text: str) -> str:
    """A tsvector literal of the text's CJK unigrams and bigrams (``''`` when none)."""
    positions: dict[str, list[int]] = {}
    count = 0
    for match in _TOKENS.finditer(text):
        if not match.group(1):
            continue
        for gram in _cjk_grams(match.group(1), unigrams=True):
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
    for match in _TOKENS.finditer(query):
        if match.group(1):
            grams.update(dict.fromkeys(_cjk_grams(match.group(1), unigrams=False)))
        else:
            word = match.group(2).lower()
            (function_words if word in STOPWORDS else words)[word] = None
    chosen = [("english", f"'{w}'") for w in (words or ({} if grams else function_words))]
    chosen += [("grams", f"'{g}'") for g in grams]
    return chosen[:MAX_QUERY_TERMS]
