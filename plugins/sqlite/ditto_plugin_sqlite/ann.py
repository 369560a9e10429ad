"""The approximate vector index of the SQLite store: SimHash codes in memory, per scope.

Every vector (``memory_vectors``) has a :data:`CODE_BITS`-bit code: the signs of its
projections on fixed random hyperplanes (SimHash, Charikar 2002: the Hamming distance
of two codes estimates the angle of their vectors, whatever their distribution; the signs
of the coordinates themselves, sqlite-vec's ``vec_quantize_binary``, lose sparse vectors
such as feature hashing's: recall@10 0.2 at 100k). The code is stored beside the vector
(``memory_vector_codes``, written in the vector's transaction by
:func:`ditto_plugin_sqlite.vectors.put_vectors`) and held in each process's memory per
tenant namespace (:mod:`ditto_worker.memory.scope`) as columns of 64-bit words, so a
scoped search scans only its scope: XOR + popcount per word (numpy) and a histogram cut
for the nearest. :mod:`ditto_plugin_sqlite.nearest` rescores those exactly.

A process loads the codes at its first vector search (crash or restart: it simply loads
again) and catches up at every search after, inside the search's read transaction, from
``memory_vector_log``: triggers on ``memory_vectors`` (fired by every process and driver
that writes the file, older plugin versions included) append the ``seq`` of each
inserted, replaced or deleted vector, and drop a replaced or deleted vector's code. A
vector without a code (written by an older version) is coded from its floats when
loaded. The log keeps its newest :data:`LOG_KEEP` entries; a process further behind
reloads. Migration: the first store with an embedding provider that opens a file from
before the index creates the tables and triggers and codes every stored vector
(:func:`ensure_tables`); nothing else changes in the file.
"""

from __future__ import annotations

import functools
import importlib
import math
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ditto_plugin_sqlite.driver import Connection

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    U64 = npt.NDArray[np.uint64]
    I64 = npt.NDArray[np.int64]
else:

    class _Numpy:
        """numpy, imported on first use: it comes with the vector extras (``retrieval``),
        and a store without an embedder (the core install) must import without it."""

        def __getattr__(self, name: str) -> Any:
            module = importlib.import_module("numpy")
            globals()["np"] = module  # every later use reaches numpy itself
            return getattr(module, name)

    np = _Numpy()

__all__ = [
    "CODE_BITS",
    "LOG_KEEP",
    "SimHashIndex",
    "candidate_count",
    "code_bytes",
    "create_index_tables",
    "ensure_tables",
    "put_codes",
]

CODE_BITS: Final = 1536
"""Bits of a code (4x 384 dims; recall@10 against exact on bench/vector_scale.py's
perturbed vectors, 400 candidates of 100k: 0.90 with 768 bits, 0.94 with 1024, 0.98 with
1536). Memory: 192 bytes per vector (192 MB per process at 1M)."""
LOG_KEEP: Final = 65536
"""Newest log entries kept (pruned every 4096 entries)."""
_SEED: Final = 20021202
_WORDS: Final = CODE_BITS // 64
_FETCH: Final = 4096

_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS memory_vector_codes (seq INTEGER PRIMARY KEY, code BLOB NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_code_insert AFTER INSERT ON memory_vectors "
    "BEGIN DELETE FROM memory_vector_codes WHERE seq = new.seq; END",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_code_delete AFTER DELETE ON memory_vectors "
    "BEGIN DELETE FROM memory_vector_codes WHERE seq = old.seq; END",
    "CREATE TABLE IF NOT EXISTS memory_vector_log "
    "(id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_log_insert AFTER INSERT ON memory_vectors "
    "BEGIN INSERT INTO memory_vector_log (seq) VALUES (new.seq); END",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_log_update AFTER UPDATE ON memory_vectors "
    "BEGIN INSERT INTO memory_vector_log (seq) VALUES (new.seq); END",
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_log_delete AFTER DELETE ON memory_vectors "
    "BEGIN INSERT INTO memory_vector_log (seq) VALUES (old.seq); END",
    "CREATE TRIGGER IF NOT EXISTS memory_vector_log_prune AFTER INSERT ON memory_vector_log "
    f"WHEN new.id % 4096 = 0 BEGIN DELETE FROM memory_vector_log WHERE id <= new.id - {LOG_KEEP};"
    " END",
)
_ROWS: Final = (
    "SELECT v.seq, m.namespace, c.code, CASE WHEN c.code IS NULL THEN v.embedding END "
    "FROM memory_vectors AS v JOIN memories AS m ON m.seq = v.seq "
    "LEFT JOIN memory_vector_codes AS c ON c.seq = v.seq"
)
_HEAD: Final = (
    "SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'memory_vector_log'), "
    "(SELECT min(id) FROM memory_vector_log)"
)


