"""Keyword-search text, written once for every store (SQLite, PostgreSQL, in-memory, Qdrant).

A store indexes the *terms* this module produces and looks up the terms of a query; it
never tokenizes on its own, so every store finds the same records for the same query,
whatever its engine or the server's locale.

Public API:

* :func:`index_terms` — the terms of a text for indexing, in order, repeats kept (their
  count is the text's length for BM25);
* :func:`query_terms` — the distinct terms of a query, in order of first appearance;
* :func:`select_terms` — at most :data:`MAX_QUERY_TERMS` of them, the most selective;
* :func:`keyword_text` — the text of a record keyword search indexes (key, content with
  its JSON field names, named metadata fields); :func:`embedding_text` — the text a
  record's vector is made of; :func:`content_text` — the text of ``content`` alone;
* :func:`bm25` — the score every store documents (:data:`BM25_K1`, :data:`BM25_B`).

How a text becomes terms (issue 13):

1. Unicode normalisation: NFKC, then case folding (``Ｇｉｎｔａｍａ`` = ``gintama``,
   ``ß`` = ``ss``, a decomposed ``Zu\\u0308rich`` = ``zürich``). Latin letters also lose
   their diacritics (``zurich`` finds ``Zürich``; what FTS5's ``remove_diacritics`` did);
   other scripts keep their marks (a Devanagari vowel sign is part of the word).
2. Tokens are runs of *grapheme clusters* (the ``regex`` module's ``\\X``) whose first
   character is a letter or a digit, so combining marks stay inside their word:
   ``तिमाही`` is one term, not three lone consonants. Everything else (punctuation, any
   search syntax, ``_``, apostrophes) separates tokens, so a raw question is never syntax.
3. Scripts written without spaces — Han, kana, Hangul, and Thai, Lao, Khmer, Myanmar
   (:data:`SEGMENTED`) — are cut into overlapping *cluster bigrams* (plus unigrams when
   indexing), so ``ภาษาไทย`` finds ``ฉันชอบเรียนภาษาไทยมาก`` and ``工作`` finds
   ``我的工作是老师``. Character n-grams were chosen over a dictionary word-break (ICU),
   measured by ``bench/segmentation.py`` on 16 Thai/Lao/Khmer/Myanmar sentences and 37
   query words: recall@1 1.00 vs ICU 0.97 (ICU misses a query that is part of a word it
   keeps whole, e.g. คณิต in คณิตศาสตร์), no native library (PyICU builds from source
   against ``libicu-dev``); the price is 35 index terms per sentence vs ICU's 6 and
   250 µs vs 160 µs to tokenize one.
4. Other words are stemmed with the Snowball English stemmer (PyStemmer; ``preferred`` and
   ``preference`` are both ``prefer``). English function words (:data:`STOPWORDS`) are
   indexed but dropped from a query unless nothing else is left. Measured on the LoCoMo
   sample (``data/locomo/30.json``, evidence recall@10, SQLite): plain 0.55, porter
   stemming 0.62, porter + stopwords 0.67.

A query keeps at most :data:`MAX_QUERY_TERMS` distinct terms: the most selective ones
(:func:`select_terms`: the fewest records holding them when the store can tell, else the
longest), never simply the first.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import Stemmer

__all__ = [
    "BM25_B",
    "BM25_K1",
    "IDF_FLOOR",
    "MAX_INDEXED_CHARS",
    "MAX_QUERY_TERMS",
    "SEGMENTED",
    "STOPWORDS",
    "bm25",
    "bm25_idf",
    "content_text",
    "embedding_text",
    "index_terms",
    "keyword_text",
    "normalize",
    "query_terms",
    "select_terms",
]

SEGMENTED: Final = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff"
    r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
)
"""Scripts written without spaces between words (a ``regex`` character-class body): CJK
(Han, kana, Hangul) and Thai, Lao, Khmer, Myanmar."""
MAX_QUERY_TERMS: Final = 64
"""At most this many distinct terms of a query are used (:func:`select_terms`)."""
MAX_INDEXED_CHARS: Final = 200_000
"""Characters of a record's text that are indexed (the rest is not searchable)."""
BM25_K1: Final = 1.2
"""BM25 term-frequency saturation (as FTS5 and Lucene)."""
BM25_B: Final = 0.75
"""BM25 length normalisation (as FTS5 and Lucene)."""
IDF_FLOOR: Final = 0.1
"""The least IDF of a matched term (:func:`bm25_idf`)."""

_ASCII_WORDS: Final = re.compile(r"[a-z0-9]+")
"""The words of an ASCII text (lower-cased): its clusters are single characters."""


