"""The keyword index of the PostgreSQL store: scope ids, per-scope statistics, the
migration-5 rebuild (see :mod:`ditto_plugin_postgres.text` for what is indexed).

``keyword_scopes(id, namespace, records, terms)``: one row per namespace that ever held a
record with text; ``records``/``terms`` are the count of its records with at least one
term and the sum of their term counts (``memories.terms``), kept in the transaction of
every write, content update and delete.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Final

import psycopg

from ditto_plugin_postgres.text import record_terms, tsvector_literal
from ditto_worker.memory.text import keyword_text

__all__ = ["MIGRATION", "adjust", "rebuild", "scope_id", "scope_stats"]

MIGRATION: Final = (
    "CREATE TABLE {s}.keyword_scopes (id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    'namespace text COLLATE "C" NOT NULL UNIQUE, records bigint NOT NULL DEFAULT 0, '
    "terms bigint NOT NULL DEFAULT 0)",
    "ALTER TABLE {s}.memories ADD COLUMN terms integer NOT NULL DEFAULT 0",
    # no pending list: a GIN lookup after bulk writes would scan every tenant's pending
    # entries (issue 19: a scoped search as fast as a store of its own)
    "ALTER INDEX {s}.memories_tsv SET (fastupdate = off)",
)
"""Migration 5's SQL (then :func:`rebuild` re-indexes every record in Python)."""
_BATCH: Final = 1000


def scope_id(conn: psycopg.Connection, schema: str, namespace: str, create: bool) -> int | None:
    """The keyword scope id of ``namespace`` (created when ``create``), else ``None``."""
    if create:
        conn.execute(
            f"INSERT INTO {schema}.keyword_scopes (namespace) VALUES (%s) "
            "ON CONFLICT (namespace) DO NOTHING",
            [namespace],
        )
    row = conn.execute(
        f"SELECT id FROM {schema}.keyword_scopes WHERE namespace = %s", [namespace]
    ).fetchone()
    return None if row is None else int(row[0])


def scope_stats(conn: psycopg.Connection, schema: str, namespace: str) -> tuple[int, int] | None:
    """``(scope id, records)`` of ``namespace``, or ``None`` when it has no indexed record."""
    row = conn.execute(
        f"SELECT id, records FROM {schema}.keyword_scopes WHERE namespace = %s", [namespace]
    ).fetchone()
    return None if row is None or not row[1] else (int(row[0]), int(row[1]))


def adjust(
    conn: psycopg.Connection, schema: str, namespace: str, pairs: Iterable[tuple[int, int]]
) -> None:
    """Update ``namespace``'s statistics for records whose term count went from ``old`` to
    ``new`` (``(0, n)``: written; ``(n, 0)``: deleted); a record with 0 terms is not
    counted."""
    records = terms = 0
    for old, new in pairs:
        records += (new > 0) - (old > 0)
        terms += new - old
    if records or terms:
        conn.execute(
            f"UPDATE {schema}.keyword_scopes SET records = records + %s, terms = terms + %s "
            "WHERE namespace = %s",
            [records, terms, namespace],
        )


def rebuild(conn: psycopg.Connection, schema: str, fields: Sequence[str] = ()) -> None:
    """Re-index every record with Python terms (migration 5, in its transaction; and
    ``reindex_embeddings`` after an ``indexFields`` change, with ``fields``)."""
    after = 0
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    ids: dict[str, int] = {}
    while True:
        rows = conn.execute(
            f"SELECT seq, namespace, key, content::text, metadata::text FROM {schema}.memories "
            "WHERE seq > %s ORDER BY seq LIMIT %s",
            [after, _BATCH],
        ).fetchall()
        if not rows:
            break
        seqs: list[int] = []
        vectors: list[str] = []
        counts: list[int] = []
        for seq, namespace, key, content, meta in rows:
            metadata = None if meta is None else json.loads(meta)
            terms = record_terms(keyword_text(json.loads(content), key, metadata, fields))
            if namespace not in ids:
                ids[namespace] = scope_id(conn, schema, namespace, create=True) or 0
            seqs.append(int(seq))
            vectors.append(tsvector_literal(terms, ids[namespace]))
            counts.append(len(terms))
            if terms:
                totals[namespace][0] += 1
                totals[namespace][1] += counts[-1]
        conn.execute(
            f"UPDATE {schema}.memories AS m SET tsv = d.tsv::tsvector, terms = d.n FROM "
            "unnest(%s::bigint[], %s::text[], %s::int[]) AS d(seq, tsv, n) WHERE m.seq = d.seq",
            [seqs, vectors, counts],
        )
        after = int(rows[-1][0])
    for namespace, (records, total) in totals.items():
        conn.execute(
            f"UPDATE {schema}.keyword_scopes SET records = %s, terms = %s WHERE namespace = %s",
            [records, total, namespace],
        )