def create_index_tables(conn: Connection) -> None:
    """Create the codes table, the change log and their triggers where missing (in the
    caller's write transaction; a reindex's switch gives the new ``memory_vectors`` its
    triggers with it, :mod:`ditto_plugin_sqlite.reembed`)."""
    for statement in _DDL:
        conn.execute(statement)


def ensure_tables(conn: Connection) -> None:
    """Create the codes table, the change log and their triggers unless present, and
    store the code of every vector already in the file (one write transaction; the
    migration of a file from before the index: about 5 s per 100k vectors here)."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    if {"memory_vector_codes", "memory_vector_log", "memory_vector_log_prune"} <= names:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL:
            conn.execute(statement)
        rows = conn.execute(
            "SELECT v.seq, v.embedding FROM memory_vectors AS v WHERE NOT EXISTS "
            "(SELECT 1 FROM memory_vector_codes AS c WHERE c.seq = v.seq)"
        )
        while chunk := rows.fetchmany(_FETCH):
            put_codes(conn, [row[0] for row in chunk], [row[1] for row in chunk])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


@functools.cache
def _planes(dims: int) -> npt.NDArray[np.float32]:
    """The fixed random hyperplanes of ``dims``-long vectors (``dims x CODE_BITS``)."""
    return np.random.default_rng(_SEED).standard_normal((dims, CODE_BITS)).astype(np.float32)


_BLAS_LOCK: Final = threading.Lock()


@functools.cache
def _blas() -> Any:
    """threadpoolctl's controller of the BLAS numpy loaded (made once: it scans the loaded
    libraries), or ``None`` without threadpoolctl."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - it comes with the retrieval extras
        return None
    return ThreadpoolController()


def code_bytes(blobs: Sequence[bytes]) -> npt.NDArray[np.uint8]:
    """The codes of float32 vector BLOBs, ``CODE_BITS / 8`` bytes each (one row each).

    The projection runs on one BLAS thread: a few hundred kFLOP to a few dozen MFLOP per
    call, where OpenBLAS's own threads cost more than they bring, and far more on a busy
    host (the codes of 100 vectors: 88 ms p50 with the default threads, 13 ms on one, at
    load 11 on 2 cores). The limit is set and restored around the product (about 15 µs),
    one thread at a time.
    """
    vectors = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
    planes, blas = _planes(vectors.shape[1]), _blas()
    if blas is None:  # pragma: no cover
        projected = vectors @ planes
    else:  # under a lock: two threads' set-and-restore must not interleave
        with _BLAS_LOCK, blas.limit(limits=1, user_api="blas"):
            projected = vectors @ planes
    return np.packbits(projected > 0, axis=1, bitorder="little")


def put_codes(conn: Connection, seqs: Sequence[int], blobs: Sequence[bytes]) -> None:
    """Store the codes of vectors just stored (in the caller's write transaction)."""
    if seqs:
        codes = code_bytes(blobs)
        conn.executemany(
            "INSERT OR REPLACE INTO memory_vector_codes (seq, code) VALUES (?, ?)",
            zip(seqs, (code.tobytes() for code in codes), strict=True),
        )


