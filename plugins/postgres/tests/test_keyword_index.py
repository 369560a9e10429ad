"""Migration 5 (keyword terms): a version-4 schema's records are re-indexed in place with
the Python terms and per-scope statistics; the statistics follow writes, updates and
deletes."""

from __future__ import annotations

import psycopg
import pytest

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_plugin_postgres import migrations as m
from ditto_worker import Scope, create_memory

T = "2026-01-01T00:00:00.000000Z"
ALICE = Scope("acme", "alice")


def test_a_version_4_schema_is_reindexed(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:  # migrate to version 4 only, as an older plugin did
        patch.setattr(m, "MIGRATIONS", m.MIGRATIONS[:4])
        patch.setattr(m, "LATEST_VERSION", 4)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            assert m.migrate(conn, pg_schema).version == 4
            rows = [
                ("", "id-1", "preference", '{"language":"zh-CN"}'),
                ("", "id-2", None, '"पासवर्ड हर तिमाही बदला जाता है"'),
                (ALICE.namespace, "id-3", None, '"ฉันชอบเรียนภาษาไทยมาก"'),
                (ALICE.namespace, "id-4", None, '"walks daily"'),
            ]
            for ns, memory_id, key, content in rows:
                conn.execute(
                    f'INSERT INTO "{pg_schema}".memories (namespace, id, key, content, '
                    "created_at, updated_at, tsv) VALUES (%s, %s, %s, %s, %s, %s, "
                    "to_tsvector('english', %s))",
                    [ns, memory_id, key, content, T, T, content],
                )
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=2)
    try:
        assert store.migrate().applied == (5, 6, 7, 8)
        memory = create_memory(store)

        def ids(query: str, scope: Scope | None = None) -> list[str]:
            return [h.memory.id for h in memory.search({"query": query}, scope=scope).output]

        assert ids("preferred language") == ["id-1"]
        assert ids("तिमाही") == ["id-2"]
        assert ids("ภาษาไทย") == [] and ids("ภาษาไทย", ALICE) == ["id-3"]
        assert ids("walk", ALICE) == ["id-4"]
        assert _stats(postgres_url, pg_schema) == {"": (2, 10), ALICE.namespace: (2, 39)}
        out = memory.write({"memories": [{"content": "red fox"}, {"content": 42}]}, scope=ALICE)
        assert _stats(postgres_url, pg_schema)[ALICE.namespace] == (3, 41)
        first = out.output[0].id
        memory.update({"memories": [{"id": first, "content": "red fox jumps"}]}, scope=ALICE)
        assert _stats(postgres_url, pg_schema)[ALICE.namespace] == (3, 42)
        memory.delete({"ids": [first, out.output[1].id, "id-3"]}, scope=ALICE)
        assert _stats(postgres_url, pg_schema)[ALICE.namespace] == (1, 2)
        # migration 6 (issue 25): old records have no operation id, new writes keep one
        assert memory.get({"ids": ["id-4"]}, scope=ALICE).output[0].operation_id is None
        note = {"memories": [{"content": "new"}]}
        written = memory.write(note, scope=ALICE, operation_id="op-1").output
        assert written == memory.write(note, scope=ALICE, operation_id="op-1").output
        assert written[0].operation_id == "op-1"
    finally:
        store.close()


def _stats(url: str, schema: str) -> dict[str, tuple[int, int]]:
    """Each scope's (records, terms), checked against the records themselves."""
    with psycopg.connect(url) as conn:
        kept = conn.execute(f'SELECT namespace, records, terms FROM "{schema}".keyword_scopes')
        counted = conn.execute(
            f'SELECT namespace, count(*), sum(terms) FROM "{schema}".memories WHERE terms > 0 '
            "GROUP BY namespace"
        )
        stats = {ns: (int(n), int(t)) for ns, n, t in kept.fetchall() if n}
        assert stats == {ns: (int(n), int(t)) for ns, n, t in counted.fetchall()}
    return stats
