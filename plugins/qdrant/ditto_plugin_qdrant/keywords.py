"""Keyword search of the Qdrant store: client-side sparse vectors scored by Qdrant's IDF.

Why client-side: a Qdrant full-text index (and local mode, which only has the default
word tokenizer) neither stems nor splits Chinese or Thai. Instead each record's text
(:func:`ditto_worker.memory.text.keyword_text` of its content) is tokenized by the
project's own tokenizer (:func:`ditto_worker.memory.text.index_terms`: NFKC + case
folding, grapheme-cluster words stemmed, cluster bigrams for scripts without spaces)
into a sparse vector stored under the named sparse vector :data:`SPARSE_VECTOR`,
created with ``modifier: idf``.

* Term -> dimension: the first 4 bytes of BLAKE2b of the term (a uint32); two terms of
  one document that collide are summed. A query term colliding with an unrelated
  document term (about 1 in 4 billion per pair) would match it.
* Document weight of a term: BM25's saturated term frequency
  ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with ``k1 = 1.2``,
  ``b = 0.75`` and a fixed ``avgdl`` (:data:`AVGDL` terms: Qdrant keeps no length
  statistics for a client to read).
* Query: its distinct terms (:func:`ditto_worker.memory.text.query_terms`; of more than
  64, the 64 longest: :func:`~ditto_worker.memory.text.select_terms`), each weight 1.
  Qdrant multiplies each by its IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the
  points having the sparse vector in the call's namespace (the store passes the
  namespace as the IDF corpus filter), so
  ``score = sum of idf(t) * weight(t, d)`` — BM25 with a fixed average length; positive,
  higher is better.

:data:`TOKENIZER` names this scheme; it is recorded in the collection's metadata, and a
store opening a collection made by another scheme logs a warning: its keyword vectors no
longer match the queries' terms until the records are rewritten (no automatic reindex).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Final

from qdrant_client import models

from ditto_worker.memory.text import index_terms, keyword_text, query_terms, select_terms

__all__ = ["AVGDL", "SPARSE_VECTOR", "TOKENIZER", "document_vector", "query_vector"]

SPARSE_VECTOR: Final = "keywords"
"""Name of the sparse vector (``modifier: idf``)."""
TOKENIZER: Final = "ditto-text-2/blake2b32/bm25-avgdl32"
"""The indexing scheme, recorded in the collection metadata."""
AVGDL: Final = 32.0
_K1: Final = 1.2
_B: Final = 0.75


def _dimension(term: str) -> int:
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little")


def _vector(weights: dict[int, float]) -> models.SparseVector:
    indices = sorted(weights)
    return models.SparseVector(indices=indices, values=[weights[i] for i in indices])


def document_vector(content: Any, key: str | None = None) -> models.SparseVector | None:
    """The sparse vector of a record's key and content, or ``None`` when they have no words."""
    counts = Counter(index_terms(keyword_text(content, key)))
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
    terms = select_terms(query_terms(query))
    if not terms:
        return None
    return _vector({_dimension(term): 1.0 for term in terms})
