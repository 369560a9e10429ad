"""Tenant scope, end to end (issue 7 item 6; SPEC.md MEM-TASK-2; :mod:`ditto_worker.memory.scope`).

1. A property-based test (hypothesis) over the in-memory, SQLite and PostgreSQL stores:
   two to four tenants (tenant, user and space) whose ids are drawn from
   ``_ % - : ' "`` and letters, random
   sequences of all six operations, each operation aimed at ids and keys of *every*
   tenant. A model of each tenant's records predicts every answer; any cross-tenant
   read, update or delete fails the test.
2. The fleet: scope travels from the service's client in the ``ditto_scope`` header to a
   real worker on real Redis, through MEMORY.SEARCH's delegation to RETRIEVAL.SEARCH; a
   worker bound to one scope refuses others; ``require_scope`` refuses unscoped calls;
   the request body cannot carry a scope; a QUERY cursor issued in one scope is
   ``INVALID_CURSOR`` in another (MEM-QUERY-5); the space (``memory`` /
   ``task:<taskId>``, issue 25) travels with it, and a worker bound to a user serves that
   user's spaces.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import Scope, create_memory, create_memory_worker
from ditto_worker.config import FleetSettings
from ditto_worker.contracts import NODE_QUEUES
from ditto_worker.fleet.client import DittoClient
from ditto_worker.retrieval.delegation import RemoteRetrievalSearchProvider, create_retrieval_worker
from ditto_worker.testing import InMemoryMemoryStore
from tests.conftest import mysql_url, postgres_url

pytestmark = pytest.mark.integration

WORDS = ("apple", "river", "stone", "cloud")
KEYS = ("k1", "k2", "k3")
PART = st.text(alphabet="ab_%-:'\"", min_size=1, max_size=3)


Records = dict[str, tuple[str | None, str, int]]


@dataclass
class Model:
    """Each namespace's records: id -> (key, word, tag)."""

    records: dict[str, Records] = field(default_factory=dict)
    attempts: int = 0  # operations aimed at another tenant's records

    def of(self, scope: Scope) -> Records:
        return self.records.setdefault(scope.namespace, {})

    def all_ids(self) -> list[str]:
        return sorted(i for recs in self.records.values() for i in recs)


def _write(memory: Any, who: Scope, mine: Records, step: tuple[Any, ...], ids: list[str]) -> None:
    key, word, tag = step[2], step[3], step[4]
    draft = {"key": key, "content": word, "metadata": {"t": tag}}
    result = memory.write({"memories": [draft]}, scope=who)
    if key is not None and any(k == key for k, _, _ in mine.values()):
        assert result.error is not None and result.error.code == "CONFLICT", result
        return
    assert result.status == "success", result
    mine[result.output[0].id] = (key, word, tag)


def _get(memory: Any, who: Scope, mine: Records, step: tuple[Any, ...], ids: list[str]) -> None:
    wanted_ids, keys = [*step[2](ids), "missing"], list(step[3])
    got = memory.get({"ids": wanted_ids, "keys": keys}, scope=who)
    want = {i for i, (k, _, _) in mine.items() if i in wanted_ids or k in keys}
    assert {item.id for item in got.output} == want, (who, wanted_ids, keys)


def _query(memory: Any, who: Scope, mine: Records, step: tuple[Any, ...], ids: list[str]) -> None:
    tag = step[2]
    request: dict[str, Any] = {"limit": 1000}
    if tag is not None:
        request["filter"] = {"t": tag}
    got = memory.query(request, scope=who)
    want = {i for i, (_, _, t) in mine.items() if tag is None or t == tag}
    assert {item.id for item in got.output.items} == want, who


def _search(memory: Any, who: Scope, mine: Records, step: tuple[Any, ...], ids: list[str]) -> None:
    got = memory.search({"query": step[2], "limit": 100}, scope=who)
    if who.task_id is not None:  # MEM-SEARCH-7: a task space is never searched
        assert got.error is not None and got.error.code == "INVALID_INPUT", got
        return
    want = {i for i, (_, w, _) in mine.items() if w == step[2]}
    assert {hit.memory.id for hit in got.output} == want, (who, step[2])


def _update(memory: Any, who: Scope, mine: Records, step: tuple[Any, ...], ids: list[str]) -> None:
    targets = list(dict.fromkeys(step[2](ids)))
    if not targets:
        return
    entries = [{"id": i, "content": step[3]} for i in targets]
    result = memory.update({"memories": entries}, scope=who)
    if all(i in mine for i in targets):
        assert result.status == "success", result
        for i in targets:
            mine[i] = (mine[i][0], step[3], mine[i][2])
    else:
        assert result.error is not None and result.error.code == "NOT_FOUND", result


