"""Schema 3 -> 4 (tenant scope): a file written before scopes keeps every record, its
sequence and its execution ids, all in the unscoped namespace."""

from __future__ import annotations

from pathlib import Path

from ditto_plugin_sqlite import SqliteMemoryStore, driver
from ditto_plugin_sqlite.db import SCHEMA_VERSION
from ditto_worker import Scope, create_memory

V3 = (
    """CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
        key TEXT UNIQUE, content TEXT NOT NULL, metadata TEXT, created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    "CREATE INDEX memories_created_at ON memories (created_at)",
    """CREATE VIRTUAL TABLE memories_fts
        USING fts5(body, grams, tokenize = 'porter unicode61 remove_diacritics 2')""",
    "CREATE TABLE memory_vectors (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)",
    "CREATE TABLE store_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE executions (execution_id TEXT PRIMARY KEY, node TEXT NOT NULL,
        output TEXT NOT NULL, created_at REAL NOT NULL)""",
    "CREATE INDEX executions_created_at ON executions (created_at)",
)
T = "2026-01-01T00:00:00.000000Z"


def make_v3(path: Path) -> None:
    conn = driver.connect(path)
    for statement in V3:
        conn.execute(statement)
    rows = [(1, "id-a", "pref", '"likes green tea"'), (2, "id-b", None, '"walks daily"'),
            (12, "id-gone", None, '"deleted later"')]  # fmt: skip
    for seq, memory_id, key, content in rows:
        values = (seq, memory_id, key, content, T, T)
        conn.execute("INSERT INTO memories VALUES (?, ?, ?, ?, NULL, ?, ?)", values)
        conn.execute("INSERT INTO memories_fts (rowid, body, grams) VALUES (?, ?, '')",
                     (seq, content.strip('"')))  # fmt: skip
    conn.execute("DELETE FROM memories WHERE seq = 12")  # the sequence's high-water mark stays 12
    conn.execute("DELETE FROM memories_fts WHERE rowid = 12")
    output = '[{"id":"id-a","key":"pref","content":"likes green tea","metadata":null}]'
    conn.execute("INSERT INTO executions VALUES ('e-old', 'MEMORY.WRITE', ?, 9e12)", (output,))
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()


def test_a_version_3_file_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v3.sqlite"
    make_v3(path)
    store = SqliteMemoryStore(path)
    memory = create_memory(store)
    assert [i.id for i in memory.query({}).output.items] == ["id-a", "id-b"]
    assert [i.id for i in memory.get({"keys": ["pref"]}).output] == ["id-a"]
    assert [h.memory.id for h in memory.search({"query": "green tea"}).output] == ["id-a"]
    # keys are unique per namespace now: the unscoped one is taken, a scoped one is free
    again = memory.write({"memories": [{"key": "pref", "content": "x"}]})
    assert again.error is not None and again.error.code == "CONFLICT"
    alice = Scope("acme", "alice")
    scoped = memory.write({"memories": [{"key": "pref", "content": "x"}]}, scope=alice)
    assert scoped.status == "success"
    assert memory.query({}, scope=alice).output.items[0].key == "pref"
    # an execution id committed before the upgrade still replays (no second write)
    draft = {"key": "pref", "content": "likes green tea"}
    replay = memory.write({"memories": [draft]}, execution_id="e-old")
    assert [i.id for i in replay.output] == ["id-a"]
    assert len(memory.query({}).output.items) == 2
    store.close()
    conn = driver.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    seqs = [row[0] for row in conn.execute("SELECT seq FROM memories ORDER BY seq")]
    assert seqs[:2] == [1, 2] and seqs[2] > 12  # the deleted seq 12 is never reused
    conn.close()
