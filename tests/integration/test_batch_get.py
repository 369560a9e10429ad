"""A coalesced batch of MEMORY.GET calls is one store read per trusted scope, and each call
answers exactly what it answers alone (issue 36 item 3), on the in-memory store, SQLite,
PostgreSQL and MySQL/MariaDB; a batch of vector SEARCHes embeds its queries in one call.

The same calls run twice over one store: one by one (``Memory.execute``), then as a batch
(``prefetch_get`` first, as the fleet's batch task does, then each call's own
``execute``). Their NodeResults are compared whole; the store's ``get`` is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.contracts import to_wire
from ditto_worker.memory.core import Memory
from ditto_worker.runtime.node_spec import BatchCall
from ditto_worker.scope import Scope
from ditto_worker.testing.embedder import HashingEmbedder
from ditto_worker.testing.memory_store import InMemoryMemoryStore
from tests.integration.test_operation_ids_fleet import _mysql_stores, _postgres_stores

pytestmark = pytest.mark.integration

A = Scope(tenant="t1", user="u1")
B = Scope(tenant="t1", user="u2")
A_TASK = Scope(tenant="t1", user="u1", space="task:t-7")


@pytest.fixture(params=["memory", "sqlite", "postgres", "mysql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    if request.param == "memory":
        yield InMemoryMemoryStore
    elif request.param == "sqlite":
        yield lambda: SqliteMemoryStore(tmp_path / "m.sqlite")
    elif request.param == "mysql":
        yield from _mysql_stores()
    else:
        yield from _postgres_stores()


class Counted:
    """Counts a store's ``get`` calls (an instance attribute over its method)."""

    def __init__(self, store: Any) -> None:
        self.reads = 0
        read = store.get

        def get(input: Any, options: Any = None) -> Any:
            self.reads += 1
            return read(input, options)

        store.get = get


def _seed(memory: Memory) -> dict[tuple[Scope | None, str], str]:
    """Six records k0..k5 in each scope; ``(scope, key) -> id``."""
    ids: dict[tuple[Scope | None, str], str] = {}
    for scope in (None, A, B, A_TASK):
        drafts = [{"key": f"k{i}", "content": f"{scope}-{i}"} for i in range(6)]
        result = memory.execute("MEMORY.WRITE", {"memories": drafts}, scope=scope)
        assert result.status == "success", to_wire(result)
        ids |= {(scope, item.key): item.id for item in result.output}
    return ids


def _calls(ids: dict[tuple[Scope | None, str], str]) -> list[tuple[Any, Scope | None]]:
    return [
        ({"keys": ["k1"]}, A),
        ({"keys": ["k2", "k1", "k2"]}, A),  # repeats, out of order
        ({"ids": [ids[A, "k3"]], "keys": ["k3", "k0"]}, A),  # one record by id and by key
        ({"keys": ["missing"]}, A),
        ({"ids": [ids[B, "k1"]]}, A),  # another user's id: not found in A
        ({"ids": [ids[A, "k4"], "nope"]}, A),
        ({"keys": []}, A),  # nothing asked: answered without the store
        ({"keys": 5}, A),  # INVALID_INPUT
        ({}, A),  # INVALID_INPUT (MEM-GET-1)
        ({"keys": ["k1"]}, B),
        ({"keys": ["k4", "k5"]}, B),
        ({"keys": ["k1", "k2"]}, A_TASK),
        ({"keys": ["k2"]}, A_TASK),
        ({"keys": ["k5"]}, None),  # alone in its scope: its own read
    ]


def _comparable(result: Any) -> dict[str, Any]:
    wire = to_wire(result)
    wire.pop("executionId")
    return wire


