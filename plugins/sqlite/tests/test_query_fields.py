"""queryFields (issue 28 item 3): declared metadata fields get expression indexes that
QUERY's filters and sorts use; results and keyset pages are those of an undeclared store
(MEM-PY-5, MEM-PY-6, MEM-QUERY-5); declaring or removing a field on an existing store
indexes or unindexes it at open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore, create_store, driver
from ditto_plugin_sqlite.query_index import PREFIX, index_statements
from ditto_worker import Scope, create_memory
from ditto_worker.errors import ConfigError
from ditto_worker.testing.embedder import HashingEmbedder
from ditto_worker.testing.query_fields import every_page, mixed_records

FIELDS = ["user", "kind", "n", "score", "profile.city", "o'k"]
ALICE, BOB = Scope("acme", "alice"), Scope("acme", "bob")
VALUES: list[Any] = [0, 1, 2, 2.5, -1, "a", "b", "B", "", True, False, None, [1], {"x": 1}]


QUERIES: list[dict[str, Any]] = [
    {"filter": {"user": 1}},
    {"filter": {"user": 1, "kind": 2}},
    {"filter": {"n": {"$gte": 1, "$lt": 3}}},
    {"filter": {"user": "a"}, "orderBy": [{"field": "score", "direction": "desc"}]},
    {"orderBy": [{"field": "score", "direction": "desc"}]},
    {"orderBy": [{"field": "score"}, {"field": "n", "direction": "desc"}]},
    {"filter": {"kind": {"$in": [1, "b", True]}}, "orderBy": [{"field": "profile.city"}]},
    {"filter": {"o'k": {"$ne": 2}, "user": {"$exists": True}}},
    {"filter": {"$or": [{"user": None}, {"kind": False}]}, "orderBy": [{"field": "o'k"}]},
    {"filter": {"profile.city": "Oslo", "tags": {"$exists": False}}},
]


def _records(count: int, seed: int, label: str = "record") -> list[dict[str, Any]]:
    """Records whose declared fields hold every JSON type, or are missing."""
    return mixed_records(
        count, seed, fields=("user", "kind", "n", "score", "o'k"), values=VALUES, label=label
    )


def _pages(memory: Any, query: dict[str, Any], scope: Scope | None, limit: int = 7) -> list[str]:
    """Every record of ``query`` walked page by page through its cursors."""
    return every_page(memory, query, scope, limit)


def _load(path: Path, fields: list[str], embedder: Any = None) -> SqliteMemoryStore:
    store = SqliteMemoryStore(path, query_fields=fields, embedder=embedder)
    memory = create_memory(store)
    for scope, seed in ((None, 1), (ALICE, 2), (BOB, 3)):
        label = "unscoped" if scope is None else scope.user
        records = _records(120, seed, label)
        assert memory.write({"memories": records}, scope=scope).status == "success"
    return store


def test_declared_fields_change_plans_not_results(tmp_path: Path) -> None:
    plain_path, declared_path = tmp_path / "plain.sqlite", tmp_path / "declared.sqlite"
    with _load(plain_path, []) as plain, _load(declared_path, FIELDS) as declared:
        for query in QUERIES:
            for scope in (None, ALICE, BOB):
                expected = _pages(create_memory(plain), query, scope)
                assert _pages(create_memory(declared), query, scope) == expected, query
                assert expected == _pages(create_memory(plain), query, scope, limit=1000)


def _plan(store: SqliteMemoryStore, query: dict[str, Any], scope: Scope | None) -> str:
    """The plan of the SELECT a QUERY sends (recorded on the store's connection)."""
    conn = store._conn()
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        assert create_memory(store).query(query, scope=scope).status == "success"
    finally:
        conn.set_trace_callback(None)
    sql = next(s for s in seen if s.lstrip().startswith("SELECT"))
    return " | ".join(str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql))


@pytest.mark.parametrize("scope", [None, ALICE])
@pytest.mark.parametrize("vectors", [False, True], ids=["keyword", "vectors"])
def test_queries_on_declared_fields_use_their_indexes(
    tmp_path: Path, scope: Scope | None, vectors: bool
) -> None:
    """Without and with an embedder (a store with one loads sqlite-vec and maps the file)."""
    embedder = HashingEmbedder() if vectors else None
    with _load(tmp_path / "p.sqlite", ["user", "score"], embedder) as store:
        eq = _plan(store, {"filter": {"user": 1}}, scope)
        assert PREFIX in eq and eq.endswith("_f (namespace=? AND <expr>=?)"), eq
        ordered = _plan(store, {"orderBy": [{"field": "score", "direction": "desc"}]}, scope)
        assert PREFIX in ordered and "_s (namespace=?)" in ordered, ordered
        assert "TEMP B-TREE FOR ORDER BY" not in ordered, ordered
        undeclared = _plan(store, {"filter": {"kind": 1}}, scope)
        assert PREFIX not in undeclared, undeclared


