"""The vector search plan of the SQLite store: approximate, never short.

1. Catch the process's :class:`~ditto_plugin_sqlite.ann.SimHashIndex` up with the read
   transaction (so it holds exactly the vectors the transaction sees).
2. Take the :func:`~ditto_plugin_sqlite.ann.candidate_count` records of the call's scope
   with the nearest codes and rescore them exactly (``vec_distance_cosine`` on the stored
   float32 vectors) under the call's filter, best first.
3. A filter that drops candidates is estimated by the share that survived (``s`` of
   ``c``): the candidates are taken again, ``c * c / s`` of them, so the filtered top ``k``
   are about as deep in the list as the unfiltered ones were.
4. Whenever fewer than ``limit`` survive while the scope has more records than were
   taken, or the candidates would be a quarter of the scope or more, the search is exact:
   the filter is evaluated first and only the matching rows are scored (the plan this
   store always used). So a search returns ``min(limit, matching records with vectors)``
   results for any filter (MEM-SEARCH-3); only their order is approximate.

Measured by ``bench/vector_scale.py`` (recall@10 against the exact plan, p50/p95).
"""

from __future__ import annotations

import json
from typing import Any, Final

from ditto_plugin_sqlite.ann import SimHashIndex, candidate_count
from ditto_plugin_sqlite.driver import Connection
from ditto_plugin_sqlite.sql import Sql
from ditto_plugin_sqlite.vectors import to_blob
from ditto_worker.sqlkit.records import COLUMNS, Row

__all__ = ["EXACT_SHARE", "exact_sql", "nearest_rows"]

EXACT_SHARE: Final = 0.25
"""Candidates at or above this share of the scope: the exact scan instead."""


def exact_sql(blob: bytes, where: Sql, limit: int) -> tuple[str, list[Any]]:
    """The exact plan: every row passing ``where`` scored, best first."""
    sql = (
        f"SELECT {COLUMNS}, 1.0 - vec_distance_cosine(v.embedding, ?) AS score "
        "FROM memory_vectors AS v JOIN memories AS m ON m.seq = v.seq "
        f"WHERE {where.text} ORDER BY score DESC, m.seq LIMIT ?"
    )
    return sql, [blob, *where.params, limit]


def _rescore(
    conn: Connection, blob: bytes, seqs: list[int], where: Sql, limit: int
) -> tuple[list[Row], int]:
    """The best ``limit`` candidates passing ``where`` (rows of :data:`COLUMNS` and the
    score, best first) and how many passed: the scores first, then the winners' rows.

    ``CROSS JOIN`` keeps SQLite's join order: the candidates first, each record by its key,
    its filter, and only then the vector of a record that passed (a 20 % filter reads and
    scores a fifth of the vectors: a selective filter makes the rescoring cheaper). Left
    to choose, the planner drove a scoped search from the scope's ``(namespace, seq)``
    index and scanned the candidate list once per row of the scope (300 ms at 3k rows)."""
    scored = conn.execute(
        "SELECT m.seq, 1.0 - vec_distance_cosine(v.embedding, ?) FROM json_each(?) AS c "
        f"CROSS JOIN memories AS m ON m.seq = c.value AND {where.text} "
        "CROSS JOIN memory_vectors AS v ON v.seq = m.seq",
        [blob, json.dumps(seqs), *where.params],
    ).fetchall()
    best = sorted(scored, key=lambda pair: (-pair[1], pair[0]))[:limit]
    rows = {
        row[0]: row
        for row in conn.execute(
            f"SELECT {COLUMNS} FROM json_each(?) AS c CROSS JOIN memories AS m ON m.seq = c.value",
            [json.dumps([seq for seq, _ in best])],
        )
    }
    return [(*rows[seq], score) for seq, score in best], len(scored)


def nearest_rows(
    conn: Connection,
    index: SimHashIndex | None,
    namespace: str,
    vector: list[float],
    where: Sql,
    limit: int,
) -> list[Row]:
    """The ``limit`` records nearest to ``vector`` passing ``where`` (module doc), rows of
    :data:`~ditto_worker.sqlkit.records.COLUMNS` plus the score, in ``conn``'s transaction.

    Args:
        index: the process's index, or ``None`` for the exact plan.
        namespace: the call's scope (``where`` confines to it as well).
        where: the call's filter within its scope.
    """
    blob = to_blob(vector)
    if index is not None:
        index.sync(conn)
        rows = _approximate(conn, index, namespace, vector, blob, where, limit)
        if rows is not None:
            return rows
    return conn.execute(*exact_sql(blob, where, limit)).fetchall()


def _approximate(
    conn: Connection,
    index: SimHashIndex,
    namespace: str,
    vector: list[float],
    blob: bytes,
    where: Sql,
    limit: int,
) -> list[Row] | None:
    """Steps 2-3 of the module doc; ``None`` when the exact plan must answer."""
    size = index.size(namespace)
    count = candidate_count(limit, size)
    for _ in range(2):
        if count >= size * EXACT_SHARE:
            return None
        seqs = index.nearest(namespace, vector, count)
        rows, passed = _rescore(conn, blob, seqs, where, limit)
        kept_most = passed * 10 >= len(seqs) * 9
        if passed >= limit and (kept_most or count > candidate_count(limit, size)):
            return rows  # (almost) every candidate passed, or the second, widened pass
        if passed == 0 or passed == len(seqs):
            return None  # nothing passed / too few candidates
        count = -(-count * count // passed)
    return None
