"""Keyword search of the SQLite store: per-scope BM25 over an FTS5 index of Python terms.

What is indexed: a record's :func:`~ditto_worker.memory.text.keyword_text` (its key, its
content with JSON field names, the store's ``indexFields``) as the terms of
:func:`~ditto_worker.memory.text.index_terms` — normalised, grapheme-cluster words,
stemmed, and cluster bigrams for scripts without spaces. FTS5 does no tokenizing of its
own (``ascii`` tokenizer over space-separated terms), so this store, PostgreSQL and the
in-memory store index the same terms.

Per-scope statistics (issue 19): every term is stored as ``<scope id>_<term>``, the scope
id being the row of the record's namespace in ``keyword_scopes``. The postings of a term
therefore belong to one scope: the document frequency FTS5 keeps for it
(``memories_fts_rows``, an ``fts5vocab`` row table) is the scope's own, a search reads
only its own scope's postings (a scoped search costs what a store of that scope's size
costs, whatever the other tenants hold), and ``keyword_scopes`` keeps each scope's
record count and total term count. The score is BM25 computed with those statistics
(:func:`ditto_worker.memory.text.bm25`: k1 1.2, b 0.75, IDF
:func:`~ditto_worker.memory.text.bm25_idf`), so a tenant's scores depend only on its own
records; the term frequencies come from ``memories_fts_hits`` (``fts5vocab`` instance table) and the
record lengths from ``memories_fts_docs``. A record without any term is not indexed and
not counted.

Tables (schema 5)::

    memories_fts USING fts5(terms, tokenize = "ascii tokenchars '_'")  -- rowid = seq
    memories_fts_rows USING fts5vocab(memories_fts, row)        -- term, doc (= df), cnt
    memories_fts_hits USING fts5vocab(memories_fts, instance)   -- term, doc, col, offset
    memories_fts_docs(seq INTEGER PRIMARY KEY, scope INTEGER, terms INTEGER)  -- length
    keyword_scopes(id INTEGER PRIMARY KEY, namespace TEXT UNIQUE, records, terms,
                   shortest,  -- fewest terms of a record indexed (schema 7, see below)
                   kept)      -- ``records`` as of the last write that kept ``shortest``

A search scores only the records that can reach its page
(:mod:`ditto_plugin_sqlite.keyword_top`, from :func:`postings`); a filtered one that finds
too few passing records among them scores every candidate with :func:`keyword_plan`'s
SQL. A query is never passed to ``MATCH``:
its terms (:func:`~ditto_worker.memory.text.query_terms`) are bound parameters, OR-ed.
Of more than 64 distinct terms the 64 held by the fewest records of the scope are kept
(:func:`~ditto_worker.memory.text.select_terms` with the ``fts5vocab`` frequencies, or
with the postings' own counts); terms no record holds are dropped first.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ditto_plugin_sqlite.driver import Connection
from ditto_worker.memory.text import (
    BM25_B,
    BM25_K1,
    MAX_QUERY_TERMS,
    bm25_idf,
    index_terms,
    query_terms,
    select_terms,
)
from ditto_worker.sqlkit.records import chunks, marks

__all__ = [
    "DDL",
    "KeywordPlan",
    "add_shortest",
    "index_record",
    "index_records",
    "keyword_plan",
    "postings",
    "rebuild",
    "unindex_records",
]

DDL: Final = (
    """CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts
        USING fts5(terms, tokenize = "ascii tokenchars '_'")""",
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts_rows USING fts5vocab(memories_fts, row)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts_hits USING fts5vocab(memories_fts, instance)",
    """CREATE TABLE IF NOT EXISTS memories_fts_docs (
        seq INTEGER PRIMARY KEY, scope INTEGER NOT NULL, terms INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS keyword_scopes (
        id INTEGER PRIMARY KEY, namespace TEXT NOT NULL UNIQUE,
        records INTEGER NOT NULL DEFAULT 0, terms INTEGER NOT NULL DEFAULT 0,
        shortest INTEGER, kept INTEGER NOT NULL DEFAULT 0)""",
)
"""The keyword-index tables (schema 5; ``shortest`` schema 7), created idempotently."""

_MAX_LOOKUP_TERMS: Final = 4096
"""Distinct query terms whose frequencies are looked up (a longer query keeps its first)."""


def _scope(conn: Connection, namespace: str, create: bool) -> int | None:
    row = conn.execute("SELECT id FROM keyword_scopes WHERE namespace = ?", (namespace,)).fetchone()
    if row is not None or not create:
        return None if row is None else int(row[0])
    cur = conn.execute("INSERT INTO keyword_scopes (namespace) VALUES (?)", (namespace,))
    return int(cur.lastrowid or 0)


def index_record(conn: Connection, seq: int, namespace: str, text: str) -> None:
    """Index record ``seq`` of ``namespace`` by ``text`` (in the caller's write
    transaction); a text without terms is not indexed."""
    index_records(conn, namespace, [(seq, text)])


def index_records(conn: Connection, namespace: str, records: Sequence[tuple[int, str]]) -> None:
    """Index ``(seq, text)`` records of ``namespace`` (in the caller's write transaction):
    one statement per table for the batch and one update of the scope's statistics, the
    same as :func:`index_record` one record at a time. A text without terms is not
    indexed."""
    termed = [(seq, terms) for seq, text in records if (terms := index_terms(text))]
    if not termed:
        return
    scope = _scope(conn, namespace, create=True)
    prefix = f"{scope}_"
    between = " " + prefix  # "<scope>_a <scope>_b …", one join per record
    conn.executemany(
        "INSERT INTO memories_fts (rowid, terms) VALUES (?, ?)",
        [(seq, prefix + between.join(terms)) for seq, terms in termed],
    )
    lengths = [len(terms) for _, terms in termed]
    conn.executemany(
        "INSERT INTO memories_fts_docs (seq, scope, terms) VALUES (?, ?, ?)",
        [(seq, scope, n) for (seq, _), n in zip(termed, lengths, strict=True)],
    )
    # as len(termed) single-record updates: kept in step only if it was before
    conn.execute(
        "UPDATE keyword_scopes SET records = records + ?, terms = terms + ?,"
        " shortest = CASE WHEN kept = records THEN min(coalesce(shortest, ?), ?) END,"
        " kept = CASE WHEN kept = records THEN records + ? ELSE -1 END WHERE id = ?",
        (len(termed), sum(lengths), min(lengths), min(lengths), len(termed), scope),
    )


def unindex_records(conn: Connection, seqs: Sequence[int]) -> None:
    """Remove records ``seqs`` from the index and their scopes' statistics."""
    removed: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for chunk in chunks(list(seqs)):
        rows = conn.execute(
            f"SELECT seq, scope, terms FROM memories_fts_docs WHERE seq IN ({marks(chunk)})", chunk
        ).fetchall()
        if not rows:
            continue
        found = [row[0] for row in rows]
        for _, scope, terms in rows:
            removed[scope][0] += 1
            removed[scope][1] += terms
        conn.execute(f"DELETE FROM memories_fts WHERE rowid IN ({marks(found)})", found)
        conn.execute(f"DELETE FROM memories_fts_docs WHERE seq IN ({marks(found)})", found)
    for scope, (records, terms) in removed.items():
        conn.execute(
            "UPDATE keyword_scopes SET records = records - ?, terms = terms - ?,"
            " kept = CASE WHEN kept = records THEN records - ? ELSE -1 END WHERE id = ?",
            (records, terms, records, scope),
        )


def rebuild(conn: Connection, records: Iterable[tuple[int, str, str]]) -> None:
    """Drop and rebuild the keyword index from ``(seq, namespace, text)`` (schema 5, in the
    caller's write transaction)."""
    for table in ("memories_fts_rows", "memories_fts_hits", "memories_fts"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute("DROP TABLE IF EXISTS memories_fts_docs")
    conn.execute("DROP TABLE IF EXISTS keyword_scopes")
    for statement in DDL:
        conn.execute(statement)
    for seq, namespace, text in records:
        index_record(conn, seq, namespace, text)


def add_shortest(conn: Connection) -> None:
    """Schema 6 -> 7: ``keyword_scopes.shortest``, each scope's fewest terms of a record
    (one pass over ``memories_fts_docs``; in the caller's write transaction), and ``kept``.

    :func:`index_record` keeps ``shortest`` (a delete leaves it: a lower bound) and sets
    ``kept`` to the new ``records``, as :func:`unindex_records` does. A process still
    running an older version of this plugin on the same file changes ``records`` alone:
    ``kept`` no longer matches, ``shortest`` is not trusted from then on (``kept`` -1,
    :func:`keyword_plan` bounds by 1 instead) until the index is rebuilt. (An older
    version's insert and delete in one scope, with no write of this version between,
    would look in step: restart the processes sharing a file after an upgrade.)
    """
    columns = {row[1] for row in conn.execute("PRAGMA table_info(keyword_scopes)")}
    if "shortest" not in columns:
        conn.execute("ALTER TABLE keyword_scopes ADD COLUMN shortest INTEGER")
    if "kept" not in columns:
        conn.execute("ALTER TABLE keyword_scopes ADD COLUMN kept INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE keyword_scopes SET shortest = d.fewest, kept = records FROM (SELECT scope,"
        " min(terms) AS fewest FROM memories_fts_docs GROUP BY scope) AS d"
        " WHERE d.scope = keyword_scopes.id"
    )


class KeywordPlan:
    """The scored candidates of one keyword search (see :func:`keyword_plan`).

    Attributes:
        sql: a SQL ``WITH`` prefix naming ``s(seq, score)`` (every candidate scored).
        params: its parameters.
        weights: ``(stored term, IDF)`` per chosen query term, in the query's order (the
            stored term carries the scope prefix).
        constants: ``(k1 + 1, k1·b / avgdl, k1·(1 − b))``: a term held ``n`` times by a
            record of ``dl`` terms adds ``idf·n·c0 / (n + c1·dl + c2)`` (BM25, as the SQL).
        postings: per weight, its :func:`postings` (``keyword_plan(read=True)``), else
            ``None``.
        shortest: no record of the scope has fewer terms (``keyword_scopes.shortest``,
            at least 1): a bound for :mod:`ditto_plugin_sqlite.keyword_top`.
    """

    def __init__(
        self,
        sql: str,
        params: list[Any],
        weights: list[tuple[str, float]],
        constants: tuple[float, float, float],
        postings: list[Counter[str]] | None = None,
        shortest: int = 1,
    ) -> None:
        self.sql = sql
        self.params = params
        self.weights = weights
        self.constants = constants
        self.postings = postings
        self.shortest = shortest


def postings(conn: Connection, term: str) -> Counter[str]:
    """Record number (as text) -> occurrences of stored ``term``, from one ``group_concat``
    over ``memories_fts_hits`` (one string, not a row per posting)."""
    joined = conn.execute(
        "SELECT group_concat(doc) FROM memories_fts_hits WHERE term = ?", (term,)
    ).fetchone()[0]
    return Counter(joined.split(",")) if joined else Counter()


def keyword_plan(
    conn: Connection, query: str, namespace: str, read: bool = False
) -> KeywordPlan | None:
    """The BM25 scores of ``namespace``'s records holding any term of ``query``.

    Reads the scope's statistics (one ``keyword_scopes`` row, the terms' frequencies) and
    returns ``WITH w(term, idf) …, tf …, s(seq, score) AS (…)`` over the scope's postings
    only; ``None`` when the query has no term the scope holds. ``read``: the plan also
    carries the chosen terms' :func:`postings` (a query of at most ``MAX_QUERY_TERMS``
    terms takes its frequencies from them: ``fts5vocab``'s row table reads a term's whole
    postings to count them, so they are read once, not twice).
    """
    scope = conn.execute(
        "SELECT id, records, terms, CASE WHEN kept = records THEN shortest END"
        " FROM keyword_scopes WHERE namespace = ?",
        (namespace,),
    ).fetchone()
    wanted = query_terms(query)[:_MAX_LOOKUP_TERMS]
    if scope is None or not wanted or not scope[1]:
        return None
    sid, records, total = int(scope[0]), int(scope[1]), int(scope[2])
    found: dict[str, Counter[str]] | None = None
    if read and len(wanted) <= MAX_QUERY_TERMS:
        found = {term: postings(conn, f"{sid}_{term}") for term in wanted}
        frequencies = {term: len(docs) for term, docs in found.items()}
    else:
        frequencies = _frequencies(conn, sid, wanted)
    chosen = select_terms(wanted, frequencies)
    if not chosen:
        return None
    counts = None
    if read:
        found = found or {}
        counts = [found.get(t) or postings(conn, f"{sid}_{t}") for t in chosen]
    weights = [(f"{sid}_{term}", bm25_idf(records, frequencies[term])) for term in chosen]
    constants = (BM25_K1 + 1, BM25_K1 * BM25_B / (total / records), BM25_K1 * (1 - BM25_B))
    sql, params = _scores_sql(weights, constants)
    return KeywordPlan(sql, params, weights, constants, counts, max(int(scope[3] or 1), 1))


def _frequencies(conn: Connection, sid: int, wanted: list[str]) -> dict[str, int]:
    """Records of scope ``sid`` holding each of ``wanted`` (``fts5vocab`` row table)."""
    prefixed = {f"{sid}_{term}": term for term in wanted}
    frequencies: dict[str, int] = {}
    for chunk in chunks(list(prefixed)):
        sql = f"SELECT term, doc FROM memories_fts_rows WHERE term IN ({marks(chunk)})"
        frequencies.update((prefixed[t], int(df)) for t, df in conn.execute(sql, chunk))
    return frequencies


def _scores_sql(
    weights: list[tuple[str, float]], constants: tuple[float, float, float]
) -> tuple[str, list[Any]]:
    """``WITH … s(seq, score)``: every candidate's BM25 score, and its parameters."""
    values = ", ".join("(?, ?)" for _ in weights)
    sql = (
        f"WITH w(term, idf) AS (VALUES {values}), "
        "tf(seq, term, n) AS (SELECT doc, term, count(*) FROM memories_fts_hits "
        f"WHERE term IN ({marks(weights)}) GROUP BY doc, term), "
        "s(seq, score) AS (SELECT tf.seq, sum(w.idf * tf.n * ? / (tf.n + ? * d.terms + ?)) "
        "FROM tf JOIN w ON w.term = tf.term JOIN memories_fts_docs AS d ON d.seq = tf.seq "
        "GROUP BY tf.seq) "
    )
    params: list[Any] = [x for pair in weights for x in pair]
    return sql, [*params, *(term for term, _ in weights), *constants]
