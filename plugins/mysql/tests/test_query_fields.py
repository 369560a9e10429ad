"""queryFields on MySQL / MariaDB (issue 28 item 3): declared fields get indexed generated
columns that QUERY's equalities and number ranges use; results and pages are those of an
undeclared store (MEM-PY-5/6); columns follow the declared list at open."""

from __future__ import annotations

import random
from typing import Any

import pymysql
import pytest

from ditto_plugin_mysql import MysqlMemoryStore, create_store
from ditto_plugin_mysql.query_index import MAX_FIELDS, PREFIX
from ditto_worker import Scope, create_memory
from ditto_worker.errors import ConfigError
from ditto_worker.testing.query_fields import every_page, mixed_records

from .conftest import admin

FIELDS = ["user", "score", "profile.city", "o'k", "100%", "arr.0"]
ALICE = Scope("acme", "alice")
VALUES: list[Any] = [0, 1, 2.5, -1, "a", "B", "", True, False, None, [1], {"x": 1},
                     -(2**63), 2**63 - 1, 2**63 - 2, 1e300, -1e300, "é" * 400]  # fmt: skip
QUERIES: list[dict[str, Any]] = [
    {"filter": {"user": 1}},
    {"filter": {"user": "a"}},
    {"filter": {"user": {"$in": [True, 2**63 - 1, "é" * 400, None]}}},
    {"filter": {"score": {"$gte": 1, "$lt": 3}}},
    {"filter": {"score": {"$gt": 2**63 - 2}}},
    {"filter": {"score": {"$lte": -1}}, "orderBy": [{"field": "user", "direction": "desc"}]},
    {"filter": {"user": 1e300}},
    {"filter": {"score": {"$gt": 1e299}}},
    {"filter": {"o'k": {"$ne": 2}, "profile.city": "Oslo"}},
    {"filter": {"$or": [{"user": None}, {"score": False}]}, "orderBy": [{"field": "o'k"}]},
    {"filter": {"arr.0": {"$gte": 1}}},
    {"filter": {"100%": {"$nin": [0, 1]}}},
]


def _records(count: int, seed: int) -> list[dict[str, Any]]:
    return mixed_records(
        count,
        seed,
        fields=("user", "score", "o'k", "100%"),
        values=VALUES,
        typed_share=0.4,
        arrays=True,
    )


def _pages(memory: Any, query: dict[str, Any], scope: Scope | None) -> list[str]:
    return every_page(memory, query, scope)


def _columns(url: str, database: str) -> set[str]:
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = 'memories'",
                [database],
            )
            return {str(row[0]) for row in cur.fetchall() if str(row[0]).startswith(PREFIX)}
    finally:
        conn.close()


def test_declared_fields_change_plans_not_results(mysql_url: str, mysql_database: str) -> None:
    plain = MysqlMemoryStore(mysql_url, database=mysql_database, pool_max_size=2)
    memory = create_memory(plain)
    for scope, seed in ((None, 1), (ALICE, 2)):
        assert memory.write({"memories": _records(150, seed)}, scope=scope).status == "success"
    expected = {
        (i, scope is None): _pages(memory, q, scope)
        for i, q in enumerate(QUERIES)
        for scope in (None, ALICE)
    }
    assert any(expected.values())
    plain.close()
    declared = MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, query_fields=FIELDS
    )
    try:
        memory = create_memory(declared)
        for i, query in enumerate(QUERIES):
            for scope in (None, ALICE):
                assert _pages(memory, query, scope) == expected[i, scope is None], query
        more = memory.write({"memories": _records(30, 3)})  # written with the columns
        assert more.status == "success", more.error
        assert len(_columns(mysql_url, mysql_database)) == 3 * len(FIELDS)
    finally:
        declared.close()


