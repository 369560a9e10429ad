"""The SQLite keyword index (schema 5): rebuilt in place from a schema-4 file, per-scope
statistics kept exact through writes, updates and deletes (each scope's shortest record, a
lower bound, from schema 7), query terms as parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_plugin_sqlite.db import SCHEMA_VERSION
from ditto_plugin_sqlite.fts import keyword_plan
from ditto_worker import Scope, create_memory
from ditto_worker.memory.text import bm25, bm25_idf, index_terms

V4 = (
    """CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL DEFAULT '', id TEXT NOT NULL UNIQUE, key TEXT,
        content TEXT NOT NULL, metadata TEXT, created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    "CREATE UNIQUE INDEX memories_namespace_key ON memories (namespace, key)",
    """CREATE VIRTUAL TABLE memories_fts
        USING fts5(body, grams, tokenize = 'porter unicode61 remove_diacritics 2')""",
    "CREATE TABLE store_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
T = "2026-01-01T00:00:00.000000Z"
ALICE = Scope("acme", "alice")


def make_v4(path: Path) -> None:
    conn = driver.connect(path)
    for statement in V4:
        conn.execute(statement)
    rows = [
        (1, "", "preference", '{"language":"zh-CN"}'),
        (2, "", None, '"पासवर्ड हर तिमाही बदला जाता है"'),
        (3, ALICE.namespace, None, '"ฉันชอบเรียนภาษาไทยมาก"'),
        (4, ALICE.namespace, None, '"walks daily"'),
    ]
    for seq, ns, key, content in rows:
        conn.execute(
            "INSERT INTO memories VALUES (?, ?, ?, ?, ?, NULL, ?, ?)",
            (seq, ns, f"id-{seq}", key, content, T, T),
        )
        conn.execute("INSERT INTO memories_fts (rowid, body, grams) VALUES (?, ?, '')",
                     (seq, content))  # fmt: skip
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()


def test_a_version_4_file_gets_the_new_index_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite"
    make_v4(path)
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)

        def ids(query: str, scope: Scope | None = None) -> list[str]:
            return [h.memory.id for h in memory.search({"query": query}, scope=scope).output]

        assert ids("preferred language") == ["id-1"]
        assert ids("तिमाही") == ["id-2"]
        assert ids("ภาษาไทย") == [] and ids("ภาษาไทย", ALICE) == ["id-3"]
        assert ids("walk", ALICE) == ["id-4"]
        # schema 6 (issue 25): the old records gain an empty operation id, new writes keep one
        assert memory.get({"ids": ["id-4"]}, scope=ALICE).output[0].operation_id is None
        note = {"memories": [{"content": "new"}]}
        written = memory.write(note, scope=ALICE, operation_id="op-1").output
        assert written == memory.write(note, scope=ALICE, operation_id="op-1").output
        assert written[0].operation_id == "op-1"
    conn = driver.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    stats = conn.execute("SELECT namespace, records FROM keyword_scopes ORDER BY id").fetchall()
    assert stats == [("", 2), (ALICE.namespace, 3)]
    assert _shortest(conn) == _fewest(conn)
    conn.close()


def _shortest(conn: driver.Connection) -> dict[str, int]:
    """``keyword_scopes.shortest`` per namespace."""
    return dict(conn.execute("SELECT namespace, shortest FROM keyword_scopes").fetchall())


def _fewest(conn: driver.Connection) -> dict[str, int]:
    """The fewest terms of an indexed record, per namespace, counted."""
    return dict(
        conn.execute(
            "SELECT k.namespace, min(d.terms) FROM memories_fts_docs AS d "
            "JOIN keyword_scopes AS k ON k.id = d.scope GROUP BY k.namespace"
        ).fetchall()
    )


