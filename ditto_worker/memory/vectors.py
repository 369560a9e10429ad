"""Write-side and query-side embedding for store plugins (the plugin kit's vector half).

Every store that keeps vectors does the same three things; they live here once, and a
plugin only turns the resulting ``list[float]`` into its own format (an SQLite BLOB, a
pgvector literal, a Qdrant point vector):

* :func:`content_vectors` — one vector per record content (``None`` for content without
  text), one model batch (MEM-WRITE-4: only a store built with a provider embeds);
* :func:`query_values` — the query of a ``vector`` search: a text is embedded; a list of
  ``dims`` numbers is used as given, scaled to unit length (the seed's SEARCH example
  ``{query: {vector: [...]}, strategy: "vector"}`` is accepted too);
* :func:`mismatch_message` — the safe ``EMBEDDING_MISMATCH`` message (identities only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import (
    EmbeddingIdentity,
    EmbeddingProvider,
    check_vectors,
    l2_normalize,
)
from ditto_worker.memory.query_vectors import embed_text
from ditto_worker.memory.text import content_text

__all__ = ["content_vectors", "mismatch_message", "query_values"]


def content_vectors(
    embedder: EmbeddingProvider,
    contents: Sequence[Any],
    text_of: Callable[[Any], str] = content_text,
) -> list[list[float] | None]:
    """One vector per content, in order; ``None`` where the content has no text.

    Args:
        embedder: the store's provider.
        contents: record contents (any JSON).
        text_of: the text a content is indexed by (default: the keyword index's text,
            :func:`ditto_worker.memory.text.content_text`).

    Returns:
        ``len(contents)`` entries: a list of ``embedder.identity.dims`` floats, or ``None``.

    Raises:
        MemoryError: the provider's ``EMBEDDING_UNAVAILABLE`` / ``EMBEDDING_MISMATCH``.
    """
    texts = [text_of(content) for content in contents]
    wanted = [i for i, text in enumerate(texts) if text.strip()]
    vectors = embedder.embed([texts[i] for i in wanted]) if wanted else []
    check_vectors(vectors, len(wanted), embedder.identity.dims)
    out: list[list[float] | None] = [None] * len(texts)
    for index, vector in zip(wanted, vectors, strict=True):
        out[index] = list(map(float, vector))
    return out


def _number_list(query: Any) -> bool:
    return isinstance(query, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in query
    )


def query_values(embedder: EmbeddingProvider, query: Any) -> list[float]:
    """The query vector of a ``vector`` search, ``list[float]`` of ``dims``, unit length.

    A text is embedded; a list of numbers (or ``{"vector": [...]}``, the seed's shape) is
    used as given, scaled to unit length (cosine ignores the length anyway).

    Raises:
        MemoryError: ``INVALID_INPUT`` for another query type, an empty text or a
            non-finite/zero vector; ``EMBEDDING_MISMATCH`` for a vector of another length.
    """
    dims = embedder.identity.dims
    if isinstance(query, dict) and set(query) == {"vector"}:
        query = query["vector"]
    if isinstance(query, str):
        if not query.strip():
            raise MemoryError(ErrorCode.INVALID_INPUT, "vector search needs a non-empty query")
        vectors = embed_text(embedder, query)  # a coalesced batch's vector, if made
        check_vectors(vectors, 1, dims)
        return [float(x) for x in vectors[0]]
    if not _number_list(query) or not query:
        raise MemoryError(
            ErrorCode.INVALID_INPUT, "vector search needs a text or a list of numbers"
        )
    if len(query) != dims:
        raise MemoryError(
            ErrorCode.EMBEDDING_MISMATCH,
            f"the query vector has {len(query)} dims; the store uses {dims}",
        )
    if not all(math.isfinite(x) for x in query) or not any(query):
        raise MemoryError(ErrorCode.INVALID_INPUT, "the query vector must be finite and non-zero")
    return l2_normalize(query)


def mismatch_message(
    store: str, setting: str, provider: EmbeddingIdentity | None, stored: EmbeddingIdentity | None
) -> str:
    """The safe message of ``EMBEDDING_MISMATCH``: identities and the setting to change,
    never a path, URL or schema name.

    Args:
        store: what keeps the vectors, e.g. ``"SQLite memory store"``.
        setting: the config key choosing the provider, e.g. ``"plugins.sqlite.embedding"``.
        provider: the configured provider's identity (``None``: no provider).
        stored: the identity the store's vectors were made with (``None``: a store that
            keeps no vectors, e.g. a Qdrant collection created without a provider).
    """
    have = provider.describe() if provider else "no embedding provider"
    kept = f"vectors of {stored.describe()}" if stored else "no vectors"
    return (
        f"this {store} keeps {kept}, but the store is configured "
        f"with {have}; configure that provider ({setting}), or use a new store and reindex"
    )
