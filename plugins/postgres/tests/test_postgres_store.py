"""PostgreSQL-specific behaviour: config, migrations, cancellation, deadlines, safe errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import ditto_plugin_postgres
from ditto_plugin_postgres import LATEST_VERSION, PostgresMemoryStore, create_store
from ditto_plugin_postgres.db import transaction
from ditto_plugin_postgres.migrations import lock_key
from ditto_plugin_postgres.sql import compile_filter, sort_columns
from ditto_worker import create_memory
from ditto_worker.config import load_runtime_config, load_runtime_config_file
from ditto_worker.contracts import MemoryDraft, MemoryQueryInput, MemoryWriteInput
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.memory.filters import parse_filter, parse_order_by
from ditto_worker.memory.ports import (
    CancelToken,
    MemoryCallOptions,
    MemorySearchProvider,
    MemoryStore,
)
from ditto_worker.runtime.registry import build_store

ENV = "DITTO_WORKER_MEMORY_POSTGRES_URL"


def one(content: str = "x") -> MemoryWriteInput:
    return MemoryWriteInput(memories=[MemoryDraft(content=content)])


def count(store: PostgresMemoryStore) -> int:
    return len(store.query(MemoryQueryInput(limit=10_000)).items)


def test_exports_and_protocols(pg_store: PostgresMemoryStore) -> None:
    assert ditto_plugin_postgres.__all__ == [
        "ENV_SCHEMA",
        "ENV_URL",
        "LATEST_VERSION",
        "MigrationReport",
        "PostgresMemoryStore",
        "create_store",
    ]
    assert isinstance(pg_store, MemoryStore) and isinstance(pg_store, MemorySearchProvider)
    assert pg_store.capabilities.batch_atomic  # MEM-PY-11
    assert "url" not in repr(pg_store) and "postgresql" not in repr(pg_store)


# --- config (MEM-CONF-5) ------------------------------------------------------------------


def test_create_store_reads_url_and_schema_from_env() -> None:
    store = create_store({"schema": "from_yaml"}, {ENV: "postgresql://u:p@127.0.0.1:1/db"})
    assert store.schema == "from_yaml"
    env = {ENV: "postgresql://x", "DITTO_WORKER_MEMORY_POSTGRES_SCHEMA": "from_env"}
    assert create_store({}, env).schema == "from_env"


@pytest.mark.parametrize(
    ("settings", "env", "needle"),
    [
        ({}, {}, ENV),
        ({"url": "postgresql://a"}, {ENV: "postgresql://a"}, ENV),
        ({"nope": 1}, {ENV: "postgresql://a"}, "nope"),
        ({"schema": "bad-name"}, {ENV: "postgresql://a"}, "schema"),
        ({"poolMaxSize": 0}, {ENV: "postgresql://a"}, "poolMaxSize"),
        ({"poolMinSize": 5, "poolMaxSize": 2}, {ENV: "postgresql://a"}, "poolMaxSize"),
        ({"autoMigrate": "maybe"}, {ENV: "postgresql://a"}, "autoMigrate"),
    ],
)
def test_create_store_rejects_bad_config(settings: Any, env: Any, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_store(settings, env)
    assert needle in str(info.value)


def test_entry_point_builds_the_store(monkeypatch: pytest.MonkeyPatch, pg_schema: str) -> None:
    config = load_runtime_config({"plugins": {"postgres": {"schema": pg_schema}}}, env={})
    store = build_store(config, "postgres", env={ENV: "postgresql://u@127.0.0.1:1/db"})
    assert isinstance(store, PostgresMemoryStore) and store.schema == pg_schema


# --- migrations ---------------------------------------------------------------------------


def test_migration_is_versioned_and_idempotent(postgres_url: str, pg_schema: str) -> None:
    store = PostgresMemoryStore(postgres_url, schema=pg_schema)
    first, second = store.migrate(), store.migrate()
    assert (first.version, first.applied) == (LATEST_VERSION, tuple(range(1, LATEST_VERSION + 1)))
    assert (second.version, second.applied) == (LATEST_VERSION, ())
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(f'SELECT version, name FROM "{pg_schema}".ditto_migrations').fetchall()
    assert rows == [
        (1, "memories"),
        (2, "vectors"),
        (3, "executions"),
        (4, "scope"),
        (5, "keyword terms"),
        (6, "operation ids"),
        (7, "operation retention"),
        (8, "key order"),
    ]
    store.write(one())
    assert store.migrate().applied == () and count(store) == 1
    store.close()


def test_concurrent_migrations_apply_once(postgres_url: str, pg_schema: str) -> None:
    stores = [PostgresMemoryStore(postgres_url, schema=pg_schema) for _ in range(4)]
    reports: list[Any] = []
    threads = [threading.Thread(target=lambda s=s: reports.append(s.migrate())) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(len(r.applied) for r in reports) == [0, 0, 0, LATEST_VERSION]


def test_without_auto_migrate_an_unmigrated_schema_fails(postgres_url: str, pg_schema: str) -> None:
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, auto_migrate=False)
    with pytest.raises(MemoryError) as info:
        store.write(one())
    assert info.value.code == "MEMORY_BACKEND_ERROR" and "ditto-worker migrate" in str(info.value)
    store.migrate()
    store.write(one())
    assert count(store) == 1
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{pg_schema}".ditto_migrations VALUES (99, %s)', ["future"])
    for newer in (PostgresMemoryStore(postgres_url, schema=pg_schema, auto_migrate=False),
                  PostgresMemoryStore(postgres_url, schema=pg_schema)):  # fmt: skip
        with pytest.raises(MemoryError) as info:
            newer.query(MemoryQueryInput(limit=1))
        assert "newer version" in str(info.value)
    store.close()


# --- errors (MEM-ERR-4) -------------------------------------------------------------------


def _bad_urls(url: str) -> Iterator[str]:
    info = psycopg.conninfo.conninfo_to_dict(url)
    host, port, db, user = info["host"], info.get("port", 5432), info["dbname"], info["user"]
    yield f"postgresql://{user}:s3cret-Wrong-pw@{host}:{port}/{db}"  # wrong password
    yield f"postgresql://{user}:s3cret-Wrong-pw@{host}:1/{db}"  # nothing listening
    yield f"postgresql://nobody-s3cret:s3cret-Wrong-pw@{host}:{port}/{db}"
    yield "postgresql://us%ZZer:s3cret-Wrong-pw@@host:port/db?bad=option"  # malformed


def test_connection_errors_are_safe(postgres_url: str, pg_schema: str) -> None:
    for url in _bad_urls(postgres_url):
        store = PostgresMemoryStore(url, schema=pg_schema, connect_timeout_s=2)
        result = create_memory(store).write({"memories": [{"content": "x"}]})
        assert result.status == "failed" and result.error is not None
        assert result.error.code == "MEMORY_BACKEND_ERROR"
        message = result.error.message
        assert "cannot connect to the PostgreSQL memory store" in message
        for secret in ("s3cret", "postgresql://", "127.0.0.1", "postgres", "host", "@"):
            assert secret not in message.replace("PostgreSQL", ""), (secret, message)
        with pytest.raises(MemoryError) as info:
            store.migrate()
        assert "s3cret" not in str(info.value) and info.value.__cause__ is None


def test_sql_errors_are_safe(postgres_url: str, pg_store: PostgresMemoryStore) -> None:
    pg_store.write(one())
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{pg_store.schema}".memories RENAME TO gone')
    result = create_memory(pg_store).query({"filter": {"a": "secret-value"}})
    assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR"
    assert "migrate" in result.error.message
    for leak in ("SELECT", "secret-value", "memories", pg_store.schema):
        assert leak not in result.error.message


def test_nul_characters_are_invalid_input(pg_store: PostgresMemoryStore) -> None:
    memory = create_memory(pg_store)
    for draft in ({"content": "x", "metadata": {"a": "b\x00c"}}, {"key": "k\x00", "content": 1}):
        result = memory.write({"memories": [draft]})
        assert result.error is not None and result.error.code == "INVALID_INPUT"
    written = memory.write({"memories": [{"content": {"text": "nul \x00 inside"}}]})
    assert written.status == "success" and written.output is not None
    assert written.output[0].content == {"text": "nul \x00 inside"}


def test_filter_strings_with_nul_compare_and_never_fail(pg_store: PostgresMemoryStore) -> None:
    """No stored string holds NUL: equal to nothing; ordered as SQLite orders it."""
    memory = create_memory(pg_store)
    drafts = [{"key": k, "content": k, "metadata": {"a": a}}
              for k, a in (("k1", "ab"), ("k2", "ab\x01"), ("k3", "aa"), ("k4", "b"))]  # fmt: skip
    assert memory.write({"memories": drafts}).status == "success"

    def keys(flt: dict[str, object]) -> list[str]:
        result = memory.query({"filter": flt})
        assert result.status == "success" and result.output is not None, result.error
        return sorted(item.key or "" for item in result.output.items)

    assert keys({"a": "ab\x00' OR '1'='1"}) == [] and keys({"key": "k1\x00"}) == []
    assert keys({"a": {"$ne": "ab\x00"}}) == ["k1", "k2", "k3", "k4"]
    assert keys({"a": {"$in": ["ab\x00", "b"]}}) == ["k4"]
    assert keys({"a": {"$gt": "ab\x00z"}}) == keys({"a": {"$gte": "ab\x00"}}) == ["k2", "k4"]
    assert keys({"a": {"$lt": "ab\x00"}}) == keys({"a": {"$lte": "ab\x00z"}}) == ["k1", "k3"]
    assert keys({"key": {"$gt": "k2\x00"}}) == ["k3", "k4"]


# --- cancellation and deadlines (MEM-RUN-2) ----------------------------------------------


def test_cancel_interrupts_a_running_statement(pg_store: PostgresMemoryStore) -> None:
    pg_store.write(one())
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    start = time.monotonic()
    with pytest.raises(MemoryError) as info:
        with transaction(pg_store._get_pool(), MemoryCallOptions(cancel=token)) as conn:
            conn.execute("SELECT pg_sleep(30)")
    assert info.value.code == "MEMORY_CANCELLED"
    assert time.monotonic() - start < 5
    assert count(pg_store) == 1  # the pooled connection still works


def _hold_write_lock(url: str, store: PostgresMemoryStore) -> psycopg.Connection:
    conn = psycopg.connect(url)
    conn.execute("SELECT pg_advisory_lock(%s)", [lock_key(store.schema, "write")])
    return conn


def test_cancel_stops_a_blocked_write(postgres_url: str, pg_store: PostgresMemoryStore) -> None:
    pg_store.write(one())
    blocker = _hold_write_lock(postgres_url, pg_store)
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    result = create_memory(pg_store).write({"memories": [{"content": "y"}]}, cancel=token)
    blocker.close()
    assert result.status == "cancelled" and result.error is not None
    assert result.error.code == "MEMORY_CANCELLED"
    assert count(pg_store) == 1


def test_deadline_bounds_a_blocked_write(postgres_url: str, pg_store: PostgresMemoryStore) -> None:
    pg_store.write(one())
    blocker = _hold_write_lock(postgres_url, pg_store)
    options = MemoryCallOptions(deadline=time.time() + 0.3)
    with pytest.raises(MemoryError) as info:
        pg_store.write(one("late"), options)
    blocker.close()
    assert info.value.code == "MEMORY_TIMEOUT"
    assert count(pg_store) == 1


# --- concurrency and SQL text -------------------------------------------------------------


def test_threads_write_in_creation_order(pg_store: PostgresMemoryStore) -> None:
    # MEM-PY-6: createdAt never goes backwards along the sequence, under concurrent writers
    def work(n: int) -> None:
        for i in range(10):
            pg_store.write(MemoryWriteInput(memories=[MemoryDraft(content=f"{n}-{i}")] * 5))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with psycopg.connect(pg_store._url) as conn:
        stamps = conn.execute(
            f'SELECT created_at FROM "{pg_store.schema}".memories ORDER BY seq'
        ).fetchall()
    assert len(stamps) == 200 and stamps == sorted(stamps)


def test_sql_text_never_contains_request_values() -> None:
    flt = {"a'b": {"$gt": "x'; DROP TABLE memories; --"}, "n": {"$in": [1, "two", None]}}
    where = compile_filter(parse_filter(flt))
    columns = sort_columns(parse_order_by([{"field": "a'b.c"}]))
    for sql in (where, columns):
        assert "DROP" not in sql.text and "a'b" not in sql.text and "two" not in sql.text
        assert sql.text.count("%s") == len(sql.params)


def test_reference_ditto_yaml_builds_the_store() -> None:
    config = load_runtime_config_file(Path(__file__).resolve().parents[3] / "ditto.yaml", env={})
    store = build_store(config, "postgres", env={ENV: "postgresql://u@127.0.0.1:1/db"})
    assert isinstance(store, PostgresMemoryStore) and store.schema == "ditto"
