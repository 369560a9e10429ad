"""Keyword search of the Milvus store: the shared tokenizer's terms fed to Milvus's BM25.

Milvus's own analyzers cannot be used on the raw text: Milvus Lite has only the
``standard`` (``\\w+``, lowercased) and ``jieba`` tokenizers, and neither stems English,
splits Thai/Lao/Khmer/Myanmar or keeps a Devanagari vowel sign inside its word
("我喜欢中文" is one ``standard`` token, so "中文" never finds it). Instead each record's
text (:func:`ditto_worker.memory.text.keyword_text` of its key and content) is turned
into the project's own terms (:func:`ditto_worker.memory.text.index_terms`: NFKC + case
folding, stemmed words, grapheme-cluster bigrams for scripts without spaces), and each
term is written as one token ``t`` + 12 hex digits (the first 6 bytes of BLAKE2b of the
term), joined by spaces, into the VARCHAR field ``terms`` that the collection's BM25
function reads with the ``standard`` analyzer. Such a token is one ``\\w+`` run and one
Unicode word, so every Milvus tokenizer keeps it whole, lowercase, as written.

* A query is its distinct terms (:func:`ditto_worker.memory.text.query_terms`; of more
  than 64, the 64 longest: :func:`~ditto_worker.memory.text.select_terms`), as tokens.
* Milvus scores BM25 itself (``k1 = 1.2``, ``b = 0.75``, Lucene's IDF
  ``ln(1 + (N - df + 0.5) / (df + 0.5))``) over the statistics Milvus keeps: the whole
  collection on a server, each segment on Milvus Lite — not the call's scope (declared:
  ``keyword_scope_statistics`` is false; docs/stores-milvus.md).
* Two terms colliding on 48 bits (about 1 in 2**48 per pair) would match each other.
* A VARCHAR holds at most 65,535 bytes: a record's first :data:`MAX_TERMS` terms are
  indexed (14 bytes each), the rest of a very long text is not searchable.

:data:`TOKENIZER` names this scheme; it is recorded in the collection's metadata.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ditto_worker.memory.text import index_terms, keyword_text, query_terms, select_terms

__all__ = ["MAX_TERMS", "TOKENIZER", "document_terms", "query_text"]

TOKENIZER: Final = "ditto-text-2/blake2b48-hex/milvus-bm25"
"""The indexing scheme, recorded in the collection metadata."""
MAX_TERMS: Final = 65_535 // 14
"""Terms of one record that fit the ``terms`` VARCHAR (4,681)."""


def _token(term: str) -> str:
    return "t" + hashlib.blake2b(term.encode("utf-8"), digest_size=6).hexdigest()


def document_terms(
    content: Any,
    key: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    fields: Sequence[str] = (),
) -> str:
    """The ``terms`` text of a record's key, the values of the metadata ``fields``
    (``indexFields``) and content (``""`` when they have no words)."""
    terms = index_terms(keyword_text(content, key, metadata, fields))[:MAX_TERMS]
    return " ".join(_token(term) for term in terms)


def query_text(query: str) -> str:
    """The BM25 query text of a keyword query, ``""`` when it has no searchable word."""
    return " ".join(_token(term) for term in select_terms(query_terms(query)))
