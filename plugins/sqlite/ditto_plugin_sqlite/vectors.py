"""Vectors of the SQLite store: embedding identity, write-side embedding, exact search.

Only a store built with an embedding provider embeds (MEM-SEARCH-6, MEM-WRITE-4): the
content's text (:func:`ditto_worker.memory.text.content_text`) is embedded before the
write transaction, and its vector is stored in
``memory_vectors`` (float32 little-endian BLOB, rowid = the record's ``seq``) in the same
transaction as the record. Content without text (``null``, a number) has no vector, so
vector search never returns it.

The database records the identity of the provider that made its vectors
(``store_settings.embedding``, set by the first store with a provider that opens it). A
provider with another identity fails every call with ``EMBEDDING_MISMATCH``; so does a
write or content update through a store *without* a provider once the database keeps
vectors (it would leave records without vectors). Changing the model is a reindex
(MEM-RET-4): ``ditto-worker reindex``, :mod:`ditto_plugin_sqlite.reembed`.

Search (:mod:`ditto_plugin_sqlite.nearest`) takes candidates from the in-memory SimHash
index (:mod:`ditto_plugin_sqlite.ann`; each vector's code is stored with it in
``memory_vector_codes``) and rescores them exactly with ``vec_distance_cosine``
(sqlite-vec); a filter that leaves fewer than ``limit`` candidates falls back to the exact
scan of the rows passing it, so a filtered search returns ``min(limit,
matches-with-vectors)`` results, never fewer. Figures: ``bench/vector_scale.py``. (A
``vec0`` KNN table was measured and left: it filters after the KNN, its time grows with
``k`` — 6 ms for k=50, 254 ms for k=800 at 100k — and its binary quantization is the
coordinates' signs.)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from ditto_plugin_sqlite.ann import put_codes
from ditto_plugin_sqlite.driver import Connection
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory import vectors as kit
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider
from ditto_worker.memory.text import content_text

__all__ = [
    "IDENTITY_SETTING",
    "claim_identity",
    "embed_contents",
    "forbid_unembedded_write",
    "mismatch_message",
    "put_vectors",
    "query_blob",
    "stored_identity",
    "unembedded",
]

IDENTITY_SETTING: Final = "embedding"
"""``store_settings.name`` of the embedding identity (JSON, EmbeddingIdentity.to_json)."""


def to_blob(vector: Sequence[float]) -> bytes:
    """float32 little-endian bytes, the format of sqlite-vec."""
    return struct.pack(f"<{len(vector)}f", *vector)


def stored_identity(conn: Connection) -> EmbeddingIdentity | None:
    """The identity recorded in the database, or ``None`` when it keeps no vectors."""
    row = conn.execute(
        "SELECT value FROM store_settings WHERE name = ?", (IDENTITY_SETTING,)
    ).fetchone()
    return None if row is None else EmbeddingIdentity.from_json(row[0])


def claim_identity(conn: Connection, identity: EmbeddingIdentity) -> EmbeddingIdentity:
    """Record ``identity`` unless one is recorded already; returns the recorded one.

    Runs in the caller's write transaction.
    """
    conn.execute(
        "INSERT OR IGNORE INTO store_settings (name, value) VALUES (?, ?)",
        (IDENTITY_SETTING, identity.to_json()),
    )
    recorded = stored_identity(conn)
    return identity if recorded is None else recorded


def mismatch_message(provider: EmbeddingIdentity | None, stored: EmbeddingIdentity) -> str:
    """The safe message of ``EMBEDDING_MISMATCH`` (identities only, no paths or URLs)."""
    return kit.mismatch_message("SQLite memory store", "plugins.sqlite.embedding", provider, stored)


def forbid_unembedded_write(conn: Connection) -> None:
    """In a store without a provider: refuse a write to a database that keeps vectors.

    Raises:
        MemoryError: ``EMBEDDING_MISMATCH`` when the database records an identity.
    """
    stored = stored_identity(conn)
    if stored is not None:
        raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, mismatch_message(None, stored))


def embed_contents(
    embedder: EmbeddingProvider,
    contents: Sequence[Any],
    text_of: Callable[[Any], str] = content_text,
) -> list[bytes | None]:
    """One vector BLOB per content (``None`` for content without text), one model batch
    (:func:`ditto_worker.memory.vectors.content_vectors`; ``text_of`` makes the text).

    Raises:
        MemoryError: the provider's ``EMBEDDING_UNAVAILABLE`` / ``EMBEDDING_MISMATCH``.
    """
    vectors = kit.content_vectors(embedder, contents, text_of)
    return [None if vector is None else to_blob(vector) for vector in vectors]


def put_vectors(conn: Connection, seqs: Sequence[int], blobs: Sequence[bytes | None]) -> None:
    """Store (or, for ``None``, remove) the vectors of records ``seqs``, and the codes of
    the stored ones (:func:`ditto_plugin_sqlite.ann.put_codes`, one batch)."""
    pairs = list(zip(seqs, blobs, strict=True))
    stored = [(seq, blob) for seq, blob in pairs if blob is not None]
    removed = [(seq,) for seq, blob in pairs if blob is None]
    if removed:
        conn.executemany("DELETE FROM memory_vectors WHERE seq = ?", removed)
    if stored:  # one prepared statement for the batch
        conn.executemany(
            "INSERT OR REPLACE INTO memory_vectors (seq, embedding) VALUES (?, ?)", stored
        )
    put_codes(conn, [seq for seq, _ in stored], [blob for _, blob in stored])


def unembedded(conn: Connection, after: int, limit: int) -> list[tuple[int, str, str | None]]:
    """Up to ``limit`` ``(seq, content JSON, metadata JSON)`` of records after ``after``
    without a vector."""
    rows = conn.execute(
        "SELECT m.seq, m.content, m.metadata FROM memories AS m WHERE m.seq > ? AND NOT EXISTS "
        "(SELECT 1 FROM memory_vectors AS v WHERE v.seq = m.seq) ORDER BY m.seq LIMIT ?",
        (after, limit),
    ).fetchall()
    return [(int(seq), str(content), meta) for seq, content, meta in rows]


def query_blob(embedder: EmbeddingProvider, query: Any) -> bytes:
    """The query vector as a BLOB (:func:`ditto_worker.memory.vectors.query_values`).

    Raises:
        MemoryError: ``INVALID_INPUT`` for another query type, an empty text or a
            non-finite/zero vector; ``EMBEDDING_MISMATCH`` for a vector of another length.
    """
    return to_blob(kit.query_values(embedder, query))