def _indexes(path: Path) -> set[str]:
    with driver.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        return {row[0] for row in rows if row[0].startswith(PREFIX)}


def test_declaring_and_removing_fields_on_an_existing_store(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    _load(path, []).close()
    assert _indexes(path) == set()
    with SqliteMemoryStore(path, query_fields=["user", "score"]) as store:  # created at open
        assert _plan(store, {"filter": {"user": 1}}, None).count(PREFIX) == 1
    assert _indexes(path) == set(index_statements(["user", "score"])) and len(_indexes(path)) == 4
    SqliteMemoryStore(path, query_fields=["user", "score"]).close()  # idempotent
    assert len(_indexes(path)) == 4
    SqliteMemoryStore(path).close()  # no queryFields: existing indexes are left alone
    assert len(_indexes(path)) == 4
    with SqliteMemoryStore(path, query_fields=["score"]) as store:  # user removed
        assert _indexes(path) == set(index_statements(["score"]))
        plain = create_memory(store)
        assert len(_pages(plain, {"filter": {"user": 1}}, None)) > 0
    SqliteMemoryStore(path, query_fields=[]).close()  # declared empty: all dropped
    assert _indexes(path) == set()


def test_statistics_follow_the_table(tmp_path: Path) -> None:
    """ANALYZE runs when indexes are built and after the table doubled."""
    path = tmp_path / "s.sqlite"
    store = SqliteMemoryStore(path, query_fields=["user"])
    memory = create_memory(store)
    rows = "SELECT stat FROM sqlite_stat1 WHERE tbl = 'memories' LIMIT 1"
    counts = []
    for _ in range(3):
        assert memory.write({"memories": _records(1200, 4)}).status == "success"
        counts.append(int(store._conn().execute(rows).fetchone()[0].split()[0]))
    # 1,200 (exact), unchanged at 2,400 (< 2 x 1,200 + 1,000), then 3,600 (sampled: about)
    assert counts[:2] == [1200, 1200] and abs(counts[2] - 3600) < 100, counts
    store.close()


def test_cursors_stay_bound_to_their_namespace(tmp_path: Path) -> None:
    """MEM-QUERY-5 with the declared-field plans: a cursor of one scope is INVALID_CURSOR
    in another, and a scope's pages hold only its records."""
    with _load(tmp_path / "c.sqlite", FIELDS) as store:
        memory = create_memory(store)
        query = {"orderBy": [{"field": "score", "direction": "desc"}], "limit": 5}
        first = memory.query(query, scope=ALICE)
        assert first.output.next_cursor
        other = memory.query({**query, "cursor": first.output.next_cursor}, scope=BOB)
        assert other.error is not None and other.error.code == "INVALID_CURSOR"
        assert set(_pages(memory, query, ALICE)) == {f"alice {i}" for i in range(120)}
        assert set(_pages(memory, query, None)) == {f"unscoped {i}" for i in range(120)}


def test_query_fields_setting(tmp_path: Path) -> None:
    store = create_store({"path": str(tmp_path / "x.sqlite"), "queryFields": ["user"]}, env={})
    assert store._query.declared == frozenset({"user"})
    store.close()
    SqliteMemoryStore(tmp_path / "x.sqlite", query_fields=["user", "score"]).close()
    create_store({"path": str(tmp_path / "x.sqlite")}, env={}).close()  # key left out
    assert len(_indexes(tmp_path / "x.sqlite")) == 4  # left alone
    create_store({"path": str(tmp_path / "x.sqlite"), "queryFields": []}, env={}).close()
    assert _indexes(tmp_path / "x.sqlite") == set()  # the whole declaration: none
    for bad in (["id"], ["a", "a"], "user", [3], ["a..b"]):
        with pytest.raises(ConfigError, match="queryFields"):
            create_store({"path": str(tmp_path / "y.sqlite"), "queryFields": bad}, env={})


@pytest.mark.parametrize("scope", [None, ALICE])
@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_order_by_key_is_read_from_the_key_index(
    tmp_path: Path, scope: Scope | None, direction: str
) -> None:
    """orderBy key (issue 33: LangGraph's namespace markers) is served by the
    ``(namespace, key)`` index and stops at its LIMIT: no sort of every matching row."""
    with _load(tmp_path / "k.sqlite", []) as store:
        order = [{"field": "key", "direction": direction}]
        for flt in (None, {"key": {"$gte": "a", "$lt": "z"}}):
            query = {"orderBy": order, "limit": 3, **({"filter": flt} if flt else {})}
            plan = _plan(store, query, scope)
            assert "memories_namespace_key" in plan, plan
            assert "TEMP B-TREE FOR ORDER BY" not in plan, plan