def test_a_version_6_file_gets_each_scopes_shortest_record(tmp_path: Path) -> None:
    """Schema 7: ``keyword_scopes.shortest`` computed on open, then kept by WRITE; a
    delete leaves it (a lower bound, what the pruned search needs)."""
    path = tmp_path / "v6.sqlite"
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)
        memory.write({"memories": [{"content": "one two three four"}, {"content": "five six"}]})
        memory.write({"memories": [{"content": "seven eight nine"}]}, scope=ALICE)
    conn = driver.connect(path)
    conn.execute("ALTER TABLE keyword_scopes DROP COLUMN shortest")
    conn.execute("ALTER TABLE keyword_scopes DROP COLUMN kept")
    conn.execute("PRAGMA user_version = 6")
    conn.commit()
    conn.close()
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)
        conn = driver.connect(path)
        assert _shortest(conn) == _fewest(conn) == {"": 2, ALICE.namespace: 3}
        (short,) = memory.write({"memories": [{"content": "ten"}]}, scope=ALICE).output
        memory.write({"memories": [{"content": "eleven twelve thirteen fourteen"}]})
        assert _shortest(conn) == {"": 2, ALICE.namespace: 1}
        memory.delete({"ids": [short.id]}, scope=ALICE)
        assert _shortest(conn) == {"": 2, ALICE.namespace: 1}  # still a lower bound
        assert _fewest(conn)[ALICE.namespace] == 3
        assert [h.memory.content for h in memory.search({"query": "nine"}, scope=ALICE).output] == [
            "seven eight nine"
        ]
        with store._tx(None, write=False) as read:
            assert keyword_plan(read, "nine", ALICE.namespace, read=True).shortest == 1  # type: ignore[union-attr]
            assert keyword_plan(read, "five", "", read=True).shortest == 2  # type: ignore[union-attr]
        # a process of the previous version writes a record: it counts it, keeps no bound
        conn.execute("UPDATE keyword_scopes SET records = records + 1 WHERE namespace = ''")
        conn.commit()
        with store._tx(None, write=False) as read:
            assert keyword_plan(read, "five", "", read=True).shortest == 1  # type: ignore[union-attr]
        memory.write({"memories": [{"content": "fifteen sixteen"}]})  # stays untrusted
        assert conn.execute(
            "SELECT shortest, kept FROM keyword_scopes WHERE namespace = ''"
        ).fetchone() == (None, -1)
        conn.close()


def _stats(path: Path) -> dict[str, tuple[int, int]]:
    conn = driver.connect(path)
    try:
        rows = conn.execute("SELECT namespace, records, terms FROM keyword_scopes").fetchall()
        docs = conn.execute(
            "SELECT k.namespace, count(*), sum(d.terms) FROM memories_fts_docs AS d "
            "JOIN keyword_scopes AS k ON k.id = d.scope GROUP BY k.namespace"
        ).fetchall()
    finally:
        conn.close()
    counted = {ns: (n, t or 0) for ns, n, t in docs}
    kept = {ns: (n, t) for ns, n, t in rows if n}
    assert kept == counted, "keyword_scopes drifted from the indexed records"
    return kept


def test_scope_statistics_follow_writes_updates_and_deletes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)
        out = memory.write({"memories": [{"content": "red fox"}, {"content": "red red dog"},
                                         {"content": 42}]}, scope=ALICE).output  # fmt: skip
        memory.write({"memories": [{"key": "k", "content": "blue"}]})
        assert _stats(path) == {ALICE.namespace: (2, 5), "": (1, 2)}
        memory.update({"memories": [{"id": out[0].id, "content": "red fox jumps high"}]},
                      scope=ALICE)  # fmt: skip
        memory.update({"memories": [{"id": out[1].id, "metadata": {"m": 1}}]}, scope=ALICE)
        assert _stats(path) == {ALICE.namespace: (2, 7), "": (1, 2)}
        memory.delete({"ids": [out[1].id, out[2].id]}, scope=ALICE)
        assert _stats(path) == {ALICE.namespace: (1, 4), "": (1, 2)}
        # the score is BM25 over the scope's own statistics
        (hit,) = memory.search({"query": "jumps"}, scope=ALICE).output
        terms = index_terms("red fox jumps high")
        idf = {"jump": bm25_idf(1, 1)}
        assert hit.score == pytest.approx(bm25({"jump": 1}, len(terms), idf, len(terms)))
