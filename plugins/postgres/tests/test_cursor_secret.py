"""The PostgreSQL store's cursor secret (issue 13 item 2): ``<schema>.store_settings``,
made by the first process that opens the schema, shared by every process on it."""

from __future__ import annotations

import threading
import uuid

import psycopg

from ditto_plugin_postgres import PostgresMemoryStore
from ditto_worker import create_memory
from ditto_worker.memory.cursors import CURSOR_SECRET_SETTING


def _fill(store: PostgresMemoryStore) -> None:
    create_memory(store).write({"memories": [{"key": f"k{i}", "content": i} for i in range(5)]})


def test_another_store_object_on_the_schema_reads_the_cursor(
    postgres_url: str, pg_schema: str
) -> None:
    first = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=1)
    _fill(first)
    page = create_memory(first).query({"limit": 2})
    assert page.output is not None and page.output.next_cursor
    second = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=1)
    rest = create_memory(second).query({"limit": 10, "cursor": page.output.next_cursor})
    assert rest.output is not None, rest.error
    assert [i.key for i in page.output.items + rest.output.items] == [f"k{i}" for i in range(5)]
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            f'SELECT value FROM "{pg_schema}".store_settings WHERE name = %s',
            [CURSOR_SECRET_SETTING],
        ).fetchall()
    assert len(rows) == 1 and len(rows[0][0]) == 64
    first.close()
    second.close()


def test_a_cursor_of_another_schema_is_invalid(postgres_url: str, pg_schema: str) -> None:
    other_schema = f"t_{uuid.uuid4().hex}"
    stores = [
        PostgresMemoryStore(postgres_url, schema=name, pool_max_size=1)
        for name in (pg_schema, other_schema)
    ]
    try:
        for store in stores:
            _fill(store)
        page = create_memory(stores[0]).query({"limit": 2})
        assert page.output is not None and page.output.next_cursor
        other = create_memory(stores[1]).query({"limit": 2, "cursor": page.output.next_cursor})
        assert other.error is not None and other.error.code == "INVALID_CURSOR"
    finally:
        for store in stores:
            store.close()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other_schema}" CASCADE')


def test_racing_first_opens_agree_on_one_secret(postgres_url: str, pg_schema: str) -> None:
    PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=1).migrate()
    stores = [PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=1)
              for _ in range(4)]  # fmt: skip
    found: list[str] = []
    barrier = threading.Barrier(len(stores))

    def claim(store: PostgresMemoryStore) -> None:
        barrier.wait()
        found.append(store._cursor_secret())

    threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == len(stores) and len(set(found)) == 1
    for store in stores:
        store.close()
