"""MySQL-specific behaviour: config, migrations, exact keys and ids under a padding
collation, cancellation and deadlines through ``KILL QUERY``, safe errors, commit order.
Tested on MariaDB 10.11."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest

from ditto_plugin_mysql import LATEST_VERSION, MysqlMemoryStore, create_store
from ditto_plugin_mysql.db import parse_url, transaction
from ditto_plugin_mysql.sql import compile_filter, sort_columns
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

from .conftest import admin

ENV = "DITTO_WORKER_MEMORY_MYSQL_URL"


def one(content: str = "x") -> MemoryWriteInput:
    return MemoryWriteInput(memories=[MemoryDraft(content=content)])


def count(store: MysqlMemoryStore) -> int:
    return len(store.query(MemoryQueryInput(limit=10_000)).items)


def sql(url: str, statement: str, params: Any = None) -> list[Any]:
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall())
    finally:
        conn.close()


def test_exports_and_protocols(mysql_store: MysqlMemoryStore) -> None:
    assert isinstance(mysql_store, MemoryStore) and isinstance(mysql_store, MemorySearchProvider)
    assert "password" not in repr(mysql_store)


# --- config (MEM-CONF-5) ------------------------------------------------------------------


def test_create_store_reads_url_and_database_from_env() -> None:
    store = create_store({}, {ENV: "mysql://u:p@127.0.0.1:1/from_url"})
    assert store.database == "from_url"
    assert create_store({"database": "from_yaml"}, {ENV: "mysql://u@h/x"}).database == "from_yaml"
    env = {ENV: "mariadb://h", "DITTO_WORKER_MEMORY_MYSQL_DATABASE": "from_env"}
    assert create_store({"database": "from_yaml"}, env).database == "from_env"
    assert create_store({}, {ENV: "mysql://h"}).database == "ditto"


@pytest.mark.parametrize(
    ("settings", "env", "needle"),
    [
        ({}, {}, ENV),
        ({"url": "mysql://a"}, {ENV: "mysql://a"}, ENV),
        ({"nope": 1}, {ENV: "mysql://a/db"}, "nope"),
        ({"database": "bad-name"}, {ENV: "mysql://a/db"}, "database"),
        ({"poolMaxSize": 0}, {ENV: "mysql://a/db"}, "poolMaxSize"),
        ({"autoMigrate": "maybe"}, {ENV: "mysql://a/db"}, "autoMigrate"),
        ({}, {ENV: "postgresql://u:s3cret@h/db"}, "mysql://"),
    ],
)
def test_create_store_rejects_bad_config(settings: Any, env: Any, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_store(settings, env)
    assert needle in str(info.value) and "s3cret" not in str(info.value)


def test_entry_point_builds_the_store(mysql_database: str) -> None:
    config = load_runtime_config({"plugins": {"mysql": {"database": mysql_database}}}, env={})
    store = build_store(config, "mysql", env={ENV: "mysql://u@127.0.0.1:1/db"})
    assert isinstance(store, MysqlMemoryStore) and store.database == mysql_database


def test_reference_ditto_yaml_builds_the_store() -> None:
    config = load_runtime_config_file(Path(__file__).resolve().parents[3] / "ditto.yaml", env={})
    store = build_store(config, "mysql", env={ENV: "mysql://u@127.0.0.1:1/from_url"})
    assert isinstance(store, MysqlMemoryStore) and store.database == "from_url"


def test_url_forms() -> None:
    address = parse_url("mysql+pymysql://us%40er:p%3Ass@db.internal:3307/mem?unix_socket=/s")
    assert (address.user, address.password, address.host, address.port) == (
        "us@er", "p:ss", "db.internal", 3307)  # fmt: skip
    assert (address.database, address.unix_socket) == ("mem", "/s")
    assert "p:ss" not in repr(address)


# --- migrations ---------------------------------------------------------------------------


def test_migration_is_versioned_and_idempotent(mysql_url: str, mysql_database: str) -> None:
    store = MysqlMemoryStore(mysql_url, database=mysql_database)
    first, second = store.migrate(), store.migrate()
    assert (first.version, first.applied) == (LATEST_VERSION, tuple(range(1, LATEST_VERSION + 1)))
    assert (second.schema, second.applied) == (mysql_database, ())
    store.write(one())
    assert store.migrate().applied == () and count(store) == 1
    store.close()


def test_concurrent_migrations_apply_once(mysql_url: str, mysql_database: str) -> None:
    stores = [MysqlMemoryStore(mysql_url, database=mysql_database) for _ in range(4)]
    reports: list[Any] = []
    threads = [threading.Thread(target=lambda s=s: reports.append(s.migrate())) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(len(r.applied) for r in reports) == [0, 0, 0, LATEST_VERSION]


def test_without_auto_migrate_an_unmigrated_schema_fails(
    mysql_url: str, mysql_database: str
) -> None:
    store = MysqlMemoryStore(mysql_url, database=mysql_database, auto_migrate=False)
    with pytest.raises(MemoryError) as info:
        store.write(one())
    assert info.value.code == "MEMORY_BACKEND_ERROR" and "ditto-worker migrate" in str(info.value)
    store.migrate()
    store.write(one())
    assert count(store) == 1
    sql(mysql_url, f"INSERT INTO `{mysql_database}`.ditto_migrations (version, name) "
        "VALUES (99, 'future')")  # fmt: skip
    for newer in (MysqlMemoryStore(mysql_url, database=mysql_database, auto_migrate=False),
                  MysqlMemoryStore(mysql_url, database=mysql_database)):  # fmt: skip
        with pytest.raises(MemoryError) as info:
            newer.query(MemoryQueryInput(limit=1))
        assert "newer version" in str(info.value)
    store.close()


# --- exact keys and ids (utf8mb4_bin pads spaces) -------------------------------------------


def test_keys_and_ids_match_exactly(mysql_store: MysqlMemoryStore) -> None:
    memory = create_memory(mysql_store)
    long_key = "k" * 5000  # longer than any index prefix: unique through key_hash
    keys = ["a", "a ", "A", "a\t", long_key, long_key + " "]
    written = memory.write({"memories": [{"key": k, "content": k} for k in keys]})
    assert written.status == "success" and written.output is not None
    got = memory.get({"keys": ["a "]})
    assert got.output is not None and [i.key for i in got.output] == ["a "]
    got = memory.get({"keys": [long_key]})
    assert got.output is not None and [i.key for i in got.output] == [long_key]
    clash = memory.write({"memories": [{"key": long_key, "content": 1}]})
    assert clash.error is not None and clash.error.code == "CONFLICT"
    first = written.output[0].id
    padded = memory.get({"ids": [first + " "]})
    assert padded.output == []
    assert memory.update({"memories": [{"id": first + " ", "content": 2}]}).error.code == (
        "NOT_FOUND")  # fmt: skip
    assert memory.delete({"ids": [first + "  "]}).output.deleted == []
    listed = memory.query({"filter": {"key": {"$in": ["a", "a\t"]}}})
    assert listed.output is not None and [i.key for i in listed.output.items] == ["a", "a\t"]
    ranged = memory.query({"filter": {"key": {"$lt": "a"}}})  # code points: "A" < "a"
    assert ranged.output is not None and [i.key for i in ranged.output.items] == ["A"]


# --- cancellation and deadlines (MEM-RUN-2) ----------------------------------------------


def _running(url: str, text: str) -> int:
    rows = sql(url, "SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE %s",
               [f"%{text}%"])  # fmt: skip
    return int(rows[0][0]) - 1  # this very statement matches too


def test_cancel_kills_the_running_statement(mysql_url: str, mysql_store: MysqlMemoryStore) -> None:
    mysql_store.write(one())
    token = CancelToken()
    threading.Timer(0.5, token.cancel).start()
    start = time.monotonic()
    options = MemoryCallOptions(cancel=token)
    with pytest.raises(MemoryError) as info:
        with transaction(mysql_store._get_pool(), mysql_store._address, options) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT SLEEP(30) AS ditto_cancel_probe")
    assert info.value.code == "MEMORY_CANCELLED"
    assert time.monotonic() - start < 5
    assert _running(mysql_url, "ditto_cancel_probe") == 0  # stopped on the server too
    assert count(mysql_store) == 1  # the pool still serves


def _hold_writers(url: str, database: str) -> pymysql.connections.Connection:
    conn = admin(url)
    conn.begin()
    with conn.cursor() as cur:
        cur.execute(f"SELECT value FROM `{database}`.store_settings WHERE name = 'sequence' "
                    "FOR UPDATE")  # fmt: skip
    return conn


def test_cancel_stops_a_blocked_write(mysql_url: str, mysql_store: MysqlMemoryStore) -> None:
    mysql_store.write(one())
    blocker = _hold_writers(mysql_url, mysql_store.database)
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    result = create_memory(mysql_store).write({"memories": [{"content": "y"}]}, cancel=token)
    blocker.close()
    assert result.status == "cancelled" and result.error is not None
    assert result.error.code == "MEMORY_CANCELLED"
    assert count(mysql_store) == 1


def test_deadline_bounds_a_blocked_write(mysql_url: str, mysql_store: MysqlMemoryStore) -> None:
    mysql_store.write(one())
    blocker = _hold_writers(mysql_url, mysql_store.database)
    start = time.monotonic()
    with pytest.raises(MemoryError) as info:
        mysql_store.write(one("late"), MemoryCallOptions(deadline=time.time() + 0.4))
    blocker.close()
    assert info.value.code == "MEMORY_TIMEOUT" and time.monotonic() - start < 3
    assert count(mysql_store) == 1


# --- errors (MEM-ERR-4) -------------------------------------------------------------------


def test_connection_errors_are_safe(mysql_url: str, mysql_database: str) -> None:
    address = parse_url(mysql_url)
    for url in (
        f"mysql://{address.user}:s3cret-Wrong-pw@{address.host}:{address.port}/x",
        f"mysql://{address.user}:s3cret-Wrong-pw@{address.host}:1/x",
        f"mysql://nobody-s3cret:s3cret-Wrong-pw@{address.host}:{address.port}/x",
    ):
        store = MysqlMemoryStore(url, database=mysql_database, connect_timeout_s=2)
        result = create_memory(store).write({"memories": [{"content": "x"}]})
        assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR"
        message = result.error.message
        assert "cannot connect to the MySQL memory store" in message
        for secret in ("s3cret", "mysql://", address.host, str(address.port), "@", "nobody"):
            assert secret not in message, (secret, message)
        with pytest.raises(MemoryError) as info:
            store.migrate()
        assert "s3cret" not in str(info.value) and info.value.__cause__ is None


def test_sql_errors_are_safe(mysql_url: str, mysql_store: MysqlMemoryStore) -> None:
    mysql_store.write(one())
    sql(mysql_url, f"RENAME TABLE `{mysql_store.database}`.memories TO "
        f"`{mysql_store.database}`.gone")  # fmt: skip
    result = create_memory(mysql_store).query({"filter": {"a": "secret-value"}})
    assert result.error is not None and result.error.code == "MEMORY_BACKEND_ERROR"
    assert "migrate" in result.error.message
    for leak in ("SELECT", "secret-value", "memories", mysql_store.database, "1146"):
        assert leak not in result.error.message


# --- concurrency and SQL text -------------------------------------------------------------


def test_threads_write_in_creation_order(mysql_url: str, mysql_store: MysqlMemoryStore) -> None:
    # MEM-PY-6: createdAt never goes backwards along the sequence, under concurrent writers
    def work(n: int) -> None:
        for i in range(10):
            mysql_store.write(MemoryWriteInput(memories=[MemoryDraft(content=f"{n}-{i}")] * 5))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = sql(mysql_url, f"SELECT seq, created_at FROM `{mysql_store.database}`.memories "
               "ORDER BY seq")  # fmt: skip
    assert [r[0] for r in rows] == list(range(1, 201))
    stamps = [r[1] for r in rows]
    assert stamps == sorted(stamps)


def test_sql_text_never_contains_request_values() -> None:
    flt = {"a'b": {"$gt": "x'; DROP TABLE memories; --"}, "n": {"$in": [1, "two", None]},
           'q"\\': True}  # fmt: skip
    where = compile_filter(parse_filter(flt))
    columns = sort_columns(parse_order_by([{"field": "a'b.c"}]))
    for compiled in (where, columns):
        assert "DROP" not in compiled.text and "a'b" not in compiled.text
        assert "two" not in compiled.text and 'q"' not in compiled.text
        assert compiled.text.count("%s") == len(compiled.params)


def test_connections_have_the_pinned_session(mysql_store: MysqlMemoryStore) -> None:
    mysql_store.write(one())
    with transaction(mysql_store._get_pool(), mysql_store._address, None, write=False) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT @@SESSION.sql_mode, @@character_set_connection")
            mode, charset = cur.fetchone()
    assert "NO_BACKSLASH_ESCAPES" not in mode and charset == "utf8mb4"


def test_a_forked_child_builds_its_own_pool_and_leaves_the_parents(
    mysql_store: MysqlMemoryStore,
) -> None:
    import os

    mysql_store.write(one("before the fork"))
    pid = os.fork()
    if pid == 0:  # the child: its own pool; the parent's connections stay untouched
        code = 0
        try:
            mysql_store.write(one("from the child"))
            code = 0 if count(mysql_store) == 2 else 3
        except BaseException:
            code = 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert count(mysql_store) == 2  # the parent's pooled connection still works
