"""Re-embedding a SQLite store under a new embedding identity (MEM-RET-4).

``ditto-worker reindex`` (through
:meth:`ditto_plugin_sqlite.SqliteMemoryStore.reembed_embeddings`) embeds every record with
the store's provider into a staging table, ``memory_vectors_next`` (same format as
``memory_vectors``), and records the target identity as ``store_settings.embedding_next``.
The live vectors and the recorded identity (``store_settings.embedding``) are untouched
meanwhile: processes of the old identity keep searching and writing the old vectors
consistently, and a process of the new identity fails with ``EMBEDDING_MISMATCH`` until
the switch. Triggers on ``memory_vectors`` drop the staged vector of any record whose
live vector another process inserts, replaces or deletes, so a record changed during
the reindex is embedded again.

The switch is one write transaction: records still without a staged vector are embedded
(the few written since the pass), the live vectors are replaced by the staged ones
through :func:`ditto_plugin_sqlite.vectors.put_vectors` (so the SimHash codes and the
change log that feeds every process's index follow), the new identity is recorded and
the staging is dropped. A killed reindex leaves the staging in place; running it again
with the same identity embeds only the records not staged yet (another identity starts
the staging over). After the switch, a process still holding the old provider fails its
next vector search or embedding write with ``EMBEDDING_MISMATCH``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from ditto_plugin_sqlite import vectors as vec
from ditto_plugin_sqlite.driver import Connection
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider

__all__ = ["NEXT_SETTING", "pending_identity", "reembed"]

NEXT_SETTING: Final = "embedding_next"
"""``store_settings.name`` of the identity an unfinished reindex is embedding into."""
_FETCH: Final = 1024
_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS memory_vectors_next (seq INTEGER PRIMARY KEY, embedding BLOB)",
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
)
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
    """Stage the vectors of records still as they were read (a record changed since has
    a newer live vector or none; it stays pending and is embedded again)."""
    for (seq, content, meta), blob in zip(rows, blobs, strict=True):
        same = conn.execute(
            "SELECT 1 FROM memories WHERE seq = ? AND content = ? AND metadata IS ?",
            (seq, content, meta),
        ).fetchone()
        if same is not None:
            conn.execute(
                "INSERT OR REPLACE INTO memory_vectors_next (seq, embedding) VALUES (?, ?)",
                (seq, blob),
            )


def _switch(conn: Connection, identity: EmbeddingIdentity, embed: Embed, batch_size: int) -> int:
    """In the caller's write transaction: stage what is left, swap the vectors in, record
    ``identity``, drop the staging. Returns the records embedded here."""
    done = 0
    while rows := _pending_in(conn, 0, batch_size):
        blobs = embed([_pair(row) for row in rows])
        _stage(conn, rows, blobs)
        done += sum(b is not None for b in blobs)
    for statement in _DROP[:3]:  # the swap itself must not clear the staging
        conn.execute(statement)
    conn.execute("DELETE FROM memory_vectors")
    for chunk in _staged(conn):
        vec.put_vectors(conn, [seq for seq, _ in chunk], [blob for _, blob in chunk])
    conn.execute(
        "INSERT OR REPLACE INTO store_settings (name, value) VALUES (?, ?)",
        (vec.IDENTITY_SETTING, identity.to_json()),
    )
    conn.execute("DELETE FROM store_settings WHERE name = ?", (NEXT_SETTING,))
    conn.execute(_DROP[3])
    return done


def _staged(conn: Connection) -> Iterator[list[tuple[int, bytes]]]:
    """The staged vectors of live records, in chunks (records without text have none)."""
    rows = conn.execute(
        "SELECT n.seq, n.embedding FROM memory_vectors_next AS n JOIN memories AS m "
        "ON m.seq = n.seq WHERE n.embedding IS NOT NULL ORDER BY n.seq"
    )
    while chunk := rows.fetchmany(_FETCH):
        yield [(int(seq), bytes(blob)) for seq, blob in chunk]