class _Part:
    """The codes of one namespace: ``seqs`` ascending and unique over ``[0, n)``, ``codes``
    word-major (``_WORDS x capacity``), ``live`` false for a removed record. Appending
    higher seqs (new records) is amortised O(1); anything else re-sorts the part."""

    def __init__(self, seqs: I64, codes: U64) -> None:
        self._reset(seqs, codes)

    def _reset(self, seqs: I64, codes: U64) -> None:
        self.n = len(seqs)
        capacity = max(64, self.n + self.n // 4)
        self.seqs = np.zeros(capacity, dtype=np.int64)
        self.codes = np.zeros((_WORDS, capacity), dtype=np.uint64)
        self.live = np.zeros(capacity, dtype=bool)
        self.seqs[: self.n], self.codes[:, : self.n], self.live[: self.n] = seqs, codes, True
        self.dead = 0

    def positions(self, seqs: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Where each of ``seqs`` is (clipped) and whether it is there."""
        if not self.n:
            return np.zeros(len(seqs), dtype=np.int64), np.zeros(len(seqs), dtype=bool)
        pos = np.minimum(np.searchsorted(self.seqs[: self.n], seqs), self.n - 1)
        return pos.astype(np.int64), self.seqs[pos] == seqs

    def remove(self, seqs: I64) -> None:
        pos, found = self.positions(seqs)
        hit = pos[found]
        self.dead += int(self.live[hit].sum())
        self.live[hit] = False
        if self.dead > max(1024, self.n // 2):  # compact
            self._merge(np.zeros(0, dtype=np.int64), np.zeros((_WORDS, 0), dtype=np.uint64))

    def put(self, seqs: I64, codes: U64) -> None:
        """Insert or replace ``seqs`` (ascending) with their ``codes`` (word-major)."""
        pos, found = self.positions(seqs)
        at = pos[found]
        self.codes[:, at] = codes[:, found]
        self.dead -= int((~self.live[at]).sum())
        self.live[at] = True
        new = ~found
        if not new.any():
            return
        seqs, codes = seqs[new], codes[:, new]
        if self.n and seqs[0] <= self.seqs[self.n - 1]:
            self._merge(seqs, codes)
        else:
            self._append(seqs, codes)

    def _append(self, seqs: I64, codes: U64) -> None:
        end = self.n + len(seqs)
        if end > len(self.seqs):
            self._merge(seqs, codes)
            return
        self.seqs[self.n : end], self.codes[:, self.n : end] = seqs, codes
        self.live[self.n : end] = True
        self.n = end

    def _merge(self, seqs: I64, codes: U64) -> None:
        """Rebuild with ``seqs`` added and removed records dropped (also compaction)."""
        keep = self.live[: self.n]
        all_seqs = np.concatenate([self.seqs[: self.n][keep], seqs])
        all_codes = np.concatenate([self.codes[:, : self.n][:, keep], codes], axis=1)
        order = np.argsort(all_seqs, kind="stable")
        self._reset(all_seqs[order], all_codes[:, order])

    def nearest(self, query: U64, count: int) -> I64:
        """The seqs of the ``count`` live codes nearest to ``query`` in Hamming distance
        (ties at the last distance taken in seq order)."""
        n = self.n
        distance = np.bitwise_count(self.codes[0, :n] ^ query[0]).astype(np.uint16)
        scratch, counts = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint8)
        for word in range(1, _WORDS):
            np.bitwise_xor(self.codes[word, :n], query[word], out=scratch)
            distance += np.bitwise_count(scratch, out=counts)
        if self.dead:
            distance[~self.live[:n]] = CODE_BITS + 1
        # a histogram of the distances finds the cut (cheaper than argpartition)
        cut = int(np.searchsorted(np.cumsum(np.bincount(distance)), count))
        below = np.flatnonzero(distance < cut)
        at = np.flatnonzero(distance == cut)[: max(0, count - len(below))]
        picked = np.concatenate([below, at])
        result: I64 = self.seqs[picked[self.live[picked]]]
        return result


class SimHashIndex:
    """SimHash codes of one database's vectors, per namespace (module doc).

    Args:
        dims: the vector length (the embedding identity's ``dims``).

    Thread-safe: one lock around catch-up and scan.
    """

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._parts: dict[str, _Part] = {}
        self._seen = -1  # the last log id applied; -1: not built
        self._lock = threading.Lock()

    def size(self, namespace: str) -> int:
        """Live codes of ``namespace``."""
        part = self._parts.get(namespace)
        return 0 if part is None else part.n - part.dead

    def nearest(self, namespace: str, vector: Sequence[float], count: int) -> list[int]:
        """The seqs of (at most) ``count`` records of ``namespace`` with the nearest codes."""
        with self._lock:
            part = self._parts.get(namespace)
            if part is None or count <= 0:
                return []
            query = _word_major(code_bytes([np.asarray(vector, dtype="<f4").tobytes()]))[:, 0]
            return [int(seq) for seq in part.nearest(query, count)]

    def sync(self, conn: Connection) -> None:
        """Bring the index to the state of ``conn``'s read transaction (module doc)."""
        with self._lock:
            head, low = conn.execute(_HEAD).fetchone()
            head = int(head or 0)
            if self._seen < 0 or (head > self._seen and (low is None or low > self._seen + 1)):
                self._build(conn, head)  # new, or entries it has not applied were pruned
            elif head > self._seen:
                changed = conn.execute(
                    "SELECT DISTINCT seq FROM memory_vector_log WHERE id > ?", (self._seen,)
                ).fetchall()
                self._refresh(conn, [int(row[0]) for row in changed])
                self._seen = head

    def _build(self, conn: Connection, head: int) -> None:
        chunks: dict[str, list[tuple[I64, npt.NDArray[np.uint8]]]] = {}
        cursor = conn.execute(f"{_ROWS} ORDER BY v.seq")
        while rows := cursor.fetchmany(_FETCH):
            for namespace, pair in _grouped(rows).items():
                chunks.setdefault(namespace, []).append(pair)
        self._parts = {
            namespace: _Part(
                np.concatenate([seqs for seqs, _ in pairs]),
                _word_major(np.concatenate([codes for _, codes in pairs])),
            )
            for namespace, pairs in chunks.items()
        }
        self._seen = head

    def _refresh(self, conn: Connection, seqs: list[int]) -> None:
        gone = np.asarray(sorted(seqs), dtype=np.int64)
        for part in self._parts.values():
            part.remove(gone)
        for start in range(0, len(seqs), _FETCH):
            chunk = seqs[start : start + _FETCH]
            marks = ", ".join("?" * len(chunk))
            sql = f"{_ROWS} WHERE v.seq IN ({marks}) ORDER BY v.seq"
            for namespace, (found, codes) in _grouped(conn.execute(sql, chunk)).items():
                known = self._parts.get(namespace)
                if known is None:
                    self._parts[namespace] = _Part(found, _word_major(codes))
                else:
                    known.put(found, _word_major(codes))


def _grouped(rows: Iterable[tuple[Any, ...]]) -> dict[str, tuple[I64, npt.NDArray[np.uint8]]]:
    """``(seq, namespace, code, blob)`` rows in seq order, per namespace: the seqs and the
    codes (a row's blob is coded here when it has no stored code: a vector written by an
    older plugin version)."""
    groups: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault(str(row[1]), []).append(row)
    out = {}
    for namespace, group in groups.items():
        codes = b"".join(row[2] or code_bytes([row[3]]).tobytes() for row in group)
        out[namespace] = (
            np.asarray([row[0] for row in group], dtype=np.int64),
            np.frombuffer(codes, dtype=np.uint8).reshape(len(group), CODE_BITS // 8),
        )
    return out


def _word_major(codes: npt.NDArray[np.uint8]) -> U64:
    """``_WORDS x n`` 64-bit words of ``n`` codes of bytes."""
    return np.ascontiguousarray(np.ascontiguousarray(codes).view(np.uint64).T)


def candidate_count(limit: int, size: int) -> int:
    """Codes to rescore for ``limit`` results among ``size``: at least 400, 20 per result
    (hybrid asks 100: 2,000), and 0.2 % of the scope (false near codes grow with it)."""
    return min(size, max(400, 20 * limit, math.ceil(size * 0.002)))
