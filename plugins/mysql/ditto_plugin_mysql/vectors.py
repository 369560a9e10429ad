"""Vectors of the MySQL store: embedding identity, write-side embedding, exact search.

Neither MySQL 8.0 nor MariaDB 10.11 has a vector type, so vectors are ``float32``
little-endian BLOBs in ``memory_vectors(scope, seq, embedding)`` (primary key ``(scope,
seq)``: a scope's vectors are one range of the clustered index), scaled to unit length
when written, and a search is an **exact scan in the plugin**: the vectors of the rows
passing the scope and the filter are streamed in chunks of :data:`SCAN_CHUNK` and ranked
by cosine similarity with numpy (``score = q · v``, in [-1, 1], higher is better,
``seq`` breaking ties), then the best ``limit`` records are read. A search therefore
returns exactly ``min(limit, matching records with vectors)``; its cost grows with the
number of vectors in the scope (every vector crosses the wire: about 1.5 KB each at 384
dims).

Only a store built with an embedding provider embeds (MEM-SEARCH-6, MEM-WRITE-4): the
text is embedded before the write transaction, its vector stored in the record's
transaction. Content without text has no vector. The database records the identity of
the provider that made its vectors (``store_settings.embedding``); a provider with
another identity fails every call with ``EMBEDDING_MISMATCH``, and so does a write or
content update through a store without a provider once the database keeps vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.sql import Sql
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory import vectors as kit
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider
from ditto_worker.memory.text import content_text

__all__ = [
    "IDENTITY_SETTING",
    "SCAN_CHUNK",
    "claim_identity",
    "embed_contents",
    "forbid_unembedded_write",
    "mismatch_message",
    "nearest",
    "stored_identity",
    "to_blob",
]

IDENTITY_SETTING: Final = "embedding"
"""``store_settings.name`` of the embedding identity (JSON)."""
SCAN_CHUNK: Final = 4096
"""Vectors fetched and ranked per round trip of a scan."""


def to_blob(vector: Sequence[float]) -> bytes:
    """The vector scaled to unit length, as float32 little-endian bytes."""
    array = np.asarray(vector, dtype="<f4")
    norm = float(np.linalg.norm(array))
    return (array / norm if norm > 0 else array).astype("<f4").tobytes()


def stored_identity(conn: Conn) -> EmbeddingIdentity | None:
    """The identity recorded in the database, or ``None`` when it keeps no vectors."""
    with conn.cursor() as cur:
        cur.execute("SELECT value FROM store_settings WHERE name = %s", [IDENTITY_SETTING])
        row = cur.fetchone()
    return None if row is None else EmbeddingIdentity.from_json(str(row[0]))


def claim_identity(conn: Conn, identity: EmbeddingIdentity) -> EmbeddingIdentity:
    """Record ``identity`` unless one is recorded; returns the recorded one (in the
    caller's transaction, first writer wins)."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT IGNORE INTO store_settings (name, value) VALUES (%s, %s)",
            [IDENTITY_SETTING, identity.to_json()],
        )
    return stored_identity(conn) or identity


def mismatch_message(provider: EmbeddingIdentity | None, stored: EmbeddingIdentity) -> str:
    """The safe message of ``EMBEDDING_MISMATCH`` (identities only)."""
    return kit.mismatch_message("MySQL memory store", "plugins.mysql.embedding", provider, stored)


def forbid_unembedded_write(conn: Conn) -> None:
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
    """One BLOB per content (``None`` for content without text), one model batch.

    Raises:
        MemoryError: the provider's ``EMBEDDING_UNAVAILABLE`` / ``EMBEDDING_MISMATCH``.
    """
    vectors = kit.content_vectors(embedder, contents, text_of)
    return [None if vector is None else to_blob(vector) for vector in vectors]


def _best(
    best: tuple[np.ndarray, np.ndarray], seqs: np.ndarray, scores: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``limit`` best of the kept and the new (score desc, seq asc)."""
    all_seqs = np.concatenate([best[0], seqs])
    all_scores = np.concatenate([best[1], scores])
    order = np.lexsort((all_seqs, -all_scores))[:limit]
    return all_seqs[order], all_scores[order]


def nearest(
    conn: Conn, query: Sequence[float], scope: int, where: Sql, limit: int
) -> list[tuple[int, float]]:
    """``(seq, score)`` of the ``limit`` records of ``scope`` passing ``where`` nearest to
    ``query``, best first (exact cosine; module docstring)."""
    q = np.asarray(query, dtype="<f4")
    q = q / max(float(np.linalg.norm(q)), 1e-30)
    best = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
    join = "" if where.text == "TRUE" else " JOIN memories AS m ON m.seq = v.seq"
    sql = (
        f"SELECT v.seq, v.embedding FROM memory_vectors AS v{join} WHERE v.scope = %s "
        f"AND v.seq > %s AND {where.text} ORDER BY v.seq LIMIT %s"
    )
    after = 0
    with conn.cursor() as cur:
        while True:
            cur.execute(sql, [scope, after, *where.params, SCAN_CHUNK])
            rows = cur.fetchall()
            if not rows:
                break
            seqs = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
            matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4")
            scores = matrix.reshape(len(rows), -1) @ q
            best = _best(best, seqs, scores.astype(np.float32), limit)
            after = int(seqs[-1])
            if len(rows) < SCAN_CHUNK:
                break
    return [(int(s), float(v)) for s, v in zip(best[0], best[1], strict=True)]
