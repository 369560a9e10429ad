"""Keyword-search text primitives shared by the store plugins (SQLite, PostgreSQL, in-memory).

* :data:`TOKENS`: a query or a record is tokenized into runs of CJK characters (Han, kana,
  Hangul; group 1) and runs of other letters/digits (group 2). Everything else — quotes,
  operators of any search syntax, punctuation — separates tokens, so a raw question is
  never search syntax.
* :func:`cjk_grams`: a CJK run as overlapping bigrams (plus unigrams), so Chinese written
  without spaces is found by a 2-character query (neither unicode61 nor trigram
  tokenizers do that alone).
* :data:`STOPWORDS`: English function words a keyword query drops unless nothing else is
  left (OR-ed, they rank every record saying "what" or "the"). Measured on the LoCoMo
  sample (``data/locomo/30.json``, evidence recall@10, SQLite FTS5): plain 0.55, porter
  stemming 0.62, porter + stopwords 0.67.
* :func:`content_text`: the text of a record's content — the string itself, else the JSON
  string values inside it (recursively, object keys excluded) joined by newlines.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["CJK", "MAX_QUERY_TERMS", "STOPWORDS", "TOKENS", "cjk_grams", "content_text"]

CJK: Final = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff"
)
"""Character ranges treated as CJK (a regex character-class body)."""
TOKENS: Final = re.compile(rf"([{CJK}]+)|((?:(?![{CJK}])[^\W_])+)")
"""Group 1: a CJK run; group 2: a run of other letters/digits."""
MAX_QUERY_TERMS: Final = 64
"""At most this many distinct terms of a query are used."""

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
    """The text of a record's content (see the module docstring); ``""`` when it has none."""
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


def cjk_grams(run: str, unigrams: bool) -> list[str]:
    """A CJK run's overlapping bigrams, preceded by its characters when ``unigrams`` (or when
    the run is one character long)."""
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    if unigrams or len(run) == 1:
        return list(run) + bigrams
    return bigrams
