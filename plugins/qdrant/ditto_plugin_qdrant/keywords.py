"""Keyword search of the Qdrant store: client-side sparse vectors scored by Qdrant's IDF.

Why client-side: a Qdrant full-text index (and local mode, which only has the default
word tokenizer) neither stems nor splits Chinese or Thai. Instead each record's text
(:func:`ditto_worker.memory.text.content_text`) is tokenized by the project's own
tokenizer (:mod:`ditto_worker.memory.text`: letter/digit runs lower-cased, CJK runs as
unigrams and overlapping bigrams) into a sparse vector stored under the named sparse
vector :data:`SPARSE_VECTOR`, created with ``modifier: idf``.

* Term -> dimension: the first 4 bytes of BLAKE2b of the term (a uint32); two terms of
  one document that collide are summed. A query term colliding with an unrelated
  document term (about 1 in 4 billion per pair) would match it.
* Document weight of a term: BM25's saturated term frequency
  ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with ``k1 = 1.2``,
  ``b = 0.75`` and a fixed ``avgdl`` (:data:`AVGDL` terms: Qdrant keeps no length
  statistics for a client to read).
* Query: its distinct terms (English function words dropped unless nothing else is left;
  CJK runs as bigrams), each weight 1. Qdrant multiplies each by its IDF
  ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the points having the sparse vector (every
  namespace of the collection), so ``score = sum of idf(t) * weight(t, d)`` — BM25 with a
  fixed average length; positive, higher is better.

:data:`TOKENIZER` names this scheme; it is recorded in the collection's metadata.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Final

from qdrant_client import models

from ditto_worker.memory.text import MAX_QUERY_TERMS, STOPWORDS, TOKENS, cjk_grams, content_text

__all__ = ["AVGDL", "SPARSE_VECTOR", "TOKENIZER", "document_vector", "query_vector"]

SPARSE_VECTOR: Final = "keywords"
"""Name of the sparse vector (``modifier: idf``)."""
TOKENIZER: Final = "ditto-text/blake2b32/bm25-avgdl32"
"""The indexing scheme, recorded in the collection metadata."""
AVGDL: Final = 32.0
_K1: Final = 1.2
_B: Final = 0.75


def _dimension(term: str) -> int:
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little")


def _terms(text: str, unigrams: bool) -> list[str]:
    terms: list[str] = []
    for match in TOKENS.finditer(text):
        if match.group(1):
            terms += cjk_grams(match.group(1), unigrams)
        else:
            terms.append(match.group(2).lower())
    return terms


def _vector(weights: dict[int, float]) -> models.SparseVector:
    indices = sorted(weights)
    return models.SparseVector(indices=indices, values=[weights[i] for i in indices])


def document_vector(content: Any) -> models.SparseVector | None:
    """The sparse vector of a record's content, or ``None`` when it has no words."""
    counts = Counter(_terms(content_text(content), unigrams=True))
    if not counts:
        return None
    length = sum(counts.values())
    norm = _K1 * (1 - _B + _B * length / AVGDL)
    weights: dict[int, float] = {}
    for term, tf in counts.items():
        dimension = _dimension(term)
        weights[dimension] = weights.get(dimension, 0.0) + tf * (_K1 + 1) / (tf + norm)
    return _vector(weights)


def query_vector(query: str) -> models.SparseVector | None:
    """The sparse vector of a keyword query, or ``None`` when it has no searchable word."""
    words: dict[str, None] = {}
    function_words: dict[str, None] = {}
    grams: dict[str, None] = {}
    for match in TOKENS.finditer(query):
        if match.group(1):
            grams.update(dict.fromkeys(cjk_grams(match.group(1), unigrams=False)))
        else:
            word = match.group(2).lower()
            (function_words if word in STOPWORDS else words)[word] = None
    terms = [*(words or ({} if grams else function_words)), *grams][:MAX_QUERY_TERMS]
    if not terms:
        return None
    return _vector({_dimension(term): 1.0 for term in terms})
