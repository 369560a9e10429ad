"""Re-embedding a MySQL/MariaDB database under a new embedding identity (MEM-RET-4).

The live vectors are in one of two tables, ``memory_vectors`` or ``memory_vectors_b``,
named by ``store_settings.vectors_table`` (absent: ``memory_vectors``); every vector
read and write looks the name up in its own transaction (:func:`live_table`).
``ditto-worker reindex`` (through
:meth:`ditto_plugin_mysql.MysqlMemoryStore.reembed_embeddings`) fills the other table
and then switches the name and the identity in one short transaction:

* **Staging:** the other table is made anew (``embedding`` may be ``NULL``: no text;
  ``digest``: SHA-256 of the record's ``content`` and ``metadata`` as they were
  embedded) and the target identity recorded as ``store_settings.embedding_next``. A
  record is pending while it has no staged row or its digest is not its current one, so
  a record another process changes meanwhile is embedded again, without triggers or
  locks (a rerun with the same identity resumes; another identity starts over).
* **Switch** (``READ COMMITTED``): the ``sequence`` row (writers of new records queue
  there) and the identity rows are locked ``FOR UPDATE`` (updates and deletes wait when
  they read the table name ``LOCK IN SHARE MODE``), the last pending records are
  embedded, staged rows of deleted records and records without text are dropped, the
  name and identity are recorded. After the commit, the old table is dropped.

Until the switch the database stays in its old identity. After it, an old-model process
fails its next embedding write (the identity is read in the write's transaction) or
vector search (read before the scan; a search whose table was dropped under it reads it
again) with ``EMBEDDING_MISMATCH``; a new-model process that opened the database before
reads the identity again at each call while it mismatches. One run per database at a
time (``GET_LOCK``; a second gets ``CONFLICT``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from ditto_plugin_mysql import vectors as vec
from ditto_plugin_mysql.db import Conn
from ditto_plugin_mysql.settings import lock_sequence, read_setting
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider

__all__ = ["NEXT_SETTING", "Reembedding"]

NEXT_SETTING: Final = "embedding_next"
"""``store_settings.name`` of the identity an unfinished reindex is embedding into."""
_DIGEST: Final = "UNHEX(SHA2(CONCAT_WS(0x1f, m.content, IFNULL(m.metadata, '')), 256))"
Embed = Callable[[Sequence[tuple[Any, Any]]], list[bytes | None]]
Row = tuple[int, int, str, str | None, bytes]


class Reembedding:
    """One run of the re-embedding of the database behind ``connect()`` (a new autocommit
    connection to it) into ``embedder``'s identity (module doc)."""

    def __init__(
        self, connect: Callable[[], Any], embedder: EmbeddingProvider, embed: Embed,
        batch_size: int,
    ) -> None:  # fmt: skip
        self._connect, self._embed, self._batch = connect, embed, batch_size
        self._identity: EmbeddingIdentity = embedder.identity

    def run(self, guard: Conn, database: str) -> int:
        """Stage, then switch; the number of records embedded (0 when the identity is
        already recorded and nothing is pending).

        Raises:
            MemoryError: ``CONFLICT`` while another run holds the database.
        """
        with guard.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 0)", [f"ditto_reindex:{database}"])
            held = cur.fetchone()
        if held is None or held[0] != 1:
            raise MemoryError(ErrorCode.CONFLICT, "another reindex of this store is running")
        staging = self._begin()
        if staging is None:
            return 0
        done = self._stage_pending(staging)
        with self._connection() as conn:
            done += self._switch(conn, staging)
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {vec.other_table(staging)}")
        return done

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        conn: Conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    def _begin(self) -> str | None:
        """Make (or keep, when resuming) the staging table; ``None``: nothing to do."""
        with self._connection() as conn:
            live, stored = vec.live_table(conn, lock=False)
            text = read_setting(conn, NEXT_SETTING)
            pending = None if text is None else EmbeddingIdentity.from_json(text)
            if pending is None and stored in (None, self._identity):
                return None  # a new database claims the identity at its first write
            staging = vec.other_table(live)
            with conn.cursor() as cur:
                if pending != self._identity:  # a new run, or another target: start over
                    cur.execute(f"DROP TABLE IF EXISTS {staging}")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {staging} (scope INT UNSIGNED NOT NULL, "
                    "seq BIGINT UNSIGNED NOT NULL, embedding MEDIUMBLOB NULL, digest "
                    "BINARY(32) NULL, PRIMARY KEY (scope, seq), "
                    f"UNIQUE KEY {staging}_seq (seq)) {vec.TABLE_OPTIONS}"
                )
                cur.execute(
                    "REPLACE INTO store_settings (name, value) VALUES (%s, %s)",
                    [NEXT_SETTING, self._identity.to_json()],
                )
        return staging

    def _pending(self, conn: Conn, staging: str, after: int) -> list[Row]:
        """Up to a batch of records after ``after`` not staged as they are now."""
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT m.seq, m.scope, m.content, m.metadata, {_DIGEST} FROM memories AS m "
                f"LEFT JOIN {staging} AS n ON n.seq = m.seq WHERE m.seq > %s AND "
                f"(n.seq IS NULL OR n.digest IS NULL OR n.digest <> {_DIGEST}) "
                "ORDER BY m.seq LIMIT %s",
                [after, self._batch],
            )
            rows = cur.fetchall()
        return [(int(r[0]), int(r[1]), str(r[2]), r[3], bytes(r[4])) for r in rows]

    def _stage(self, conn: Conn, staging: str, rows: Sequence[Row]) -> int:
        """Embed and stage ``rows`` (their digests as read); the records embedded."""
        pairs = [(json.loads(r[2]), None if r[3] is None else json.loads(r[3])) for r in rows]
        blobs = self._embed(pairs)
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {staging} (scope, seq, embedding, digest) VALUES (%s, %s, %s, %s) "
                "ON DUPLICATE KEY UPDATE embedding = VALUES(embedding), digest = VALUES(digest)",
                [(r[1], r[0], b, r[4]) for r, b in zip(rows, blobs, strict=True)],
            )
        return sum(b is not None for b in blobs)

    def _stage_pending(self, staging: str) -> int:
        done, after = 0, 0
        with self._connection() as conn:
            while rows := self._pending(conn, staging, after):
                done, after = done + self._stage(conn, staging, rows), rows[-1][0]
        return done

    def _switch(self, conn: Conn, staging: str) -> int:
        """The switching transaction (module doc); the records embedded in it."""
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.begin()
        try:
            lock_sequence(conn)
            vec.live_table(conn, lock=True, update=True)
            done = 0
            while rows := self._pending(conn, staging, 0):
                done += self._stage(conn, staging, rows)
            with conn.cursor() as cur:
                cur.execute(
                    f"DELETE n FROM {staging} AS n LEFT JOIN memories AS m ON m.seq = n.seq "
                    "WHERE m.seq IS NULL OR n.embedding IS NULL"
                )
                cur.execute(
                    "REPLACE INTO store_settings (name, value) VALUES (%s, %s), (%s, %s)",
                    [vec.IDENTITY_SETTING, self._identity.to_json(), vec.TABLE_SETTING, staging],
                )
                cur.execute("DELETE FROM store_settings WHERE name = %s", [NEXT_SETTING])
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        return done
