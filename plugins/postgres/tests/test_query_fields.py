"""queryFields on PostgreSQL (issue 28 item 3): declared fields get B-tree expression
indexes that QUERY's sorts, ranges and equalities can use; results and pages are those of an
undeclared store (MEM-PY-5/6); indexes follow the declared list at open."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from ditto_plugin_postgres import PostgresMemoryStore, create_store
from ditto_plugin_postgres.query_index import PREFIX
from ditto_worker import Scope, create_memory
from ditto_worker.errors import ConfigError
from ditto_worker.testing.query_fields import every_page, mixed_records

FIELDS = ["user", "score", "profile.city", "o'k", "100%", "arr.0"]
ALICE = Scope("acme", "alice")
VALUES: list[Any] = [0, 1, 2.5, -1, "a", "B", "", True, False, None, [1], {"x": 1}]
QUERIES: list[dict[str, Any]] = [
    {"filter": {"user": 1}},
    {"filter": {"score": {"$gte": 1, "$lt": 3}}},
    {"filter": {"user": {"$gt": "a"}}, "orderBy": [{"field": "score", "direction": "desc"}]},
    {"orderBy": [{"field": "score"}, {"field": "user", "direction": "desc"}]},
    {"filter": {"o'k": {"$lte": 2}}, "orderBy": [{"field": "profile.city"}]},
    {"filter": {"100%": {"$exists": True}, "profile.city": {"$gt": "Oslo"}}},
    {"filter": {"$or": [{"user": None}, {"score": False}]}, "orderBy": [{"field": "o'k"}]},
    {"filter": {"user": "a", "score": {"$in": [True, 1, "B", None]}}},
    {"filter": {"user": {"$nin": [1, 2.0, None]}}, "orderBy": [{"field": "score"}]},
    {"filter": {"arr.0": {"$gte": 1}}, "orderBy": [{"field": "arr.0", "direction": "desc"}]},
    {"filter": {"arr.0": None}},
]


def _records(count: int, seed: int) -> list[dict[str, Any]]:
    return mixed_records(
        count, seed, fields=("user", "score", "o'k", "100%"), values=VALUES, arrays=True
    )


def _pages(memory: Any, query: dict[str, Any], scope: Scope | None) -> list[str]:
    return every_page(memory, query, scope)


def _indexes(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", [schema])
        return {row[0] for row in rows if row[0].startswith(PREFIX)}


def test_declared_fields_change_plans_not_results(postgres_url: str, pg_schema: str) -> None:
    plain = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=2)
    memory = create_memory(plain)
    for scope, seed in ((None, 1), (ALICE, 2)):
        assert memory.write({"memories": _records(150, seed)}, scope=scope).status == "success"
    expected = {
        (i, scope is None): _pages(memory, q, scope)
        for i, q in enumerate(QUERIES)
        for scope in (None, ALICE)
    }
    plain.close()
    declared = PostgresMemoryStore(
        postgres_url, schema=pg_schema, pool_max_size=2, query_fields=FIELDS
    )
    try:
        memory = create_memory(declared)
        for i, query in enumerate(QUERIES):
            for scope in (None, ALICE):
                assert _pages(memory, query, scope) == expected[i, scope is None], query
        assert len(_indexes(postgres_url, pg_schema)) == len(FIELDS)
    finally:
        declared.close()


def _plan(store: PostgresMemoryStore, url: str, query: dict[str, Any]) -> str:
    """The plan of the QUERY statement with sequential scans discouraged and the
    ``(namespace, seq)`` index out of the way (a small table): the declared expressions
    match their index when it is then used."""
    seen: list[tuple[str, Any]] = []
    original = psycopg.Cursor.execute

    def execute(self: Any, sql: Any, params: Any = None, **kwargs: Any) -> Any:
        seen.append((sql, params))
        return original(self, sql, params, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        assert create_memory(store).query(query).status == "success"
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]
    sql, params = next((s, p) for s, p in seen if "ORDER BY" in str(s) and "LIMIT" in str(s))
    with psycopg.connect(url) as conn:  # one transaction, rolled back
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute(f"DROP INDEX {store.schema}.memories_namespace_seq")  # in seq order
        rows = conn.execute("EXPLAIN (COSTS OFF) " + sql, params).fetchall()
        conn.rollback()
    return "\n".join(str(row[0]) for row in rows)


@pytest.mark.parametrize(
    "query",
    [
        {"orderBy": [{"field": "score", "direction": "desc"}]},
        {"orderBy": [{"field": "o'k"}]},
        {"filter": {"score": {"$lt": 2}}},
        {"filter": {"100%": {"$gte": "a"}}},
        {"filter": {"user": 1}},
        {"filter": {"user": "a"}},
        {"filter": {"score": True}},
        {"filter": {"user": None}},
        {"filter": {"arr.0": 1}},
    ],
)
def test_sorts_ranges_and_equality_on_declared_fields_use_their_index(
    postgres_url: str, pg_schema: str, query: dict[str, Any]
) -> None:
    store = PostgresMemoryStore(
        postgres_url, schema=pg_schema, pool_max_size=2, query_fields=FIELDS
    )
    try:
        create_memory(store).write({"memories": _records(50, 3)})
        plan = _plan(store, postgres_url, query)
        assert PREFIX in plan, plan
        if "filter" in query:  # the condition is the index's, not a filter on its rows
            found = [line for line in plan.splitlines() if "Index Cond" in line]
            assert found and "jsonb_typeof" in found[0], plan
        else:  # the index gives the order: no sort of every row
            assert "Presorted Key" in plan or "  Sort Key" not in plan, plan
    finally:
        store.close()


@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_order_by_key_is_read_from_the_key_order_index(
    postgres_url: str, pg_schema: str, direction: str
) -> None:
    """orderBy key (issue 33: LangGraph's namespace markers) is served by migration 8's
    ``(namespace, key NULLS FIRST)`` index, a missing key first ascending."""
    store = PostgresMemoryStore(postgres_url, schema=pg_schema, pool_max_size=2)
    try:
        create_memory(store).write({"memories": _records(50, 3)})
        order = [{"field": "key", "direction": direction}]
        for flt in (None, {"key": {"$gte": "a", "$lt": "z"}}):
            query = {"orderBy": order, "limit": 3, **({"filter": flt} if flt else {})}
            plan = _plan(store, postgres_url, query)
            assert "memories_namespace_key_order" in plan, plan
            assert "Presorted Key" in plan or "  Sort Key" not in plan, plan
    finally:
        store.close()


def test_declaring_and_removing_fields(postgres_url: str, pg_schema: str) -> None:
    def opened(fields: list[str] | None) -> set[str]:
        store = PostgresMemoryStore(postgres_url, schema=pg_schema, query_fields=fields)
        assert create_memory(store).query({"filter": {"score": 1}}).status == "success"
        store.close()
        return _indexes(postgres_url, pg_schema)

    assert opened([]) == set()
    two = opened(["score", "user"])
    assert len(two) == 2 and opened(["score", "user"]) == two  # idempotent
    assert opened(None) == two  # no queryFields setting: left alone
    one = opened(["score"])
    assert len(one) == 1 and one < two
    assert opened([]) == set()  # declared empty: every query-field index dropped


def test_query_fields_setting(postgres_url: str) -> None:
    env = {"DITTO_WORKER_MEMORY_POSTGRES_URL": postgres_url}
    store = create_store({"queryFields": ["user"]}, env=env)
    assert store._query_fields == ("user",)
    with pytest.raises(ConfigError, match="queryFields"):
        create_store({"queryFields": ["key"]}, env=env)