def _delete(memory: Any, who: Scope, mine: Records, step: tuple[Any, ...], ids: list[str]) -> None:
    targets = step[2](ids)
    result = memory.delete({"ids": targets}, scope=who)
    assert result.status == "success", result
    assert result.output.deleted == [i for i in dict.fromkeys(targets) if i in mine]
    for i in result.output.deleted:
        del mine[i]


OPS = {"write": _write, "get": _get, "query": _query, "search": _search, "update": _update,
       "delete": _delete}  # fmt: skip


def run_sequence(memory: Any, scopes: list[Scope], steps: list[tuple[Any, ...]]) -> Model:
    """Apply ``steps`` through the SDK, checking each answer against the model."""
    model = Model()
    for step in steps:
        op, who = step[0], scopes[step[1] % len(scopes)]
        mine = model.of(who)
        ids = model.all_ids()
        model.attempts += op in ("get", "update", "delete") and any(i not in mine for i in ids)
        OPS[op](memory, who, mine, step, ids)
    for scope in scopes:  # finally every tenant sees exactly its own records
        listed = memory.query({"limit": 1000}, scope=scope).output.items
        assert {item.id for item in listed} == set(model.of(scope)), scope
    return model


def picker() -> st.SearchStrategy[Callable[[list[str]], list[str]]]:
    """A function choosing some of the ids that exist at that moment (any tenant's)."""
    return st.lists(st.integers(0, 10_000), max_size=3).map(
        lambda picks: lambda ids: [ids[p % len(ids)] for p in picks] if ids else []
    )


STEP = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 3), st.sampled_from((None, *KEYS)),
              st.sampled_from(WORDS), st.integers(0, 2)),
    st.tuples(st.just("get"), st.integers(0, 3), picker(),
              st.lists(st.sampled_from(KEYS), max_size=2)),
    st.tuples(st.just("query"), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 2))),
    st.tuples(st.just("search"), st.integers(0, 3), st.sampled_from(WORDS)),
    st.tuples(st.just("update"), st.integers(0, 3), picker(), st.sampled_from(WORDS)),
    st.tuples(st.just("delete"), st.integers(0, 3), picker()),
)  # fmt: skip
SPACE = st.one_of(st.just("memory"), PART.map(lambda part: f"task:{part}"))
SCOPES = st.lists(st.builds(Scope, PART, PART, SPACE), min_size=2, max_size=4, unique=True)


