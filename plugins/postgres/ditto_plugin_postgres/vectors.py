"""Vectors of the PostgreSQL store (pgvector): identity, write-side embedding, search SQL.

Only a store built with an embedding provider embeds (MEM-SEARCH-6, MEM-WRITE-4): the
content's text (:func:`ditto_worker.memory.text.content_text`) is embedded before the
write transaction and stored in ``memory_vectors`` in the
same transaction as the record. Content without text (``null``, a number) has no vector,
so vector search never returns it.

Schema: migration 2 creates ``store_settings(name, value)`` and the ``vector`` extension
(when the server has it). The first store with a provider that opens the schema records
its identity (``store_settings.embedding``, :meth:`EmbeddingIdentity.to_json`) and, in the
same transaction, creates::

    memory_vectors(seq bigint PRIMARY KEY REFERENCES memories ON DELETE CASCADE,
                   embedding vector(<dims>) NOT NULL)
    memory_vectors_hnsw USING hnsw (embedding vector_cosine_ops)   -- dims <= 2000

so the dims are fixed by that identity. A provider with another identity fails every call
with ``EMBEDDING_MISMATCH``; so does a write or content update through a store *without*
a provider once the schema keeps vectors. Vectors are never padded or truncated.

Search (:func:`vector_search`): ``ORDER BY embedding <=> q LIMIT k`` with
``hnsw.iterative_scan = relaxed_order`` (pgvector >= 0.8; older versions stop at
``ef_search`` candidates) and ``hnsw.ef_search = clamp(k, 40, 1000)``; the planner picks
the HNSW index or an exact scan of the filtered rows, and the page is re-sorted by exact
distance. With a filter the index scan visits at most :data:`FILTERED_SCAN_TUPLES`
tuples. When that returns fewer than ``k`` rows (the HNSW scan stopped at
``hnsw.max_scan_tuples`` or ``ef_search`` under a selective filter), an
exact scan of the rows passing the filter replaces it, so a filtered search always
returns ``min(limit, matching records with vectors)``. Ranking through the HNSW index is
approximate (its recall); the count is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import psycopg

from ditto_plugin_postgres.sql import Sql
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory import vectors as kit
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider
from ditto_worker.memory.text import content_text

__all__ = [
    "HNSW_MAX_DIMS",
    "IDENTITY_SETTING",
    "claim_identity",
    "embed_contents",
    "forbid_unembedded_write",
    "identity_gate",
    "iterative_scans",
    "mismatch_message",
    "query_vector",
    "stored_identity",
    "stored_text",
    "to_literal",
    "vector_search",
]

IDENTITY_SETTING: Final = "embedding"
"""``store_settings.name`` of the embedding identity (JSON)."""
FILTERED_SCAN_TUPLES: Final = 2000
"""``hnsw.max_scan_tuples`` of a filtered search (at least ``20 * limit``): a filter that
keeps fewer rows than the index scan would need falls back to the exact scan sooner."""
HNSW_MAX_DIMS: Final = 2000
"""pgvector's HNSW limit for ``vector``; a wider space is searched exactly (no index)."""


def to_literal(vector: Sequence[float]) -> str:
    """The pgvector text form ``[x,y,…]`` (``repr`` of a float round-trips)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def stored_text(conn: psycopg.Connection, schema: str) -> str | None:
    """The identity recorded in the schema as stored (JSON), or ``None``."""
    row = conn.execute(
        f"SELECT value FROM {schema}.store_settings WHERE name = %s", [IDENTITY_SETTING]
    ).fetchone()
    return None if row is None else str(row[0])


def stored_identity(conn: psycopg.Connection, schema: str) -> EmbeddingIdentity | None:
    """The identity recorded in the schema, or ``None`` when it keeps no vectors."""
    text = stored_text(conn, schema)
    return None if text is None else EmbeddingIdentity.from_json(text)


def identity_gate(schema: str, text: str) -> Sql:
    """A condition true only while the schema records the identity ``text`` (as
    stored): evaluated in the search statement's own snapshot, so a search never ranks
    the vectors of one identity with a query vector of another (a reindex's switch,
    :mod:`ditto_plugin_postgres.reembed`)."""
    return Sql(
        f"EXISTS (SELECT 1 FROM {schema}.store_settings AS g WHERE g.name = %s AND g.value = %s)",
        [IDENTITY_SETTING, text],
    )


def claim_identity(
    conn: psycopg.Connection, schema: str, identity: EmbeddingIdentity
) -> EmbeddingIdentity:
    """Record ``identity`` and create the vectors table unless an identity is recorded;
    returns the recorded one. Runs in the caller's transaction, under its write lock.

    Raises:
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the server has no pgvector.
    """
    recorded = stored_identity(conn, schema)
    if recorded is not None:
        return recorded
    has_vector = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if has_vector is None:
        raise MemoryError(
            "EMBEDDING_UNAVAILABLE",
            "the PostgreSQL server has no pgvector extension (CREATE EXTENSION vector)",
        )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {schema}.memory_vectors (seq bigint PRIMARY KEY "
        f"REFERENCES {schema}.memories (seq) ON DELETE CASCADE, "
        f"embedding vector({int(identity.dims)}) NOT NULL)"
    )
    if identity.dims <= HNSW_MAX_DIMS:
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS memory_vectors_hnsw ON {schema}.memory_vectors "
            "USING hnsw (embedding vector_cosine_ops)"
        )
    conn.execute(
        f"INSERT INTO {schema}.store_settings (name, value) VALUES (%s, %s)",
        [IDENTITY_SETTING, identity.to_json()],
    )
    return identity


def iterative_scans(conn: psycopg.Connection) -> bool:
    """Whether the server's pgvector has ``hnsw.iterative_scan`` (0.8.0 and later)."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    parts = [int(p) if p.isdigit() else 0 for p in str(row[0] if row else "0").split(".")]
    return tuple(parts[:2]) >= (0, 8)


