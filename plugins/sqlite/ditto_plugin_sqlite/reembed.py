"""Re-embedding a SQLite store under a new embedding identity (MEM-RET-4).

``ditto-worker reindex`` (through
:meth:`ditto_plugin_sqlite.SqliteMemoryStore.reembed_embeddings`) embeds every record with
the store's provider into staging tables, ``memory_vectors_next`` and
``memory_vector_codes_next`` (the formats of ``memory_vectors`` and of the SimHash codes
of :mod:`ditto_plugin_sqlite.ann`; an empty BLOB marks a record without text), one write
transaction per batch, and records the target identity as
``store_settings.embedding_next``. The live vectors and the recorded identity
(``store_settings.embedding``) are untouched meanwhile: processes of the old identity keep
searching and writing the old vectors consistently, and a process of the new identity
fails with ``EMBEDDING_MISMATCH`` until the switch. Triggers on ``memory_vectors`` drop
the staged vector of any record whose live vector another process inserts, replaces or
deletes, so a record changed during the reindex is embedded again.

The switch is one short write transaction: records still without a staged vector are
embedded (the few written since the pass), the staging tables take the place of
``memory_vectors`` and ``memory_vector_codes`` (``DROP TABLE`` + ``ALTER TABLE ...
RENAME``: no vector is copied, so writers of other processes wait far less than for a
rewrite of every vector), the code and change-log triggers are created on the new table,
the change log is cut so that every process reloads its in-memory index from the new
codes, and the new identity is recorded. A killed reindex leaves the staging in place;
running it again with the same identity embeds only the records not staged yet (another
identity starts the staging over). After the switch, a process still holding the old
provider fails its next vector search or embedding write with ``EMBEDDING_MISMATCH``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from ditto_plugin_sqlite import vectors as vec
from ditto_plugin_sqlite.ann import code_bytes, create_index_tables
from ditto_plugin_sqlite.driver import Connection
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider

__all__ = ["NEXT_SETTING", "pending_identity", "reembed"]

NEXT_SETTING: Final = "embedding_next"
"""``store_settings.name`` of the identity an unfinished reindex is embedding into."""
_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS memory_vectors_next (seq INTEGER PRIMARY KEY, embedding BLOB "
    "NOT NULL)",
    "CREATE TABLE IF NOT EXISTS memory_vector_codes_next (seq INTEGER PRIMARY KEY, code BLOB "
    "NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_next_insert AFTER INSERT ON memory_vectors "
    "BEGIN DELETE FROM memory_vectors_next WHERE seq = new.seq; END",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_next_update AFTER UPDATE ON memory_vectors "
    "BEGIN DELETE FROM memory_vectors_next WHERE seq = new.seq; END",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_next_delete AFTER DELETE ON memory_vectors "
    "BEGIN DELETE FROM memory_vectors_next WHERE seq = old.seq; END",
)
_DROP: Final = (
    "DROP TRIGGER IF EXISTS memory_vectors_next_insert",
    "DROP TRIGGER IF EXISTS memory_vectors_next_update",
    "DROP TRIGGER IF EXISTS memory_vectors_next_delete",
    "DROP TABLE IF EXISTS memory_vectors_next",
    "DROP TABLE IF EXISTS memory_vector_codes_next",
)
_NONE: Final = b""
"""The staged "vector" of a record without text (dropped at the switch)."""
_PENDING: Final = (
    "SELECT m.seq, m.content, m.metadata FROM memories AS m WHERE m.seq > ? AND NOT EXISTS "
    "(SELECT 1 FROM memory_vectors_next AS n WHERE n.seq = m.seq) ORDER BY m.seq LIMIT ?"
)
Transaction = Callable[[bool], AbstractContextManager[Connection]]
Embed = Callable[[Sequence[tuple[Any, Any]]], list[bytes | None]]


def reembed(
    transaction: Transaction, embedder: EmbeddingProvider, embed: Embed, batch_size: int
) -> int:
    """Re-embed every record under ``embedder``'s identity and switch to it (module doc).

    Args:
        transaction: opens a transaction on the store's file (``True``: a write one),
            without the store's identity check.
        embedder: the provider of the new identity.
        embed: BLOBs (``None``: no text) of ``(content, metadata)`` pairs by ``embedder``.
        batch_size: records per model batch and per write transaction (≥ 1).

    Returns:
        The number of records embedded by this run (0 when the identity is already
        recorded and no reindex is pending).

    Raises:
        MemoryError: the provider's ``EMBEDDING_UNAVAILABLE``; a driver error as
            ``MEMORY_BACKEND_ERROR`` (the staging stays: run again to finish).
    """
    if not _begin(transaction, embedder.identity):
        return 0
    done, after = 0, 0
    while rows := _pending(transaction, after, batch_size):
        blobs = embed([_pair(row) for row in rows])
        with transaction(True) as conn:
            _stage(conn, rows, blobs)
        done, after = done + sum(b is not None for b in blobs), int(rows[-1][0])
    with transaction(True) as conn:
        done += _switch(conn, embedder.identity, embed, batch_size)
    return done


def pending_identity(conn: Connection) -> EmbeddingIdentity | None:
    """The identity an unfinished reindex embeds into, or ``None``."""
    row = conn.execute(
        "SELECT value FROM store_settings WHERE name = ?", (NEXT_SETTING,)
    ).fetchone()
    return None if row is None else EmbeddingIdentity.from_json(row[0])


def _begin(transaction: Transaction, identity: EmbeddingIdentity) -> bool:
    """Start (or resume) the staging for ``identity``; ``False`` when nothing is to do."""
    with transaction(True) as conn:
        stored, pending = vec.stored_identity(conn), pending_identity(conn)
        if pending is None and stored in (None, identity):
            return False  # a new database claims the identity at its first write
        if pending is not None and pending != identity:
            for statement in _DROP:  # another target: start over
                conn.execute(statement)
        for statement in _DDL:
            conn.execute(statement)
        conn.execute(
            "INSERT OR REPLACE INTO store_settings (name, value) VALUES (?, ?)",
            (NEXT_SETTING, identity.to_json()),
        )
    return True


def _pending(transaction: Transaction, after: int, limit: int) -> list[tuple[int, str, str | None]]:
    with transaction(False) as conn:
        return _pending_in(conn, after, limit)


def _pending_in(conn: Connection, after: int, limit: int) -> list[tuple[int, str, str | None]]:
    """Up to ``limit`` records after ``after`` without a staged vector."""
    rows = conn.execute(_PENDING, (after, limit)).fetchall()
    return [(int(seq), str(content), meta) for seq, content, meta in rows]


def _pair(row: tuple[int, str, str | None]) -> tuple[Any, Any]:
    return json.loads(row[1]), None if row[2] is None else json.loads(row[2])


def _stage(
    conn: Connection,
    rows: Sequence[tuple[int, str, str | None]],
    blobs: Sequence[bytes | None],
) -> None:
    """Stage the vectors (and their SimHash codes, :func:`ditto_plugin_sqlite.ann.code_bytes`)
    of records still as they were read (a record changed since has a newer live vector or
    none; it stays pending and is embedded again)."""
    kept: list[tuple[int, bytes]] = []
    for (seq, content, meta), blob in zip(rows, blobs, strict=True):
        same = conn.execute(
            "SELECT 1 FROM memories WHERE seq = ? AND content = ? AND metadata IS ?",
            (seq, content, meta),
        ).fetchone()
        if same is not None:
            kept.append((seq, _NONE if blob is None else blob))
    conn.executemany(
        "INSERT OR REPLACE INTO memory_vectors_next (seq, embedding) VALUES (?, ?)", kept
    )
    vectors = [(seq, blob) for seq, blob in kept if blob]
    if vectors:
        codes = code_bytes([blob for _, blob in vectors])
        conn.executemany(
            "INSERT OR REPLACE INTO memory_vector_codes_next (seq, code) VALUES (?, ?)",
            [(seq, code.tobytes()) for (seq, _), code in zip(vectors, codes, strict=True)],
        )


def _switch(conn: Connection, identity: EmbeddingIdentity, embed: Embed, batch_size: int) -> int:
    """In the caller's write transaction: stage what is left, put the staging tables in
    place of ``memory_vectors`` and ``memory_vector_codes`` (renames: no vector is
    copied), record ``identity``; every process's index reloads (module doc). Returns
    the records embedded here."""
    done = 0
    while rows := _pending_in(conn, 0, batch_size):
        blobs = embed([_pair(row) for row in rows])
        _stage(conn, rows, blobs)
        done += sum(b is not None for b in blobs)
    for statement in _DROP[:3]:  # the swap itself must not clear the staging
        conn.execute(statement)
    conn.execute(
        "DELETE FROM memory_vectors_next WHERE embedding = x'' OR embedding IS NULL OR seq NOT IN "
        "(SELECT seq FROM memories)"
    )
    conn.execute(
        "DELETE FROM memory_vector_codes_next WHERE seq NOT IN (SELECT seq FROM "
        "memory_vectors_next)"
    )
    conn.execute("DROP TABLE memory_vectors")  # and its triggers
    conn.execute("DROP TABLE IF EXISTS memory_vector_codes")
    conn.execute("ALTER TABLE memory_vector_codes_next RENAME TO memory_vector_codes")
    conn.execute("ALTER TABLE memory_vectors_next RENAME TO memory_vectors")
    create_index_tables(conn)  # the code and change-log triggers on the new table
    # two entries, then only the last kept: every process finds entries it has not seen
    # pruned and reloads its index from the new tables (ann.VectorIndex.sync)
    conn.execute("INSERT INTO memory_vector_log (seq) VALUES (0), (0)")
    conn.execute("DELETE FROM memory_vector_log WHERE id < (SELECT max(id) FROM memory_vector_log)")
    conn.execute(
        "INSERT OR REPLACE INTO store_settings (name, value) VALUES (?, ?)",
        (vec.IDENTITY_SETTING, identity.to_json()),
    )
    conn.execute("DELETE FROM store_settings WHERE name = ?", (NEXT_SETTING,))
    return done
