"""Re-embedding a PostgreSQL schema under a new embedding identity (MEM-RET-4).

``ditto-worker reindex`` (through
:meth:`ditto_plugin_postgres.PostgresMemoryStore.reembed_embeddings`) embeds every record
with the store's provider into a staging table, ``memory_vectors_next(seq, embedding
vector(<new dims>) NULL)`` (``NULL``: a record without text), and records the target
identity as ``store_settings.embedding_next``. One write transaction per batch; the live
``memory_vectors`` and ``store_settings.embedding`` are untouched meanwhile, so processes
of the old identity keep searching and writing consistently.

* A batch is staged only for records still as they were read (their rows are locked
  ``FOR SHARE`` and compared), and a trigger on ``memories`` (``UPDATE OF content,
  metadata``) drops the staged vector of a record changed later; a deleted record's
  staged row goes with it (``ON DELETE CASCADE``). Such records are embedded again.
* The HNSW index of the staging table is built once the pass is done, then the records
  written meanwhile are staged.
* **The switch** is one short transaction: ``LOCK memories IN SHARE MODE`` (writers
  wait, readers do not), the last records are staged, then under ``ACCESS EXCLUSIVE`` on
  ``memory_vectors`` (vector searches wait) the old table is renamed away
  (``memory_vectors_retired_<hex>``), the staging table takes its name, and the new
  identity is recorded. No lock on ``memories`` is upgraded (dropping a table would drop
  its foreign key, which locks ``memories`` against every call and deadlocks with
  writers holding it); lock waits are bounded all the same (``lock_timeout``
  :data:`LOCK_WAIT_MS`; rolled back and tried again, at most :data:`ATTEMPTS` times).
  After it commits, the trigger and the retired table are dropped the same way (left
  for the next run if the tables stay busy: the trigger does nothing without a staging
  table).
* A killed run leaves the staging in place; a rerun with the same identity stages only
  the records not staged yet; another identity drops the staging and starts over. One
  run per schema at a time (a session advisory lock; a second gets ``CONFLICT``).

Processes of the old identity learn of the switch in the transaction that would mix the
two (:meth:`PostgresMemoryStore._verify_identity`): a vector search's statement carries
the identity it expects, and an embedding write reads it before inserting its vector.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

import psycopg
import psycopg_pool

from ditto_plugin_postgres import vectors as vec
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingIdentity, EmbeddingProvider

__all__ = ["NEXT_SETTING", "STAGING", "reembed"]

NEXT_SETTING: Final = "embedding_next"
"""``store_settings.name`` of the identity an unfinished reindex is embedding into."""
STAGING: Final = "memory_vectors_next"
"""The staging table of an unfinished reindex."""
_TRIGGER: Final = "ditto_reembed_stale"
_RETIRED: Final = "memory_vectors_retired_"
LOCK_WAIT_MS: Final = 500
"""How long the switch waits for a table lock before it rolls back and tries again
(below PostgreSQL's default ``deadlock_timeout`` of 1 s)."""
ATTEMPTS: Final = 20
"""Switch attempts before the reindex gives up (the staging stays)."""
logger = logging.getLogger(__name__)
Embed = Callable[[Sequence[tuple[Any, Any]]], list[str | None]]
Row = tuple[int, str, str | None]


class Reembedding:
    """One run of the re-embedding of ``schema`` (a quoted name) into ``embedder``'s
    identity (module doc)."""

    def __init__(
        self, pool: psycopg_pool.ConnectionPool, schema: str, embedder: EmbeddingProvider,
        embed: Embed, batch_size: int,
    ) -> None:  # fmt: skip
        self._pool, self._s, self._embed, self._batch = pool, schema, embed, batch_size
        self._identity = embedder.identity

    def run(self) -> int:
        """Stage every record, build the index, switch; the number of records embedded
        (0 when the identity is already recorded and nothing is pending)."""
        if not self._begin():
            return 0
        done = self._stage_pending()
        if self._identity.dims <= vec.HNSW_MAX_DIMS:
            with self._pool.connection() as conn:
                conn.execute(
                    f"CREATE INDEX IF NOT EXISTS {STAGING}_hnsw ON {self._s}.{STAGING} "
                    "USING hnsw (embedding vector_cosine_ops)"
                )
        done += self._stage_pending()
        done += self._retried(self._switch)
        try:  # a trigger left in place does nothing (its function finds no staging)
            self._retried(self._clean_up)
        except psycopg.errors.LockNotAvailable:
            logger.info("postgres reindex: the old vectors table stays (tables busy)")
        return done

    def _retried(self, step: Callable[[psycopg.Connection], int]) -> int:
        """``step`` in a transaction that gives up waiting for a table lock after
        :data:`LOCK_WAIT_MS` (before PostgreSQL's deadlock check would pick a writer or a
        search as the victim: the switch takes ``ACCESS EXCLUSIVE`` locks while they hold
        others), rolled back and tried again, at most :data:`ATTEMPTS` times.

        Raises:
            psycopg.errors.LockNotAvailable: every attempt timed out (the staging stays:
                run the reindex again).
        """
        for attempt in range(ATTEMPTS):
            try:
                with self._pool.connection() as conn, conn.transaction():
                    conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
                    return step(conn)
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
                if attempt == ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0.05, 0.25) * (attempt + 1))
        return 0

    def _clean_up(self, conn: psycopg.Connection) -> int:
        """Drop the trigger and the retired vectors tables (this run's and any an earlier
        run could not drop): they lock ``memories`` briefly (foreign keys)."""
        conn.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON {self._s}.memories")
        retired = conn.execute(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = "
            "c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE %s",
            [self._s.strip('"'), f"{_RETIRED}%"],
        ).fetchall()
        for (name,) in retired:
            conn.execute(f"DROP TABLE IF EXISTS {self._s}.{name}")
        return 0

    def _begin(self) -> bool:
        """Start (or resume) the staging; ``False`` when nothing is to do."""
        s = self._s
        with self._pool.connection() as conn, conn.transaction():
            stored, pending = vec.stored_identity(conn, s), _pending_identity(conn, s)
            if pending is None and stored in (None, self._identity):
                return False  # a new schema claims the identity at its first write
            if pending is not None and pending != self._identity:
                conn.execute(f"DROP TABLE IF EXISTS {s}.{STAGING}")  # another target
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.{STAGING} (seq bigint PRIMARY KEY "
                f"REFERENCES {s}.memories (seq) ON DELETE CASCADE, "
                f"embedding vector({int(self._identity.dims)}))"
            )
            conn.execute(
                f"CREATE OR REPLACE FUNCTION {s}.{_TRIGGER}() RETURNS trigger "
                "LANGUAGE plpgsql AS $f$ BEGIN IF to_regclass("
                f"'{s}.{STAGING}') IS NOT NULL THEN EXECUTE 'DELETE FROM {s}.{STAGING} "
                "WHERE seq = $1' USING OLD.seq; END IF; RETURN NULL; END $f$"
            )
            conn.execute(
                f"CREATE OR REPLACE TRIGGER {_TRIGGER} AFTER UPDATE OF content, metadata "
                f"ON {s}.memories FOR EACH ROW EXECUTE FUNCTION {s}.{_TRIGGER}()"
            )
            conn.execute(
                f"INSERT INTO {s}.store_settings (name, value) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                [NEXT_SETTING, self._identity.to_json()],
            )
        return True

    def _pending(self, conn: psycopg.Connection, after: int) -> list[Row]:
        """Up to a batch of records after ``after`` without a staged vector."""
        rows = conn.execute(
            f"SELECT m.seq, m.content::text, m.metadata::text FROM {self._s}.memories AS m "
            f"WHERE m.seq > %s AND NOT EXISTS (SELECT 1 FROM {self._s}.{STAGING} AS n "
            "WHERE n.seq = m.seq) ORDER BY m.seq LIMIT %s",
            [after, self._batch],
        ).fetchall()
        return [(int(seq), str(content), meta) for seq, content, meta in rows]

    def _stage_pending(self) -> int:
        """Stage every record without a staged vector, a batch per transaction."""
        done, after = 0, 0
        while True:
            with self._pool.connection() as conn:
                rows = self._pending(conn, after)
            if not rows:
                return done
            literals = self._embed([_pair(row) for row in rows])
            with self._pool.connection() as conn, conn.transaction():
                self._stage(conn, rows, literals, lock=True)
            done, after = done + sum(lit is not None for lit in literals), rows[-1][0]

    def _stage(
        self, conn: psycopg.Connection, rows: Sequence[Row], literals: Sequence[str | None],
        lock: bool,
    ) -> None:  # fmt: skip
        """Stage the vectors of the records still as they were read. ``lock``: lock
        their rows ``FOR SHARE`` first (a writer holding one is waited for, and its
        change seen), unless the caller holds the table."""
        seqs = [row[0] for row in rows]
        current = conn.execute(
            f"SELECT seq, content::text, metadata::text FROM {self._s}.memories "
            f"WHERE seq = ANY(%s::bigint[]) ORDER BY seq{' FOR SHARE' if lock else ''}",
            [seqs],
        ).fetchall()
        now = {int(seq): (content, meta) for seq, content, meta in current}
        keep = [
            (row[0], lit)
            for row, lit in zip(rows, literals, strict=True)
            if now.get(row[0]) == (row[1], row[2])
        ]
        conn.execute(
            f"INSERT INTO {self._s}.{STAGING} (seq, embedding) SELECT d.seq, d.v::vector "
            "FROM unnest(%s::bigint[], %s::text[]) AS d(seq, v) "
            "ON CONFLICT (seq) DO UPDATE SET embedding = EXCLUDED.embedding",
            [[k[0] for k in keep], [k[1] for k in keep]],
        )

    def _switch(self, conn: psycopg.Connection) -> int:
        """In the caller's transaction: stage the last records with writers held off,
        put the staging table in place of ``memory_vectors``, record the identity."""
        s, done = self._s, 0
        conn.execute(f"LOCK TABLE {s}.memories IN SHARE MODE")
        while rows := self._pending(conn, 0):
            literals = self._embed([_pair(row) for row in rows])
            self._stage(conn, rows, literals, lock=False)
            done += sum(lit is not None for lit in literals)
        conn.execute(f"LOCK TABLE {s}.memory_vectors IN ACCESS EXCLUSIVE MODE")
        conn.execute(f"DELETE FROM {s}.{STAGING} WHERE embedding IS NULL")
        # renamed, not dropped: dropping it would drop its foreign key, which locks
        # memories against every call (a lock upgrade that deadlocks with writers)
        old = f"{_RETIRED}{uuid.uuid4().hex[:12]}"
        conn.execute(f"ALTER TABLE {s}.memory_vectors RENAME TO {old}")
        conn.execute(f"ALTER INDEX {s}.memory_vectors_pkey RENAME TO {old}_pkey")
        conn.execute(f"ALTER INDEX IF EXISTS {s}.memory_vectors_hnsw RENAME TO {old}_hnsw")
        conn.execute(f"ALTER TABLE {s}.{STAGING} RENAME TO memory_vectors")
        conn.execute(f"ALTER TABLE {s}.memory_vectors ALTER COLUMN embedding SET NOT NULL")
        conn.execute(f"ALTER INDEX {s}.{STAGING}_pkey RENAME TO memory_vectors_pkey")
        if self._identity.dims <= vec.HNSW_MAX_DIMS:
            conn.execute(f"ALTER INDEX {s}.{STAGING}_hnsw RENAME TO memory_vectors_hnsw")
        conn.execute(
            f"UPDATE {s}.store_settings SET value = %s WHERE name = %s",
            [self._identity.to_json(), vec.IDENTITY_SETTING],
        )
        conn.execute(f"DELETE FROM {s}.store_settings WHERE name = %s", [NEXT_SETTING])
        return done