@pytest.fixture(params=["memory", "sqlite", "postgres", "mysql"])
def fresh_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A factory of empty SDKs over one backend (one per hypothesis example)."""
    if request.param == "memory":
        yield lambda: create_memory(InMemoryMemoryStore())
        return
    if request.param == "sqlite":
        yield lambda: create_memory(SqliteMemoryStore(tmp_path / f"{uuid.uuid4().hex}.sqlite"))
        return
    if request.param == "mysql":
        yield from _fresh_mysql()
        return
    from ditto_plugin_postgres import PostgresMemoryStore

    url = postgres_url()
    schema = f"t_{uuid.uuid4().hex}"
    store = PostgresMemoryStore(url, schema=schema, pool_max_size=2)

    def empty() -> Any:
        store.migrate()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'TRUNCATE "{schema}".memories, "{schema}".executions')
        return create_memory(store)

    yield empty
    store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _fresh_mysql() -> Iterator[Callable[[], Any]]:
    """Empty SDKs over one MySQL database (emptied between examples; ``scopes`` rows stay:
    the store caches their ids, as it may)."""
    import pymysql

    from ditto_plugin_mysql import MysqlMemoryStore
    from ditto_plugin_mysql.db import parse_url

    url = mysql_url()
    address = parse_url(url)
    database = f"t_{uuid.uuid4().hex}"
    store = MysqlMemoryStore(url, database=database, pool_max_size=2)

    def run(*statements: str) -> None:
        conn = pymysql.connect(host=address.host, port=address.port, user=address.user,
                               password=address.password, autocommit=True)  # fmt: skip
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.close()

    def empty() -> Any:
        store.migrate()
        tables = ("memories", "memory_terms", "memory_vectors", "executions")
        run(*(f"TRUNCATE `{database}`.{t}" for t in tables),
            f"UPDATE `{database}`.scopes SET records = 0, terms = 0")  # fmt: skip
        return create_memory(store)

    yield empty
    store.close()
    run(f"DROP DATABASE IF EXISTS `{database}`")


def test_no_cross_tenant_reads_updates_or_deletes(fresh_memory: Callable[[], Any]) -> None:
    attempts: list[int] = []

    examples = int(os.environ.get("DITTO_SCOPE_EXAMPLES", "100"))  # longer runs: raise it

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scopes=SCOPES, steps=st.lists(STEP, min_size=5, max_size=30))
    def check(scopes: list[Scope], steps: list[tuple[Any, ...]]) -> None:
        attempts.append(run_sequence(fresh_memory(), scopes, steps).attempts)

    check()
    print(f"\nscope property: {len(attempts)} sequences, {sum(attempts)} cross-tenant attempts")
    assert sum(attempts) > 0  # the generator did aim operations at other tenants' records


# --- the fleet ------------------------------------------------------------------------------


ALL_QUEUES = [*NODE_QUEUES.values(), "retrieval.search"]


def _cursors_stay_in_their_scope(alice: DittoClient, bob: DittoClient, plain: DittoClient) -> None:
    """MEM-QUERY-5 on the fleet (issue 23 item 4): alice's cursor is INVALID_CURSOR for
    bob and for unscoped calls, and still pages for alice."""
    drafts = {"memories": [{"key": f"more{i}", "content": i} for i in range(3)]}
    for client in (alice, bob, plain):
        assert client.invoke("MEMORY.WRITE", drafts, timeout=10).status == "success"
    first = alice.invoke("MEMORY.QUERY", {"limit": 2}, timeout=10).output
    assert first.next_cursor
    for other in (bob, plain):
        moved = other.invoke("MEMORY.QUERY", {"limit": 2, "cursor": first.next_cursor}, timeout=10)
        assert moved.error is not None and moved.error.code == "INVALID_CURSOR", moved.status
    rest = alice.invoke("MEMORY.QUERY", {"cursor": first.next_cursor}, timeout=10).output
    assert [i.key for i in first.items + rest.items] == ["tea", "more0", "more1", "more2"]


def test_scope_travels_from_the_client_to_every_node_and_the_retrieval_queue(
    start_fleet_worker: Any, redis_url: str, tmp_path: Path
) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    remote = RemoteRetrievalSearchProvider(target={"name": "memories"})
    fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url)
    alice = DittoClient.from_fleet(fleet, scope={"tenant": "acme", "user": "alice"})
    bob = DittoClient.from_fleet(fleet, scope=Scope("acme", "bob"))
    plain = DittoClient.from_fleet(fleet)
    try:
        with start_fleet_worker(
            lambda: create_memory_worker(store, search=remote),
            queues=ALL_QUEUES,
            concurrency=4,
            retrieval_factory=lambda: create_retrieval_worker({"memories": store}),
        ):
            note = {"memories": [{"key": "tea", "content": "prefers green tea"}]}
            mine = alice.invoke("MEMORY.WRITE", note, timeout=10).output[0]
            assert bob.invoke("MEMORY.WRITE", note, timeout=10).status == "success"
            for other in (bob, plain):
                assert [i.id for i in other.invoke("MEMORY.GET", {"ids": [mine.id]}).output] == []
                hits = other.invoke("MEMORY.SEARCH", {"query": "green tea"}, timeout=10).output
                assert mine.id not in [h.memory.id for h in hits]
                update = other.invoke(
                    "MEMORY.UPDATE", {"memories": [{"id": mine.id, "content": "x"}]}, timeout=10
                )
                assert update.error is not None and update.error.code == "NOT_FOUND"
                deleted = other.invoke("MEMORY.DELETE", {"ids": [mine.id]}, timeout=10)
                assert deleted.output.deleted == []
            assert plain.invoke("MEMORY.QUERY", {}, timeout=10).output.items == []
            # delegated search (MEMORY.SEARCH -> RETRIEVAL.SEARCH) and a direct one
            hits = alice.invoke("MEMORY.SEARCH", {"query": "green tea"}, timeout=10).output
            assert [h.memory.id for h in hits] == [mine.id]
            retrieval = {"target": {"name": "memories"}, "query": "green tea"}
            direct = alice.invoke("RETRIEVAL.SEARCH", retrieval, timeout=10)
            assert [h.memory.id for h in direct.output] == [mine.id]
            # a per-call scope overrides the client's; the body cannot carry one
            as_bob = alice.invoke("MEMORY.GET", {"keys": ["tea"]}, scope=Scope("acme", "bob"))
            assert [i.id for i in as_bob.output] != [mine.id] and len(as_bob.output) == 1
            smuggled = plain.invoke("MEMORY.QUERY", {"scope": {"tenant": "acme", "user": "alice"}})
            assert smuggled.error is not None and smuggled.error.code == "INVALID_INPUT"
            bad = plain.invoke("MEMORY.QUERY", {}, scope={"tenant": "", "user": "x"})
            assert bad.error is not None and bad.error.code == "PERMISSION_DENIED"
            _cursors_stay_in_their_scope(alice, bob, plain)
    finally:
        for c in (alice, bob, plain):
            c.close()


def test_bound_and_required_scopes(start_fleet_worker: Any, redis_url: str, tmp_path: Path) -> None:
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url)
    tenant = Scope("acme", "alice")
    plain = DittoClient.from_fleet(fleet)
    try:
        with start_fleet_worker(lambda: create_memory_worker(store, scope=tenant)):
            write = plain.invoke("MEMORY.WRITE", {"memories": [{"content": "x"}]}, timeout=10)
            assert write.status == "success"  # runs in the worker's bound scope
            assert create_memory(store).query({}, scope=tenant).output.items == write.output
            assert create_memory(store).query({}).output.items == []
            other = plain.invoke("MEMORY.QUERY", {}, scope=Scope("acme", "bob"), timeout=10)
            assert other.error is not None and other.error.code == "PERMISSION_DENIED"
            same = plain.invoke("MEMORY.QUERY", {}, scope=tenant, timeout=10)
            assert same.output.items == write.output
        with start_fleet_worker(lambda: create_memory_worker(store, require_scope=True)):
            refused = plain.invoke("MEMORY.GET", {"ids": [write.output[0].id]}, timeout=10)
            assert refused.error is not None and refused.error.code == "PERMISSION_DENIED"
            allowed = plain.invoke("MEMORY.GET", {"ids": [write.output[0].id]}, scope=tenant)
            assert allowed.output == write.output
    finally:
        plain.close()


def test_the_space_travels_with_the_scope(
    start_fleet_worker: Any, redis_url: str, tmp_path: Path
) -> None:
    # issue 25: memory and task:<taskId> spaces of one user, over the header, through the
    # MEMORY.SEARCH -> RETRIEVAL.SEARCH delegation, on a worker bound to that user
    store = SqliteMemoryStore(tmp_path / "m.sqlite")
    remote = RemoteRetrievalSearchProvider(target={"name": "memories"})
    fleet = FleetSettings(broker_url=redis_url, result_backend=redis_url)
    alice = Scope("acme", "alice")
    client = DittoClient.from_fleet(fleet, scope=alice)
    spaces = (alice, Scope.for_task("acme", "alice", "t:1"), alice.in_space("task:t%3A1"))
    try:
        with start_fleet_worker(
            lambda: create_memory_worker(store, search=remote, scope=alice),
            queues=ALL_QUEUES,
            concurrency=4,
            retrieval_factory=lambda: create_retrieval_worker({"memories": store}),
        ):
            mine = {}
            for space in spaces:
                note = {"memories": [{"key": "state", "content": f"green tea {space.space}"}]}
                mine[space] = client.invoke("MEMORY.WRITE", note, scope=space, timeout=10)
                assert mine[space].status == "success", mine[space]
            for space in spaces:
                own = mine[space].output[0].id
                got = client.invoke("MEMORY.GET", {"keys": ["state"]}, scope=space, timeout=10)
                assert [i.id for i in got.output] == [own]
                found = client.invoke("MEMORY.SEARCH", {"query": "green tea"}, scope=space,
                                      timeout=10)  # fmt: skip
                direct = client.invoke("RETRIEVAL.SEARCH", {"query": "green tea", "target": {
                    "name": "memories"}}, scope=space, timeout=10)  # fmt: skip
                if space.task_id is None:
                    assert [h.memory.id for h in found.output] == [own]
                    assert [h.memory.id for h in direct.output] == [own]
                else:  # MEM-SEARCH-7, on the fleet: both refused before any store
                    for refused in (found, direct):
                        assert refused.error is not None, refused
                        assert refused.error.code == "INVALID_INPUT"
                for other in spaces:
                    if other != space:
                        deleted = client.invoke("MEMORY.DELETE", {"ids": [own]}, scope=other)
                        assert deleted.output.deleted == []
            # the worker's bound user, in any space; another user is refused in any space
            bob = client.invoke("MEMORY.QUERY", {}, scope=Scope.for_task("acme", "bob", "t:1"))
            assert bob.error is not None and bob.error.code == "PERMISSION_DENIED"
            listed = create_memory(store).query({}, scope=spaces[1]).output.items
            assert [i.id for i in listed] == [mine[spaces[1]].output[0].id]
    finally:
        client.close()