@functools.cache
def _patterns() -> tuple[Any, Any, Any]:
    """``(runs, cluster, latin_marks)``, compiled on first use: ASCII text needs none of
    them, so the ``regex`` module is imported only for the first non-ASCII text.

    ``runs``: group 1 a run of segmented-script clusters, group 2 a word (clusters that
    start with a letter or digit); ``cluster``: one grapheme cluster; ``latin_marks``: the
    combining marks of Latin letters."""
    import regex

    runs = regex.compile(
        rf"((?:(?=[{SEGMENTED}])\X)+)|((?:(?=[\p{{L}}\p{{N}}])(?![{SEGMENTED}])\X)+)"
    )
    return runs, regex.compile(r"\X"), regex.compile(r"(?<=\p{Latin}\p{M}*)\p{M}+")


_STEMMER: Final = Stemmer.Stemmer("english")

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


def normalize(text: str) -> str:
    """NFKC, then case folding, then NFKC again (so the result is stable under both)."""
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return folded


def _fold_latin(word: str) -> str:
    """``word`` without the combining marks of its Latin letters (``zürich`` -> ``zurich``)."""
    if word.isascii():
        return word
    bare = _patterns()[2].sub("", unicodedata.normalize("NFD", word))
    return unicodedata.normalize("NFC", bare)


def _grams(run: str, unigrams: bool) -> list[str]:
    """A segmented run's overlapping cluster bigrams, preceded by its clusters when
    ``unigrams`` (or when the run is one cluster long)."""
    clusters: list[str] = _patterns()[1].findall(run)
    bigrams = [clusters[i] + clusters[i + 1] for i in range(len(clusters) - 1)]
    if unigrams or len(clusters) == 1:
        return clusters + bigrams
    return bigrams


def _tokens(text: str, unigrams: bool) -> Iterable[tuple[bool, list[str]]]:
    """``(is_word, terms)`` per run of ``text`` (normalised, capped), in order."""
    text = text[:MAX_INDEXED_CHARS]
    if text.isascii():
        for word in _ASCII_WORDS.findall(text.lower()):
            yield True, [word]
        return
    for match in _patterns()[0].finditer(normalize(text)):
        if match.group(1):
            yield False, _grams(match.group(1), unigrams)
        else:
            yield True, [_fold_latin(match.group(2))]


def index_terms(text: str) -> list[str]:
    """The terms of ``text`` for indexing, in order, repeats kept (module docstring).

    Words are stemmed (stopwords kept); segmented runs give their clusters and cluster
    bigrams. ``len(index_terms(text))`` is the text's BM25 length.
    """
    capped = text[:MAX_INDEXED_CHARS]
    if capped.isascii():  # every run a word (:func:`_tokens`), stemmed in one call
        ascii_stems: list[str] = _STEMMER.stemWords(_ASCII_WORDS.findall(capped.lower()))
        return ascii_stems
    words: list[str] = []
    out: list[str] = []
    spots: list[int] = []
    for is_word, terms in _tokens(text, unigrams=True):
        if is_word:
            spots.append(len(out))
            words.append(terms[0])
            out.append("")
        else:
            out.extend(terms)
    stems: list[str] = _STEMMER.stemWords(words)
    for spot, stem in zip(spots, stems, strict=True):
        out[spot] = stem
    return out


def query_terms(query: str) -> list[str]:
    """The distinct terms of ``query``, in order of first appearance; ``[]`` without any.

    Words are stemmed; :data:`STOPWORDS` are dropped unless the query has nothing else;
    segmented runs give their cluster bigrams (a one-cluster run: the cluster).
    """
    words: dict[str, None] = {}
    function_words: dict[str, None] = {}
    grams: dict[str, None] = {}
    order: dict[str, int] = {}
    for position, (is_word, terms) in enumerate(_tokens(query, unigrams=False)):
        if is_word:
            word = terms[0]
            (function_words if word in STOPWORDS else words).setdefault(word)
            order.setdefault(word, position)
        else:
            for gram in terms:
                grams.setdefault(gram)
                order.setdefault(gram, position)
    chosen = list(words) if words or grams else list(function_words)
    stems = dict(zip(chosen, _STEMMER.stemWords(chosen), strict=True))
    ranked = sorted([*chosen, *grams], key=lambda term: order[term])
    return list(dict.fromkeys(stems.get(term, term) for term in ranked))