def test_a_batch_of_gets_is_one_read_per_scope_and_answers_as_each_alone(
    make_store: Callable[[], Any],
) -> None:
    store = make_store()
    memory = Memory(store)
    ids = _seed(memory)
    calls = _calls(ids)
    counted = Counted(store)
    alone = [
        memory.execute("MEMORY.GET", input, execution_id=f"alone-{i}", scope=scope)
        for i, (input, scope) in enumerate(calls)
    ]
    reads_alone = counted.reads
    assert reads_alone == 11  # every call but the three answered without the store
    counted.reads = 0
    batch = [BatchCall(f"batch-{i}", input, scope, None) for i, (input, scope) in enumerate(calls)]
    release = memory.prefetch_get(batch)
    assert counted.reads == 3  # A, B and A's task space: one read each
    together = [
        memory.execute("MEMORY.GET", call.input, execution_id=call.execution_id, scope=call.scope)
        for call in batch
    ]
    release()
    assert counted.reads == 4  # ... and the call alone in its scope read on its own
    assert [_comparable(r) for r in together] == [_comparable(r) for r in alone]
    assert [r.status for r in together].count("success") == 12
    assert [m.content for m in together[1].output] == [f"{A}-2", f"{A}-1"]


def test_a_share_serves_only_the_call_it_was_read_for(make_store: Callable[[], Any]) -> None:
    """Another execution id, scope or input reads the store itself; a share not taken is
    dropped by the release."""
    store = make_store()
    memory = Memory(store)
    _seed(memory)
    counted = Counted(store)
    batch = [BatchCall("x", {"keys": ["k1"]}, A, None), BatchCall("y", {"keys": ["k2"]}, A, None)]
    release = memory.prefetch_get(batch)
    other_scope = memory.execute("MEMORY.GET", {"keys": ["k1"]}, execution_id="x", scope=B)
    other_input = memory.execute("MEMORY.GET", {"keys": ["k3"]}, execution_id="y", scope=A)
    assert counted.reads == 3
    assert [m.content for m in other_scope.output] == [f"{B}-1"]
    assert [m.content for m in other_input.output] == [f"{A}-3"]
    release()
    again = memory.execute("MEMORY.GET", {"keys": ["k1"]}, execution_id="x", scope=A)
    assert counted.reads == 4 and [m.content for m in again.output] == [f"{A}-1"]


def test_a_batch_of_vector_searches_embeds_its_queries_in_one_call(tmp_path: Path) -> None:
    embedder = HashingEmbedder()  # its calls: the batches of texts it embedded
    memory = Memory(SqliteMemoryStore(tmp_path / "m.sqlite", embedder=embedder))
    drafts = [{"key": f"k{i}", "content": f"note {i} about tea and cats {i}"} for i in range(8)]
    assert memory.execute("MEMORY.WRITE", {"memories": drafts}, scope=A).status == "success"
    queries = ["tea", "cats", "note 3", "tea"]
    calls = [{"query": q, "strategy": "vector", "limit": 3} for q in queries]
    calls += [{"query": "tea", "strategy": "keyword"}, {"query": 5, "strategy": "vector"}]
    embedder.calls.clear()
    alone = [
        memory.execute("MEMORY.SEARCH", c, execution_id=f"a{i}", scope=A)
        for i, c in enumerate(calls)
    ]
    assert embedder.calls == [[q] for q in queries], embedder.calls  # one model call per query
    embedder.calls.clear()
    release = memory.prefetch_search([BatchCall(f"b{i}", c, A, None) for i, c in enumerate(calls)])
    together = [
        memory.execute("MEMORY.SEARCH", c, execution_id=f"b{i}", scope=A)
        for i, c in enumerate(calls)
    ]
    assert embedder.calls == [["tea", "cats", "note 3"]]  # once for the batch, each text once
    release()
    assert [_comparable(r) for r in together] == [_comparable(r) for r in alone]
    assert [r.status for r in together] == ["success"] * 5 + ["failed"]
    memory.execute("MEMORY.SEARCH", calls[0], execution_id="later", scope=A)
    assert embedder.calls[1:] == [["tea"]]  # released: the next call embeds on its own
