"""Vectors of the MySQL store: embedding identity, write-side embedding, exact search.

Neither MySQL 8.0 nor MariaDB 10.11 has a vector type, so vectors are ``float32``
little-endian BLOBs in ``memory_vectors(scope, seq, embedding)`` (primary key ``(scope,
seq)``: a scope's vectors are one range of the clustered index), scaled to unit length
when written, and a search is an **exact scan in the plugin**: the vectors of the rows
passing the scope and the filter are read in chunks of about :data:`SCAN_CHUNK` and
ranked by cosine similarity with numpy (``score = q · v``, in [-1, 1], higher is better,
``seq`` breaking ties), then the best ``limit`` records are read. A search therefore
returns exactly ``min(limit, matching records with vectors)``; its cost grows with the
number of vectors in the scope (every vector crosses the wire: about 1.5 KB each at 384
dims). Each chunk comes back as **one row** (``GROUP_CONCAT`` of the seqs and of the
BLOBs, sized under the server's ``max_allowed_packet``): PyMySQL parses rows in Python,
about 16 µs a row, which made row-per-vector reads cost more than the bytes (5,000
vectors: 80 ms of parsing vs 8 ms as chunks). A chunk the server cut short
(``group_concat_max_len``, ``max_allowed_packet``) is read again row by row.

Only a store built with an embedding provider embeds (MEM-SEARCH-6, MEM-WRITE-4): the
text is embedded before the write transaction, its vector stored in the record's
transaction. Content without text has no vector. The database records the identity of
the provider that made its vectors (``store_settings.embedding``); a provider with
another identity fails every call with ``EMBEDDING_MISMATCH``, and so does a write or
content update through a store without a provider once the database keeps vectors.
``ditto-worker reindex`` moves the database to another identity: the live vectors are in
``memory_vectors`` or ``memory_vectors_b``, named by ``store_settings.vectors_table``
(:func:`live_table`, :mod:`ditto_plugin_mysql.reembed`).
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
    "CONCAT_MAX_BYTES",
    "SCAN_CHUNK",
    "TABLES",
    "TABLE_OPTIONS",
    "TABLE_SETTING",
    "live_table",
    "other_table",
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
"""Most vectors fetched and ranked per round trip of a scan."""
_CHUNK_BYTES: Final = 8 << 20
"""Most bytes of vectors per chunk (under every default ``max_allowed_packet``)."""
CONCAT_MAX_BYTES: Final = 2 * _CHUNK_BYTES
"""The session's ``group_concat_max_len`` during a scan (a denser window than estimated
may need more; it is then read row by row)."""


TABLE_SETTING: Final = "vectors_table"
"""``store_settings.name`` of the table holding the live vectors (absent: the first)."""
TABLES: Final = ("memory_vectors", "memory_vectors_b")
"""The two tables the live vectors alternate between, one reindex after another."""
TABLE_OPTIONS: Final = (
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin ROW_FORMAT=DYNAMIC"
)


def live_table(
    conn: Conn, lock: bool, update: bool = False
) -> tuple[str, EmbeddingIdentity | None]:
    """``(table of the live vectors, recorded identity)``. ``lock``: a locking read (the
    latest committed rows, held ``LOCK IN SHARE MODE`` until the transaction ends, so a
    reindex's switch waits for the caller or the caller for it; ``update``: ``FOR
    UPDATE``, the switch's own)."""
    mode = (" FOR UPDATE" if update else " LOCK IN SHARE MODE") if lock else ""
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT name, value FROM store_settings WHERE name IN (%s, %s){mode}",
            [IDENTITY_SETTING, TABLE_SETTING],
        )
        rows = {str(name): str(value) for name, value in cur.fetchall()}
    table = rows.get(TABLE_SETTING, TABLES[0])
    if table not in TABLES:
        raise MemoryError(ErrorCode.MEMORY_BACKEND_ERROR, "the MySQL vectors table is unknown")
    text = rows.get(IDENTITY_SETTING)
    return table, None if text is None else EmbeddingIdentity.from_json(text)


def other_table(table: str) -> str:
    """The table of :data:`TABLES` that is not ``table``."""
    return TABLES[1] if table == TABLES[0] else TABLES[0]


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


def _chunk(cur: Any, sql: str, params: list[Any], width: int) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of one ``seq`` window as ``(seqs, matrix)``: one row of
    ``GROUP_CONCAT`` (module docstring), or row by row when the server cut it short."""
    cur.execute(
        "SELECT COUNT(*), GROUP_CONCAT(v.seq), GROUP_CONCAT(v.embedding SEPARATOR '') " + sql,
        params,
    )
    count, seq_text, blob = cur.fetchone() or (0, None, None)
    if not count:
        return np.empty(0, dtype=np.int64), np.empty((0, width), dtype="<f4")
    text = seq_text.decode() if isinstance(seq_text, bytes | bytearray) else str(seq_text)
    seqs = np.array(text.split(","), dtype=np.int64)
    if blob is not None and len(seqs) == count and len(blob) == count * width * 4:
        return seqs, np.frombuffer(bytes(blob), dtype="<f4").reshape(count, width)
    cur.execute("SELECT v.seq, v.embedding " + sql, params)  # cut short: the rows themselves
    rows = cur.fetchall()
    seqs = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4")
    return seqs, matrix.reshape(len(rows), width)


def nearest(
    conn: Conn, query: Sequence[float], scope: int, where: Sql, limit: int,
    table: str = TABLES[0],
) -> list[tuple[int, float]]:  # fmt: skip
    """``(seq, score)`` of the ``limit`` records of ``scope`` passing ``where`` nearest to
    ``query``, best first (exact cosine; module docstring).

    The scope's vectors are read in windows of ``seq`` sized from the scope's density to
    hold about :data:`SCAN_CHUNK` vectors (no ``ORDER BY … LIMIT``: on a BLOB column it
    makes the server copy the rows into a temporary table first)."""
    q = np.asarray(query, dtype="<f4")
    q = q / max(float(np.linalg.norm(q)), 1e-30)
    best = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
    join = "" if where.text == "TRUE" else " JOIN memories AS m ON m.seq = v.seq"
    sql = (
        f"FROM {table} AS v{join} WHERE v.scope = %s AND v.seq > %s AND v.seq <= %s "
        f"AND {where.text}"
    )
    rows = max(1, min(SCAN_CHUNK, _CHUNK_BYTES // (4 * len(q))))
    with conn.cursor() as cur:
        cur.execute("SET SESSION group_concat_max_len = %s", [CONCAT_MAX_BYTES])
        cur.execute(f"SELECT COUNT(*), MIN(seq), MAX(seq) FROM {table} WHERE scope = %s", [scope])
        count, low, high = cur.fetchone() or (0, None, None)
        if not count:
            return []
        window = max(rows, rows * (int(high) - int(low) + 1) // int(count))
        for after in range(int(low) - 1, int(high), window):
            params = [scope, after, after + window, *where.params]
            seqs, matrix = _chunk(cur, sql, params, len(q))
            if len(seqs):
                best = _best(best, seqs, (matrix @ q).astype(np.float32), limit)
    return [(int(s), float(v)) for s, v in zip(best[0], best[1], strict=True)]