def reembed(
    pool: psycopg_pool.ConnectionPool, lock: psycopg.Connection, schema: str,
    lock_key: int, embedder: EmbeddingProvider, embed: Embed, batch_size: int,
) -> int:  # fmt: skip
    """Re-embed every record of ``schema`` (quoted) under ``embedder``'s identity and
    switch to it (module doc).

    Args:
        pool: the store's pool.
        lock: a connection of its own holding the run's session lock until it closes.
        schema: the quoted schema name.
        lock_key: the advisory-lock key of reindex runs on this schema.
        embedder: the provider of the new identity.
        embed: vector literals (``None``: no text) of ``(content, metadata)`` pairs.
        batch_size: records per model batch and per write transaction (≥ 1).

    Returns:
        The number of records embedded by this run.

    Raises:
        MemoryError: ``CONFLICT`` while another reindex of the schema runs; the
            provider's ``EMBEDDING_UNAVAILABLE``; driver errors as the store maps them
            (the staging stays: run again to finish).
    """
    held = lock.execute("SELECT pg_try_advisory_lock(%s)", [lock_key]).fetchone()
    if held is None or not held[0]:
        raise MemoryError(ErrorCode.CONFLICT, "another reindex of this store is running")
    return Reembedding(pool, schema, embedder, embed, batch_size).run()


def _pending_identity(conn: psycopg.Connection, schema: str) -> EmbeddingIdentity | None:
    row = conn.execute(
        f"SELECT value FROM {schema}.store_settings WHERE name = %s", [NEXT_SETTING]
    ).fetchone()
    return None if row is None else EmbeddingIdentity.from_json(str(row[0]))


def _pair(row: Row) -> tuple[Any, Any]:
    return json.loads(row[1]), None if row[2] is None else json.loads(row[2])
