"""Migration 4 (tenant scope): a schema migrated before scopes keeps its records, all in
the unscoped namespace; keys become unique per namespace."""

from __future__ import annotations

import psycopg
import pytest

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_plugin_postgres import migrations as m
from ditto_worker import Scope, create_memory

T = "2026-01-01T00:00:00.000000Z"


def test_a_version_3_schema_is_upgraded(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:  # migrate to version 3 only, as an older plugin did
        patch.setattr(m, "MIGRATIONS", m.MIGRATIONS[:3])
        patch.setattr(m, "LATEST_VERSION", 3)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            assert m.migrate(conn, pg_schema).version == 3
            conn.execute(
                f'INSERT INTO "{pg_schema}".memories (id, key, content, created_at, updated_at, '
                "tsv) VALUES ('id-a', 'pref', '\"likes green tea\"', %s, %s, "
                "to_tsvector('english', 'likes green tea'))",
                [T, T],
            )
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=2)
    assert store.migrate().applied == (4, 5, 6, 7, 8)
    memory = create_memory(store)
    assert [i.id for i in memory.get({"keys": ["pref"]}).output] == ["id-a"]
    assert [h.memory.id for h in memory.search({"query": "green tea"}).output] == ["id-a"]
    again = memory.write({"memories": [{"key": "pref", "content": "x"}]})
    assert again.error is not None and again.error.code == "CONFLICT"
    alice = Scope("acme", "alice")
    scoped = memory.write({"memories": [{"key": "pref", "content": "x"}]}, scope=alice)
    assert scoped.status == "success"
    assert [i.key for i in memory.query({}, scope=alice).output.items] == ["pref"]
    assert [i.id for i in memory.query({}).output.items] == ["id-a"]
    store.close()