def mismatch_message(provider: EmbeddingIdentity | None, stored: EmbeddingIdentity) -> str:
    """The safe message of ``EMBEDDING_MISMATCH`` (identities only, no URL or schema)."""
    return kit.mismatch_message(
        "PostgreSQL memory store", "plugins.postgres.embedding", provider, stored
    )


def forbid_unembedded_write(conn: psycopg.Connection, schema: str) -> None:
    """In a store without a provider: refuse a write to a schema that keeps vectors.

    Raises:
        MemoryError: ``EMBEDDING_MISMATCH`` when the schema records an identity.
    """
    stored = stored_identity(conn, schema)
    if stored is not None:
        raise MemoryError(ErrorCode.EMBEDDING_MISMATCH, mismatch_message(None, stored))


def embed_contents(
    embedder: EmbeddingProvider,
    contents: Sequence[Any],
    text_of: Callable[[Any], str] = content_text,
) -> list[str | None]:
    """One vector literal per content (``None`` for content without text), one batch
    (:func:`ditto_worker.memory.vectors.content_vectors`).

    Raises:
        MemoryError: the provider's ``EMBEDDING_UNAVAILABLE`` / ``EMBEDDING_MISMATCH``.
    """
    vectors = kit.content_vectors(embedder, contents, text_of)
    return [None if vector is None else to_literal(vector) for vector in vectors]


def query_vector(embedder: EmbeddingProvider, query: Any) -> str:
    """The query vector literal (:func:`ditto_worker.memory.vectors.query_values`).

    Raises:
        MemoryError: ``INVALID_INPUT`` for another query type, an empty text or a
            non-finite/zero vector; ``EMBEDDING_MISMATCH`` for a vector of another length.
    """
    return to_literal(kit.query_values(embedder, query))


def vector_search(
    conn: psycopg.Connection, schema: str, columns: str, literal: str, where: Sql, limit: int,
    iterative: bool = True, selective: bool | None = None, exact: bool = False,
) -> list[tuple[Any, ...]]:  # fmt: skip
    """Rows ``(columns…, score)`` of the ``limit`` nearest records passing ``where``, by
    descending cosine similarity (``score = 1 - cosine distance``), ``seq`` breaking ties;
    ``min(limit, matches)`` of them (see the module docstring). ``iterative``: the server
    has iterative index scans (:func:`iterative_scans`); ``selective``: ``where`` may
    select few rows (default: any ``where`` but ``true``); ``exact``: skip the index and
    rank every row passing ``where`` (the caller knows they are few: a small scope)."""
    if iterative:
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        if where.text != "true" if selective is None else selective:  # give up early: the
            # exact scan over few rows is cheap
            conn.execute(
                f"SET LOCAL hnsw.max_scan_tuples = {max(FILTERED_SCAN_TUPLES, 20 * limit)}"
            )
    conn.execute(f"SET LOCAL hnsw.ef_search = {min(max(limit, 40), 1000)}")
    base = (
        f"FROM {schema}.memory_vectors AS v JOIN {schema}.memories AS m ON m.seq = v.seq "
        f"WHERE {where.text}"
    )
    knn = (
        f"WITH k AS MATERIALIZED (SELECT {columns}, v.embedding <=> %s::vector AS d {base} "
        "ORDER BY d LIMIT %s) SELECT k.*, 1.0 - k.d AS score FROM k ORDER BY k.d + 0, k.seq"
    )
    rows = [] if exact else conn.execute(knn, [literal, *where.params, limit]).fetchall()
    if exact or len(rows) < limit:  # the index scan gave up early: rank every matching record
        scan = (
            f"SELECT {columns}, v.embedding <=> %s::vector AS d, "
            f"1.0 - (v.embedding <=> %s::vector) AS score {base} "
            "ORDER BY score DESC, m.seq LIMIT %s"
        )
        rows = conn.execute(scan, [literal, literal, *where.params, limit]).fetchall()
    return [(*row[:-2], row[-1]) for row in rows]