def select_terms(
    terms: Sequence[str],
    frequencies: Mapping[str, int] | None = None,
    limit: int = MAX_QUERY_TERMS,
) -> list[str]:
    """At most ``limit`` of ``terms``, the most selective, in their original order.

    Args:
        terms: distinct query terms (:func:`query_terms`).
        frequencies: records holding each term (document frequency), when the store can
            tell; a term missing from it (or with 0) matches nothing and is dropped.
            ``None``: the longest terms are kept (longer words are rarer, Zipf), ties
            by position.
        limit: most terms kept.
    """
    if frequencies is not None:
        terms = [term for term in terms if frequencies.get(term, 0) > 0]
    if len(terms) <= limit:
        return list(terms)
    position = {term: index for index, term in enumerate(terms)}
    if frequencies is not None:
        rank: Callable[[str], tuple[int, int]] = lambda t: (frequencies[t], position[t])  # noqa: E731
    else:
        rank = lambda t: (-len(t), position[t])  # noqa: E731
    kept = set(sorted(terms, key=rank)[:limit])
    return [term for term in terms if term in kept]


def bm25_idf(records: int, frequency: int) -> float:
    """BM25 IDF ``max(ln((N - df + 0.5) / (df + 0.5)), IDF_FLOOR)`` (Robertson/Sparck
    Jones, as FTS5's ``bm25()``, but floored at :data:`IDF_FLOOR` instead of 1e-6, so a
    term in about half the scope or more still counts a little and one match in a tiny
    store scores about 0.1, not 1e-6).

    Measured on LoCoMo (evidence recall@10, keyword, 30.json / 26.json): this IDF 0.680 /
    0.570; Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))`` 0.661 / 0.557 (it weighs
    frequent terms more); the floor (0.01 … 0.3) changes nothing there.

    Args:
        records: records in the scope (``N``; raised to ``frequency`` if smaller).
        frequency: records holding the term (``df``).
    """
    n = max(records, frequency)
    return max(math.log((n - frequency + 0.5) / (frequency + 0.5)), IDF_FLOOR)


def bm25(
    counts: Mapping[str, int], length: int, idf: Mapping[str, float], average_length: float
) -> float:
    """The BM25 score of one record: ``Σ idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))``.

    Args:
        counts: term -> occurrences in the record (``tf``), for the query's terms.
        length: the record's term count (``dl``, ``len(index_terms(text))``).
        idf: term -> :func:`bm25_idf` over the record's scope.
        average_length: mean term count of the scope's records (``avgdl``; > 0).

    Returns:
        A float > 0 when any query term occurs; higher is better. One matching word in a
        one-record store scores 0.1 (:data:`IDF_FLOOR`); a word in 1 of 100 records about
        4, in 1 of 10,000 about 9; scores add up over matched terms.
    """
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / max(average_length, 1e-9))
    return sum(idf[t] * tf * (BM25_K1 + 1) / (tf + norm) for t, tf in counts.items() if tf)


def _texts(value: Any, out: list[str]) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for name, child in reversed(list(item.items())):
                stack.append(child)
                stack.append(str(name))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))


def content_text(content: Any) -> str:
    """The text of a record's content: a string itself; else the JSON string values inside
    it (recursively; object keys excluded), joined by newlines; ``""`` when it has none.

    This is what a record's vector is made of (with :func:`embedding_text`'s fields).
    """
    if isinstance(content, str):
        return content
    parts: list[str] = []
    stack = [content]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list | tuple):
            stack.extend(reversed(value))
    return "\n".join(parts)


def _field_values(metadata: Mapping[str, Any] | None, fields: Sequence[str]) -> list[str]:
    values: list[str] = []
    for name in fields:
        value = (metadata or {}).get(name)
        if isinstance(value, str):
            values.append(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            values.append(str(value))
    return values


def embedding_text(
    content: Any, metadata: Mapping[str, Any] | None = None, fields: Sequence[str] = ()
) -> str:
    """The text a record's vector is made of: the values of the metadata ``fields`` (top
    level, strings and numbers, in order) then ``": "`` and :func:`content_text`; just
    the content text without fields or values (``"Jon: I opened a shop"`` for
    ``fields=["speaker"]``). ``""`` when the content has no text."""
    text = content_text(content)
    if not text.strip():
        return ""
    values = _field_values(metadata, fields)
    return f"{' '.join(values)}: {text}" if values else text


def keyword_text(
    content: Any,
    key: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    fields: Sequence[str] = (),
) -> str:
    """The text keyword search indexes for a record: its ``key``, the values of the
    metadata ``fields`` and the content — a string itself, JSON content as its object
    keys (field names) and string values, recursively — joined by newlines. Numbers,
    booleans and ``null`` are not text."""
    parts: list[str] = [] if key is None else [key]
    parts += _field_values(metadata, fields)
    _texts(content, parts)
    return "\n".join(parts)