def _plan(store: MysqlMemoryStore, query: dict[str, Any]) -> list[dict[str, Any]]:
    """``EXPLAIN`` rows of the QUERY statement, as dictionaries."""
    seen: list[tuple[str, Any]] = []
    original = pymysql.cursors.Cursor.execute

    def execute(self: Any, sql: Any, params: Any = None) -> Any:
        seen.append((sql, params))
        return original(self, sql, params)

    pymysql.cursors.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        assert create_memory(store).query(query).status == "success"
    finally:
        pymysql.cursors.Cursor.execute = original  # type: ignore[method-assign]
    sql, params = next((s, p) for s, p in seen if str(s).startswith("SELECT * FROM"))
    conn = admin_db(store)
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("EXPLAIN " + sql, params)
            return list(cur.fetchall())
    finally:
        conn.close()


def admin_db(store: MysqlMemoryStore) -> pymysql.connections.Connection:
    """An autocommit connection to the store's database."""
    address = store._address
    return pymysql.connect(host=address.host, port=address.port, user=address.user,
                           password=address.password, database=store.database,
                           autocommit=True)  # fmt: skip


@pytest.mark.parametrize(
    "flt",
    [
        {"user": "u7"},
        {"user": 7},
        {"user": True},
        {"user": None},
        {"score": {"$gte": 990}},
        {"score": {"$lt": 3}, "user": "u1"},
    ],  # fmt: skip
)
def test_equality_uses_the_index_and_ranges_may(
    mysql_url: str, mysql_database: str, flt: dict[str, Any]
) -> None:
    store = MysqlMemoryStore(
        mysql_url, database=mysql_database, pool_max_size=2, query_fields=["user", "score"]
    )
    try:
        rng = random.Random(5)
        users: list[Any] = [f"u{i}" for i in range(50)] + list(range(50)) + [True, None]
        drafts = [
            {"content": i, "metadata": {"user": rng.choice(users), "score": rng.randrange(1000)}}
            for i in range(2000)
        ]
        assert create_memory(store).write({"memories": drafts}).status == "success"
        conn = admin_db(store)
        with conn.cursor() as cur:
            cur.execute("ANALYZE TABLE memories")
        conn.close()
        rows = _plan(store, {"filter": flt, "limit": 10})
        if any(isinstance(v, dict) for v in flt.values()):  # a range: the index may serve
            # it; with ORDER BY seq LIMIT MariaDB prefers walking (scope, seq) (docs)
            possible = " ".join(str(row.get("possible_keys") or "") for row in rows)
            assert f"{PREFIX}score" in possible, rows
            return
        keys = [str(row.get("key") or "") for row in rows]
        assert any(key.startswith(PREFIX) for key in keys), [
            (row["type"], row["key"], row["rows"], row["Extra"]) for row in rows
        ]
    finally:
        store.close()


def test_declaring_and_removing_fields(mysql_url: str, mysql_database: str) -> None:
    def opened(fields: list[str] | None) -> set[str]:
        store = MysqlMemoryStore(mysql_url, database=mysql_database, query_fields=fields)
        assert create_memory(store).query({"filter": {"score": 1}}).status == "success"
        store.close()
        return _columns(mysql_url, mysql_database)

    assert opened([]) == set()
    two = opened(["score", "user"])
    assert len(two) == 6 and opened(["score", "user"]) == two  # idempotent
    assert opened(None) == two  # no queryFields setting: left alone
    one = opened(["score"])
    assert len(one) == 3 and one < two
    assert opened(["score", "a.-b"]) == one  # "-b" is not indexable on MariaDB
    assert opened([]) == set()  # declared empty: every query-field column dropped


def test_query_fields_setting(mysql_url: str, mysql_database: str) -> None:
    env = {"DITTO_WORKER_MEMORY_MYSQL_URL": mysql_url}
    store = create_store({"queryFields": ["user"], "database": mysql_database}, env=env)
    assert store._query_fields == ("user",)
    store.close()
    with pytest.raises(ConfigError, match="queryFields"):
        create_store({"queryFields": ["key"]}, env=env)
    with pytest.raises(ConfigError, match="queryFields"):
        create_store({"queryFields": [f"f{i}" for i in range(MAX_FIELDS + 1)]}, env=env)
